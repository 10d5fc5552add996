"""The window watching remote hosts against the window watching as many local GPUs.

Two runs of the real ``main.py`` offscreen at 4 Hz, the window at its default
size, measured the same way (its process's CPU time as a share of one core,
the median of several windows after a warm-up):

* **local**: this machine's driver is the ABI fake of libnvidia-ml with
  HOSTS x GPUS GPUs, PROCESSES real processes each;
* **remote**: no local driver; HOSTS real ``serve`` processes on 127.0.0.x,
  each sampling its own ABI fake with GPUS GPUs of PROCESSES processes, and
  the window given them with ``--host``.

The servers' own CPU is printed apart: it is spent on the GPU hosts, not on
the machine the window runs on.  ``--json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from benchmarks._app import REPO, app_env, cpu_percent, running_app
from tests.fakes import nvml_abi
from tests.fakes.processes import end, serve_url


def _fake_env(tmp: Path, name: str, pids: list[int], gpus: int, per_gpu: int, seed: int
              ) -> dict[str, str]:
    """The environment of a process whose driver is a fake of ``gpus`` GPUs."""
    fake = nvml_abi.server(list(nvml_abi.chunks(pids, per_gpu))[:gpus], seed=seed)
    config = fake.write(tmp / f"{name}.conf")
    return fake.env(nvml_abi.build("current"), config, base=dict(os.environ))


def local_cpu(hosts: int, gpus: int, per_gpu: int, seconds: float, windows: int,
              warmup_s: float) -> list[float]:
    with nvml_abi.Helpers(hosts * gpus * per_gpu) as pids, \
            tempfile.TemporaryDirectory() as tmp:
        env = app_env(tmp, _fake_env(Path(tmp), "local", pids, hosts * gpus, per_gpu, 11))
        with running_app(["--period", "0.25"], env, warmup_s) as proc:
            return [cpu_percent(proc, seconds)[0] for _ in range(windows)]


def remote_cpu(hosts: int, gpus: int, per_gpu: int, seconds: float, windows: int,
               warmup_s: float) -> tuple[list[float], list[float]]:
    """(the window's CPU % per window, each server's CPU % over the last window)."""
    with nvml_abi.Helpers(hosts * gpus * per_gpu) as pids, \
            tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        folder = Path(tmp)
        servers: list[subprocess.Popen[bytes]] = []
        urls = []
        for h in range(hosts):
            mine = pids[h * gpus * per_gpu:(h + 1) * gpus * per_gpu]
            state = folder / f"state{h}"
            state.mkdir(mode=0o700)
            env = _fake_env(folder, f"host{h}", mine, gpus, per_gpu, 20 + h) | {
                "VRAM_STEWARD_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
            proc = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--listen", f"127.0.0.{h + 2}:0",
                 "--period", "0.25", "--no-history", "--no-auto-unload"],
                env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
            stack.callback(end, proc)
            servers.append(proc)
            urls.append(serve_url(proc, lambda: ""))
        # No fake on this machine: the laptop with no NVIDIA driver.
        env = app_env(tmp, {k: v for k, v in os.environ.items()
                            if not k.startswith("FAKE_NVML_") and k != "LD_LIBRARY_PATH"})
        args = ["--period", "0.25"] + [a for url in urls for a in ("--host", url)]
        with running_app(args, env, warmup_s) as proc:
            window = [cpu_percent(proc, seconds)[0] for _ in range(windows - 1)]
            server_procs = [psutil.Process(s.pid) for s in servers]
            before = [sum(p.cpu_times()[:2]) for p in server_procs]
            last, measured = cpu_percent(proc, seconds)
            window.append(last)
            spent = [sum(p.cpu_times()[:2]) - b for p, b in zip(server_procs, before,
                                                                  strict=True)]
        return window, [s / measured * 100 for s in spent]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8, help="per host")
    parser.add_argument("--processes", type=int, default=8, help="per GPU")
    parser.add_argument("--seconds", type=float, default=10.0, help="one measured window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    reason = nvml_abi.unavailable_reason()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        return 1
    local = local_cpu(args.hosts, args.gpus, args.processes, args.seconds, args.windows,
                      args.warmup)
    remote, servers = remote_cpu(args.hosts, args.gpus, args.processes, args.seconds,
                                 args.windows, args.warmup)
    result: dict[str, Any] = {
        "scenario": {"hosts": args.hosts, "gpus_per_host": args.gpus,
                     "processes_per_gpu": args.processes, "period_s": 0.25},
        "local_window_cpu_percent_median": round(statistics.median(local), 2),
        "local_window_cpu_percent_runs": [round(r, 2) for r in local],
        "remote_window_cpu_percent_median": round(statistics.median(remote), 2),
        "remote_window_cpu_percent_runs": [round(r, 2) for r in remote],
        "servers_cpu_percent": [round(s, 2) for s in servers],
        "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps(result))
        return 0
    n = args.hosts * args.gpus
    print(f"window at 4 Hz, {n} GPUs x {args.processes} processes, default size, "
          f"{args.windows} windows of {args.seconds:g} s after {args.warmup:g} s, "
          f"{os.cpu_count()} cores:")
    print(f"  local  ({n} GPUs on this machine's driver): "
          f"{result['local_window_cpu_percent_median']:.2f} % of one core (runs "
          f"{', '.join(f'{r:.2f}' for r in local)})")
    print(f"  remote ({args.hosts} hosts x {args.gpus} GPUs over HTTP): "
          f"{result['remote_window_cpu_percent_median']:.2f} % of one core (runs "
          f"{', '.join(f'{r:.2f}' for r in remote)})")
    print(f"  each server, on its host: {', '.join(f'{s:.2f}' for s in servers)} % of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
