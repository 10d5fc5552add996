"""Where the agent puts its socket and its registry entry, checked for safety.

POSIX
    runtime dir  ``$VRAM_STEWARD_RUNTIME_DIR`` or ``<tempfile.gettempdir()>/vram-steward-<uid>``
                 (not XDG_RUNTIME_DIR: it is removed at logout while a nohup'd
                 training run goes on)
    registry     ``<runtime>/agents/<pid>.json``
    socket       ``<runtime>/s/<pid>.sock`` (a short ``/tmp/vst-<uid>-<hash>``
                 dir when that path would be too long for AF_UNIX)
    Every dir is created 0700 and must be a real directory (not a symlink),
    owned by us, not accessible by group/others; otherwise ``UnsafeDir``.
Windows
    registry     ``%LOCALAPPDATA%\\vram-steward\\agents`` (TCP on 127.0.0.1)
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile

MAX_SOCKET_PATH = 100  # sun_path is 104-108 bytes depending on the OS


class UnsafeDir(Exception):
    """A directory the agent refuses to use (the message says why)."""


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def runtime_dir() -> str:
    env = os.environ.get("VRAM_STEWARD_RUNTIME_DIR")
    if env:
        return os.path.abspath(env)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
        return os.path.join(base, "vram-steward")
    return os.path.join(tempfile.gettempdir(), "vram-steward-%d" % _uid())


def check_private_dir(path: str) -> None:
    """Raise UnsafeDir unless ``path`` is a real dir, ours, mode ``0?00``."""
    if sys.platform == "win32":
        if not os.path.isdir(path):
            raise UnsafeDir("%s is not a directory" % path)
        return
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafeDir("cannot stat %s: %s" % (path, exc)) from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDir("%s is a symlink" % path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir("%s is not a directory" % path)
    if st.st_uid != _uid():
        raise UnsafeDir("%s is owned by uid %d, not %d" % (path, st.st_uid, _uid()))
    if st.st_mode & 0o077:
        raise UnsafeDir("%s has mode %o: group/others have access"
                        % (path, stat.S_IMODE(st.st_mode)))


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
        path = os.path.join(base, "vst-%d-%s" % (_uid(), digest))
        if len(os.path.join(path, name).encode()) > MAX_SOCKET_PATH:
            raise UnsafeDir("no socket path short enough for AF_UNIX")
    else:
        ensure_private_dir(runtime)
    return ensure_private_dir(path)


def socket_path(runtime: str | None = None, pid: int | None = None) -> str:
    pid = pid if pid is not None else os.getpid()
    return os.path.join(socket_dir(runtime, pid), "%d.sock" % pid)
