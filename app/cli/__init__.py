"""Command line: the GUI (default), ``status``, the offscreen screenshot, the
agent commands (``run``, ``agent-path``, ``agents``, ``free-cache``) and the
model manager (``models``, ``unload``, ``reload``, ``pin``, ``policy``).

``status`` must work over SSH on a server without Qt installed, so Qt is only
imported on the GUI paths.  ``run`` and ``agent-path`` import nothing beyond
the standard library (no Qt, numpy or psutil): they only need the repository.
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
EXIT_FAILED = 1
EXIT_NO_AGENT = 2
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126

#: Signals ``run`` passes on to the command (POSIX).
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def _make_source(demo: bool, seed: int = 7):  # type: ignore[no-untyped-def]
    if demo:
        from app.core.monitor.demo_source import DemoSource

        return DemoSource(seed=seed)
    from app.core.monitor.nvml_source import NvmlSource

    return NvmlSource()


def cmd_status(args: argparse.Namespace) -> int:
    from app.core.monitor.collector import Collector
    from app.core.monitor.report import snapshot_to_json, snapshot_to_table
    from app.core.monitor.source import SourceUnavailable

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


# ------------------------------------------------------------------ agents


def bootstrap_dir() -> str:
    """The directory holding the agent's ``sitecustomize.py`` and ``vram_steward_agent.py``."""
    app_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(app_dir, "agent", "_bootstrap")


def agent_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) with the agent bootstrap first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = bootstrap_dir() + (os.pathsep + existing if existing else "")
    env["VRAM_STEWARD_AGENT"] = "1"
    return env


