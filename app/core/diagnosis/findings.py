"""The words and fixes of the trend findings: a leak, a step leak, "full soon"."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.diagnosis.step_growth import STEP_LEAK_CAUSES, StepGrowth
from app.core.diagnosis.trends import Trend
from app.core.diagnosis.types import Diagnosis, Fix
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import GpuSample, ProcessSample
from app.core.units import fmt_bytes, fmt_duration

_BASIS = {"allocated": "Live tensors (the allocator's allocated)", "nvml": "Its GPU memory"}
#: What grows, in a leak's title.
_GROWS = {"allocated": "live tensors", "nvml": "GPU memory"}


@dataclass(frozen=True, slots=True)
class Grower:
    """A leaking process as the GPU forecast counts it."""

    proc: ProcessSample
    rate: float  # bytes/s of its GPU memory


def _fix_leak(name: str, pid: int) -> Fix:
    return Fix("fix_leak", f"Find what keeps tensors alive in {name}: "
               + "; ".join(STEP_LEAK_CAUSES), None, pid)


def _record(name: str, pid: int) -> Fix:
    return Fix("record_allocations", f"Record {name}'s allocations for a minute to see the "
               "call sites whose tensors stay alive", None, pid)


def leak(gpu: GpuSample, proc: ProcessSample, trend: Trend, basis: str,
         since: float | None) -> Diagnosis:
    name = label_or_pid(proc)
    minutes = fmt_duration(trend.span_s)
    fixes = [_fix_leak(name, proc.pid), _record(name, proc.pid)]
    if proc.gpu_memory:
        fixes.append(Fix("stop_process", f"Restart {name} (for now): gives "
                         f"{fmt_bytes(proc.gpu_memory)}", proc.gpu_memory, proc.pid))
    return Diagnosis(
        "leak", "warning", f"{name} is leaking: {_GROWS[basis]} grow ~{fmt_bytes(trend.rate)}/s",
        (f"{_BASIS[basis]} rose from {fmt_bytes(trend.start_bytes)} to "
         f"{fmt_bytes(trend.end_bytes)} over {minutes} (its lower envelope: "
         "saw-tooths and caches that drop again do not count).",
         f"Still rising over the last minutes: ~{fmt_bytes(trend.recent_rate)}/s."),
        tuple(fixes), gpu=gpu.display_id, gpu_uuid=gpu.uuid, pid=proc.pid,
        create_time=proc.create_time, command=proc.command, since=since,
        figures={"rate_bytes_per_s": round(trend.rate, 1),
                 "recent_rate_bytes_per_s": round(trend.recent_rate, 1),
                 "start_bytes": trend.start_bytes, "end_bytes": trend.end_bytes,
                 "span_s": round(trend.span_s, 1)})


def step_leak(gpu: GpuSample, proc: ProcessSample, growth: StepGrowth) -> Diagnosis:
    name = label_or_pid(proc)
    return Diagnosis(
        "step_leak", "warning",
        f"{name}: live tensors grow ~{fmt_bytes(growth.bytes_per_step)} per optimizer step",
        (f"After optimizer step {growth.first_step}: {fmt_bytes(growth.first_bytes)}; after "
         f"step {growth.last_step}: {fmt_bytes(growth.last_bytes)} ({growth.samples} samples, "
         "rising step after step).",
         "After a step only weights, gradients and optimizer state should be alive."),
        (_fix_leak(name, proc.pid), _record(name, proc.pid)),
        gpu=gpu.display_id, gpu_uuid=gpu.uuid, pid=proc.pid, create_time=proc.create_time,
        command=proc.command, since=growth.since,
        figures={"bytes_per_step": round(growth.bytes_per_step, 1),
                 "first_step": growth.first_step, "last_step": growth.last_step,
                 "first_bytes": growth.first_bytes, "last_bytes": growth.last_bytes})


def full_soon(gpu: GpuSample, eta_s: float, rate: float, peak: float, capacity: int,
              growers: Sequence[Grower], fired_at: float | None,
              caches: Sequence[tuple[ProcessSample, int]]) -> Diagnosis:
    minutes = max(1, math.ceil(eta_s / 60))
    usable = f"{fmt_bytes(capacity)} usable"
    if gpu.memory_total is not None and gpu.memory_reserved:
        usable += (f" ({fmt_bytes(gpu.memory_total)} less {fmt_bytes(gpu.memory_reserved)} "
                   "reserved by the driver)")
    evidence = [f"Peak used in the last minutes: {fmt_bytes(peak)} of {usable}; "
                f"{fmt_bytes(max(0.0, capacity - peak))} left.",
                f"Used memory grows ~{fmt_bytes(rate)}/s."]
    if growers:
        evidence.append("Growing: " + ", ".join(
            f"{label_or_pid(g.proc)}'s GPU memory ~{fmt_bytes(g.rate)}/s" for g in growers) + ".")
    else:
        evidence.append("No listed process accounts for it: the GPU's own figure rises.")
    fixes = [Fix("stop_process", f"Restart {label_or_pid(g.proc)}, which is leaking: gives "
                 f"{fmt_bytes(g.proc.gpu_memory)}", g.proc.gpu_memory, g.proc.pid)
             for g in growers]
    fixes += [Fix("free_cache", f"Free the cache of {label_or_pid(p)}: gives {fmt_bytes(c)}",
                  c, p.pid) for p, c in caches]
    return Diagnosis(
        "full_soon", "critical" if eta_s < 300 else "warning",
        f"GPU {gpu.display_id} full in ~{minutes} min at this rate", tuple(evidence),
        tuple(fixes), gpu=gpu.display_id, gpu_uuid=gpu.uuid,
        pid=growers[0].proc.pid if len(growers) == 1 else None,
        command=growers[0].proc.command if len(growers) == 1 else None, since=fired_at,
        figures={"seconds_to_full": round(eta_s, 1), "rate_bytes_per_s": round(rate, 1),
                 "peak_used_bytes": int(peak), "capacity_bytes": capacity,
                 "fired_at": fired_at})
