"""Post-import hooks for ``torch`` and ``torch._dynamo``: run a callback in
the importing thread right after the module finished executing.

A ``sys.meta_path`` finder delegates to the finders after it, then wraps the
found loader's ``exec_module`` on that loader instance only (the spec and
loader objects stay torch's own).  Once torch is imported the finder goes
inert and is dropped from ``sys.meta_path`` by rebinding the list (an
in-place removal could make another thread's concurrent import skip a finder).
One finder per module name.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from . import log as _log


class _Finder:
    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback
        self.done = False
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self.done or getattr(self._local, "busy", False):
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
            loader: Any = getattr(spec, "loader", None) if spec is not None else None
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
                if sys.modules.get(finder.name) is module or finder.name in sys.modules:
                    finder._fire(module)

            try:
                loader.exec_module = exec_module
            except Exception:
                return spec  # loader does not take attributes: start() covers it later
            return spec
        except Exception:
            _log.log_exc("%s import hook: find_spec failed" % self.name)
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
            self.callback(sys.modules.get(self.name, module))
        except Exception:
            _log.log_exc("post-import callback for %s failed" % self.name)


_finders: dict[str, _Finder] = {}
_lock = threading.Lock()


def install(callback: Callable[[Any], None], name: str = "torch") -> bool:
    """Call ``callback(module)`` in the importing thread once ``name`` is imported.

    Returns False (and does nothing) if it is already imported.
    """
    with _lock:
        if name in sys.modules:
            return False
        finder = _finders.get(name)
        if finder is not None and not finder.done:
            finder.callback = callback
            return True
        finder = _finders[name] = _Finder(name, callback)
        sys.meta_path.insert(0, finder)
        return True


def uninstall() -> None:
    with _lock:
        finders = list(_finders.values())
        _finders.clear()
        for finder in finders:
            finder.done = True
        try:
            sys.meta_path = [f for f in sys.meta_path if not any(f is x for x in finders)]
        except Exception:
            pass
