"""Model actions (unload, reload, pin, idle TTL) run off the GUI thread.

``AgentDirectory.unload`` and friends block on a socket round trip that can
take seconds (moving gigabytes of weights), so :class:`ModelActionRunner` runs
them on a :class:`QThreadPool`; results come back on the GUI thread through a
queued signal.  A :class:`ModelAction` carries the NVML figures taken at the
click so the window can say what the driver *shows* was released, like the
free-cache action does (:meth:`ModelAction.measure`).

Also here: the Qt-free texts of the model list (state badge, idle time,
blockers) and of the refusals an agent answers with.  The agent decides what
may be unloaded; these texts only explain its words (``app.core.agents.unload_reasons``
says which ones ``force`` overrides: training evidence only).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from app.core.agents.events import event_text, seconds_text, target_text
from app.core.agents.placement import gpu_of_device
from app.core.agents.types import ModelActionResult, ModelEvent, ModelInfo
from app.core.agents.unload_reasons import overridable, refuses_any_unload
from app.core.monitor.samples import Snapshot
from app.ui.agents.action_runner import ActionJob, ActionRunner, DirectoryLike, error_text
from app.ui.agents.agent_actions import gpu_used, nvml_usage
from app.ui.style.format import NA, fmt_bytes

UNLOAD = "unload"
RELOAD = "reload"
PIN = "pin"
IDLE_TTL = "idle_ttl"

#: A model whose last forward is at most this old counts as "in use".
IN_USE_S = 10.0

_ids = itertools.count(1)


# -- texts of the model list ----------------------------------------------------------------------

STATE_RESIDENT = "resident"
STATE_UNLOADING = "unloading"
STATE_OFFLOADED = "offloaded"
STATE_RELOADING = "reloading"
BUSY_STATES = (STATE_UNLOADING, STATE_RELOADING)




def state_text(m: ModelInfo, pending: ModelAction | None = None) -> str:
    """The badge: Resident / Offloaded to CPU / Offloaded to disk / Unloading… / Reloading…"""
    if pending is not None and pending.kind in (UNLOAD, RELOAD) and m.state not in BUSY_STATES:
        # Asked for, not yet reported by the agent.
        return "Unloading…" if pending.kind == UNLOAD else "Reloading…"
    if m.state == STATE_UNLOADING:
        return "Unloading…"
    if m.state == STATE_RELOADING:
        return "Reloading…"
    if m.state == STATE_OFFLOADED:
        return f"Offloaded to {target_text(m.offloaded_to)}"
    if m.state == STATE_RESIDENT:
        return "Resident"
    return m.state.capitalize() if m.state else NA


def is_moving(m: ModelInfo, pending: ModelAction | None = None) -> bool:
    return m.state in BUSY_STATES or (pending is not None and pending.kind in (UNLOAD, RELOAD))


def model_device(m: ModelInfo) -> str:
    """Where the weights belong: the home device while offloaded ("cuda:0")."""
    if m.state != STATE_RESIDENT and m.home_device:
        return m.home_device
    return m.device or m.home_device or NA


def idle_seconds(m: ModelInfo, now: float) -> float | None:
    """Seconds on the agent's idle clock (``idle_since``) at ``now``; None = unknown."""
    return m.idle_s(now)


def fmt_idle(seconds: float | None, forward_seen: bool = True) -> str:
    """``in use``, ``idle 45 s``, ``idle 12 min``, ``idle 2 h 17 min``; ``n/a`` when
    unknown.  Only a model seen in a forward is ``in use``: one never run is idle."""
    if seconds is None:
        return NA
    if seconds < IN_USE_S and forward_seen:
        return "in use"
    if seconds < 60:
        return f"idle {int(seconds)} s"
    if seconds < 3600:
        return f"idle {int(seconds // 60)} min"
    if seconds < 86400:
        h, rest = divmod(int(seconds), 3600)
        return f"idle {h} h {rest // 60} min" if rest >= 60 else f"idle {h} h"
    return f"idle {int(seconds // 86400)} d"


