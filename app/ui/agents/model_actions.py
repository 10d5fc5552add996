"""The texts of model actions (unload, reload, pin, idle TTL) and of the model list.

The action itself is the controller's record
(:class:`app.core.control.records.ModelAction`, re-exported here): it runs on
the controller's workers and carries the NVML figures taken at the click, so
:func:`model_summary` can say what the driver *shows* was released, like the
free-cache texts do.

Also here: the Qt-free texts of the model list (state badge, idle time,
blockers) and of the refusals an agent answers with.  The agent decides what
may be unloaded; these texts only explain its words (``app.core.agents.unload_reasons``
says which ones ``force`` overrides: training evidence only).
"""

from __future__ import annotations

import time

from app.core.agents.events import target_text
from app.core.agents.types import ModelInfo
from app.core.agents.unload_reasons import overridable, refuses_any_unload
from app.core.control.measure import model_action_text
from app.core.control.records import IDLE_TTL, PIN, RELOAD, UNLOAD, ModelAction
from app.core.units import NA, fmt_bytes, fmt_duration
from app.ui.agents.server_texts import served, server_summary

#: A model whose last forward is at most this old counts as "in use".
IN_USE_S = 10.0


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
    """``in use``, ``idle 45 s``, ``idle 12 min 05 s``, ``idle 2 h 17 min``; ``n/a`` when
    unknown.  Only a model seen in a forward is ``in use``: one never run is idle."""
    if seconds is None:
        return NA
    if seconds < IN_USE_S and forward_seen:
        return "in use"
    return f"idle {fmt_duration(seconds)}"


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
        lines.append(f"Meta placeholders: {fmt_bytes(m.placeholder_bytes)} (weights held "
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


# -- one action ---------------------------------------------------------------------------------

def model_summary(action: ModelAction, with_process: bool = True) -> str:
    """One line for the status bar / the detail view."""
    prefix = f"{action.label}: " if with_process and action.label else ""
    name = action.who()
    if action.kind == IDLE_TTL:
        what = ("unload idle models after " + _minutes(action.seconds)
                if action.seconds is not None else "idle unloading off")
        if not action.done:
            return f"{prefix}setting {what}…"
        if not action.ok:
            return f"{prefix}could not set idle unloading: {action.error}"
        return f"{prefix}{what}"
    if action.kind == PIN:
        verb = "Pinning" if action.pinned else "Unpinning"
        if not action.done:
            return f"{prefix}{verb} {name}…"
        if not action.ok:
            return f"{prefix}{verb.lower()} {name} failed: {action.error}"
        if action.pinned:
            return f"{prefix}pinned {name} (never unloaded automatically)"
        return f"{prefix}unpinned {name}"
    if served(action):  # a model server's API unloaded it and measured the outcome
        return server_summary(action, prefix)
    if action.kind == UNLOAD:
        to = target_text(action.to)
        if not action.done:
            return f"{prefix}unloading {name} to {to}…"
        if not action.ok:
            if action.refused:
                return f"{prefix}{name} not unloaded: {action.error}"
            return f"{prefix}unloading {name} failed: {action.error}"
        ev = action.event
        return prefix + model_action_text(UNLOAD, name, action.figures, action.to,
                                          ev.seconds if ev is not None else None, action.force)
    # RELOAD
    if not action.done:
        return f"{prefix}reloading {name}…"
    if not action.ok:
        if action.refused:  # "not offloaded (it is resident)": nothing was wrong
            return f"{prefix}{name} not reloaded: {action.error}"
        return f"{prefix}reloading {name} failed: {action.error}"
    ev = action.event
    return prefix + model_action_text(RELOAD, name, action.figures, None,
                                      ev.seconds if ev is not None else None)


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "off"
    minutes = seconds / 60
    return f"{minutes:g} min" if minutes < 120 or minutes % 60 else f"{minutes / 60:g} h"


__all__ = ["blocker_help", "blocker_tooltip", "fmt_idle", "force_consequences", "idle_seconds",
           "idle_text", "idle_tooltip", "is_moving", "model_blocker_tooltip",
           "model_device", "model_facts", "model_note", "model_summary", "state_text"]
