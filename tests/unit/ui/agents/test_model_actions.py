"""Model manager in the UI: model states and actions in the detail view, progress,
refusals and "Unload anyway", event markers on the VRAM graph, the idle timer,
the Auto-unload control and the Activity log."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.agent.protocol import IDLE_UNLOAD_MAX_S, IDLE_UNLOAD_MIN_S, idle_unload_problem
from app.core.agents.types import ModelActionResult, ModelEvent, ModelInfo
from app.core.policies.pressure import PolicyRunner
from app.core.units import GiB, MiB
from app.ui.agents import model_list
from app.ui.agents.model_list import (
    MCOL_DEVICE,
    MCOL_IDLE,
    MCOL_NAME,
    MCOL_PINNED,
    MCOL_SIZE,
    MCOL_STATE,
)
from app.ui.settings.values import AutoUnloadSettings
from tests.unit.core.policies.test_pressure import watched
from tests.unit.ui.agents.test_agent_views import NOW, device, gpu, proc, report, snap, with_runner
from tests.unit.ui.agents.test_agent_views import FakeDirectory as _FreeCacheFake
from tests.unit.ui.conftest import Ticks

UNET = int(1.6 * GiB)


def mi(mid, name, *, state="resident", to=None, pinned=False, blocker=None, idle=None,
       size=UNET, home="cuda:0", training=False, evidence=None, **kw):
    """A model as the agent reports it: requires grad (like from_pretrained ones), its
    idle clock from the last forward ``idle`` seconds before NOW."""
    device_ = home if state in ("resident", "unloading") else (to or "cpu")
    last = None if idle is None else NOW - idle
    fields = dict(id=mid, name=name, class_name="diffusers.UNet2DConditionModel",
                  params=size // 2, param_bytes=size, buffer_bytes=0, device=device_,
                  dtype="float16", training=training, requires_grad=True, last_used=last,
                  idle_since=last, first_seen=NOW - 3 * 3600, training_evidence=evidence,
                  state=state, offloaded_to=to if state == "offloaded" else None,
                  pinned=pinned, auto_unload_blocker=blocker, home_device=home,
                  bytes_by_device={device_: {"params": size, "buffers": 0}})
    fields.update(kw)
    return ModelInfo(**fields)


def event(seq, model="m-unet", name="pipe.unet", action="unload", reason="idle", t=NOW - 1,
          moved=UNET, released=UNET, seconds=0.4, target="cpu", ok=True):
    return ModelEvent(seq=seq, time=t, model=model, name=name, action=action,
                      state="offloaded" if action == "unload" else "resident",
                      target=target if action == "unload" else None, bytes_moved=moved,
                      bytes_released=released, seconds=seconds, reason=reason, ok=ok)


def notebook(models=None, events=(), idle_unload_s=None, index=0, received_at=NOW):
    models = models if models is not None else [
        mi("m-unet", "pipe.unet", idle=12 * 60, home=f"cuda:{index}"),
        mi("m-vae", "pipe.vae", state="offloaded", to="cpu", idle=30 * 60, size=160 * MiB),
        mi("m-text", "pipe.text_encoder", state="offloaded", to="disk", pinned=True,
           blocker="pinned", idle=2 * 3600 + 17 * 60, size=235 * MiB),
        mi("m-train", "model", training=True, evidence="train mode", blocker="train mode",
           idle=2, size=98 * MiB),
    ]
    return report(20, device(index, 3 * GiB, 4 * GiB), models=models, events=tuple(events),
                  idle_unload_s=idle_unload_s, received_at=received_at)


def notebook_snap(t=10.0, mem=5 * GiB, **kw):
    return snap([gpu(0, proc(20, mem))], {20: notebook(**kw)}, t=t)


class ModelFake(_FreeCacheFake):
    """Records every model call and its thread; unload can block or refuse."""

    def __init__(self, refuse=None, block=False):
        super().__init__(block=block)
        self.refuse = refuse  # model id -> reason (refused unless forced)
        self.seq = 100

    def _ev(self, model, action, target=None, reason="manual"):
        self.seq += 1
        return event(self.seq, model=model, name={"m-unet": "pipe.unet"}.get(model, model),
                     action=action, reason=reason, target=target or "cpu", t=NOW + 5)

    def unload(self, pid, model, to="cpu", force=False, reason="manual", timeout_s=300.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("unload", pid, model, to, force, reason))
        self.gate.wait(5)
        if self.refuse and model in self.refuse and not force:
            return ModelActionResult(pid, model, False, error=self.refuse[model], code="refused")
        return ModelActionResult(pid, model, True, event=self._ev(model, "unload", to, reason))

    def reload(self, pid, model, timeout_s=300.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("reload", pid, model))
        return ModelActionResult(pid, model, True, event=self._ev(model, "reload"))

    def pin(self, pid, model, pinned, timeout_s=10.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("pin", pid, model, pinned))
        return ModelActionResult(pid, model, True, pinned=pinned)

    def set_idle_unload(self, pid, seconds, timeout_s=10.0):
        self.threads.append(threading.get_ident())
        self.calls.append(("idle", pid, seconds))
        return {"ok": True, "idle_unload_s": seconds, "error": None}


def model_rows(view):
    m = view.models_view.model()
    return {m.index(r, MCOL_NAME).data(): {c: m.index(r, c) for c in range(m.columnCount())}
            for r in range(m.rowCount())}


def text(rows, name, col):
    return rows[name][col].data()


def select(view, model_id):
    assert view.select_model(model_id)
    assert view.selected_model().id == model_id


# -- the model list -----------------------------------------------------------------------------

def test_model_list_shows_states_and_figures(window):
    window.on_snapshot(notebook_snap())
    view = window.open_details(20)
    rows = model_rows(view)
    assert text(rows, "pipe.unet", MCOL_STATE) == "Resident"
    assert text(rows, "pipe.vae", MCOL_STATE) == "Offloaded to CPU"
    assert text(rows, "pipe.text_encoder", MCOL_STATE) == "Offloaded to disk"
    assert text(rows, "pipe.unet", MCOL_SIZE) == "1.6 GiB"
    assert text(rows, "pipe.vae", MCOL_SIZE) == "160 MiB"
    # Offloaded: the home device, with where the weights are now in the tooltip.
    assert text(rows, "pipe.vae", MCOL_DEVICE) == "cuda:0"
    assert "now on cpu" in rows["pipe.vae"][MCOL_DEVICE].data(Qt.ItemDataRole.ToolTipRole)
    assert text(rows, "pipe.unet", MCOL_IDLE) == "idle 12 min 00 s"
    assert text(rows, "pipe.text_encoder", MCOL_IDLE) == "idle 2 h 17 min"
    assert text(rows, "model", MCOL_IDLE) == "in use"
    assert text(rows, "pipe.text_encoder", MCOL_PINNED) == "pinned"
    assert text(rows, "pipe.unet", MCOL_PINNED) == ""
    # The blocker is explained.
    tip = rows["model"][MCOL_STATE].data(Qt.ItemDataRole.ToolTipRole)
    assert "Not unloaded automatically: train mode." in tip and "Unload anyway" in tip
    assert "Eligible for automatic unloading" in rows["pipe.unet"][MCOL_IDLE].data(
        Qt.ItemDataRole.ToolTipRole)
    assert "never unloaded automatically" in rows["pipe.text_encoder"][MCOL_PINNED].data(
        Qt.ItemDataRole.ToolTipRole)
    # Badges for the delegate: (text, colour key, moving).
    assert rows["pipe.vae"][MCOL_STATE].data(model_list.MODEL_BADGE_ROLE) == (
        "Offloaded to CPU", "cpu", False)
    moving = [mi("m-unet", "pipe.unet", state="unloading", idle=600),
              mi("m-vae", "pipe.vae", state="reloading", to="cpu", idle=1)]
    window.on_snapshot(snap([gpu(0, proc(20, 5 * GiB))], {20: notebook(moving)}, t=11.0))
    rows = model_rows(view)
    assert text(rows, "pipe.unet", MCOL_STATE) == "Unloading…"
    assert text(rows, "pipe.vae", MCOL_STATE) == "Reloading…"
    assert view.anim_timer.isActive()  # the busy badges animate
    select(view, "m-unet")
    assert not view.unload_cpu_button.isEnabled() and not view.pin_button.isEnabled()
    assert not view.model_progress.isHidden()
    view.grab()  # the delegate paints without error


def test_buttons_follow_the_selected_models_state(window):
    with_runner(window, ModelFake())
    window.on_snapshot(notebook_snap())
    view = window.open_details(20)
    select(view, "m-unet")
    assert view.unload_cpu_button.isEnabled() and view.unload_disk_button.isEnabled()
    assert not view.reload_button.isEnabled()
    assert view.pin_button.text() == "Pin"
    select(view, "m-text")
    assert not view.unload_cpu_button.isEnabled() and view.reload_button.isEnabled()
    assert view.pin_button.text() == "Unpin"


def test_detail_view_shows_training_evidence_placeholders_and_unknown_idle(window):
    models = [
        mi("m1", "stepped", evidence="optimizer step 40 s ago",
           blocker="optimizer step 40 s ago", idle=20 * 60),
        mi("m2", "offloaded-hf", placeholder_bytes=3 * GiB, idle=600),
        mi("m3", "compiled", unload_blocker="torch.compile", blocker="torch.compile",
           idle=None, last_used=NOW - 9000),
        mi("m4", "fresh", last_used=None, idle_since=NOW - 4, first_seen=NOW - 4),
    ]
    with_runner(window, ModelFake())
    window.on_snapshot(snap([gpu(0, proc(20, 5 * GiB))], {20: notebook(models)}))
    view = window.open_details(20)
    rows = model_rows(view)
    tip = rows["stepped"][MCOL_NAME].data(Qt.ItemDataRole.ToolTipRole)
    assert "Training evidence: optimizer step 40 s ago" in tip
    assert "requires grad (blocks nothing)" in tip and "Unload anyway" in tip
    assert text(rows, "stepped", model_list.MCOL_MODE) == "eval"
    assert "training evidence: optimizer step 40 s ago" in rows["stepped"][
        model_list.MCOL_MODE].data(Qt.ItemDataRole.ToolTipRole)
    select(view, "m1")
    assert view.model_result.text() == (
        "Not unloaded automatically: training evidence: optimizer step 40 s ago")
    assert view.unload_cpu_button.isEnabled()  # training evidence: a manual unload is asked
    select(view, "m2")
    assert view.model_result.text() == "3.0 GiB of meta placeholders (weights held elsewhere)"
    assert "3.0 GiB of meta placeholders" in rows["offloaded-hf"][MCOL_SIZE].data(
        Qt.ItemDataRole.ToolTipRole)
    # compiled: the agent cannot see its use: "n/a", whatever its old last forward says
    assert text(rows, "compiled", MCOL_IDLE) == "n/a"
    assert "Idle time unknown" in rows["compiled"][MCOL_IDLE].data(Qt.ItemDataRole.ToolTipRole)
    select(view, "m3")
    assert view.model_result.text() == "Never unloaded: torch.compile"
    assert "not even by hand" in view.model_result.toolTip()
    # the agent refuses any unload of it: the buttons say so instead of asking
    assert not view.unload_cpu_button.isEnabled() and not view.unload_disk_button.isEnabled()
    assert "refuses any unload" in view.unload_cpu_button.toolTip()
    assert view.pin_button.isEnabled()
    # never run: idle since first seen, never "in use"
    assert text(rows, "fresh", MCOL_IDLE) == "idle 4 s"
    assert "first saw it" in rows["fresh"][MCOL_IDLE].data(Qt.ItemDataRole.ToolTipRole)
    view.grab()


# -- texts --------------------------------------------------------------------------------------

def test_idle_texts_use_the_agents_idle_clock():
    from app.ui.agents.model_actions import fmt_idle, idle_seconds, idle_text

    assert fmt_idle(None) == "n/a"
    assert fmt_idle(3) == "in use" and fmt_idle(3, forward_seen=False) == "idle 3 s"
    assert fmt_idle(12 * 60) == "idle 12 min 00 s" and fmt_idle(2 * 3600 + 17 * 60) == "idle 2 h 17 min"
    used = mi("a", "a", idle=720)
    assert idle_seconds(used, NOW) == 720 and idle_text(used, NOW) == "idle 12 min 00 s"
    # idle_since wins over last_used; no forward yet counts from first seen
    never = mi("b", "b", last_used=None, idle_since=NOW - 900)
    assert idle_text(never, NOW) == "idle 15 min 00 s"
    assert idle_text(mi("c", "c", idle_since=None, last_used=NOW - 5), NOW) == "n/a"


@pytest.mark.parametrize("reason, force", [
    ("train mode", True), ("training evidence: train mode", True),
    ("optimizer step 40 s ago", True), ("gradients present", True),
    ("backward 2 min ago", True), ("the model is in training mode (model.train())", True),
    ("requires grad", False), ("never used", False), ("torch.compile", False),
    ("TorchScript", False), ("torch.export", False), ("shares tensors with m3", False),
    ("meta placeholders", False), ("holds sparse or quantized tensors", False),
    ("no agent hooks", False), ("a forward is running (waited 5.0 s)", False),
    ("it is running: thread 'MainThread' in GenerationMixin.generate (waited 5.0 s)", False),
    ("torch.fx", False), ("tensor subclasses (DTensor)", False),
    ("it looks like it is training (optimizer step 3 s ago); use force to unload it anyway",
     True),
    ("used through torch.compile: its compiled code holds the weights where they are", False),
    ("pinned", False), (None, False), ("", False),
    ("forward with autograd 2 min ago", True), ("CUDA graph", False),
    ("captured into a CUDA graph: its replays read the weights at their addresses", False),
])
def test_only_training_evidence_is_overridable(reason, force):
    from app.core.agents.unload_reasons import overridable

    assert overridable(reason) is force


def test_blocker_texts_explain_the_new_rule():
    from app.ui.agents.model_actions import (
        blocker_tooltip,
        force_consequences,
        model_blocker_tooltip,
        model_note,
    )

    assert "Eligible for automatic unloading" in blocker_tooltip(None)
    for blocker, words in [("optimizer step 40 s ago", "optimizer stepped"),
                           ("gradients present", "hold gradients"),
                           ("backward 2 min ago", "backward pass ran"),
                           ("train mode", "model.train()")]:
        tip = blocker_tooltip(blocker)
        assert tip.startswith(f"Not unloaded automatically: {blocker}.")
        assert words in tip and "Unload anyway" in tip
    for blocker, words in [("torch.export", "exported program"), ("TorchScript", "scripted"),
                           ("shares tensors with m3", "another model"),
                           ("meta placeholders", "held elsewhere"),
                           ("torch.compile", "compiled graphs")]:
        tip = blocker_tooltip(blocker)
        assert tip.startswith(f"Never unloaded, not even by hand: {blocker}.")
        assert words in tip and "Unload anyway" not in tip
    # requires grad and never used are no blockers any more: an older agent that still
    # says so is quoted, with no explanation and no "Unload anyway" on the app's part
    assert blocker_tooltip("requires grad") == "Not unloaded automatically: requires grad."
    assert blocker_tooltip("never used") == "Not unloaded automatically: never used."
    hf = mi("m1", "unet")  # requires grad, eval, idle: eligible
    assert model_note(hf) == "" and "Eligible" in model_blocker_tooltip(hf)
    assert model_note(mi("m2", "x", pinned=True, blocker="pinned")) == (
        "Not unloaded automatically: pinned")
    text = force_consequences("training evidence: optimizer step 40 s ago", "unet", "cpu")
    assert "optimizer stepped its parameters" in text and "host memory" in text
    assert "require gradients" not in text and "No forward pass" not in text


# -- actions ----------------------------------------------------------------------------------------

def test_unload_to_cpu_runs_off_the_gui_thread_with_progress_then_the_result(window, qtbot):
    fake = ModelFake(block=True)
    with_runner(window, fake, settle_s=0.2)
    tick = Ticks(window, fake)
    tick(notebook_snap(mem=5 * GiB))
    view = window.open_details(20)
    select(view, "m-unet")
    qtbot.mouseClick(view.unload_cpu_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: fake.calls[-1:] == [("unload", 20, "m-unet", "cpu", False,
                                                 "manual")], timeout=3000)
    # In flight: the row says so, its buttons are off, a progress bar runs.
    rows = model_rows(view)
    assert text(rows, "pipe.unet", MCOL_STATE) == "Unloading…"
    assert rows["pipe.unet"][MCOL_STATE].data(model_list.MODEL_BADGE_ROLE)[2] is True
    assert not view.unload_cpu_button.isEnabled() and not view.reload_button.isEnabled()
    assert not view.pin_button.isEnabled()
    assert not view.model_progress.isHidden()
    assert "unloading pipe.unet to CPU…" in view.model_result.text()
    assert "unloading pipe.unet to CPU…" in window.action_label.text()
    fake.gate.set()
    qtbot.waitUntil(lambda: not window.controller.core.running(), timeout=3000)
    assert fake.threads and threading.get_ident() not in fake.threads
    assert view.model_progress.isHidden()
    result = view.model_result.text()
    assert "unloaded pipe.unet to CPU: moved 1.6 GiB, allocator released 1.6 GiB" in result
    assert "measuring with NVML" in result and "0.4 s" in result
    # NVML drops: measured once the driver settled, never with the first snapshot after
    # the answer (it may have been sampled while the unload ran).
    offloaded = [mi("m-unet", "pipe.unet", state="offloaded", to="cpu", idle=1)]
    tick(snap([gpu(0, proc(20, 5 * GiB))], {20: notebook(offloaded)}, t=11.5))
    assert "measuring with NVML" in view.model_result.text()
    # The reply's event is in the Activity log, in the detail view's words.
    logged = window.activity.entries[0]
    assert logged.event == "Unloaded → CPU" and logged.released == UNET
    assert logged.detail == f"job20.py (20) on GPU 0: {view.model_result.text()}"
    time.sleep(0.25)
    tick(snap([gpu(0, proc(20, int(3.5 * GiB)))], {20: notebook(offloaded)},
                            t=12.0))
    result = view.model_result.text()
    assert "NVML shows 1.5 GiB released" in result and "0.4 s" in result
    assert "NVML shows 1.5 GiB released" in window.action_label.text()
    # Measured: the log's row says what the detail view says, word for word.
    assert window.activity.entries[0].detail == f"job20.py (20) on GPU 0: {result}"
    assert window.activity.rows()[0][7] == f"job20.py (20) on GPU 0: {result}"
    assert text(model_rows(view), "pipe.unet", MCOL_STATE) == "Offloaded to CPU"
    assert view.reload_button.isEnabled()
    # The reply's event is logged once (not again when the report repeats it).
    assert window.activity.rows()[0][3] == "Unloaded → CPU"
    assert tick.feed.seen(20, 101)
    tick(snap([gpu(0, proc(20, int(3.5 * GiB)))],
                            {20: notebook(offloaded, events=[event(101, reason="manual")])},
                            t=13.0))
    assert len([r for r in window.activity.rows() if r[3] == "Unloaded → CPU"]) == 1


def test_refusal_shows_the_reason_and_force_asks_first(window, qtbot, monkeypatch):
    fake = ModelFake(refuse={"m-train": "training evidence: train mode",
                             "m-unet": "torch.compile"})
    with_runner(window, fake)
    window.on_snapshot(notebook_snap())
    view = window.open_details(20)

    # Not overridable: the reason, no "Unload anyway".
    select(view, "m-unet")
    view.unload_cpu_button.click()
    qtbot.waitUntil(lambda: not window.controller.core.running() and bool(fake.calls), timeout=3000)
    assert view.model_result.text().startswith("Refused: torch.compile")
    assert view.force_button.isHidden()

    select(view, "m-train")
    view.unload_disk_button.click()
    qtbot.waitUntil(lambda: len(fake.calls) == 2 and not window.controller.core.running(),
                    timeout=3000)
    assert view.model_result.text().startswith("Refused: training evidence: train mode")
    assert "#D55E00" in view.model_result.styleSheet()
    assert not view.force_button.isHidden() and view.force_button.isEnabled()
    assert "not unloaded: training evidence: train mode" in window.action_label.text()
    assert window.activity.rows()[0][3] == "Refused: unload"

    asked = []

    def answer(reply):
        def warning(parent, title, body, buttons=None, default=None):
            asked.append(body)
            return reply
        return warning

    monkeypatch.setattr(QMessageBox, "warning", answer(QMessageBox.StandardButton.Cancel))
    view.force_button.click()
    assert len(asked) == 1 and "training evidence: train mode" in asked[0]
    assert "optimizer" in asked[0]  # says what may happen
    assert len(fake.calls) == 2  # cancelled: nothing sent

    monkeypatch.setattr(QMessageBox, "warning", answer(QMessageBox.StandardButton.Yes))
    view.force_button.click()
    qtbot.waitUntil(lambda: len(fake.calls) == 3 and not window.controller.core.running(),
                    timeout=3000)
    assert fake.calls[-1] == ("unload", 20, "m-train", "disk", True, "manual")
    assert "(forced)" in view.model_result.text()


def test_reload_and_pin_call_the_directory(window, qtbot):
    fake = ModelFake()
    with_runner(window, fake)
    window.on_snapshot(notebook_snap())
    view = window.open_details(20)
    select(view, "m-vae")
    view.reload_button.click()
    qtbot.waitUntil(lambda: bool(fake.calls) and not window.controller.core.running(), timeout=3000)
    assert fake.calls == [("reload", 20, "m-vae")]
    assert view.model_result.text().startswith("reloaded pipe.vae: moved 1.6 GiB, 0.4 s")
    select(view, "m-unet")
    view.pin_button.click()
    qtbot.waitUntil(lambda: len(fake.calls) == 2 and not window.controller.core.running(),
                    timeout=3000)
    assert fake.calls[-1] == ("pin", 20, "m-unet", True)
    select(view, "m-text")
    view.pin_button.click()  # "Unpin"
    qtbot.waitUntil(lambda: len(fake.calls) == 3 and not window.controller.core.running(),
                    timeout=3000)
    assert fake.calls[-1] == ("pin", 20, "m-text", False)
    assert "unpinned pipe.text_encoder" in window.action_label.text()
    assert threading.get_ident() not in fake.threads


def test_idle_timer_control_sets_seconds_and_none(window, qtbot):
    fake = ModelFake()
    with_runner(window, fake)
    window.on_snapshot(notebook_snap())
    view = window.open_details(20)
    assert not view.idle_box.isChecked() and view.idle_state.text() == "(agent: off)"
    view.idle_spin.setValue(45)  # off: changing the minutes sends nothing
    view.idle_box.setChecked(True)
    qtbot.waitUntil(lambda: bool(fake.calls) and not window.controller.core.running(), timeout=3000)
    assert fake.calls == [("idle", 20, 45 * 60.0)]
    assert threading.get_ident() not in fake.threads
    # The agent now reports 45 min: shown, and followed.
    window.on_snapshot(notebook_snap(t=11.0, idle_unload_s=2700.0))
    assert view.idle_state.text() == "(agent: 45 min)" and view.idle_box.isChecked()
    view.idle_box.setChecked(False)
    qtbot.waitUntil(lambda: len(fake.calls) == 2 and not window.controller.core.running(),
                    timeout=3000)
    assert fake.calls[-1] == ("idle", 20, None)
    # Another value reported by the agent (set elsewhere) is taken over, not sent back.
    window.on_snapshot(notebook_snap(t=12.0, idle_unload_s=600.0))
    assert view.idle_box.isChecked() and view.idle_spin.value() == 10
    assert len(fake.calls) == 2


def test_idle_timer_offers_the_agents_whole_range_and_nothing_outside(window, qtbot):
    fake = ModelFake()
    with_runner(window, fake)
    window.on_snapshot(notebook_snap(idle_unload_s=IDLE_UNLOAD_MAX_S))  # 30 days, set elsewhere
    view = window.open_details(20)
    assert view.idle_box.isChecked() and view.idle_spin.value() * 60 == IDLE_UNLOAD_MAX_S
    low, high = view.idle_spin.minimum() * 60.0, view.idle_spin.maximum() * 60.0
    assert idle_unload_problem(low) is None and idle_unload_problem(high) is None
    assert low - 60 < IDLE_UNLOAD_MIN_S and high == IDLE_UNLOAD_MAX_S  # whole minutes
    view.idle_spin.setValue(view.idle_spin.minimum())
    qtbot.waitUntil(lambda: bool(fake.calls) and not window.controller.core.running(), timeout=3000)
    assert fake.calls == [("idle", 20, low)]


# -- markers --------------------------------------------------------------------------------------

def test_markers_appear_on_the_right_gpu_once_per_seq(window):
    tick = Ticks(window)
    # (received_at: reports are fresh, on the snapshots' clock.)
    r = notebook(events=[event(1), event(2, action="reload", reason="forward", t=NOW + 3)],
                 index=1, received_at=NOW + 10.0)
    gpus = [gpu(0, proc(30, GiB)), gpu(1, proc(20, 5 * GiB))]
    tick(snap(gpus, {20: r}, t=10.0))
    # The same events again (a new report object, as every poll brings).
    r2 = dataclasses.replace(r, events=tuple(r.events))
    tick(snap(gpus, {20: r2}, t=10.5))
    window.refresh(force=True)
    p0, p1 = window.panels["0"], window.panels["1"]
    assert p0.marker_positions() == []
    marks = p1.marker_positions()
    assert [m[1] for m in marks] == ["unload", "reload"]
    assert marks[0][2] == "Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)"
    assert marks[1][2].startswith("Reloaded pipe.unet (1.6 GiB, 0.4 s, forward)")
    # In the plot's time frame: seconds before the newest sample (snap at NOW + 10.5).
    assert marks[0][0] == pytest.approx(-11.5) and marks[1][0] == pytest.approx(-7.5)
    assert len(p1.unload_markers.data) == 1 and len(p1.reload_markers.data) == 1
    # They scroll with the plot.
    tick(snap(gpus, {20: r2}, t=20.5))
    window.refresh(force=True)
    assert p1.marker_positions()[0][0] == pytest.approx(-21.5)
    assert p1.unload_markers.pos().x() == pytest.approx(p1.marker_positions()[0][0]
                                                       - p1._marker_x[0])
    # Hover near a marker names the event.
    assert "Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)" in p1.hover_text_at(-21.5)
    assert "Unloaded" not in p1.hover_text_at(-200.0)
    # Each (pid, seq) once in the Activity log too.
    assert len(window.activity.rows()) == 2


def test_markers_are_bounded_per_gpu(window):
    tick = Ticks(window)
    window.markers.per_gpu = 5
    for i in range(12):
        r = notebook(events=[event(i + 1, t=NOW + i)])
        tick(snap([gpu(0, proc(20, 5 * GiB))], {20: r}, t=10.0 + i))
    window.refresh(force=True)
    assert len(window.panels["0"].marker_positions()) == 5


# -- auto-unload policy ---------------------------------------------------------------------

def test_auto_unload_control_changes_the_policy_config(window):
    runner = PolicyRunner(ModelFake())
    window.set_policy(runner)
    control = window.auto_unload
    assert control.text() == "Auto-unload: at 90 %"
    form = control.form
    form.threshold_spin.setValue(80)
    assert runner.config.threshold == pytest.approx(0.80)
    assert runner.config.rearm <= 0.79  # re-arm kept below the threshold
    form.idle_spin.setValue(10)
    assert runner.config.min_idle_s == 600.0
    form.rearm_spin.setValue(70)
    assert runner.config.rearm == pytest.approx(0.70)
    assert runner.config.target == "cpu"  # fields the control does not edit are kept
    assert window.settings.auto_unload == AutoUnloadSettings(True, 0.80, 0.70, 600.0, 30.0)
    assert control.text() == "Auto-unload: at 80 %"
    form.enabled_box.setChecked(False)
    assert runner.enabled is False and control.text() == "Auto-unload: off"
    assert not form.threshold_spin.isEnabled()
    form.enabled_box.setChecked(True)
    assert runner.enabled is True


def test_settings_follow_a_new_runner(window):
    """Switching the source makes a new Collector, so a new runner with its defaults."""
    runners = [PolicyRunner(ModelFake())]
    window.set_policy(lambda: runners[0])
    window.auto_unload.form.threshold_spin.setValue(95)
    assert runners[0].config.threshold == pytest.approx(0.95)
    runners[0] = PolicyRunner(ModelFake())
    assert runners[0].config.threshold == pytest.approx(0.90)
    window.on_snapshot(notebook_snap())
    assert runners[0].config.threshold == pytest.approx(0.95)


def test_policy_decisions_are_shown_and_their_unloads_run_off_the_gui_thread(window, qtbot):
    fake = ModelFake(block=True)
    with_runner(window, fake)
    runner = watched(PolicyRunner(fake), notebook())
    window.set_policy(runner)
    tick = Ticks(window, fake, runner)
    full = notebook_snap(mem=22 * GiB)  # 92 % of 24 GiB
    decisions = runner.observe(full)  # as the Collector does, on the sampler thread
    assert [a.name for d in decisions for a in d.actions] == ["pipe.unet"]
    tick(full)
    assert window.action_label.text() == (
        "Auto-unload: GPU 0 at 92 % ≥ 90 %: unloading pipe.unet (1.6 GiB)")
    rows = window.activity.rows()
    assert rows[0][1:5] == ["job20.py (20)", "pipe.unet", "Decided: unload", "memory pressure"]
    # The model's row shows the move while it runs.
    view = window.open_details(20)
    assert text(model_rows(view), "pipe.unet", MCOL_STATE) == "Unloading…"
    select(view, "m-unet")
    assert not view.unload_cpu_button.isEnabled()
    qtbot.waitUntil(lambda: bool(fake.calls), timeout=3000)
    assert fake.calls == [("unload", 20, "m-unet", "cpu", False, "pressure")]
    assert threading.get_ident() not in fake.threads
    fake.gate.set()
    assert runner.wait_idle(3)
    tick(notebook_snap(t=11.0, mem=int(20.4 * GiB)))
    assert window.action_label.text() == (
        "Auto-unload: GPU 0: unloaded 1 of 1 (pipe.unet (1.6 GiB)), allocator released 1.6 GiB")
    assert text(model_rows(view), "pipe.unet", MCOL_STATE) == "Resident"  # as reported
    # The detail view tells of the policy's unload in the words of the Activity log (no
    # NVML figure: the controller did not run it, nobody measures it).
    assert view.model_result.text() == (
        "unloaded pipe.unet to CPU: moved 1.6 GiB, allocator released 1.6 GiB, 0.4 s")


def test_a_new_controller_keeps_the_policy_and_a_new_runner_drops_old_pending_unloads(window):
    runner = watched(PolicyRunner(ModelFake(block=True)), notebook())
    window.set_policy(runner)
    with_runner(window, ModelFake(block=True))  # a new controller after the policy
    assert window.controller.core.policy_runner() is runner
    tick = Ticks(window, policy=runner)
    full = notebook_snap(mem=22 * GiB)
    runner.observe(full)
    tick(full)
    view = window.open_details(20)
    assert text(model_rows(view), "pipe.unet", MCOL_STATE) == "Unloading…"
    # The source changes: a new runner, whose decisions start from seq 1 again. The old
    # runner's unload will never report back, so it is no longer shown as running.
    fresh = PolicyRunner(ModelFake())
    window.set_policy(fresh)
    busy = [mi("m-train", "model", training=True, evidence="train mode", blocker="train mode",
               idle=2)]
    crowded = snap([gpu(0, proc(20, 23 * GiB))], {20: notebook(busy)}, t=11.0)
    fresh.observe(crowded)
    Ticks(window, policy=fresh)(crowded)
    assert window.action_label.text() == "Auto-unload: GPU 0 at 96 %, nothing eligible to unload"
    window.on_snapshot(notebook_snap(t=12.0))
    assert text(model_rows(view), "pipe.unet", MCOL_STATE) == "Resident"
    runner.directory.gate.set()
    runner.close()


def test_nothing_eligible_is_said(window):
    runner = PolicyRunner(ModelFake())
    window.set_policy(runner)
    tick = Ticks(window, policy=runner)
    busy = [mi("m-train", "model", training=True, evidence="train mode", blocker="train mode",
               idle=2)]
    full = snap([gpu(0, proc(20, 23 * GiB))], {20: notebook(busy)})
    runner.observe(full)
    tick(full)
    assert window.action_label.text() == "Auto-unload: GPU 0 at 96 %, nothing eligible to unload"
    assert "train mode" in window.action_label.toolTip()
    assert window.activity.rows()[0][3] == "GPU 0: nothing to unload"


def test_activity_log_lists_events(window):
    tick = Ticks(window)
    events = [event(1, reason="idle"), event(2, action="reload", reason="forward", t=NOW + 2),
              event(3, name="pipe.vae", model="m-vae", reason="pressure", target="disk",
                    released=150 * MiB, t=NOW + 3)]
    tick(snap([gpu(0, proc(20, 5 * GiB))], {20: notebook(events=events)}))
    rows = window.activity.rows()
    assert [r[1:6] for r in rows] == [
        ["job20.py (20)", "pipe.vae", "Unloaded → disk", "memory pressure", "150 MiB"],
        ["job20.py (20)", "pipe.unet", "Reloaded", "used again", ""],
        ["job20.py (20)", "pipe.unet", "Unloaded → CPU", "idle timer (agent)", "1.6 GiB"],
    ]
    assert rows[0][6] == "0.4 s"
    # Automatic events are announced in the status bar; the tab counts unseen entries.
    assert "Unloaded pipe.vae (1.6 GiB → disk, 0.4 s, pressure)" in window.action_label.text()
    tabs = window.lower_tabs
    assert tabs.tabText(tabs.indexOf(window.activity)) == "Activity (3)"
    tabs.setCurrentWidget(window.activity)
    assert tabs.tabText(tabs.indexOf(window.activity)) == "Activity"


def test_events_from_the_directorys_stream_are_logged_once(window):
    fake = ModelFake()
    ev = event(7, reason="idle")
    fake.events_since = lambda cursor: ([(20, ev)][cursor:], 1)
    with_runner(window, fake)
    tick = Ticks(window, fake)
    tick(notebook_snap())  # the report has no events: the stream's counts
    tick(snap([gpu(0, proc(20, 5 * GiB))], {20: notebook(events=[ev])}, t=11.0))
    assert [r[3] for r in window.activity.rows()] == ["Unloaded → CPU"]
    window.refresh(force=True)
    assert len(window.panels["0"].marker_positions()) == 1


def test_demo_pressure_policy_end_to_end(window, qtbot):
    """DemoAgents behind a real Collector: its PolicyRunner unloads the idle notebook
    pipeline when GPU 0 fills up; the window shows the decision, events and markers."""
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.collector import Collector
    from tests.unit.ui.conftest import DemoFeed

    feed = DemoFeed()
    agents = DemoAgents(feed.source)
    # The policy on the demo's clock.
    runner = PolicyRunner(agents, clock=lambda: feed.t[0])
    feed.collector = Collector(feed.source, agents=agents, pressure_policy=runner)
    with_runner(window, agents)
    window.set_auto_unload(AutoUnloadSettings(min_idle_s=60.0))
    window.set_policy(lambda: feed.collector.policy)
    for _ in range(60):
        feed.step(window, 10)
        feed.collector.policy.wait_idle(3)
        qtbot.wait(1)
        if window.markers.markers.get("0"):
            break
    window.refresh(force=True)
    marks = window.panels["0"].marker_positions()
    assert marks and all(m[1] == "unload" for m in marks)
    assert "pressure" in marks[0][2]
    assert not window.panels["1"].marker_positions()
    feed.step(window, 1)
    events = [r for r in window.activity.rows() if r[3] == "Unloaded → CPU"]
    assert events and all(r[4] == "memory pressure" for r in events)
    assert any(r[3] == "Decided: unload" for r in window.activity.rows())
    # Each unload is credited with what its own weights freed, never the cache the
    # notebook held before (that is in its details).
    assert [r[2] for r in events] == ["pipe.unet", "pipe.text_encoder"]
    assert [r[5] for r in events] == ["1.6 GiB", "235 MiB"]
    assert "(2.1 GiB of it cache held before)" in events[1][7]
    # Its agent's idle clock counts: the first crossing, inside the demo's first minute.
    assert 25.0 <= feed.t[0] - 1000.0 < 60.0


def test_a_refused_reload_reads_as_not_reloaded_a_failed_one_as_failed():
    from app.core.control.records import RELOAD, ModelAction
    from app.ui.agents.model_actions import model_summary

    refused = ModelAction(RELOAD, 20, "m1", name="pipe.unet", label="notebook (20)",
                          done_at=1.0, result=ModelActionResult(
                              20, "m1", False, error="not offloaded (it is resident)",
                              code="refused"))
    assert model_summary(refused) == \
        "notebook (20): pipe.unet not reloaded: not offloaded (it is resident)"
    failed = dataclasses.replace(refused, result=ModelActionResult(
        20, "m1", False, error="out of host memory", code="failed"))
    assert model_summary(failed) == "notebook (20): reloading pipe.unet failed: out of host memory"
