"""The model manager: ``models``, ``unload``, ``reload``, ``pin`` and ``policy``,
through the agent directory the GUI uses (``--demo``: the demo's at its moment,
after the pressure policy's first unloads)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_NO_AGENT, EXIT_OK, print_json, say
from app.cli.servers import managed_pids, server_model_records

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.types import AgentReport, ModelActionResult
    from app.core.monitor.samples import Snapshot

#: What a model action's failure code means for the exit status.
_NOT_FOUND_CODES = frozenset({"not_found"})


# ------------------------------------------------------------------ models


def model_records(report: AgentReport, now: float | None = None) -> list[dict[str, Any]]:
    """The ``models --json`` records of one agent's report (bytes, epoch seconds).

    ``idle_s`` is the agent's idle clock (``idle_since``: the last forward, else
    when it first saw the model; an older agent's last forward); ``blocker`` is
    what keeps the model resident: ``unload_blocker``, else ``auto_unload_blocker``.
    None is unknown, never 0."""
    seen_at = now if now is not None else (report.received_at or time.time())
    out = []
    for m in report.models:
        home = m.home_device or m.device
        idle = m.idle_s(seen_at)
        out.append({
            "pid": report.pid, "id": m.id, "name": m.name, "class": m.class_name,
            "group": m.group, "state": m.state, "offloaded_to": m.offloaded_to,
            "pinned": m.pinned, "device": m.device, "home_device": home, "dtype": m.dtype,
            "training": m.training, "requires_grad": m.requires_grad,
            "training_evidence": m.training_evidence, "params": m.params,
            "param_bytes": m.param_bytes, "buffer_bytes": m.buffer_bytes,
            "placeholder_bytes": m.placeholder_bytes,
            "bytes": None if m.param_bytes is None else m.param_bytes + (m.buffer_bytes or 0),
            "last_used": m.last_used, "first_seen": m.first_seen, "idle_since": m.idle_since,
            "idle_s": None if idle is None else round(idle, 1),
            "blocker": m.blocker, "unload_blocker": m.unload_blocker,
            "auto_unload_blocker": m.auto_unload_blocker,
            "idle_unload_s": report.idle_unload_s,
            "command": " ".join(report.argv),
        })
    return out


def cmd_models(args: argparse.Namespace) -> int:
    from app.cli.directory import open_directory, read_reports

    answers = read_reports(open_directory(args), args.timeout)
    servers = _servers_snapshot(args)
    managed = managed_pids(servers) if servers is not None else set()
    records = [{"kind": "agent", **rec} for a in answers
               if a.report is not None and a.report.pid not in managed
               for rec in model_records(a.report)]
    if servers is not None:
        records += server_model_records(servers)
    if args.json:
        print_json(records)
    else:
        print(_models_table(records))
    for a in answers:
        if a.error is not None and a.entry is not None:
            print(f"{APP_NAME}: {a.entry.pid}: {a.error}", file=sys.stderr)
    return EXIT_OK


def _servers_snapshot(args: argparse.Namespace) -> Snapshot | None:
    """The snapshot whose servers' models ``models`` lists (None: the demo's)."""
    if getattr(args, "demo", False):
        return None
    if getattr(args, "host", None):
        from app.cli.status import _remote_snapshot

        return _remote_snapshot(args)
    from app.cli.servers import local_servers

    with local_servers() as (collector, _):
        return collector.collect()


def _models_table(records: list[dict[str, Any]]) -> str:
    from app.core.units import NA, fmt_bytes, fmt_duration

    if not records:
        return "no models (start a program with `python main.py run -- COMMAND`)"
    lines = [f"{'PID':>8}  {'ID':<10} {'NAME':<20} {'CLASS':<22} {'MODE':<5} {'STATE':<16} "
             f"{'DEVICE':<7} {'HOME':<7} {'PARAMS':>8} {'SIZE':>10} {'IDLE':>11} PIN  BLOCKER"]
    for r in records:
        if r["kind"] == "server":
            lines.append(_server_line(r))
            continue
        count = r["params"]
        params = NA if count is None else (
            f"{count / 1e6:.1f}M" if count >= 100_000 else f"{count:,}")
        size = fmt_bytes(r["bytes"])
        state = r["state"] + (f" ({r['offloaded_to']})" if r["offloaded_to"] else "")
        mode = {True: "train", False: "eval"}.get(r["training"], "?")
        cls = (r["class"] or "?").rsplit(".", 1)[-1]
        lines.append(f"{r['pid']:>8}  {r['id'][:10]:<10} {r['name'][:20]:<20} {cls[:22]:<22} "
                     f"{mode:<5} {state:<16} {(r['device'] or NA)[:7]:<7} "
                     f"{(r['home_device'] or NA)[:7]:<7} {params:>8} {size:>10} "
                     f"{fmt_duration(r['idle_s']):>11} "
                     f"{'yes' if r['pinned'] else '-':<4} {r['blocker'] or '-'}")
    return "\n".join(lines)


def _server_line(r: dict[str, Any]) -> str:
    from app.core.units import NA, fmt_bytes, fmt_duration

    size = fmt_bytes(r["vram_bytes"]) if r["vram_bytes"] is not None else NA
    how = r["unload"] or f"no unload: {r['no_unload']}"
    return (f"{r['pid']:>8}  {r['id'][:10]:<10} {r['name'][:20]:<20} "
            f"{r['server_label'][:22]:<22} {'':<5} {r['state'][:16]:<16} "
            f"{('GPU ' + str(r['gpu'])) if r['gpu'] is not None else NA:<7} {'':<7} {'':>8} "
            f"{size:>10} {fmt_duration(r['idle_s']):>11} {'-':<4} {how}")


# ----------------------------------------------------------------- actions


def _one_agent(args: argparse.Namespace) -> AgentDirectory | None:
    """The directory to act through when it knows process ``--pid``, else None
    (after saying so: :func:`_no_agent`)."""
    from app.cli.directory import find_entry, open_directory
    from app.core.servers.types import holding

    directory = open_directory(args)
    if find_entry(directory, args.pid) is not None:
        return directory
    if getattr(args, "host", None) and getattr(args, "model", None):
        # A model server there: its serve unloads through the server's API.
        snapshot = _servers_snapshot(args)
        if snapshot is not None and holding(snapshot.servers, args.pid) is not None:
            return directory
    return None


def _no_agent(args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"pid": args.pid, "model": getattr(args, "model", None), "ok": False,
                          "error": "no agent in that process", "code": "not_found"}))
    print(f"{APP_NAME}: no agent in process {args.pid} (list them with `agents`)",
          file=sys.stderr)
    return EXIT_NO_AGENT


def _action_exit(ok: bool, code: str | None) -> int:
    if ok:
        return EXIT_OK
    return EXIT_NO_AGENT if code in _NOT_FOUND_CODES else EXIT_FAILED


def _action_text(result: ModelActionResult, verb: str) -> str:
    """What an unload, reload or pin did, or why not, in one line (a refused
    unload that ``--force`` could push through: and a second line saying so)."""
    from app.core.units import fmt_bytes

    ev = result.event
    who = f"{result.pid} {ev.name if ev else result.model}"
    if result.outcome is not None:  # a model server's unload, measured from NVML
        return f"{who}: {verb} {result.outcome}" + (f": {result.note}" if result.note else "")
    if not result.ok:
        how = "refused" if result.code in ("refused", "managed") else "failed"
        return (f"{who}: {verb} {how}: {result.error or 'no reason given'}"
                + (f" [{result.code}]" if result.code else "") + _force_hint(result, verb))
    if ev is None:
        return f"{who}: {verb} done"
    where = {"unload": "offloaded" + (f" to {ev.target}" if ev.target else ""),
             "reload": "resident again" + (f" (from {ev.target})" if ev.target else "")}
    text = f"{who}: {where.get(ev.action, ev.state)}: moved {fmt_bytes(ev.bytes_moved)}"
    if ev.seconds is not None:
        text += f" in {ev.seconds:.2f} s"
    if ev.bytes_released is not None:
        text += f", released {fmt_bytes(ev.bytes_released)}"
    return text


def _force_hint(result: ModelActionResult, verb: str) -> str:
    """What ``--force`` could do about a refused unload: only training evidence gives way."""
    from app.core.agents.unload_reasons import overridable

    error = result.error or ""
    if verb != "unload" or result.code != "refused" or not overridable(error) \
            or "force" in error.lower():  # the agent said so already
        return ""
    return "\n  --force unloads it anyway (it reloads on its next forward)"


def _report_action(args: argparse.Namespace, result: ModelActionResult, verb: str) -> int:
    """The result: its line on stdout when done, on stderr when refused or failed
    (``--json``: the JSON on stdout, and a refusal's line on stderr)."""
    if args.json:
        print_json(result.to_json())
    if not args.json or not result.ok:
        say(_action_text(result, verb), result.ok)
    return _action_exit(result.ok, result.code)


def cmd_unload(args: argparse.Namespace) -> int:
    if not args.host and not getattr(args, "demo", False):
        from app.cli.servers import unload_on_server

        served = unload_on_server(args)
        if served is not None:
            return _report_action(args, served, "unload")
    directory = _one_agent(args)
    if directory is None:
        return _no_agent(args)
    result = directory.unload(args.pid, args.model, to=args.to, force=args.force,
                              timeout_s=args.timeout)
    return _report_action(args, result, "unload")


def cmd_reload(args: argparse.Namespace) -> int:
    if not args.host and not getattr(args, "demo", False):
        from app.cli.servers import unload_on_server

        served = unload_on_server(args, reload=True)
        if served is not None:
            return _report_action(args, served, "reload")
    directory = _one_agent(args)
    if directory is None:
        return _no_agent(args)
    return _report_action(args, directory.reload(args.pid, args.model, timeout_s=args.timeout),
                          "reload")


def cmd_pin(args: argparse.Namespace) -> int:
    directory = _one_agent(args)
    if directory is None:
        return _no_agent(args)
    result = directory.pin(args.pid, args.model, not args.off, timeout_s=args.timeout)
    if args.json:
        print_json(result.to_json())
    elif result.ok:
        print(f"{result.pid} {result.model}: "
              + ("pinned (exempt from automatic unloading)" if result.pinned else "unpinned"))
    if not result.ok:
        say(_action_text(result, "pin"), ok=False)
    return _action_exit(result.ok, result.code)


def _idle_seconds(text: str) -> float | None:
    """SECONDS (``protocol.IDLE_UNLOAD_MIN_S``..``IDLE_UNLOAD_MAX_S``) or off: refused
    here, before anything is sent, as the agent would refuse it."""
    from app.agent.protocol import idle_unload_problem

    if text.strip().lower() in ("off", "none", "0"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds or 'off': {text!r}") from None
    problem = idle_unload_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds {problem} (or 'off')")
    return value


def cmd_policy(args: argparse.Namespace) -> int:
    directory = _one_agent(args)
    if directory is None:
        return _no_agent(args)
    result = {"pid": args.pid, **directory.set_idle_unload(args.pid, args.idle_unload,
                                                           timeout_s=args.timeout)}
    if args.json:
        print_json(result)
    elif result["ok"]:
        ttl = result["idle_unload_s"]
        print(f"{args.pid}: " + ("idle unload off" if ttl is None else
                                 f"GPU models idle for {ttl:g} s are moved to host memory by the "
                                 "agent; models on the CPU stay where they are"))
    if not result["ok"]:
        say(f"{args.pid}: policy failed: {result.get('error') or 'no reason given'}"
            + (f" [{result['code']}]" if result.get("code") else ""), ok=False)
    return _action_exit(result["ok"], result.get("code"))


# ------------------------------------------------------------------ parser


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    models = sub.add_parser("models", parents=[common],
                            help="every agent's models: state, device, size, idle time")
    models.add_argument("--json", action="store_true", help="machine-readable output")
    models.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                        help="per-agent answer timeout (default 2)")
    models.set_defaults(func=cmd_models)

    def model_command(name: str, help_text: str, func: Any, timeout: float
                      ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text,
                           description=help_text + ". Exit 0 when done, 1 when refused or "
                           "failed, 2 when there is no such agent or model.")
        p.add_argument("--pid", type=int, required=True, help="the process")
        p.add_argument("--model", required=True, metavar="ID",
                       help="the model's id (see `models`)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                       help=f"answer timeout (default {timeout:g})")
        p.set_defaults(func=func)
        return p

    unload = model_command("unload", "move a model's weights off the GPU (to pinned host "
                           "memory or disk) and release the allocator cache", cmd_unload, 300.0)
    unload.add_argument("--to", choices=("cpu", "disk"), default=None,
                        help="where the weights go: pinned host memory or a file (default: "
                             "cpu for a GPU model, disk for a CPU one)")
    unload.add_argument("--force", action="store_true",
                        help="override training evidence (train mode, gradients present, a "
                             "recent optimizer step or backward); it reloads on its next "
                             "forward. Nothing else is overridden (torch.compile, TorchScript, "
                             "torch.export, shared tensors, meta placeholders, ...)")
    model_command("reload", "bring an unloaded model back to its GPU", cmd_reload, 300.0)
    pin = model_command("pin", "exempt a model from automatic unloading", cmd_pin, 10.0)
    pin.add_argument("--off", action="store_true", help="unpin instead")

    policy = sub.add_parser("policy", parents=[common],
                            help="set an agent's own idle-unload time (works without the app)")
    policy.add_argument("--pid", type=int, required=True, help="the process")
    policy.add_argument("--idle-unload", type=_idle_seconds, required=True,
                        metavar="SECONDS|off",
                        help="move GPU models idle this long (10 s to 30 days) to host "
                             "memory (models on the CPU are left alone); off to stop")
    policy.add_argument("--json", action="store_true", help="machine-readable output")
    policy.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="answer timeout (default 10)")
    policy.set_defaults(func=cmd_policy)
