"""What one GPU's VRAM plot shows, shaped once from the history (no Qt).

:func:`build_plot_data` turns :class:`~app.core.monitor.history.History` for
one GPU, a time span and the plot's width in pixels into a :class:`PlotData`:
the time axis, the device total, the unattributed series, the ranked
per-process series, one "other processes" series, each reduced to about two
points per pixel with the peaks kept, and the legend entries.  A panel only
hands these arrays to its curves and the entries to its legend.

One ranking rule (:func:`rank`): running processes by their current VRAM
(unknown last; ties in the order first seen), then ended ones by their peak
over the span (ties: the most recently seen first).  The first
:data:`TOP_N` get their own series; everything else is summed into "other"
from the history's per-slot total, so its rows are never copied.  Unknown
memory is NaN (a gap), never 0.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from app.core.monitor.history import History, ProcessKey, SeriesView
from app.core.monitor.samples import GpuSample

TOP_N = 8  # processes with a series of their own
MIN_BUCKETS = 64  # decimation never goes below this many buckets
DEFAULT_WIDTH_PX = 1000  # plot width assumed before the plot is laid out
OTHER_KEY = "__other__"
TOTAL_KEY = "__total__"
LIMIT_KEY = "__capacity__"
#: Key of the unattributed series (graph, legend) and table row.  A string, so it
#: never equals a process key (pid, create time) or a pid.
UNATTRIBUTED_KEY = "__unattributed__"
UNATTRIBUTED_LABEL = "Unattributed"
_MIB = 1024**2  # bytes; "other" below this is rounding noise, drawn as a gap

Labels = Callable[[ProcessKey], str] | Mapping[ProcessKey, str]


class Role(enum.Enum):
    """What a series or legend entry stands for (the UI picks its colour from it)."""

    TOTAL = "total"
    CAPACITY = "capacity"
    UNATTRIBUTED = "unattributed"
    PROCESS = "process"
    OTHER = "other"


class Style(enum.Enum):
    """Line style of a curve and of its legend swatch."""

    SOLID = "solid"
    DASHED = "dashed"
    DOTTED = "dotted"


@dataclass(frozen=True, slots=True)
class PlotInputs:
    """The latest sample's figures the ranking and the legend need."""

    live: Mapping[ProcessKey, int | None]  # process key -> bytes (None = unknown); absent = ended
    memory_total: int | None = None  # bytes (capacity line, y range)
    unattributed: int | None = None  # bytes now, None = unknown
    highlighted: Hashable | None = None  # process key the user selected
    memory_used: int | None = None  # bytes now (the legend's device total), None = unknown

    @classmethod
    def from_gpu(cls, gpu: GpuSample, highlighted: Hashable | None = None) -> PlotInputs:
        return cls({p.key: p.gpu_memory for p in gpu.processes}, gpu.memory_total,
                   gpu.unattributed_memory, highlighted, gpu.memory_used)


@dataclass(frozen=True, slots=True, eq=False)
class Series:
    """One curve: bytes at each of :attr:`PlotData.x` (float32, NaN = gap)."""

    key: Hashable
    role: Role
    y: np.ndarray
    style: Style = Style.SOLID
    emphasised: bool = False
    dimmed: bool = False

    @property
    def finite(self) -> bool:
        return bool(np.isfinite(self.y).all())


@dataclass(frozen=True, slots=True)
class LegendEntry:
    """One legend row; the colour comes from ``role`` (and ``key`` for a process)."""

    key: Hashable
    role: Role
    label: str
    value: float | None  # bytes now; None = unknown
    style: Style = Style.SOLID
    emphasised: bool = False
    dimmed: bool = False
    ended: bool = False  # a process no longer running (no current value)


@dataclass(frozen=True, slots=True)
class Readout:
    """The figures at one time of the plot (hover), unformatted."""

    t: float  # seconds before the newest sample (<= 0)
    used: float | None  # device total, bytes
    processes: tuple[tuple[str, float], ...]  # (label, bytes), largest first, known only
    unattributed: float | None  # bytes, None = unknown
    has_unattributed: bool  # whether the unattributed series is drawn at all
    util: float | None = None  # SM utilisation, percent; None = unknown


