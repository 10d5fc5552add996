"""``history``: the samples stored on disk, as a table or JSON.

Reads the database read-only (it works while the app records); imports
neither Qt nor NVML.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_OK, print_json, tell

EXIT_BAD_INPUT = 2
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str) -> float:
    """``10m``, ``1h``, ``2d``, ``30s`` as seconds; ValueError otherwise."""
    match = _SINCE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"--since: expected a duration such as 30s, 10m, 1h or 2d, "
                         f"not {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def cmd_history(args: argparse.Namespace) -> int:
    try:
        since_s = parse_since(args.since)
    except ValueError as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.host:
        from app.cli.remote import connect

        client = connect(args)
        try:
            records = client.history(since_s, args.pid, args.gpu)
        finally:
            client.close()
        path = args.host
    else:
        from app.core.paths import history_db_path, state_notice
        from app.core.store.query import read_history
        from app.core.store.records import history_records

        notice = state_notice()
        if notice:  # nothing is read from a folder that is not private
            tell(notice)
            return EXIT_FAILED
        path = history_db_path()
        stored = read_history(path, time.time() - since_s, pid=args.pid)
        if stored.error:
            print(f"{APP_NAME}: {stored.error}", file=sys.stderr)
            return EXIT_FAILED
        records = history_records(stored, args.gpu, args.pid)
    if args.json:
        print_json(records)
    elif records:
        print(history_table(records))
    else:
        print(f"No stored samples in the last {args.since} ({path}).")
    return EXIT_OK


def history_table(records: list[dict[str, Any]]) -> str:
    from app.core.units import NA, fmt_bytes

    head = ("time", "gpu", "uuid", "used", "total", "processes (pid bytes)")
    rows = []
    for r in records:
        procs = ", ".join(f"{p['pid']} {fmt_bytes(p['gpu_memory'])}" for p in r["processes"])
        rows.append((time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["timestamp"])),
                     NA if r["gpu_index"] is None else str(r["gpu_index"]), r["gpu_uuid"] or NA,
                     fmt_bytes(r["memory_used"]), fmt_bytes(r["memory_total"]), procs or "-"))
    widths = [max(len(str(row[c])) for row in (head, *rows)) for c in range(len(head) - 1)]
    lines = []
    for row in (head, *rows):
        cells = [str(cell).ljust(w) if c < 3 else str(cell).rjust(w)
                 for c, (cell, w) in enumerate(zip(row[:-1], widths, strict=True))]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    history = sub.add_parser("history", help="stored samples (the history kept on disk)")
    history.add_argument("--gpu", type=int, default=None, metavar="N", help="GPU index N only")
    history.add_argument("--pid", type=int, default=None, metavar="PID",
                         help="only the samples process PID appears in")
    history.add_argument("--since", default="1h", metavar="DURATION",
                         help="how far back: 30s, 10m, 1h, 2d (default 1h)")
    history.add_argument("--json", action="store_true", help="machine-readable output")
    history.set_defaults(func=cmd_history)
