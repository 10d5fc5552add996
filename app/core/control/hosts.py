"""One controller per host: this machine's, and one for each remote host,
made when the host first appears.

A request names its host (``request.host``, ``""`` here); it is checked
against that host's snapshot, with that host's busy set, and carried out
by that host's server (``RemoteAgents``), which checks again that the
caller owns the process.  Pids are only unique per host, so every state
read (busy, pending, last actions) takes the host too.  A remote host has
no pressure policy here: its server runs its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from app.core.agents.directory import AgentDirectory
from app.core.control.controller import AppController, Listener
from app.core.control.records import (
    Action,
    ModelAction,
    Outcome,
    TerminateAction,
    TerminateResult,
)
from app.core.control.requests import FreeCache, Refusal, Request, RequestError, SetAutoUnload
from app.core.monitor.hosts import LOCAL, HostView
from app.core.monitor.samples import Snapshot
from app.core.wire.codec import WireError
from app.core.wire.snapshot import decode

log = logging.getLogger(__name__)

DirectoryOf = Callable[[str], "AgentDirectory | None"]


class HostControllers:
    """The controllers of every host behind the one interface the views use."""

    def __init__(self, local: AppController, directory_of: DirectoryOf | None = None) -> None:
        self.local = local
        self._directory_of = directory_of
        self._remote: dict[str, AppController] = {}
        self._views: dict[str, HostView] = {}  # each host as the latest snapshot saw it
        self._listeners: list[Listener] = []
        self._wake: Callable[[], None] | None = None
        self.latest: Snapshot | None = None

    # -- wiring ---------------------------------------------------------------------
    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)
        for ctl in self.controllers():
            ctl.subscribe(listener)

    def set_wake(self, wake: Callable[[], None] | None) -> None:
        self._wake = wake
        for ctl in self.controllers():
            ctl.set_wake(wake)

    def controllers(self) -> list[AppController]:
        return [self.local, *self._remote.values()]

    def of(self, host: str) -> AppController | None:
        return self.local if host == LOCAL else self._remote.get(host)

    def _made(self, host: str) -> AppController:
        ctl = self._remote.get(host)
        if ctl is None:
            ctl = AppController(lambda: self._directory(host), wake=self._wake, host=host,
                                user=lambda: self._user_of(host),
                                run_terminate=lambda action: self._terminate(host, action))
            for listener in self._listeners:
                ctl.subscribe(listener)
            self._remote[host] = ctl
        return ctl

    def _user_of(self, host: str) -> str | None:
        """The user ``host``'s server acts for, as its latest view says."""
        view = self._views.get(host)
        return None if view is None else view.user

    def _directory(self, host: str) -> AgentDirectory | None:
        if self._directory_of is None:
            return None
        try:
            return self._directory_of(host)
        except Exception:
            log.exception("looking up host %s's directory failed", host)
            return None

    # -- requests -------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.local.available or bool(self._remote)

    def submit(self, request: Request) -> Any:
        """Started on the request's host; "Free all" everywhere starts on every
        connected host (the local record is returned, the others are heard)."""
        if isinstance(request, SetAutoUnload):
            return self.local.submit(request)
        if isinstance(request, FreeCache) and not request.pids and request.display_id is None:
            return self._free_everywhere(request)
        host = getattr(request, "host", LOCAL)
        if host != LOCAL:
            self._check_connected(host)
        ctl = self.of(host)
        if ctl is None:
            raise RequestError(Refusal.UNKNOWN_PROCESS, f"no host {host!r} is watched")
        return ctl.submit(request)

    def _check_connected(self, host: str) -> None:
        """RequestError, with the host's own reason, unless its figures are current."""
        view = self._views.get(host)
        if view is None:
            raise RequestError(Refusal.UNKNOWN_PROCESS, f"no host {host!r} is watched")
        if not view.connected:
            why = f": {view.reason}" if view.reason else ""
            raise RequestError(Refusal.UNAVAILABLE, f"{host} is not connected{why}")

    def _free_everywhere(self, request: FreeCache) -> Any:
        record, refusal = None, None
        for ctl in self.controllers():
            if ctl is not self.local and not (
                    ctl.host in self._views and self._views[ctl.host].connected):
                continue  # its figures are not current: nothing is sent there
            try:
                answer = ctl.submit(request)
            except RequestError as exc:
                refusal = refusal or exc
                continue
            record = record if record is not None else answer
        if record is None:
            raise refusal or RequestError(Refusal.NOTHING_TO_DO, "no process has an agent")
        return record

    # -- state ----------------------------------------------------------------------
    def running(self) -> list[Action]:
        return [a for ctl in self.controllers() for a in ctl.running()]

    def busy_pids(self, host: str = LOCAL) -> set[int]:
        ctl = self.of(host)
        return set() if ctl is None else ctl.busy_pids()

    def terminating(self, host: str = LOCAL) -> set[int]:
        ctl = self.of(host)
        return set() if ctl is None else ctl.terminating()

    def recording(self, host: str = LOCAL) -> set[int]:
        ctl = self.of(host)
        return set() if ctl is None else ctl.recording()

    def busy_models(self, host: str = LOCAL) -> set[tuple[int, str | None]]:
        ctl = self.of(host)
        return set() if ctl is None else ctl.busy_models()

    def pending_models(self, pid: int, host: str = LOCAL) -> list[ModelAction]:
        ctl = self.of(host)
        return [] if ctl is None else ctl.pending_models(pid)

    def last_model_actions(self, pid: int, host: str = LOCAL) -> dict[str, ModelAction]:
        ctl = self.of(host)
        return {} if ctl is None else ctl.last_model_actions(pid)

    # -- the pressure policy: this machine's (a remote host's runs on its server) ------
    def policy_runner(self) -> Any:
        return self.local.policy_runner()

    def set_policy_runner(self, getter: Any) -> None:
        self.local.set_policy_runner(getter)

    @property
    def policy_error(self) -> str | None:
        return self.local.policy_error

    # -- snapshots and answers ------------------------------------------------------------
    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Each host's controller gets its host's snapshot when a new one came
        (an action is measured on figures made after it, never on a repeat of
        older ones); a host that went away keeps its controller while its
        actions finish, then it is dropped."""
        self.latest = snapshot
        self.local.on_snapshot(snapshot)
        self._views = {view.key: view for view in snapshot.hosts}
        for view in snapshot.hosts:
            ctl = self._remote.get(view.key)
            if view.snapshot is not None and view.connected and (
                    ctl is None or ctl.latest is None
                    or ctl.latest.monotonic != view.snapshot.monotonic):  # a new arrival
                self._made(view.key).on_snapshot(view.snapshot)
            elif view.key in self._remote:
                self._remote[view.key].poll()
        for key in [k for k in self._remote if k not in self._views]:
            ctl = self._remote[key]
            ctl.poll()
            if not ctl.running():
                ctl.close()
                del self._remote[key]

    def poll(self) -> int:
        return sum(ctl.poll() for ctl in self.controllers())

    def wait(self, timeout_s: float = 3.0) -> bool:
        """One deadline for every host: a stuck one does not multiply the wait."""
        deadline = time.monotonic() + timeout_s
        return all([ctl.wait(max(0.0, deadline - time.monotonic()))
                    for ctl in self.controllers()])

    def close(self) -> None:
        for ctl in self.controllers():
            ctl.close()

    def _terminate(self, host: str, action: TerminateAction) -> TerminateResult:
        """SIGTERM then SIGKILL by the host's server (on a worker thread)."""
        directory = self._directory(host)
        terminate = getattr(directory, "terminate", None)
        if terminate is None:
            return TerminateResult(Outcome.REFUSED, reason=f"{host} is not connected")
        answer = terminate(action.pid, action.create_time, action.grace_s)
        fields = {k: answer.get(k) for k in ("outcome", "elapsed_s", "reason")}
        try:
            result: TerminateResult = decode(TerminateResult, fields)
        except WireError:
            return TerminateResult(Outcome.FAILED, reason=f"{host} answered: {answer}")
        return result
