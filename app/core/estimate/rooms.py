"""Each GPU's room for a new run: its free memory now and what could be freed on it.

Read from one :class:`~app.core.monitor.samples.Snapshot` (this machine's,
a remote host's, or the demo's at its moment) with the Doctor's own rules:

* another process's allocator cache (its agent's reserved − allocated);
* an idle model an agent holds (resident, unused for the Doctor's idle time,
  nothing blocking its unload), with its bytes on that GPU;
* an idle model a model server holds (``server_advice``: the server's own
  figures), unloaded through its API;
* an idle process: the Doctor's ``idle_process`` finding, which needs the SM
  history of a running window or server (a one-shot local read has none).

Free memory unknown stays None ("n/a"), never 0.  No I/O: the snapshot has it all.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.agents.types import AgentReport
from app.core.diagnosis.advice import AdviceConfig
from app.core.diagnosis.server_advice import idle_server_models
from app.core.monitor.hosts import each_host
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample, Snapshot

MiB = 1024**2
#: A cache smaller than this is not worth a fix of its own.
MIN_CACHE_BYTES = 64 * MiB
#: Freeing actions, from the cheapest to undo to the most disruptive (the Doctor's order).
FREE_ACTIONS = ("free_cache", "unload_model", "stop_process")


@dataclass(frozen=True, slots=True)
class Freeable:
    """Memory on one GPU that one action would give back."""

    action: str  # one of FREE_ACTIONS
    holder: str  # who holds it: "train.py (20417)", "Ollama"
    bytes: int  # what the action gives on that GPU
    pid: int
    model: str | None = None  # the agent's or server's model id (unload_model)
    model_name: str | None = None
    idle_s: float | None = None  # how long the model or process has been idle
    note: str = ""  # what the unload does (a model server's words)


@dataclass(frozen=True, slots=True)
class GpuRoom:
    """One GPU as a new run would find it."""

    gpu: str  # display id: "0", "0/mig1", "0@gpu1"
    name: str | None
    total_bytes: int | None
    free_bytes: int | None  # NVML free now; None: unknown
    freeable: tuple[Freeable, ...] = ()  # in FREE_ACTIONS order, largest first within each


def gpu_rooms(snapshot: Snapshot | None, *, model_idle_s: float | None = None
              ) -> tuple[GpuRoom, ...]:
    """Every GPU of ``snapshot`` with current figures (this machine's, then each
    connected host's), with what could be freed on it.  ``model_idle_s``: how long
    a model must be unused to count as idle (default: the Doctor's)."""
    idle_s = AdviceConfig().model_idle_s if model_idle_s is None else model_idle_s
    rooms: list[GpuRoom] = []
    for view, snap in each_host(snapshot):
        if view is not None and not view.connected:
            continue  # its last figures are not "free now"
        server_models = _server_models(snap, idle_s)
        rooms.extend(_room(gpu, snap, idle_s, server_models) for gpu in snap.gpus)
    return tuple(rooms)


def _room(gpu: GpuSample, snap: Snapshot, idle_s: float,
          server_models: dict[str, list[Freeable]]) -> GpuRoom:
    free = gpu.memory_free if gpu.state is DeviceState.OK else None
    found: list[Freeable] = []
    for proc in gpu.processes:
        report = snap.agents.get(proc.pid)
        if isinstance(report, AgentReport):
            found.extend(_agent_freeable(gpu, proc, report, snap.timestamp, idle_s))
    found.extend(server_models.get(gpu.display_id, ()))
    found.extend(_idle_processes(gpu, snap))
    order = {a: i for i, a in enumerate(FREE_ACTIONS)}
    found.sort(key=lambda f: (order[f.action], -f.bytes))
    return GpuRoom(gpu.display_id, gpu.name, gpu.memory_total, free, tuple(found))


def _agent_freeable(gpu: GpuSample, proc: ProcessSample, report: AgentReport, now: float,
                    idle_s: float) -> list[Freeable]:
    dev = report.device_for_gpu(gpu.index, gpu.uuid)
    if dev is None:
        return []
    holder = label_or_pid(proc)
    out = []
    if dev.cache is not None and dev.cache >= MIN_CACHE_BYTES:
        out.append(Freeable("free_cache", holder, dev.cache, proc.pid))
    if report.managed_by:  # its server loads and frees its models itself
        return out
    key = f"cuda:{dev.index}"
    for m in report.models:
        idle = m.idle_s(report.received_at or now)
        held = m.bytes_on(key)
        if (held > 0 and idle is not None and idle >= idle_s and m.state == "resident"
                and not m.unload_blocker and not m.training_evidence):
            out.append(Freeable("unload_model", holder, held, proc.pid, m.id, m.name, idle))
    return out


def _server_models(snap: Snapshot, idle_s: float) -> dict[str, list[Freeable]]:
    """Idle models of model servers by the display id of the GPU holding each."""
    by_index = {g.index: g.display_id for g in snap.gpus if g.mig_index is None}
    servers = {s.pid: s for s in snap.servers}
    out: dict[str, list[Freeable]] = {}
    for finding in idle_server_models(snap, idle_s):
        server = servers.get(finding.pid)
        if server is None:
            continue
        for fix in finding.fixes:
            model = server.model(fix.model) if fix.model else None
            gpu = by_index.get(model.gpu) if model is not None and model.gpu is not None \
                else finding.gpu
            if gpu is None or model is None or not fix.gain_bytes:
                continue  # where it is, or what it holds, is unknown
            idle = None if model.idle_since is None else \
                max(0.0, snap.timestamp - model.idle_since)
            out.setdefault(gpu, []).append(Freeable(
                "unload_model", server.label, fix.gain_bytes, server.pid, model.id,
                model.name, idle, model.unload or server.unload_note))
    return out


def _idle_processes(gpu: GpuSample, snap: Snapshot) -> list[Freeable]:
    """The Doctor's idle-process findings on this GPU (their SM history is the Doctor's)."""
    procs = {p.pid: p for p in gpu.processes}
    out = []
    for d in snap.diagnoses:
        if getattr(d, "kind", None) != "idle_process" or d.gpu != gpu.display_id:
            continue
        proc = procs.get(d.pid)
        held = proc.gpu_memory if proc is not None else None
        if proc is None or not held:
            continue
        idle = d.figures.get("idle_s")
        out.append(Freeable("stop_process", label_or_pid(proc), held, proc.pid,
                            idle_s=float(idle) if idle is not None else None))
    return out
