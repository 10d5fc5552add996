"""``servers``: the model servers on this host (Ollama, ComfyUI, AUTOMATIC1111,
LM Studio, ...), what each holds and what its unload does; and the server
half of ``models`` and ``unload``.

One-shot: the process list is scanned and every server's API asked once,
then NVML is read once so each server's processes' memory is joined in.
An unload keeps reading NVML (twice a second) until its outcome is known.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_OK, print_json

if TYPE_CHECKING:
    from app.core.agents.types import ModelActionResult
    from app.core.monitor.collector import Collector
    from app.core.monitor.samples import Snapshot
    from app.core.servers.directory import ServerDirectory


@contextmanager
def local_servers(only: int | None = None) -> Iterator[tuple[Collector, ServerDirectory]]:
    """A collector over this host's GPUs (NVML; none: servers still listed)
    joined with a scanned and probed server directory (``only``: just the
    server holding that pid, or none when no server does)."""
    from app.cli.status import scanned_servers
    from app.core.monitor.collector import Collector
    from app.core.monitor.nvml_source import NvmlSource

    servers = scanned_servers(only)
    collector = Collector(NvmlSource(), servers=servers, pressure_policy=False, doctor=False)
    try:
        yield collector, servers
    finally:
        collector.close()


def server_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    """``servers --json``: each server as the wire carries it, with the bytes
    NVML shows for its processes."""
    from app.core.servers.attribution import usage_of
    from app.core.wire.codec import encode

    out = []
    for server in snapshot.servers:
        row = encode(server)
        usage = usage_of(snapshot, server.pids)
        row["gpu_memory"] = usage.total if usage.bytes_by_gpu else None
        row["gpu_memory_by_gpu"] = {str(k): v for k, v in usage.bytes_by_gpu.items()}
        out.append(row)
    return out


def server_model_records(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The ``models --json`` rows of the servers' models (``"kind": "server"``)."""
    out = []
    for s in snapshot.servers:
        for m in s.models:
            idle = None if m.idle_since is None else max(0.0, snapshot.timestamp - m.idle_since)
            out.append({
                "kind": "server", "server": s.kind, "server_label": s.label, "pid": s.pid,
                "pids": list(s.pids), "id": m.id, "name": m.name, "state": m.state,
                "bytes": m.vram_bytes, "vram_bytes": m.vram_bytes, "size_bytes": m.size_bytes,
                "figure": m.figure, "gpu": m.gpu, "busy": m.busy, "expires_at": m.expires_at,
                "idle_since": m.idle_since, "idle_s": None if idle is None else round(idle, 1),
                "unload": m.unload if s.can_unload else None,
                "no_unload": None if s.can_unload else s.unload_note,
            })
    return out


def managed_pids(snapshot: Snapshot) -> set[int]:
    """Processes whose models their server reports: the agent's rows would repeat them."""
    return {p for s in snapshot.servers if s.reachable for p in s.pids}


def cmd_servers(args: argparse.Namespace) -> int:
    if getattr(args, "demo", False):  # the demo's machine runs no model server
        print_json([]) if args.json else print(servers_table_none())
        return EXIT_OK
    if args.host:
        from app.cli.status import _remote_snapshot

        snapshot = _remote_snapshot(args)
    else:
        with local_servers() as (collector, _):
            snapshot = collector.collect()
    if args.json:
        print_json(server_rows(snapshot))
    else:
        print(servers_table(snapshot))
    return EXIT_OK


def servers_table(snapshot: Snapshot) -> str:
    from app.core.servers.attribution import usage_of
    from app.core.units import NA, fmt_bytes

    if not snapshot.servers:
        return servers_table_none()
    lines = []
    for s in snapshot.servers:
        usage = usage_of(snapshot, s.pids)
        held = fmt_bytes(usage.total) if usage.bytes_by_gpu else NA
        pids = ",".join(str(p) for p in s.pids[:4]) + ("…" if len(s.pids) > 4 else "")
        state = "generating" if s.busy else "idle" if s.busy is False else ""
        lines.append(f"{s.display} · pid {pids} · {s.endpoint or 'no API'} · {held} on GPU"
                     + (f" · {state}" if state else "") + (f" · {s.user}" if s.user else ""))
        if s.error:
            lines.append(f"    API: {s.error}")
        for m in s.models:
            where = f"GPU {m.gpu}" if m.gpu is not None else "GPU n/a"
            vram = fmt_bytes(m.vram_bytes) if m.vram_bytes is not None else NA
            lines.append(f"    {m.name}: {vram} ({m.figure or 'no figure from the server'}) "
                         f"on {where}, {m.state}")
        if s.reservation is not None:
            lines.append(f"    {s.reservation.text}")
        if s.unload_note:
            lines.append(f"    {'unload' if s.can_unload else 'no unload'}: {s.unload_note}")
    return "\n".join(lines)


