"""The GUI (the default command) and its options, among them the offscreen
screenshot.  Qt is imported only when the window is started, and only after
the checks that would otherwise end in Qt's abort or a stuck process."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import EXIT_FAILED, EXIT_NO_DISPLAY

if TYPE_CHECKING:
    from app.core.remote.host_config import HostConfig

#: The ``--size`` range: a usable window up to an 8K screen.
MIN_SIZE = (640, 400)
MAX_SIZE = (7680, 4320)
_SIZE = re.compile(r"(\d+)x(\d+)")


def cmd_gui(args: argparse.Namespace) -> int:
    if args.screenshot:
        problem = unwritable(Path(args.screenshot))
        if problem is not None:
            print(f"vram-steward: cannot write the screenshot: {problem}", file=sys.stderr)
            return EXIT_FAILED
    else:
        from app.cli.display import check_display

        display = check_display()
        if display is not None:
            print(display.line, file=sys.stderr)
            return EXIT_NO_DISPLAY
    try:
        hosts = given_hosts(args)
    except ValueError as exc:
        print(f"vram-steward: {exc}", file=sys.stderr)
        return EXIT_FAILED
    from app.ui.shell.application import run_gui

    return run_gui(demo=args.demo, period_s=args.period, screenshot=args.screenshot,
                   after_s=args.after, seed=args.seed, minimised=args.minimised,
                   theme=args.theme, size=args.size, demo_size=args.demo_size, hosts=hosts)


def given_hosts(args: argparse.Namespace) -> list[HostConfig]:
    """The ``--host`` URLs, each with ``--token-file`` / ``--tls-ca`` (https)
    or ``--remote-command`` (ssh); ValueError saying what is wrong."""
    from app.core.remote.address import parse_address
    from app.core.remote.host_config import HostConfig, check_host

    out: list[HostConfig] = []
    for url in args.hosts or ():
        if args.demo:
            raise ValueError("--demo and --host: the demo runs here; drop one of them")
        ssh = parse_address(url).scheme == "ssh"
        config = HostConfig(url, None if ssh else args.gui_token_file,
                            args.gui_tls_ca if not ssh else None,
                            args.gui_remote_command if ssh else None)
        out.append(check_host(config, out))
    return out


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
    parser.add_argument("--size", type=parse_size, default=None, metavar="WxH",
                        help="with --screenshot: the window's size in pixels, "
                             f"{MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIZE[0]}x{MAX_SIZE[1]}")
    hosts = parser.add_argument_group("remote hosts in the window")
    hosts.add_argument("--host", dest="hosts", action="append", default=None, metavar="URL",
                       help="also show this host (ssh://[user@]host[:port] or "
                            "https://host:port), for this run; repeatable")
    hosts.add_argument("--token-file", dest="gui_token_file", default=None, metavar="FILE",
                       help="with --host https://…: a private file with the server's token")
    hosts.add_argument("--tls-ca", dest="gui_tls_ca", default=None, metavar="FILE",
                       help="with --host https://…: the certificate to trust (self-signed)")
    hosts.add_argument("--remote-command", dest="gui_remote_command", default=None,
                       metavar="COMMAND",
                       help="with --host ssh://…: what starts VRAM Steward there "
                            "(default: vram-steward)")


def parse_size(text: str) -> tuple[int, int]:
    """``WxH`` within MIN_SIZE..MAX_SIZE (argparse exits with status 2 otherwise)."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT such as 1280x860, not {text!r}")
    width, height = int(match[1]), int(match[2])
    if not (MIN_SIZE[0] <= width <= MAX_SIZE[0] and MIN_SIZE[1] <= height <= MAX_SIZE[1]):
        raise argparse.ArgumentTypeError(
            f"{text}: from {MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIZE[0]}x{MAX_SIZE[1]}")
    return width, height


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what argparse cannot check alone (exits with status 2)."""
    if args.period is not None and not 0.1 <= args.period <= 10.0:
        parser.error("--period must be between 0.1 and 10 seconds")
    if args.size is not None and not args.screenshot:
        parser.error("--size applies to --screenshot only")


def unwritable(path: Path) -> str | None:
    """Why the screenshot cannot be saved at ``path``, found before the window is
    built: its folder must exist (none is made: a typo must not leave folders
    behind), then the file is opened for writing; a file this creates is
    removed again.  None: it can."""
    if path.is_dir():
        return f"{path} is a folder"
    folder = path.parent
    if not folder.exists():
        return f"{folder}: no such folder"
    if not folder.is_dir():
        return f"{folder} is not a folder"
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if not existed:
        path.unlink(missing_ok=True)
    return None