def cmd_agent_path(args: argparse.Namespace) -> int:
    print(bootstrap_dir())
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import signal
    import subprocess

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(f"{APP_NAME}: run: no command given (usage: run [--] COMMAND ARGS...)",
              file=sys.stderr)
        return EXIT_NO_SOURCE
    env = agent_env()
    posix = os.name == "posix"
    # Interactive (a terminal): the command stays in our process group, so the
    # terminal delivers Ctrl-C / Ctrl-\ to it directly and it can read the
    # terminal; we only pass on SIGTERM/SIGHUP.  Otherwise the command gets its
    # own process group and every signal we receive goes to that whole group
    # (torchrun's workers included), exactly once.
    interactive = posix and _is_foreground_tty()
    try:
        proc = subprocess.Popen(command, env=env,
                                **({} if not posix or interactive else {"process_group": 0}))
    except FileNotFoundError:
        print(f"{APP_NAME}: run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"{APP_NAME}: run: permission denied: {command[0]}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    except OSError as exc:
        print(f"{APP_NAME}: run: cannot start {command[0]}: {exc}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE

    previous: dict[int, object] = {}

    def forward(signum: int, _frame: object) -> None:
        try:
            if interactive:
                proc.send_signal(signum)
            else:
                os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    for name in FORWARDED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        if not posix:
            handler: object = signal.SIG_IGN if name == "SIGINT" else None
        elif interactive and name in ("SIGINT", "SIGQUIT"):
            handler = signal.SIG_IGN  # the terminal sent it to the command too
        else:
            handler = forward
        if handler is None:
            continue
        try:
            previous[sig] = signal.signal(sig, handler)  # type: ignore[arg-type]
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:  # Windows console Ctrl-C reaches the child itself
                continue
    finally:
        for sig, old in previous.items():
            try:
                signal.signal(sig, old)  # type: ignore[arg-type]
            except (ValueError, OSError):
                pass
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as a shell says


def _is_foreground_tty() -> bool:
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _demo_agents(seed: int):  # type: ignore[no-untyped-def]
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.demo_source import DemoSource

    source = DemoSource(seed=seed)
    source.open(elapsed=30.0)  # mid-run: a grown training cache, eval.py running
    agents = DemoAgents(source)
    source.read()
    return agents


def _demo_model_agents(seed: int, replay_s: float = 40.0):  # type: ignore[no-untyped-def]
    """The demo's agents after its first ``replay_s`` seconds, replayed at 4 Hz
    through the collector and the pressure policy exactly as the GUI runs them:
    at ~33 s GPU 0 crosses 90 % and the policy unloads the notebook's idle
    text encoder and UNet.  The demo then goes on in real time."""
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.collector import Collector
    from app.core.monitor.demo_source import DemoSource
    from app.core.policies.pressure import PolicyRunner

    shift = [0.0]
    source = DemoSource(seed=seed, clock=lambda: time.monotonic() + shift[0])
    source.open()
    agents = DemoAgents(source)
    runner = PolicyRunner(agents, synchronous=True, clock=source.clock)
    collector = Collector(source, agents=agents, pressure_policy=runner)
    collector.open()
    for _ in range(int(replay_s * 4)):
        collector.collect()
        shift[0] += 0.25
    runner.close()
    source.read()
    return agents


def _gather(func, items, workers: int = 16):  # type: ignore[no-untyped-def]
    """``func`` over ``items`` concurrently (each call bounded by its own timeout)."""
    if len(items) <= 1:
        return [func(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))


def cmd_agents(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client

    if getattr(args, "demo", False):
        agents = _demo_agents(getattr(args, "seed", 7))
        records = [agent_client.report_to_json(r)
                   for _, r in sorted(agents.reports().items())]
    else:
        def one(entry):  # type: ignore[no-untyped-def]
            try:
                return agent_client.report_to_json(
                    agent_client.query_report(entry, args.timeout), entry)
            except (agent_client.AgentUnavailable, agent_client.AgentError) as exc:
                return agent_client.report_to_json(None, entry, str(exc))

        records = _gather(one, agent_client.read_registry())
    if args.json:
        json.dump(records, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_agents_table(records))
    return EXIT_OK


def _agents_table(records: list[dict]) -> str:
    from app.core.monitor.report import MiB, _size

    if not records:
        return "no agents (start a program with `python main.py run -- COMMAND`)"
    lines = [f"{'PID':>8}  {'TORCH':<14} {'DEV':<4} {'ALLOCATED':>10} {'RESERVED':>10} "
             f"{'CACHE':>10} {'MODELS':>6}  COMMAND"]
    for r in records:
        command = " ".join(r["argv"])[:60]
        torch = r["torch"] or r["torch_status"] or "?"
        if r["error"]:
            lines.append(f"{r['pid']:>8}  {torch:<14} {'-':<4} {'error: ' + r['error']}"[:120])
            continue
        devices = r["devices"] or [None]
        for i, d in enumerate(devices):
            if d is None:
                dev = alloc = res = cache = "-"
                if r["cuda_initialized"] is False:
                    dev = "cpu"
            else:
                dev = str(d["index"])
                alloc, res = _size(d["allocated"]), _size(d["reserved"])
                cache = _size(None if d["reserved"] is None or d["allocated"] is None
                              else max(0, d["reserved"] - d["allocated"]))
            head = f"{r['pid']:>8}  {torch:<14}" if i == 0 else f"{'':>8}  {'':<14}"
            lines.append(f"{head} {dev:<4} {alloc:>10} {res:>10} {cache:>10} "
                         f"{len(r['models']) if i == 0 else '':>6}  {command if i == 0 else ''}")
        for m in r["models"]:
            mode = {True: "train", False: "eval"}.get(m["training"], "?")
            group = f" [{m['group']}]" if m["group"] else ""
            count = m["params"]
            params = "n/a" if count is None else (
                f"{count / 1e6:.1f}M params" if count >= 100_000 else f"{count:,} params")
            nbytes = m["param_bytes"]
            size = f"{nbytes / 1024:.1f} KiB" if nbytes is not None and nbytes < MiB \
                else _size(nbytes)
            cls = (m["class"] or "?").rsplit(".", 1)[-1]
            lines.append(f"{'':>10}- {m['name']} ({cls}){group}: {params}, {size}, "
                         f"{m['device']}, {m['dtype']}, {mode}")
    return "\n".join(lines)


def cmd_free_cache(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client
    from app.core.agents.types import FreeCacheResult

    if getattr(args, "demo", False):
        directory = _demo_agents(getattr(args, "seed", 7))
        entries = directory.entries()
        run_one = lambda e: directory.free_cache(e.pid, args.timeout)  # noqa: E731
    else:
        entries = agent_client.read_registry()
        run_one = lambda e: agent_client.free_cache(e, args.timeout)  # noqa: E731
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
    results: list[FreeCacheResult] = _gather(run_one, entries)
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from app.core.monitor.report import _size

        for r in results:
            if r.ok:
                print(f"{r.pid}: freed {_size(r.freed)} (reserved {_size(r.reserved_before)}"
                      f" -> {_size(r.reserved_after)})")
            else:
                print(f"{r.pid}: failed: {r.error}")
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


# ------------------------------------------------------------ model manager

#: What a model action's failure code means for the exit status.
_NOT_FOUND_CODES = frozenset({"not_found"})


def _one_agent(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """(directory, entry) for ``--pid``: a DemoAgents for ``--demo``, else the
    registry's entry (the directory is then None: calls go straight to it)."""
    from app.core.agents import client as agent_client

    if getattr(args, "demo", False):
        directory = _demo_model_agents(getattr(args, "seed", 7))
        entry = next((e for e in directory.entries() if e.pid == args.pid), None)
        return directory, entry
    entry = next((e for e in agent_client.read_registry() if e.pid == args.pid), None)
    return None, entry


def _no_agent(args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        json.dump({"pid": args.pid, "model": getattr(args, "model", None), "ok": False,
                   "error": "no agent in that process", "code": "not_found"}, sys.stdout)
        sys.stdout.write("\n")
    print(f"{APP_NAME}: no agent in process {args.pid} (list them with `agents`)",
          file=sys.stderr)
    return EXIT_NO_AGENT


def _action_exit(ok: bool, code: str | None) -> int:
    if ok:
        return EXIT_OK
    return EXIT_NO_AGENT if code in _NOT_FOUND_CODES else EXIT_FAILED


def _print_action(result, verb: str) -> None:  # type: ignore[no-untyped-def]
    from app.core.monitor.report import _size

    ev = result.event
    who = f"{result.pid} {ev.name if ev else result.model}"
    if not result.ok:
        print(f"{who}: {verb} {'refused' if result.code == 'refused' else 'failed'}: "
              f"{result.error}" + (f" [{result.code}]" if result.code else "")
              + _force_hint(result, verb))
        return
    if ev is None:
        print(f"{who}: {verb} done")
        return
    where = {"unload": f"offloaded to {ev.target}", "reload": f"resident again (from {ev.target})"}
    text = f"{who}: {where.get(ev.action, ev.state)}: moved {_size(ev.bytes_moved)}"
    if ev.seconds is not None:
        text += f" in {ev.seconds:.2f} s"
    if ev.bytes_released is not None:
        text += f", released {_size(ev.bytes_released)}"
    print(text)


def _force_hint(result, verb: str) -> str:  # type: ignore[no-untyped-def]
    """What ``--force`` could do about a refused unload: only training evidence gives way."""
    from app.core.agents.unload_reasons import overridable

    error = result.error or ""
    if verb != "unload" or result.code != "refused" or not overridable(error) \
            or "force" in error.lower():  # the agent said so already
        return ""
    return "\n  --force unloads it anyway (it reloads on its next forward)"


def cmd_unload(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client

    directory, entry = _one_agent(args)
    if entry is None:
        return _no_agent(args)
    if directory is not None:
        result = directory.unload(args.pid, args.model, to=args.to, force=args.force,
                                  timeout_s=args.timeout)
    else:
        result = agent_client.unload(entry, args.model, args.to, args.force,
                                     timeout_s=args.timeout)
    return _report_action(args, result, "unload")


def cmd_reload(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client

    directory, entry = _one_agent(args)
    if entry is None:
        return _no_agent(args)
    if directory is not None:
        result = directory.reload(args.pid, args.model, timeout_s=args.timeout)
    else:
        result = agent_client.reload(entry, args.model, timeout_s=args.timeout)
    return _report_action(args, result, "reload")


def cmd_pin(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client

    directory, entry = _one_agent(args)
    if entry is None:
        return _no_agent(args)
    pinned = not args.off
    if directory is not None:
        result = directory.pin(args.pid, args.model, pinned, timeout_s=args.timeout)
    else:
        result = agent_client.pin(entry, args.model, pinned, timeout_s=args.timeout)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif result.ok:
        print(f"{result.pid} {result.model}: "
              + ("pinned (exempt from automatic unloading)" if result.pinned else "unpinned"))
    else:
        _print_action(result, "pin")
    return _action_exit(result.ok, result.code)


def _report_action(args: argparse.Namespace, result, verb: str) -> int:  # type: ignore[no-untyped-def]
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_action(result, verb)
    return _action_exit(result.ok, result.code)


def _idle_seconds(text: str) -> float | None:
    if text.strip().lower() in ("off", "none", "0"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds or 'off': {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("seconds must be > 0 (or 'off')")
    return value


def cmd_policy(args: argparse.Namespace) -> int:
    from app.core.agents import client as agent_client

    directory, entry = _one_agent(args)
    if entry is None:
        return _no_agent(args)
    if directory is not None:
        result = directory.set_idle_unload(args.pid, args.idle_unload, timeout_s=args.timeout)
    else:
        result = agent_client.set_idle_unload(entry, args.idle_unload, timeout_s=args.timeout)
    result = {"pid": args.pid, **result}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif result["ok"]:
        ttl = result["idle_unload_s"]
        print(f"{args.pid}: " + ("idle unload off" if ttl is None else
                                 f"GPU models idle for {ttl:g} s are moved to host memory by the "
                                 "agent; models on the CPU stay where they are"))
    else:
        print(f"{args.pid}: policy failed: {result['error']}"
              + (f" [{result['code']}]" if result.get("code") else ""))
    return _action_exit(result["ok"], result.get("code"))


def model_records(report, now: float | None = None) -> list[dict]:  # type: ignore[no-untyped-def]
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
    from app.core.agents import client as agent_client

    errors: list[tuple[int, str]] = []
    if getattr(args, "demo", False):
        agents = _demo_model_agents(getattr(args, "seed", 7))
        reports = [r for _, r in sorted(agents.reports().items())]
    else:
        def one(entry):  # type: ignore[no-untyped-def]
            try:
                return agent_client.query_report(entry, args.timeout)
            except (agent_client.AgentUnavailable, agent_client.AgentError) as exc:
                errors.append((entry.pid, str(exc)))
                return None

        reports = [r for r in _gather(one, agent_client.read_registry()) if r is not None]
    records = [rec for r in reports for rec in model_records(r)]
    if args.json:
        json.dump(records, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_models_table(records))
    for pid, error in errors:
        print(f"{APP_NAME}: {pid}: {error}", file=sys.stderr)
    return EXIT_OK


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def _models_table(records: list[dict]) -> str:
    from app.core.monitor.report import MiB, _size

    if not records:
        return "no models (start a program with `python main.py run -- COMMAND`)"
    lines = [f"{'PID':>8}  {'ID':<10} {'NAME':<20} {'CLASS':<22} {'MODE':<5} {'STATE':<16} "
             f"{'DEVICE':<7} {'HOME':<7} {'PARAMS':>8} {'SIZE':>10} {'IDLE':>7} PIN  BLOCKER"]
    for r in records:
        count = r["params"]
        params = "n/a" if count is None else (
            f"{count / 1e6:.1f}M" if count >= 100_000 else f"{count:,}")
        nbytes = r["bytes"]
        size = f"{nbytes / 1024:.1f} KiB" if nbytes is not None and nbytes < MiB \
            else _size(nbytes)
        state = r["state"] + (f" ({r['offloaded_to']})" if r["offloaded_to"] else "")
        mode = {True: "train", False: "eval"}.get(r["training"], "?")
        cls = (r["class"] or "?").rsplit(".", 1)[-1]
        lines.append(f"{r['pid']:>8}  {r['id'][:10]:<10} {r['name'][:20]:<20} {cls[:22]:<22} "
                     f"{mode:<5} {state:<16} {str(r['device'])[:7]:<7} "
                     f"{str(r['home_device'])[:7]:<7} {params:>8} {size:>10} "
                     f"{_duration(r['idle_s']):>7} {'yes' if r['pinned'] else '-':<4} "
                     f"{r['blocker'] or '-'}")
    return "\n".join(lines)


def cmd_gui(args: argparse.Namespace) -> int:
    from app.ui.shell.application import run_gui

    return run_gui(demo=args.demo, period_s=args.period, screenshot=args.screenshot,
                   after_s=args.after, seed=args.seed, minimised=args.minimised,
                   theme=args.theme)


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
    sub = parser.add_subparsers(dest="command")

    status = sub.add_parser("status", parents=[common], help="one sample as a table or JSON")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--interval", type=float, default=0.2, metavar="SECONDS",
                        help="second reading after this long, for CPU %% and SM %% "
                             "(default 0.2; 0 = single reading)")
    status.set_defaults(func=cmd_status)

    run = sub.add_parser(
        "run", help="run a command with the agent loaded in its Python processes",
        description="Run COMMAND with the VRAM Steward agent loaded in every Python process it "
                    "starts (PYTHONPATH gets the agent's bootstrap dir first, and "
                    "VRAM_STEWARD_AGENT=1). Child processes inherit this: under torchrun each "
                    "rank gets its own agent, and so does the torchrun launcher process itself "
                    "(it does not import torch's CUDA, so it holds no VRAM). Forked DataLoader "
                    "workers have no agent. The command's exit code is returned (128+N when "
                    "it was killed by signal N); SIGINT, SIGTERM, SIGHUP and SIGQUIT are "
                    "passed on to it. Exit 127 when COMMAND is not found.")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] COMMAND ARGS",
                     help="the command, e.g. `-- torchrun --nproc-per-node 2 train.py`")
    run.set_defaults(func=cmd_run)

    path = sub.add_parser(
        "agent-path", help="print the agent's bootstrap dir (for PYTHONPATH or %%load_ext)",
        description="Print the directory holding the agent's sitecustomize.py and "
                    "vram_steward_agent.py. Put it on sys.path and call "
                    "`import vram_steward_agent; vram_steward_agent.start()`, or in "
                    "Jupyter/IPython `%%load_ext vram_steward_agent`.")
    path.set_defaults(func=cmd_agent_path)

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

    models = sub.add_parser("models", parents=[common],
                            help="every agent's models: state, device, size, idle time")
    models.add_argument("--json", action="store_true", help="machine-readable output")
    models.add_argument("--timeout", type=float, default=2.0, metavar="SECONDS",
                        help="per-agent answer timeout (default 2)")
    models.set_defaults(func=cmd_models)

    def model_command(name: str, help_text: str, func, timeout: float):  # type: ignore[no-untyped-def]
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
                        help="move GPU models idle this long to host memory (models on "
                             "the CPU are left alone); off to stop")
    policy.add_argument("--json", action="store_true", help="machine-readable output")
    policy.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="answer timeout (default 10)")
    policy.set_defaults(func=cmd_policy)
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
        if args.period is not None and not 0.1 <= args.period <= 10.0:
            parser.error("--period must be between 0.1 and 10 seconds")
        return cmd_gui(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
