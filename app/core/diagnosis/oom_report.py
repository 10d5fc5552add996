"""An OOM post-mortem: the agent's capture joined with the app's own view.

The capture says what the failing process asked for and what its allocator
held; the snapshot closest to (preferably just before) the OOM says who else
held the card.  The verdict names what explains the failure, the
explanation says it in plain words, and the fixes are ranked by what the
figures say: the primary fix for the verdict first, then the frees that
would make room for the request (harmless ones first: a cache, an idle
model, then a whole process), then the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.agents.oom import OomCapture
from app.core.agents.placement import gpu_of_device
from app.core.agents.types import AgentReport, ModelInfo, bare_uuid
from app.core.diagnosis.advice import EXPANDABLE
from app.core.diagnosis.step_growth import STEP_LEAK_CAUSES
from app.core.diagnosis.types import Fix, Holder, IdleModel, OomReport
from app.core.monitor.naming import short_name
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import fmt_bytes, fmt_duration

#: A model unused this long at the OOM counts as idle (worth unloading).
IDLE_MODEL_S = 60.0
#: Fix kinds from the cheapest to undo to the most disruptive.
_COST = {"free_cache": 0, "unload_model": 1, "stop_process": 2}


@dataclass(frozen=True, slots=True)
class LeakHint:
    """What the doctor knew of the OOM'd process's growth before the OOM."""

    rate: float | None = None  # bytes/s of its live tensors (or NVML figure)
    per_step: float | None = None  # bytes per optimizer step, when rising


def report_id(capture: OomCapture, pid: int) -> str:
    return f"{int(capture.time * 1000):013d}-{pid}-{capture.seq}"


def choose_snapshot(snapshots: Sequence[Snapshot], when: float) -> Snapshot | None:
    """The latest snapshot at or before ``when``; else the earliest after it."""
    good = [s for s in snapshots if s.gpus]
    before = [s for s in good if s.timestamp <= when]
    if before:
        return max(before, key=lambda s: s.timestamp)
    return min(good, key=lambda s: s.timestamp) if good else None


def place(snapshot: Snapshot, capture: OomCapture, report: AgentReport | None,
          pid: int) -> GpuSample | None:
    """The NVML GPU of the capture's device: by UUID, else as placement maps it."""
    if capture.uuid:
        want = bare_uuid(capture.uuid)
        for g in snapshot.gpus:
            if g.uuid and bare_uuid(g.uuid) == want and g.mig_index is None:
                return g
    device = f"cuda:{capture.device}" if capture.device is not None else None
    display = gpu_of_device(snapshot, report, device, pid)
    return next((g for g in snapshot.gpus if g.display_id == display), None)


def oom_model(report: AgentReport | None, capture: OomCapture) -> dict[str, Any] | None:
    """The model the OOM's process ran, as its agent reported it (the JSON
    ``ModelInfo.from_json`` reads): the one with a config and a last input
    first, then one on the OOM's device, then the one used last, then the
    largest.  None: no agent, or no model."""
    if report is None or not report.models:
        return None
    device = f"cuda:{capture.device}" if capture.device is not None else None

    def rank(m: ModelInfo) -> tuple[bool, bool, float, int]:
        return (m.config is not None and m.input_shape is not None,
                device is not None and m.bytes_on(device) > 0, m.last_used or 0.0,
                m.param_bytes or 0)
    m = max(report.models, key=rank)
    return {"id": m.id, "name": m.name, "class": m.class_name, "params": m.params,
            "param_bytes": m.param_bytes, "device": m.device, "dtype": m.dtype,
            "training": m.training, "requires_grad": m.requires_grad,
            "config": m.config,
            "input_shape": list(m.input_shape) if m.input_shape is not None else None}


def _holder(proc: ProcessSample, gpu: GpuSample, snapshot: Snapshot, oom_pid: int,
            capture: OomCapture) -> Holder:
    report = snapshot.agents.get(proc.pid)
    allocated = reserved = None
    models: list[IdleModel] = []
    if report is not None:
        dev = report.device_for_gpu(gpu.index, gpu.uuid)
        if dev is not None:
            allocated, reserved = dev.allocated, dev.reserved
            key = f"cuda:{dev.index}"
            for m in report.models:
                idle = m.idle_s(report.received_at or snapshot.timestamp)
                held = m.bytes_on(key)
                if (held > 0 and idle is not None and idle >= IDLE_MODEL_S
                        and m.state == "resident" and not m.unload_blocker
                        and not m.training_evidence):
                    models.append(IdleModel(m.id, m.name, held, idle))
    if proc.pid == oom_pid:
        allocated = capture.stat("allocated") if capture.stat("allocated") is not None \
            else allocated
        reserved = capture.stat("reserved") if capture.stat("reserved") is not None \
            else reserved
    return Holder(proc.pid, proc.command, proc.user, proc.gpu_memory, proc.pid == oom_pid,
                  report is not None, allocated, reserved,
                  tuple(sorted(models, key=lambda m: -(m.bytes or 0))))


