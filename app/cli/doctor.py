"""``doctor``: every current diagnosis with its evidence and fixes, and the OOM reports.

``--demo`` shows the demo at its moment (``demo_moment``: replayed from its
start at once, through the collector, agents, pressure policy and doctor the
window runs): what they found (the leak, the "full soon" alert as it fired,
the OOM post-mortem), as every demo command shows it.  Without it: one real
collection (NVML and the agents), trends started from the stored history.
``--oom`` lists the stored OOM reports (``--demo``: the demo's).  No Qt on
this path.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_NO_SOURCE, EXIT_OK, print_json, tell

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.types import AgentReport
    from app.core.diagnosis.doctor import Firing
    from app.core.diagnosis.types import Diagnosis, OomReport

#: How far back the stored history seeds the trends.
HISTORY_S = 1800.0


def _keep(d: Diagnosis | OomReport | Firing, pid: int | None) -> bool:
    return pid is None or d.pid == pid


def _moment_text(at_s: float) -> str:
    from app.core.units import fmt_duration

    return "at its start" if at_s == 0 else \
        f"{fmt_duration(at_s)} in (replayed from its start at once)"


def _demo(args: argparse.Namespace) -> int:
    """The Doctor of the demo at its moment: what the window's Doctor tab shows then."""
    from app.core.agents.demo_moment import demo_moment
    from app.core.units import fmt_duration

    moment = demo_moment(args.seed, args.demo_size)
    snapshot, doctor, started = moment.snapshot, moment.doctor, moment.started
    diagnoses = [d for d in snapshot.diagnoses if _keep(d, args.pid)]
    reports = [r for r in reversed(doctor.reports) if _keep(r, args.pid)]
    firings = [f for f in doctor.firings if _keep(f, args.pid)]
    if args.json:
        print_json({
            "source": "demo", "simulated_s": moment.at_s, "started": started,
            "time": snapshot.timestamp,
            "diagnoses": [_with_elapsed(d.to_json(), d.since, started) for d in diagnoses],
            "alerts": [dict(f.to_json(), fired_at_s=round(f.fired_at - started, 1),
                            cleared_at_s=None if f.cleared_at is None
                            else round(f.cleared_at - started, 1)) for f in firings],
            "oom_reports": [dict(r.to_json(), time_s=round(r.time - started, 1))
                            for r in reports]})
        return EXIT_OK

    def at(t: float) -> str:
        return f"at {fmt_duration(t - started)}"

    print(f"Doctor (demo): the demo {_moment_text(moment.at_s)}")
    _print_diagnoses(diagnoses, at)
    if firings:
        print("\nAlerts fired:")
        for f in firings:
            cleared = "" if f.cleared_at is None else f" (cleared {at(f.cleared_at)})"
            print(f"  {at(f.fired_at)}: {f.title}{cleared}")
    _print_reports(reports, at)
    return EXIT_OK


def _demo_oom(args: argparse.Namespace) -> int:
    """The demo's OOM reports at its moment (it keeps them in memory, never on disk)."""
    from app.core.agents.demo_moment import demo_moment
    from app.core.units import fmt_duration

    moment = demo_moment(args.seed, args.demo_size)
    started = moment.started
    reports = [r for r in reversed(moment.doctor.reports) if _keep(r, args.pid)]
    if args.json:
        print_json({"source": "demo", "simulated_s": moment.at_s, "started": started,
                    "oom_reports": [dict(r.to_json(), time_s=round(r.time - started, 1))
                                    for r in reports]})
        return EXIT_OK
    if not reports:
        print(f"No OOM reports in the demo {_moment_text(moment.at_s)}.")
        return EXIT_OK
    print(f"Doctor (demo): the demo {_moment_text(moment.at_s)}")
    _print_reports(reports, lambda t: f"at {fmt_duration(t - started)}")
    return EXIT_OK


def _with_elapsed(data: dict[str, Any], since: float | None, started: float) -> dict[str, Any]:
    data["since_s"] = None if since is None else round(since - started, 1)
    return data


def _oom(args: argparse.Namespace) -> int:
    from app.core.diagnosis.report_store import ReportStore
    from app.core.paths import state_notice

    notice = state_notice()
    if notice:  # its reports are not read
        tell(notice)
        return EXIT_FAILED
    store = ReportStore()
    reports = store.list(args.pid)
    if args.json:
        print_json({"directory": store.directory, "oom_reports": [r.to_json() for r in reports]})
        return EXIT_OK
    if not reports:
        print(f"No OOM reports in {store.directory}.")
        return EXIT_OK
    _print_reports(reports, _ago)
    return EXIT_OK


def _remote(args: argparse.Namespace) -> int:
    """The server's diagnoses and stored OOM reports, printed as here."""
    from app.cli.remote import connect

    client = connect(args)
    try:
        answer = client.doctor(args.pid)
    finally:
        client.close()
    diagnoses, reports = answer["diagnoses"], answer["oom_reports"]
    if args.json:
        data = {"host": args.host, "oom_reports": [r.to_json() for r in reports]}
        if not args.oom:
            data.update({"source": answer["source"], "time": answer["time"],
                         "error": answer["error"], "notes": [],
                         "diagnoses": [d.to_json() for d in diagnoses]})
        print_json(data)
        return EXIT_OK
    if not args.oom:
        _print_diagnoses(diagnoses, _ago)
    elif not reports:
        print(f"No OOM reports on {args.host}.")
    _print_reports(reports, _ago)
    return EXIT_OK


