"""The agent's lifecycle: one per process, started from the user's thread.

Every public function here is wrapped: nothing raises into user code.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import (
    eligibility,
    integrations,
    introspect,
    models,
    paths,
    protocol,
    recording,
    registry,
    torch_hooks,
)
from . import log as _log
from . import manager as _manager
from .errors import BadParams
from .server import Options, Server

AGENT_VERSION = "0.1.0"
REGISTRY_INTERVAL_S = 60.0

_SERVER_OPTIONS = ("partial_timeout", "idle_timeout", "max_connections", "max_output",
                   "tick_interval", "max_subscribers", "grace_period", "backlog")
_OPTION_NAMES = {"runtime_dir", "transport", "registry_interval", "last_used", "force",
                 *_SERVER_OPTIONS}

_lock = threading.Lock()
_agent: Agent | None = None
_atexit_registered = False


def multiprocessing_child() -> bool:
    """True in a multiprocessing spawn/forkserver child or helper process."""
    argv = getattr(sys, "orig_argv", None) or ([sys.executable] + list(sys.argv))
    argv = [str(a) for a in argv]
    if "--multiprocessing-fork" in argv:
        return True
    joined = " ".join(argv)
    markers = ("from multiprocessing.spawn import spawn_main", "multiprocessing.forkserver",
               "multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker")
    return any(m in joined for m in markers)


class Agent:
    def __init__(self, options: dict[str, Any]) -> None:
        self.pid = os.getpid()
        self.options = options
        env_last_used = os.environ.get("VRAM_STEWARD_LAST_USED", "1") != "0"
        self.tracker = models.ModelTracker(
            last_used=bool(options.get("last_used", True)) and env_last_used)
        self.server: Server | None = None
        self.watch = introspect.CudaWatch(self._emit)
        self.steps = eligibility.OptimizerSteps()
        self.watch.steps = self.steps
        self.recorder = recording.Recorder()
        self.manager = _manager.Manager(self.tracker, self._emit, self.steps)
        self.manager.ticking = True  # the agent thread ticks it
        self.registry_dir = ""
        self.registry_path = ""
        self.entry: dict[str, Any] = {}
        self.registry_interval = float(options.get("registry_interval", REGISTRY_INTERVAL_S))
        self._next_maintenance = 0.0
        self.started_at = time.time()
        self.start_seconds: float | None = None
        self.torch_setup_seconds: float | None = None  # torch's hooks (+ the scan), user thread
        self.running = False

    # -- user thread -------------------------------------------------------
    def start(self) -> None:
        t0 = time.perf_counter()
        opts = self.options
        runtime = opts.get("runtime_dir")
        if not runtime:
            chosen = paths.claim_runtime_dir()  # the default, or its private fallback
            runtime = chosen.path
            if chosen.notice:
                _log.log(chosen.notice)
        transport = opts.get("transport")
        if transport not in ("unix", "tcp"):
            transport = "unix" if hasattr(socket, "AF_UNIX") and sys.platform != "win32" else "tcp"
        self.registry_dir = paths.ensure_registry_dir(runtime)
        address = paths.socket_path(runtime, self.pid) if transport == "unix" else None
        server_opts = Options(**{k: opts[k] for k in _SERVER_OPTIONS if k in opts})
        hello = {"protocol": protocol.PROTOCOL_VERSION, "agent": AGENT_VERSION, "pid": self.pid}
        handlers: dict[str, tuple[Callable[[dict], dict], bool | str]] = {
            "report": (self._report, False),
            "free_cache": (self._free_cache, True),
            "gc": (self._gc, True),
            "unload": (self.manager.handle_unload, True),
            "reload": (self.manager.handle_reload, True),
            "pin": (self.manager.handle_pin, False),
            "set_policy": (self.manager.handle_set_policy, False),
            "record": (self.recorder.handle, "record"),  # a thread of its own: minutes long
        }
        server = Server(transport, address, handlers, hello, server_opts,
                        on_tick=self._tick, on_dead=self._on_dead)
        server.open()
        self.server = server
        try:
            self.entry = registry.make_entry(server.address, transport, server.token,
                                             protocol.PROTOCOL_VERSION, AGENT_VERSION,
                                             self.started_at)
            self.registry_path = registry.write_entry(self.registry_dir, self.entry)
            self.tracker.activate()
            self.watch.activate()
            torch = introspect.loaded_torch()
            if torch is not None:
                self.on_torch_imported(torch, existing=True)
            elif "torch" not in sys.modules:
                torch_hooks.install(_on_torch_imported)
            else:
                _log.log("torch is being imported by another thread: models built before "
                         "the next start() are not managed")
            if "torch._dynamo" not in sys.modules:
                torch_hooks.install(_on_dynamo_imported, "torch._dynamo")
            self.running = True
            self._next_maintenance = time.monotonic() + self.registry_interval
            server.start()
        except BaseException:
            self.running = False
            server.stop()
            server._cleanup()
            registry.remove_entry(self.registry_path)
            self.tracker.deactivate()
            self.watch.deactivate()
            raise
        self.start_seconds = time.perf_counter() - t0
        _log.log("agent started on %s (%s) in %.1f ms" % (server.address, transport,
                                                          self.start_seconds * 1000))

    def on_torch_imported(self, torch: Any, existing: bool = False) -> None:
        """In the user's thread (start() or the import hook): torch's hooks, and
        the hooks of the models built before the agent started."""
        t0 = time.perf_counter()
        integrations.on_torch(torch, self.tracker, self.steps)
        self.watch.attach_at_init(torch)
        if existing:
            self.tracker.attach_existing(torch)
        self.torch_setup_seconds = time.perf_counter() - t0

    def stop(self) -> None:
        self.running = False
        self.recorder.cancel.set()  # a recording turns the history off now
        server = self.server
        if server is not None:
            server.stop()
        if os.getpid() == self.pid:
            registry.remove_entry(self.registry_path)
        self.tracker.deactivate()
        self.tracker.release()
        self.watch.deactivate()
        self.manager.stop_ticking()

    def after_fork_in_child(self) -> None:
        self.running = False
        if self.server is not None:
            self.server.close_fds_after_fork()
        self.tracker.deactivate()
        self.watch.deactivate()

    # -- agent thread ------------------------------------------------------
    def _emit(self, name: str, data: dict[str, Any]) -> None:
        server = self.server
        if server is not None:
            server.emit(name, data)

    def _report(self, params: dict[str, Any]) -> dict[str, Any]:
        want_models = params.get("models", True)
        if not isinstance(want_models, bool):
            raise BadParams("models must be true or false")
        before = self.tracker._root_ids
        report = introspect.build_report(AGENT_VERSION, self.tracker, self.watch,
                                         {"models": want_models}, self.manager)
        if self.tracker._root_ids != before:
            self._emit("models_changed", {"models": list(self.tracker._root_ids)})
        return report

    def _free_cache(self, params: dict[str, Any]) -> dict[str, Any]:
        from . import actions
        return actions.free_cache()

    def _gc(self, params: dict[str, Any]) -> dict[str, Any]:
        from . import actions
        return actions.collect_garbage()

    def _tick(self) -> None:
        torch = introspect.loaded_torch()
        if torch is not None:
            try:
                self.watch.tick(torch)
            except Exception:
                _log.log_exc("cuda tick failed")
            if self.entry.get("torch") is None and getattr(torch, "__version__", None):
                self.entry["torch"] = str(torch.__version__)
                self._write_registry()
            # Roots are refreshed here too (cheap unless the hooks saw a change),
            # so a model's hooks count for it within a tick of its creation,
            # and a model a freed wrapper held is listed again within a tick.
            before = self.tracker._root_ids
            try:
                self.tracker.refresh(torch)
            except Exception:
                _log.log_exc("model refresh failed")
            server = self.server
            if (self.tracker._root_ids != before and server is not None
                    and any(c.events and "models_changed" in c.events
                            for c in list(server._conns.values()))):
                self._emit("models_changed", {"models": list(self.tracker._root_ids)})
            try:
                self.manager.tick()
            except Exception:
                _log.log_exc("model manager tick failed")
        now = time.monotonic()
        if now >= self._next_maintenance:
            self._next_maintenance = now + self.registry_interval
            if not os.path.exists(self.registry_path):
                _log.log("registry entry vanished: rewriting it")
                self._write_registry()
            path = self.server.path if self.server is not None else None
            if path:
                try:
                    os.utime(path)  # keep tmp cleaners away
                except OSError as exc:
                    _log.log("socket file %s: %r" % (path, exc))

    def _write_registry(self) -> None:
        try:
            paths.ensure_private_dir(self.registry_dir)
            self.registry_path = registry.write_entry(self.registry_dir, self.entry)
        except Exception:
            _log.log_exc("writing the registry entry failed")

    def _on_dead(self) -> None:
        global _agent
        self.running = False
        registry.remove_entry(self.registry_path)
        self.tracker.deactivate()
        self.watch.deactivate()
        if _agent is self:
            _agent = None


def _on_torch_imported(torch: Any) -> None:
    try:
        agent = _agent
        if agent is not None and agent.running and agent.pid == os.getpid():
            agent.on_torch_imported(torch)
    except Exception:
        _log.log_exc("on_torch_imported failed")


def _on_dynamo_imported(dynamo: Any) -> None:
    try:
        integrations.on_dynamo(dynamo)
    except Exception:
        _log.log_exc("on_dynamo_imported failed")


def start(**options: Any) -> bool:
    global _agent, _atexit_registered
    try:
        if os.environ.get("VRAM_STEWARD_AGENT") == "0":
            return False
        unknown = set(options) - _OPTION_NAMES
        if unknown:
            _log.log("ignoring unknown start() options: %s" % sorted(unknown))
            options = {k: v for k, v in options.items() if k in _OPTION_NAMES}
        if not options.get("force") and multiprocessing_child():
            return False
        with _lock:
            if _agent is not None and _agent.running and _agent.pid == os.getpid():
                return True
            agent = Agent(options)
            try:
                agent.start()
            except Exception as exc:
                _log.log_exc("agent failed to start: %s" % (exc,))
                return False
            _agent = agent
            if not _atexit_registered:
                atexit.register(_atexit)
                _atexit_registered = True
            return True
    except BaseException:
        try:
            _log.log_exc("start() failed")
        except BaseException:
            pass
        return False


def stop() -> None:
    global _agent
    try:
        with _lock:
            agent = _agent
            _agent = None
            if agent is not None and agent.pid == os.getpid():
                agent.stop()
            torch_hooks.uninstall()
    except BaseException:
        try:
            _log.log_exc("stop() failed")
        except BaseException:
            pass


def is_running() -> bool:
    try:
        agent = _agent
        return bool(agent is not None and agent.running and agent.pid == os.getpid())
    except BaseException:
        return False


def current() -> Agent | None:
    return _agent


def _atexit() -> None:
    try:
        agent = _agent
        if agent is not None and agent.pid == os.getpid():
            stop()
    except BaseException:
        pass


def _after_fork_in_child() -> None:
    # Runs in every forked child (e.g. a DataLoader worker): close the
    # inherited fds only; never unlink the parent's socket or registry entry.
    global _agent, _lock
    try:
        _lock = threading.Lock()
        agent = _agent
        _agent = None
        if agent is not None:
            agent.after_fork_in_child()
    except BaseException:
        pass


try:
    os.register_at_fork(after_in_child=_after_fork_in_child)
except Exception:  # pragma: no cover - no fork on this platform
    pass