def _name(h: Holder) -> str:
    proc = ProcessSample(h.pid, h.gpu_memory, command=h.command)
    return f"{short_name(proc)} (pid {h.pid})"


def _enough(gain: int | None, shortfall: int | None) -> str:
    if gain is None or shortfall is None:
        return ""
    if gain >= shortfall:
        return " — enough for the request"
    return f" — not enough alone (short {fmt_bytes(shortfall - gain)})"


def build_report(capture: OomCapture, pid: int, snapshots: Sequence[Snapshot],
                 report: AgentReport | None = None, leak: LeakHint | None = None,
                 demo: bool = False) -> OomReport:
    """The post-mortem of one capture (``snapshots``: the app's recent ones)."""
    snap = choose_snapshot(snapshots, capture.time)
    gpu = place(snap, capture, report, pid) if snap is not None else None
    holders: list[Holder] = []
    if snap is not None and gpu is not None:
        holders = [_holder(p, gpu, snap, pid, capture) for p in gpu.processes]
    own = next((h for h in holders if h.is_oom_process), None)
    command = own.command if own else (" ".join(report.argv) if report and report.argv else None)
    if own is None:
        own = Holder(pid, command, None, None, True, report is not None,
                     capture.stat("allocated"), capture.stat("reserved"))
        holders.append(own)
    holders.sort(key=lambda h: -(h.gpu_memory or 0))
    others = [h for h in holders if not h.is_oom_process]
    capacity = None
    if gpu is not None and gpu.memory_total is not None:
        capacity = gpu.memory_total - (gpu.memory_reserved or 0)
    free = capture.free
    if free is None and gpu is not None and capacity is not None and gpu.memory_used is not None:
        free = max(0, capacity - gpu.memory_used)
    request = capture.request
    shortfall = max(0, request - free) if request is not None and free is not None else None
    others_bytes = sum(h.gpu_memory or 0 for h in others) if others else 0
    others_cache = sum(h.cache or 0 for h in others)
    fragmented = capture.fragmented
    leaking = leak is not None and (leak.rate is not None or leak.per_step is not None)

    if fragmented:
        verdict = "fragmentation"
    elif leaking or (own.allocated is not None and own.allocated >= others_bytes):
        verdict = "live_tensors"
    elif shortfall is not None and others_cache >= shortfall and others_cache > 0:
        verdict = "cache"
    elif others_bytes > 0:
        verdict = "other_processes"
    elif own.allocated is not None:
        verdict = "live_tensors"
    else:
        verdict = "unknown"

    name = _name(own) if own.command else f"pid {pid}"
    lines = [f"{own.command or name} asked for {fmt_bytes(request)}; {fmt_bytes(free)} was free "
             "on the card."]
    if capture.limit is not None and capacity is not None and capture.limit < capacity * 0.98:
        lines.append(f"The process may use at most {fmt_bytes(capture.limit)} of the card "
                     "(its memory fraction).")
    if others:
        top = ", ".join(f"{_name(h)} {fmt_bytes(h.gpu_memory)}" for h in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        lines.append(f"Other processes held {fmt_bytes(others_bytes)}: {top}{more}.")
    if own.allocated is not None:
        own_text = f"The process itself held {fmt_bytes(own.gpu_memory)} on the card: " \
            if own.gpu_memory is not None else "The process itself held: "
        lines.append(own_text + f"{fmt_bytes(own.allocated)} of live tensors, "
                     f"{fmt_bytes(own.cache)} of cache.")
    seg = capture.segments
    if fragmented and seg is not None:
        lines.append(f"The process's own cache held {fmt_bytes(seg.free)} of free blocks, but "
                     f"the largest was {fmt_bytes(seg.largest_free_block)}: fragmentation.")
    elif seg is not None and seg.free is not None and request is not None:
        lines.append(f"Its own cache had {fmt_bytes(seg.free)} free, less than the request.")
    if leak is not None and leak.per_step is not None:
        lines.append(f"Its live tensors grew ~{fmt_bytes(leak.per_step)} per optimizer step "
                     "before the OOM: a leak.")
    elif leak is not None and leak.rate is not None:
        lines.append(f"Its memory grew steadily, ~{fmt_bytes(leak.rate)}/s, before the OOM: "
                     "a leak.")
    if verdict == "cache":
        lines.append(f"Other processes' caches held {fmt_bytes(others_cache)} they were not "
                     "using.")
    unattributed = gpu.unattributed_memory if gpu is not None else None
    if unattributed is not None and unattributed >= 1024**3:
        lines.append(f"{fmt_bytes(unattributed)} in use was held by no listed process (other "
                     "containers, the driver, exited processes).")
    if snap is None or gpu is None:
        lines.append("The app had no view of the card at that moment: other processes unknown.")

    fixes = _fixes(verdict, own, others, shortfall, leak, capture, name)
    return OomReport(
        id=report_id(capture, pid), time=capture.time, pid=pid, command=command,
        gpu=gpu.display_id if gpu else None, gpu_uuid=gpu.uuid if gpu else None,
        gpu_name=gpu.name if gpu else None,
        memory_total=gpu.memory_total if gpu else None,
        memory_used=gpu.memory_used if gpu else None, request=request, verdict=verdict,
        explanation=tuple(lines), fixes=tuple(fixes), holders=tuple(holders),
        capture=capture.to_json(), unattributed=unattributed,
        snapshot_age_s=round(capture.time - snap.timestamp, 3) if snap else None, demo=demo,
        model=oom_model(report, capture))


def _fixes(verdict: str, own: Holder, others: list[Holder], shortfall: int | None,
           leak: LeakHint | None, capture: OomCapture, name: str) -> list[Fix]:
    frees: list[tuple[bool, int, int, Fix]] = []  # (not enough, cost, order, fix)

    def add(fix: Fix) -> None:
        gain = fix.gain_bytes or 0
        short = shortfall is None or gain < shortfall
        # What fits: the least disruptive, then the smallest; what does not: the largest.
        frees.append((short, _COST.get(fix.action, 9), -gain if short else gain, fix))

    for h in others:
        other = _name(h)
        if h.cache:
            add(Fix("free_cache", f"Free the cache of {other}: gives {fmt_bytes(h.cache)}"
                    + _enough(h.cache, shortfall), h.cache, h.pid))
        for m in h.idle_models:
            add(Fix("unload_model", f"Unload {m.name} from {other} (idle "
                    f"{fmt_duration(m.idle_s)}): gives {fmt_bytes(m.bytes)}"
                    + _enough(m.bytes, shortfall), m.bytes, h.pid, m.model, m.name))
        if h.gpu_memory:
            add(Fix("stop_process", f"Stop or restart {other}: gives "
                    f"{fmt_bytes(h.gpu_memory)}" + _enough(h.gpu_memory, shortfall),
                    h.gpu_memory, h.pid))
    for m in own.idle_models:
        add(Fix("unload_model", f"Unload the idle {m.name} in {name} itself: gives "
                f"{fmt_bytes(m.bytes)}" + _enough(m.bytes, shortfall), m.bytes, own.pid,
                m.model, m.name))
    frees.sort(key=lambda x: x[:3])
    ranked_frees = [f for *_, f in frees]

    seg = capture.segments
    split = seg.free if seg is not None else None
    expandable = Fix("expandable_segments",
                     f"Restart {name} with {EXPANDABLE}: its {fmt_bytes(split)} of free "
                     "cached blocks become usable for a large request", split, own.pid)
    activations = Fix("reduce_activations",
                      f"Make {name} need less: a smaller batch, mixed precision (bf16/fp16 "
                      "autocast), activation checkpointing", None, own.pid)
    leak_fix = Fix("fix_leak", f"Stop {name} keeping tensors alive: "
                   + "; ".join(STEP_LEAK_CAUSES), None, own.pid) if leak else None
    record = Fix("record_allocations", f"Record {name}'s allocations to find the call site "
                 "that keeps them", None, own.pid)
    out: list[Fix] = []
    if verdict == "fragmentation":
        out = [expandable, *ranked_frees, activations]
    elif verdict == "live_tensors":
        out = [leak_fix, record] if leak_fix else [activations]
        out += [f for f in ranked_frees if f.gain_bytes and shortfall is not None
                and f.gain_bytes >= shortfall]
        out += [activations] if leak_fix else []
        out += [f for f in ranked_frees if f not in out]
    else:
        out = [*ranked_frees, activations]
    return [f for f in out if f is not None]
