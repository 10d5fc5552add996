"""VRAM Steward agent entry point (the only importable name users see).

Loads the agent package from the parent directory under the private name
``_vram_steward_agent`` so a user's own top-level ``app`` package never clashes.
"""

import os as _os
import sys as _sys

_PACKAGE = "_vram_steward_agent"


def _load():
    module = _sys.modules.get(_PACKAGE)
    if module is not None:
        return module
    import importlib.util
    pkg_dir = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        _PACKAGE, _os.path.join(pkg_dir, "__init__.py"), submodule_search_locations=[pkg_dir])
    module = importlib.util.module_from_spec(spec)
    _sys.modules[_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        _sys.modules.pop(_PACKAGE, None)
        raise
    return module


try:
    _agent = _load()
except Exception:  # never break the host's import
    _agent = None


def start(**options):
    if _agent is None:
        return False
    return _agent.start(**options)


def stop():
    if _agent is not None:
        _agent.stop()


def is_running():
    return bool(_agent is not None and _agent.is_running())


def load_ipython_extension(ipython):
    if _agent is not None:
        _agent.load_ipython_extension(ipython)


def unload_ipython_extension(ipython):
    if _agent is not None:
        _agent.unload_ipython_extension(ipython)


__version__ = getattr(_agent, "__version__", "0.1.0")
