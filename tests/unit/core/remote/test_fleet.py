"""Every remote host the window watches (``Fleet``): hosts added, changed and
removed while it runs without blocking its caller, each host's failure its
own, and the watchdog that ends a silent host's connection."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.monitor.hosts import CONNECTED, CONNECTING, DISCONNECTED
from app.core.remote import fleet as fleet_module
from app.core.remote import link as link_module
from app.core.remote.errors import RemoteUnavailable
from app.core.remote.fleet import Fleet
from app.core.remote.host_config import HostConfig
from tests.unit.core.remote.test_link import FakeClient, snapshot, wait_for

GPU1, GPU2, GPU3 = HostConfig("ssh://gpu1"), HostConfig("https://gpu2:8443"), \
    HostConfig("ssh://gpu3")


class Servers:
    """``connect``: a fresh client per connection of each reachable host."""

    def __init__(self, down: tuple[str, ...] = (), held: threading.Event | None = None
                 ) -> None:
        self.down = set(down)
        self.held = held
        self.clients: dict[str, list[FakeClient]] = {}
        self.lock = threading.Lock()

    def __call__(self, config: HostConfig) -> FakeClient:
        if config.url in self.down:
            raise RemoteUnavailable(f"cannot reach {config.url}: connection refused")
        client = FakeClient(held=self.held)
        client.feed.put(snapshot(1))
        with self.lock:
            self.clients.setdefault(config.url, []).append(client)
        return client

    def of(self, config: HostConfig) -> list[FakeClient]:
        with self.lock:
            return list(self.clients.get(config.url, []))


@pytest.fixture
def fleets():
    made: list[Fleet] = []

    def make(*args, **kw) -> Fleet:
        fleet = Fleet(*args, **kw)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


def states(fleet: Fleet) -> dict[str, str]:
    return {v.key: v.state for v in fleet.views()}


def test_each_host_connects_on_its_own_and_one_down_changes_only_its_view(fleets):
    servers = Servers(down=(GPU2.url,))
    fleet = fleets([GPU1, GPU2, GPU3], servers)
    assert states(fleet) == {"gpu1": CONNECTING, "gpu2:8443": CONNECTING, "gpu3": CONNECTING}
    assert fleet.keys() == ["gpu1", "gpu2:8443", "gpu3"]
    fleet.start()
    wait_for("both up, one down", lambda: states(fleet) == {
        "gpu1": CONNECTED, "gpu2:8443": DISCONNECTED, "gpu3": CONNECTED})
    views = {v.key: v for v in fleet.views()}
    assert "connection refused" in views["gpu2:8443"].reason
    assert views["gpu2:8443"].snapshot is None
    assert [g.display_id for g in views["gpu3"].snapshot.gpus] == ["0@gpu3", "1@gpu3"]
    assert fleet.directory("gpu1") is fleet.link("gpu1").agents
    assert fleet.directory("gpu9") is None and fleet.link("gpu9") is None


def test_set_hosts_keeps_unchanged_links_and_closes_the_others_without_blocking(fleets):
    held = threading.Event()
    servers = Servers(held=held)  # closing waits until the test lets it (as ssh may)
    fleet = fleets([GPU1, GPU2], servers)
    fleet.start()
    wait_for("connected", lambda: set(states(fleet).values()) == {CONNECTED})
    kept, dropped = fleet.link("gpu1"), fleet.link("gpu2:8443")
    (gpu2_client,) = servers.of(GPU2)
    started = time.monotonic()
    fleet.set_hosts([GPU1, GPU3])
    assert time.monotonic() - started < 5.0, "set_hosts waited on a connection to close"
    assert not gpu2_client.closed.is_set()
    assert fleet.link("gpu1") is kept and fleet.link("gpu2:8443") is None
    assert fleet.keys() == ["gpu1", "gpu3"]
    held.set()
    assert gpu2_client.closed.wait(5) and dropped.join(5)
    wait_for("gpu3 connected", lambda: states(fleet) == {"gpu1": CONNECTED, "gpu3": CONNECTED})
    assert len(servers.of(GPU1)) == 1  # never reconnected
    # the same host with other settings is a new connection
    changed = HostConfig("ssh://gpu1", remote_command="~/venv/bin/vram-steward")
    fleet.set_hosts([changed, GPU3])
    assert fleet.link("gpu1") is not kept and fleet.link("gpu1").config == changed
    assert servers.of(GPU1)[0].closed.wait(5)
    wait_for("gpu1 again", lambda: states(fleet).get("gpu1") == CONNECTED)


def test_hosts_set_before_the_start_connect_at_the_start(fleets):
    servers = Servers()
    fleet = fleets((), servers)
    fleet.set_hosts([GPU1])
    time.sleep(0.1)
    assert servers.of(GPU1) == [] and states(fleet) == {"gpu1": CONNECTING}
    fleet.start()
    wait_for("connected", lambda: states(fleet) == {"gpu1": CONNECTED})
    fleet.close()
    assert servers.of(GPU1)[0].closed.wait(5)
    assert fleet.views() == ()


def test_two_hosts_of_one_name_are_told_apart(fleets):
    fleet = fleets([HostConfig("ssh://me@gpu1"), HostConfig("ssh://you@gpu1")], Servers())
    assert fleet.keys() == ["gpu1", "you@gpu1"]
    fleet.start()
    wait_for("connected", lambda: set(states(fleet).values()) == {CONNECTED})
    ids = [g.display_id for v in fleet.views() for g in v.snapshot.gpus]
    assert ids == ["0@gpu1", "1@gpu1", "0@you@gpu1", "1@you@gpu1"]


def test_the_watchdog_ends_a_silent_hosts_connection_and_leaves_the_others(
        fleets, monkeypatch):
    monkeypatch.setattr(fleet_module, "WATCH_EVERY_S", 0.05)
    monkeypatch.setattr(link_module, "HEARTBEAT_S", 1.0)
    servers = Servers()
    fleet = fleets([GPU1, GPU2], servers)
    fleet.start()
    wait_for("connected", lambda: set(states(fleet).values()) == {CONNECTED})
    (talking,) = servers.of(GPU2)
    stop = threading.Event()

    def ping() -> None:  # gpu2 keeps sending; gpu1 has gone quiet
        while not stop.wait(0.1):
            talking.feed.put("ping")

    pinger = threading.Thread(target=ping, daemon=True)
    pinger.start()
    try:
        view = wait_for("gpu1 given up", lambda: next(
            (v for v in fleet.views() if v.key == "gpu1" and v.state == DISCONNECTED
             and v.reason.startswith("stopped answering")), None))
        assert view.snapshot is not None  # its last figures stay
        assert servers.of(GPU1)[0].closed.is_set()
        assert states(fleet)["gpu2:8443"] == CONNECTED and not talking.closed.is_set()
        wait_for("gpu1 back", lambda: states(fleet)["gpu1"] == CONNECTED)
    finally:
        stop.set()
        pinger.join()
