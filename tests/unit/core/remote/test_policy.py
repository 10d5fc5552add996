"""A remote host's pressure policy is its server's: read and changed through
the client, shown on the host's view, never run a second time here."""

from __future__ import annotations

import time

import pytest

from app.core.control.controller import AppController
from app.core.control.hosts import HostControllers
from app.core.remote.address import parse_address
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteError
from app.core.remote.fleet import Fleet
from app.core.remote.host_config import HostConfig
from app.core.remote.http_transport import HttpTransport
from app.core.remote.policy import RemotePolicy
from tests.unit.core.remote.conftest import TOKEN


def client_of(server, token=TOKEN):
    return RemoteClient(HttpTransport(parse_address(server.url), token, timeout_s=5))


def wait_for(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_the_client_reads_and_changes_the_servers_policy(demo_server, demo_engine):
    client = client_of(demo_server)
    seen = client.policy()
    cfg = demo_engine.collector.policy.config
    assert seen == RemotePolicy(cfg.enabled, cfg.threshold, cfg.rearm, cfg.min_idle_s,
                                cfg.min_interval_s, available=True, may_change=True)
    now = client.set_policy(enabled=False, threshold=0.8, min_idle_s=120.0)
    assert (now.enabled, now.threshold, now.min_idle_s) == (False, 0.8, 120.0)
    assert demo_engine.collector.policy.config.threshold == 0.8
    assert now.text() == "Auto-unload off"
    assert client.set_policy(enabled=True).text() == "Auto-unload on at 80 %, idle ≥ 2 min"
    client.close()


def test_a_refusal_comes_back_with_the_servers_reason(demo_server, demo_engine):
    client = client_of(demo_server)
    before = demo_engine.collector.policy.config
    with pytest.raises(RemoteError, match="'threshold' must be between") as info:
        client.set_policy(threshold=2.0)
    assert info.value.code == "bad_request"
    assert demo_engine.collector.policy.config == before
    with pytest.raises(TypeError):
        client.set_policy(treshold=0.5)
    reader = client_of(demo_server, token=None)  # the server's open read access
    assert reader.policy().may_change is False
    with pytest.raises(RemoteError) as info:
        reader.set_policy(enabled=False)
    assert info.value.code == "unauthorized"
    client.close()
    reader.close()


def test_a_host_view_carries_its_servers_policy_and_follows_a_change(demo_server,
                                                                     demo_engine):
    fleet = Fleet([HostConfig(demo_server.url)], connect_with=lambda c: client_of(demo_server))
    fleet.start()
    try:
        view = wait_for(lambda: next((v for v in fleet.views()
                                      if v.connected and v.policy is not None), None))
        assert view.policy.enabled == demo_engine.collector.policy.config.enabled
        assert view.policy.may_change
        (key,) = fleet.keys()
        changed = fleet.set_policy(key, enabled=True, threshold=0.7, min_idle_s=60.0)
        assert changed.threshold == 0.7 and demo_engine.collector.policy.config.threshold == 0.7
        assert fleet.views()[0].policy == changed
        with pytest.raises(RemoteError):
            fleet.set_policy("nowhere", enabled=False)
    finally:
        fleet.close()


def test_a_remote_host_gets_no_policy_runner_here():
    local = AppController(lambda: None, policy_runner=lambda: "the local runner")
    hosts = HostControllers(local, lambda host: None)
    remote = hosts._made("gpu1")
    assert remote.policy_runner() is None
    assert hosts.of("").policy_runner() == "the local runner"
