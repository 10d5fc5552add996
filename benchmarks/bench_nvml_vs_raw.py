"""Cost of one NvmlSource.read() against the bare pynvml calls it wraps.

Targets (not asserted, just printed):
  * NvmlSource.read() <= 1.3x the raw pynvml calls for the same fields
    (handles cached, memory v2, utilisation, temperature, power, compute and
    graphics process lists, per-process utilisation);
  * NvmlSource.read() <= 0.5x nvitop (``Device.all()`` + the same fields), when
    nvitop is importable.

Usage:  python benchmarks/bench_nvml_vs_raw.py [iterations]   (default 200)
Without an NVIDIA GPU it prints "no NVIDIA GPU: skipped" and exits 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WARMUP = 10


def median_us(fn: Callable[[], Any], iterations: int) -> float:
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000.0


def make_raw(nvml: Any) -> Callable[[], Any]:
    """The same NVML calls NvmlSource makes, with no bookkeeping around them."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    last_ts = {id(h): 0 for h in handles}
    v2 = getattr(nvml, "nvmlMemory_v2", None)
    error = nvml.NVMLError

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except error:
            return None

    def read() -> list[Any]:
        out = []
        for h in handles:
            mem = call(nvml.nvmlDeviceGetMemoryInfo, h, version=v2) if v2 else None
            if mem is None:
                mem = call(nvml.nvmlDeviceGetMemoryInfo, h)
            util = call(nvml.nvmlDeviceGetUtilizationRates, h)
            temp = call(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            power = call(nvml.nvmlDeviceGetPowerUsage, h)
            compute = call(nvml.nvmlDeviceGetComputeRunningProcesses_v3, h) or []
            graphics = call(nvml.nvmlDeviceGetGraphicsRunningProcesses_v3, h) or []
            samples = None
            if compute or graphics:
                samples = call(nvml.nvmlDeviceGetProcessUtilization, h, last_ts[id(h)])
                if samples:
                    last_ts[id(h)] = max(s.timeStamp for s in samples)
            out.append((mem, util, temp, power, compute, graphics, samples))
        return out

    return read


def make_nvitop() -> Callable[[], Any] | None:
    try:
        from nvitop import Device
    except Exception:  # not installed, or broken install
        return None

    def snapshot() -> list[Any]:
        out = []
        for dev in Device.all():
            procs = dev.processes()
            out.append((
                dev.memory_total(), dev.memory_used(), dev.memory_free(),
                dev.gpu_utilization(), dev.memory_utilization(), dev.temperature(),
                dev.power_usage(), dev.power_limit(),
                [(p.pid, p.gpu_memory(), p.gpu_sm_utilization()) for p in procs.values()],
            ))
        return out

    return snapshot


def main() -> int:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        print("no NVIDIA GPU: skipped")
        return 0
    if count == 0:
        print("no NVIDIA GPU: skipped")
        pynvml.nvmlShutdown()
        return 0

    from app.core.nvml_source import NvmlSource

    source = NvmlSource()
    source.open()
    samples = source.read()
    procs = sum(len(s.processes) for s in samples)
    print(f"driver {source.driver_version()}, {count} GPU(s), {len(samples)} device sample(s), "
          f"{procs} process(es); median of {iterations} iterations")

    ours = median_us(source.read, iterations)
    raw = median_us(make_raw(pynvml), iterations)
    print(f"NvmlSource.read():      {ours:9.1f} us")
    print(f"raw pynvml calls:       {raw:9.1f} us")
    print(f"ratio source/raw:       {ours / raw:9.2f}x   (target <= 1.3x)")

    nvitop = make_nvitop()
    if nvitop is None:
        print("nvitop not importable: comparison skipped")
    else:
        theirs = median_us(nvitop, iterations)
        print(f"nvitop Device.all()+snapshot: {theirs:9.1f} us")
        print(f"ratio source/nvitop:    {ours / theirs:9.2f}x   (target <= 0.5x)")

    source.close()
    pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
