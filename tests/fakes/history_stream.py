"""A scripted stream of snapshots for the history recorder, and a child
process that records it (``python -m tests.fakes.history_stream DB``).

GPU ``g`` is ``GPU-g``; its process ``p`` has pid ``1000 + 100 g + p``, start
time ``1e9 + pid`` and ``(p + 1) * 100 MiB`` (the last process of each GPU
has unknown bytes when ``unknown_last``).
"""

from __future__ import annotations

import argparse
import sys
import time

from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

MiB = 1 << 20
GiB = 1 << 30


def pid_of(gpu: int, process: int) -> int:
    return 1000 + 100 * gpu + process


def snapshot_at(t: float, gpus: int = 2, processes: int = 3, used: int | None = None,
                util: float | None = 50.0, unknown_last: bool = False,
                source: str = "nvml", monotonic: float | None = None) -> Snapshot:
    out = []
    for g in range(gpus):
        procs = []
        for p in range(processes):
            pid = pid_of(g, p)
            mem = None if unknown_last and p == processes - 1 else (p + 1) * 100 * MiB
            procs.append(ProcessSample(pid, mem, name=f"proc{p}", user="alice",
                                       command=f"python train{p}.py", create_time=1e9 + pid))
        out.append(GpuSample(index=g, name="H100", uuid=f"GPU-{g}", memory_total=80 * GiB,
                             memory_used=(g + 1) * GiB if used is None else used,
                             memory_free=None, utilization_gpu=util, processes=tuple(procs)))
    return Snapshot(timestamp=t, monotonic=t if monotonic is None else monotonic,
                    source=source, driver_version="550", gpus=tuple(out))


def _child(argv: list[str]) -> int:
    from app.core.store.recorder import HistoryRecorder

    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--period", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--used-mib", type=int, default=None, help="every GPU's used memory")
    args = parser.parse_args(argv)
    recorder = HistoryRecorder(args.db)
    recorder.wait_ready()
    print("ready", "read-only" if recorder.read_only else "writer", recorder.message or "",
          flush=True)
    end = time.time() + args.seconds
    while time.time() < end:
        now = time.time()
        recorder.observe(snapshot_at(
            now, used=None if args.used_mib is None else args.used_mib * MiB))
        print(f"tick {now:.3f}", flush=True)
        time.sleep(args.period)
    recorder.close()
    print("closed", recorder.message or "", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
