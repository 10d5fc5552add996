"""Immutable sample objects that travel from the sampler thread to the UI.

Units are in the names: ``*_bytes`` style is avoided in the public field names
to match the ``status --json`` contract, so every memory field here is in
**bytes**, utilisation in **percent (0-100)**, temperature in **°C**, power in
**watts**, times in **seconds**.  ``None`` always means *unknown* and must be
shown as "n/a", never as 0.

``ProcessSample`` is a NamedTuple rather than a frozen dataclass: a tick on a
big machine builds hundreds of them and a frozen dataclass costs ~5x more to
construct (1.5 µs vs 0.3 µs each).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class HostStatus(str, enum.Enum):
    """How much the host OS lets us see of a GPU process."""

    OK = "ok"
    ACCESS_DENIED = "access_denied"  # another user's process: some fields hidden
    NOT_VISIBLE = "not_visible"  # pid from another PID namespace (containers)
    EXITED = "exited"  # process ended between the NVML call and psutil
    SIMULATED = "simulated"  # demo source: details come from the script

    @property
    def label(self) -> str:
        return _HOST_STATUS_LABELS[self]


_HOST_STATUS_LABELS = {
    HostStatus.OK: "",
    HostStatus.ACCESS_DENIED: "access denied",
    HostStatus.NOT_VISIBLE: "pid not visible here",
    HostStatus.EXITED: "exited",
    HostStatus.SIMULATED: "",
}


@dataclass(frozen=True, slots=True)
class Container:
    """The container a process runs in, as its cgroup path names it."""

    runtime: str  # "docker", "podman", "containerd", "cri-o", "lxc"
    id: str  # container id as the runtime spells it (64 hex for OCI runtimes)
    name: str | None = None  # human name where a local, readable source gives it
    pod: str | None = None  # Kubernetes pod uid, for containers in a pod

    @property
    def short_id(self) -> str:
        """The 12-character id ``docker ps`` shows (names are kept whole)."""
        return self.id[:12] if all(c in "0123456789abcdef" for c in self.id) else self.id

    @property
    def label(self) -> str:
        """What the process table shows: "docker trainer", "podman 3f4e2a1b9c0d"."""
        runtime = f"{self.runtime} (k8s)" if self.pod else self.runtime
        return f"{runtime} {self.name or self.short_id}"


class ProcessSample(NamedTuple):
    """One process on one GPU at one instant."""

    pid: int
    gpu_memory: int | None  # bytes; None = not available (WDDM, no permission)
    sm_util: float | None = None  # percent of the GPU's SMs, None when unknown
    kind: str = "compute"  # "compute", "graphics" or "compute+graphics"
    # Host-side details (psutil or the demo script).
    name: str | None = None
    user: str | None = None
    command: str | None = None
    cpu_percent: float | None = None  # percent of one core, may exceed 100
    host_rss: int | None = None  # bytes
    create_time: float | None = None  # epoch seconds
    host_status: HostStatus = HostStatus.OK
    container: Container | None = None  # None: not in a container (or not visible)

    @property
    def key(self) -> tuple[int, float | None]:
        """Identity that survives pid reuse: (pid, create time)."""
        return (self.pid, self.create_time)


class DeviceState(str, enum.Enum):
    OK = "ok"
    LOST = "lost"  # GPU fell off the bus / NVML_ERROR_GPU_IS_LOST
    ERROR = "error"  # any other device-level failure; see ``GpuSample.message``


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG device) at one instant."""

    index: int  # NVML index; for MIG devices the parent's index
    name: str
    uuid: str | None
    memory_total: int | None  # bytes
    memory_used: int | None  # bytes, excluding driver-reserved memory (v2)
    memory_free: int | None  # bytes
    memory_reserved: int | None = None  # bytes held by driver/firmware (v2 only)
    utilization_gpu: float | None = None  # percent
    utilization_memory: float | None = None  # percent
    temperature: float | None = None  # °C
    power_draw: float | None = None  # watts
    power_limit: float | None = None  # watts
    processes: tuple[ProcessSample, ...] = ()
    state: DeviceState = DeviceState.OK
    message: str | None = None  # user-facing reason for a degraded state
    # Per-field reasons for n/a values, e.g. {"processes": "n/a (WDDM)"}.
    notes: dict[str, str] = field(default_factory=dict)
    mig_index: int | None = None  # set for MIG devices
    display_id: str = ""  # "0", "0/mig1": stable key for history and UI ("0@gpu1" remote)
    #: The remote host it is on ("" for this machine; app.core.monitor.hosts).
    host: str = ""

    def __post_init__(self) -> None:
        if not self.display_id:
            ident = str(self.index)
            if self.mig_index is not None:
                ident += f"/mig{self.mig_index}"
            object.__setattr__(self, "display_id", ident)

    @property
    def unattributed_memory(self) -> int | None:
        """Bytes in use that no listed process holds: other containers' or
        other namespaces' processes the driver does not list, memory of
        exited processes the driver has not yet released, and the driver's
        own allocations.  ``memory_used - sum(process memory)``, floored at 0
        (the process list is read a moment after the memory figure).
        None when either side is unknown: used memory, the process list
        (not supported, no permission, MIG parent) or any process's memory."""
        if self.state is not DeviceState.OK or self.memory_used is None:
            return None
        if "processes" in self.notes:
            return None
        held = 0
        for p in self.processes:
            if p.gpu_memory is None:
                return None
            held += p.gpu_memory
        return max(0, self.memory_used - held)

    @property
    def memory_fraction(self) -> float | None:
        """Used / total in 0..1, or None when either is unknown."""
        if self.memory_used is None or not self.memory_total:
            return None
        return self.memory_used / self.memory_total


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one sampler tick saw."""

    timestamp: float  # epoch seconds, for display
    monotonic: float  # time.monotonic() seconds, for intervals and history
    source: str  # "nvml" or "demo"
    driver_version: str | None
    gpus: tuple[GpuSample, ...]
    error: str | None = None  # source-wide problem (e.g. driver vanished)
    sample_cost: float = 0.0  # seconds this tick took to collect
    # Latest report of each attached agent, by pid (app.core.agents.types.AgentReport).
    agents: Mapping[int, Any] = field(default_factory=dict)
    # What is new since the previous tick (app.core.agents.events): model events
    # (ModelEventRecord) and pressure-policy decisions (DecisionUpdate).
    model_events: tuple[Any, ...] = ()
    policy_decisions: tuple[Any, ...] = ()
    # Every current diagnosis (app.core.diagnosis.types.Diagnosis), and the OOM
    # post-mortems new since the previous tick (OomReport), from the Doctor.
    diagnoses: tuple[Any, ...] = ()
    oom_reports: tuple[Any, ...] = ()
    # Every model server recognised on the host, with what its API says it holds
    # (app.core.servers.types.ModelServer).
    servers: tuple[Any, ...] = ()
    # The remote hosts the window watches (app.core.monitor.hosts.HostView), each
    # with its own snapshot; never on the wire.
    hosts: tuple[Any, ...] = ()