@dataclass(frozen=True, slots=True, eq=False)
class PlotData:
    """Everything a GPU panel draws for one refresh."""

    x: np.ndarray  # seconds before the newest sample (<= 0), decimated
    total: Series | None  # None: nothing in span
    processes: tuple[Series, ...]  # the top processes, ranked
    other: Series | None  # everything else, summed
    extra: Series | None  # the highlighted process when not among the top
    unattributed: Series | None  # drawn while above 0 somewhere in span
    capacity: int | None  # bytes
    legend: tuple[LegendEntry, ...]
    view: SeriesView = field(repr=False)  # the undecimated history the data came from
    inputs: PlotInputs = field(repr=False)
    labels: Mapping[ProcessKey, str] = field(repr=False, default_factory=dict)
    width_px: int = DEFAULT_WIDTH_PX
    available_count: int | None = None  # processes with history in span
    util: np.ndarray | None = None  # SM utilisation, percent at each x (NaN = unknown)
    #: Where the history begins inside the span (x, seconds <= 0); None when it
    #: covers the whole span.
    history_start: float | None = None
    #: Stretches with no samples (the source was down, the machine asleep): (x0, x1).
    gaps: tuple[tuple[float, float], ...] = ()

    @property
    def top_keys(self) -> list[Hashable]:
        return [s.key for s in self.processes]

    @property
    def shown_keys(self) -> list[Hashable]:
        """Process keys with a series of their own (top N, then the highlighted one)."""
        keys = self.top_keys
        if self.extra is not None:
            keys.append(self.extra.key)
        return keys

    def with_highlight(self, key: Hashable | None) -> PlotData:
        """The same history shaped again with ``key`` highlighted (None: none)."""
        return replace(shape(self.view, replace(self.inputs, highlighted=key), self.width_px,
                             self.labels, self.available_count),
                       history_start=self.history_start)

    def readout_at(self, x: float) -> Readout | None:
        """The undecimated figures at the sample nearest to ``x``; None without data."""
        view = self.view
        if view.t.size == 0:
            return None
        i = int(np.clip(np.searchsorted(view.t, x), 0, view.t.size - 1))
        if i > 0 and abs(view.t[i - 1] - x) < abs(view.t[i] - x):
            i -= 1
        vals = [(key, _nan_none(view.processes[key][i]))
                for key in self.shown_keys if key in view.processes]
        vals.sort(key=lambda kv: -(kv[1] if kv[1] is not None else -1))
        procs = tuple((self.labels.get(key) or default_label(key), v)
                      for key, v in vals if v is not None)
        rest = _unattributed_series(view)
        shown = self.unattributed is not None and rest is not None and i < rest.size
        util = _nan_none(view.util[i]) if view.util.shape == view.t.shape else None
        return Readout(float(view.t[i]), _nan_none(view.used[i]), procs,
                       _nan_none(rest[i]) if shown and rest is not None else None, shown, util)


# -- ranking -------------------------------------------------------------------------------

def rank(keys: Iterable[ProcessKey], live: Mapping[ProcessKey, int | None],
         peak_of: Callable[[list[ProcessKey]], Mapping[ProcessKey, float]],
         top_n: int = TOP_N) -> list[ProcessKey]:
    """Running processes by current VRAM (unknown last), then ended ones by their
    peak (NaN last; ``peak_of`` is asked only when an ended one can make the top).
    Ties keep the order of ``keys``."""
    keys = list(keys)
    running = [k for k in keys if k in live]
    running.sort(key=lambda k: _or_minus_one(live[k]), reverse=True)
    ended = [k for k in keys if k not in live]
    if len(running) < top_n and ended:
        peaks = peak_of(ended)
        ended.sort(key=lambda k: _or_minus_one(peaks.get(k)), reverse=True)
    return running + ended


def wanted_keys(history: History, display_id: str, span_s: float, inputs: PlotInputs,
                available: Mapping[ProcessKey, float], top_n: int = TOP_N) -> list[ProcessKey]:
    """The process series to copy from the history: the top ``top_n`` by :func:`rank`,
    in that order, and the highlighted one.  ``available``: every process with
    history in the span -> when last seen (seconds, <= 0)."""
    def peak_of(ended: list[ProcessKey]) -> Mapping[ProcessKey, float]:
        running = sum(1 for k in available if k in inputs.live)
        if running + len(ended) <= top_n:
            return {}  # all fit: their order is settled on the copied series
        return history.peaks(display_id, span_s, ended)

    # Ties: running ones in the order first seen, ended ones most recently seen first.
    ordered = [k for k in available if k in inputs.live]
    ordered += sorted((k for k in available if k not in inputs.live),
                      key=lambda k: available[k], reverse=True)
    keys = rank(ordered, inputs.live, peak_of, top_n)[:top_n]
    hl = inputs.highlighted
    if hl is not None and hl in available and hl not in keys:
        keys.append(cast(ProcessKey, hl))  # a key of ``available``
    return keys


