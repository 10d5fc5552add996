"""Real child processes to terminate, and snapshots that list them on a GPU."""

from __future__ import annotations

import subprocess
import sys

import psutil

from app.core.control.terminate import current_user
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

GiB = 1 << 30

_SLEEP = "import time; time.sleep(60)"
# Ignores SIGTERM, then says so (the test waits for the line before signalling).
_STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "print('ready', flush=True); time.sleep(60)")


class Children:
    """Sleeping python processes; ``close()`` kills and reaps those still running."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, stubborn: bool = False) -> subprocess.Popen:
        """A sleeper; ``stubborn``: one that ignores SIGTERM (only SIGKILL ends it)."""
        proc = subprocess.Popen([sys.executable, "-c", _STUBBORN if stubborn else _SLEEP],
                                stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        if stubborn:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()


def sample_of(pid: int, mem: int | None = 2 * GiB, **kw) -> ProcessSample:
    """``pid`` as the sampler shows it: its real start time, this user's name."""
    fields = dict(name="python", user=current_user(), command="python train.py",
                  create_time=psutil.Process(pid).create_time())
    fields.update(kw)
    return ProcessSample(pid, mem, **fields)


def snapshot_of(*samples: ProcessSample, used: int | None = 10 * GiB, source: str = "nvml",
                t: float = 0.0) -> Snapshot:
    """One GPU ("0") holding ``samples``."""
    gpu = GpuSample(index=0, name="H100", uuid="GPU-0", memory_total=80 * GiB,
                    memory_used=used, memory_free=None, processes=tuple(samples))
    return Snapshot(timestamp=1_700_000_000.0 + t, monotonic=t, source=source,
                    driver_version="550", gpus=(gpu,))
