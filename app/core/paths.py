"""Where the app keeps what outlives a run: the per-user state directory.

The same directory the agent logs to (``app.agent.log.state_dir``):
``$XDG_STATE_HOME/vram-steward`` (``~/.local/state/vram-steward``), or
``%LOCALAPPDATA%\\vram-steward`` on Windows.  ``VRAM_STEWARD_STATE_DIR``
overrides it (tests, portable installs).
"""

from __future__ import annotations

import os

from app.agent import log as agent_log


def state_dir() -> str:
    """The state directory (not created here): the agent's rule, so the app
    finds what the agent writes there (its log, recordings)."""
    return agent_log.state_dir()


def ensure_private_dir(path: str) -> str:
    """Create ``path`` (mode 0700) if needed and return it; raises OSError."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def history_db_path() -> str:
    return os.path.join(state_dir(), "history.sqlite3")


def oom_reports_dir() -> str:
    return os.path.join(state_dir(), "oom-reports")
