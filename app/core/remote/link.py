"""One remote host, kept connected on a thread of its own.

The thread connects, reads the host's stored history once (the graphs open
full), then follows the server's stream; when it ends it says why, waits
(1 s, doubling to 30 s) and connects again.  :meth:`HostLink.view` hands the
window what arrived, without I/O, so a host that hangs never holds the
sampler, the GUI or another host.

A stream that goes quiet without closing (a frozen VM, a dropped VPN) is
caught by the heartbeat: a server sends a frame every tick and a ping at
least every ``PING_S``; :meth:`HostLink.check_heartbeat` ends a connection
silent for ``HEARTBEAT_S``, long before a TCP timeout would.

The host's pressure policy is its server's: it is read after the hello and
again after :meth:`HostLink.set_policy` changed it, and shown on the view
(``HostView.policy``); nothing here runs a policy for the host's GPUs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.core.monitor.hosts import (
    CONNECTED,
    CONNECTING,
    DISCONNECTED,
    HostView,
    qualified_id,
    qualify_gpu,
)
from app.core.monitor.samples import Snapshot
from app.core.remote.advice import reason as advice
from app.core.remote.agents import RemoteAgents
from app.core.remote.client import RemoteClient, open_client
from app.core.remote.errors import RemoteError, RemoteUnavailable
from app.core.remote.history_seed import stored_from_records
from app.core.remote.host_config import HostConfig, is_loopback, read_token_file
from app.core.remote.policy import RemotePolicy
from app.core.serve.frames import PING_S

log = logging.getLogger(__name__)

#: A connection silent this long (no frame, no ping) is over.
HEARTBEAT_S = PING_S * 2.5
CONNECT_TIMEOUT_S = 10.0
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
#: How much stored history is asked for when a host connects.
SEED_S = 3600.0
SEED_TIMEOUT_S = 30.0
#: Pings but no new snapshot for this long: the host's sampler is stuck (a hung
#: driver call), and its last figures are no longer current.
STUCK_S = 10.0

Connect = Callable[[HostConfig], RemoteClient]


def connect(config: HostConfig) -> RemoteClient:
    """A client of ``config``'s server (RemoteError, ValueError for a bad token file)."""
    token = None
    if config.token_file:
        address = config.address
        if address.scheme == "http" and not is_loopback(address.host):
            raise ValueError(f"{address.url}: a token would cross the network in the clear: "
                             "use https:// (serve --tls-cert) or ssh://")
        token = read_token_file(config.token_file)
    return open_client(config.url, token, config.ca_file, config.remote_command,
                       timeout_s=CONNECT_TIMEOUT_S)


