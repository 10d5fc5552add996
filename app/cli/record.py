"""``record``: a process's CUDA allocations for a few seconds, by call site.

The process's agent turns on PyTorch's allocation history (bounded), writes
the snapshot file PyTorch's memory_viz page opens, turns the history off and
answers with the top allocation sites; this prints the file and the table.
"recording for N s" comes on stderr once the agent has turned the recording
on (an agent that does not say so, the demo's and a remote host's: the
result alone).  Exit 0 when recorded, 1 when refused or failed (the reason on
stderr), 2 when there is no agent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_NO_AGENT, EXIT_OK, print_json, say

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.recording import RecordResult
    from app.core.agents.types import AgentEntry

MEMORY_VIZ_URL = "https://pytorch.org/memory_viz"
MIN_SECONDS, MAX_SECONDS = 1, 300
MIN_ENTRIES, MAX_ENTRIES = 1000, 500_000


def _ranged(kind: Callable[[str], float], low: float, high: float, what: str
            ) -> Callable[[str], float]:
    """An argparse type: ``kind(text)`` within [low, high]."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {what}: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g}")
        return value
    return parse


def result_text(result: RecordResult) -> str:
    """What ``record`` prints for a result (sizes with ``fmt_bytes``)."""
    from app.core.units import fmt_bytes, fmt_count

    if not result.ok:
        return (f"{result.pid}: record {'refused' if result.code == 'refused' else 'failed'}: "
                f"{result.error}" + (f" [{result.code}]" if result.code else ""))
    seconds = "n/a" if result.seconds is None else f"{result.seconds:.1f} s"
    lines = [f"{result.pid}: recorded {fmt_count(result.entries)} allocation events in {seconds}"
             + (" (the entry limit was reached: the oldest were dropped)"
                if result.truncated else ""),
             f"snapshot: {result.path or 'n/a'}",
             f"  open it at {MEMORY_VIZ_URL}"]
    if not result.sites:
        lines.append("no allocations recorded")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"{'ALLOCATED':>10}  {'COUNT':>8}  {'STILL LIVE':>10}  SITE")
    for s in result.sites:
        lines.append(f"{fmt_bytes(s.bytes):>10}  {fmt_count(s.count):>8}  "
                     f"{fmt_bytes(s.live_bytes):>10}  {s.site}")
    return "\n".join(lines)


def cmd_record(args: argparse.Namespace) -> int:
    from app.cli.directory import find_entry, open_directory

    directory = open_directory(args)
    entry = find_entry(directory, args.pid)
    if entry is None:
        if args.json:
            print(json.dumps({"pid": args.pid, "ok": False, "error": "no agent in that process",
                              "code": "not_found"}))
        print(f"{APP_NAME}: no agent in process {args.pid} (list them with `agents`)",
              file=sys.stderr)
        return EXIT_NO_AGENT
    result = _record(args, directory, entry)
    if args.json:
        print_json(result.to_json())
    if not args.json or not result.ok:
        say(result_text(result), result.ok)
    if result.ok:
        return EXIT_OK
    return EXIT_NO_AGENT if result.code == "not_found" else EXIT_FAILED


def _record(args: argparse.Namespace, directory: AgentDirectory, entry: AgentEntry
            ) -> RecordResult:
    """The recording; a local agent's own connection says when it has started."""
    from app.core.agents import client
    from app.core.agents.hub import AgentHub

    if not isinstance(directory, AgentHub):
        return directory.record(args.pid, args.seconds, args.max_entries, timeout_s=args.timeout)

    def started() -> None:
        if not args.json:
            print(f"{args.pid}: recording for {args.seconds:g} s…", file=sys.stderr, flush=True)

    return client.record(entry, args.seconds, args.max_entries, args.timeout, on_started=started)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    text = ("record a process's CUDA allocations for a few seconds: a snapshot file for "
            "PyTorch's memory_viz and the top allocation sites")
    p = sub.add_parser("record", parents=[common], help=text,
                       description=text + ". Exit 0 when recorded, 1 when refused or failed, "
                       "2 when there is no agent in that process.")
    p.add_argument("--pid", type=int, required=True, help="the process")
    p.add_argument("--seconds", type=_ranged(float, MIN_SECONDS, MAX_SECONDS, "number"),
                   required=True, metavar="N", help="how long to record (1 to 300)")
    p.add_argument("--max-entries", type=_ranged(int, MIN_ENTRIES, MAX_ENTRIES, "whole number"),
                   default=None, metavar="M",
                   help="the most allocation events kept (1000 to 500000; default: the "
                        "agent's, 100000)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="answer timeout (default: the recording's length + 60)")
    p.set_defaults(func=cmd_record)
