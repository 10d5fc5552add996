"""One sampler tick: a source reading joined with host process details.

Shared by the GUI's sampler thread and the CLI, so both show the same numbers.
Qt-free.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from app.core.host_processes import HostProcessReader
from app.core.samples import GpuSample, Snapshot
from app.core.source import GpuSource, SourceUnavailable

log = logging.getLogger(__name__)


class Collector:
    #: After the source fails, wait this long before trying to open it again
    #: (the driver may come back: module reload, GPU reset).
    RETRY_AFTER_S = 5.0

    def __init__(self, source: GpuSource, host: HostProcessReader | None = None) -> None:
        self.source = source
        self._host = host
        self._opened = False
        self._driver_version: str | None = None
        self._failed_at: float | None = None
        self._last_error: str | None = None

    def open(self) -> None:
        """Open the source; raises :class:`SourceUnavailable` with the reason."""
        self.source.open()
        self._opened = True
        self._driver_version = self.source.driver_version()
        if self.source.wants_host_details and self._host is None:
            self._host = HostProcessReader()

    def collect(self) -> Snapshot:
        """One snapshot.  Never raises: a failing source yields an error snapshot."""
        started = time.perf_counter()
        try:
            if not self._opened:
                if (self._failed_at is not None
                        and time.monotonic() - self._failed_at < self.RETRY_AFTER_S):
                    return self._error_snapshot(self._last_error or "unavailable", started)
                self.open()
            gpus = self.source.read()
        except SourceUnavailable as exc:
            return self._fail(exc.reason, started)
        except Exception as exc:  # a bug or an unexpected driver answer: keep sampling
            log.exception("source read failed")
            return self._fail(f"{type(exc).__name__}: {exc}", started)
        self._failed_at = None
        if self._host is not None and self.source.wants_host_details:
            gpus = self._enrich(self._host, gpus)
        return Snapshot(time.time(), time.monotonic(), self.source.name, self._driver_version,
                        gpus, None, time.perf_counter() - started)

    @staticmethod
    def _enrich(host: HostProcessReader, gpus: tuple[GpuSample, ...]) -> tuple[GpuSample, ...]:
        """Join host details to each GPU's processes.  A failure here (an
        unexpected psutil error) leaves that GPU's processes as the source
        reported them, host fields unknown, rather than losing the tick."""
        live: set[int] = set()
        enriched = []
        for gpu in gpus:
            if gpu.processes:
                live.update(p.pid for p in gpu.processes)
                try:
                    gpu = dataclasses.replace(gpu, processes=tuple(host.enrich(gpu.processes)))
                except Exception:
                    log.exception("reading host details of GPU processes failed")
            enriched.append(gpu)
        try:
            host.prune(live)
        except Exception:
            log.exception("pruning host process cache failed")
        return tuple(enriched)

    def _fail(self, reason: str, started: float) -> Snapshot:
        if self._opened:
            try:
                self.source.close()
            except Exception:
                log.exception("closing a failed source")
            self._opened = False
        self._failed_at = time.monotonic()
        self._last_error = reason
        return self._error_snapshot(reason, started)

    def _error_snapshot(self, reason: str, started: float) -> Snapshot:
        return Snapshot(time.time(), time.monotonic(), self.source.name, self._driver_version,
                        (), reason, time.perf_counter() - started)

    def close(self) -> None:
        if self._opened:
            self.source.close()
            self._opened = False
