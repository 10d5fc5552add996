"""Snapshots from a server, as a GPU source: what the collector (and so the
window) reads for a remote host.

A stream thread keeps the latest snapshot; ``read()`` hands out its GPUs,
and ``extras()`` the rest of what the server saw (agents' reports, model
events, policy decisions, diagnoses, OOM reports), so the collector passes
on the server's findings instead of making its own.  A stream that ends
makes ``read()`` raise :class:`SourceUnavailable` with the reason; the
collector opens the source again after its retry delay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.core.monitor.samples import GpuSample, Snapshot
from app.core.monitor.source import GpuSource, SourceUnavailable
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteError


class RemoteSource(GpuSource):
    wants_host_details = False  # the server joined them already
    name = "remote"

    def __init__(self, connect: Callable[[], RemoteClient]) -> None:
        self._connect = connect
        self._client: RemoteClient | None = None
        self._latest: Snapshot | None = None
        self._taken: Snapshot | None = None
        self._failure: str | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        try:
            client = self._connect()
            first = client.snapshot()
        except (RemoteError, ValueError) as exc:
            raise SourceUnavailable(str(exc), "remote") from None
        with self._lock:
            self._client, self._latest, self._failure = client, first, None
        self.name = first.source
        self._thread = threading.Thread(target=self._follow, args=(client,), daemon=True,
                                        name="vram-steward-remote")
        self._thread.start()

    def _follow(self, client: RemoteClient) -> None:
        try:
            for snapshot in client.snapshots():
                with self._lock:
                    if self._client is not client:
                        return
                    self._latest = snapshot
        except RemoteError as exc:
            with self._lock:
                if self._client is client:
                    self._failure = str(exc)
        except Exception as exc:  # a bug must surface as a reason, not a silent stall
            with self._lock:
                self._failure = f"{type(exc).__name__}: {exc}"

    def latest(self) -> Snapshot | None:
        return self._latest

    def read(self) -> tuple[GpuSample, ...]:
        with self._lock:
            failure, latest = self._failure, self._latest
            self._taken = latest
        if failure is not None:
            raise SourceUnavailable(failure, "remote")
        if latest is None:
            raise SourceUnavailable("no snapshot from the server yet", "remote")
        if latest.error and not latest.gpus:
            raise SourceUnavailable(latest.error, "remote")
        return latest.gpus

    def extras(self) -> dict[str, Any] | None:
        taken = self._taken
        if taken is None:
            return None
        return {"agents": taken.agents, "model_events": taken.model_events,
                "policy_decisions": taken.policy_decisions, "diagnoses": taken.diagnoses,
                "oom_reports": taken.oom_reports, "servers": taken.servers}

    def driver_version(self) -> str | None:
        latest = self._latest
        return None if latest is None else latest.driver_version

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
