"""Hand-made diagnoses, an OOM report and snapshots for the Doctor's widgets."""

from __future__ import annotations

import dataclasses

from app.core.agents.types import AgentReport, DeviceMemory
from app.core.diagnosis.types import Diagnosis, Fix, Holder, IdleModel, OomReport
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB, MiB

NOW = 1_700_000_000.0


def proc(pid, mem, command):
    return ProcessSample(pid, mem, name=command.split()[-1], user="alice", command=command,
                         create_time=NOW - 500)


def gpus():
    return (GpuSample(index=0, name="Test GPU 0", uuid="GPU-0", memory_total=24 * GiB,
                      memory_used=21 * GiB, memory_free=3 * GiB, display_id="0",
                      processes=(proc(20417, 14 * GiB, "python train.py"),
                                 proc(23890, 6 * GiB, "python serve_embeddings.py"),
                                 proc(31002, GiB, "python notebook.py"))),
            GpuSample(index=1, name="Test GPU 1", uuid="GPU-1", memory_total=24 * GiB,
                      memory_used=2 * GiB, memory_free=22 * GiB, display_id="1"))


def agents(cuda=True):
    dev = DeviceMemory(index=0, allocated=4 * GiB, reserved=6 * GiB)
    return {pid: AgentReport(pid=pid, argv=("python", "x.py"), devices=(dev,) if cuda else (),
                             models=(), python="3.11.9", torch="2.5.1", torch_status="loaded",
                             cuda_initialized=cuda, allocator_backend="native",
                             received_at=NOW)
            for pid in (20417, 23890)}


def leak(rate_mib=14):
    return Diagnosis(
        "leak", "warning", f"serve_embeddings.py (pid 23890) is leaking ~{rate_mib} MiB/s",
        (f"allocated rose {rate_mib} MiB/s for the last 10 min without a plateau",
         "6.0 GiB now, 0.8 GiB 10 min ago"),
        (Fix("record_allocations", "Record allocations to find the call site", pid=23890),
         Fix("fix_leak", "Stop keeping tensors alive: loss.item(), detach(), no retain_graph",
             pid=23890)),
        gpu="0", gpu_uuid="GPU-0", pid=23890, command="serve_embeddings.py", since=NOW - 600,
        figures={"rate_bytes_per_s": rate_mib * MiB})


def full_soon(minutes=9):
    return Diagnosis(
        "full_soon", "critical", f"GPU 0 will be full in ~{minutes} min at this rate",
        ("21.0 GiB of 24.0 GiB used, rising 5.6 MiB/s",),
        (Fix("free_cache", "Free the cache of train.py (pid 20417): gives 2.0 GiB",
             2 * GiB, pid=20417),
         Fix("unload_model", "Unload idle model clip (pid 20417): gives 1.2 GiB",
             int(1.2 * GiB), pid=20417, model="m1", model_name="clip")),
        gpu="0", gpu_uuid="GPU-0", since=NOW - 120,
        figures={"seconds_to_full": minutes * 60})


def fragmentation():
    return Diagnosis(
        "fragmentation", "info", "train.py (pid 20417): memory is fragmented",
        ("inactive split blocks hold 1.4 GiB", "allocation retries: 12, rising"),
        (Fix("expandable_segments", "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
             "and restart train.py", int(1.4 * GiB), pid=20417),),
        gpu="0", pid=20417, command="train.py", since=NOW - 60)


def oom_report(rid="1700000000000-20417-1"):
    return OomReport(
        id=rid, time=NOW - 30, pid=20417, command="train.py", gpu="0", gpu_uuid="GPU-0",
        gpu_name="Test GPU 0", memory_total=24 * GiB, memory_used=int(23.2 * GiB),
        request=2 * GiB, verdict="other_processes",
        explanation=("train.py asked for 2.0 GiB with 0.8 GiB free on GPU 0.",
                     "serve_embeddings.py held 6.0 GiB, 4.5 GiB of it an idle model."),
        fixes=(Fix("unload_model", "Unload idle model clip in serve_embeddings.py (pid "
                   "23890): gives 4.5 GiB", int(4.5 * GiB), pid=23890, model="m1",
                   model_name="clip"),
               Fix("free_cache", "Free the cache of serve_embeddings.py: gives 1.0 GiB",
                   GiB, pid=23890),
               Fix("expandable_segments", "Set expandable_segments", None, pid=20417)),
        holders=(Holder(20417, "train.py", "alice", 14 * GiB, is_oom_process=True,
                        has_agent=True, allocated=12 * GiB, reserved=13 * GiB),
                 Holder(23890, "serve_embeddings.py", "alice", 6 * GiB, has_agent=True,
                        allocated=5 * GiB, reserved=6 * GiB,
                        idle_models=(IdleModel("m1", "clip", int(4.5 * GiB), 1500.0),)),
                 Holder(31002, "notebook.py", "bob", GiB)),
        capture={"request": 2 * GiB, "free": int(0.8 * GiB),
                 "segments": {"free": GiB, "largest_free_block": 512 * MiB}},
        unattributed=int(2.2 * GiB))


def snapshot(diagnoses=(), oom_reports=(), t=10.0, with_agents=True, cuda=True):
    return Snapshot(NOW + t, t, "nvml", "550.54", gpus(),
                    agents=agents(cuda) if with_agents else {},
                    diagnoses=tuple(diagnoses), oom_reports=tuple(oom_reports))


def later(snap, dt=1.0, **changes):
    return dataclasses.replace(snap, timestamp=snap.timestamp + dt,
                               monotonic=snap.monotonic + dt, **changes)


def feed(shell, snap):
    """A snapshot as the application hands it on: the window, then the shell."""
    shell.window.on_snapshot(snap)
    shell.on_snapshot(snap)
