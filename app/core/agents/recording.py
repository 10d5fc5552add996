"""The result of recording a process's CUDA allocations for a few seconds.

The agent turns on PyTorch's allocation history (bounded, Python stacks),
waits, writes the snapshot file PyTorch's memory_viz page opens, turns the
history off, and summarises the recorded allocations by call site itself, so
the app never unpickles the file.  Wire format: the ``record`` method's reply,
``{"path", "entries", "seconds", "device", "truncated", "sites": [{"site",
"bytes", "count", "live_bytes"}]}``; see ``app.agent.recording``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.agents.fields import bool_or_none, float_or_none, int_or_none, str_or_none


@dataclass(frozen=True, slots=True)
class AllocationSite:
    site: str  # "train.py:42 in step": the innermost frame of the user's code
    bytes: int  # bytes allocated there while recording (freed or not)
    count: int  # allocations
    live_bytes: int  # of those, still allocated when recording stopped


@dataclass(frozen=True, slots=True)
class RecordResult:
    pid: int
    ok: bool
    path: str | None = None  # the snapshot file (memory_viz: https://pytorch.org/memory_viz)
    entries: int | None = None  # allocation events recorded
    seconds: float | None = None  # how long it recorded
    device: int | None = None  # CUDA ordinal recorded (None: all)
    truncated: bool | None = None  # the entry bound was reached: older events were dropped
    sites: tuple[AllocationSite, ...] = ()  # largest first
    error: str | None = None
    code: str | None = None  # protocol error code: "refused", "busy", "timeout", ...

    @classmethod
    def from_reply(cls, pid: int, data: Any) -> RecordResult:
        if not isinstance(data, dict):
            return cls(pid, False, error="the agent's answer was not understood", code="internal")
        sites = []
        raw = data.get("sites")
        for s in raw if isinstance(raw, list) else ():
            if not isinstance(s, dict):
                continue
            site, size = str_or_none(s.get("site")), int_or_none(s.get("bytes"))
            count, live = int_or_none(s.get("count")), int_or_none(s.get("live_bytes"))
            if site is not None and size is not None:
                sites.append(AllocationSite(site, size, count or 0, live or 0))
        sites.sort(key=lambda s: -s.bytes)
        return cls(pid, True, path=str_or_none(data.get("path")),
                   entries=int_or_none(data.get("entries")),
                   seconds=float_or_none(data.get("seconds")),
                   device=int_or_none(data.get("device")),
                   truncated=bool_or_none(data.get("truncated")), sites=tuple(sites))

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "ok": self.ok, "path": self.path, "entries": self.entries,
                "seconds": self.seconds, "device": self.device, "truncated": self.truncated,
                "sites": [{"site": s.site, "bytes": s.bytes, "count": s.count,
                           "live_bytes": s.live_bytes} for s in self.sites],
                "error": self.error, "code": self.code}
