"""The client side of an agent run: a 4 Hz report poller and the step actions.

The poller is what the desktop app does to every attached process; the step
actions are what a user (or the memory-pressure policy) does between two of
the program's calls: unload a model, optionally reload it.  Both only ever go
through ``app.core.agents.client``, on connections of their own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.agent import protocol
from app.core.agents import client as agent_client
from app.core.agents import connection as agent_connection
from app.core.agents import registry as agent_registry
from app.core.agents.types import AgentEntry, AgentReport, ModelInfo

POLL_INTERVAL_S = 0.25
REPORT_TIMEOUT_S = 5.0
ACTION_TIMEOUT_S = 120.0
ATTACH_TIMEOUT_S = 60.0
BUSY_RETRY_S = 0.5
POLL_ERRORS_KEPT = 10


@dataclass
class ModelOutcome:
    """What the agent did with one model named at a step."""

    name: str  # the class name the pattern asked for
    model_id: str | None = None
    status: str = "missing"  # "unloaded", "refused", "error", "missing"
    reason: str | None = None  # the agent's refusal reason or the error text
    reload: str | None = None  # None (not asked), "ok", or the error text
    listed: str = ""  # the report's models ("m1=MLP, m2=..."): what a reason may refer to

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model_id": self.model_id, "status": self.status,
                "reason": self.reason, "reload": self.reload}


@dataclass
class StepOutcome:
    label: str
    expect: str
    reload: bool
    models: list[ModelOutcome] = field(default_factory=list)
    error: str | None = None  # the harness could not act (no agent, no report)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "expect": self.expect, "reload": self.reload,
                "error": self.error, "models": [m.to_json() for m in self.models]}


def short_class(model: ModelInfo) -> str:
    return model.class_name.rsplit(".", 1)[-1]


def _id_number(model: ModelInfo) -> int:
    digits = "".join(c for c in model.id.rsplit(":", 1)[-1] if c.isdigit())
    return int(digits) if digits else 1 << 60


def pick_model(report: AgentReport, class_name: str) -> ModelInfo | None:
    """The root model of class ``class_name`` the program is using.

    With several (a copy, or the object a checkpoint was built from before it
    was saved and loaded back), the one that ran a forward last; among those
    never seen in a forward, the one the agent found first.
    """
    matches = [m for m in report.models if short_class(m) == class_name]
    if not matches:
        return None
    return max(matches, key=lambda m: (m.last_used or float("-inf"), -_id_number(m)))


def _within(timeout_s: float, deadline: float) -> float:
    """``timeout_s``, cut so that it ends by ``deadline`` (at least 1 s)."""
    return max(1.0, min(timeout_s, deadline - time.monotonic()))


class AgentSide:
    """Finds the agent of one process, polls it, and acts at the pattern's steps."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self.polls_ok = 0
        self.polls_failed = 0  # while the pattern ran
        self.polls_failed_at_exit = 0  # after its result: the process is going away
        self.poll_errors: list[str] = []
        self._finished = False
        self._pid: int | None = None
        self._attach_deadline = 0.0
        self._entry: AgentEntry | None = None
        self._stop = threading.Event()
        self._found = threading.Condition()
        self._thread = threading.Thread(target=self._poll, name="host-harm-poller", daemon=True)

    # -- lifecycle
    def start(self, pid: int) -> None:
        self._pid = pid
        self._attach_deadline = time.monotonic() + ATTACH_TIMEOUT_S
        self._thread.start()

    def finished(self) -> None:
        """The pattern printed its result: failures from now on are the process exiting."""
        self._finished = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=REPORT_TIMEOUT_S + 5)

    # -- poller
    def _lookup(self) -> AgentEntry | None:
        for entry in agent_registry.read_registry(self.runtime):
            if entry.pid == self._pid:
                return entry
        return None

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self._entry is None:
                entry = self._lookup()
                if entry is not None:
                    with self._found:
                        self._entry = entry
                        self._found.notify_all()
                self._stop.wait(0.05)
                continue
            try:
                agent_client.query_report(self._entry, timeout_s=REPORT_TIMEOUT_S)
                self.polls_ok += 1
            except (agent_connection.AgentUnavailable, agent_connection.AgentError) as exc:
                if self._finished:
                    self.polls_failed_at_exit += 1
                else:
                    self.polls_failed += 1
                    if len(self.poll_errors) < POLL_ERRORS_KEPT:
                        self.poll_errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(POLL_INTERVAL_S)

    def entry(self) -> AgentEntry | None:
        """The agent's registry entry; waits until ``ATTACH_TIMEOUT_S`` after start."""
        with self._found:
            self._found.wait_for(lambda: self._entry is not None,
                                 timeout=max(0.0, self._attach_deadline - time.monotonic()))
            return self._entry

    # -- steps
    def fresh_report(self, entry: AgentEntry, timeout_s: float = ATTACH_TIMEOUT_S
                     ) -> AgentReport:
        """A report asked for now: the agent has then seen (and hooked) every root
        model the process holds at this step."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return agent_client.query_report(entry, timeout_s=REPORT_TIMEOUT_S)
            except (agent_connection.AgentUnavailable, agent_connection.AgentError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def act(self, label: str, unload: list[str], reload: bool, expect: str,
            deadline: float, force: bool = False) -> StepOutcome:
        """Unload (and maybe reload) the named models; bounded by ``deadline`` (monotonic)."""
        outcome = StepOutcome(label, expect, reload)
        entry = self.entry()
        if entry is None:
            outcome.error = f"no registry entry for pid {self._pid} within {ATTACH_TIMEOUT_S:g} s"
            return outcome
        try:
            report = self.fresh_report(entry, _within(ATTACH_TIMEOUT_S, deadline))
        except (agent_connection.AgentUnavailable, agent_connection.AgentError) as exc:
            outcome.error = f"no report: {exc}"
            return outcome
        for name in unload:
            outcome.models.append(self._unload(entry, report, name, reload, deadline, force))
        return outcome

    def _unload(self, entry: AgentEntry, report: AgentReport, name: str, reload: bool,
                deadline: float, force: bool) -> ModelOutcome:
        listed = ", ".join(f"{m.id}={short_class(m)}" for m in report.models) or "none"
        found = pick_model(report, name)
        if found is None:
            return ModelOutcome(name, reason=f"no root model of class {name}", listed=listed)
        while True:
            result = agent_client.unload(entry, found.id, to=None, force=force,
                                         timeout_s=_within(ACTION_TIMEOUT_S, deadline))
            # busy: the model was moved for its share of the last seconds (or another
            # action runs); a client tries again later, as the answer says
            if result.code != "busy" or time.monotonic() + BUSY_RETRY_S > deadline:
                break
            time.sleep(BUSY_RETRY_S)
        if result.ok:
            out = ModelOutcome(name, found.id, "unloaded", listed=listed)
        elif result.code == "refused":
            return ModelOutcome(name, found.id, "refused", result.error, listed=listed)
        else:
            return ModelOutcome(name, found.id, "error", f"{result.code}: {result.error}",
                                listed=listed)
        if reload:
            back = agent_client.reload(entry, found.id,
                                       timeout_s=_within(ACTION_TIMEOUT_S, deadline))
            # resident already: the program's own call brought it back first
            again = back.code == "refused" and back.error == protocol.not_offloaded("resident")
            out.reload = "ok" if back.ok or again else f"{back.code}: {back.error}"
        return out
