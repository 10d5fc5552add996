"""``agents`` on a fresh server waits for its first poll of each agent, bounded.

A server started for one request (``ssh host vram-steward serve --stdio``
runs one per command) would otherwise list every agent with "no report yet".
"""

from __future__ import annotations

import threading
import time

from app.core.agents.types import AgentEntry
from app.core.serve.api import first_polls


class Polling:
    """The reading side of a polling directory: three agents, whose first polls
    land when the test says."""

    def __init__(self) -> None:
        self.listed = [AgentEntry(pid, None, f"/s/{pid}.sock", "unix") for pid in (11, 12, 13)]
        self.answered: dict[int, object] = {}
        self.failed: dict[int, str] = {}

    def entries(self) -> list[AgentEntry]:
        return list(self.listed)

    def reports(self) -> dict:
        return dict(self.answered)

    def errors(self) -> dict[int, str]:
        return dict(self.failed)


def test_the_answer_waits_for_each_agents_first_report_or_error():
    directory = Polling()
    directory.failed[12] = "agent 12: timed out"

    def polls() -> None:
        time.sleep(0.2)
        directory.answered[11] = "report of 11"
        time.sleep(0.1)
        directory.answered[13] = "report of 13"

    threading.Thread(target=polls, daemon=True).start()
    started = time.monotonic()
    entries, reports, errors = first_polls(directory, wait_s=10.0)
    assert 0.25 <= time.monotonic() - started < 5.0
    assert [e.pid for e in entries] == [11, 12, 13]
    assert set(reports) == {11, 13} and errors == {12: "agent 12: timed out"}


def test_an_agent_never_polled_delays_the_answer_by_the_bound_only():
    directory = Polling()
    directory.answered.update({11: "r", 12: "r"})
    started = time.monotonic()
    _entries, reports, errors = first_polls(directory, wait_s=0.3)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert set(reports) == {11, 12} and errors == {}


def test_a_directory_that_has_polled_answers_at_once():
    directory = Polling()
    directory.answered.update({11: "r", 12: "r", 13: "r"})
    started = time.monotonic()
    first_polls(directory, wait_s=10.0)
    assert time.monotonic() - started < 0.5
