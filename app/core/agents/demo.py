"""Simulated agents for some demo processes (``--demo`` only).

Numbers follow the demo's NVML figure of each process, so the app's
breakdown adds up exactly as it would with a real agent::

    nvml_used = context + reserved,   reserved = allocated + cache,
    allocated >= parameter bytes on that GPU

``free_cache`` really gives the cache back in the demo (``DemoSource.release``):
the process's NVML figure drops by it; the training job's cache regrows.

The model manager is simulated too: ``unload`` takes a model's bytes out of
its process's NVML and allocator figures (``DemoSource.set_offloaded``) and
empties the cache, as the real agent does; the model comes back on its next
scripted use (reason "forward") or on ``reload``.  Scripted use: the training
job's ResNet (train mode, stepped by its optimizer: training evidence, so
refused without force and never auto-unloaded) and the eval job's BERT run
continuously, the embedding server answers a request every ~1.3 s, and the
notebook's StableDiffusion pipeline has been idle for hours (eligible for the
pressure policy) until its user comes back every 20 minutes to run it (text
encoder, then 4 s of UNet steps, then the VAE), which regrows its cache.
Moves take plausible times: ~10 GB/s to and from pinned host memory, ~2 GB/s
to and from disk.

As with real ``from_pretrained`` models, every simulated parameter requires
grad; that blocks nothing.  The simulated agents report what the real one
does, by the same rule (``_auto_blocker``): model ids ``m1``, ``m2``, ... per
process, ``first_seen``, ``idle_since`` (the last forward), the ResNet's
``training_evidence``, and an ``auto_unload_blocker`` that is the model's
unload blocker, else its training evidence, else "pinned", else "not on a
GPU".  So the notebook's pipeline is eligible because it is idle and shows no
training evidence.  As the real agent's, each model reports ``reloaded_at``,
and no automatic unload (the agent's idle timer, a "pressure" request) takes
a model reloaded less than ``protocol.RELOAD_GRACE_S`` ago.
"""

from __future__ import annotations

import collections
import math
import random
import threading
from dataclasses import dataclass, field

from app.agent import protocol
from app.core.agents import demo_diagnostics
from app.core.agents.demo_scenario import SPECS, AgentSpec, DemoModel
from app.core.agents.directory import AgentDirectory
from app.core.agents.event_log import ModelEventLog
from app.core.agents.oom import OomCapture
from app.core.agents.recording import RecordResult
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    DeviceMemory,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
    ModelInfo,
)
from app.core.monitor.demo_source import DemoSource, MiB, WatchedState

PYTHON = "3.11.9"
TORCH = "2.13.0+cu130"

#: Simulated transfer rates (bytes/s) and a fixed cost per move (s).
RATE = {"cpu": 10e9, "disk": 2e9}
MOVE_OVERHEAD_S = 0.015
EVENTS_KEPT = 64  # as the agent: a report carries the last 64 model events


@dataclass(slots=True)
class DemoModelState:
    state: str = "resident"
    offloaded_to: str | None = None
    offloaded_at: float = 0.0  # seconds into its process's life
    pinned: bool = False
    reloaded_at: float | None = None  # epoch seconds of its last reload (None: never)

    def just_reloaded(self, now: float) -> float | None:
        """Seconds since a reload less than RELOAD_GRACE_S ago (None: none that recent)."""
        if self.reloaded_at is None or now - self.reloaded_at >= protocol.RELOAD_GRACE_S:
            return None
        return max(0.0, now - self.reloaded_at)


@dataclass(slots=True)
class _ProcState:
    """The simulated agent's model manager state for one demo process (one life)."""

    pid: int
    index: int
    life: int
    models: list[DemoModelState]
    events: collections.deque = field(default_factory=lambda: collections.deque(maxlen=EVENTS_KEPT))
    seq: int = 0
    idle_unload_s: float | None = None
    local: float = 0.0  # seconds into its life when last simulated


def model_id(i: int) -> str:
    """The id of a process's ``i``-th model, as the real agent numbers them: m1, m2, ..."""
    return f"m{i + 1}"


