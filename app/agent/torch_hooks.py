"""A post-import hook for ``torch``: run a callback in the importing thread
right after torch's module finished executing.

A ``sys.meta_path`` finder delegates to the finders after it, then wraps the
found loader's ``exec_module`` on that loader instance only (the spec and
loader objects stay torch's own).  Once torch is imported the finder goes
inert and is dropped from ``sys.meta_path`` by rebinding the list (an
in-place removal could make another thread's concurrent import skip a finder).
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from . import log as _log


class _TorchFinder:
    def __init__(self, callback: Callable[[Any], None]) -> None:
        self.callback = callback
        self.done = False
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch" or self.done or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None) if spec is not None else None
            original = getattr(loader, "exec_module", None)
            if original is None:
                return spec
            finder = self

            def exec_module(module: Any) -> None:
                try:
                    original(module)
                finally:
                    try:
                        del loader.exec_module  # back to the class's method
                    except Exception:
                        pass
                if sys.modules.get("torch") is module or "torch" in sys.modules:
                    finder._fire(module)

            try:
                loader.exec_module = exec_module
            except Exception:
                return spec  # loader does not take attributes: start() covers it later
            return spec
        except Exception:
            _log.log_exc("torch import hook: find_spec failed")
            return None
        finally:
            self._local.busy = False

    def _fire(self, module: Any) -> None:
        if self.done:
            return
        self.done = True
        try:
            sys.meta_path = [f for f in sys.meta_path if f is not self]
        except Exception:
            pass
        try:
            self.callback(sys.modules.get("torch", module))
        except Exception:
            _log.log_exc("on_torch_imported failed")


_finder: _TorchFinder | None = None
_lock = threading.Lock()


def install(callback: Callable[[Any], None]) -> bool:
    """Call ``callback(torch)`` in the importing thread once torch is imported.

    Returns False (and does nothing) if torch is already imported.
    """
    global _finder
    with _lock:
        if "torch" in sys.modules:
            return False
        if _finder is not None and not _finder.done:
            _finder.callback = callback
            return True
        _finder = _TorchFinder(callback)
        sys.meta_path.insert(0, _finder)
        return True


def uninstall() -> None:
    global _finder
    with _lock:
        finder = _finder
        _finder = None
        if finder is not None:
            finder.done = True
            try:
                sys.meta_path = [f for f in sys.meta_path if f is not finder]
            except Exception:
                pass
