"""Local snapshots carrying remote hosts, built by hand for the window's tests."""

from __future__ import annotations

import time

from app.core.monitor.hosts import CONNECTED, HostView, qualify_gpu
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB

NO_DRIVER = "NVIDIA driver not found (libnvidia-ml is not installed)"


def gpu(index: int, host: str = "", used_gib: float = 10.0, total_gib: float = 80.0,
        name: str = "NVIDIA A100-SXM4-80GB", pids: tuple[int, ...] = ()) -> GpuSample:
    used, total = int(used_gib * GiB), int(total_gib * GiB)
    sample = GpuSample(index, name, f"GPU-{host or 'here'}-{index}", total, used, total - used,
                       utilization_gpu=40.0, temperature=50.0, power_draw=200.0,
                       power_limit=400.0,
                       processes=tuple(ProcessSample(p, GiB, name="train.py") for p in pids))
    return qualify_gpu(sample, host) if host else sample


class World:
    """A clock and snapshots: ``world.snap(local_gpus, hosts)`` advances one tick."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.epoch = time.time()

    def remote(self, *gpus: GpuSample, agents=None) -> Snapshot:
        return Snapshot(self.epoch + self.t - 1000.0, self.t, "nvml", "550.54", tuple(gpus),
                        agents=agents or {})

    def host(self, key: str, *gpus: GpuSample, state: str = CONNECTED, since=None,
             reason=None, name=None, agents=None) -> HostView:
        snapshot = self.remote(*gpus, agents=agents) if gpus else None
        return HostView(key, f"https://{key}:8470", state, since, reason, snapshot, name,
                        fresh=snapshot is not None and state == CONNECTED)

    def snap(self, gpus=(), hosts=(), error: str | None = None) -> Snapshot:
        self.t += 0.25
        return Snapshot(self.epoch + self.t - 1000.0, self.t, "nvml", "550.54", tuple(gpus),
                        error=error, hosts=tuple(hosts))
