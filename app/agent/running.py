"""What "running code of the model" means, read from the threads' stacks.

``ModelGuard.running_threads``: a thread is inside the model while one of its frames
is ``Module._call_impl`` of the model or of any module below it (a deeper
submodule called directly included), or a method of one of their classes
called directly (``generate``, ``vae.decode``).  An unload sets UNLOADING
first (new calls wait in the hook) and then waits until no thread is inside;
a forward that passed its hook before that has its frame on the stack already.
"""

from __future__ import annotations

import gc
import sys
import weakref
from types import FrameType
from typing import Any

MAX_STACK_DEPTH = 4000

#: torch's frames of a Module call (``model(x)``): their ``self`` is the module.
CALL_FRAMES = frozenset(("_call_impl", "_wrapped_call_impl"))


def current_frames() -> dict[int, FrameType]:
    """``sys._current_frames()``, safe on CPython 3.11 and older.

    There it allocates while holding the runtime's head lock; a garbage
    collection started by that allocation can free a tensor, whose finaliser
    (torch's) takes the GIL through a path that needs the same lock, and the
    whole process hangs (CPython gh-106883, fixed in 3.12).  The collector is
    paused for the call, and only when it was running: a host that turned it
    off keeps it off.
    """
    if sys.version_info >= (3, 12) or not gc.isenabled():
        return sys._current_frames()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        gc.enable()


class Scope:
    """What "running code of the model" means for one unload: a Module call
    of a module of its subtree (told exactly, from the ``self`` of torch's
    call frames), or a method of one of their classes that is not itself
    the forward of a call (``generate``, ``decode``, ``encode_text``: told
    from the code object alone, since reading a frame's locals on 3.11 and
    3.12 pins them until the frame returns; the same method running on
    another instance of the class counts too, which only delays)."""

    __slots__ = ("ids", "codes")

    def __init__(self, modules: list) -> None:
        self.ids = {id(m) for m in modules}
        self.codes = _method_codes({type(m) for m in modules})

    def runs(self, frame: Any) -> str | None:
        """The function of the model the stack from ``frame`` runs, or None."""
        depth = 0
        while frame is not None and depth < MAX_STACK_DEPTH:
            code = frame.f_code
            if code.co_name in CALL_FRAMES:
                try:
                    this = frame.f_locals.get("self")  # torch's frame: its locals live anyway
                except Exception:
                    return code.co_name  # cannot tell: assume it is running
                if id(this) in self.ids:
                    return "%s.forward" % type(this).__name__
            elif code in self.codes:
                back = frame.f_back
                if back is not None and back.f_code.co_name == "inner":  # _call_impl's closure
                    back = back.f_back
                if back is None or back.f_code.co_name not in CALL_FRAMES:
                    # not a forward: a method called directly ("Pipe.decode")
                    return code.co_qualname.rsplit(".<locals>.", 1)[-1]
            frame = frame.f_back
            depth += 1
        return None


_CODES_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _method_codes(types: set) -> set:
    """Code objects of the methods the classes define themselves (torch's
    own classes excluded: their methods run on every model)."""
    out: set = set()
    for cls in types:
        try:
            codes = _CODES_CACHE.get(cls)
        except TypeError:
            codes = None
        if codes is None:
            codes = set()
            for klass in getattr(cls, "__mro__", ()):
                mod = getattr(klass, "__module__", "") or ""
                if klass is object or mod == "torch" or mod.startswith("torch."):
                    continue
                for value in list(vars(klass).values()):
                    _add_codes(value, codes)
            try:
                _CODES_CACHE[cls] = codes
            except TypeError:
                pass
        out |= codes
    return out


def _add_codes(value: Any, codes: set) -> None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    for _ in range(8):  # decorators (``torch.no_grad()``, functools.wraps) keep __wrapped__
        code = getattr(value, "__code__", None)
        if code is not None:
            codes.add(code)
        value = getattr(value, "__wrapped__", None)
        if value is None:
            break
