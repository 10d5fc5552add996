"""``estimate --oom``: a report read from stdin or the store, its proposal or its n/a."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json

from app.cli.estimate_oom import add_oom_option, run_oom
from app.core.diagnosis.report_store import ReportStore
from tests.unit.ui.doctor.samples import oom_report

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 64,
        "n_head": 2, "vocab_size": 256, "n_positions": 128}
MODEL = {"id": "m1", "name": "gpt2", "class": "transformers.GPT2LMHeadModel",
         "dtype": "float32", "training": True, "requires_grad": True, "config": GPT2,
         "input_shape": [64, 128]}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_oom_option(parser)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def test_a_report_on_stdin_gets_its_proposal_as_json(monkeypatch, capsys):
    report = dataclasses.replace(oom_report(), model=MODEL)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(report.to_json())))
    assert run_oom(_args("--oom", "-", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    proposal = out["proposal"]
    assert out["reason"] is None and proposal["ran_batch"] == 64
    assert proposal["request"]["seq"] == 128 and proposal["request"]["train"] is True
    assert proposal["needs_bytes"] <= proposal["room_bytes"] or proposal["batch"] is None


def test_a_stored_report_without_a_model_is_na_and_an_unknown_id_fails(tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    ReportStore().save(oom_report())
    assert run_oom(_args("--oom", oom_report().id)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == \
        "Batch that would have fitted: n/a — the OOM's model is not known (no agent, or no " \
        "model in the process)"
    assert run_oom(_args("--oom", "nope")) == 1
    assert "no OOM report 'nope'" in capsys.readouterr().err
