"""What a diagnosis says: a finding, its evidence, and the fixes ranked by
what they would give.  Every figure is bytes / seconds; None means unknown
and is shown as "n/a".  ``to_json`` is the ``doctor --json`` contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Diagnosis kinds, in the order ``doctor`` lists them.
KINDS = (
    "oom",            # an OOM report (the post-mortem itself is an OomReport)
    "full_soon",      # a GPU will be full in ~N min at the current growth
    "leak",           # a process's memory grows steadily (history trend)
    "step_leak",      # live tensors after each optimizer step keep rising
    "fragmentation",  # inactive split blocks large / allocation retries rising
    "idle_cache",     # the caching allocator holds much more than live tensors while idle
    "tensorflow",     # a TensorFlow process holding nearly the whole card
    "idle_process",   # memory held with no kernels for a long time
    "idle_model",     # models unused for a while (unload them)
    "no_agent",       # PyTorch processes holding VRAM without an agent (install it)
)

SEVERITIES = ("info", "warning", "critical")

#: Fix actions.  The app can carry out the first three itself; the rest are
#: changes the user makes to their code or environment.
FIX_ACTIONS = (
    "free_cache",           # gc + empty_cache in the process (agent)
    "unload_model",         # unload an idle model (agent)
    "stop_process",         # end or restart another process that holds memory
    "expandable_segments",  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, restart
    "reduce_activations",   # smaller batch, AMP (bf16/fp16), activation checkpointing
    "fix_leak",             # stop keeping tensors alive (loss.item(), detach, retain_graph)
    "tf_memory_growth",     # tf.config.experimental.set_memory_growth / TF_FORCE_GPU_ALLOW_GROWTH
    "record_allocations",   # record allocations to find the call site
    "install_agent",        # `vram-steward agent install` into the process's environment
)


@dataclass(frozen=True, slots=True)
class Fix:
    """One thing to do, with what it would give."""

    action: str  # one of FIX_ACTIONS
    text: str  # plain words: "Free the cache of python train.py (pid 20417): gives 2.1 GiB"
    gain_bytes: int | None = None  # what it would free on the GPU; None: unknown / not a byte fix
    pid: int | None = None  # the process it acts on
    model: str | None = None  # the agent's model id, for unload_model
    model_name: str | None = None
    command: str | None = None  # a command the user runs (install_agent)

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "text": self.text, "gain_bytes": self.gain_bytes,
                "pid": self.pid, "model": self.model, "model_name": self.model_name,
                "command": self.command}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fix | None:
        action, text = data.get("action"), data.get("text")
        if not isinstance(action, str) or not isinstance(text, str):
            return None
        gain, pid = data.get("gain_bytes"), data.get("pid")
        model, name = data.get("model"), data.get("model_name")
        command = data.get("command")
        return cls(action, text, gain if isinstance(gain, int) else None,
                   pid if isinstance(pid, int) else None,
                   model if isinstance(model, str) else None,
                   name if isinstance(name, str) else None,
                   command if isinstance(command, str) else None)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One current finding about a process or a GPU."""

    kind: str  # one of KINDS
    severity: str  # one of SEVERITIES
    title: str  # one line: "serve_embeddings.py (pid 23890) is leaking ~14 MiB/s"
    evidence: tuple[str, ...]  # the figures it rests on, one line each
    fixes: tuple[Fix, ...] = ()  # best first
    gpu: str | None = None  # GpuSample.display_id
    gpu_uuid: str | None = None
    pid: int | None = None
    create_time: float | None = None  # with pid: the process's identity
    command: str | None = None
    since: float | None = None  # epoch seconds the finding first held
    # Machine-readable figures behind the evidence (bytes, bytes/s, seconds,
    # counts; None = unknown), e.g. {"rate_bytes_per_s": ..., "seconds_to_full": ...}.
    figures: dict[str, float | int | None] = field(default_factory=dict)
    report_id: str | None = None  # kind "oom": the OomReport it stands for
    pids: tuple[int, ...] = ()  # every process it concerns, when that is several ("no_agent")

    @property
    def key(self) -> tuple[str, str | None, int | None]:
        """What stays the same while the finding holds (one per kind, GPU and process)."""
        return (self.kind, self.gpu, self.pid)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "title": self.title,
                "evidence": list(self.evidence), "fixes": [f.to_json() for f in self.fixes],
                "gpu": self.gpu, "gpu_uuid": self.gpu_uuid, "pid": self.pid,
                "create_time": self.create_time, "command": self.command, "since": self.since,
                "figures": dict(self.figures), "report_id": self.report_id,
                "pids": list(self.pids)}


@dataclass(frozen=True, slots=True)
class IdleModel:
    """An idle model another process (or the OOM'd one) held at the OOM."""

    model: str  # the agent's model id
    name: str
    bytes: int | None  # its bytes on the OOM's GPU
    idle_s: float | None  # seconds since its last use; None: unknown


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding memory on the OOM's GPU at that instant."""

    pid: int
    command: str | None
    user: str | None
    gpu_memory: int | None  # NVML bytes
    is_oom_process: bool = False
    has_agent: bool = False
    allocated: int | None = None  # agent: live tensors
    reserved: int | None = None  # agent: allocator total (allocated + cache)
    idle_models: tuple[IdleModel, ...] = ()

    @property
    def cache(self) -> int | None:
        if self.allocated is None or self.reserved is None:
            return None
        return max(0, self.reserved - self.allocated)


