"""A remote host's pressure policy, as its server runs it.

The policy that unloads idle models on a remote GPU is the server's own:
the window shows it (``HostView.policy``) and changes it through the
server's ``set_policy`` verb, never by running a second one here.  The
same dataclass is the server's answer to ``policy`` and ``set_policy`` and
what the client decodes, so the two sides cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The values ``set_policy`` takes; any of them may be left out (kept as is).
POLICY_FIELDS = ("enabled", "threshold", "rearm", "min_idle_s", "min_interval_s")


@dataclass(frozen=True, slots=True)
class RemotePolicy:
    """The server's pressure policy (its ``PolicyRunner`` config) and what
    this caller may do with it.

    ``available``: the server runs a policy at all (a server started with
    ``--no-auto-unload``, or the system service by default, runs none).
    ``may_change``: this caller's ``set_policy`` would be taken;
    ``why_not`` says why not, and what to do, when it would not.
    """

    enabled: bool
    threshold: float
    rearm: float
    min_idle_s: float
    min_interval_s: float
    available: bool = True
    may_change: bool = False
    why_not: str | None = None

    def text(self) -> str:
        """"Auto-unload on at 90 %, idle ≥ 5 min", "Auto-unload off"."""
        if not self.available:
            return "Auto-unload: none on this server"
        if not self.enabled:
            return "Auto-unload off"
        # Minutes as the window's own Auto-unload control words them.
        return (f"Auto-unload on at {self.threshold * 100:.0f} %, "
                f"idle ≥ {self.min_idle_s / 60:g} min")


__all__ = ["POLICY_FIELDS", "RemotePolicy"]
