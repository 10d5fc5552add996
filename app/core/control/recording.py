"""Which recordings of allocations may start: one at a time per process, only
in a process whose agent reports CUDA initialised, for a bounded length.

Checked against the latest snapshot on the controller's owner thread, as a
terminate is (:mod:`app.core.control.terminate`); the recording itself runs on
a worker (:func:`app.core.control.work.run_record`).
"""

from __future__ import annotations

import math
from collections.abc import Collection

from app.core.control import targets
from app.core.control.records import RecordAction
from app.core.control.requests import RECORD_MAX_S, RecordAllocations, Refusal, RequestError
from app.core.monitor.samples import Snapshot


def check(snapshot: Snapshot | None, req: RecordAllocations, recording: Collection[int],
          now: float) -> RecordAction:
    """The action to start for ``req``; raises RequestError (nothing started)
    when the snapshot or the bounds do not allow it."""
    if not (isinstance(req.seconds, (int, float)) and math.isfinite(req.seconds)
            and 0 < req.seconds <= RECORD_MAX_S):
        raise RequestError(Refusal.INVALID, f"a recording lasts more than 0 and at most "
                                            f"{RECORD_MAX_S:.0f} s, not {req.seconds!r}")
    if req.max_entries is not None and req.max_entries <= 0:
        raise RequestError(Refusal.INVALID, "the entry bound must be positive")
    if snapshot is None:
        raise RequestError(Refusal.NO_SNAPSHOT, "no sample yet")
    report = snapshot.agents.get(req.pid)
    if report is None:
        if targets.on_any_gpu(snapshot, req.pid):
            raise RequestError(Refusal.NO_AGENT, f"process {req.pid} has no agent reporting")
        raise RequestError(Refusal.UNKNOWN_PROCESS, f"no process {req.pid} in the latest sample")
    if getattr(report, "cuda_initialized", None) is False:
        raise RequestError(Refusal.NO_CUDA, f"process {req.pid} has not initialised CUDA: "
                                            "there are no CUDA allocations to record")
    if req.pid in recording:
        raise RequestError(Refusal.BUSY, f"process {req.pid} is already being recorded")
    return RecordAction(req.pid, float(req.seconds), req.max_entries,
                        targets.label_of(snapshot, req.pid), started_at=now)


__all__ = ["check"]
