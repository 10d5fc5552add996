"""The host's process list as model-server recognition needs it.

A plain record per process (``HostProc``) so recognition is a pure function
that tests feed Linux- and Windows-shaped data alike.  ``read_host`` fills
them through psutil: command line, executable, parent, working directory,
the TCP ports each process listens on, and the few environment variables a
server's port may come from.  What the OS will not tell (another user's
environment or sockets) stays empty; recognition then falls back to the
command line and the server's default port.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Environment variables that move a server's API (read where the OS lets us).
ENV_KEYS = ("OLLAMA_HOST", "OLLAMA_KEEP_ALIVE", "VLLM_SERVER_DEV_MODE", "COMMANDLINE_ARGS")


@dataclass(frozen=True, slots=True)
class HostProc:
    pid: int
    ppid: int | None
    name: str  # the OS's process name ("ollama", "python.exe")
    cmdline: tuple[str, ...] = ()
    exe: str | None = None
    cwd: str | None = None
    user: str | None = None
    ports: tuple[int, ...] = ()  # TCP ports it listens on (empty: none or unknown)
    env: dict[str, str] = field(default_factory=dict)  # ENV_KEYS it has, where readable
    uid: int | None = None  # its owner (None: not known on this OS)
    env_read: bool = False  # its environment could be read (env is then complete)


class HostReader:
    """``read_host`` that remembers what cannot change while a process lives
    (its name, command line, owner), keyed by pid and the /proc entry's change
    time (a new process on a reused pid is read afresh) and checked against its
    name (an exec renames it): a scan then costs a ``stat`` and one small read
    per known process.  A parent that exits re-parents its children: the tree
    can lag until the next full read."""

    #: Every this many scans everything is read again: an exec that kept the
    #: process's name (python execing python) is caught within that many.
    FULL_EVERY = 10

    def __init__(self) -> None:
        self._known: dict[int, tuple[tuple[int, int], Listed]] = {}
        self._scans = 0

    def __call__(self) -> list[HostProc]:
        self._scans += 1
        if self._scans % self.FULL_EVERY == 0:
            self._known.clear()
        return read_host(self._known)


def read_host(known: dict[int, tuple[tuple[int, int], Listed]] | None = None
              ) -> list[HostProc]:
    """Every process this user can see; the costly details (executable,
    working folder, environment, listening ports) only for those whose command
    line may be a server's.  Blocks on /proc reads: call it off the GUI thread.
    On Linux the list itself is read from /proc directly (a few reads a
    process; psutil's objects cost several times that on a busy host)."""
    import psutil

    listing = _proc_listing(known) if sys.platform.startswith("linux") else None
    if listing is None:
        listing = _psutil_listing(psutil)
    out: list[HostProc] = []
    for pid, ppid, name, cmdline, user, uid in listing:
        if not _hint(name, cmdline):
            out.append(HostProc(pid, ppid, name, cmdline, user=user, uid=uid))
            continue
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            continue  # gone meanwhile
        env = _env(proc) if _wants_env(cmdline) else None
        out.append(HostProc(pid, ppid, name, cmdline, _exe(proc), _cwd(proc), user,
                            _ports(proc), env or {}, uid, env is not None))
    return out


Listed = tuple[int, "int | None", str, tuple[str, ...], "str | None", "int | None"]


def _proc_listing(known: dict[int, tuple[tuple[int, int], Listed]] | None = None
                  ) -> list[Listed] | None:
    """(pid, ppid, name, command line, user, uid) of every process, from /proc;
    ``known``: what earlier scans read, reused while a pid's entry is the same."""
    out: list[Listed] = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return None
    live: set[int] = set()
    for entry in entries:
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            st = entry.stat()
        except OSError:
            continue  # exited meanwhile
        key = (st.st_ctime_ns, st.st_uid)
        if known is not None:
            live.add(pid)
            hit = known.get(pid)
            if hit is not None and hit[0] == key and _same_image(entry.name, hit[1][2]):
                out.append(hit[1])
                continue
        listed = _read_proc(entry.name, st.st_uid)
        if listed is not None:
            out.append(listed)
            if known is not None:
                known[pid] = (key, listed)
    if known is not None:
        for pid in [p for p in known if p not in live]:
            del known[pid]
    return out


def _same_image(name: str, comm: str) -> bool:
    """Whether the process still runs what it ran (an exec renames it: ``setpriv``
    becomes ``ollama``), from its name alone (one small read)."""
    try:
        with open(f"/proc/{name}/comm", "rb") as f:
            return f.read(64).rstrip(b"\n").decode("utf-8", "replace") == comm
    except OSError:
        return False


def _read_proc(name: str, uid: int) -> Listed | None:
    try:
        with open(f"/proc/{name}/cmdline", "rb") as f:
            raw = f.read(65536)
        with open(f"/proc/{name}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None  # exited meanwhile
    close = stat.rfind(b")")
    comm = stat[stat.find(b"(") + 1:close].decode("utf-8", "replace")
    fields = stat[close + 2:].split()
    if not raw:
        return None  # a kernel thread (or a zombie)
    parts = raw.rstrip(b"\0").split(b"\0")
    if len(parts) == 1 and b" " in parts[0]:
        parts = parts[0].split(b" ")  # a process that rewrote its title
    cmdline = tuple(p.decode("utf-8", "replace") for p in parts)
    return (int(name), int(fields[1]) if len(fields) > 1 else None, comm, cmdline, _user(uid),
            uid)


def _psutil_listing(psutil: Any) -> list[Listed]:
    out: list[Listed] = []
    for proc in psutil.process_iter(["pid", "ppid", "name", "cmdline", "username", "uids"]):
        info: dict[str, Any] = proc.info
        cmdline = tuple(info.get("cmdline") or ())
        uids = info.get("uids")
        if cmdline or info.get("name"):
            out.append((info["pid"], info.get("ppid"), info.get("name") or "", cmdline,
                        info.get("username"), uids.real if uids else None))
    return out


@functools.lru_cache(maxsize=256)
def _user(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


#: Words in a command line that may make it a model server's (the rest of the
#: process list gets no further reads).
_HINTS = ("ollama", "main.py", "launch.py", "webui.py", "server.py", "vllm", "sglang",
          "llama-server", "text-generation-launcher", "llmster", "lm-studio", "lm studio",
          "lmstudio")


def _hint(name: str, cmdline: tuple[str, ...]) -> bool:
    words = " ".join((name, *cmdline[:4])).lower()
    return any(h in words for h in _HINTS)


def local_addresses() -> set[str]:
    """This host's own IP addresses (a server bound to one of them is local)."""
    import psutil

    found = {"127.0.0.1", "::1"}
    try:
        for addrs in psutil.net_if_addrs().values():
            found.update(a.address.split("%")[0] for a in addrs if a.address)
    except Exception:
        log.debug("reading this host's addresses failed", exc_info=True)
    return found


def _ports(proc: Any) -> tuple[int, ...]:
    """The TCP ports one process listens on (its own sockets only: cheap)."""
    try:
        conns = proc.net_connections(kind="tcp")
    except Exception:  # another user's process: unknown
        return ()
    return tuple(sorted({c.laddr.port for c in conns if c.status == "LISTEN" and c.laddr}))


def _exe(proc: Any) -> str | None:
    try:
        return str(proc.exe()) or None
    except Exception:
        return None


def _cwd(proc: Any) -> str | None:
    try:
        return str(proc.cwd()) or None
    except Exception:  # another user's process, or gone
        return None


def _env(proc: Any) -> dict[str, str] | None:
    """The few variables that move a server's API; None: not readable."""
    try:
        env = proc.environ()
    except Exception:
        return None
    return {k: env[k] for k in ENV_KEYS if k in env}


def _wants_env(cmdline: Iterable[str]) -> bool:
    """Ollama's and vLLM's variables; AUTOMATIC1111's and Forge's COMMANDLINE_ARGS
    (``webui-user.sh``/``.bat`` puts ``--api``, ``--port`` there, not on the
    command line)."""
    return any(w in part.lower() for part in cmdline
               for w in ("ollama", "vllm", "launch.py", "webui.py"))


__all__ = ["ENV_KEYS", "HostProc", "HostReader", "local_addresses", "read_host"]
