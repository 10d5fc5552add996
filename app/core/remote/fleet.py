"""Every remote host the window watches: one :class:`HostLink` each, and
one watchdog thread that checks their heartbeats once a second.

``views()`` is what the sampler thread adds to each local snapshot; it does
no I/O.  Hosts are added and removed while running (the settings' "Add
host…"): a removed host's thread is told to stop and its connection closed
on a thread of its own.  A host's pressure policy is changed on its
server (:meth:`Fleet.set_policy`, from a worker thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from app.core.agents.directory import AgentDirectory
from app.core.monitor.hosts import HostView
from app.core.remote.errors import RemoteUnavailable
from app.core.remote.host_config import HostConfig, unique_keys
from app.core.remote.link import Connect, HostLink, connect
from app.core.remote.policy import RemotePolicy

log = logging.getLogger(__name__)

WATCH_EVERY_S = 1.0


class Fleet:
    def __init__(self, configs: Sequence[HostConfig] = (), connect_with: Connect = connect
                 ) -> None:
        self._connect = connect_with
        self._lock = threading.Lock()
        self._links: dict[str, HostLink] = {}  # key -> link, in the order given
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.set_hosts(configs)

    def set_hosts(self, configs: Sequence[HostConfig]) -> None:
        """Watch exactly ``configs``: new ones connect, gone ones close, kept
        ones (same settings) keep their connection."""
        keys = unique_keys(list(configs))
        with self._lock:
            old = self._links
            links: dict[str, HostLink] = {}
            for key, config in zip(keys, configs, strict=True):
                link = old.get(key)
                if link is None or link.config != config:
                    link = HostLink(config, key, self._connect)
                    if self._watchdog is not None:
                        link.start()
                links[key] = link
            self._links = links
        for key, link in old.items():
            if links.get(key) is not link:
                link.close()

    def start(self) -> None:
        with self._lock:
            if self._watchdog is not None or self._stop.is_set():
                return
            self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                              name="vram-steward-hosts")
            links = list(self._links.values())
        for link in links:
            link.start()
        self._watchdog.start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.close()

    # -- readers (no I/O) ---------------------------------------------------------
    def views(self) -> tuple[HostView, ...]:
        with self._lock:
            links = list(self._links.values())
        return tuple(link.view() for link in links)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._links)

    def directory(self, key: str) -> AgentDirectory | None:
        """Where actions on ``key``'s processes go (None: no such host)."""
        with self._lock:
            link = self._links.get(key)
        return None if link is None else link.agents

    def link(self, key: str) -> HostLink | None:
        with self._lock:
            return self._links.get(key)

    def set_policy(self, key: str, **changes: Any) -> RemotePolicy:
        """Change host ``key``'s pressure policy on its server (blocking: call it
        from a worker thread); RemoteError with the server's refusal."""
        link = self.link(key)
        if link is None:
            raise RemoteUnavailable(f"{key} is not watched any more")
        return link.set_policy(**changes)

    # -- the watchdog ---------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(WATCH_EVERY_S):
            with self._lock:
                links = list(self._links.values())
            for link in links:
                try:
                    if link.check_heartbeat():
                        log.info("host %s stopped answering", link.key)
                except Exception:
                    log.exception("checking host %s", link.key)
