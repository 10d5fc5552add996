"""The agents' registry: where agents register, which entries are live.

Each agent writes ``<runtime>/agents/<pid>.json`` (see ``AgentEntry``).
``read_registry`` returns the live ones and deletes stale ones: the pid is
gone (or a zombie), or the pid now belongs to another process (its start
time differs by more than ``CREATE_TIME_TOLERANCE_S``).  Only files owned
by the current user are ever deleted, and a socket only when it lies in
the registry's runtime directory.
"""

from __future__ import annotations

import json
import os
import tempfile

from app.core.agents.types import AgentEntry

CREATE_TIME_TOLERANCE_S = 1.0
REGISTRY_SUBDIR = "agents"
MAX_REGISTRY_FILE_BYTES = 64 * 1024


def runtime_dir() -> str:
    """The per-user directory agents register in (same rule as the agent's)."""
    env = os.environ.get("VRAM_STEWARD_RUNTIME_DIR")
    if env:
        return os.path.abspath(env)
    if os.name == "nt":
        base = os.environ.get("LOCALAPPDATA") or tempfile.gettempdir()
        return os.path.join(base, "vram-steward")
    return os.path.join(tempfile.gettempdir(), f"vram-steward-{os.getuid()}")


def registry_dir(runtime: str | None = None) -> str:
    return os.path.join(runtime or runtime_dir(), REGISTRY_SUBDIR)


def _owned_by_us(path: str) -> bool:
    if not hasattr(os, "getuid"):
        return True  # Windows: the runtime directory is per-user (%LOCALAPPDATA%)
    try:
        return os.lstat(path).st_uid == os.getuid()
    except OSError:
        return False


def _process_state(pid: int) -> tuple[bool, float | None]:
    """(alive, create_time or None when unknown)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False, None
        return True, proc.create_time()
    except psutil.NoSuchProcess:
        return False, None
    except (psutil.AccessDenied, OSError):
        return True, None  # exists, cannot check more: keep it


def is_stale(entry: AgentEntry) -> bool:
    """True when the entry's process is gone, or its pid was reused."""
    alive, created = _process_state(entry.pid)
    if not alive:
        return True
    if created is not None and entry.create_time is not None:
        return abs(created - entry.create_time) > CREATE_TIME_TOLERANCE_S
    return False


def load_entry(path: str) -> AgentEntry | None:
    """One registry file, or None when unreadable/malformed (never raises)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_REGISTRY_FILE_BYTES + 1)
        if len(raw) > MAX_REGISTRY_FILE_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return AgentEntry.from_json(data, path=path)


def remove_entry(entry: AgentEntry, runtime: str | None = None) -> bool:
    """Delete a stale entry's file (and its socket when it lies in our runtime
    dir); only what the current user owns.  True if the file was removed."""
    runtime = runtime or runtime_dir()
    if not entry.path or not _owned_by_us(entry.path):
        return False
    try:
        os.unlink(entry.path)
    except OSError:
        return False
    if entry.transport == "unix":
        sock = os.path.realpath(entry.address)
        root = os.path.realpath(runtime)
        if (os.path.commonpath([sock, root]) == root and _owned_by_us(sock)
                and not os.path.isdir(sock)):
            try:
                os.unlink(sock)
            except OSError:
                pass
    return True


def read_registry(dir: str | None = None, prune: bool = True) -> list[AgentEntry]:
    """Live agents registered under runtime dir ``dir`` (default ``runtime_dir()``),
    sorted by pid.  Malformed or unreadable files are skipped (left alone: the
    agent may be writing one); stale ones are deleted when ``prune``."""
    runtime = dir or runtime_dir()
    folder = registry_dir(runtime)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    entries = []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        entry = load_entry(os.path.join(folder, name))
        if entry is None:
            continue
        if is_stale(entry):
            if prune:
                remove_entry(entry, runtime)
            continue
        entries.append(entry)
    entries.sort(key=lambda e: e.pid)
    return entries
