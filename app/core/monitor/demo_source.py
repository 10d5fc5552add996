"""Simulated GPUs with scripted, realistic processes.

A product feature, not a test double: ``--demo`` and the "Show demo" button run
it through exactly the same collector, history and UI as NVML.  Every value is
a pure function of (seed, elapsed time), so two runs with the same seed and the
same clock readings produce the same samples.

Per-tick work is vectorised with numpy because the benchmark scenario is
8 GPUs x 64 processes at 4 Hz.
"""

from __future__ import annotations

import getpass
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample
from app.core.monitor.source import GpuSource

GiB = 1024**3
MiB = 1024**2

# Memory shapes over a process's own lifetime.
CONSTANT, SAWTOOTH, LEAK, RAMP = range(4)

#: Seconds the driver keeps an exited process's memory before releasing it:
#: for that long the memory still counts as used but no process lists it.
RELEASE_S = 1.25


@dataclass(frozen=True, slots=True)
class DemoGpu:
    name: str
    memory_total: int  # bytes
    power_limit: float  # watts
    memory_reserved: int = 0  # bytes held by the driver (as NVML v2 reports)
    # Used memory no listed process holds (what the UI shows as "unattributed"):
    overhead: int = 0  # bytes of the driver's own allocations, always there
    context_overhead: int = 0  # bytes per listed process (page tables, channels)


@dataclass(frozen=True, slots=True)
class DemoProcess:
    """One scripted process; ``lifetime_s`` None means it never exits."""

    gpu: int
    name: str
    command: str
    user: str | None  # None = the current user
    shape: int
    base: float  # bytes
    amp: float = 0.0  # bytes (sawtooth height)
    period_s: float = 60.0  # sawtooth period or ramp duration
    leak_rate: float = 0.0  # bytes per second
    sm: float = 0.0  # typical SM %
    sm_jitter: float = 3.0
    start_s: float = 0.0  # first start, seconds after the demo opened
    lifetime_s: float | None = None
    gap_s: float = 0.0  # absence between two lives (a restart gets a new pid); inf: never back
    kind: str = "compute"
    cpu: float = 5.0  # typical CPU %
    rss: float = 2 * GiB  # typical host RSS in bytes
    pid: int = 0
    container: Container | None = None
    # A leak that ends in CUDA out of memory: this many seconds into each life the
    # process asks for ``oom_request`` bytes more than the card has free and its
    # figure stops growing (its simulated agent captures the OOM).
    oom_at_s: float | None = None
    oom_request: float = 0.0  # bytes


# A desktop card driving the display (the driver's allocations include the
# display's), and a data-centre card.
DEFAULT_GPUS = (
    DemoGpu("NVIDIA GeForce RTX 4090 (demo)", 24 * GiB, 450.0, 431 * MiB, 243 * MiB, 6 * MiB),
    DemoGpu("NVIDIA A100-SXM4-80GB (demo)", 80 * GiB, 400.0, 546 * MiB, 187 * MiB, 5 * MiB),
)

# The LLM server runs in a named docker container; alice's eval job in her own
# rootless podman, whose container names this user cannot read (id only).
VLLM_CONTAINER = Container(
    "docker", "f61cdf0a332ff73600f9c2a871a2c5e664de15377d79c43b2ed583f841207518", "vllm-llama3")
EVAL_CONTAINER = Container(
    "podman", "de9b9a136ccecd78d29bc7a38afad56a9aaed2022f8319052eb162798a711c55")

