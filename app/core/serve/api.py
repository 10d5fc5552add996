"""The server's verbs, whatever the transport (HTTP or SSH's stdio).

Reads (``read`` scope) answer from the engine's latest snapshot, the
stored history and the stored OOM reports.  Actions (``control`` scope) go
through the server's own agent directory, and only to a process of the
caller's own user: the server checks the owner itself, whatever a client
says.  The pressure policy is read with ``policy`` and changed with
``set_policy`` (``policy_verbs``: who may, and the bounds).  Every action is
logged with who asked and how it ended.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from app import __version__
from app.agent.protocol import idle_unload_problem
from app.core.agents.directory import AgentDirectory
from app.core.agents.types import AgentEntry, AgentReport
from app.core.control import terminate
from app.core.control.requests import RECORD_MAX_S, TERMINATE_GRACE_S, RequestError, Terminate
from app.core.serve import policy_verbs
from app.core.serve.access import ANONYMOUS, CONTROL, READ, Caller
from app.core.serve.engine import ServeEngine
from app.core.serve.params import ApiError, Params
from app.core.serve.state import ServeState
from app.core.servers.types import holding
from app.core.wire.codec import encode
from app.core.wire.snapshot import WIRE_VERSION, encode_snapshot

audit = logging.getLogger("app.serve.audit")

READ_METHODS = frozenset({"hello", "snapshot", "agents", "history", "doctor", "policy"})
CONTROL_METHODS = frozenset({"free_cache", "collect_garbage", "unload", "reload", "pin",
                             "set_idle_unload", "record", "terminate", "set_policy"})
ACTION_TIMEOUT_S = 300.0
#: How long ``agents`` waits for a fresh server's first poll of each agent.
FIRST_POLL_WAIT_S = 3.0
MAX_HISTORY_S = 30 * 86400.0


class ServerApi:
    """One call: ``call(method, params, caller)`` → JSON-ready result, or ApiError."""

    def __init__(self, engine: ServeEngine, history_path: str | None = None,
                 reports: Any = None, owner_of: Callable[[int], int | None] | None = None,
                 every_user: bool | None = None, session: bool = False) -> None:
        """``every_user``: the server reads every user's agents (the system
        service; None: as its agent directory says)."""
        self.engine = engine
        self.directory: AgentDirectory | None = engine.agents
        self.history_path = history_path
        self.reports = reports  # ReportStore | None
        self._owner_of = owner_of or process_owner
        self._terminating: set[int] = set()
        self.every_user = policy_verbs.reads_every_user(self.directory) \
            if every_user is None else every_user
        self.server_uid = policy_verbs.server_uid()
        #: A server that lasts one SSH connection (``serve --stdio``): no policy of its own.
        self.session = session

    def call(self, method: str, params: Any, caller: Caller) -> dict[str, Any]:
        if method in CONTROL_METHODS:
            scope = CONTROL
        elif method in READ_METHODS:
            scope = READ
        else:
            raise ApiError(f"no method {method!r}", 404, "unknown_method")
        if not caller.may(scope):
            if scope == CONTROL:
                audit.info("%s: %s refused: no control scope", caller.who, method)
            if caller.uid is None and caller.user == ANONYMOUS:
                raise ApiError(f"{method} needs a token with the {scope} scope: pass "
                               "--token-file FILE or set VRAM_STEWARD_TOKEN", 401,
                               "unauthorized")
            raise ApiError(f"this token has no {scope} scope", 403, "forbidden")
        p = Params(params)
        if scope == READ:
            reads = {"hello": self._hello, "snapshot": self._snapshot, "agents": self._agents,
                     "history": self._history, "doctor": self._doctor, "policy": self._policy}
            result = reads[method](p, caller)
            p.done()
            return {"wire": WIRE_VERSION, "result": result}
        try:
            result = self._set_policy(p, caller) if method == "set_policy" \
                else self._act(method, p, caller)
        except ApiError as exc:
            audit.info("%s: %s %s refused: %s", caller.who, method, p.summary(), exc)
            raise
        return {"wire": WIRE_VERSION, "result": result}

    # -- reads ------------------------------------------------------------------
    def _hello(self, p: Params, caller: Caller) -> dict[str, Any]:
        return {"app": __version__, "host": socket.gethostname(), "user": caller.user,
                "scopes": sorted(caller.scopes), "via": caller.via, "time": time.time()}

    def _snapshot(self, p: Params, caller: Caller) -> dict[str, Any]:
        state = self._first_tick()
        if self.directory is not None and time.time() - state.started_at < FIRST_POLL_WAIT_S:
            # A server started for this request (over SSH): its agents polled once first.
            first_polls(self.directory)
            state = self.engine.wait_newer(state.seq, 2.0)
        snapshot = state.snapshot
        if snapshot is None:
            snapshot = self.engine.wait_newer(0, 5.0).snapshot
        if snapshot is None:
            raise ApiError("no sample yet", 503, "not_ready")
        return encode_snapshot(snapshot)

    def _agents(self, p: Params, caller: Caller) -> list[dict[str, Any]]:
        directory = self._need_directory()
        self._first_tick()
        entries, reports, errors = first_polls(directory)
        out = []
        for entry in sorted(entries, key=lambda e: e.pid):
            report = reports.get(entry.pid)
            out.append({"entry": public_entry(entry),
                        "report": None if report is None else encode(report),
                        "error": None if report is not None
                        else errors.get(entry.pid, "no report yet")})
        return out

    def _history(self, p: Params, caller: Caller) -> list[dict[str, Any]]:
        since_s = p.number("since_s", low=1.0, high=MAX_HISTORY_S)
        pid, gpu = p.integer("pid", required=False, low=1), p.integer("gpu", required=False, low=0)
        if self.history_path is None:
            raise ApiError("this server keeps no history", 404, "no_history")
        from app.core.store.query import read_history
        from app.core.store.records import history_records

        stored = read_history(self.history_path, time.time() - since_s, pid=pid)
        if stored.error:
            raise ApiError(stored.error, 500, "history")
        return history_records(stored, gpu, pid)

    def _doctor(self, p: Params, caller: Caller) -> dict[str, Any]:
        pid = p.integer("pid", required=False, low=1)
        snapshot = self.engine.state().snapshot
        diagnoses = [] if snapshot is None else [
            d for d in snapshot.diagnoses
            if d.kind != "oom" and (pid is None or d.pid in (None, pid))]
        stored = self.reports.list(pid) if self.reports is not None else []
        return {"source": None if snapshot is None else snapshot.source,
                "time": None if snapshot is None else snapshot.timestamp,
                "error": None if snapshot is None else snapshot.error,
                "diagnoses": encode(diagnoses), "oom_reports": encode(stored)}

    def _policy(self, p: Params, caller: Caller) -> dict[str, Any]:
        return encode(policy_verbs.answer(self.engine.collector.policy, caller,
                                          self.every_user, self.server_uid, self.session))

    # -- actions ----------------------------------------------------------------
    def _set_policy(self, p: Params, caller: Caller) -> dict[str, Any]:
        before = self.engine.collector.policy
        old = None if before is None else before.config
        now = policy_verbs.change(before, p, caller, self.every_user, self.server_uid,
                                  self.session)
        audit.info("%s: set_policy %s -> ok (%s; was %s)", caller.who, p.summary(), now.text(),
                   "none" if old is None else f"enabled={old.enabled} "
                   f"threshold={old.threshold:g} rearm={old.rearm:g} "
                   f"min_idle_s={old.min_idle_s:g} min_interval_s={old.min_interval_s:g}")
        return encode(now)

    def _act(self, method: str, p: Params, caller: Caller) -> Any:
        pid = p.integer("pid", low=1)
        if method == "terminate":
            return self._terminate(pid, p, caller)
        directory = self._need_directory()
        timeout = p.number("timeout_s", required=False, low=0.1, high=ACTION_TIMEOUT_S) \
            or ACTION_TIMEOUT_S
        run = self._prepare(method, pid, p, directory, timeout)
        p.done()
        self._check_owner(pid, caller)
        snapshot = self.engine.state().snapshot
        served = method in ("unload", "reload") and snapshot is not None \
            and holding(snapshot.servers, pid) is not None
        if not served and not any(e.pid == pid for e in directory.entries()):
            raise ApiError(f"no agent in process {pid}", 404, "not_found")
        result = run()
        outcome = result.get("ok") if isinstance(result, dict) else None
        audit.info("%s: %s %s -> %s", caller.who, method, p.summary(),
                   "ok" if outcome else f"not done ({result.get('error')})"
                   if isinstance(result, dict) else "done")
        return result

    @staticmethod
    def _prepare(method: str, pid: int, p: Params, directory: AgentDirectory,
                 timeout: float) -> Callable[[], Any]:
        """The call ``method`` makes, its parameters checked (nothing sent yet)."""
        if method == "free_cache":
            return lambda: encode(directory.free_cache(pid, timeout_s=timeout))
        if method == "collect_garbage":
            return lambda: directory.collect_garbage(pid, timeout_s=timeout)
        if method == "unload":
            model, force = p.text("model"), p.flag("force")
            to = p.choice("to", ("cpu", "disk"), required=False)
            return lambda: encode(directory.unload(pid, model, to=to, force=force,
                                                   timeout_s=timeout))
        if method == "reload":
            model = p.text("model")
            return lambda: encode(directory.reload(pid, model, timeout_s=timeout))
        if method == "pin":
            model, pinned = p.text("model"), p.flag("pinned", default=True)
            return lambda: encode(directory.pin(pid, model, pinned, timeout_s=timeout))
        if method == "set_idle_unload":
            seconds = p.number("seconds", required=False)
            problem = None if seconds is None else idle_unload_problem(seconds)
            if problem is not None:
                raise ApiError(f"'seconds' {problem} (or null: off)")
            return lambda: directory.set_idle_unload(pid, seconds, timeout_s=timeout)
        seconds = p.number("seconds", low=0.5, high=RECORD_MAX_S)  # record
        entries = p.integer("max_entries", required=False, low=1)
        return lambda: encode(directory.record(pid, seconds, entries))

    def _terminate(self, pid: int, p: Params, caller: Caller) -> dict[str, Any]:
        create_time = p.number("create_time", required=False)
        grace = p.number("grace_s", required=False, low=0.0, high=60.0)
        p.done()
        self._check_owner(pid, caller)
        req = Terminate(pid, create_time, TERMINATE_GRACE_S if grace is None else grace)
        try:
            action = terminate.check(self.engine.state().snapshot, req, self._terminating,
                                     user=caller.user)
        except RequestError as exc:
            raise ApiError(str(exc), 409, "refused") from None
        self._terminating.add(pid)
        try:
            outcome = terminate.run(action, uid=caller.uid)
        finally:
            self._terminating.discard(pid)
        audit.info("%s: terminate pid %d -> %s", caller.who, pid, outcome.outcome.value)
        return {"pid": pid, "label": action.label, **encode(outcome)}

    def _first_tick(self) -> ServeState:
        """The engine's state once it has ticked (a server just started)."""
        state = self.engine.state()
        return state if state.seq else self.engine.wait_newer(0, 5.0)

    def _check_owner(self, pid: int, caller: Caller) -> None:
        if self.engine.collector.source.name == "demo" and caller.uid is not None:
            return  # simulated processes: the demo's agents change nothing real
        owner = self._owner_of(pid)
        if owner is None:
            raise ApiError(f"no process {pid} on this host", 404, "not_found")
        if caller.uid is None or owner != caller.uid:
            raise ApiError(f"process {pid} is not {caller.user}'s: only your own processes "
                           "can be acted on", 403, "not_owned")

    def _need_directory(self) -> AgentDirectory:
        if self.directory is None:
            raise ApiError("this server reads no agents", 404, "no_agents")
        return self.directory


def first_polls(directory: AgentDirectory, wait_s: float = FIRST_POLL_WAIT_S
                ) -> tuple[list[AgentEntry], dict[int, AgentReport], dict[int, str]]:
    """The directory's entries, reports and polling errors once each agent has
    been asked once (waiting at most ``wait_s``): a server started for one
    request, as over SSH, would otherwise answer before its first polls."""
    deadline = time.monotonic() + wait_s
    while True:
        reports, errors = directory.reports(), directory.errors()
        entries = directory.entries()
        if all(e.pid in reports or e.pid in errors for e in entries) \
                or time.monotonic() >= deadline:
            return entries, reports, errors
        time.sleep(0.05)


def public_entry(entry: Any) -> dict[str, Any]:
    """An agent's registry entry as a client may see it: no address, no secret."""
    return {"pid": entry.pid, "create_time": entry.create_time, "address": "remote",
            "transport": "remote", "argv": list(entry.argv), "python": entry.python,
            "torch": entry.torch, "protocol": entry.protocol,
            "agent_version": entry.agent_version}


def process_owner(pid: int) -> int | None:
    """The real uid of process ``pid``, None when there is none."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.Process(pid).uids().real)
    except Exception:
        return None
