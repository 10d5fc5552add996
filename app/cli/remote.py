"""``--host URL`` for every command that reads or acts: the same command,
answered by the ``serve`` running on that host.

``ssh://[user@]host[:port]`` runs ``vram-steward serve --stdio`` there
through the system's ``ssh`` (``--remote-command`` or
``$VRAM_STEWARD_REMOTE_COMMAND`` for a virtual environment);
``https://host:port`` takes a token (``--token-file`` or
``$VRAM_STEWARD_TOKEN``) and ``--tls-ca`` for a self-signed certificate.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.remote.agents import RemoteAgents
    from app.core.remote.client import RemoteClient

#: The commands that take ``--host``: everything but the GUI, run, agent-path and serve.
REMOTE_COMMANDS = ("status", "agents", "free-cache", "models", "unload", "reload", "pin",
                   "policy", "doctor", "record", "history", "servers")


def _host_url(text: str) -> str:
    from app.core.remote.address import parse_address

    try:
        parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--host {text!r}: ")) from None
    return text


def add_remote_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("another host")
    group.add_argument("--host", type=_host_url, default=None, metavar="URL",
                       help="ask the server on that host: ssh://[user@]host[:port] or "
                            "http(s)://host:port")
    group.add_argument("--token-file", default=None, metavar="FILE",
                       help="the server's token (HTTP), else $VRAM_STEWARD_TOKEN")
    group.add_argument("--tls-ca", default=None, metavar="FILE",
                       help="certificate authority to trust for https:// (a self-signed "
                            "server's certificate)")
    group.add_argument("--remote-command", default=None, metavar="COMMAND",
                       help="the command that starts VRAM Steward on an ssh:// host "
                            "(default: vram-steward, or $VRAM_STEWARD_REMOTE_COMMAND)")


def connect(args: argparse.Namespace, timeout_s: float = 20.0) -> RemoteClient:
    """A client of ``args.host``; RemoteError (or ValueError for an unreadable
    token file) when it cannot be had."""
    from app.core.remote.client import open_client
    from app.core.serve.access import client_token

    if getattr(args, "demo", False):
        raise ValueError("--demo and --host: the demo runs here; drop one of them")
    try:
        token = client_token(args.token_file)
    except OSError as exc:
        raise ValueError(f"--token-file {args.token_file}: {exc.strerror or exc}") from None
    return open_client(args.host, token, args.tls_ca, args.remote_command, timeout_s)


def remote_directory(args: argparse.Namespace) -> RemoteAgents:
    from app.core.remote.agents import RemoteAgents

    return RemoteAgents(connect(args))
