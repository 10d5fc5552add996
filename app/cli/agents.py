"""``agents`` and ``free-cache``: what each agent's allocator holds, and
releasing its cache, through the agent directory the GUI uses."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_NO_AGENT, EXIT_OK, gather, print_json, say


def cmd_agents(args: argparse.Namespace) -> int:
    from app.cli.directory import open_directory, read_reports
    from app.core.agents.client import report_to_json

    answers = read_reports(open_directory(args), args.timeout)
    records = [report_to_json(a.report, a.entry, a.error) for a in answers]
    if args.json:
        print_json(records)
    else:
        print(_agents_table(records))
    return EXIT_OK


def _agents_table(records: list[dict[str, Any]]) -> str:
    from app.core.units import NA, fmt_bytes

    if not records:
        return "no agents (start a program with `python main.py run -- COMMAND`)"
    lines = [f"{'PID':>8}  {'TORCH':<14} {'DEV':<4} {'ALLOCATED':>10} {'RESERVED':>10} "
             f"{'CACHE':>10} {'MODELS':>6}  COMMAND"]
    for r in records:
        command = " ".join(r["argv"])[:60]
        pid = NA if r["pid"] is None else r["pid"]
        torch = r["torch"] or r["torch_status"] or "?"
        if r["error"]:
            lines.append(f"{pid:>8}  {torch:<14} {'-':<4} {'error: ' + r['error']}"[:120])
            continue
        devices = r["devices"] or [None]
        for i, d in enumerate(devices):
            if d is None:
                dev = alloc = res = cache = "-"
                if r["cuda_initialized"] is False:
                    dev = "cpu"
            else:
                dev = str(d["index"])
                alloc, res = fmt_bytes(d["allocated"]), fmt_bytes(d["reserved"])
                cache = fmt_bytes(None if d["reserved"] is None or d["allocated"] is None
                                 else max(0, d["reserved"] - d["allocated"]))
            head = f"{pid:>8}  {torch:<14}" if i == 0 else f"{'':>8}  {'':<14}"
            lines.append(f"{head} {dev:<4} {alloc:>10} {res:>10} {cache:>10} "
                         f"{len(r['models']) if i == 0 else '':>6}  {command if i == 0 else ''}")
        for m in r["models"]:
            mode = {True: "train", False: "eval"}.get(m["training"], "?")
            group = f" [{m['group']}]" if m["group"] else ""
            count = m["params"]
            params = NA if count is None else (
                f"{count / 1e6:.1f}M params" if count >= 100_000 else f"{count:,} params")
            size = fmt_bytes(m["param_bytes"])
            cls = (m["class"] or "?").rsplit(".", 1)[-1]
            lines.append(f"{'':>10}- {m['name']} ({cls}){group}: {params}, {size}, "
                         f"{m['device'] or NA}, {m['dtype'] or NA}, {mode}")
    return "\n".join(lines)


def cmd_free_cache(args: argparse.Namespace) -> int:
    from app.cli.directory import open_directory
    from app.core.agents.types import AgentEntry, FreeCacheResult
    from app.core.units import fmt_bytes

    directory = open_directory(args)
    entries = directory.entries()
    if not args.all:
        wanted = set(args.pid)
        entries = [e for e in entries if e.pid in wanted]
    if not entries:
        what = "no agents are running" if args.all else \
            f"no agent in process {', '.join(map(str, args.pid))}"
        if args.json:
            print("[]")
        print(f"{APP_NAME}: {what}", file=sys.stderr)
        return EXIT_NO_AGENT

    def one(entry: AgentEntry) -> FreeCacheResult:
        return directory.free_cache(entry.pid, args.timeout)

    results = gather(one, entries)
    if args.json:
        print_json([r.to_json() for r in results])
    for r in results:
        if not r.ok:  # on stderr, --json or not
            say(f"{r.pid}: free-cache failed: {r.error or 'no reason given'}", ok=False)
        elif not args.json:
            say(f"{r.pid}: freed {fmt_bytes(r.freed)} (reserved "
                f"{fmt_bytes(r.reserved_before)} -> {fmt_bytes(r.reserved_after)})")
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    agents = sub.add_parser("agents", parents=[common],
                            help="list attached agents: allocator figures and models")
    agents.add_argument("--json", action="store_true", help="machine-readable output")
    agents.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                        help="per-agent answer timeout (default 2)")
    agents.set_defaults(func=cmd_agents)

    free = sub.add_parser("free-cache", parents=[common],
                          help="gc.collect() + torch.cuda.empty_cache() in agent processes")
    target = free.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                        help="the process (repeatable)")
    target.add_argument("--all", action="store_true", help="every attached process")
    free.add_argument("--json", action="store_true", help="machine-readable output")
    free.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                      help="per-process timeout (default 30)")
    free.set_defaults(func=cmd_free_cache)
