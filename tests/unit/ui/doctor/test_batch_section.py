"""The OOM dialog's "Batch that would have fitted": n/a with the reason at once
when the report keeps no model to rebuild, else a child process's answer."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

from app.ui.doctor.batch_section import WORKING, BatchSection, answer_text
from app.ui.doctor.oom_dialog import OomDialog
from tests.unit.ui.doctor.samples import oom_report

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 64,
        "n_head": 2, "vocab_size": 256, "n_positions": 128}
MODEL = {"id": "m1", "name": "gpt2", "class": "transformers.GPT2LMHeadModel",
         "dtype": "float32", "training": True, "requires_grad": True, "config": GPT2,
         "input_shape": [64, 128]}
#: ``estimate --oom - --json`` through the function the command runs, in a child.
CHILD = (sys.executable, "-c", "import argparse, sys; from app.cli.estimate_oom import run_oom; "
         "sys.exit(run_oom(argparse.Namespace(oom='-', json=True)))")


def test_the_dialog_says_na_when_the_model_is_not_known(qtbot):
    dialog = OomDialog(oom_report())
    qtbot.addWidget(dialog)
    assert dialog.batch.thread is None  # nothing to estimate: no child started
    assert dialog.batch.text == "n/a — the OOM's model is not known (no agent, or no model " \
                                "in the process)"
    no_config = dataclasses.replace(oom_report(), model=dict(MODEL, config=None))
    section = BatchSection(no_config)
    qtbot.addWidget(section)
    assert section.text == "n/a — the model's config is not known"


def test_a_known_model_is_estimated_in_a_child_process_off_the_gui_thread(qtbot):
    report = dataclasses.replace(oom_report(), model=MODEL)
    section = _section(qtbot, report)
    assert section.text == WORKING
    with qtbot.waitSignal(section.finished, timeout=240_000) as got:
        pass
    text = got.args[0]
    assert section.text == text != WORKING
    if importlib.util.find_spec("app.core.estimate.fake_step") is not None:
        assert text.startswith(("Batch ", "Not even batch 1")), text
        assert "of the 14.8 GiB the process could have had" in text  # 24 − 6 − 1 − 2.2
    else:  # the estimate cannot run yet: the child's own words, after "n/a — "
        assert text.startswith("n/a — ") and len(text) > len("n/a — ")


def _section(qtbot, report) -> BatchSection:
    section = BatchSection(report, command=CHILD)
    qtbot.addWidget(section)
    assert section.thread is not None
    return section


def test_an_answer_reads_as_its_line():
    assert answer_text({"proposal": {"text": "Batch 6 would have fitted (it ran 8)"}}) == \
        "Batch 6 would have fitted (it ran 8)"
    assert answer_text({"proposal": None, "reason": "the model's config is not known"}) == \
        "n/a — the model's config is not known"
