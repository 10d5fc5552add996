"""What an agent captured at the moment its process hit CUDA out of memory.

The agent's OOM observer runs inside the allocator's failure path and records
the failed request, the allocator's figures and a summary of its segments
(``torch.cuda.memory_snapshot()``): how much reserved memory was free, and the
largest free block — smaller than the request means fragmentation explains
the failure.  Wire format: the report's ``"ooms"`` list (the last few, oldest
first) and the ``oom`` event's data; see ``app.agent.oom_capture``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.agents.fields import bool_or_none, float_or_none, int_or_none, str_or_none

#: Allocator figures carried in a capture's ``stats`` (bytes, counts), the
#: names of ``DeviceMemory``'s fields.
STAT_KEYS = ("allocated", "reserved", "active", "inactive_split", "peak_allocated",
             "peak_reserved", "num_alloc_retries", "num_ooms")


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """The allocator's segments on the device at the OOM (bytes)."""

    count: int | None  # segments (cudaMalloc'd regions) the allocator holds
    reserved: int | None  # their total size
    allocated: int | None  # bytes in blocks handed out to tensors
    free: int | None  # reserved but not allocated: cached, reusable by a fitting request
    largest_free_block: int | None  # the biggest single free block
    expandable: bool | None = None  # segments are expandable (expandable_segments:True)

    @classmethod
    def from_json(cls, data: Any) -> SegmentSummary | None:
        if not isinstance(data, dict):
            return None
        return cls(count=int_or_none(data.get("count")), reserved=int_or_none(data.get("reserved")),
                   allocated=int_or_none(data.get("allocated")),
                   free=int_or_none(data.get("free")),
                   largest_free_block=int_or_none(data.get("largest_free_block")),
                   expandable=bool_or_none(data.get("expandable")))

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "reserved": self.reserved, "allocated": self.allocated,
                "free": self.free, "largest_free_block": self.largest_free_block,
                "expandable": self.expandable}


@dataclass(frozen=True, slots=True)
class OomCapture:
    """One OOM in one process, as its agent saw it (bytes; epoch seconds)."""

    seq: int  # per agent, increasing: (pid, seq) names a capture
    time: float
    device: int | None  # CUDA ordinal inside the process
    uuid: str | None  # the device's UUID as CUDA reports it (maps to the NVML GPU)
    request: int | None  # bytes the failed allocation asked for
    limit: int | None  # the device's total, or the process's memory-fraction cap
    free: int | None  # bytes the driver said were free on the device
    stats: dict[str, int | None]  # STAT_KEYS -> value, at the moment of the OOM
    segments: SegmentSummary | None = None
    step: int | None = None  # optimizer steps the process had taken (None: no optimizer seen)
    thread: str | None = None  # name of the thread that hit it
    capture_s: float | None = None  # what capturing cost the host
    errors: tuple[str, ...] = ()  # parts that could not be captured, and why

    def stat(self, name: str) -> int | None:
        return self.stats.get(name)

    @property
    def fragmented(self) -> bool | None:
        """Whether enough reserved memory was free, but in no block big enough.

        None when the figures are unknown."""
        seg = self.segments
        if seg is None or self.request is None or seg.free is None \
                or seg.largest_free_block is None:
            return None
        return seg.free >= self.request > seg.largest_free_block

    @classmethod
    def from_json(cls, data: Any) -> OomCapture | None:
        if not isinstance(data, dict):
            return None
        seq, when = int_or_none(data.get("seq")), float_or_none(data.get("time"))
        if seq is None or when is None:
            return None
        raw = data.get("stats")
        stats = {k: int_or_none(raw.get(k)) for k in STAT_KEYS} if isinstance(raw, dict) \
            else dict.fromkeys(STAT_KEYS)
        errors = data.get("errors")
        return cls(seq=seq, time=when, device=int_or_none(data.get("device")),
                   uuid=str_or_none(data.get("uuid")), request=int_or_none(data.get("request")),
                   limit=int_or_none(data.get("limit")), free=int_or_none(data.get("free")),
                   stats=stats, segments=SegmentSummary.from_json(data.get("segments")),
                   step=int_or_none(data.get("step")), thread=str_or_none(data.get("thread")),
                   capture_s=float_or_none(data.get("capture_s")),
                   errors=tuple(e for e in errors if isinstance(e, str))
                   if isinstance(errors, list) else ())

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time, "device": self.device, "uuid": self.uuid,
                "request": self.request, "limit": self.limit, "free": self.free,
                "stats": dict(self.stats),
                "segments": self.segments.to_json() if self.segments else None,
                "step": self.step, "thread": self.thread, "capture_s": self.capture_s,
                "errors": list(self.errors)}


def captures(raw: Any) -> tuple[OomCapture, ...]:
    """The report's ``"ooms"`` list, parsed (bad entries dropped), oldest first."""
    if not isinstance(raw, list):
        return ()
    parsed = (OomCapture.from_json(x) for x in raw)
    return tuple(sorted((c for c in parsed if c is not None), key=lambda c: c.seq))