DEFAULT_PROCESSES = (
    DemoProcess(0, "Xorg", "/usr/lib/xorg/Xorg vt2 -displayfd 3", "root", CONSTANT,
                412 * MiB, sm=2, sm_jitter=1, kind="graphics", cpu=1.5, rss=180 * MiB, pid=1843),
    DemoProcess(0, "python", "python train.py --config configs/resnet50.yaml --bs 256", None,
                SAWTOOTH, 12.5 * GiB, amp=5.5 * GiB, period_s=45, sm=93, sm_jitter=5,
                cpu=104, rss=9.1 * GiB, pid=20417),
    DemoProcess(0, "python", "python -m ipykernel_launcher -f kernel-3f2a.json", None,
                CONSTANT, 4.6 * GiB, sm=0, sm_jitter=0, cpu=0.3, rss=5.2 * GiB, pid=18822),
    DemoProcess(1, "python", "python -m vllm.entrypoints.openai.api_server --model llama-3-8b",
                "svc-llm", RAMP, 61 * GiB, period_s=12, sm=45, sm_jitter=25, cpu=35,
                rss=14 * GiB, pid=9121, container=VLLM_CONTAINER),
    # Leaks 16 MiB/s of live tensors until, 555 s into its life, a big batch asks
    # for 1.5 GiB the card no longer has (eval.py is up then: its 75 s cycle
    # divides this one's 600 s); it crashes 3 s later and its supervisor restarts
    # it 42 s after that.
    DemoProcess(1, "python", "python serve_embeddings.py --port 8081", None, LEAK, 1.5 * GiB,
                leak_rate=16 * MiB, sm=8, sm_jitter=6, lifetime_s=558, gap_s=42, cpu=12,
                rss=3.3 * GiB, pid=23890, oom_at_s=555.0, oom_request=1.5 * GiB),
    DemoProcess(1, "python", "python eval.py --ckpt runs/exp42/step_12000.pt", "alice", RAMP,
                7.2 * GiB, period_s=4, sm=70, sm_jitter=15, start_s=8, lifetime_s=40, gap_s=35,
                cpu=98, rss=6.0 * GiB, pid=31002, container=EVAL_CONTAINER),
)


def scaled_scenario(gpu_count: int, processes_per_gpu: int, seed: int = 0
                    ) -> tuple[tuple[DemoGpu, ...], tuple[DemoProcess, ...]]:
    """A bigger machine for benchmarks: exactly ``processes_per_gpu`` process
    series per GPU, all running from the start.  Most run throughout; one in
    eight is a batch job that ends for good between 5 min and 1 h in, so
    processes go without adding series.  Slow leaks are saw-tooths with a
    30 min period (the leak is reclaimed), which keeps every GPU's processes
    within its memory however long the scenario runs."""
    rng = np.random.default_rng(seed)
    gpus = tuple(DemoGpu(f"NVIDIA H100 80GB HBM3 (demo {i})", 80 * GiB, 700.0, 512 * MiB,
                         213 * MiB, 2 * MiB)
                 for i in range(gpu_count))
    procs = []
    share = 72 * GiB / processes_per_gpu
    for g in range(gpu_count):
        for j in range(processes_per_gpu):
            batch = j % 8 == 7
            shape = int(rng.integers(0, 3))  # CONSTANT, SAWTOOTH or a slow-leak saw-tooth
            slow_leak = shape == LEAK
            base = share * float(rng.uniform(0.3, 0.6))
            period_s = 1800.0 if slow_leak else float(rng.uniform(20, 90))
            sm = float(rng.uniform(0, 90))
            # A batch job ends where one started within the first 30 min and
            # run for 5-30 min would end: it was running when the demo began.
            ends_s = float(rng.uniform(0, 1800)) + float(rng.uniform(300, 1800)) \
                if batch else None
            procs.append(DemoProcess(
                g, "python", f"python worker.py --rank {g * processes_per_gpu + j}", None,
                SAWTOOTH if slow_leak else shape, base=base,
                amp=share * (0.25 if slow_leak else 0.3), period_s=period_s, sm=sm,
                lifetime_s=ends_s,
                gap_s=math.inf,  # a batch job that ends does not come back
                pid=100000 + g * 1000 + j * 10))
    return gpus, tuple(procs)


