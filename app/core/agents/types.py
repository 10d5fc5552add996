"""What the app knows about an agent and what it reported: typed, validated.

The agent speaks JSON (``app.agent.protocol``); these dataclasses are the
app's side of it.  Parsing is defensive: an agent is another process (maybe
another version), so a missing or mistyped field becomes ``None`` ("n/a"),
never a crash and never 0.  All memory figures are bytes, times epoch seconds.

Newer fields an older agent does not send stay unknown, with one exception:
an older agent's idle clock was its last forward, so ``ModelInfo.idle_since``
falls back to ``last_used`` when the key is absent (not when it is null: a
null ``idle_since`` is the agent saying it cannot see the model's use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.agents.fields import (
    bool_or_none,
    float_or_none,
    int_or_none,
    object_or_none,
    shape_or_none,
    str_or_none,
    time_or_none,
)
from app.core.agents.oom import OomCapture, captures
from app.core.agents.steps import StepMemory

_int = int_or_none
_float = float_or_none
_str = str_or_none
_bool = bool_or_none


def bare_uuid(uuid: str) -> str:
    """"GPU-1a2b…" (NVML) and "1a2b…" (CUDA) name the same device."""
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text



def _events(raw: Any) -> tuple[ModelEvent, ...]:
    if not isinstance(raw, list):
        return ()
    parsed = (ModelEvent.from_json(x) for x in raw if isinstance(x, dict))
    return tuple(e for e in parsed if e is not None)


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One registry file: how to reach an agent and which process it lives in."""

    pid: int
    create_time: float | None  # process start, epoch seconds (pid-reuse check)
    address: str  # socket path, or "127.0.0.1:PORT"
    transport: str  # "unix" or "tcp"
    argv: tuple[str, ...] = ()
    python: str | None = None
    torch: str | None = None
    protocol: int | None = None
    agent_version: str | None = None
    token: str | None = None  # tcp only: shared secret for the HMAC challenge
    path: str = ""  # the registry file itself
    uid: int | None = None  # whose agent: its registry file's owner (None: ours)

    @classmethod
    def from_json(cls, data: dict[str, Any], path: str = "") -> AgentEntry | None:
        pid = _int(data.get("pid"))
        address = _str(data.get("address"))
        transport = _str(data.get("transport"))
        if pid is None or pid <= 0 or not address or transport not in ("unix", "tcp"):
            return None
        argv = data.get("argv")
        return cls(
            pid=pid, create_time=_float(data.get("create_time")), address=address,
            transport=transport,
            argv=tuple(a for a in argv if isinstance(a, str)) if isinstance(argv, list) else (),
            python=_str(data.get("python")), torch=_str(data.get("torch")),
            protocol=_int(data.get("protocol")), agent_version=_str(data.get("agent")),
            token=_str(data.get("token")), path=path)


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """The CUDA caching allocator's figures for one device (bytes, counts)."""

    index: int  # CUDA ordinal inside the process (renumbered by CUDA_VISIBLE_DEVICES)
    allocated: int | None  # live tensors
    reserved: int | None  # held by the caching allocator (allocated + cache)
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    active: int | None = None
    inactive_split: int | None = None  # fragmented: not returned by empty_cache
    requested: int | None = None
    num_alloc_retries: int | None = None  # cudaMalloc failed, cache flushed, retried
    num_ooms: int | None = None
    uuid: str | None = None  # as CUDA reports it; maps the ordinal to an NVML device

    @property
    def cache(self) -> int | None:
        """What ``empty_cache`` could at most return: reserved − allocated."""
        if self.reserved is None or self.allocated is None:
            return None
        return max(0, self.reserved - self.allocated)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceMemory | None:
        index = _int(data.get("index"))
        if index is None or index < 0:
            return None
        return cls(index=index, uuid=_str(data.get("uuid")), **{k: _int(data.get(k)) for k in (
            "allocated", "reserved", "peak_allocated", "peak_reserved", "active",
            "inactive_split", "requested", "num_alloc_retries", "num_ooms")})


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One root ``nn.Module`` holding parameters."""

    id: str
    name: str
    class_name: str
    params: int | None  # parameter count (elements)
    param_bytes: int | None
    buffer_bytes: int | None
    device: str | None  # "cuda:0", "cpu", or "mixed"
    dtype: str | None  # "float16", or "mixed"
    training: bool | None  # train mode (``model.training``)
    last_used: float | None  # epoch seconds of the last forward, None = none seen
    requires_grad: bool | None = None  # informational: blocks nothing
    group: str | None = None  # pipeline the model belongs to, e.g. "StableDiffusionPipeline"
    # Model manager (unload / reload):
    state: str = "resident"  # "resident", "unloading", "offloaded", "reloading"
    offloaded_to: str | None = None  # "cpu" or "disk" while offloaded
    pinned: bool = False  # exempt from automatic unloading
    # Why the agent would refuse an automatic unload (None = eligible once idle):
    # its unload_blocker, else its training_evidence, else "pinned", else (its own
    # idle timer) "not on a GPU".
    auto_unload_blocker: str | None = None
    home_device: str | None = None  # where the weights live when resident ("cuda:0")
    # bytes per device: {"cuda:0": {"params": n, "buffers": n}}
    bytes_by_device: dict[str, dict[str, int]] = field(default_factory=dict)
    first_seen: float | None = None  # epoch seconds the agent first saw the model
    # Epoch seconds the idle clock counts from: the last forward, else first_seen.
    # None: unknown (the agent cannot see the model's use, e.g. compiled code).
    idle_since: float | None = None
    # Why the agent counts the model as training ("train mode", "gradients present",
    # "optimizer step 40 s ago", "backward 2 min ago"); None: no evidence.  Refuses
    # an unload unless forced (manual only) and blocks automatic unloading.
    training_evidence: str | None = None
    # Why the agent refuses any unload, forced or not ("torch.compile", "TorchScript",
    # "torch.export", "shares tensors with m3", "meta placeholders", "no agent hooks",
    # "managed by ComfyUI").
    unload_blocker: str | None = None
    # Bytes of meta-device placeholders (weights held elsewhere, e.g. by an offload
    # hook); not in bytes_by_device.  None: unknown.
    placeholder_bytes: int | None = None
    # Epoch seconds the model's last reload completed; None: never reloaded (or an
    # agent too old to say).  No automatic unload takes it for protocol.RELOAD_GRACE_S.
    reloaded_at: float | None = None
    # The model's configuration (a Hugging Face config's ``to_dict()``, or a diffusers
    # model's config with ``_class_name``) as JSON data; None: no config known.
    config: dict[str, Any] | None = None
    # The shape of the first tensor of the model's last call; None: no call seen.
    input_shape: tuple[int, ...] | None = None

    def bytes_on(self, device: str) -> int:
        per = self.bytes_by_device.get(device, {})
        return sum(v for v in per.values() if isinstance(v, int))

    def idle_s(self, now: float) -> float | None:
        """Seconds on the agent's idle clock at ``now`` (epoch seconds); None = unknown."""
        return None if self.idle_since is None else max(0.0, now - self.idle_since)

    @property
    def blocker(self) -> str | None:
        """What keeps the model resident: a blocker of any unload first, else the
        automatic one (None: eligible once idle)."""
        return self.unload_blocker or self.auto_unload_blocker

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelInfo | None:
        model_id = _str(data.get("id"))
        if not model_id:
            return None
        by_device: dict[str, dict[str, int]] = {}
        raw = data.get("bytes_by_device")
        if isinstance(raw, dict):
            for dev, parts in raw.items():
                if isinstance(dev, str) and isinstance(parts, dict):
                    by_device[dev] = {k: v for k, v in parts.items()
                                      if isinstance(k, str) and _int(v) is not None}
        last_used = _float(data.get("last_used"))
        # An older agent sends no idle_since: its idle clock was the last forward.
        idle_since = _float(data["idle_since"]) if "idle_since" in data else last_used
        return cls(
            id=model_id, name=_str(data.get("name")) or model_id,
            class_name=_str(data.get("class")) or "?",
            params=_int(data.get("params")), param_bytes=_int(data.get("param_bytes")),
            buffer_bytes=_int(data.get("buffer_bytes")), device=_str(data.get("device")),
            dtype=_str(data.get("dtype")), training=_bool(data.get("training")),
            last_used=last_used, requires_grad=_bool(data.get("requires_grad")),
            group=_str(data.get("group")), bytes_by_device=by_device,
            state=_str(data.get("state")) or "resident",
            offloaded_to=_str(data.get("offloaded_to")), pinned=data.get("pinned") is True,
            auto_unload_blocker=_str(data.get("auto_unload_blocker")),
            home_device=_str(data.get("home_device")),
            first_seen=_float(data.get("first_seen")), idle_since=idle_since,
            training_evidence=_str(data.get("training_evidence")),
            unload_blocker=_str(data.get("unload_blocker")),
            placeholder_bytes=_int(data.get("placeholder_bytes")),
            reloaded_at=time_or_none(data.get("reloaded_at")),
            config=object_or_none(data.get("config")),
            input_shape=shape_or_none(data.get("input_shape")))


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """One unload or reload of a model, as the agent saw it (bytes, seconds)."""

    seq: int
    time: float  # epoch seconds
    model: str
    name: str
    action: str  # "unload" or "reload"
    state: str
    target: str | None = None  # "cpu" or "disk"
    bytes_moved: int | None = None
    bytes_released: int | None = None  # what the allocator really gave back to the driver
    seconds: float | None = None
    reason: str = "manual"  # "manual", "idle", "pressure", "forward"
    ok: bool = True
    error: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelEvent | None:
        seq, when, model = _int(data.get("seq")), _float(data.get("time")), _str(data.get("model"))
        action = _str(data.get("action"))
        if seq is None or when is None or not model or action not in ("unload", "reload"):
            return None
        return cls(seq=seq, time=when, model=model, name=_str(data.get("name")) or model,
                   action=action, state=_str(data.get("state")) or "?",
                   target=_str(data.get("target")), bytes_moved=_int(data.get("bytes_moved")),
                   bytes_released=_int(data.get("bytes_released")),
                   seconds=_float(data.get("seconds")), reason=_str(data.get("reason")) or "manual",
                   ok=data.get("ok") is not False, error=_str(data.get("error")))


