"""An agent directory with nothing in it, for tests that override only what they use."""

from __future__ import annotations

from app.core.agents.directory import AgentDirectory


class EmptyDirectory(AgentDirectory):
    """No agents; the two verbs every directory must have are not expected here."""

    def reports(self):
        return {}

    def entries(self):
        return []

    def free_cache(self, pid, timeout_s=30.0):
        raise NotImplementedError

    def collect_garbage(self, pid, timeout_s=30.0):
        raise NotImplementedError
