"""The agents' registry: where agents register, which entries are live.

Each agent writes ``<runtime>/agents/<pid>.json`` (see ``AgentEntry``) in a
runtime dir chosen by the agent's rule (``app.agent.paths``): the default
``<tmp>/vram-steward-<uid>``, or a private fallback beside it when someone
else holds that name.  The app reads every private runtime dir; a runtime
or registry dir that is not private (ours, 0700, no symlink) is never read,
and ``notices`` says so in one line each.  A registry file is read only when
it is a regular file of ours that nobody else can read or write, opened
without following a link.

``read_registry`` returns the live entries and deletes stale ones: the pid is
gone (or a zombie), or the pid now belongs to another process (its start
time differs by more than ``CREATE_TIME_TOLERANCE_S``).  Only files owned
by the current user are ever deleted, and a socket only when it lies in
the registry's runtime directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from typing import NamedTuple

from app.agent import paths as agent_paths
from app.core.agents.types import AgentEntry

CREATE_TIME_TOLERANCE_S = 1.0
REGISTRY_SUBDIR = "agents"
MAX_REGISTRY_FILE_BYTES = 64 * 1024
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


class Folders(NamedTuple):
    """The registry dirs to read, and one visible line per folder refused."""

    registries: list[tuple[str, str]]  # (runtime dir, its registry dir)
    notices: list[str]
    # Registry dirs of other users (read by root only), with their owner's uid.
    others: tuple[tuple[str, str, int], ...] = ()


def runtime_dir() -> str:
    """The runtime dir as named: the agent's rule (``app.agent.paths.runtime_dir``)."""
    return agent_paths.runtime_dir()


def registry_dir(runtime: str | None = None) -> str:
    return os.path.join(runtime or runtime_dir(), REGISTRY_SUBDIR)


def registry_folders(runtime: str | None = None, all_users: bool = False) -> Folders:
    """The private registry dirs to read: ``runtime``'s when given, else those
    of every private runtime dir an agent of ours may use, and with
    ``all_users`` (root only) every other user's.  Creates nothing."""
    if runtime is None:
        candidates = agent_paths.runtime_candidates()
    else:
        problem = agent_paths.dir_problem(runtime) if os.path.lexists(runtime) else None
        candidates = agent_paths.Candidates(
            [runtime] if problem is None and os.path.isdir(runtime) else [],
            [] if problem is None else [f"{agent_paths.PREFIX}{runtime} {problem}: its agents "
                                        "are ignored"])
    out, notices = [], list(candidates.notices)
    for folder in candidates.dirs:
        registry = registry_dir(folder)
        if not os.path.lexists(registry):
            continue
        problem = agent_paths.dir_problem(registry)
        if problem is None:
            out.append((folder, registry))
        else:
            notices.append(f"{agent_paths.PREFIX}{registry} {problem}: its agents are ignored")
    others = tuple(other_users_registries()) if all_users and runtime is None else ()
    return Folders(out, notices, others)


_OTHER_RUNTIME = re.compile(r"^vram-steward-(\d+)(-[A-Za-z0-9_]+)?$")


def other_users_registries() -> list[tuple[str, str, int]]:
    """(runtime, registry, uid) of every other user's default runtime dir and
    fallbacks, when we are root: each dir must belong to the uid its name
    gives, be private and no link, or it is not read."""
    if not hasattr(os, "getuid") or os.getuid() != 0:
        return []
    base = os.path.dirname(agent_paths.runtime_dir())
    out = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    for name in names:
        match = _OTHER_RUNTIME.match(name)
        if match is None or int(match.group(1)) == 0:
            continue
        uid = int(match.group(1))
        runtime = os.path.join(base, name)
        registry = registry_dir(runtime)
        if _private_dir_of(runtime, uid) and _private_dir_of(registry, uid):
            out.append((runtime, registry, uid))
    return out


def _private_dir_of(path: str, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077


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


def _private_file(st: os.stat_result, uid: int | None = None) -> bool:
    """A regular file of ours (or of ``uid``) that nobody else can read or write."""
    if not stat.S_ISREG(st.st_mode):
        return False
    if not hasattr(os, "getuid"):
        return True  # Windows: the registry is per-user (%LOCALAPPDATA%)
    return st.st_uid == (os.getuid() if uid is None else uid) and not st.st_mode & 0o077


def load_entry(path: str, uid: int | None = None) -> AgentEntry | None:
    """One registry file, or None when unreadable/malformed or not a private
    file of ours (of ``uid``'s, for root reading another user's registry;
    the entry then names that owner).  Never follows a link; never raises."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        if not _private_file(os.fstat(fd), uid):
            return None
        raw = os.read(fd, MAX_REGISTRY_FILE_BYTES + 1)
        if len(raw) > MAX_REGISTRY_FILE_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict):
        return None
    entry = AgentEntry.from_json(data, path=path)
    if entry is not None and uid is not None and uid != getattr(os, "getuid", lambda: uid)():
        entry = dataclasses.replace(entry, uid=uid)
    return entry


def remove_entry(entry: AgentEntry, runtime: str | None = None) -> bool:
    """Delete a stale entry's file (and its socket when it lies in our runtime
    dir, by default the one the entry's file lies in); only what the current
    user owns.  True if the file was removed."""
    if runtime is None and entry.path:
        runtime = os.path.dirname(os.path.dirname(entry.path))
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


class Scan(NamedTuple):
    """Live entries, by pid, and one visible line per folder refused."""

    entries: list[AgentEntry]
    notices: list[str]


#: ``scan_registry``'s cache: path -> (what its lstat said, its entry or None).
EntryCache = dict[str, tuple[tuple[int, ...], AgentEntry | None]]


def _cached_entry(path: str, cache: EntryCache, seen: EntryCache,
                  uid: int | None = None) -> AgentEntry | None:
    """``load_entry(path)``, parsed again only when its (mtime, size, inode,
    mode, owner) changed since ``cache`` was filled."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode, st.st_uid)
    cached = cache.get(path)
    entry = cached[1] if cached is not None and cached[0] == key else load_entry(path, uid)
    seen[path] = (key, entry)
    return entry


def scan_registry(dir: str | None = None, prune: bool = True,
                  cache: EntryCache | None = None, all_users: bool = False) -> Scan:
    """Live agents registered under runtime dir ``dir`` (default: every private
    runtime dir of ours), sorted by pid.  Malformed or unreadable files are
    skipped (left alone: the agent may be writing one); stale ones are deleted
    when ``prune``.  With a ``cache`` (kept between scans, updated here) a file
    is parsed again only when it changed.  ``all_users`` (root): other users'
    agents too, never pruned (their files are theirs)."""
    folders = registry_folders(dir, all_users)
    seen: EntryCache = {}
    entries = []
    owned = [(runtime, folder, None) for runtime, folder in folders.registries]
    for runtime, folder, uid in [*owned, *folders.others]:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = os.path.join(folder, name)
            entry = load_entry(path, uid) if cache is None \
                else _cached_entry(path, cache, seen, uid)
            if entry is None:
                continue
            if is_stale(entry):
                if prune and uid is None:
                    remove_entry(entry, runtime)
                seen.pop(path, None)
                continue
            entries.append(entry)
    if cache is not None:
        cache.clear()
        cache.update(seen)
    entries.sort(key=lambda e: e.pid)
    return Scan(entries, folders.notices)


def read_registry(dir: str | None = None, prune: bool = True) -> list[AgentEntry]:
    """``scan_registry``'s live entries."""
    return scan_registry(dir, prune).entries