@dataclass(frozen=True, slots=True)
class ModelActionResult:
    """Outcome of unload / reload / pin for one model."""

    pid: int
    model: str
    ok: bool
    event: ModelEvent | None = None
    pinned: bool | None = None
    error: str | None = None
    code: str | None = None  # protocol error code, e.g. "refused"
    # A model server's unload (app.core.servers): its outcome ("freed", "pending",
    # "not freed", ...), the line saying what happened, and the bytes NVML saw freed.
    outcome: str | None = None
    note: str | None = None
    freed_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        ev = self.event
        return {"pid": self.pid, "model": self.model, "ok": self.ok, "error": self.error,
                "code": self.code, "pinned": self.pinned, "outcome": self.outcome,
                "note": self.note, "freed_bytes": self.freed_bytes,
                "state": ev.state if ev else None, "target": ev.target if ev else None,
                "bytes_moved": ev.bytes_moved if ev else None,
                "bytes_released": ev.bytes_released if ev else None,
                "seconds": ev.seconds if ev else None}


@dataclass(frozen=True, slots=True)
class AgentReport:
    """One ``report`` answer, plus when and how fast it came."""

    pid: int
    argv: tuple[str, ...]
    python: str | None
    torch: str | None  # version; None when torch is not loaded
    torch_status: str  # "loaded" or "torch not loaded"
    cuda_initialized: bool | None
    allocator_backend: str | None
    devices: tuple[DeviceMemory, ...]
    models: tuple[ModelInfo, ...]
    oom_events: int | None = None
    errors: tuple[str, ...] = ()
    events: tuple[ModelEvent, ...] = ()  # recent model unloads / reloads, oldest first
    idle_unload_s: float | None = None  # the agent's own idle TTL; None = off
    received_at: float = 0.0  # epoch seconds
    round_trip_s: float | None = None
    ooms: tuple[OomCapture, ...] = ()  # the last OOMs the agent captured, oldest first
    steps: StepMemory | None = None  # optimizer steps and live bytes after them; None: unknown
    # The model server the process runs, which loads and frees its own models ("ComfyUI",
    # "Forge", "AUTOMATIC1111", "text-generation-webui", "vLLM", "SGLang"): its agent
    # refuses every unload (code "managed").  None: none, or an agent too old to say.
    managed_by: str | None = None

    def device(self, index: int) -> DeviceMemory | None:
        for dev in self.devices:
            if dev.index == index:
                return dev
        return None

    def device_for_gpu(self, gpu_index: int, gpu_uuid: str | None) -> DeviceMemory | None:
        """This process's allocator figures for the NVML device (index, uuid).

        Matched by UUID when the agent reports them, because CUDA_VISIBLE_DEVICES
        renumbers devices inside the process (its cuda:0 may be NVML GPU 3);
        by index only when the agent cannot say.
        """
        if gpu_uuid and any(d.uuid for d in self.devices):
            want = bare_uuid(gpu_uuid)
            for dev in self.devices:
                if dev.uuid and bare_uuid(dev.uuid) == want:
                    return dev
            return None
        return self.device(gpu_index)

    def param_bytes_for_gpu(self, gpu_index: int, gpu_uuid: str | None) -> int | None:
        """Model parameter bytes on that NVML device (None if the device is unknown)."""
        dev = self.device_for_gpu(gpu_index, gpu_uuid)
        return None if dev is None else self.param_bytes_on(dev.index)

    def param_bytes_on(self, index: int) -> int:
        """Bytes of model parameters this process holds on CUDA device ``index``."""
        key = f"cuda:{index}"
        return sum(m.bytes_by_device.get(key, {}).get("params", 0) for m in self.models)

    @classmethod
    def from_json(cls, data: dict[str, Any], received_at: float = 0.0,
                  round_trip_s: float | None = None) -> AgentReport | None:
        pid = _int(data.get("pid"))
        if pid is None:
            return None
        argv = data.get("argv")
        devices = data.get("devices")
        models = data.get("models")
        errors = data.get("errors")
        return cls(
            pid=pid,
            argv=tuple(a for a in argv if isinstance(a, str)) if isinstance(argv, list) else (),
            python=_str(data.get("python")), torch=_str(data.get("torch")),
            torch_status=_str(data.get("torch_status")) or (
                "loaded" if _str(data.get("torch")) else "torch not loaded"),
            cuda_initialized=_bool(data.get("cuda_initialized")),
            allocator_backend=_str(data.get("allocator_backend")),
            devices=tuple(d for d in (DeviceMemory.from_json(x) for x in devices
                                      if isinstance(x, dict)) if d is not None)
            if isinstance(devices, list) else (),
            models=tuple(m for m in (ModelInfo.from_json(x) for x in models
                                     if isinstance(x, dict)) if m is not None)
            if isinstance(models, list) else (),
            oom_events=_int(data.get("oom_events")),
            errors=(tuple(e for e in errors if isinstance(e, str))
                    if isinstance(errors, list) else ()),
            events=_events(data.get("events")),
            idle_unload_s=_float((data.get("policy") or {}).get("idle_unload_s"))
            if isinstance(data.get("policy"), dict) else None,
            received_at=received_at, round_trip_s=round_trip_s,
            ooms=captures(data.get("ooms")), steps=StepMemory.from_json(data.get("steps")),
            managed_by=_str(data.get("managed_by")) or None)


