"""May this model be unloaded?  Decided from evidence, never from ``requires_grad``.

Every Hugging Face ``from_pretrained`` model and every diffusers pipeline
keeps ``requires_grad=True`` on its parameters in eval mode, so that flag says
nothing.  A model counts as **training** when there is evidence of it:

* it is in train mode (``model.training``);
* its parameters hold gradients;
* an optimizer stepped its parameters within ``TRAINING_WINDOW_S`` (torch's
  global optimizer step hook tells);
* gradients were seen on it within ``TRAINING_WINDOW_S`` (a backward pass);
* it was called with autograd on (not under ``no_grad`` / ``inference_mode``)
  and its parameters require grad, within ``TRAINING_WINDOW_S``: the graph of
  that call may still be waiting for its backward, which reads the weights.

Training evidence refuses an unload unless ``force`` (manual only) and keeps
the model from ever being unloaded automatically.

Some models are never unloaded, force or not (``unload_blocker``): weights
also reached by compiled, exported or traced code (torch.compile, torch.export,
torch.fx, TorchScript), tensors shared with another model, meta placeholders
(weights held elsewhere), tensors the manager cannot move, the packs of
quantized layers (torch.ao dynamic or static quantization: torch's own
objects, which no copy brings back as they were), no hooks (the one reason
why: ``placement.Placement.hookless``), a model called while a CUDA graph was
being captured (the graph's replays call no hook and read the weights at
their addresses).

Automatically (the idle timer, the app's memory-pressure policy) a model
must also not be pinned, and for the idle timer its weights must be on a GPU.
Its idle time counts from the last call of the model or of one of its direct
parts, or, before any, from when the agent first saw it.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from . import figures as _fig
from . import placement, sharing
from .guard import slot_of
from .step_memory import StepMemory
from .storage import devices

TRAINING_WINDOW_S = 600.0

#: Short blocker label -> the sentence a refused unload carries.
REFUSALS = {
    "torch.compile": "used through torch.compile: its compiled code holds the weights "
                     "where they are (moving them would break or recompile it)",
    "torch.export": "exported with torch.export: the exported program holds the same "
                    "weights",
    "torch.fx": "part of a torch.fx GraphModule that holds the same weights",
    "TorchScript": "traced or scripted with TorchScript: the script module holds the same "
                   "weights",
    "CUDA graph": "captured into a CUDA graph: its replays read the weights at their "
                  "addresses",
    "torch.func": "held by a torch.func transform",
    "torch internals": "held by torch's own machinery",
    sharing.BLOCKER: sharing.REFUSAL,
    "no agent hooks (%s)" % placement.HOOKS_OFF:
        "the agent's hooks are off (VRAM_STEWARD_LAST_USED=0 or start(last_used=False)): "
        "it would not see the model's next call to bring it back",
    "no agent hooks (%s)" % placement.OWN_PRE_HOOKS:
        "the agent has no hooks on it: it already had forward pre-hooks of its own when "
        "the agent met it, and the agent places its hook only on a module without any",
    "no agent hooks (%s)" % placement.MODEL_GONE:
        "the agent has no hooks on it: it was built as a part of another model, which "
        "held the hooks, and that model is gone; the agent places hooks only while a "
        "model is built (a model called once before it is wrapped keeps its own)",
    "no agent hooks (%s)" % placement.NOT_SEEN_BUILT:
        "the agent has no hooks on it: it did not see it built (a copy of a part of a "
        "model, or weights set without torch's registration), and it places hooks only "
        "while a model is built",
}
#: What a blocker naming the packs of quantized layers goes on to say.
PACKED_REFUSAL = ("torch keeps them packed in objects of its own, which the agent cannot "
                  "move and bring back as they were")


def ago(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3 h``: one style for the agent's texts."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min" % (seconds // 60)
    return "%d h" % (seconds // 3600)


class OptimizerSteps:
    """When each optimizer last stepped (torch's global step post-hook), how
    many steps were taken, and live bytes after them (``memory``)."""

    def __init__(self) -> None:
        self._stepped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._params: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.compiling: Any = None
        self.memory = StepMemory()

    @property
    def count(self) -> int:
        """Optimizer steps taken in this process (all optimizers)."""
        return self.memory.count

    def to_json(self) -> dict[str, Any] | None:
        """The report's ``"steps"`` (``step_memory``); None: no step hook."""
        return self.memory.to_json()

    def on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The hook itself (the user's thread, every step): O(1), never raises."""
        try:
            compiling = self.compiling
            if compiling is not None and compiling():
                return None
            self.memory.after_step(optimizer)  # never raises
            self._stepped[optimizer] = time.time()
        except Exception:
            pass
        return None

    def last_step(self, tensor_ids: set, now: float) -> float | None:
        """The latest step within the window of an optimizer holding any of
        ``tensor_ids`` (agent thread)."""
        best = None
        for opt, when in list(self._stepped.items()):
            if now - when > TRAINING_WINDOW_S or (best is not None and when <= best):
                continue
            if not tensor_ids.isdisjoint(self._param_ids(opt)):
                best = when
        return best

    def _param_ids(self, opt: Any) -> set:
        try:
            groups = list(opt.param_groups)
            key = (len(groups), sum(len(g.get("params", ())) for g in groups))
            cached = self._params.get(opt)
            if cached is not None and cached[0] == key:
                return cached[1]
            ids = {id(p) for g in groups for p in list(g.get("params", ()))}
            self._params[opt] = (key, ids)
            return ids
        except Exception:
            return set()


def has_grad(module: Any) -> bool:
    """Any parameter holding a gradient (stops at the first)."""
    for m in _fig.subtree(module):
        for p in _fig.values(m, "_parameters"):
            if p is not None and _fig.grad_of(p) is not None:
                return True
    return False


def training_evidence(module: Any, guard: Any, figures: dict, steps: OptimizerSteps,
                      now: float | None = None) -> str | None:
    """Why the model looks like it is training, or None."""
    now = time.time() if now is None else now
    if module.__dict__.get("training", False):
        return "train mode"
    if figures.get("has_grad"):
        return "gradients present"
    stepped = steps.last_step(figures.get("tensor_ids") or set(), now)
    if stepped is not None:
        return "optimizer step %s ago" % ago(now - stepped)
    seen = getattr(guard, "grad_seen", None)
    if seen is not None and now - seen <= TRAINING_WINDOW_S:
        return "backward %s ago" % ago(now - seen)
    call = getattr(guard, "grad_call", None)
    if call is not None and figures.get("requires_grad") and now - call <= TRAINING_WINDOW_S:
        # its outputs may still hold a graph whose backward reads these weights
        return "forward with autograd %s ago" % ago(now - call)
    return None


def unload_blocker(module: Any, guard: Any, tracker: Any, figures: dict) -> str | None:
    """Why no unload (forced or not) may touch this model, or None."""
    if guard is None or not tracker.last_used_enabled or slot_of(module) is None:
        kind = placement.internal_kind(module)
        if kind in REFUSALS:
            return kind  # torch's machinery holding weights of its own
        return "no agent hooks (%s)" % tracker.placement.hookless(module)
    mark = tracker.marks(module, figures)
    if mark is not None:
        return mark
    if figures.get("placeholder_bytes"):
        return "meta placeholders"
    unmovable = figures.get("unmovable")
    if unmovable:
        return unmovable
    shared = tracker.shared_with(module)
    if shared is not None:
        return "shares tensors with %s" % shared
    return sharing.blocker(module, figures)


def refusal(blocker: str) -> str:
    """The sentence for a refused unload."""
    if blocker in REFUSALS:
        return REFUSALS[blocker]
    if blocker == "meta placeholders":
        return "holds meta tensors (placeholders for weights held elsewhere)"
    if blocker.startswith(_fig.PACKED):
        return "holds %s: %s" % (blocker, PACKED_REFUSAL)
    return "holds " + blocker if not blocker.startswith("shares") else blocker


def on_gpu(module: Any, guard: Any) -> bool:
    """The idle timer applies only to models with weights on a GPU (home device)."""
    rec = guard.offload if guard is not None else None
    if rec is not None:
        return any(devices.is_cuda(g.device) for g in rec.groups)
    return any(devices.is_cuda(t.device) for t in _fig.tensors(module))

