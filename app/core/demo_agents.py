"""Simulated agents for some demo processes (``--demo`` only).

Numbers follow the demo's NVML figure of each process, so the app's
breakdown adds up exactly as it would with a real agent::

    nvml_used = context + reserved,   reserved = allocated + cache,
    allocated >= parameter bytes on that GPU

``free_cache`` really gives the cache back in the demo (``DemoSource.release``):
the process's NVML figure drops by it; the training job's cache regrows.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from app.core.agent_types import (AgentEntry, AgentReport, DeviceMemory, FreeCacheResult,
                                  ModelInfo)
from app.core.agents import AgentDirectory
from app.core.demo_source import MiB, DemoSource, WatchedState

PYTHON = "3.11.9"
TORCH = "2.13.0+cu130"


@dataclass(frozen=True, slots=True)
class _Model:
    name: str
    class_name: str
    params: int
    bytes_per_param: int
    buffer_bytes: int
    training: bool
    group: str | None = None

    @property
    def param_bytes(self) -> int:
        return self.params * self.bytes_per_param

    @property
    def dtype(self) -> str:
        return {2: "float16", 4: "float32"}[self.bytes_per_param]


@dataclass(frozen=True, slots=True)
class _AgentSpec:
    match: str  # a fragment of the demo process's command line
    context: int  # bytes NVML counts outside the caching allocator
    alloc_fixed: int  # allocated = alloc_fixed + alloc_frac * (natural reserved - alloc_fixed)
    alloc_frac: float
    models: tuple[_Model, ...]
    idle_s: float | None  # seconds since the last forward (None: in use now)
    gc_objects: int = 0


SPECS = (
    _AgentSpec(  # cache saw-tooths over each 45 s period; live tensors stay put
        "train.py", 528 * MiB, int(12.5 * 1024) * MiB - 528 * MiB, 0.0,
        (_Model("model", "torchvision.models.resnet.ResNet", 25_557_032, 4, 212_904,
                training=True),),
        idle_s=None, gc_objects=412),
    _AgentSpec(  # an idle notebook holding a fp16 pipeline and a sizeable cache
        "ipykernel", 472 * MiB, 2100 * MiB, 0.0,
        (_Model("pipe.unet", "diffusers.models.unets.unet_2d_condition.UNet2DConditionModel", 859_520_964, 2, 0, False,
                "StableDiffusionPipeline"),
         _Model("pipe.text_encoder", "transformers.models.clip.modeling_clip.CLIPTextModel", 123_060_480, 2, 616, False,
                "StableDiffusionPipeline"),
         _Model("pipe.vae", "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL", 83_653_863, 2, 0, False,
                "StableDiffusionPipeline")),
        idle_s=2 * 3600 + 17 * 60, gc_objects=9_031),
    _AgentSpec(
        "eval.py", 506 * MiB, 437_928_960 + 8192, 0.55,
        (_Model("bert-base-uncased",
                "transformers.models.bert.modeling_bert.BertForSequenceClassification",
                109_483_778, 4, 8192, training=False),),
        idle_s=None, gc_objects=57),
    _AgentSpec(
        "serve_embeddings.py", 458 * MiB, 90_852_864 + 8192, 0.85,
        (_Model("encoder", "transformers.models.bert.modeling_bert.BertModel", 22_713_216, 4,
                8192, training=False),),
        idle_s=1.3, gc_objects=3),
)


class DemoAgents(AgentDirectory):
    def __init__(self, source: DemoSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._specs: dict[int, _AgentSpec] = {}
        for index, proc in enumerate(source.processes):
            for spec in SPECS:
                if spec.match in proc.command:
                    self._specs[index] = spec
                    break
        source.watch(list(self._specs))
        self._cache_tick: int | None = None
        self._cache: dict[int, AgentReport] = {}

    # -- AgentDirectory
    def reports(self) -> dict[int, AgentReport]:
        with self._lock:
            states = self.source.watched_state
            tick = next(iter(states.values())).tick if states else None
            if tick is None or tick != self._cache_tick or len(states) != len(self._cache):
                self._cache = {pid: self._report(pid, st) for pid, st in states.items()}
                self._cache_tick = tick
            return dict(self._cache)

    def entries(self) -> list[AgentEntry]:
        out = []
        for pid, st in sorted(self.source.watched_state.items()):
            proc = self.source.processes[st.index]
            out.append(AgentEntry(pid=pid, create_time=None, address=f"demo:{pid}",
                                  transport="demo", argv=tuple(proc.command.split()),
                                  python=PYTHON, torch=TORCH, protocol=1,
                                  agent_version="demo"))
        return out

    def _gpu_uuid(self, gpu: int) -> str:
        """CUDA's spelling of the demo GPU's UUID (NVML's without "GPU-")."""
        return f"demo{self.source.seed:04d}-{gpu:04d}"

    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        with self._lock:
            self.source.read()  # the figures now, not at the last tick
            state = self.source.watched_state.get(pid)
            if state is None:
                return FreeCacheResult(pid=pid, ok=False, error="no agent in that process")
            spec = self._specs[state.index]
            _, reserved_before, allocated_before = self._memory(spec, state)
            self.source.release(state.index, reserved_before - allocated_before)
            self.source.read()
            after = self.source.watched_state.get(pid)
            if after is None:
                return FreeCacheResult(pid=pid, ok=False, error="the process exited")
            _, reserved_after, _ = self._memory(spec, after)
            self._cache_tick = None
        return FreeCacheResult(pid=pid, ok=True, reserved_before=reserved_before,
                               reserved_after=reserved_after,
                               freed=max(0, reserved_before - reserved_after))

    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        state = self.source.watched_state.get(pid)
        if state is None:
            return {"ok": False, "collected": None, "seconds": None,
                    "error": "no agent in that process"}
        spec = self._specs[state.index]
        rng = random.Random(pid * 7919 + state.tick)
        return {"ok": True, "collected": rng.randint(0, spec.gc_objects),
                "seconds": round(0.004 + rng.random() * 0.03, 4), "error": None}

    # -- internals
    @staticmethod
    def _memory(spec: _AgentSpec, st: WatchedState) -> tuple[int, int, int]:
        """(context, reserved, allocated) consistent with the NVML figure."""
        context = min(spec.context, st.memory)
        reserved = st.memory - context
        natural = reserved + int(st.released)
        allocated = spec.alloc_fixed + int(spec.alloc_frac * max(0, natural - spec.alloc_fixed))
        if allocated > reserved:  # still loading (eval ramp) or noise at a tooth's foot
            allocated = reserved
        return context, reserved, allocated

    def _report(self, pid: int, st: WatchedState) -> AgentReport:
        spec = self._specs[st.index]
        proc = self.source.processes[st.index]
        _, reserved, allocated = self._memory(spec, st)
        now = time.time()
        loaded = allocated >= spec.alloc_fixed  # weights on the GPU yet?
        device = f"cuda:{st.gpu}" if loaded else "cpu"
        rng = random.Random(pid * 104729 + st.tick)
        models = tuple(
            ModelInfo(id=f"{pid}:{i}", name=m.name, class_name=m.class_name, params=m.params,
                      param_bytes=m.param_bytes, buffer_bytes=m.buffer_bytes, device=device,
                      dtype=m.dtype, training=m.training,
                      last_used=now - (spec.idle_s if spec.idle_s is not None
                                       else rng.uniform(0.0, 0.3)),
                      requires_grad=m.training, group=m.group,
                      bytes_by_device={device: {"params": m.param_bytes,
                                                "buffers": m.buffer_bytes}})
            for i, m in enumerate(spec.models))
        peak_reserved = reserved if spec.match != "train.py" else max(
            reserved, int(self.source.processes[st.index].base + proc.amp) - spec.context)
        dev = DeviceMemory(index=st.gpu, allocated=allocated, reserved=reserved,
                           peak_allocated=allocated + (512 * MiB if spec.match == "train.py" else 0),
                           peak_reserved=peak_reserved, active=allocated,
                           inactive_split=min(reserved - allocated, 37 * MiB)
                           if reserved > allocated else 0,
                           requested=allocated, num_alloc_retries=0, num_ooms=0,
                           uuid=self._gpu_uuid(st.gpu))
        return AgentReport(pid=pid, argv=tuple(proc.command.split()), python=PYTHON,
                           torch=TORCH, torch_status="loaded", cuda_initialized=True,
                           allocator_backend="native", devices=(dev,), models=models,
                           oom_events=0, received_at=now, round_trip_s=0.0004)