class HostLink:
    def __init__(self, config: HostConfig, key: str, connect_with: Connect = connect,
                 seed_s: float = SEED_S) -> None:
        self.config = config
        self.key = key
        self._connect = connect_with
        self._seed_s = seed_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client: RemoteClient | None = None
        self._state = CONNECTING
        self._since = time.time()
        self._reason: str | None = None
        self._name: str | None = None
        self._user: str | None = None
        self._latest: Snapshot | None = None
        self._fresh = False
        self._events: list[Any] = []
        self._decisions: list[Any] = []
        self._ooms: list[Any] = []
        self._seed: Any = None
        self._policy: RemotePolicy | None = None
        self._heard = time.monotonic()
        self._new_at = time.monotonic()  # when the latest snapshot arrived
        self._skew = 0.0  # this machine's clock minus the host's (from the hello)
        self._seeded = False  # the first connection reads the whole SEED_S
        self._stalled = False  # the heartbeat ended the connection (its reason stands)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"vram-steward-host-{key}")
        self.agents = LinkedAgents(self)

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop; the connection is closed on a thread of its own (ssh may take
        a moment), so this never blocks its caller (the GUI thread)."""
        self._stop.set()
        self._drop_later()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # -- what the window reads (any thread, no I/O) ------------------------------
    def view(self) -> HostView:
        """The host now; the events that arrived since the last view come once.
        A host whose stream still pings but brings no new snapshot for
        ``STUCK_S`` is shown as disconnected: its figures are no longer current."""
        now = time.monotonic()
        with self._lock:
            snapshot, fresh = self._latest, self._fresh
            state, since, reason = self._state, self._since, self._reason
            quiet = now - self._new_at
            if state == CONNECTED and snapshot is not None and quiet > STUCK_S:
                state, since = DISCONNECTED, snapshot.timestamp
                reason = (f"connected, but no new figures for {quiet:.0f} s: the host's "
                          "sampler is stuck (a driver call that does not return?)")
            if snapshot is not None and fresh:
                snapshot = dataclasses.replace(
                    snapshot, model_events=tuple(self._events),
                    policy_decisions=tuple(self._decisions), oom_reports=tuple(self._ooms))
                self._events, self._decisions, self._ooms = [], [], []
                self._latest = dataclasses.replace(snapshot, model_events=(),
                                                   policy_decisions=(), oom_reports=())
            self._fresh = False
            seed, self._seed = self._seed, None
            return HostView(self.key, self.config.url, state, since, reason, snapshot,
                            self._name, self._user, fresh, seed,
                            self._policy, self._skew)

    def latest(self) -> Snapshot | None:
        return self._latest

    def client(self) -> RemoteClient:
        """The connected client; RemoteUnavailable saying why there is none."""
        with self._lock:
            client, state, why = self._client, self._state, self._reason
        if client is None or state != CONNECTED:
            raise RemoteUnavailable(f"{self.key} is {state}" + (f": {why}" if why else ""))
        return client

    def check_heartbeat(self, now: float | None = None) -> bool:
        """End a connection silent for ``HEARTBEAT_S``; True when it did."""
        now = time.monotonic() if now is None else now
        with self._lock:
            quiet = self._state == CONNECTED and now - self._heard > HEARTBEAT_S
            if quiet:  # shown at once; the link's thread connects again once it is closed
                self._state, self._since, self._stalled = DISCONNECTED, time.time(), True
                self._reason = (f"stopped answering: nothing for {now - self._heard:.0f} s "
                                "(the host, its server or the network is stuck)")
        if quiet:
            self._drop_later()
        return quiet

    def _drop_later(self) -> None:
        """Close the connection on a thread of its own: closing may wait on ssh."""
        threading.Thread(target=self._drop_client, daemon=True,
                         name=f"vram-steward-host-{self.key}-close").start()

    # -- the thread -------------------------------------------------------------
    def _run(self) -> None:
        delay = RETRY_FIRST_S
        while not self._stop.is_set():
            # Retries stay "disconnected since …", with the last reason, until one works.
            why = None
            try:
                client = self._connect(self.config)
                with self._lock:
                    self._client = client
                if self._stop.is_set():
                    break
                sent = time.time()
                hello = client.hello()
                now = time.time()
                with self._lock:
                    self._name = str(hello.get("host") or "") or None
                    self._user = str(hello.get("user") or "") or None
                self._read_policy(client)
                theirs = hello.get("time")
                skew = (sent + now) / 2 - theirs if isinstance(theirs, (int, float)) else 0.0
                with self._lock:  # under a second is the network's, not the clocks'
                    self._skew = skew if abs(skew) > 1 else 0.0
                self._read_seed(client, self._skew)
                for snapshot in client.snapshots(on_frame=self._heard_now):
                    if self._receive(snapshot):
                        delay = RETRY_FIRST_S
                    if self._stop.is_set():
                        break
            except RemoteError as exc:
                why = advice(exc, self.config.address)
            except ValueError as exc:
                why = str(exc)
            except Exception as exc:  # a bug must show as a reason, not end the thread
                log.exception("host %s", self.key)
                why = f"{type(exc).__name__}: {exc}"
            self._drop_client()
            if self._stop.is_set():
                break
            with self._lock:
                stalled, self._stalled = self._stalled, False
            if not stalled:  # the heartbeat's reason says more than the closed stream's
                self._set_state(DISCONNECTED, why or "the connection ended")
            self._stop.wait(delay)
            delay = min(delay * 2, RETRY_MAX_S)
        self._drop_client()  # one made while the link was closing is not left open

    def _read_seed(self, client: RemoteClient, skew_s: float) -> None:
        """The host's stored history: the last ``seed_s`` on the first
        connection, then what it kept since the last snapshot that arrived
        (the window appends it; a server that was down kept nothing: a gap).
        ``skew_s``: this machine's clock minus the host's.  Never a reason
        not to stream."""
        since_s = self._seed_s
        if self._seeded:
            with self._lock:
                latest = self._latest
            if latest is None:
                return
            since_s = min(self._seed_s, max(1.0, time.time() - latest.timestamp + 5.0))
        self._seeded = True
        try:
            records = client.history(since_s, timeout_s=SEED_TIMEOUT_S)
            seed = stored_from_records(records, self.key, skew_s)
        except RemoteError as exc:  # none kept (the demo, --no-history), or too slow
            log.info("host %s: no stored history: %s", self.key, exc)
            return
        with self._lock:
            self._seed = seed

    def _read_policy(self, client: RemoteClient) -> None:
        """The server's pressure policy (an older server without the verb: none known)."""
        try:
            policy: RemotePolicy | None = client.policy()
        except RemoteUnavailable:
            raise
        except RemoteError as exc:
            log.info("host %s: no pressure policy to show: %s", self.key, exc)
            policy = None
        with self._lock:
            self._policy = policy

    def set_policy(self, **changes: Any) -> RemotePolicy:
        """Change the server's pressure policy and read it back (blocking: a
        worker thread's call, never the GUI's); RemoteError with the server's
        refusal, RemoteUnavailable while not connected."""
        policy = self.client().set_policy(**changes)  # the policy as it now runs
        with self._lock:
            self._policy = policy
        return policy

    def _heard_now(self) -> None:
        self._heard = time.monotonic()

    def _receive(self, snapshot: Snapshot) -> bool:
        """Keep ``snapshot`` under this machine's clocks; True when it holds GPUs."""
        wall, mono = time.time(), time.monotonic()
        skew = wall - snapshot.timestamp  # the host's stamps onto this machine's clock
        gpus = tuple(qualify_gpu(g, self.key) for g in snapshot.gpus)
        events = [dataclasses.replace(e, time=e.time + skew, display_id=None if e.display_id
                                      is None else qualified_id(e.display_id, self.key))
                  for e in snapshot.model_events]
        decisions = [dataclasses.replace(u, decision=dataclasses.replace(
            u.decision, time=u.decision.time + skew)) for u in snapshot.policy_decisions]
        ooms = [dataclasses.replace(r, time=r.time + skew, gpu=None if r.gpu is None
                                    else qualified_id(r.gpu, self.key))
                for r in snapshot.oom_reports]
        diagnoses = tuple(dataclasses.replace(
            d, gpu=None if d.gpu is None else qualified_id(d.gpu, self.key),
            since=None if d.since is None else d.since + skew) for d in snapshot.diagnoses)
        kept = dataclasses.replace(snapshot, timestamp=wall, monotonic=mono, gpus=gpus,
                                   diagnoses=diagnoses, model_events=(),
                                   policy_decisions=(), oom_reports=(), hosts=())
        with self._lock:
            self._latest, self._fresh, self._heard, self._new_at = kept, True, mono, mono
            self._events.extend(events)
            self._decisions.extend(decisions)
            self._ooms.extend(ooms)
            del self._events[:-256], self._decisions[:-256], self._ooms[:-64]
            if self._state != CONNECTED:
                self._state, self._since, self._reason = CONNECTED, wall, None
                self._stalled = False
        return bool(gpus)

    def _set_state(self, state: str, why: str | None) -> None:
        with self._lock:
            if state != self._state:
                self._since = time.time()
            self._state, self._reason = state, why

    def _drop_client(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:
                log.exception("closing host %s", self.key)


class LinkedAgents(RemoteAgents):
    """The host's agents for the controller: each action goes to the server
    through the link's current connection, or is refused with the link's
    reason while there is none."""

    def __init__(self, link: HostLink) -> None:
        super().__init__(link.client)
        self.link = link

    def reports(self) -> dict[int, Any]:
        latest = self.link.latest()
        return dict(latest.agents) if latest is not None else {}

    def close(self) -> None:
        pass  # the link owns the connection
