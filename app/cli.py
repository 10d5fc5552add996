"""Command line: the GUI (default), ``status``, the offscreen screenshot, and
the agent commands (``run``, ``agent-path``, ``agents``, ``free-cache``).

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


# ------------------------------------------------------------------ agents


def bootstrap_dir() -> str:
    """The directory holding the agent's ``sitecustomize.py`` and ``vram_steward_agent.py``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent", "_bootstrap")


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
    from app.core.demo_agents import DemoAgents
    from app.core.demo_source import DemoSource

    source = DemoSource(seed=seed)
    source.open(elapsed=30.0)  # mid-run: a grown training cache, eval.py running
    agents = DemoAgents(source)
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
    from app.core import agent_client

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
    from app.core.report import MiB, _size

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
    from app.core import agent_client
    from app.core.agent_types import FreeCacheResult

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
        from app.core.report import _size

        for r in results:
            if r.ok:
                print(f"{r.pid}: freed {_size(r.freed)} (reserved {_size(r.reserved_before)}"
                      f" -> {_size(r.reserved_after)})")
            else:
                print(f"{r.pid}: failed: {r.error}")
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


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
