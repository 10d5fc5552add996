"""Advice per process, from the numbers only, each fix with what it would give.

* cache much larger than live tensors while the process is idle -> free the cache
* fragmentation (inactive split blocks large, allocation retries rising)
  -> ``expandable_segments``
* a TensorFlow process holding nearly the whole card -> TensorFlow's memory growth
* memory held with no kernels for a long time -> an idle process
* models idle for a while -> unload them

Unknown figures (None) never trigger a rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.agents.types import AgentReport, DeviceMemory
from app.core.diagnosis.types import Diagnosis, Fix
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import GpuSample, ProcessSample
from app.core.units import fmt_bytes, fmt_duration

MiB = 1024**2
GiB = 1024**3

EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


@dataclass(frozen=True, slots=True)
class AdviceConfig:
    idle_for_s: float = 120.0  # "idle": no kernels, or no forward, for this long
    idle_cache_min_bytes: int = 256 * MiB  # a cache worth freeing
    frag_min_bytes: int = 256 * MiB  # inactive split bytes worth a word ...
    frag_share: float = 0.25  # ... and this share of reserved
    tf_share: float = 0.90  # a TensorFlow process holding this share of the card
    idle_process_s: float = 1800.0  # memory held with no kernels this long
    idle_process_min_bytes: int = 256 * MiB
    model_idle_s: float = 600.0  # a model unused this long is worth unloading


@dataclass(frozen=True, slots=True)
class ProcessView:
    """One process on one GPU, with what the doctor remembers of it."""

    gpu: GpuSample
    proc: ProcessSample
    report: AgentReport | None
    device: DeviceMemory | None  # its allocator figures on this GPU
    no_kernels_s: float | None  # seconds its SM use has read 0 (None: unknown)
    retries_rising: bool = False  # allocation retries rose within the window


def _diag(view: ProcessView, kind: str, severity: str, title: str, evidence: list[str],
          fixes: list[Fix], figures: dict[str, Any], since: float | None = None) -> Diagnosis:
    p = view.proc
    return Diagnosis(kind, severity, title, tuple(evidence), tuple(fixes),
                     gpu=view.gpu.display_id, gpu_uuid=view.gpu.uuid, pid=p.pid,
                     create_time=p.create_time, command=p.command, since=since,
                     figures=figures)


def idle_for(view: ProcessView, now: float) -> float | None:
    """How long the process has been idle: no kernels, else no forward of any model."""
    idle = view.no_kernels_s
    if view.report is not None and view.report.models:
        ages = [m.idle_s(now) for m in view.report.models]
        if all(a is not None for a in ages):
            model_idle = min(a for a in ages if a is not None)
            idle = model_idle if idle is None else max(idle, model_idle)
    return idle


def idle_cache(view: ProcessView, now: float, cfg: AdviceConfig) -> Diagnosis | None:
    dev = view.device
    if dev is None or dev.cache is None or dev.allocated is None:
        return None
    cache = dev.cache
    if cache < cfg.idle_cache_min_bytes or cache < dev.allocated:
        return None
    idle = idle_for(view, now)
    if idle is None or idle < cfg.idle_for_s:
        return None
    name = label_or_pid(view.proc)
    return _diag(view, "idle_cache", "info",
                 f"{name} keeps {fmt_bytes(cache)} of cache while idle",
                 [f"Cache (reserved − allocated): {fmt_bytes(cache)}; live tensors: "
                  f"{fmt_bytes(dev.allocated)}.", f"Idle for {fmt_duration(idle)}."],
                 [Fix("free_cache", f"Free the cache of {name}: gives {fmt_bytes(cache)}",
                      cache, view.proc.pid)],
                 {"cache_bytes": cache, "allocated_bytes": dev.allocated, "idle_s": idle})


def fragmentation(view: ProcessView, cfg: AdviceConfig) -> Diagnosis | None:
    dev = view.device
    if dev is None:
        return None
    split, reserved = dev.inactive_split, dev.reserved
    large = (split is not None and reserved and split >= cfg.frag_min_bytes
             and split >= cfg.frag_share * reserved)
    if not large and not view.retries_rising:
        return None
    name = label_or_pid(view.proc)
    evidence = []
    if split is not None:
        evidence.append(f"Inactive split blocks: {fmt_bytes(split)} of {fmt_bytes(reserved)} "
                        "reserved (free, but in blocks too small to reuse; empty_cache "
                        "cannot return them).")
    if view.retries_rising:
        evidence.append(f"Allocation retries rising ({dev.num_alloc_retries} so far): the "
                        "allocator had to flush its cache to find room.")
    return _diag(view, "fragmentation", "warning", f"{name}: its cache is fragmented",
                 evidence,
                 [Fix("expandable_segments",
                      f"Restart {name} with {EXPANDABLE}: the split blocks "
                      f"({fmt_bytes(split)}) become usable", split, view.proc.pid)],
                 {"inactive_split_bytes": split, "reserved_bytes": reserved,
                  "num_alloc_retries": dev.num_alloc_retries})


def tensorflow(view: ProcessView, is_tf: bool | None, cfg: AdviceConfig) -> Diagnosis | None:
    held, total = view.proc.gpu_memory, view.gpu.memory_total
    if is_tf is not True or held is None or not total or held < cfg.tf_share * total:
        return None
    name = label_or_pid(view.proc)
    return _diag(view, "tensorflow", "warning",
                 f"{name} (TensorFlow) holds {held / total * 100:.0f} % of the card",
                 [f"It holds {fmt_bytes(held)} of {fmt_bytes(total)}; TensorFlow reserves "
                  "nearly all GPU memory at start unless told otherwise.",
                  "TensorFlow's libraries are mapped in the process."],
                 [Fix("tf_memory_growth",
                      f"Restart {name} with TF_FORCE_GPU_ALLOW_GROWTH=true (or "
                      "tf.config.experimental.set_memory_growth(gpu, True)): it then holds "
                      "what it uses; what that gives is n/a until it runs",
                      None, view.proc.pid)],
                 {"gpu_memory_bytes": held, "memory_total_bytes": total})


def idle_process(view: ProcessView, cfg: AdviceConfig) -> Diagnosis | None:
    held, idle = view.proc.gpu_memory, view.no_kernels_s
    if held is None or idle is None or held < cfg.idle_process_min_bytes \
            or idle < cfg.idle_process_s:
        return None
    name = label_or_pid(view.proc)
    return _diag(view, "idle_process", "info",
                 f"{name} holds {fmt_bytes(held)} and has run no kernels for "
                 f"{fmt_duration(idle)}",
                 [f"SM use 0 % for {fmt_duration(idle)}; it holds {fmt_bytes(held)}."],
                 [Fix("stop_process", f"End {name} if it is no longer needed: gives "
                      f"{fmt_bytes(held)}", held, view.proc.pid)],
                 {"gpu_memory_bytes": held, "idle_s": idle})


def idle_models(view: ProcessView, now: float, cfg: AdviceConfig) -> Diagnosis | None:
    report, dev = view.report, view.device
    if report is None or dev is None:
        return None
    key = f"cuda:{dev.index}"
    fixes = []
    total = 0
    longest = 0.0
    name = label_or_pid(view.proc)
    for m in report.models:
        idle = m.idle_s(now)
        held = m.bytes_on(key)
        if (idle is None or idle < cfg.model_idle_s or held <= 0 or m.state != "resident"
                or m.unload_blocker or m.training_evidence):
            continue
        total += held
        longest = max(longest, idle)
        fixes.append(Fix("unload_model", f"Unload {m.name} from {name} (idle "
                         f"{fmt_duration(idle)}): gives {fmt_bytes(held)}", held,
                         view.proc.pid, m.id, m.name))
    if not fixes:
        return None
    fixes.sort(key=lambda f: -(f.gain_bytes or 0))
    return _diag(view, "idle_model", "info",
                 f"{name} holds {len(fixes)} idle model{'s' if len(fixes) > 1 else ''} "
                 f"({fmt_bytes(total)})",
                 [f"{f.model_name}: {fmt_bytes(f.gain_bytes)}" for f in fixes]
                 + [f"Unused for up to {fmt_duration(longest)}."],
                 fixes, {"idle_model_bytes": total, "idle_s": longest})