def _auto_blocker(model: DemoModel, pinned: bool, on_gpu: bool) -> str | None:
    """Why the agent refuses an automatic unload (the real agent's rule)."""
    if model.unload_blocker:
        return model.unload_blocker
    if model.training_evidence:
        return model.training_evidence
    if pinned:
        return "pinned"
    if not on_gpu:
        return "not on a GPU"
    return None


def _first_seen(spec: AgentSpec, model: DemoModel) -> float:
    """Seconds into its process's life when its agent first saw ``model``."""
    return min(-spec.seen_before_s, _last_use(spec, model, 0.0))


def _last_use(spec: AgentSpec, model: DemoModel, local: float) -> float:
    """Seconds into its process's life of ``model``'s last forward at ``local``."""
    if spec.use_every_s is None:
        return local - (spec.idle_s or 0.0)
    period = spec.use_every_s
    runs = math.floor((local - model.use_offset_s) / period)
    if runs >= 1:
        return runs * period + model.use_offset_s
    return -(spec.idle_s or 0.0) + model.use_offset_s


class DemoAgents(AgentDirectory):
    def __init__(self, source: DemoSource) -> None:
        self.source = source
        self._lock = threading.RLock()
        self._specs: dict[int, AgentSpec] = {}
        for index, proc in enumerate(source.processes):
            for spec in SPECS:
                if spec.match in proc.command:
                    self._specs[index] = spec
                    break
        source.watch(list(self._specs))
        self._cache_tick: int | None = None
        self._cache: dict[int, AgentReport] = {}
        self._procs: dict[int, _ProcState] = {}
        self._ooms: dict[int, OomCapture] = {}  # by pid: the OOM its scripted life hit
        self._log = ModelEventLog()
        if self._specs:
            source.before_read = self._simulate

    # -- AgentDirectory
    def reports(self) -> dict[int, AgentReport]:
        with self._lock:
            states = self.source.watched_state
            tick = next(iter(states.values())).tick if states else None
            if tick is None or tick != self._cache_tick or len(states) != len(self._cache):
                for pid in [p for p in self._procs if p not in states]:
                    del self._procs[pid]  # exited: a restart is a new process
                for pid in [p for p in self._ooms if p not in states]:
                    del self._ooms[pid]
                for pid, st in states.items():
                    self._proc(pid, st)
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
            _, reserved_before, allocated_before, _ = self._memory(spec, state)
            self.source.release(state.index, reserved_before - allocated_before)
            self.source.read()
            after = self.source.watched_state.get(pid)
            if after is None:
                return FreeCacheResult(pid=pid, ok=False, error="the process exited")
            _, reserved_after, _, _ = self._memory(spec, after)
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

    # -- model manager
    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        to = to or "cpu"  # the agent's default for a GPU model
        if to not in RATE:
            return ModelActionResult(pid, model, False, error=f"unknown target {to!r}",
                                     code=protocol.BAD_PARAMS)
        with self._lock:
            found = self._find(pid, model)
            if isinstance(found, ModelActionResult):
                return found
            proc, st, i = found
            refusal = self._refusal(proc, st, i, force, reason)
            if refusal:
                return ModelActionResult(pid, model, False, error=refusal, code=protocol.REFUSED)
            event = self._unload(proc, st, i, to, reason, st.local)
            self._settle()
        return ModelActionResult(pid, model, True, event=event)

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        with self._lock:
            found = self._find(pid, model)
            if isinstance(found, ModelActionResult):
                return found
            proc, st, i = found
            if proc.models[i].state != "offloaded":
                return ModelActionResult(pid, model, False, code=protocol.REFUSED,
                                         error=protocol.not_offloaded(proc.models[i].state))
            event = self._reload(proc, i, "manual")
            self._settle()
        return ModelActionResult(pid, model, True, event=event)

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0
            ) -> ModelActionResult:
        with self._lock:
            found = self._find(pid, model, read=False)
            if isinstance(found, ModelActionResult):
                return found
            proc, _, i = found
            proc.models[i].pinned = bool(pinned)
            self._cache_tick = None
        return ModelActionResult(pid, model, True, pinned=bool(pinned))

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        problem = None if seconds is None else protocol.idle_unload_problem(seconds)
        if problem is not None:
            return {"ok": False, "idle_unload_s": None, "code": protocol.BAD_PARAMS,
                    "error": f"idle_unload_s {problem}, or null (off)"}
        with self._lock:
            st = self.source.watched_state.get(pid)
            if st is None:
                return {"ok": False, "idle_unload_s": None, "error": "no agent in that process",
                        "code": protocol.NOT_FOUND}
            self._proc(pid, st).idle_unload_s = None if seconds is None else float(seconds)
            self._cache_tick = None
        return {"ok": True, "idle_unload_s": None if seconds is None else float(seconds),
                "error": None, "code": None}

    def events_since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        return self._log.since(cursor)

    def note_reply(self, pid: int, event: ModelEvent) -> None:
        """Every simulated event is logged as it happens."""

    # -- internals: the simulated agents' model managers
    def _proc(self, pid: int, st: WatchedState) -> _ProcState:
        proc = self._procs.get(pid)
        if proc is None:
            spec = self._specs[st.index]
            proc = _ProcState(pid, st.index, self.source.life(st.index),
                              [DemoModelState() for _ in spec.models], local=st.local)
            self._procs[pid] = proc
        return proc

    def _find(self, pid: int, model: str, read: bool = True
              ) -> tuple[_ProcState, WatchedState, int] | ModelActionResult:
        if read:
            self.source.read()  # the figures now (and any scripted use since the last tick)
        st = self.source.watched_state.get(pid)
        if st is None:
            return ModelActionResult(pid, model, False, error="no agent in that process",
                                     code=protocol.NOT_FOUND)
        spec = self._specs[st.index]
        for i in range(len(spec.models)):
            if model_id(i) == model:
                return self._proc(pid, st), st, i
        return ModelActionResult(pid, model, False, error=f"no model {model!r} in process {pid}",
                                 code=protocol.NOT_FOUND)

    def _settle(self) -> None:
        self.source.read()  # watched_state (and so reports) show the move at once
        self._cache_tick = None

    def _blocker(self, proc: _ProcState | None, spec: AgentSpec, i: int,
                 st: WatchedState) -> str | None:
        pinned = proc is not None and proc.models[i].pinned
        return _auto_blocker(spec.models[i], pinned, on_gpu=self._memory(spec, st)[3])

    def _refusal(self, proc: _ProcState, st: WatchedState, i: int, force: bool,
                 reason: str) -> str | None:
        spec = self._specs[st.index]
        ms = proc.models[i]
        if ms.state != "resident":
            return f"already {ms.state}" + (f" to {ms.offloaded_to}" if ms.offloaded_to else "")
        if not self._memory(spec, st)[3]:
            return "still loading: its weights are not on the GPU yet"
        m = spec.models[i]
        if m.unload_blocker:
            return m.unload_blocker
        if m.training_evidence and (reason != "manual" or not force):
            return f"training evidence: {m.training_evidence}"
        if reason != "manual" and ms.pinned:
            return "pinned"
        ago = ms.just_reloaded(self.source.now())
        if reason != "manual" and ago is not None:
            return f"reloaded {ago:.0f} s ago (< {protocol.RELOAD_GRACE_S:g} s)"
        return None

    def _offloaded_bytes(self, proc: _ProcState) -> int:
        spec = self._specs[proc.index]
        return sum(m.param_bytes + m.buffer_bytes
                   for m, ms in zip(spec.models, proc.models) if ms.state == "offloaded")

    def _event(self, proc: _ProcState, i: int, **fields) -> ModelEvent:  # type: ignore[no-untyped-def]
        proc.seq += 1
        m = self._specs[proc.index].models[i]
        event = ModelEvent(seq=proc.seq, time=self.source.now(), model=model_id(i), name=m.name,
                           **fields)
        proc.events.append(event)
        self._log.add(proc.pid, (event,))
        self._cache_tick = None
        return event

    def _unload(self, proc: _ProcState, st: WatchedState, i: int, to: str, reason: str,
                local: float) -> ModelEvent:
        """Move model ``i`` off the GPU and empty the cache (no read: callable from the hook)."""
        spec = self._specs[proc.index]
        m = spec.models[i]
        nbytes = m.param_bytes + m.buffer_bytes
        _, reserved, allocated, _ = self._memory(spec, st)
        cache = max(0, reserved - allocated)
        ms = proc.models[i]
        ms.state, ms.offloaded_to, ms.offloaded_at = "offloaded", to, local
        self.source.set_offloaded(proc.index, self._offloaded_bytes(proc))
        self.source.release(proc.index, cache)
        released = nbytes // MiB * MiB + cache // MiB * MiB
        return self._event(proc, i, action="unload", state="offloaded", target=to,
                           bytes_moved=nbytes, bytes_released=released,
                           seconds=round(MOVE_OVERHEAD_S + nbytes / RATE[to], 4), reason=reason)

    def _reload(self, proc: _ProcState, i: int, reason: str) -> ModelEvent:
        m = self._specs[proc.index].models[i]
        nbytes = m.param_bytes + m.buffer_bytes
        ms = proc.models[i]
        source_of = ms.offloaded_to or "cpu"
        ms.state, ms.offloaded_to, ms.reloaded_at = "resident", None, self.source.now()
        self.source.set_offloaded(proc.index, self._offloaded_bytes(proc))
        return self._event(proc, i, action="reload", state="resident", target=source_of,
                           bytes_moved=nbytes, bytes_released=None,
                           seconds=round(MOVE_OVERHEAD_S + nbytes / RATE[source_of], 4),
                           reason=reason)

    def _simulate(self, t: float) -> None:
        """DemoSource.before_read: scripted forwards reload offloaded models (and
        refill the notebook's cache); the agents' own idle TTL unloads."""
        with self._lock:
            for pid, st in list(self.source.watched_state.items()):
                proc = self._procs.get(pid)
                if proc is None or self.source.life(st.index) != proc.life:
                    continue
                spec = self._specs[st.index]
                local = st.local + (t - st.elapsed)
                previous, proc.local = proc.local, local
                if spec.use_every_s is not None:
                    # once a run of the pipeline is over, its activations have refilled the cache
                    end = max(m.use_offset_s for m in spec.models) + 0.1
                    if math.floor((local - end) / spec.use_every_s) > \
                            math.floor((previous - end) / spec.use_every_s):
                        self.source.regrow(st.index)
                for i, (m, ms) in enumerate(zip(spec.models, proc.models)):
                    last = _last_use(spec, m, local)
                    if ms.state == "offloaded" and last > ms.offloaded_at:
                        self._reload(proc, i, "forward")
                    elif (ms.state == "resident" and proc.idle_unload_s is not None
                          and self._blocker(proc, spec, i, st) is None
                          and ms.just_reloaded(self.source.wall(t)) is None
                          and local - last >= proc.idle_unload_s):
                        self._unload(proc, st, i, "cpu", "idle", local)

    @staticmethod
    def _memory(spec: AgentSpec, st: WatchedState) -> tuple[int, int, int, bool]:
        """(context, reserved, allocated, weights loaded) consistent with the NVML figure."""
        context = min(spec.context, st.memory)
        reserved = st.memory - context
        offloaded = int(st.offloaded)
        natural = reserved + int(st.released) + offloaded
        allocated = spec.alloc_fixed + int(spec.alloc_frac * max(0, natural - spec.alloc_fixed))
        # still loading (eval ramp) or noise at a tooth's foot:
        allocated = min(allocated, reserved + offloaded)
        loaded = allocated >= spec.alloc_fixed  # weights on the GPU yet?
        return context, reserved, max(0, allocated - offloaded), loaded

    def _report(self, pid: int, st: WatchedState) -> AgentReport:
        spec = self._specs[st.index]
        proc = self.source.processes[st.index]
        state = self._procs.get(pid)
        _, reserved, allocated, loaded = self._memory(spec, st)
        now = self.source.now()
        home = f"cuda:{st.gpu}"
        rng = random.Random(pid * 104729 + st.tick)
        models = []
        for i, m in enumerate(spec.models):
            ms = state.models[i] if state is not None else DemoModelState()
            if ms.state == "offloaded":
                device = ms.offloaded_to or "cpu"
                by_device = {"cpu": {"params": m.param_bytes, "buffers": m.buffer_bytes}} \
                    if device == "cpu" else {}
            else:
                device = home if loaded else "cpu"
                by_device = {device: {"params": m.param_bytes, "buffers": m.buffer_bytes}}
            idle = st.local - _last_use(spec, m, st.local)
            if spec.idle_s is None and spec.use_every_s is None:
                idle = rng.uniform(0.0, 0.3)
            models.append(ModelInfo(
                id=model_id(i), name=m.name, class_name=m.class_name, params=m.params,
                param_bytes=m.param_bytes, buffer_bytes=m.buffer_bytes, device=device,
                dtype=m.dtype, training=m.training, last_used=now - idle,
                requires_grad=True, group=m.group, bytes_by_device=by_device,
                state=ms.state, offloaded_to=ms.offloaded_to, pinned=ms.pinned,
                auto_unload_blocker=_auto_blocker(m, ms.pinned, loaded), home_device=home,
                first_seen=min(now - idle, now - (st.local - _first_seen(spec, m))),
                idle_since=now - idle, training_evidence=m.training_evidence,
                unload_blocker=m.unload_blocker, placeholder_bytes=0,
                reloaded_at=ms.reloaded_at, config=m.config, input_shape=m.input_shape))
        peak_reserved = reserved if spec.match != "train.py" else max(
            reserved, int(self.source.processes[st.index].base + proc.amp) - spec.context)
        peak_extra = 512 * MiB if spec.match == "train.py" else 0  # the backward pass's peak
        oom = self._oom(pid, st, reserved, allocated)
        dev = DeviceMemory(index=st.gpu, allocated=allocated, reserved=reserved,
                           peak_allocated=allocated + peak_extra,
                           peak_reserved=peak_reserved, active=allocated,
                           inactive_split=min(reserved - allocated, 37 * MiB)
                           if reserved > allocated else 0,
                           requested=allocated, num_alloc_retries=1 if oom else 0,
                           num_ooms=1 if oom else 0, uuid=self._gpu_uuid(st.gpu))
        steps = demo_diagnostics.step_memory(st.local, now, st.gpu, allocated) \
            if any(m.training for m in spec.models) else None
        return AgentReport(pid=pid, argv=tuple(proc.command.split()), python=PYTHON,
                           torch=TORCH, torch_status="loaded", cuda_initialized=True,
                           allocator_backend="native", devices=(dev,), models=tuple(models),
                           oom_events=1 if oom else 0,
                           events=tuple(state.events) if state else (),
                           idle_unload_s=state.idle_unload_s if state else None,
                           received_at=now, round_trip_s=0.0004,
                           ooms=(oom,) if oom else (), steps=steps)

    def _oom(self, pid: int, st: WatchedState, reserved: int, allocated: int
             ) -> OomCapture | None:
        """The process's scripted OOM once its life has reached it (captured once)."""
        proc = self.source.processes[st.index]
        if proc.oom_at_s is None or st.local < proc.oom_at_s:
            return None
        found = self._ooms.get(pid)
        if found is None:
            gpu = self.source.gpus[st.gpu]
            free = self.source.free_bytes[st.gpu] if len(self.source.free_bytes) > st.gpu \
                else 0
            # its instant on the demo's clock, as the snapshots are stamped (never
            # rounded: the post-mortem reads the snapshot taken at or before it)
            when = self.source.wall(st.elapsed - (st.local - proc.oom_at_s))
            found = self._ooms[pid] = demo_diagnostics.oom_capture(
                proc, st.gpu, self._gpu_uuid(st.gpu), when, free,
                gpu.memory_total, allocated, reserved)
        return found

    def record(self, pid: int, seconds: float, max_entries: int | None = None,
               timeout_s: float | None = None) -> RecordResult:
        """A simulated recording (no file is written: the demo has no CUDA)."""
        if not seconds > 0:
            return RecordResult(pid, False, error="seconds must be > 0", code=protocol.BAD_PARAMS)
        with self._lock:
            st = self.source.watched_state.get(pid)
            if st is None:
                return RecordResult(pid, False, error="no agent in that process",
                                    code=protocol.NOT_FOUND)
            command = self.source.processes[st.index].command
        return demo_diagnostics.record_result(pid, command, float(seconds), max_entries, st.gpu)
