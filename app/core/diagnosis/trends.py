"""Growth rates over the last minutes, plateau-aware.

A process's memory is not a straight line: a training loop's cache fills and
drops every few seconds, a server warms up and then holds steady.  Neither is
a leak.  The rate here is the slope of the series' *lower envelope*: the
minimum of each time bucket, then a running minimum over a few buckets, so a
saw-tooth shorter than that span sits on its feet and draws a flat line.  A
leak is an envelope that rises steadily, keeps rising in the most recent part
of the window, and has risen by more than a floor (so noise and small warm-up
steps are not news).  Figures are bytes and epoch seconds.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np

MiB = 1024**2


@dataclass(frozen=True, slots=True)
class TrendConfig:
    window_s: float = 600.0  # how far back a rate looks
    bucket_s: float = 30.0  # the envelope takes each bucket's minimum ...
    running_buckets: int = 3  # ... then the minimum over this many: saw-tooths up to 90 s vanish
    min_span_s: float = 180.0  # envelope span needed before anything is called a leak
    recent_s: float = 120.0  # the rise must continue over this last part
    recent_share: float = 0.5  # recent rate at least this share of the window's rate
    floor_bytes: int = 64 * MiB  # a leak has risen by at least this much ...
    floor_fraction: float = 0.03  # ... and by this share of the process's figure
    max_falling: float = 0.25  # at most this share of envelope steps may fall
    sample_every_s: float = 2.0  # one sample kept per this long
    keep_s: float = 1800.0  # samples older than this are dropped

    def __post_init__(self) -> None:
        if self.bucket_s <= 0 or self.window_s < self.bucket_s or self.running_buckets < 1:
            raise ValueError("window and buckets must be positive, the window at least a bucket")


@dataclass(frozen=True, slots=True)
class Trend:
    """One series' envelope over the window."""

    rate: float  # bytes per second (least squares over the envelope)
    recent_rate: float  # bytes per second over the last ``recent_s``
    start_bytes: int  # envelope at the window's start
    end_bytes: int  # envelope now
    span_s: float  # seconds the envelope covers
    leaking: bool

    @property
    def rise_bytes(self) -> int:
        return self.end_bytes - self.start_bytes


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def judge(times: list[float], env: list[float], config: TrendConfig) -> Trend | None:
    """The trend of an envelope (times ascending; bytes)."""
    if len(times) < 2:
        return None
    span = times[-1] - times[0]
    if span <= 0:
        return None
    rate = _slope(times, env)
    first = next(i for i, t in enumerate(times) if t >= times[-1] - config.recent_s)
    if first == len(times) - 1:
        first -= 1
    recent_span = times[-1] - times[first]
    recent_rate = (env[-1] - env[first]) / recent_span if recent_span > 0 else 0.0
    steps = [b - a for a, b in zip(env, env[1:])]
    falling = sum(d < -1 * MiB for d in steps) / len(steps)
    rise = env[-1] - env[0]
    leaking = (span >= config.min_span_s and rate > 0
               and rise >= max(config.floor_bytes, config.floor_fraction * env[-1])
               and falling <= config.max_falling
               and recent_rate >= config.recent_share * rate)
    return Trend(rate, recent_rate, int(env[0]), int(env[-1]), span, bool(leaking))


def analyse(t: np.ndarray, v: np.ndarray, now: float, config: TrendConfig) -> Trend | None:
    """The trend of one series given as arrays (the same rule as :class:`Series`)."""
    series = Series(config)
    series.extend(np.asarray(t, dtype=float), np.asarray(v, dtype=float))
    return series.trend(now)


class Series:
    """One bounded series, kept as time buckets: each bucket's minimum (the
    envelope), maximum (the recent peak) and last sample time, for ``keep_s``.
    At most one sample per ``sample_every_s`` counts."""

    __slots__ = ("_config", "_buckets", "_last", "_origin")

    def __init__(self, config: TrendConfig) -> None:
        self._config = config
        cap = int(config.keep_s / config.bucket_s) + 2
        # [bucket index, min, max, time of its last sample]
        self._buckets: collections.deque[list[float]] = collections.deque(maxlen=cap)
        self._last: float | None = None
        self._origin: float | None = None  # buckets count from the first sample

    def add(self, when: float, value: float) -> None:
        if self._last is not None and when - self._last < self._config.sample_every_s:
            return  # too soon after the last sample (or out of order)
        self._last = when
        if self._origin is None:
            self._origin = when
        index = math.floor((when - self._origin) / self._config.bucket_s)
        if self._buckets and self._buckets[-1][0] == index:
            b = self._buckets[-1]
            b[1], b[2], b[3] = min(b[1], value), max(b[2], value), when
        else:
            self._buckets.append([index, value, value, when])

    def extend(self, times: np.ndarray, values: np.ndarray) -> None:
        for when, value in zip(np.asarray(times).tolist(), np.asarray(values).tolist()):
            self.add(when, value)

    def __len__(self) -> int:
        return len(self._buckets)

    @property
    def last_time(self) -> float | None:
        return self._last

    @property
    def first_time(self) -> float | None:
        """When the oldest kept bucket began (None: empty)."""
        if not self._buckets or self._origin is None:
            return None
        return self._origin + self._buckets[0][0] * self._config.bucket_s

    def peak(self, since: float) -> float | None:
        """The highest value in the buckets that reach ``since`` or later (None: none)."""
        best = None
        for b in reversed(self._buckets):
            if b[3] < since:
                break
            best = b[2] if best is None else max(best, b[2])
        return best

    def envelope(self, now: float) -> tuple[list[float], list[float]]:
        """(times, bytes) of the lower envelope over the window ending ``now``."""
        cfg = self._config
        if self._origin is None:
            return [], []
        lo = math.floor((now - cfg.window_s - self._origin) / cfg.bucket_s)
        inside = [b for b in self._buckets if lo <= b[0] and b[3] <= now]
        r = cfg.running_buckets
        # The first r-1 buckets have no full running span: a tooth's top would show.
        times = [inside[i][3] for i in range(r - 1, len(inside))]
        env = [min(b[1] for b in inside[i - r + 1:i + 1]) for i in range(r - 1, len(inside))]
        return times, env

    def trend(self, now: float) -> Trend | None:
        times, env = self.envelope(now)
        return judge(times, env, self._config)
