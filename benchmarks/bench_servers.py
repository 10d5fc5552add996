"""What watching for model servers costs, on the real path.

Two figures, each with a target:

* a scan of the process list (``read_host`` + ``recognise``) with N extra
  real processes running (default 500 ``sleep``s beside the host's own), as
  the server directory runs it every 3 s: target well under 2 % of a core;
* one join of the servers' answers with a snapshot (``current``), what the
  sampler thread pays every tick, with the fake Ollama, ComfyUI and
  AUTOMATIC1111 running on the ABI fake of libnvidia-ml: target under 1 ms.

``--json`` prints one JSON object instead.

    python -m benchmarks.bench_servers [--processes 500] [--runs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

JOIN = """
import json, statistics, time
from app.core.monitor.collector import Collector
from app.core.monitor.nvml_source import NvmlSource
from app.core.servers.directory import ServerDirectory
servers = ServerDirectory(keys=[])
servers.refresh()
collector = Collector(NvmlSource(), pressure_policy=False, doctor=False)
collector.open()
snapshot = collector.collect()
costs = []
for _ in range(2000):
    t = time.perf_counter()
    servers.current(snapshot)
    costs.append(time.perf_counter() - t)
print(json.dumps({"servers": len(servers.servers()), "join_ms": statistics.median(costs) * 1e3}))
"""


def scan_cost(processes: int, runs: int) -> tuple[float, int]:
    from app.core.servers.host import HostReader
    from app.core.servers.recognise import recognise

    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(processes)]
    try:
        read_host = HostReader()  # as the directory scans: what does not change is kept
        read_host()
        costs = []
        for _ in range(runs):
            t = time.perf_counter()
            listed = read_host()
            recognise(listed)
            costs.append(time.perf_counter() - t)
        return statistics.median(costs), len(listed)
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


def join_cost() -> dict:
    sys.path.insert(0, str(REPO))
    from tests.fakes.servers.world import ServerWorld

    with ServerWorld() as world:
        world.start_ollama()
        world.start_comfyui()
        world.start_a1111()
        done = subprocess.run([sys.executable, "-c", JOIN], env=world.env_for_app(), cwd=REPO,
                              capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    scan_s, listed = scan_cost(args.processes, args.runs)
    join = join_cost()
    result = {"processes_listed": listed, "scan_ms": round(scan_s * 1e3, 2),
              "scan_cpu_percent_every_3s": round(scan_s / 3.0 * 100, 2),
              "servers": join["servers"], "join_ms": round(join["join_ms"], 4)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"scan of {listed} processes: {result['scan_ms']} ms "
              f"({result['scan_cpu_percent_every_3s']} % of a core every 3 s; target < 2 %)")
        print(f"join of {join['servers']} servers with a snapshot: {result['join_ms']} ms "
              "per tick (target < 1 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