@dataclass(frozen=True, slots=True)
class FreeCacheResult:
    """Outcome of ``free_cache`` for one process (bytes)."""

    pid: int
    ok: bool
    reserved_before: int | None = None
    reserved_after: int | None = None
    freed: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ok": self.ok, "reserved_before": self.reserved_before,
                "reserved_after": self.reserved_after, "freed": self.freed, "error": self.error}


@dataclass(frozen=True, slots=True)
class VramBreakdown:
    """Where one process's VRAM on one GPU goes, from NVML and its agent (bytes).

    ``context`` is everything NVML counts that the caching allocator does not
    hold: the CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers, other
    libraries.  None where a figure is unknown.
    """

    nvml_used: int | None
    context: int | None  # NVML used − reserved
    cache: int | None  # reserved − allocated: what free-cache can return
    tensors: int | None  # allocated
    parameters: int | None  # the part of ``tensors`` that is model parameters

    @classmethod
    def of(cls, nvml_used: int | None, device: DeviceMemory | None,
           parameters: int | None) -> VramBreakdown:
        reserved = device.reserved if device else None
        allocated = device.allocated if device else None
        context = None
        if nvml_used is not None and reserved is not None:
            context = max(0, nvml_used - reserved)
        return cls(nvml_used, context, device.cache if device else None, allocated,
                   None if allocated is None else min(parameters or 0, allocated))
