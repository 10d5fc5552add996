"""``serve``: the core running headless on a GPU host.

It samples, records history and OOM reports, applies the idle policy as the
window does, and answers over HTTP(S) (``--listen``) or a pipe
(``--stdio``, for ``ssh host vram-steward serve --stdio``).  Qt is never
imported.  SIGTERM and SIGINT end it cleanly.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_OK, tell
from app.core.remote.host_config import is_loopback

EXIT_BAD_INPUT = 2
DEFAULT_PORT = 9847
TOKEN_FILE_NAME = "serve-tokens"

log = logging.getLogger("app.serve")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``HOST`` (the default port)."""
    host, port = text, str(DEFAULT_PORT)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--listen {text!r}: the port is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--listen {text!r}: ports are 0 to 65535")
    return host or "127.0.0.1", number


def cmd_serve(args: argparse.Namespace) -> int:
    _logging(args.verbose)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    problem = _listen_problem(args, host)
    if problem:
        print(f"{APP_NAME}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        grants, open_read = ([], False) if args.stdio else _grants(args, host)
        tls = None if args.stdio else _tls(args)
    except (OSError, ValueError) as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from app.cli.status import make_source
    from app.core.serve.engine import HOST_REFRESH_S
    from app.core.serve.setup import build_api, build_engine

    source = make_source(args.demo, args.seed, size=args.demo_size, refresh_s=HOST_REFRESH_S)
    # A stdio server lasts one SSH connection: a policy there would come and go
    # with the connection, beside the host's own; none unless asked for.
    auto_unload = False if args.stdio and args.auto_unload is None else args.auto_unload
    engine = build_engine(source, args.period, history=not args.no_history,
                          auto_unload=auto_unload)
    api = build_api(engine, session=args.stdio)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    engine.start()
    try:
        if args.stdio:
            return _serve_stdio(api, stop)
        return _serve_http(api, engine, args, (host, port), grants, open_read, tls, stop)
    finally:
        engine.stop()


def _serve_http(api: Any, engine: Any, args: argparse.Namespace, address: tuple[str, int],
                grants: list, open_read: bool, tls: Any, stop: threading.Event) -> int:
    from app.core.serve.http import ServeHttp

    metrics = None
    if args.process_metrics != "off" or not args.no_gpu_metrics:
        from app.core.serve.metrics import metrics_registry

        limit = None if args.process_metrics == "all" else \
            0 if args.process_metrics == "off" else int(args.process_metrics)
        metrics = metrics_registry(engine.state, process_limit=limit,
                                   gpu_series=not args.no_gpu_metrics)
    try:
        server = ServeHttp(address, api, grants, open_read, metrics, tls)
    except OSError as exc:
        print(f"{APP_NAME}: cannot listen on {args.listen}: {exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_FAILED
    print(f"listening on {server.url}", flush=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="vram-steward-http", daemon=True)
    thread.start()
    try:
        while not stop.is_set():  # a timeout: a signal another thread caught wakes no wait
            stop.wait(0.2)
    finally:
        server.shutdown()
        server.server_close()
    log.info("stopped")
    return EXIT_OK


def _serve_stdio(api: Any, stop: threading.Event) -> int:
    from app.core.serve.stdio import StdioServer

    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout = sys.stderr  # nothing else may write into the protocol
    server = StdioServer(api, sys.stdin.buffer, out)
    thread = threading.Thread(target=server.run, name="vram-steward-stdio", daemon=True)
    thread.start()
    while not stop.is_set() and not server.closed.is_set():
        stop.wait(0.2)
    return EXIT_OK


def _listen_problem(args: argparse.Namespace, host: str) -> str | None:
    if args.stdio:
        return None
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together"
    if is_loopback(host) or args.tls_cert:
        return None
    if args.insecure:
        log.warning("serving plain HTTP on %s: tokens, process names, commands and users "
                    "cross the network readable by anyone on the path (--insecure)", host)
        return None
    return (f"--listen {host}: an address other than loopback needs TLS (--tls-cert FILE "
            "--tls-key FILE), or --insecure to send tokens and process details in the clear")


def _grants(args: argparse.Namespace, host: str) -> tuple[list, bool]:
    """The server's tokens and whether reads need none (loopback, and no
    token file of the user's: the generated one only guards control)."""
    from app.core.paths import private_state_dir
    from app.core.serve.access import create_token_file, read_token_file

    if args.token_file:
        return read_token_file(args.token_file), False
    path = os.path.join(private_state_dir(), TOKEN_FILE_NAME)
    if not os.path.lexists(path):
        create_token_file(path)
        log.warning("made a token (read, control) in %s", path)
    tell(f"tokens: {path} (clients: --token-file {path})")
    return read_token_file(path), is_loopback(host)


def _tls(args: argparse.Namespace) -> Any:
    if not args.tls_cert:
        return None
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.tls_cert, args.tls_key)
    return context


def _logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("app.serve").setLevel(logging.INFO)


def _period(text: str) -> float:
    """The window's bounds: 0.1 to 10 s."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= value <= 10.0:
        raise argparse.ArgumentTypeError(f"{text}: between 0.1 and 10 seconds")
    return value


def _metrics_option(text: str) -> str:
    if text in ("all", "off") or (text.isdigit() and int(text) > 0):
        return text
    raise argparse.ArgumentTypeError(f"'all', 'off' or a count, not {text!r}")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common],
                       help="run headless: history, OOM reports, idle policy, an API and "
                            "Prometheus metrics")
    p.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", metavar="HOST:PORT",
                   help=f"address to serve HTTP on (default 127.0.0.1:{DEFAULT_PORT}; "
                        "port 0 picks a free one)")
    p.add_argument("--stdio", action="store_true",
                   help="speak the protocol on stdin/stdout (what an SSH client runs)")
    p.add_argument("--token-file", metavar="FILE",
                   help="tokens, one per line: TOKEN USER read[,control] (a 0600 file of "
                        "yours); default: one made in the state folder")
    p.add_argument("--tls-cert", metavar="FILE", help="TLS certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    p.add_argument("--insecure", action="store_true",
                   help="allow plain HTTP on an address other than loopback")
    p.add_argument("--period", type=_period, default=0.25, metavar="SECONDS",
                   help="seconds between samples (default 0.25, as the window)")
    p.add_argument("--process-metrics", type=_metrics_option, default="all",
                   metavar="all|off|N", help="per-process series: all, off, or the N largest")
    p.add_argument("--no-gpu-metrics", action="store_true",
                   help="leave GPU series out of /metrics (a per-user server on a host whose "
                        "system service exports them)")
    p.add_argument("--no-history", action="store_true", help="record no history")
    p.add_argument("--auto-unload", action=argparse.BooleanOptionalAction, default=None,
                   help="unload idle models under memory pressure, as the window does "
                        "(default: on, except for a server that reads every user's agents "
                        "(root), which acts on nobody's processes unless told to, and "
                        "--stdio, which lasts one SSH connection)")
    p.add_argument("--verbose", action="store_true", help="debug logging on stderr")
    p.set_defaults(func=cmd_serve)
