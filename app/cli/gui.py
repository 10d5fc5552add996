"""The GUI (the default command) and its options, among them the offscreen
screenshot.  Qt is imported only when the window is started."""

from __future__ import annotations

import argparse


def cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.shell.application import run_gui

    return run_gui(demo=args.demo, period_s=args.period, screenshot=args.screenshot,
                   after_s=args.after, seed=args.seed, minimised=args.minimised,
                   theme=args.theme)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The window's options, given before any command."""
    parser.add_argument("--period", type=float, default=None, metavar="SECONDS",
                        help="sample period, 0.1 to 10 s (default: the setting, 0.25)")
    parser.add_argument("--minimised", "--minimized", action="store_true",
                        help="start in the tray (minimised where there is no tray); "
                             "what start at login uses")
    parser.add_argument("--theme", choices=("system", "light", "dark"), default=None,
                        help="theme for this run (default: the setting)")
    parser.add_argument("--screenshot", metavar="FILE",
                        help="render the window offscreen to a PNG and exit")
    parser.add_argument("--after", type=float, default=2.0, metavar="SECONDS",
                        help="with --screenshot: collect this long first (default 2)")


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what argparse cannot check alone (exits with status 2)."""
    if args.period is not None and not 0.1 <= args.period <= 10.0:
        parser.error("--period must be between 0.1 and 10 seconds")