def servers_table_none() -> str:
    return ("no model servers found (Ollama, ComfyUI, AUTOMATIC1111 / Forge, LM Studio, "
            "text-generation-webui, vLLM, SGLang, llama.cpp, TGI)")


def unload_on_server(args: argparse.Namespace, reload: bool = False
                     ) -> ModelActionResult | None:
    """``unload`` / ``reload`` of a model a local server holds, its outcome
    measured from NVML; None when no server holds ``--pid`` (the caller then
    asks the agents)."""
    from app.cli.directory import find_entry, real_agents
    from app.core.servers import unloading
    from app.core.servers.directory import ServerDirectory
    from app.core.servers.routing import as_result

    scout = ServerDirectory(keys=[])
    scout.scan()
    if scout.found(args.pid) is None:
        return None  # no server here: the agents' business
    with local_servers(only=args.pid) as (collector, servers):
        collector.collect()
        server = servers.owner(args.pid)
        if server is None or (server.model(args.model) is None
                              and find_entry(real_agents(), args.pid) is not None):
            return None  # the agent's own model in a process that is also a server
        stop = threading.Event()

        def sample() -> None:  # the outcome is measured on the snapshots that follow
            while not stop.wait(0.5):
                collector.collect()

        ticker = threading.Thread(target=sample, name="unload-sampler", daemon=True)
        ticker.start()
        try:
            if reload:
                result = as_result(unloading.reload(servers, args.pid, args.model))
            else:
                found = servers.found(args.pid)
                longest = servers.adapters[found.kind].deadline_s if found else 0.0
                deadline = args.timeout if args.timeout < longest else None  # --timeout
                result = as_result(unloading.unload(servers, args.pid, args.model, deadline))
        finally:
            stop.set()
            ticker.join(timeout=5)
    return result


def cmd_server_key(args: argparse.Namespace) -> int:
    """Keep a server's API key (read from stdin, never from the command line,
    which every local user can read in the process list)."""
    from app.core.servers.keys import save_key

    secret = sys.stdin.readline().strip()
    admin = sys.stdin.readline().strip() or None if args.admin else None
    if not secret or (args.basic and ":" not in secret) or (args.admin and not admin):
        print(f"{APP_NAME}: give the key on stdin" + (" as user:password" if args.basic else "")
              + (", and the admin key on a second line" if args.admin else ""), file=sys.stderr)
        return EXIT_FAILED
    try:
        path = save_key(args.kind, args.port, None if args.basic else secret,
                        secret if args.basic else None, admin=admin)
    except (ValueError, OSError) as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"saved the {args.kind} key" + (f" for port {args.port}" if args.port else "")
          + f" in {path} (mode 0600)")
    return EXIT_OK


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from app.core.servers.keys import KINDS

    p = sub.add_parser("servers", parents=[common],
                       help="model servers on this host (Ollama, ComfyUI, AUTOMATIC1111, "
                            "LM Studio, ...) and what they hold")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_servers)
    k = sub.add_parser("server-key", help="keep the API key of a model server that asks for "
                                          "one (read from stdin)")
    k.add_argument("kind", choices=KINDS)
    k.add_argument("--port", type=int, default=None, help="only for the server on this port")
    k.add_argument("--basic", action="store_true",
                   help="HTTP Basic user:password (AUTOMATIC1111's --api-auth) instead of a "
                        "bearer token")
    k.add_argument("--admin", action="store_true",
                   help="a second line on stdin: text-generation-webui's --admin-key (model "
                        "loading and unloading)")
    k.set_defaults(func=cmd_server_key)


__all__ = ["cmd_server_key", "cmd_servers", "local_servers", "managed_pids", "register",
           "server_model_records", "server_rows", "unload_on_server"]
