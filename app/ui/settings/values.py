"""Every user-adjustable value of the app, kept in one place.

:class:`UiSettings` is plain data (no Qt): the settings dialog edits a copy,
:mod:`app.ui.settings.store` persists it with QSettings, and
:meth:`UiSettings.from_dict` turns whatever a settings file holds -- old keys,
missing keys, values a person typed by hand -- into valid settings: a value
that does not parse or is out of range falls back to its default (or is
clamped), it never stops the app from starting.  A value whose reading fails
outright (an exception: a number too large for a float, an object of a type
nothing expects) falls back too, and :meth:`UiSettings.read` names it, so the
user is told once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.agent.protocol import IDLE_UNLOAD_MAX_S, IDLE_UNLOAD_MIN_S
from app.core.policies.thresholds import (
    ALERT_AT,
    POLICY_MIN_IDLE_MAX_S,
    POLICY_MIN_INTERVAL_MAX_S,
    POLICY_REARM_GAP,
    POLICY_REARM_MAX,
    POLICY_REARM_MIN,
    POLICY_THRESHOLD_MAX,
    POLICY_THRESHOLD_MIN,
    REARM_AT,
)
from app.core.remote.address import parse_address
from app.core.remote.host_config import MAX_HOSTS, HostConfig
from app.core.store.tiers import Retention

THEMES = ("system", "light", "dark")
#: Sample periods the app accepts (seconds); the sampler clamps to the same range.
PERIOD_MIN_S = 0.1
PERIOD_MAX_S = 10.0
#: Full-rate history lengths offered (seconds); 24 h of 5 s peaks are always kept.
HISTORY_CHOICES_S = (600.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0)
#: A process's idle timer in whole minutes, within the agent's bounds (10 s to 30 days).
IDLE_TIMER_MIN_MIN = max(1, math.ceil(IDLE_UNLOAD_MIN_S / 60))
IDLE_TIMER_MAX_MIN = int(IDLE_UNLOAD_MAX_S // 60)


def _num(value: Any, default: float, lo: float, hi: float) -> float:
    """``value`` as a finite float clamped to [lo, hi]; ``default`` if it is not a number."""
    if isinstance(value, bool):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    if not math.isfinite(number):
        return default
    return min(hi, max(lo, number))


def _flag(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off"):
        return False
    if isinstance(value, int):
        return bool(value)
    return default


def _level_pair(threshold: Any, rearm: Any, default_threshold: float,
                default_rearm: float) -> tuple[float, float]:
    """A threshold and a re-arm level (fractions of total), re-arm kept below."""
    t = round(_num(threshold, default_threshold, POLICY_THRESHOLD_MIN, POLICY_THRESHOLD_MAX), 4)
    r = round(_num(rearm, default_rearm, POLICY_REARM_MIN, POLICY_REARM_MAX), 4)
    return t, round(min(r, t - POLICY_REARM_GAP), 4)


@dataclass
class AutoUnloadSettings:
    """The memory-pressure policy the app runs (its PressurePolicy's config).

    When a GPU's used memory reaches ``threshold`` (fraction of its total) the
    policy unloads idle models (idle at least ``min_idle_s``) until the GPU is
    back under ``threshold``; it acts again only after usage fell below
    ``rearm`` and at most once every ``min_interval_s``.
    """

    enabled: bool = True
    threshold: float = ALERT_AT
    rearm: float = REARM_AT
    min_idle_s: float = 300.0
    min_interval_s: float = 30.0

    def normalised(self) -> AutoUnloadSettings:
        """Values clamped to sane ranges; re-arm kept below the threshold."""
        threshold, rearm = _level_pair(self.threshold, self.rearm, ALERT_AT, REARM_AT)
        return AutoUnloadSettings(_flag(self.enabled, True), threshold, rearm,
                                  _num(self.min_idle_s, 300.0, 0.0, POLICY_MIN_IDLE_MAX_S),
                                  _num(self.min_interval_s, 30.0, 0.0,
                                       POLICY_MIN_INTERVAL_MAX_S))

    def summary(self) -> str:
        if not self.enabled:
            return "Auto-unload: off"
        return f"Auto-unload: at {self.threshold * 100:.0f} %"


@dataclass
class GpuAlertLevels:
    """One GPU's own alert threshold and re-arm level (fractions of its total)."""

    threshold: float = ALERT_AT
    rearm: float = REARM_AT


@dataclass
class AlertSettings:
    """When to warn: a GPU near its memory limit, a process that hit OOM.

    ``per_gpu`` maps a GPU's UUID (stable across reboots and re-ordering; the
    display id for MIG devices without one) to its own levels.
    """

    notifications: bool = True
    threshold: float = ALERT_AT
    rearm: float = REARM_AT
    min_interval_s: float = 300.0
    oom_alerts: bool = True
    retry_alerts: bool = True
    per_gpu: dict[str, GpuAlertLevels] = field(default_factory=dict)

    def normalised(self) -> AlertSettings:
        threshold, rearm = _level_pair(self.threshold, self.rearm, ALERT_AT, REARM_AT)
        per_gpu: dict[str, GpuAlertLevels] = {}
        raw = self.per_gpu if isinstance(self.per_gpu, dict) else {}
        for key, levels in raw.items():
            if isinstance(levels, GpuAlertLevels):
                levels = dataclasses.asdict(levels)
            if not isinstance(key, str) or not isinstance(levels, dict):
                continue
            t, r = _level_pair(levels.get("threshold"), levels.get("rearm"), threshold, rearm)
            per_gpu[key] = GpuAlertLevels(t, r)
        return AlertSettings(_flag(self.notifications, True), threshold, rearm,
                             _num(self.min_interval_s, 300.0, 0.0, 86400.0),
                             _flag(self.oom_alerts, True), _flag(self.retry_alerts, True),
                             per_gpu)

    def levels_for(self, gpu_key: str) -> GpuAlertLevels:
        return self.per_gpu.get(gpu_key) or GpuAlertLevels(self.threshold, self.rearm)


@dataclass
class StoredHistorySettings:
    """The history kept on disk between runs (``app.core.store``): 1 s peaks for
    ``fine_min`` minutes, 5 s peaks for ``coarse_days`` days."""

    keep: bool = True
    fine_min: int = 60
    coarse_days: int = 7

    def normalised(self) -> StoredHistorySettings:
        return StoredHistorySettings(_flag(self.keep, True),
                                     int(_num(self.fine_min, 60, 1, 24 * 60)),
                                     int(_num(self.coarse_days, 7, 1, 365)))

    def retention(self) -> Retention:
        return Retention(self.fine_min * 60.0, self.coarse_days * 86400.0)


#: Coordinates beyond this are no desktop's (a file edited by hand): the default.
_COORD_MAX = 1 << 16


@dataclass
class WindowPlacement:
    """Where the main window was when the app last left it: its frame's top-left
    corner and its inner size in device-independent pixels, and whether it was
    maximised.  ``width`` 0: never placed (the first start fits the screen)."""

    x: int = 0
    y: int = 0
    width: int = 0
    height: int = 0
    maximised: bool = False

    def normalised(self) -> WindowPlacement:
        def coord(v: Any) -> int:
            return int(_num(v, 0, -_COORD_MAX, _COORD_MAX))

        width, height = int(_num(self.width, 0, 0, _COORD_MAX)), int(
            _num(self.height, 0, 0, _COORD_MAX))
        if width < 200 or height < 150:  # unplaced, or too small to be a real window
            return WindowPlacement()
        return WindowPlacement(coord(self.x), coord(self.y), width, height,
                               _flag(self.maximised, False))

    @property
    def placed(self) -> bool:
        return self.width > 0 and self.height > 0


def _group(name: str, kind: type, raw: Any, failed: list[str]) -> Any:
    """``kind`` from the keys of ``raw`` it knows, normalised; a key whose value
    cannot be read at all (normalising it raises) keeps its default and is
    named in ``failed`` as ``name/key``."""
    raw = raw if isinstance(raw, dict) else {}
    known = {f.name for f in dataclasses.fields(kind)}
    values = {k: v for k, v in raw.items() if k in known}
    for key in list(values):
        try:
            kind(**{key: values[key]}).normalised()
        except Exception:
            failed.append(f"{name}/{key}")
            del values[key]
    return kind(**values).normalised()


@dataclass
class UiSettings:
    auto_unload: AutoUnloadSettings = field(default_factory=AutoUnloadSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    stored_history: StoredHistorySettings = field(default_factory=StoredHistorySettings)
    #: Seconds between two samples of NVML and the agents.
    sample_period_s: float = 0.25
    #: Seconds of full-rate history kept per GPU (older: 5 s peaks, 24 h).
    history_s: float = 3600.0
    #: "system" (follow the desktop's light/dark setting), "light" or "dark".
    theme: str = "system"
    #: Start with no window on screen (in the tray; minimised where there is none).
    start_minimised: bool = False
    #: Closing the window keeps the app running in the tray (only when a tray exists).
    close_to_tray: bool = True
    #: One-time explanations already given.
    close_hint_shown: bool = False
    no_tray_hint_shown: bool = False
    #: What the detail view's "Unload idle models after [N] min" offers when off.
    idle_unload_default_min: int = 30
    #: Marker count kept per GPU on the VRAM graph.
    markers_per_gpu: int = 200
    #: Entries kept in the Activity log.
    activity_rows: int = 500
    #: The remote hosts the window watches ("Hosts…"), in the order shown.
    hosts: tuple[HostConfig, ...] = ()
    #: The window's last size, position and maximised state (restored at start).
    window: WindowPlacement = field(default_factory=WindowPlacement)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def copy(self) -> UiSettings:
        return UiSettings.from_dict(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> UiSettings:
        return cls.read(data)[0]

    @classmethod
    def read(cls, data: dict[str, Any] | None) -> tuple[UiSettings, list[str]]:
        """The settings, and the names of the values that could not be read at
        all (each uses its default)."""
        data = data if isinstance(data, dict) else {}
        d = cls()
        failed: list[str] = []

        def value(name: str, convert: Callable[[Any], Any]) -> Any:
            try:
                return convert(data.get(name))
            except Exception:
                failed.append(name)
                return getattr(d, name)

        settings = cls(
            auto_unload=_group("auto_unload", AutoUnloadSettings, data.get("auto_unload"),
                               failed),
            alerts=_group("alerts", AlertSettings, data.get("alerts"), failed),
            stored_history=_group("stored_history", StoredHistorySettings,
                                  data.get("stored_history"), failed),
            sample_period_s=value("sample_period_s", lambda v: round(
                _num(v, d.sample_period_s, PERIOD_MIN_S, PERIOD_MAX_S), 3)),
            history_s=value("history_s", lambda v: _num(
                v, d.history_s, HISTORY_CHOICES_S[0], HISTORY_CHOICES_S[-1])),
            theme=value("theme", lambda v: v if isinstance(v, str) and v in THEMES
                        else d.theme),
            start_minimised=value("start_minimised", lambda v: _flag(v, d.start_minimised)),
            close_to_tray=value("close_to_tray", lambda v: _flag(v, d.close_to_tray)),
            close_hint_shown=value("close_hint_shown", lambda v: _flag(v, d.close_hint_shown)),
            no_tray_hint_shown=value("no_tray_hint_shown",
                                     lambda v: _flag(v, d.no_tray_hint_shown)),
            idle_unload_default_min=value("idle_unload_default_min", lambda v: int(_num(
                v, d.idle_unload_default_min, IDLE_TIMER_MIN_MIN, IDLE_TIMER_MAX_MIN))),
            markers_per_gpu=value("markers_per_gpu",
                                  lambda v: int(_num(v, d.markers_per_gpu, 10, 10000))),
            activity_rows=value("activity_rows",
                                lambda v: int(_num(v, d.activity_rows, 50, 100000))),
            hosts=value("hosts", _hosts),
            window=_group("window", WindowPlacement, data.get("window"), failed),
        )
        return settings, failed


def _hosts(value: Any) -> tuple[HostConfig, ...]:
    """The hosts kept, each a JSON object; one whose address cannot be read is
    an error (the whole list keeps its default rather than losing one silently)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):  # a list on disk, a tuple from to_dict()
        raise ValueError("hosts: not a list")
    out: list[HostConfig] = []
    for item in value[:MAX_HOSTS]:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise ValueError("hosts: an entry without a url")
        texts = {k: item.get(k) if isinstance(item.get(k), str) and item.get(k) else None
                 for k in ("token_file", "ca_file", "remote_command")}
        config = HostConfig(parse_address(item["url"]).url, **texts)
        if all(o.url != config.url for o in out):
            out.append(config)
    return tuple(out)


__all__ = ["AlertSettings", "AutoUnloadSettings", "GpuAlertLevels", "StoredHistorySettings",
           "UiSettings", "WindowPlacement", "THEMES",
           "HISTORY_CHOICES_S", "IDLE_TIMER_MAX_MIN", "IDLE_TIMER_MIN_MIN", "PERIOD_MIN_S",
           "PERIOD_MAX_S"]
