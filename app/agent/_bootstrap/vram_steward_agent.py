"""VRAM Steward agent entry point (the only importable name users see).

Loads the agent package from the parent directory under the private name
``_vram_steward_agent`` so a user's own top-level ``app`` package never clashes.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from types import ModuleType as _ModuleType
from typing import Any as _Any

_PACKAGE = "_vram_steward_agent"


def _load() -> _ModuleType:
    module = _sys.modules.get(_PACKAGE)
    if module is not None:
        return module
    import importlib.util
    pkg_dir = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        _PACKAGE, _os.path.join(pkg_dir, "__init__.py"), submodule_search_locations=[pkg_dir])
    if spec is None or spec.loader is None:
        raise ImportError("no agent package in %s" % pkg_dir)
    module = importlib.util.module_from_spec(spec)
    _sys.modules[_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _sys.modules.pop(_PACKAGE, None)
        raise
    return module


_agent: _ModuleType | None
try:
    _agent = _load()
except Exception:  # never break the host's import
    _agent = None


def start(**options: _Any) -> bool:
    if _agent is None:
        return False
    return _agent.start(**options)


def stop() -> None:
    if _agent is not None:
        _agent.stop()


def is_running() -> bool:
    return bool(_agent is not None and _agent.is_running())


def load_ipython_extension(ipython: _Any) -> None:
    if _agent is not None:
        _agent.load_ipython_extension(ipython)


def unload_ipython_extension(ipython: _Any) -> None:
    if _agent is not None:
        _agent.unload_ipython_extension(ipython)


__version__ = getattr(_agent, "__version__", "0.1.0")
