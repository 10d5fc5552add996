"""Per GPU: "full in ~N min at this rate", with hysteresis.

The time to full is measured from the recent *peak* used (a saw-tooth counts
at its top) at the steady growth rate: the leaking processes' rates added up,
or the GPU's own envelope trend when no process is to blame (memory of
processes this user cannot see).  An episode fires after ``confirm``
consecutive evaluations under ``alert_s`` and clears only when the time to
full is above ``clear_factor`` times it, or the growth is gone, so a figure
hovering around the threshold fires once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ForecastConfig:
    alert_s: float = 900.0  # warn when the GPU will be full within this long
    clear_factor: float = 1.5  # an episode ends above alert_s * clear_factor
    confirm: int = 2  # consecutive evaluations under alert_s before it fires
    peak_window_s: float = 300.0  # "recent peak used": the highest figure this far back

    def __post_init__(self) -> None:
        if self.alert_s <= 0 or self.clear_factor < 1.0 or self.confirm < 1:
            raise ValueError("alert_s > 0, clear_factor >= 1 and confirm >= 1 are required")


def seconds_to_full(capacity: int | None, peak_used: float | None, rate: float) -> float | None:
    """Seconds until ``peak_used`` growing at ``rate`` bytes/s reaches ``capacity``."""
    if capacity is None or peak_used is None or rate <= 0:
        return None
    return max(0.0, (capacity - peak_used) / rate)


@dataclass(slots=True)
class Episode:
    """One GPU's "full soon" state."""

    pending: int = 0  # consecutive evaluations under the threshold, not yet fired
    fired_at: float | None = None  # epoch seconds; None: no episode open


@dataclass(frozen=True, slots=True)
class Firing:
    """An episode as it happened (the doctor's alert history)."""

    gpu: str
    fired_at: float
    seconds_to_full: float
    cleared_at: float | None = None


@dataclass
class FullSoon:
    config: ForecastConfig = field(default_factory=ForecastConfig)
    _episodes: dict[str, Episode] = field(default_factory=dict)

    def update(self, gpu: str, eta_s: float | None, now: float) -> tuple[bool, bool]:
        """Feed one evaluation; returns (active, fired now)."""
        ep = self._episodes.setdefault(gpu, Episode())
        cfg = self.config
        if ep.fired_at is not None:
            if eta_s is None or eta_s > cfg.alert_s * cfg.clear_factor:
                ep.fired_at, ep.pending = None, 0
                return False, False
            return True, False
        if eta_s is not None and eta_s < cfg.alert_s:
            ep.pending += 1
            if ep.pending >= cfg.confirm:
                ep.fired_at = now
                return True, True
            return False, False
        ep.pending = 0
        return False, False

    def fired_at(self, gpu: str) -> float | None:
        ep = self._episodes.get(gpu)
        return ep.fired_at if ep else None

    def forget(self, keep: set[str]) -> None:
        for gpu in [g for g in self._episodes if g not in keep]:
            del self._episodes[gpu]
