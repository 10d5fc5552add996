"""The largest batch whose step fits a room, found by estimating, not by OOMs.

What users do by hand (start small, double until it fails, then settle
between the two), each try an estimate instead of a crash: grow from the
current batch by doubling (or shrink by halving) until the answer changes,
then narrow the gap between the last batch that fits and the first that does
not.  Memory grows about linearly with the batch, so each step between them
tries the batch where the line through the two crosses the room (then the
next one up: with a straight line that settles it in two estimates), and
halves the gap instead when one side has moved twice in a row.  Every batch is
estimated at most once, and the tries are bounded.

The search takes the need to grow with the batch; where the caching
allocator's pools make it dip (batches whose tensors cross 1 or 10 MiB), it may
settle below a larger batch that also fits.  The batch it answers was always
estimated to fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from app.core.estimate.types import Estimate, StepRequest

#: Estimates one search may make.
MAX_PROBES = 8
#: The largest batch a search proposes.
MAX_BATCH = 4096


def largest_batch(request: StepRequest, room_bytes: int,
                  reestimate: Callable[[StepRequest], Estimate], context_bytes: int, *,
                  max_probes: int = MAX_PROBES, max_batch: int = MAX_BATCH) -> int | None:
    """The largest batch (1 … ``max_batch``) whose ``reserved_bytes`` plus
    ``context_bytes`` fit in ``room_bytes`` (a GPU's free memory); None when
    even batch 1 does not.  Within ``max_probes`` estimates the answer is a
    batch that was estimated to fit; when the tries run out before the bisection
    ends, it is the largest such batch seen (the true largest lies below the
    smallest batch seen to fail).  :class:`EstimateError` from an estimate propagates."""
    seen: dict[int, int] = {}  # batch -> its needs (reserved + context)

    def fits(batch: int) -> bool:
        if batch not in seen:
            est = reestimate(dataclasses.replace(request, batch=batch))
            seen[batch] = est.reserved_bytes + context_bytes
        return seen[batch] <= room_bytes

    def left() -> int:
        return max_probes - len(seen)

    start = max(1, min(request.batch, max_batch))
    if fits(start):
        good, bad = start, None
        while bad is None and good < max_batch and left() > 0:
            trial = min(good * 2, max_batch)
            if fits(trial):
                good = trial
            else:
                bad = trial
        if bad is None:
            return good
    else:
        bad, good_or_none = start, None
        while good_or_none is None and bad > 1:
            # The last try goes straight to batch 1: an answer, if there is one.
            trial = 1 if left() <= 1 else bad // 2
            if fits(trial):
                good_or_none = trial
            else:
                bad = trial
        if good_or_none is None:
            return None
        good = good_or_none
    moved: list[bool] = []  # which side each step moved (True: the good one)
    while bad - good > 1 and left() > 0:
        if len(moved) >= 2 and moved[-1] == moved[-2]:
            trial = (good + bad) // 2
        else:
            trial = _crossing(good, seen[good], bad, seen[bad], room_bytes)
        ok = fits(trial)
        moved.append(ok)
        if ok:
            good = trial
        else:
            bad = trial
    return good


def _crossing(good: int, good_needs: int, bad: int, bad_needs: int, room_bytes: int) -> int:
    """The batch strictly between ``good`` and ``bad`` where the straight line
    through their needs reaches ``room_bytes``."""
    rise = bad_needs - good_needs
    step = (room_bytes - good_needs) * (bad - good) // rise if rise > 0 else (bad - good) // 2
    return min(bad - 1, max(good + 1, good + step))
