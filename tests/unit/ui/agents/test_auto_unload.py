"""The Auto-unload control says the policy's state (off, armed at its threshold,
acting) and its last unload; the notice's texts credit each model with its own
share only."""

from __future__ import annotations

import dataclasses

from app.core.policies.pressure import PolicyRunner
from app.core.units import GiB, MiB
from app.ui.agents.auto_unload import LastUnload, notice_texts
from app.ui.settings.values import AutoUnloadSettings
from tests.unit.core.policies.test_pressure import Directory, gpu, model, report, snap, watched
from tests.unit.ui.agents.test_model_actions import ModelFake, notebook, notebook_snap
from tests.unit.ui.conftest import Ticks


def test_the_control_shows_armed_acting_and_its_last_unload(window, qtbot):
    fake = ModelFake(block=True)
    runner = watched(PolicyRunner(fake), notebook())
    window.set_policy(runner)
    control = window.auto_unload
    assert control.text() == "Auto-unload: at 90 %"
    assert control.toolTip().startswith("Armed: acts when a GPU reaches 90 %\n\n")
    assert control.form.status.text() == "Armed: acts when a GPU reaches 90 %"
    tick = Ticks(window, fake, runner)
    full = notebook_snap(mem=22 * GiB)
    runner.observe(full)
    tick(full)
    assert control.text() == "Auto-unload: unloading…"
    assert control.toolTip().startswith("Acting: unloading pipe.unet on GPU 0\n")
    fake.gate.set()
    assert runner.wait_idle(3)
    tick(notebook_snap(t=11.0, mem=int(20.4 * GiB)))
    assert control.text() == "Auto-unload: at 90 %"
    assert control.acting is None and control.last.names == ("pipe.unet",)
    state = control.form.status.text()
    assert state.startswith("Armed: acts when a GPU reaches 90 %\nLast: unloaded pipe.unet ")
    assert state.endswith(", freed 1.6 GiB")
    control.menu_.aboutToShow.emit()  # the popup says how long ago, as of now
    assert "Last: unloaded pipe.unet" in control.form.status.text()
    window.set_auto_unload(AutoUnloadSettings(enabled=False))
    assert control.text() == "Auto-unload: off"
    assert control.toolTip().startswith("Off\nLast: unloaded pipe.unet")
    assert "off (models are unloaded only by hand" in control.toolTip()


def test_last_unload_text():
    last = LastUnload(1000.0, "GPU 0", ("pipe.text_encoder",), 235 * MiB)
    assert last.text(now=1125.0) == (
        "last: unloaded pipe.text_encoder 2 min 05 s ago, freed 235 MiB")
    two = LastUnload(1000.0, "GPU 0", ("pipe.text_encoder", "pipe.unet"), None, failed=1)
    assert two.text(now=1001.0) == (
        "last: unloaded pipe.text_encoder, pipe.unet 1 s ago (1 refused or failed)")
    none = LastUnload(1000.0, "GPU 1", (), None, failed=2)
    assert none.text(now=1000.2) == "last: nothing unloaded on GPU 1 now (2 refused or failed)"


def test_notice_credits_each_model_with_its_own_share():
    r = report(20, model("a", idle_s=7200, gib=1), model("b", idle_s=3600, gib=1))
    runner = watched(PolicyRunner(Directory(), synchronous=True), r)
    # 99 % of 100 GiB: both go; each reply says 1 GiB moved and 1.1 GiB released.
    runner.observe(snap(gpu(fraction=0.99), r))
    [d] = runner.decisions()
    assert d.freed == 2 * GiB  # 100 MiB per unload was cache held before: not theirs
    title, body = notice_texts(d, "GPU 0", lambda pid: f"job{pid}.py ({pid})")
    assert title == "Auto-unload freed 2.0 GiB from 2 models in job20.py (20)"
    assert body == (
        "name-a (1.0 GiB), name-b (1.0 GiB): GPU 0 reached 99 % (the threshold is 90 %). "
        "They had been idle for 1 h 00 min and went to host memory; they reload on their next "
        "use, or now. The allocator also returned 200 MiB of cache held before.")
    unknown = dataclasses.replace(d, results=tuple(
        dataclasses.replace(x, event=dataclasses.replace(x.event, bytes_released=None))
        for x in d.results))
    assert notice_texts(unknown, "GPU 0", str)[0] == "Auto-unload unloaded 2 models in 20"
