"""Where the app keeps what outlives a run: the per-user state directory.

The same directory the agent logs to (``app.agent.log.state_dir``):
``$XDG_STATE_HOME/vram-steward`` (``~/.local/state/vram-steward``), or
``%LOCALAPPDATA%\\vram-steward`` on Windows.  ``VRAM_STEWARD_STATE_DIR``
overrides it (tests, portable installs).

It gets the agent's rule too (``app.agent.paths``): a real directory of
ours, 0700.  The default one is created 0700 (an own one with a looser mode
is tightened); one that is not private, the named one included, is refused:
nothing is read or written there, and ``state_notice`` says so in one line.
"""

from __future__ import annotations

import os

from app.agent import log as agent_log
from app.agent import paths as agent_paths
from app.agent.paths import UnsafeDir

__all__ = ["UnsafeDir", "ensure_private_dir", "ensure_state_subdir", "history_db_path",
           "oom_reports_dir", "private_state_dir", "state_dir", "state_notice"]

#: What the state directory holds, as the refusal line names it.
_HOLDS = "history, OOM reports, recordings and agent.log are neither read nor written there"


def state_dir() -> str:
    """The state directory (not created here): the agent's rule, so the app
    finds what the agent writes there (its log, recordings)."""
    return agent_log.state_dir()


def private_state_dir() -> str:
    """The state directory, created 0700 and checked; raises UnsafeDir or OSError."""
    return agent_log.private_state_dir()


def ensure_private_dir(path: str) -> str:
    """Create ``path`` (mode 0700) if needed and check it is private: the
    agent's rule.  Raises UnsafeDir or OSError."""
    return agent_paths.ensure_private_dir(path)


def ensure_state_subdir(name: str) -> str:
    """``<state dir>/<name>``, both created 0700 and checked (UnsafeDir, OSError)."""
    return agent_paths.ensure_private_dir(os.path.join(private_state_dir(), name))


def state_notice() -> str | None:
    """The one visible line when the state directory exists but is not
    private (None when it is, or is not there yet).  Creates nothing; an own
    default one with a looser mode is tightened (``private_state_dir``)."""
    path = state_dir()
    if not os.path.lexists(path):
        return None
    try:
        private_state_dir()
    except (UnsafeDir, OSError) as exc:
        problem = agent_paths.dir_problem(path) or (
            exc.reason if isinstance(exc, UnsafeDir) else f"cannot be used ({exc.strerror or exc})")
        named = f" ({agent_log.STATE_DIR_ENV})" if os.environ.get(agent_log.STATE_DIR_ENV) else ""
        return f"{agent_paths.PREFIX}{path}{named} {problem}: refused; {_HOLDS}"
    return None


def history_db_path() -> str:
    return os.path.join(state_dir(), "history.sqlite3")


def oom_reports_dir() -> str:
    return os.path.join(state_dir(), "oom-reports")
