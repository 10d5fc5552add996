"""The one interface every GPU source implements (NVML, demo).

A source is opened once (on the sampler thread: NVML init can take over a
second with persistence mode off), then ``read()`` is called every tick and
returns GPU samples.  Sources never raise from ``read()`` for per-device or
per-field problems: they degrade the affected sample and say why.  Only a
source-wide failure (driver gone) raises :class:`SourceUnavailable`.
"""

from __future__ import annotations

import abc
from typing import Any

from app.core.monitor.samples import GpuSample


class SourceUnavailable(Exception):
    """The source cannot run at all; ``reason`` is one line for the user."""

    def __init__(self, reason: str, code: str = "unavailable") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code  # machine-readable: "no_library", "driver_not_loaded", ...


class GpuSource(abc.ABC):
    #: "nvml" or "demo", reported in ``status --json``.
    name: str = ""
    #: False when the source fills name/user/command itself (demo); the
    #: collector then skips psutil for its pids.
    wants_host_details: bool = True

    @abc.abstractmethod
    def open(self) -> None:
        """Prepare for reading; raises :class:`SourceUnavailable`."""

    @abc.abstractmethod
    def read(self) -> tuple[GpuSample, ...]:
        """One reading of every device; raises :class:`SourceUnavailable` only
        when the whole source stopped working."""

    def driver_version(self) -> str | None:
        return None

    def extras(self) -> dict[str, Any] | None:
        """Snapshot fields the source brings whole from where it read its GPUs
        (a server's agents, events, decisions, diagnoses), for the reading
        ``read()`` returned last; the collector then makes none of its own.
        None (local sources): the collector makes them."""
        return None

    def close(self) -> None:
        """Release resources; safe to call twice.  The default holds none."""
        return None

    def __enter__(self) -> GpuSource:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
