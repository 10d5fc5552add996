"""VRAM Steward's in-process agent: reports the CUDA caching allocator and the
models a PyTorch process holds to the VRAM Steward app over a local socket.

Standard library only, Python 3.9+.  Never imports torch, never initialises
CUDA, never raises into user code (its own errors go to ``agent.log`` in
``$XDG_STATE_HOME/vram-steward``).  ``VRAM_STEWARD_AGENT=0`` disables it.

Start it from your own code::

    import sys
    sys.path.insert(0, "<repo>/app/agent/_bootstrap")
    import vram_steward_agent
    vram_steward_agent.start()

or in Jupyter / IPython, after the same ``sys.path`` line::

    %load_ext vram_steward_agent

or launch a command with it: ``python main.py run -- python train.py``
(puts ``_bootstrap`` first on PYTHONPATH; its ``sitecustomize`` starts the agent).

Forked children (e.g. DataLoader workers with the fork start method) close the
inherited sockets and run no agent; a child that later uses CUDA has no agent:
it still appears in the app from NVML, and can call ``start()`` itself.
multiprocessing spawn/forkserver children do not start one either.

``start(**options)`` options (mainly for tests): runtime_dir, transport
("unix"/"tcp"), partial_timeout, idle_timeout, max_connections,
max_subscribers, grace_period, backlog, max_output, tick_interval,
registry_interval, last_used (the per-model hooks that see a model's calls
and bring an unloaded model back; ``VRAM_STEWARD_LAST_USED=0`` also turns
them off, and with them unloading), force (start even in a multiprocessing
child).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def start(**options: Any) -> bool:
    """Start the agent (idempotent, thread-safe); True if one is running. Never raises."""
    try:
        from . import runtime
        return runtime.start(**options)
    except BaseException:
        return False


def stop() -> None:
    """Stop the agent and remove its registry entry. Never raises."""
    try:
        from . import runtime
        runtime.stop()
    except BaseException:
        pass


def is_running() -> bool:
    try:
        from . import runtime
        return runtime.is_running()
    except BaseException:
        return False


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext vram_steward_agent``."""
    start()


def unload_ipython_extension(ipython: Any) -> None:
    stop()
