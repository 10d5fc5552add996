"""The detail view's facts grid (PID, Python, PyTorch, allocator, CUDA, OOMs,
allocation retries, the agent) as its labels show them, and the line that
names a remote host whose figures are not current."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from PySide6.QtWidgets import QLabel

from app.core.units import NA

#: The facts, column by column.
FACTS = (("PID", "Python", "PyTorch", "Allocator"),
         ("CUDA", "OOMs", "Alloc retries", "Agent"))


def yes_no(value: bool | None, yes: str = "yes", no: str = "no") -> str:
    return NA if value is None else (yes if value else no)


def sum_known(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def fill_facts(facts: Mapping[str, QLabel], pid: int, report: Any,
               install_command: str | None) -> None:
    """What ``report`` (None: no agent reporting) says, "n/a" where unknown."""
    facts["PID"].setText(str(pid))
    if report is None:
        for name in ("Python", "PyTorch", "Allocator", "CUDA", "OOMs", "Alloc retries"):
            facts[name].setText(NA)
        facts["Agent"].setText(
            "not reporting (the process or its agent has gone)" if install_command is None
            else f"none. Install it once into this process's environment:\n{install_command}\n"
            "(each PyTorch process started there has it from its next start)")
        return
    facts["Python"].setText(report.python or NA)
    facts["PyTorch"].setText(report.torch or report.torch_status)
    facts["Allocator"].setText(report.allocator_backend or NA)
    facts["CUDA"].setText(yes_no(report.cuda_initialized, "initialised", "not initialised"))
    ooms = report.oom_events
    if ooms is None:
        ooms = sum_known(d.num_ooms for d in report.devices)
    facts["OOMs"].setText(NA if ooms is None else str(ooms))
    retries = sum_known(d.num_alloc_retries for d in report.devices)
    facts["Alloc retries"].setText(NA if retries is None else str(retries))
    agent = "reporting"
    if report.round_trip_s is not None:
        ms = report.round_trip_s * 1000
        agent += f", {ms:.1f} ms round trip" if ms < 10 else f", {ms:.0f} ms round trip"
    facts["Agent"].setText(agent)


def stale_notice(host: str, state: str, reason: str | None) -> str:
    """"gpu1 is disconnected since 15:04:12 (why): the figures below are the last
    it sent; actions wait until it is connected again"."""
    why = f" ({reason})" if reason else ""
    return (f"{host} is {state}{why}: the figures below are the last it sent; "
            "actions wait until it is connected again.")


def stale_action(host: str, state: str) -> str:
    """A disabled action's tooltip while its host is not connected."""
    return f"{host} is {state}: actions wait until it is connected again"


__all__ = ["FACTS", "fill_facts", "stale_action", "stale_notice", "sum_known", "yes_no"]
