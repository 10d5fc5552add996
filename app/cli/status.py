"""``status``: one sample as a table or JSON.

Works over SSH on a server without Qt: nothing here imports it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from app import APP_NAME
from app.cli.common import EXIT_NO_SOURCE, EXIT_OK, print_json, tell

if TYPE_CHECKING:
    from app.core.monitor.samples import Snapshot
    from app.core.monitor.source import GpuSource
    from app.core.servers.directory import ServerDirectory


def make_source(demo: bool, seed: int = 7, size: tuple[int, int] | None = None,
                refresh_s: float = 0.0) -> GpuSource:
    """The demo's or NVML's; ``refresh_s``: per-process SM % asked of the
    driver at most this often (a headless server's once a second)."""
    if demo:
        from app.core.monitor.demo_source import demo_source

        return demo_source(size, seed)
    from app.core.monitor.nvml_source import NvmlSource

    return NvmlSource(sm_refresh_s=refresh_s)


def cmd_status(args: argparse.Namespace) -> int:
    from app.core.monitor.collector import Collector
    from app.core.monitor.report import snapshot_to_json, snapshot_to_table
    from app.core.monitor.source import SourceUnavailable

    if args.host:
        snapshot = _remote_snapshot(args)
    elif args.demo:  # the demo at its moment, as every demo command shows it
        from app.core.agents.demo_moment import demo_moment

        snapshot = demo_moment(args.seed, args.demo_size).snapshot
    else:
        collector = Collector(make_source(args.demo, args.seed, size=args.demo_size),
                              servers=None if args.demo else scanned_servers())
        try:
            collector.open()
        except SourceUnavailable as exc:
            print(f"{APP_NAME}: {exc.reason}", file=sys.stderr)
            return EXIT_NO_SOURCE
        try:
            snapshot = collector.collect()
            if args.interval > 0:
                # CPU % and SM % are rates: a second reading makes them real
                # instead of "n/a" (the first psutil reading has nothing to compare with).
                time.sleep(args.interval)
                snapshot = collector.collect()
        finally:
            collector.close()
    if args.json:
        print_json(snapshot_to_json(snapshot))
    else:
        print(snapshot_to_table(snapshot))
    if snapshot.error and not snapshot.gpus:  # --json or not: the JSON says it too
        print(f"{APP_NAME}: {snapshot.error}", file=sys.stderr)
        return EXIT_NO_SOURCE
    return EXIT_OK


def scanned_servers(only: int | None = None) -> ServerDirectory:
    """This host's model servers, scanned and asked once (``only``: just the one
    holding that pid; a server that hangs costs about a second); the keys file
    refused is told once."""
    from app.core.servers.directory import ServerDirectory

    servers = ServerDirectory(timeout_s=1.0)
    for line in servers.notices():
        tell(f"{APP_NAME}: {line}")
    servers.refresh(only)
    return servers


def _remote_snapshot(args: argparse.Namespace) -> Snapshot:
    """The server's latest snapshot (its rates are already real: it samples on)."""
    from app.cli.remote import connect

    client = connect(args)
    try:
        return client.snapshot()
    finally:
        client.close()


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    status = sub.add_parser("status", parents=[common], help="one sample as a table or JSON")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--interval", type=float, default=0.2, metavar="SECONDS",
                        help="second reading after this long, for CPU %% and SM %% "
                             "(default 0.2; 0 = single reading)")
    status.set_defaults(func=cmd_status)
