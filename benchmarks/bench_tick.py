"""The real cost of a sampler tick: NVML through the real bindings, host details
through /proc and psutil, against real processes.

``libnvidia-ml.so.1`` is the ABI fake (tests/fakes/nvml_abi), compiled against
NVIDIA's nvml.h and loaded by the real pynvml, with a per-call latency of 0 and
20 µs (a spin: a driver call is an ioctl, CPU time).  The processes it reports
are real idle processes, so psutil and /proc see them.  Four contenders run
interleaved in one child process, round by round, on the same GPUs:

* project   -- ``Collector.collect()`` (NVML + host details + snapshot);
* raw       -- a minimal loop over the same fields: pynvml's public calls with
               cached handles, psutil ``oneshot()`` per pid with cached
               ``Process`` objects and static fields read once;
* nvitop    -- one TUI refresh: ``Device.as_snapshot()`` per device and
               ``GpuProcess.take_snapshots`` over every device's processes;
* gpustat   -- ``gpustat.new_query()`` with its 0.1 s sleep removed.

Targets (CPU medians, 8 GPUs x 64 processes, 0 µs): project <= 1.2x raw and
<= 0.1x nvitop and gpustat.  NVML calls per tick are counted by the fake and
printed beside the times: the peers also read fields the project does not show
(clocks, PCIe, fan, ECC...), which is part of what their refresh costs.

Then the whole app: ``main.py`` offscreen at 4 Hz for 60 s on 4 GPUs x 16
processes through the fake; its CPU time over the window as % of one core
(target <= 3 %).

    python -m benchmarks.bench_tick [--json out.json] [--gui-seconds 60]
    python -m benchmarks.bench_tick --real        # the machine's own driver

Peers come from the ``bench`` extra (``pip install -e ".[bench]"``); a missing
one is reported as such.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = ("project", "raw", "nvitop", "gpustat")


# --------------------------------------------------------------- child side

def make_project() -> Callable[[], Any]:
    from app.core.monitor.collector import Collector
    from app.core.monitor.nvml_source import NvmlSource

    collector = Collector(NvmlSource(), pressure_policy=False)
    collector.open()
    return collector.collect


def make_raw() -> Callable[[], Any]:
    """The same fields with nothing around them."""
    import psutil
    import pynvml as nvml

    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    last_seen = {id(h): 0 for h in handles}
    cache: dict[int, tuple[Any, tuple]] = {}
    v2 = nvml.nvmlMemory_v2

    def tick() -> list:
        out, pids = [], set()
        for h in handles:
            mem = nvml.nvmlDeviceGetMemoryInfo(h, version=v2)
            util = nvml.nvmlDeviceGetUtilizationRates(h)
            temp = nvml.nvmlDeviceGetTemperatureV(h, nvml.NVML_TEMPERATURE_GPU)
            power = nvml.nvmlDeviceGetPowerUsage(h)
            procs = (nvml.nvmlDeviceGetComputeRunningProcesses(h)
                     + nvml.nvmlDeviceGetGraphicsRunningProcesses(h))
            samples = []
            if procs:
                try:
                    samples = nvml.nvmlDeviceGetProcessUtilization(h, last_seen[id(h)])
                    last_seen[id(h)] = max(s.timeStamp for s in samples)
                except nvml.NVMLError:
                    pass
            pids.update(p.pid for p in procs)
            out.append((mem.used, util.gpu, temp, power, [(p.pid, p.usedGpuMemory) for p in procs],
                        [(s.pid, s.smUtil) for s in samples]))
        host = []
        for pid in pids:
            try:
                entry = cache.get(pid)
                if entry is None:
                    proc = psutil.Process(pid)
                    entry = cache[pid] = (proc, (proc.name(), proc.username(), proc.cmdline()))
                proc = entry[0]
                with proc.oneshot():
                    host.append((pid, proc.cpu_percent(), proc.memory_info().rss, entry[1]))
            except psutil.Error:
                pass
        return [out, host]

    return tick


def make_nvitop() -> Callable[[], Any]:
    from nvitop import Device, GpuProcess

    devices = Device.all()

    def tick() -> Any:
        snapshots = [d.as_snapshot() for d in devices]
        processes = list(itertools.chain.from_iterable(d.processes().values() for d in devices))
        return snapshots, GpuProcess.take_snapshots(processes, failsafe=True)

    return tick


#: pynvml functions gpustat replaces on import (a one-argument memory query and a
#: function lookup with fallbacks); they are swapped in only around its own tick.
GPUSTAT_PATCHES = ("nvmlDeviceGetMemoryInfo", "_nvmlGetFunctionPointer")


def make_gpustat() -> Callable[[], Any]:
    import pynvml

    originals = {name: getattr(pynvml, name) for name in GPUSTAT_PATCHES}
    import gpustat
    import gpustat.core as core

    patched = {name: getattr(pynvml, name) for name in GPUSTAT_PATCHES}
    for name, fn in originals.items():
        setattr(pynvml, name, fn)
    # new_query() sleeps 0.1 s between two CPU readings; that is wall time, not work.
    core.time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    core.time.sleep = lambda _s: None

    def tick() -> Any:
        for name, fn in patched.items():
            setattr(pynvml, name, fn)
        try:
            return gpustat.new_query()
        finally:
            for name, fn in originals.items():
                setattr(pynvml, name, fn)

    return tick


def child(rounds: int, warmup: int) -> dict:
    makers = {"project": make_project, "raw": make_raw, "nvitop": make_nvitop, "gpustat": make_gpustat}
    ticks: dict[str, Callable[[], Any]] = {}
    missing: dict[str, str] = {}
    for name, make in makers.items():
        try:
            ticks[name] = make()
        except Exception as exc:  # a peer not installed or failing on this driver
            missing[name] = f"{type(exc).__name__}: {exc}"
    fake = _fake_library()
    for tick in ticks.values():
        for _ in range(warmup):
            tick()
    wall: dict[str, list[float]] = {n: [] for n in ticks}
    cpu: dict[str, list[float]] = {n: [] for n in ticks}
    calls: dict[str, dict[str, int]] = {}
    order = list(ticks)
    for r in range(rounds):
        for name in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
            if fake is not None:
                fake.fakeNvmlResetCounts()
            gc.collect()  # one contender's garbage is not collected on another's clock
            c0, w0 = time.process_time(), time.perf_counter()
            ticks[name]()
            w1, c1 = time.perf_counter(), time.process_time()
            wall[name].append((w1 - w0) * 1e3)
            cpu[name].append((c1 - c0) * 1e3)
            if fake is not None and r == rounds - 1:
                calls[name] = _counts(fake)
    return {
        name: {"wall_ms": statistics.median(wall[name]), "cpu_ms": statistics.median(cpu[name]),
               "nvml_calls": sum(calls.get(name, {}).values()) if fake is not None else None,
               "nvml_calls_by_function": calls.get(name)}
        for name in ticks
    } | {name: {"missing": why} for name, why in missing.items()}


def _fake_library() -> Any:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        lib.fakeNvmlResetCounts  # noqa: B018 - only the fake has it
        return lib
    except (OSError, AttributeError):
        return None


def _counts(lib: Any) -> dict[str, int]:
    from tests.fakes.nvml_abi import read_counts

    buf = ctypes.create_string_buffer(1 << 16)
    lib.fakeNvmlCounts(buf, len(buf))
    return {k: v for k, v in read_counts(buf.value.decode()).items() if v}


# -------------------------------------------------------------- parent side

def run_child(env: dict[str, str], rounds: int, warmup: int) -> dict:
    env = dict(env, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_tick", "--child",
                          "--rounds", str(rounds), "--warmup", str(warmup)],
                         env=env, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def gui_cpu(gpus: int, per_gpu: int, seconds: float, warmup_s: float = 10.0) -> dict:
    """The whole app at 4 Hz through the fake: CPU % of one core over ``seconds``."""
    from benchmarks._app import app_env, cpu_percent, running_app
    from tests.fakes import nvml_abi

    with nvml_abi.Helpers(gpus * per_gpu) as pids, tempfile.TemporaryDirectory() as tmp:
        fake = nvml_abi.server(list(nvml_abi.chunks(pids, per_gpu)), seed=11)
        config = fake.write(Path(tmp) / "nvml.conf")
        env = app_env(tmp, fake.env(nvml_abi.build("current"), config,
                                    counts=Path(tmp) / "counts"))
        with running_app(["--period", "0.25"], env, warmup_s) as proc:
            percent, measured_s = cpu_percent(proc, seconds)
        calls = nvml_abi.read_counts((Path(tmp) / "counts").read_text()) \
            if (Path(tmp) / "counts").exists() else {}
    ticks = calls.get("nvmlDeviceGetPowerUsage", 0) / gpus  # over warm-up and window
    return {"gpus": gpus, "processes_per_gpu": per_gpu, "seconds": round(measured_s, 1),
            "cpu_percent_of_one_core": round(percent, 2),
            "ticks_seen_by_the_driver": int(ticks)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64, help="per GPU")
    parser.add_argument("--latencies", default="0,20", help="µs per NVML call, comma-separated")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gui-seconds", type=float, default=60.0, help="0 skips the GUI figure")
    parser.add_argument("--real", action="store_true", help="the machine's driver, no fake")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as one JSON object")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(child(args.rounds, args.warmup)))
        return 0

    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    if args.real:
        result["real_driver"] = run_child(dict(os.environ), args.rounds, args.warmup)
        _print_table("the machine's driver", result["real_driver"])
    else:
        from tests.fakes import nvml_abi

        reason = nvml_abi.unavailable_reason()
        if reason:
            print(f"skipped: {reason}")
            return 0
        lib = nvml_abi.build("current")
        result["scenario"] = {"gpus": args.gpus, "processes_per_gpu": args.processes,
                              "rounds": args.rounds}
        result["latencies"] = {}
        with nvml_abi.Helpers(args.gpus * args.processes) as pids, \
                tempfile.TemporaryDirectory() as tmp:
            fake = nvml_abi.server(list(nvml_abi.chunks(pids, args.processes)), seed=10)
            for latency in (float(x) for x in args.latencies.split(",")):
                fake.latency_us = latency
                config = fake.write(Path(tmp) / "nvml.conf")
                figures = run_child(fake.env(lib, config), args.rounds, args.warmup)
                result["latencies"][f"{latency:g}us"] = figures
                _print_table(f"{args.gpus} GPUs x {args.processes} processes, {latency:g} µs per NVML call",
                             figures)
        if args.gui_seconds > 0:
            result["gui"] = gui_cpu(4, 16, args.gui_seconds)
            g = result["gui"]
            print(f"\nwhole app at 4 Hz, {g['gpus']} GPUs x {g['processes_per_gpu']} processes, "
                  f"{g['seconds']} s: {g['cpu_percent_of_one_core']} % of one core "
                  f"({g['ticks_seen_by_the_driver']} ticks reached the driver; target <= 3 %)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _print_table(title: str, figures: dict) -> None:
    print(f"\n{title}")
    print(f"  {'':<9} {'wall ms':>9} {'CPU ms':>9} {'NVML calls':>11} {'CPU vs project':>15}")
    base = figures.get("project", {}).get("cpu_ms")
    for name in CONTENDERS:
        f = figures.get(name)
        if f is None:
            continue
        if "missing" in f:
            print(f"  {name:<9} not measured ({f['missing']})")
            continue
        ratio = f"{base / f['cpu_ms']:.3f}x" if base and name != "project" else ""
        calls = "n/a" if f["nvml_calls"] is None else str(f["nvml_calls"])
        print(f"  {name:<9} {f['wall_ms']:>9.2f} {f['cpu_ms']:>9.2f} {calls:>11} {ratio:>15}")
    if base:
        print("  (CPU vs project: the project's CPU time divided by the contender's; "
              "targets <= 1.2x raw, <= 0.1x nvitop and gpustat)")


if __name__ == "__main__":
    raise SystemExit(main())