def idle_text(m: ModelInfo, now: float) -> str:
    """The Idle column: the agent's idle clock, "n/a" when it cannot say."""
    return fmt_idle(idle_seconds(m, now), forward_seen=m.last_used is not None)


def _clock(epoch_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


def idle_tooltip(m: ModelInfo) -> str:
    """Where the idle clock counts from."""
    if m.idle_since is None:
        return ("Idle time unknown: the agent cannot see when this model is used (for "
                "example when it only runs through compiled code).")
    if m.last_used is None:
        return (f"No forward pass seen yet: idle since the agent first saw it "
                f"({_clock(m.idle_since)}).")
    return f"Idle since its last forward pass ({_clock(m.idle_since)})."


#: (words in the agent's blocker, what they mean), most specific first.
_BLOCKER_HELP = (
    ("train mode", "the model is in train mode (model.train()): an optimizer may step it "
                   "at any time"),
    ("training mode", "the model is in train mode (model.train()): an optimizer may step it "
                      "at any time"),
    ("optimizer step", "an optimizer stepped its parameters recently: it is training"),
    ("gradients present", "its parameters hold gradients: a backward pass or an optimizer "
                          "step may use them"),
    ("backward", "a backward pass ran through it recently: it is training"),
    ("autograd", "it was called with autograd on (no torch.no_grad) and its parameters "
                 "require grad: the graph of that call may still be waiting for its "
                 "backward, which reads these weights"),
    ("training", "the agent sees it training"),
    ("pinned", "you pinned it: pinned models are never unloaded automatically"),
    ("torch.compile", "it is used through torch.compile: compiled graphs hold their own "
                      "references to the weights, moving them is not safe"),
    ("torch.export", "it is used through torch.export: the exported program holds its own "
                     "references to the weights, moving them is not safe"),
    ("torchscript", "it is used through TorchScript: the scripted code holds its own "
                    "references to the weights, moving them is not safe"),
    ("torch.fx", "it is part of a torch.fx GraphModule that holds the same weights"),
    ("cuda graph", "it was captured into a CUDA graph: the graph's replays read the weights "
                   "at their addresses, moving them is not safe"),
    ("torch.func", "a torch.func transform holds its weights"),
    ("torch internals", "torch's own machinery holds its weights"),
    ("shares tensors", "it shares tensors with another model: moving them would pull them "
                       "out from under that model too"),
    ("meta", "it holds meta placeholders: its weights are held elsewhere (e.g. by an "
             "offload hook), so the agent cannot move them"),
    ("sparse", "it holds sparse or quantized tensors, which the agent cannot move"),
    ("quantized", "it holds sparse or quantized tensors, which the agent cannot move"),
    ("subclass", "it holds tensor subclasses, which the agent cannot move"),
    ("tensors on", "it holds tensors on a device the agent cannot move them from"),
    ("hooks", "the agent has no hooks on it: it cannot see its forwards or reload it on "
              "the next one"),
    ("not on a gpu", "its weights are not on a GPU: the process's idle timer leaves it be"),
)


def blocker_help(blocker: str) -> str | None:
    """What the agent's blocker means, in a sentence; None when unknown."""
    text = blocker.lower()
    return next((why for key, why in _BLOCKER_HELP if key in text), None)


def blocker_tooltip(blocker: str | None, any_unload: bool = False) -> str:
    """Why the model is (not) eligible for automatic unloading.  ``any_unload``: the
    agent refuses even a forced unload (its ``unload_blocker``)."""
    if not blocker:
        return ("Eligible for automatic unloading once idle (by the process's idle timer "
                "or the app's memory-pressure policy).")
    why = blocker_help(blocker)
    if any_unload or refuses_any_unload(blocker):
        text = f"Never unloaded, not even by hand: {blocker}."
    else:
        text = f"Not unloaded automatically: {blocker}."
    if why:
        text += f"\n{why[0].upper()}{why[1:]}."
    if overridable(blocker) and not any_unload:
        text += "\nYou can still unload it by hand (“Unload anyway”)."
    return text


def model_blocker_tooltip(m: ModelInfo) -> str:
    """``blocker_tooltip`` of what keeps ``m`` resident (its unload blocker first)."""
    if m.unload_blocker:
        return blocker_tooltip(m.unload_blocker, any_unload=True)
    return blocker_tooltip(m.auto_unload_blocker)


def model_note(m: ModelInfo) -> str:
    """One line for a selected model: what keeps it resident and its meta
    placeholders ("" when there is nothing to say)."""
    parts = []
    if m.unload_blocker:
        parts.append(f"Never unloaded: {m.unload_blocker}")
    elif m.auto_unload_blocker:
        what = "training evidence: " if m.auto_unload_blocker == m.training_evidence else ""
        parts.append(f"Not unloaded automatically: {what}{m.auto_unload_blocker}")
    if m.placeholder_bytes:
        parts.append(f"{fmt_bytes(m.placeholder_bytes)} of meta placeholders (weights held "
                     "elsewhere)")
    return "; ".join(parts)


def model_facts(m: ModelInfo) -> list[str]:
    """Lines about training and placeholders for the model's tooltip."""
    lines = []
    if m.training_evidence:
        lines.append(f"Training evidence: {m.training_evidence}")
    if m.requires_grad is not None:
        lines.append("requires grad (blocks nothing)" if m.requires_grad else "frozen (no grad)")
    if m.placeholder_bytes:
        lines.append(f"Meta placeholders: {fmt_bytes(m.placeholder_bytes, 2)} (weights held "
                     "elsewhere, not counted on any device)")
    if m.first_seen is not None:
        lines.append(f"First seen by the agent: {_clock(m.first_seen)}")
    return lines


# -- refusals -------------------------------------------------------------------------------------

#: What may happen when a model with this training evidence is unloaded anyway.
_FORCE_RISKS = (
    (("train mode", "training mode"),
     "The model is in train mode. If training continues while it is offloaded, the next "
     "forward pass waits for the weights to come back, and an optimizer step can fail with a "
     "device mismatch (its state stays on the GPU) or update a stale copy."),
    (("optimizer step",),
     "An optimizer stepped its parameters recently. A step while they are offloaded can fail "
     "with a device mismatch (the optimizer's state stays on the GPU) or update a stale copy."),
    (("gradients present",),
     "Its parameters hold gradients, which stay on the GPU; a backward pass or optimizer step "
     "while the weights are offloaded can fail or leave them inconsistent."),
    (("backward",),
     "A backward pass ran through it recently. Another one while it is offloaded waits for "
     "the weights to come back, and an optimizer step can fail with a device mismatch."),
)


def force_consequences(reason: str, name: str, to: str) -> str:
    """What may happen if ``name`` is unloaded despite ``reason`` (for the confirmation)."""
    text = reason.lower()
    risks = [risk for words, risk in _FORCE_RISKS if any(w in text for w in words)]
    lines = [f"The agent refused to unload {name}: {reason}.", "",
             *(risks or ["The agent sees the model training. If training continues while it "
                         "is offloaded, an optimizer step can fail with a device mismatch or "
                         "update a stale copy."])]
    where = "host memory" if to == "cpu" else "disk"
    lines += ["", f"The weights move to {where}; the next forward pass reloads them, which "
                  "takes time.  Unload anyway?"]
    return "\n".join(lines)


# -- GPU of a model ----------------------------------------------------------------------------



# -- one action -------------------------------------------------------------------------------------

@dataclass(eq=False)
class ModelAction:
    """One model action: unload / reload / pin of one model, or a process's idle TTL."""

    kind: str
    pid: int
    model: str | None = None  # model id (None for IDLE_TTL)
    name: str = ""  # model name for texts
    label: str = ""  # process label, "notebook.py (123)"
    to: str = "cpu"
    force: bool = False
    reason: str = "manual"
    pinned: bool | None = None
    seconds: float | None = None  # IDLE_TTL: None = off
    size: int | None = None  # model bytes (for texts while running)
    display_id: str | None = None  # the model's GPU
    baseline: int | None = None  # NVML bytes of the process on that GPU at the click
    gpu_before: int | None = None
    id: int = field(default_factory=lambda: next(_ids))
    started: float = field(default_factory=time.monotonic)
    # Filled in as it runs.
    result: ModelActionResult | None = None
    ttl_result: dict | None = None
    done_at: float | None = None
    # Filled in by measure().
    measured: bool = False
    released: int | None = None  # NVML bytes released by the process on its GPU
    gpu_released: int | None = None

    @property
    def key(self) -> tuple[int, str | None]:
        return (self.pid, self.model)

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def ok(self) -> bool:
        if self.kind == IDLE_TTL:
            return bool(self.ttl_result and self.ttl_result.get("ok", False))
        return bool(self.result and self.result.ok)

    @property
    def error(self) -> str | None:
        if not self.done or self.ok:
            return None
        if self.kind == IDLE_TTL:
            return str((self.ttl_result or {}).get("error") or "failed")
        r = self.result
        return (r.error if r is not None else None) or "failed"

    @property
    def refused(self) -> bool:
        r = self.result
        return bool(self.done and r is not None and not r.ok and (
            r.code == "refused" or (r.code is None and overridable(r.error))))

    @property
    def can_force(self) -> bool:
        return self.kind == UNLOAD and not self.force and self.refused and overridable(self.error)

    @property
    def event(self) -> ModelEvent | None:
        return self.result.event if self.result is not None else None

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        """NVML now against the click: True once measured (first snapshot at least
        ``settle_s`` after the action finished).  Unload and reload only."""
        if self.kind not in (UNLOAD, RELOAD) or self.measured or self.done_at is None:
            return self.measured
        now = time.monotonic() if now is None else now
        if now - self.done_at < settle_s:
            return False
        after = nvml_usage(snapshot, self.pid, self.display_id)
        self.released = None if self.baseline is None or after is None else self.baseline - after
        g_after = gpu_used(snapshot, self.display_id)
        self.gpu_released = (None if self.gpu_before is None or g_after is None
                             else self.gpu_before - g_after)
        self.measured = True
        return True

    # -- texts ------------------------------------------------------------------------------
    def who(self) -> str:
        return self.name or self.model or "model"

    def summary(self, with_process: bool = True) -> str:
        """One line for the status bar / the detail view."""
        prefix = f"{self.label}: " if with_process and self.label else ""
        name = self.who()
        if self.kind == IDLE_TTL:
            what = ("unload idle models after " + _minutes(self.seconds)
                    if self.seconds is not None else "idle unloading off")
            if not self.done:
                return f"{prefix}setting {what}…"
            if not self.ok:
                return f"{prefix}could not set idle unloading: {self.error}"
            return f"{prefix}{what}"
        if self.kind == PIN:
            verb = "Pinning" if self.pinned else "Unpinning"
            if not self.done:
                return f"{prefix}{verb} {name}…"
            if not self.ok:
                return f"{prefix}{verb.lower()} {name} failed: {self.error}"
            if self.pinned:
                return f"{prefix}pinned {name} (never unloaded automatically)"
            return f"{prefix}unpinned {name}"
        if self.kind == UNLOAD:
            to = target_text(self.to)
            if not self.done:
                return f"{prefix}unloading {name} to {to}…"
            if not self.ok:
                if self.refused:
                    return f"{prefix}{name} not unloaded: {self.error}"
                return f"{prefix}unloading {name} failed: {self.error}"
            ev = self.event
            parts = [f"moved {fmt_bytes(ev.bytes_moved if ev else None)}",
                     f"allocator released {fmt_bytes(ev.bytes_released if ev else None)}",
                     self._nvml_text()]
            if ev is not None and ev.seconds is not None:
                parts.append(seconds_text(ev.seconds))
            forced = " (forced)" if self.force else ""
            return f"{prefix}unloaded {name} to {to}{forced}: " + ", ".join(parts)
        # RELOAD
        if not self.done:
            return f"{prefix}reloading {name}…"
        if not self.ok:
            return f"{prefix}reloading {name} failed: {self.error}"
        ev = self.event
        parts = [f"moved {fmt_bytes(ev.bytes_moved if ev else None)}"]
        if ev is not None and ev.seconds is not None:
            parts.append(seconds_text(ev.seconds))
        if self.measured and self.released is not None:
            parts.append(f"NVML shows {fmt_bytes(max(0, -self.released))} more in use")
        return f"{prefix}reloaded {name}: " + ", ".join(parts)

    def _nvml_text(self) -> str:
        if not self.measured:
            return "measuring with NVML…"
        value = self.released
        if value is None:
            return "NVML release unknown"
        if value <= 0:
            return "NVML shows nothing released"
        return f"NVML shows {fmt_bytes(value)} released"


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "off"
    minutes = seconds / 60
    return f"{minutes:g} min" if minutes < 120 or minutes % 60 else f"{minutes / 60:g} h"






# -- runner -------------------------------------------------------------------------------------

class _Relay(QObject):
    finished = Signal(object)  # ModelAction


class _Job(ActionJob):
    def run(self) -> None:  # on a pool thread
        a = self._action
        d = self._directory
        try:
            if d is None:
                raise RuntimeError("no agent connection")
            if a.kind == IDLE_TTL:
                res = d.set_idle_unload(a.pid, a.seconds)
                a.ttl_result = dict(res) if isinstance(res, dict) else {
                    "ok": False, "error": f"unexpected answer {res!r}"}
            else:
                if a.kind == UNLOAD:
                    res = d.unload(a.pid, a.model, to=a.to, force=a.force, reason=a.reason,
                                   timeout_s=self._timeout_s)
                elif a.kind == RELOAD:
                    res = d.reload(a.pid, a.model, timeout_s=self._timeout_s)
                else:
                    res = d.pin(a.pid, a.model, bool(a.pinned))
                if not isinstance(res, ModelActionResult):
                    raise TypeError(f"unexpected answer {res!r}")
                a.result = res
        except Exception as exc:  # shown, never raised
            text = error_text(exc)
            if a.kind == IDLE_TTL:
                a.ttl_result = {"ok": False, "error": text}
            else:
                a.result = ModelActionResult(a.pid, a.model or "", False, error=text)
        finally:
            self._relay.finished.emit(a)


class ModelActionRunner(ActionRunner):
    """Runs model actions on a thread pool; signals arrive on the GUI thread."""

    def __init__(self, directory: DirectoryLike, parent: QObject | None = None,
                 timeout_s: float = 300.0, settle_s: float = 0.5) -> None:
        # Moves of different models may overlap (different processes); a pin or
        # TTL change must not wait behind a multi-second unload.
        super().__init__(directory, parent, timeout_s, settle_s, threads=4)

    def pending(self, pid: int, model: str | None) -> ModelAction | None:
        for a, _ in self._running.values():
            if a.pid == pid and a.model == model:
                return a
        return None

    def busy_models(self) -> set[tuple[int, str | None]]:
        return {a.key for a, _ in self._running.values()}

    def submit(self, action: ModelAction) -> bool:
        """Start ``action``; False (not started) while the same model/TTL is busy."""
        if action.key in self.busy_models():
            return False
        self._start(action, _Job, _Relay(self))
        return True


__all__ = ["IDLE_TTL", "PIN", "RELOAD", "UNLOAD", "ModelAction", "ModelActionRunner",
           "blocker_help", "blocker_tooltip", "event_text", "fmt_idle", "force_consequences",
           "gpu_of_device", "idle_seconds", "idle_text", "idle_tooltip", "is_moving",
           "model_blocker_tooltip", "model_device", "model_facts", "model_note", "overridable",
           "state_text"]