# -- shaping -------------------------------------------------------------------------------

def build_plot_data(history: History, display_id: str, span_s: float, width_px: int,
                    inputs: PlotInputs) -> PlotData:
    """One GPU's plot over the last ``span_s`` seconds, at ``width_px`` pixels."""
    available = history.available(display_id, span_s)
    keys = wanted_keys(history, display_id, span_s, inputs, available)
    view = history.view(display_id, span_s, keys)
    labels = {k: history.label(display_id, k) for k in view.processes}
    return shape(view, inputs, width_px, labels, len(available), span_s)


def device_series(history: History, display_id: str, span_s: float, buckets: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """One GPU's device total (bytes) over the span, peak-decimated to ``buckets``
    pairs, with gaps broken: the overview tile's mini history.  No process row
    is copied."""
    view = history.view(display_id, span_s, ())
    if view.t.size == 0:
        return np.empty(0), np.empty(0)
    x, ys, _ = decimate(view.t, view.used[np.newaxis, :], max(8, buckets))
    return x, ys[0]


def shape(view: SeriesView, inputs: PlotInputs, width_px: int = DEFAULT_WIDTH_PX,
          labels: Labels | None = None, available_count: int | None = None,
          span_s: float | None = None) -> PlotData:
    """Shape ``view`` (its processes: the ones to draw) for a plot ``width_px`` wide.

    ``available_count``: processes with history in the span, so "other" counts
    those that were not copied into the view; ``span_s``: the span shown, so a
    history that begins inside it is marked.
    """
    names = {k: _call_labels(labels, k) for k in view.processes}
    t = view.t
    if t.size == 0:
        return PlotData(np.empty(0), None, (), None, None, None, inputs.memory_total, (),
                        view, inputs, names, width_px, available_count)
    hl = inputs.highlighted
    dim = hl is not None
    live = inputs.live
    with np.errstate(all="ignore"):
        ranked = rank(view.processes, live, lambda ended: {
            k: float(np.fmax.reduce(view.processes[k])) for k in ended})
    top = ranked[:TOP_N]
    rest_keys = ranked[TOP_N:]
    extra = hl if (hl is not None and hl not in top and hl in view.processes) else None

    n_rest = len(rest_keys)
    if available_count is not None:
        n_rest = max(n_rest, available_count - len(top))
    rest = _unattributed_series(view)
    with np.errstate(all="ignore"):
        show_rest = rest is not None and bool(np.nanmax(rest, initial=0.0) > 0)

    # Every series as a row of one float32 matrix (plenty for a picture; half the
    # memory traffic), decimated in one vectorised pass.
    sources: list[np.ndarray | None] = [view.used]
    sources += [view.processes[k] for k in top]
    if n_rest:
        sources.append(None)  # "other": filled below
    if extra is not None:
        sources.append(view.processes[extra])
    if show_rest:
        sources.append(rest)
    util_known = view.util.shape == t.shape and bool(np.isfinite(view.util).any())
    if util_known:
        sources.append(view.util)
    matrix = np.empty((len(sources), t.size), dtype=np.float32)
    for i, src in enumerate(sources):
        if src is not None:
            matrix[i] = src
    if n_rest:
        _fill_other(matrix[1 + len(top)], matrix[1:1 + len(top)], view,
                    [view.processes[k] for k in rest_keys])
    x, ys, gaps = decimate(t, matrix, max(MIN_BUCKETS, width_px or DEFAULT_WIDTH_PX))

    rows = iter(ys)
    total = Series(TOTAL_KEY, Role.TOTAL, next(rows))
    # The legend reads "now" from the latest sample at every span: the history's
    # newest slot is a 5-second peak at long spans.
    used_now = (float(inputs.memory_used) if inputs.memory_used is not None
                else _last(view.used))
    legend = [LegendEntry(TOTAL_KEY, Role.TOTAL, "Device total", used_now)]
    if inputs.memory_total:
        legend.append(LegendEntry(LIMIT_KEY, Role.CAPACITY, "Capacity",
                                  float(inputs.memory_total), Style.DASHED))
    device_entries = len(legend)  # the device's own figures come first in the legend
    processes = []
    for key in top:
        emph, dimmed = key == hl, dim and key != hl
        processes.append(Series(key, Role.PROCESS, next(rows), Style.SOLID, emph, dimmed))
        legend.append(_process_entry(key, names[key], live, emph, dimmed))
    other = None
    if n_rest:
        other = Series(OTHER_KEY, Role.OTHER, next(rows), Style.DASHED, False, dim)
        legend.append(LegendEntry(OTHER_KEY, Role.OTHER, f"Other processes ({n_rest})",
                                  others_now(live, top), Style.DASHED, False, dim,
                                  ended=all(k in top for k in live)))
    extra_series = None
    if extra is not None:
        extra_series = Series(extra, Role.PROCESS, next(rows), Style.SOLID, True, False)
        legend.append(_process_entry(extra, names[extra], live, True, False))
    unattributed = None
    if show_rest:
        # Listed with the device's figures, so many processes never push it out of sight.
        unattributed = Series(UNATTRIBUTED_KEY, Role.UNATTRIBUTED, next(rows), Style.DOTTED,
                              False, dim)
        now = inputs.unattributed
        legend.insert(device_entries, LegendEntry(
            UNATTRIBUTED_KEY, Role.UNATTRIBUTED, UNATTRIBUTED_LABEL,
            None if now is None else float(now), Style.DOTTED, False, dim))
    util = next(rows) if util_known else None
    return PlotData(x, total, tuple(processes), other, extra_series,
                    unattributed, inputs.memory_total, tuple(legend), view, inputs, names,
                    width_px, available_count, util, history_start(t, span_s), gaps)


def _fill_other(other: np.ndarray, top_rows: np.ndarray, view: SeriesView,
                rest: list[np.ndarray]) -> None:
    """Everything but the top rows, into ``other``: the per-slot total minus the top
    rows when the history kept one, else the sum of the ``rest`` series."""
    if view.process_total.size == view.t.size:
        shown = np.nansum(top_rows, axis=0) if len(top_rows) else 0.0
        np.subtract(view.process_total, shown, out=other, casting="unsafe")
        other[~(other >= _MIB)] = np.nan  # nothing (or rounding noise) left: a gap
        return
    block = np.vstack(rest)
    absent = np.isnan(block)
    np.add.reduce(np.where(absent, np.float32(0), block), axis=0, out=other)
    other[absent.all(axis=0)] = np.nan


def others_now(live: Mapping[ProcessKey, int | None], top: Collection[Hashable]) -> float:
    """Bytes the running processes outside ``top`` hold now ("Other processes")."""
    return float(sum(v or 0 for k, v in live.items() if k not in top))


def values_now(inputs: PlotInputs, top: Collection[Hashable]) -> dict[Hashable, float | None]:
    """Every legend row's figure in the latest sample, by key: the device total,
    capacity, unattributed, each running process and "other" beside ``top``.  The
    panel sets them on every tick; the plot behind them may be minutes old."""
    values: dict[Hashable, float | None] = {
        TOTAL_KEY: inputs.memory_used, LIMIT_KEY: inputs.memory_total,
        UNATTRIBUTED_KEY: inputs.unattributed}
    values.update(inputs.live)
    values[OTHER_KEY] = others_now(inputs.live, top)
    return values


def _process_entry(key: ProcessKey, label: str, live: Mapping[ProcessKey, int | None],
                   emphasised: bool, dimmed: bool) -> LegendEntry:
    value = live.get(key)
    return LegendEntry(key, Role.PROCESS, label, None if value is None else float(value),
                       Style.SOLID, emphasised, dimmed, ended=key not in live)


def peak_decimate(t: np.ndarray, ys: np.ndarray, buckets: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Reduce rows ``ys`` (k x n) over times ``t`` to at most ``buckets`` max/min pairs.

    Buckets are aligned on the newest sample, so the right edge ("now") is exact; the
    few oldest samples that do not fill a bucket are dropped.  NaN (absent) is ignored
    inside a bucket; a bucket with no value at all stays NaN (a gap).
    """
    n = t.size
    ds = n // buckets
    if ds < 2:
        return t, ys
    m = (n // ds) * ds
    start = n - m
    k = ys.shape[0]
    grouped = ys[:, start:].reshape(k, m // ds, ds)
    out = np.empty((k, m // ds, 2), dtype=ys.dtype)
    hi, lo = out[:, :, 0], out[:, :, 1]
    if ds > 24:
        # Long buckets (long spans, narrow plots): one reduction along the bucket.
        np.fmax.reduce(grouped, axis=2, out=hi)
        np.fmin.reduce(grouped, axis=2, out=lo)
    else:
        hi[...] = grouped[:, :, 0]
        lo[...] = grouped[:, :, 0]
        # ds element-wise passes: several times faster than ufunc.reduce over a short
        # last axis.
        for j in range(1, ds):
            col = grouped[:, :, j]
            np.fmax(hi, col, out=hi)
            np.fmin(lo, col, out=lo)
    x = np.repeat(t[start + ds - 1::ds], 2)
    return x, out.reshape(k, -1)


def decimate(t: np.ndarray, ys: np.ndarray, buckets: int
             ) -> tuple[np.ndarray, np.ndarray, tuple[tuple[float, float], ...]]:
    """:func:`peak_decimate`, then a break inside every gap of ``t``: (x, ys, gaps)."""
    x, ys = peak_decimate(t, ys, buckets)
    gaps = find_gaps(t)
    if gaps:
        x, ys = break_at_gaps(x, ys, gaps)
    return x, ys, gaps


def find_gaps(t: np.ndarray, min_gap_s: float = 2.0) -> tuple[tuple[float, float], ...]:
    """Stretches of ``t`` (seconds, ascending) with no sample: a step longer than
    four typical steps and than ``min_gap_s``.  One sample late is jitter, not a gap."""
    if t.size < 3:
        return ()
    steps = np.diff(t)
    # The median of at most ~512 evenly spread steps: as typical, and far cheaper
    # than a full median of an hour at 4 Hz on every frame.
    typical = float(np.median(steps[::max(1, steps.size // 512)]))
    limit = max(4.0 * typical, min_gap_s)
    where = np.flatnonzero(steps > limit)
    return tuple((float(t[i]), float(t[i + 1])) for i in where)


def break_at_gaps(x: np.ndarray, ys: np.ndarray, gaps: tuple[tuple[float, float], ...]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN column inside each gap, so no line is drawn across it."""
    mids = np.array([(a + b) / 2 for a, b in gaps])
    at = np.searchsorted(x, mids)
    keep = (at > 0) & (at < x.size)  # a gap at the very edge needs no break
    if not keep.any():
        return x, ys
    at, mids = at[keep], mids[keep]
    x = np.insert(x, at, mids)
    ys = np.insert(ys, at, np.nan, axis=1)
    return x, ys


def history_start(t: np.ndarray, span_s: float | None) -> float | None:
    """The oldest sample's x when the history begins inside the span, else None."""
    if span_s is None or t.size < 2:
        return None
    step = float(np.median(np.diff(t[-min(t.size, 64):])))
    first = float(t[0])
    return first if first > -span_s + max(2.0 * step, 0.01 * span_s) else None


def default_label(key: Hashable) -> str:
    """``pid 1234`` for a process key without a known name."""
    return f"pid {key[0]}" if isinstance(key, tuple) else str(key)


def _call_labels(labels: Labels | None, key: ProcessKey) -> str:
    if labels is None:
        return default_label(key)
    if callable(labels):
        return labels(key)
    return labels.get(key) or default_label(key)


def _unattributed_series(view: SeriesView) -> np.ndarray | None:
    """Unattributed memory at each of the view's times (NaN = unknown), or None."""
    return view.unattributed if view.unattributed.shape == view.t.shape else None


def _or_minus_one(v: float | None) -> float:
    return -1.0 if v is None or v != v else float(v)


def _last(a: np.ndarray) -> float | None:
    return _nan_none(a[-1]) if a.size else None


def _nan_none(v: object) -> float | None:
    f = float(v)  # type: ignore[arg-type]
    return None if f != f else f
