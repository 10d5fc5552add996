"""The agent's few points of contact with torch, set up on the user's thread.

* torch's global module registration hooks (``models.install_global_hooks``);
* torch's global optimizer step post-hook: when each optimizer last stepped,
  evidence that its parameters are training (``eligibility``), and the step
  count with live bytes after steps (``step_memory``);
* ``torch.jit.script`` (and ``torch.jit._script.script``) wrapped: TorchScript
  compiles every forward hook of the module it scripts and would reject the
  agent's Python hooks, so for a module the wrapper lifts them for the
  duration of the call and puts the same hooks back; an offloaded model is
  brought back first and a scripted model is marked (the script module shares
  its weights).  Anything else (a class, a function) goes straight through,
  one frame further up for TorchScript's name resolution;
* a dynamo compile-start callback (``torch._dynamo.callback_handler``), from
  the moment torch._dynamo is imported: offloaded models are brought back
  before dynamo traces anything, so compiled code always sees weights at home
  (a compiled model is then never unloaded again).

Everything else passes through untouched, errors included.  Installed once
per process, never removed.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from . import guard as _guard
from . import log as _log
from . import model_guard as _mg
from . import models as _models

_STEP_HOOK: list = []  # the OptimizerSteps whose on_step is registered (once per process)
_JIT_DONE = False
_DYNAMO_DONE = False


def on_torch(torch: Any, tracker: Any, steps: Any) -> None:
    """Everything the agent needs from torch (the user's thread)."""
    tracker.use_torch(torch)
    tracker.hooks = _models.install_global_hooks(torch)
    steps.compiling = _models.compiling_fn(torch)
    _install_step_hook(torch, steps)
    if tracker.placement.enabled:  # without the agent's hooks there is nothing to lift
        _install_jit_guard(torch)
    if "torch._dynamo" in sys.modules:
        on_dynamo(sys.modules["torch._dynamo"])


def _install_step_hook(torch: Any, steps: Any) -> None:
    if _STEP_HOOK:
        _STEP_HOOK[0] = steps  # a restarted agent: the registered hook forwards to it
        steps.memory.torch = torch
        return
    register = getattr(sys.modules.get("torch.optim.optimizer"),
                       "register_optimizer_step_post_hook", None)
    if not callable(register):
        return
    _STEP_HOOK.append(steps)

    def step_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        current = _STEP_HOOK[0] if _STEP_HOOK else None
        if current is not None:
            current.on_step(optimizer, args, kwargs)
        return None

    try:
        register(step_hook)
        steps.memory.torch = torch  # counting from now on: the report says so
    except Exception:
        _STEP_HOOK.clear()
        _log.log_exc("registering the optimizer step hook failed")


# -- TorchScript ---------------------------------------------------------------------

def _lift(obj: Any) -> list:
    """Take the agent's hooks off ``obj``'s module tree; returns what to put back.

    An offloaded model in the tree is brought back first (the script module
    shares its weights); a failed reload raises, as the call needs them."""
    modules = getattr(obj, "modules", None)
    if not callable(modules):
        return []
    found = [(m, hook) for m in modules() if (hook := _guard.hook_of(m)) is not None]
    for _, hook in found:
        g = hook.slot.guard
        if g is not None and g.state is not _mg.RESIDENT:
            g.make_resident("compile")
    lifted: list = []
    for m, hook in found:
        try:
            _guard.uninstall(m, hook.slot)
            lifted.append((m, hook))
        except Exception as exc:
            _log.log("lifting a hook for torch.jit.script failed: %r" % (exc,))
    return lifted


def _restore(lifted: list, scripted: bool) -> None:
    """Put the same hooks back; mark the models a script module now shares."""
    tracker = _models._ACTIVE
    for m, hook in lifted:
        try:
            _guard.register(m, hook.slot, hook)
        except Exception as exc:
            _log.log("restoring a hook after torch.jit.script failed: %r" % (exc,))
        if scripted and tracker is not None:
            tracker.placement.marks.setdefault(m, "TorchScript")


def _install_jit_guard(torch: Any) -> None:
    global _JIT_DONE
    if _JIT_DONE:
        return
    _JIT_DONE = True
    jit: Any = getattr(torch, "jit", None)
    original = getattr(jit, "script", None)
    if original is None or getattr(original, "_vram_steward_original", None) is not None:
        return
    module_type = torch.nn.Module

    def script(obj: Any, optimize: Any = None, _frames_up: int = 0, *args: Any,
               **kwargs: Any) -> Any:
        # TorchScript resolves a class's names from its caller's frame: this
        # wrapper is one frame more.
        if not isinstance(obj, module_type):
            return original(obj, optimize, _frames_up + 1, *args, **kwargs)
        lifted = _lift(obj)
        scripted = False
        try:
            result = original(obj, optimize, _frames_up + 1, *args, **kwargs)
            scripted = True
            return result
        finally:
            _restore(lifted, scripted)

    try:
        functools.update_wrapper(script, original)
        script._vram_steward_original = original  # type: ignore[attr-defined]
        jit.script = script
        inner: Any = sys.modules.get("torch.jit._script")
        if inner is not None and getattr(inner, "script", None) is original:
            inner.script = script
    except Exception as exc:  # a read-only torch.jit: keep the hooks, log it
        _log.log("could not guard torch.jit.script: %r" % (exc,))


# -- dynamo ----------------------------------------------------------------------------

def on_dynamo(dynamo: Any) -> None:
    """Register the compile-start callback (the importing thread, once)."""
    global _DYNAMO_DONE
    if _DYNAMO_DONE:
        return
    handler = getattr(dynamo, "callback_handler", None)
    register = getattr(handler, "register_start_callback", None)
    if not callable(register):
        return
    _DYNAMO_DONE = True
    try:
        register(_before_compile)
    except Exception:
        _log.log_exc("registering the compile-start callback failed")


def _before_compile(*args: Any) -> None:
    """Dynamo is about to trace: bring every offloaded model back.  Never raises."""
    try:
        for g in _offloaded_guards():
            try:
                g.make_resident("compile")
            except Exception:
                _log.log_exc("reload before compilation failed")
    except BaseException:
        pass


def _offloaded_guards() -> list:
    for _ in range(3):
        try:
            return [g for g in list(_mg._ALL_GUARDS) if g.state is not _mg.RESIDENT]
        except RuntimeError:  # the set changed size while being copied
            continue
    return []
