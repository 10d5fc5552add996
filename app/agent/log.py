"""The agent's own log: a small, size-capped file in the per-user state dir.

Never raises.  The agent must not write to the host's stdout/stderr or touch
the host's ``logging`` configuration, so this is a tiny self-contained writer.
"""

from __future__ import annotations

import os
import sys
import threading
import time

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


def log_path() -> str:
    return os.path.join(state_dir(), "agent.log")


def _write(text: str) -> None:
    path = log_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            if os.path.getsize(path) > MAX_BYTES:
                os.replace(path, path + ".1")
        except OSError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
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
