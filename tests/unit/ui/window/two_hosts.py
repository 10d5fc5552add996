"""A window's world with remote hosts, built by hand: this machine and two
hosts whose processes share pid 1234 on their GPU "0" (``"0@gpu1"``,
``"0@gpu2"``), each with an agent; helpers to make one host disconnected and to
send a remote host's events with a fresh view."""

from __future__ import annotations

import dataclasses
import time

from app.core.agents.types import AgentReport, DeviceMemory, FreeCacheResult, ModelInfo
from app.core.control.terminate import current_user
from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView, qualify_gpu
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB
from tests.fakes.directories import EmptyDirectory

PID = 1234  # on every host
EPOCH = time.time()


def proc(pid: int, gib: float, command: str) -> ProcessSample:
    return ProcessSample(pid, int(gib * GiB), name=command, user=current_user(),
                         command=f"python {command}", cpu_percent=5.0, host_rss=GiB,
                         create_time=EPOCH - 600, sm_util=30.0)


def gpu(index: int, host: str, *procs: ProcessSample) -> GpuSample:
    used = sum(p.gpu_memory or 0 for p in procs)
    sample = GpuSample(index, "NVIDIA A100-SXM4-80GB", f"GPU-{host or 'here'}-{index}", 80 * GiB,
                       used, 80 * GiB - used, processes=tuple(procs))
    return qualify_gpu(sample, host) if host else sample


def agent(pid: int, command: str, cache_gib: float = 2.0) -> AgentReport:
    model = ModelInfo(id="unet", name="pipe.unet", class_name="UNet", params=1,
                      param_bytes=3 * GiB, buffer_bytes=0, device="cuda:0", dtype="float16",
                      training=False, last_used=None)
    device = DeviceMemory(0, 4 * GiB, int((4 + cache_gib) * GiB))
    return AgentReport(pid=pid, argv=("python", command), python="3.11", torch="2.5.1",
                       torch_status="loaded", cuda_initialized=True, allocator_backend="native",
                       devices=(device,), models=(model,))


def host_snapshot(host: str, command: str, gib: float, t: float = 0.0, **fields) -> Snapshot:
    """``host``'s own snapshot: pid 1234 (``command``) with an agent on its GPU 0."""
    return Snapshot(EPOCH + t, 1000.0 + t, "nvml", "550.54",
                    (gpu(0, host, proc(PID, gib, command)), gpu(1, host)),
                    agents={PID: agent(PID, command)}, **fields)


def view(key: str, snapshot: Snapshot | None, state: str = CONNECTED, since: float | None = None,
         reason: str | None = None, fresh: bool = False) -> HostView:
    return HostView(key, f"https://{key}:8470", state, since, reason, snapshot,
                    name=key, user=current_user(), fresh=fresh)


def world(t: float = 0.0, gpu2: str = CONNECTED, since: float | None = None,
          fresh: bool = False, **gpu1_fields) -> Snapshot:
    """This machine (pid 1234 runs ``here.py``), gpu1 (``train.py``) and gpu2
    (``serve.py``; ``gpu2``: its state, ``since`` when it changed)."""
    local = host_snapshot("", "here.py", 1.0, t)
    one = host_snapshot("gpu1", "train.py", 10.0, t, **gpu1_fields)
    two = host_snapshot("gpu2", "serve.py", 20.0, t)
    reason = "connection refused: is `serve` running on gpu2?" if gpu2 == DISCONNECTED else None
    hosts = (view("gpu1", one, fresh=fresh),
             view("gpu2", two, gpu2, since, reason))
    return dataclasses.replace(local, hosts=hosts)


class Recorded(EmptyDirectory):
    """An agent directory that records which pids it freed (one per host)."""

    def __init__(self) -> None:
        self.freed: list[int] = []

    def free_cache(self, pid, timeout_s=30.0):
        self.freed.append(pid)
        return FreeCacheResult(pid, True, 6 * GiB, 4 * GiB, 2 * GiB)

    def collect_garbage(self, pid, timeout_s=30.0):
        return {"ok": True, "collected": 1, "seconds": 0.01, "error": None}
