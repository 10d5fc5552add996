"""Command line: the GUI (default), ``status`` and the offscreen screenshot.

``status`` must work over SSH on a server without Qt installed, so Qt is only
imported on the GUI paths.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from app import APP_NAME, __version__

EXIT_OK = 0
EXIT_NO_SOURCE = 2


def _make_source(demo: bool, seed: int = 7):  # type: ignore[no-untyped-def]
    if demo:
        from app.core.demo_source import DemoSource

        return DemoSource(seed=seed)
    from app.core.nvml_source import NvmlSource

    return NvmlSource()


def cmd_status(args: argparse.Namespace) -> int:
    from app.core.collector import Collector
    from app.core.report import snapshot_to_json, snapshot_to_table
    from app.core.source import SourceUnavailable

    collector = Collector(_make_source(args.demo, args.seed))
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
        json.dump(snapshot_to_json(snapshot), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(snapshot_to_table(snapshot))
    if snapshot.error and not snapshot.gpus:
        if not args.json:
            print(f"{APP_NAME}: {snapshot.error}", file=sys.stderr)
        return EXIT_NO_SOURCE
    return EXIT_OK


def cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.application import run_gui

    return run_gui(demo=args.demo, period_s=args.period, screenshot=args.screenshot,
                   after_s=args.after, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vram-steward",
        description=f"{APP_NAME}: live VRAM per GPU and per process.")
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    # Accepted before or after the sub-command; SUPPRESS keeps a sub-command's
    # absent flag from overwriting one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--demo", action="store_true", default=argparse.SUPPRESS,
                        help="simulated GPUs and processes instead of NVML")
    common.add_argument("--seed", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    parser.add_argument("--demo", action="store_true",
                        help="simulated GPUs and processes instead of NVML")
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    parser.add_argument("--period", type=float, default=0.25, metavar="SECONDS",
                        help="sample period, 0.1 to 10 s (default 0.25)")
    parser.add_argument("--screenshot", metavar="FILE",
                        help="render the window offscreen to a PNG and exit")
    parser.add_argument("--after", type=float, default=2.0, metavar="SECONDS",
                        help="with --screenshot: collect this long first (default 2)")
    sub = parser.add_subparsers(dest="command")

    status = sub.add_parser("status", parents=[common], help="one sample as a table or JSON")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--interval", type=float, default=0.2, metavar="SECONDS",
                        help="second reading after this long, for CPU %% and SM %% "
                             "(default 0.2; 0 = single reading)")
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(argv)
    except BrokenPipeError:  # `status | head`: the reader left; exit quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        if not 0.1 <= args.period <= 10.0:
            parser.error("--period must be between 0.1 and 10 seconds")
        return cmd_gui(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