@dataclass(frozen=True, slots=True)
class OomReport:
    """An OOM post-mortem: the agent's capture joined with the app's view of
    every process on that GPU at that instant, explained and with fixes
    ranked by what the figures say.  Saved as JSON (``to_json``)."""

    id: str  # "<epoch ms>-<pid>-<seq>": unique, sortable
    time: float  # epoch seconds of the OOM
    pid: int
    command: str | None
    gpu: str | None  # display_id of the NVML GPU (None: could not be placed)
    gpu_uuid: str | None
    gpu_name: str | None
    memory_total: int | None  # NVML, bytes
    memory_used: int | None  # NVML at the instant, bytes
    request: int | None  # the failed allocation, bytes
    verdict: str  # "fragmentation" | "other_processes" | "cache" | "live_tensors" | "unknown"
    explanation: tuple[str, ...]  # plain sentences, most important first
    fixes: tuple[Fix, ...]  # best first
    holders: tuple[Holder, ...]  # largest first
    capture: dict[str, Any]  # the agent's OomCapture.to_json(), as received
    unattributed: int | None = None  # bytes used on the GPU that no listed process held
    snapshot_age_s: float | None = None  # how far the joined snapshot was from the OOM
    demo: bool = False  # made by the demo scenario
    # The process's model as its agent reported it (``ModelInfo``'s JSON: class, dtype,
    # training, config, input_shape), for the batch that would have fitted; None: unknown.
    model: dict[str, Any] | None = None

    @property
    def title(self) -> str:
        from app.core.units import fmt_bytes

        return f"{self.command or f'pid {self.pid}'} ran out of GPU memory " \
               f"asking for {fmt_bytes(self.request)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "time": self.time, "pid": self.pid, "command": self.command,
            "gpu": self.gpu, "gpu_uuid": self.gpu_uuid, "gpu_name": self.gpu_name,
            "memory_total": self.memory_total, "memory_used": self.memory_used,
            "request": self.request, "verdict": self.verdict,
            "explanation": list(self.explanation), "fixes": [f.to_json() for f in self.fixes],
            "holders": [{
                "pid": h.pid, "command": h.command, "user": h.user, "gpu_memory": h.gpu_memory,
                "is_oom_process": h.is_oom_process, "has_agent": h.has_agent,
                "allocated": h.allocated, "reserved": h.reserved,
                "idle_models": [{"model": m.model, "name": m.name, "bytes": m.bytes,
                                 "idle_s": m.idle_s} for m in h.idle_models]}
                for h in self.holders],
            "capture": self.capture, "unattributed": self.unattributed,
            "snapshot_age_s": self.snapshot_age_s, "demo": self.demo, "model": self.model,
        }

    @classmethod
    def from_json(cls, data: Any) -> OomReport | None:
        """A saved report; None when it is not one (a foreign or damaged file)."""
        if not isinstance(data, dict):
            return None
        rid, when, pid = data.get("id"), _num(data.get("time")), _int(data.get("pid"))
        if not isinstance(rid, str) or when is None or pid is None:
            return None
        holders = []
        for h in data.get("holders") or ():
            if not isinstance(h, dict) or not _is_int(h.get("pid")):
                continue
            models = tuple(
                IdleModel(str(m.get("model")), str(m.get("name")), _int(m.get("bytes")),
                          _num(m.get("idle_s")))
                for m in h.get("idle_models") or () if isinstance(m, dict))
            holders.append(Holder(h["pid"], _str(h.get("command")), _str(h.get("user")),
                                  _int(h.get("gpu_memory")), h.get("is_oom_process") is True,
                                  h.get("has_agent") is True, _int(h.get("allocated")),
                                  _int(h.get("reserved")), models))
        fixes = tuple(f for f in (Fix.from_json(x) for x in data.get("fixes") or ()
                                  if isinstance(x, dict)) if f is not None)
        explanation = tuple(x for x in data.get("explanation") or () if isinstance(x, str))
        capture = data.get("capture")
        return cls(rid, float(when), pid, _str(data.get("command")), _str(data.get("gpu")),
                   _str(data.get("gpu_uuid")), _str(data.get("gpu_name")),
                   _int(data.get("memory_total")), _int(data.get("memory_used")),
                   _int(data.get("request")), _str(data.get("verdict")) or "unknown",
                   explanation, fixes, tuple(holders),
                   capture if isinstance(capture, dict) else {},
                   _int(data.get("unattributed")), _num(data.get("snapshot_age_s")),
                   data.get("demo") is True,
                   model if isinstance(model := data.get("model"), dict) else None)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any) -> int | None:
    return value if _is_int(value) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
