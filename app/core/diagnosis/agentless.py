"""PyTorch processes holding VRAM without an agent, and the environment to
install the agent into (``vram-steward agent install``).

A process is PyTorch's when ``libtorch`` is mapped in ``/proc/<pid>/maps``.
Its environment: ``VIRTUAL_ENV`` / ``CONDA_PREFIX`` in ``/proc/<pid>/environ``,
else the folder of its ``argv[0]`` holding ``pyvenv.cfg`` (a venv's python
is a link to the base interpreter, so ``/proc/<pid>/exe`` names the base),
else the interpreter's prefix (a conda env when it has ``conda-meta``), else
the interpreter itself (``--user``).  Read on the sampler thread once per
process (cached by pid and start time); another user's process answers
unknown (None), and so does the demo's.
"""

from __future__ import annotations

import collections
import os
import shlex
import time
from dataclasses import dataclass

from app.core.diagnosis.tf_maps import maps_mention
from app.core.diagnosis.types import Diagnosis, Fix
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import fmt_bytes

#: Shared objects only PyTorch maps.
TORCH_LIBRARIES = (b"libtorch_python", b"libtorch_cpu", b"libc10.so")


@dataclass(frozen=True, slots=True)
class AgentlessEnv:
    """Where a process's Python lies, and the command that invites the agent there."""

    prefix: str | None  # the virtualenv or conda environment; None: the interpreter's user site
    python: str | None  # the interpreter (for --user)
    kind: str  # "venv", "conda" or "user"

    @property
    def command(self) -> str:
        if self.prefix is not None:
            return f"vram-steward agent install --env {shlex.quote(self.prefix)}"
        python = f" --python {shlex.quote(self.python)}" if self.python else ""
        return f"vram-steward agent install --user{python}"


def _read(path: str, limit: int = 1 << 20) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def environment_of(pid: int, proc_root: str = "/proc") -> AgentlessEnv | None:
    """The environment process ``pid`` runs in; None when it cannot be read."""
    base = f"{proc_root}/{int(pid)}"
    environ = _read(f"{base}/environ")
    if environ is None:
        return None
    variables = dict(item.split(b"=", 1) for item in environ.split(b"\0") if b"=" in item)
    for name, kind in ((b"VIRTUAL_ENV", "venv"), (b"CONDA_PREFIX", "conda")):
        value = variables.get(name)
        if value:
            return AgentlessEnv(os.fsdecode(value), None, kind)
    cmdline = _read(f"{base}/cmdline") or b""
    argv0 = os.fsdecode(cmdline.split(b"\0", 1)[0]) if cmdline else ""
    if argv0 and os.sep in argv0:
        if not os.path.isabs(argv0):
            try:
                argv0 = os.path.join(os.readlink(f"{base}/cwd"), argv0)
            except OSError:
                argv0 = ""
        prefix = os.path.dirname(os.path.dirname(os.path.abspath(argv0))) if argv0 else ""
        if prefix and os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
            return AgentlessEnv(prefix, None, "venv")
    try:
        exe = os.readlink(f"{base}/exe")
    except OSError:
        return None
    prefix = os.path.dirname(os.path.dirname(exe))
    if os.path.isdir(os.path.join(prefix, "conda-meta")):
        return AgentlessEnv(prefix, None, "conda")
    return AgentlessEnv(None, exe, "user")


class AgentlessFinder:
    """Per (pid, start time): whether it is PyTorch's and, if so, its environment.
    Bounded; a PyTorch process is read once, any other again after ``RECHECK_S``
    (it may import torch later)."""

    RECHECK_S = 60.0

    def __init__(self, max_entries: int = 1024, proc_root: str = "/proc") -> None:
        self._cache: collections.OrderedDict[tuple[int, float | None],
                                             tuple[AgentlessEnv | None, float]] = \
            collections.OrderedDict()
        self._max = max_entries
        self._root = proc_root

    def torch_env(self, pid: int, create_time: float | None) -> AgentlessEnv | None:
        """The environment of a PyTorch process; None when it is not one, or unknown."""
        key = (pid, create_time)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and (cached[0] is not None or now - cached[1] < self.RECHECK_S):
            self._cache.move_to_end(key)
            return cached[0]
        found = None
        if maps_mention(pid, TORCH_LIBRARIES, self._root):
            found = environment_of(pid, self._root)
        self._cache[key] = (found, now)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return found


def no_agent(found: list[tuple[GpuSample, ProcessSample]], env: AgentlessEnv) -> Diagnosis:
    """One finding per environment: its agent-less PyTorch processes and the
    command that invites the agent there."""
    held = sum(p.gpu_memory or 0 for _, p in found)
    procs = {p.pid for _, p in found}
    who = label_or_pid(found[0][1]) if len(procs) == 1 else f"{len(procs)} processes"
    verb = "holds" if len(procs) == 1 else "hold"
    where = env.prefix or env.python or "this Python"
    evidence = [f"{label_or_pid(p)}: {fmt_bytes(p.gpu_memory)} on GPU {g.display_id}, "
                "no agent" for g, p in found]
    evidence.append(f"Their environment: {where} ({env.kind}).")
    fix = Fix("install_agent", f"Install the agent into {where} once: {env.command}. Each "
              "PyTorch process started there has it from its next start (these keep running "
              "without it until they restart).", command=env.command)
    gpus = {g.display_id for g, _ in found}
    gpu = found[0][0] if len(gpus) == 1 else None
    proc = found[0][1] if len(procs) == 1 else None
    return Diagnosis("no_agent", "info", f"{who} {verb} {fmt_bytes(held)} without an agent",
                     tuple(evidence), (fix,), gpu=gpu.display_id if gpu else None,
                     gpu_uuid=gpu.uuid if gpu else None, pid=proc.pid if proc else None,
                     create_time=proc.create_time if proc else None,
                     command=proc.command if proc else None,
                     figures={"held_bytes": held, "processes": len(procs)},
                     pids=tuple(sorted(procs)))


def install_commands(snapshot: Snapshot) -> dict[int, str]:
    """pid -> the ``agent install`` command the Doctor offers for that agent-less
    PyTorch process (what the process table and the detail view show)."""
    return {pid: d.fixes[0].command for d in snapshot.diagnoses
            if d.kind == "no_agent" and d.fixes and d.fixes[0].command
            for pid in (d.pids or ((d.pid,) if d.pid is not None else ()))}
