"""User-adjustable values of the UI, kept in one place.

Everything the "Auto-unload" control and the per-process idle control edit
lives in :class:`UiSettings`; :meth:`UiSettings.to_dict` / :meth:`from_dict`
are what a later QSettings layer will store and load (plain JSON types only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AutoUnloadSettings:
    """The memory-pressure policy the app runs (its PressurePolicy's config).

    When a GPU's used memory reaches ``threshold`` (fraction of its total) the
    policy unloads idle models (idle at least ``min_idle_s``) until the GPU is
    back under ``threshold``; it acts again only after usage fell below
    ``rearm`` and at most once every ``min_interval_s``.
    """

    enabled: bool = True
    threshold: float = 0.90
    rearm: float = 0.85
    min_idle_s: float = 300.0
    min_interval_s: float = 30.0

    def normalised(self) -> "AutoUnloadSettings":
        """Values clamped to sane ranges; re-arm kept below the threshold."""
        threshold = min(0.99, max(0.10, float(self.threshold)))
        rearm = min(threshold - 0.01, max(0.05, float(self.rearm)))
        return AutoUnloadSettings(bool(self.enabled), round(threshold, 4), round(rearm, 4),
                                  max(0.0, float(self.min_idle_s)),
                                  max(0.0, float(self.min_interval_s)))

    def summary(self) -> str:
        if not self.enabled:
            return "Auto-unload: off"
        return f"Auto-unload: at {self.threshold * 100:.0f} %"


@dataclass
class UiSettings:
    auto_unload: AutoUnloadSettings = field(default_factory=AutoUnloadSettings)
    #: What the detail view's "Unload idle models after [N] min" offers when off.
    idle_unload_default_min: int = 30
    #: Marker count kept per GPU on the VRAM graph.
    markers_per_gpu: int = 200
    #: Entries kept in the Activity log.
    activity_rows: int = 500

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "UiSettings":
        data = data or {}
        au = data.get("auto_unload") or {}
        known = {f.name for f in dataclasses.fields(AutoUnloadSettings)}
        auto = AutoUnloadSettings(**{k: v for k, v in au.items() if k in known}).normalised()
        kw = {k: data[k] for k in ("idle_unload_default_min", "markers_per_gpu", "activity_rows")
              if isinstance(data.get(k), int)}
        return cls(auto_unload=auto, **kw)


__all__ = ["AutoUnloadSettings", "UiSettings"]
