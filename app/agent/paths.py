"""Where the agent puts its socket and its registry entry, checked for safety.

POSIX
    runtime dir  ``$VRAM_STEWARD_RUNTIME_DIR`` or ``<tempfile.gettempdir()>/vram-steward-<uid>``
                 (not XDG_RUNTIME_DIR: it is removed at logout while a nohup'd
                 training run goes on).  When that default exists but is not
                 private (another user made it first, a symlink, open to
                 group/others), a private ``<same>-<random>`` beside it is used
                 instead (``claim_private_dir``): only we can own a dir, so
                 nobody can take that name from us, and it stays on this host.
                 The app reads every private one (``runtime_candidates``).
    registry     ``<runtime>/agents/<pid>.json``
    socket       ``<runtime>/s/<pid>.sock`` (a short ``/tmp/vst-<uid>-<hash>``
                 dir, with the same fallback, when that path would be too long
                 for AF_UNIX)
    Every dir is created 0700 and must be a real directory (not a symlink),
    owned by us, not accessible by group/others; otherwise ``UnsafeDir``.
    The per-user state dir (``log.state_dir``) follows the same rule
    (``ensure_state_dir``).
Windows
    registry     ``%LOCALAPPDATA%\\vram-steward\\agents`` (TCP on 127.0.0.1)
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from typing import NamedTuple

MAX_SOCKET_PATH = 100  # sun_path is 104-108 bytes depending on the OS
RUNTIME_ENV = "VRAM_STEWARD_RUNTIME_DIR"
#: How the visible lines about refused folders begin (the app's, the CLI's, ``run``'s).
PREFIX = "vram-steward: "


class UnsafeDir(Exception):
    """A directory the agent refuses to use: ``path`` and ``reason`` ("is a symlink")."""

    def __init__(self, path: str, reason: str = "is not a private directory") -> None:
        super().__init__("%s %s" % (path, reason))
        self.path = path
        self.reason = reason


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def runtime_dir() -> str:
    """The runtime dir as named (``$VRAM_STEWARD_RUNTIME_DIR`` or the default);
    neither created nor checked: see ``claim_runtime_dir``."""
    env = os.environ.get(RUNTIME_ENV)
    if env:
        return os.path.abspath(env)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
        return os.path.join(base, "vram-steward")
    return os.path.join(tempfile.gettempdir(), "vram-steward-%d" % _uid())


def dir_problem(path: str) -> str | None:
    """Why ``path`` is not a private dir of ours ("belongs to uid 1001, not
    you"), or None when it is one."""
    if sys.platform == "win32":
        return None if os.path.isdir(path) else "is not a directory"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return "cannot be examined (%s)" % (exc.strerror or exc)
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != _uid():
        return "belongs to uid %d, not you" % st.st_uid
    if st.st_mode & 0o077:
        return "is open to group/others (mode %o)" % stat.S_IMODE(st.st_mode)
    return None


def check_private_dir(path: str) -> None:
    """Raise UnsafeDir unless ``path`` is a real dir, ours, mode ``0?00``."""
    reason = dir_problem(path)
    if reason is not None:
        raise UnsafeDir(path, reason)


def ensure_private_dir(path: str) -> str:
    """Create ``path`` (mode 0700) if missing, then ``check_private_dir`` it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    check_private_dir(path)
    return path


def ensure_state_dir(path: str, named: bool) -> str:
    """Create the state dir ``path`` 0700 (parents as needed) and check it.
    The default location (``named`` False) is ours by name: a dir of ours
    there with a looser mode is tightened to 0700.  A dir the user named
    (``VRAM_STEWARD_STATE_DIR``) is only checked.  Raises UnsafeDir, OSError."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if not named and sys.platform != "win32":
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == _uid() and st.st_mode & 0o077:
            os.chmod(path, 0o700)
    check_private_dir(path)
    return path


#: Added to every open of a file of ours: never through a link, not inherited.
_PRIVATE_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
    | getattr(os, "O_BINARY", 0)


def create_private_file(path: str, flags: int) -> int:
    """A new file at ``path``, mode 0600, never a planted file or link
    (``O_CREAT | O_EXCL | O_NOFOLLOW``).  ``flags``: the access flags
    (``os.O_WRONLY``...).  Raises FileExistsError when something is there."""
    return os.open(path, flags | _PRIVATE_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)


def replace_private_file(path: str, data: bytes, sync: bool = False) -> None:
    """``data`` as the whole of ``path``, atomically: written to a new 0600
    file beside it (a dot name readers skip), synced when ``sync``, then
    renamed over ``path``.  Nothing is left behind when it fails."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, ".%s.%d.%s.tmp" % (name, os.getpid(), os.urandom(4).hex()))
    fd = create_private_file(tmp, os.O_WRONLY)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def open_private_file(path: str, flags: int) -> int:
    """A descriptor on ``path``, never through a link: created 0600
    (``create_private_file``) when missing; an existing one must be a regular
    file of ours (a looser mode of our own file is tightened to 0600).
    ``flags``: the access flags (``os.O_WRONLY | os.O_APPEND``...).  Raises
    OSError (PermissionError for a file that is not ours or not regular)."""
    try:
        return create_private_file(path, flags)
    except FileExistsError:
        pass
    flags |= _PRIVATE_FLAGS | getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(errno.EPERM, "not a regular file", path)
        if st.st_uid != _uid() and sys.platform != "win32":
            raise PermissionError(errno.EPERM, "belongs to uid %d, not you" % st.st_uid, path)
        if st.st_mode & 0o077 and hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_fallbacks(primary: str) -> list[str]:
    """The private dirs ``<primary>-<suffix>`` beside ``primary``, by name
    (so every process picks the same first one).  A name someone else made
    is not ours, so it is never listed."""
    parent, base = os.path.split(primary)
    prefix = base + "-"
    try:
        names = sorted(n for n in os.listdir(parent) if n.startswith(prefix))
    except OSError:
        return []
    return [os.path.join(parent, n) for n in names
            if dir_problem(os.path.join(parent, n)) is None]


def claim_private_dir(primary: str) -> tuple[str, str | None]:
    """(the dir to use, why ``primary`` was refused or None).  ``primary`` is
    created 0700 when missing; when it exists but is not private, the first
    private fallback is used, made with ``mkdtemp`` when there is none."""
    try:
        os.mkdir(primary, 0o700)
    except OSError:
        pass  # exists (checked next), or cannot be made (the fallback says why)
    reason = dir_problem(primary)
    if reason is None:
        return primary, None
    found = private_fallbacks(primary)
    if found:
        return found[0], reason
    parent, base = os.path.split(primary)
    made = tempfile.mkdtemp(prefix=base + "-", dir=parent)
    found = private_fallbacks(primary)  # another process may have made one meanwhile
    if found and found[0] != made:
        try:
            os.rmdir(made)
        except OSError:
            pass
        return found[0], reason
    return made, reason


class Runtime(NamedTuple):
    """The runtime dir a process uses, and the line saying why the default was refused."""

    path: str
    notice: str | None


class Candidates(NamedTuple):
    """The private runtime dirs agents of ours may use, and the lines about refused ones."""

    dirs: list[str]
    notices: list[str]


def refusal_line(path: str, reason: str, using: list[str], named: bool) -> str:
    """The one visible line about a refused runtime folder."""
    if named:
        return "%s%s (%s) %s: refused, no agent registers or is listed there" % (
            PREFIX, path, RUNTIME_ENV, reason)
    if using:
        return "%s%s %s: using %s instead" % (PREFIX, path, reason, ", ".join(using))
    return "%s%s %s: ignored; agents use a private %s-* instead" % (PREFIX, path, reason, path)


def claim_runtime_dir() -> Runtime:
    """The runtime dir this process registers in (created, checked).  An unsafe
    ``$VRAM_STEWARD_RUNTIME_DIR`` raises UnsafeDir: the user named it, so
    there is no fallback."""
    path = runtime_dir()
    if os.environ.get(RUNTIME_ENV) or sys.platform == "win32":
        if sys.platform == "win32":
            os.makedirs(path, exist_ok=True)
        else:
            ensure_private_dir(path)
        return Runtime(path, None)
    used, reason = claim_private_dir(path)
    return Runtime(used, None if reason is None else refusal_line(path, reason, [used], False))


def runtime_candidates() -> Candidates:
    """Every private runtime dir an agent of ours may have registered in (the
    default when private, and each private fallback), and one line per folder
    refused.  Creates nothing."""
    path = runtime_dir()
    named = bool(os.environ.get(RUNTIME_ENV))
    reason = dir_problem(path) if os.path.lexists(path) else None
    if named or sys.platform == "win32":
        if reason is None:
            return Candidates([path] if os.path.isdir(path) else [], [])
        return Candidates([], [refusal_line(path, reason, [], True)])
    fallbacks = private_fallbacks(path)
    if reason is None:
        return Candidates(([path] if os.path.isdir(path) else []) + fallbacks, [])
    return Candidates(fallbacks, [refusal_line(path, reason, fallbacks, False)])


def registry_dir(runtime: str | None = None) -> str:
    """The registry dir (not created)."""
    return os.path.join(runtime or runtime_dir(), "agents")


def ensure_registry_dir(runtime: str | None = None) -> str:
    runtime = runtime or runtime_dir()
    if sys.platform == "win32":
        os.makedirs(runtime, exist_ok=True)
    else:
        ensure_private_dir(runtime)
    return ensure_private_dir(registry_dir(runtime))


def socket_dir(runtime: str | None = None, pid: int | None = None) -> str:
    """The dir for this process's socket, short enough for AF_UNIX (created, checked)."""
    runtime = runtime or runtime_dir()
    name = "%d.sock" % (pid if pid is not None else os.getpid())
    path = os.path.join(runtime, "s")
    if len(os.path.join(path, name).encode()) > MAX_SOCKET_PATH:
        import hashlib

        digest = hashlib.sha1(runtime.encode("utf-8", "replace")).hexdigest()[:8]
        base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
        short, _refused = claim_private_dir(os.path.join(base, "vst-%d-%s" % (_uid(), digest)))
        if len(os.path.join(short, name).encode()) > MAX_SOCKET_PATH:
            raise UnsafeDir(runtime, "leaves no socket path short enough for AF_UNIX")
        return short
    ensure_private_dir(runtime)
    return ensure_private_dir(path)


def socket_path(runtime: str | None = None, pid: int | None = None) -> str:
    pid = pid if pid is not None else os.getpid()
    return os.path.join(socket_dir(runtime, pid), "%d.sock" % pid)