def _ago(t: float) -> str:
    from app.core.units import fmt_ago

    return fmt_ago(time.time() - t)


def _live(args: argparse.Namespace) -> int:
    from app.core.diagnosis.doctor import Doctor
    from app.core.diagnosis.report_store import ReportStore
    from app.core.monitor.collector import Collector
    from app.core.monitor.nvml_source import NvmlSource
    from app.core.monitor.source import SourceUnavailable
    from app.core.paths import history_db_path, state_notice
    from app.core.store.query import read_history

    tell(state_notice())  # stored history and OOM reports left out; live figures still count
    store = ReportStore()
    doctor = Doctor(store=store)
    history = read_history(history_db_path(), time.time() - HISTORY_S, pid=args.pid)
    doctor.seed(history)
    notes = [history.error] if history.error else []
    agents = _reports_only(_agent_reports())
    collector = Collector(NvmlSource(), agents=agents, pressure_policy=False, doctor=doctor)
    try:
        collector.open()
    except SourceUnavailable as exc:
        notes.append(f"no GPU figures ({exc.reason}): agents and stored reports only")
    try:
        snapshot = collector.collect()
    finally:
        collector.close()
    if snapshot.error and not notes:
        notes.append(f"no GPU figures ({snapshot.error}): agents and stored reports only")
    diagnoses = [d for d in snapshot.diagnoses if d.kind != "oom" and _keep(d, args.pid)]
    reports = store.list(args.pid)
    if args.json:
        print_json({"source": snapshot.source, "time": snapshot.timestamp,
                    "error": snapshot.error, "notes": notes,
                    "diagnoses": [d.to_json() for d in diagnoses],
                    "oom_reports": [r.to_json() for r in reports]})
        return EXIT_OK
    for note in notes:
        print(f"{APP_NAME}: {note}", file=sys.stderr)
    if snapshot.gpus:
        _print_diagnoses(diagnoses, _ago)
    else:
        print("Diagnoses: n/a (no GPU figures).")
    _print_reports(reports, _ago)
    return EXIT_OK


def _agent_reports() -> dict[int, AgentReport]:
    from app.cli.directory import read_reports, real_agents

    try:
        answers = read_reports(real_agents(), timeout_s=2.0)
    except Exception as exc:  # the registry unreadable: GPU figures still count
        print(f"{APP_NAME}: agents could not be read: {exc}", file=sys.stderr)
        return {}
    return {a.report.pid: a.report for a in answers if a.report is not None}


def _print_diagnoses(diagnoses: list[Diagnosis], when: Any) -> None:
    if not diagnoses:
        print("No diagnoses: nothing is leaking, filling up or idle.")
        return
    for d in diagnoses:
        since = f"  (since {when(d.since)})" if d.since is not None else ""
        where = f"GPU {d.gpu}" if d.gpu is not None else "GPU n/a"
        print(f"[{d.severity}] {d.kind}  {where}: {d.title}{since}")
        for line in d.evidence:
            print(f"    {line}")
        for i, f in enumerate(d.fixes, 1):
            print(f"    {i}. {f.text}")


def _print_reports(reports: list[OomReport], when: Any) -> None:
    if not reports:
        return
    print("\nOOM reports (newest first):")
    for r in reports:
        print(f"  {when(r.time)}: {r.title}  [verdict: {r.verdict}]  id {r.id}")
        for line in r.explanation:
            print(f"      {line}")
        for i, f in enumerate(r.fixes, 1):
            print(f"      {i}. {f.text}")


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.pid is not None and args.pid <= 0:
        print(f"{APP_NAME}: --pid must be a positive process id", file=sys.stderr)
        return EXIT_NO_SOURCE
    try:
        if args.host:
            return _remote(args)
        if args.oom:
            return _demo_oom(args) if args.demo else _oom(args)
        if args.demo:
            return _demo(args)
        return _live(args)
    except OSError as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common],
                       help="diagnoses: leaks, full in ~N min, advice, OOM reports")
    p.add_argument("--pid", type=int, default=None, help="only this process")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--oom", action="store_true", help="the stored OOM reports, newest first")
    p.set_defaults(func=cmd_doctor)


def _reports_only(reports: dict[int, AgentReport]) -> AgentDirectory:
    """The agents' reports read once, as a directory the collector can hold."""
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.types import FreeCacheResult

    class ReportsOnly(AgentDirectory):
        def reports(self) -> dict[int, AgentReport]:
            return dict(reports)

        def entries(self) -> list:
            return []

        def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
            return FreeCacheResult(pid, False, error="not available here")

        def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
            return {"ok": False, "collected": None, "seconds": None,
                    "error": "not available here"}

    return ReportsOnly()