class DemoSource(GpuSource):
    name = "demo"
    wants_host_details = False

    def __init__(self, seed: int = 7, clock: Callable[[], float] = time.monotonic,
                 gpus: tuple[DemoGpu, ...] = DEFAULT_GPUS,
                 processes: tuple[DemoProcess, ...] = DEFAULT_PROCESSES,
                 started_at: float | None = None) -> None:
        """``started_at``: the wall-clock time (epoch seconds) of the demo's
        start; None: when it opens (a replay puts its moment at now)."""
        self.seed = seed
        self.clock = clock
        self._started_at = started_at
        self.gpus = gpus
        self.processes = processes
        self._opened_at: float | None = None
        self._epoch = 0.0  # wall-clock time of open, for create_time
        user = _current_user()
        # Grouped by GPU so each GPU's processes are one slice of the arrays.
        p = processes = tuple(sorted(processes, key=lambda x: x.gpu))
        self.processes = processes
        self._gpu_of = np.array([x.gpu for x in p], dtype=np.int64)
        self._shape = np.array([x.shape for x in p], dtype=np.int64)
        self._base = np.array([x.base for x in p])
        self._amp = np.array([x.amp for x in p])
        self._period = np.array([x.period_s for x in p])
        self._leak = np.array([x.leak_rate for x in p])
        self._leak_stop = np.array([math.inf if x.oom_at_s is None else x.oom_at_s for x in p])
        self._sm = np.array([x.sm for x in p])
        self._sm_jitter = np.array([x.sm_jitter for x in p])
        self._start = np.array([x.start_s for x in p])
        self._life = np.array([math.inf if x.lifetime_s is None else x.lifetime_s for x in p])
        self._cycle = np.array([math.inf if x.lifetime_s is None else x.lifetime_s + x.gap_s
                                for x in p])
        self._cpu = np.array([x.cpu for x in p])
        self._rss_int = np.array([x.rss for x in p], dtype=np.int64)
        self._pid = np.array([x.pid or 40000 + 17 * i for i, x in enumerate(p)], dtype=np.int64)
        # A restart's pid: first pid + lives * stride.  A stride wider than the
        # spread of first pids keeps every (pid, life) distinct, so a restarted
        # process never shares a pid with another scripted process.
        spread = int(self._pid.max() - self._pid.min()) if len(p) else 0
        self._pid_stride = max(7, spread + 1)
        self._static = [(x.kind, x.name, x.user or user, x.command, x.container) for x in p]
        # Simulated agent actions (DemoAgents): a saw-tooth's tooth restarted
        # at ``_phase`` (its cache released), or ``_released`` bytes given back
        # for the rest of life ``_released_life``.
        self._phase = np.zeros(len(p))
        self._released = np.zeros(len(p))
        self._released_life = np.full(len(p), -1.0)
        # Model weights unloaded off the GPU (DemoAgents.unload): ``_offloaded``
        # bytes leave the process's figure for the rest of life ``_offloaded_life``.
        self._offloaded = np.zeros(len(p))
        self._offloaded_life = np.full(len(p), -1.0)
        self._watched = np.zeros(0, dtype=np.int64)
        #: Called with the elapsed time at the start of every ``read`` (DemoAgents
        #: simulates its agents' scripted model use there).
        self.before_read: Callable[[float], None] | None = None
        #: pid -> WatchedState of the watched processes present at the last read
        self.watched_state: dict[int, WatchedState] = {}
        #: Each GPU's free bytes at the last read (what cudaMemGetInfo would say).
        self.free_bytes: list[int] = []

    def open(self, elapsed: float = 0.0) -> None:
        """Start the script, ``elapsed`` seconds in."""
        self._opened_at = self.clock() - elapsed
        self._epoch = (time.time() - elapsed) if self._started_at is None else self._started_at

    def driver_version(self) -> str | None:
        return "demo"

    def now(self) -> float:
        """The simulated wall clock (epoch seconds): the real one when the demo
        runs in real time, ahead of it when a test or ``doctor --demo`` runs it
        faster."""
        elapsed = self.elapsed()  # opens the demo first if need be
        return self._epoch + elapsed

    def wall(self, elapsed: float) -> float:
        """The simulated wall clock at ``elapsed`` seconds into the demo."""
        return self._epoch + elapsed

    def elapsed(self) -> float:
        if self._opened_at is None:
            self.open()
        return self.clock() - self._opened_at  # type: ignore[operator]

    def read(self) -> tuple[GpuSample, ...]:
        t = self.elapsed()
        if self.before_read is not None:
            self.before_read(t)
        tick = int(t * 4)
        rng = np.random.default_rng([self.seed, tick])
        n = len(self.processes)
        since_start = t - self._start
        with np.errstate(invalid="ignore"):
            cycles = np.where(np.isinf(self._cycle), 0.0, np.floor(since_start / self._cycle))
            local = since_start - np.where(np.isinf(self._cycle), 0.0, cycles * self._cycle)
        present = (since_start >= 0) & (local < self._life)
        # Exited within RELEASE_S: its memory is still in use, listed by no one.
        with np.errstate(invalid="ignore"):
            lingering = ((since_start >= 0) & (local >= self._life)
                         & (local - self._life < RELEASE_S))
        noise = rng.standard_normal((3, n))

        # An exited process's unreleased memory stays what it was at the exit.
        at = np.minimum(local, self._life)
        mem = self._base.copy()
        saw = self._shape == SAWTOOTH
        mem[saw] += self._amp[saw] * np.mod((at[saw] - self._phase[saw]) / self._period[saw], 1.0)
        leak = self._shape == LEAK
        mem[leak] += self._leak[leak] * np.minimum(at[leak], self._leak_stop[leak])
        ramp = self._shape == RAMP
        mem[ramp] *= np.clip(at[ramp] / self._period[ramp], 0.02, 1.0)
        mem += noise[0] * 2 * MiB * ((self._shape != CONSTANT) & present)
        released = np.where(cycles == self._released_life, self._released, 0.0)
        mem -= released
        offloaded = np.where(cycles == self._offloaded_life, self._offloaded, 0.0)
        mem -= offloaded
        mem = np.maximum(mem, 64 * MiB)
        mem = np.round(mem / MiB) * MiB  # drivers report whole MiB

        # Notebook-like processes (sm 0) wake up briefly now and then.
        burst = (self._sm == 0) & (np.mod(local + 60.0, 90.0) < 3.0)
        sm = np.clip(self._sm + noise[1] * self._sm_jitter + burst * 60.0, 0, 100)
        cpu = np.clip(self._cpu * (1 + 0.08 * noise[2]), 0, None)
        cycle_s = np.where(np.isinf(self._cycle), 0, self._cycle)
        create = self._epoch + self._start + cycles * cycle_s
        pid = self._pid + cycles.astype(np.int64) * self._pid_stride

        # Build the samples in one pass: tuple.__new__ skips NamedTuple's
        # keyword handling, and processes are stored grouped by GPU.
        idx = np.flatnonzero(present)
        static = self._static
        new = tuple.__new__
        simulated = HostStatus.SIMULATED
        built = [
            new(ProcessSample, (pid_i, mem_i, sm_i, static[i][0], static[i][1], static[i][2],
                                static[i][3], cpu_i, rss_i, created, simulated, static[i][4]))
            for i, pid_i, mem_i, sm_i, cpu_i, rss_i, created in zip(
                idx.tolist(), pid[idx].tolist(), mem[idx].astype(np.int64).tolist(),
                np.round(sm[idx]).tolist(), np.round(cpu[idx], 1).tolist(),
                self._rss_int[idx].tolist(), np.round(create[idx], 3).tolist())
        ]
        gpu_count = len(self.gpus)
        counts = np.bincount(self._gpu_of[idx], minlength=gpu_count)
        mem_sum = np.bincount(self._gpu_of[idx], weights=mem[idx], minlength=gpu_count)
        sm_sum = np.bincount(self._gpu_of[idx], weights=np.round(sm[idx]), minlength=gpu_count)
        gone = np.flatnonzero(lingering)
        unreleased = np.bincount(self._gpu_of[gone], weights=mem[gone], minlength=gpu_count)
        bounds = np.concatenate(([0], np.cumsum(counts))).tolist()

        if len(self._watched):
            self.watched_state = {
                int(pid[i]): WatchedState(int(i), int(self._gpu_of[i]), int(mem[i]),
                                          float(released[i]), t, tick, float(offloaded[i]),
                                          float(local[i]))
                for i in self._watched.tolist() if present[i]}

        samples = []
        free: list[int] = []
        for g, spec in enumerate(self.gpus):
            procs = tuple(built[bounds[g]:bounds[g + 1]])
            unlisted = spec.overhead + spec.context_overhead * int(counts[g]) + int(unreleased[g])
            used = min(unlisted + int(mem_sum[g]), spec.memory_total - spec.memory_reserved)
            util = min(100.0, float(sm_sum[g]))
            free.append(spec.memory_total - spec.memory_reserved - used)
            samples.append(GpuSample(
                index=g, name=spec.name, uuid=f"GPU-demo{self.seed:04d}-{g:04d}",
                memory_total=spec.memory_total, memory_used=used,
                memory_free=spec.memory_total - spec.memory_reserved - used,
                memory_reserved=spec.memory_reserved,
                utilization_gpu=round(util), utilization_memory=round(util * 0.6),
                temperature=round(34 + 0.45 * util),
                power_draw=round(spec.power_limit * (0.08 + 0.8 * util / 100), 1),
                power_limit=spec.power_limit, processes=procs))
        self.free_bytes = free
        return tuple(samples)


    # -- simulated agent actions (app.core.agents.demo)
    def watch(self, indices: list[int]) -> None:
        """Keep ``watched_state`` for these process indices (into ``processes``)."""
        self._watched = np.array(sorted(set(indices)), dtype=np.int64)

    def life(self, index: int) -> int:
        """Which life of process ``index`` is current (0 for one that never restarts)."""
        t = self.elapsed()
        start, cycle = float(self._start[index]), float(self._cycle[index])
        return 0 if math.isinf(cycle) else int(math.floor((t - start) / cycle))

    def set_offloaded(self, index: int, nbytes: int) -> None:
        """Process ``index`` now holds ``nbytes`` fewer bytes of model weights on
        its GPU than its script says (unloaded models), for the rest of its life."""
        self._offloaded_life[index] = self.life(index)
        self._offloaded[index] = max(0, int(nbytes)) // MiB * MiB

    def regrow(self, index: int) -> None:
        """Process ``index``'s released cache fills up again (it ran a big forward)."""
        self._released[index] = 0.0

    def release(self, index: int, nbytes: int) -> None:
        """Process ``index`` gives ``nbytes`` of cached memory back to the driver now.

        A saw-tooth process (a training job whose cache grows each epoch)
        restarts its tooth, so the cache regrows; any other keeps the release
        for the rest of its current life.
        """
        t = self.elapsed()
        start, cycle = float(self._start[index]), float(self._cycle[index])
        life = 0.0 if math.isinf(cycle) else math.floor((t - start) / cycle)
        if self._shape[index] == SAWTOOTH:
            local = t - start - (0.0 if math.isinf(cycle) else life * cycle)
            self._phase[index] = local
            return
        if self._released_life[index] != life:
            self._released_life[index] = life
            self._released[index] = 0.0
        self._released[index] += max(0, int(nbytes)) // MiB * MiB


def demo_source(size: tuple[int, int] | None = None, seed: int = 7,
                clock: Callable[[], float] = time.monotonic,
                started_at: float | None = None) -> DemoSource:
    """What ``--demo`` runs: the scripted workstation, or for ``size`` = (GPUs,
    processes per GPU) the scaled machine of :func:`scaled_scenario`, laid out
    as the benchmarks lay it out (its scripted processes have no agents)."""
    if size is None:
        return DemoSource(seed=seed, clock=clock, started_at=started_at)
    gpus, processes = scaled_scenario(*size)
    return DemoSource(seed=seed, clock=clock, gpus=gpus, processes=processes,
                      started_at=started_at)


@dataclass(frozen=True, slots=True)
class WatchedState:
    """A watched demo process at the last read (for its simulated agent)."""

    index: int  # into DemoSource.processes
    gpu: int
    memory: int  # bytes, the NVML per-process figure reported
    released: float  # bytes given back by free-cache during this life
    elapsed: float  # seconds since the demo opened
    tick: int
    offloaded: float = 0.0  # bytes of model weights unloaded off the GPU (DemoAgents)
    local: float = 0.0  # seconds into its current life


def _current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return "you"
