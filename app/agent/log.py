"""The agent's own log: a small, size-capped file in the per-user state dir.

Never raises.  The agent must not write to the host's stdout/stderr or touch
the host's ``logging`` configuration, so this is a tiny self-contained writer.
It writes only inside a private state dir (``paths.ensure_state_dir``: ours,
0700, no symlink), never through a link, and only to a regular file of ours:
in any other state dir the agent does not log at all.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time

from . import paths

MAX_BYTES = 1024 * 1024  # rotate at 1 MiB: agent.log -> agent.log.1

_lock = threading.Lock()

STATE_DIR_ENV = "VRAM_STEWARD_STATE_DIR"


def state_dir() -> str:
    """The per-user state dir (``VRAM_STEWARD_STATE_DIR`` overrides it), as
    ``app.core.paths.state_dir`` says."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return override
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
        return os.path.join(base, "vram-steward")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "vram-steward")


def private_state_dir() -> str:
    """The state dir, created 0700 and checked; raises UnsafeDir or OSError."""
    return paths.ensure_state_dir(state_dir(), named=bool(os.environ.get(STATE_DIR_ENV)))


def log_path() -> str:
    return os.path.join(state_dir(), "agent.log")


def _write(text: str) -> None:
    try:
        private_state_dir()  # nothing is written in a state dir that is not private
        path = log_path()
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_BYTES:
                os.replace(path, path + ".1")  # a rename: follows no link
        except OSError:
            pass
        fd = paths.open_private_file(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except Exception:
        pass


def log(message: str) -> None:
    """Append one line (with time and pid) to agent.log; never raises."""
    try:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        line = "%s pid=%d %s\n" % (stamp, os.getpid(), message)
        with _lock:
            _write(line)
    except Exception:
        pass


def log_exc(message: str) -> None:
    """``log`` plus the current exception's traceback; never raises."""
    try:
        import traceback

        log(message + "\n" + traceback.format_exc().rstrip())
    except Exception:
        pass


def _reinit_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


try:
    os.register_at_fork(after_in_child=_reinit_after_fork)
except Exception:  # pragma: no cover - platforms without fork
    pass
