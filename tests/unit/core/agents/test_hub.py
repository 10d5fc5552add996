"""AgentHub: registry scanning, per-agent polling, a hung agent delays nobody."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from app.core.agents.hub import AgentHub
from tests.fakes.fake_agent import FakeAgent
from tests.unit.core.conftest import wait_for

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


def test_hub_polls_every_agent_and_a_hung_one_delays_nobody(runtime):
    good = FakeAgent(sock_dir=runtime, own_process=True)
    hung = FakeAgent(sock_dir=runtime, own_process=True)
    hung.hang = True
    good.register(runtime)
    hung.register(runtime)
    hub = AgentHub(runtime, period_s=0.05, registry_period_s=0.1)
    hub.report_timeout_s = 0.3
    try:
        hub.start()
        assert {e.pid for e in hub.entries()} == {good.pid, hung.pid}
        assert wait_for(lambda: good.pid in hub.reports())
        # the good agent keeps being polled at its own period despite the hung one
        first = hub.reports()[good.pid].received_at
        time.sleep(0.5)
        later = hub.reports()[good.pid].received_at
        assert later - first >= 0.3
        assert hung.pid not in hub.reports()
        assert wait_for(lambda: "timed out" in hub.errors().get(hung.pid, ""))
        # reports() is a copy
        copy = hub.reports()
        copy.clear()
        assert hub.reports()
    finally:
        hub.close()
        good.close()
        hung.close()


def test_hub_forgets_agents_whose_entry_disappears_and_prunes_dead_ones(runtime):
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    proc = fake.process
    path = fake.register(runtime)
    hub = AgentHub(runtime, period_s=0.05, registry_period_s=0.05)
    try:
        hub.start()
        assert wait_for(lambda: proc.pid in hub.reports())
        proc.kill()
        proc.wait()
        assert wait_for(lambda: proc.pid not in hub.reports())
        assert wait_for(lambda: not os.path.exists(path))
        assert hub.entries() == []
    finally:
        hub.close()
        fake.close()


def test_hub_picks_up_new_agents_and_reconnects(runtime):
    hub = AgentHub(runtime, period_s=0.05, registry_period_s=0.05)
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    try:
        hub.start()
        assert hub.reports() == {}
        fake.register(runtime)
        assert wait_for(lambda: fake.pid in hub.reports())
        assert fake.connections == 1  # one persistent connection
        fake.reserved = 9000
        assert wait_for(lambda: hub.reports()[fake.pid].devices[0].reserved == 9000)
    finally:
        hub.close()
        fake.close()


def test_free_cache_and_gc_from_other_threads(runtime):
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    fake.register(runtime)
    hub = AgentHub(runtime, period_s=0.05)
    try:
        hub.start()
        results = []
        threads = [threading.Thread(target=lambda: results.append(hub.collect_garbage(fake.pid)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert [r["ok"] for r in results] == [True] * 4
        res = hub.free_cache(fake.pid, timeout_s=2.0)
        assert res.ok and res.freed == 3000
        missing = hub.free_cache(1, timeout_s=1.0)
        assert not missing.ok and "no agent" in missing.error
        assert not hub.collect_garbage(1)["ok"]
    finally:
        hub.close()
        fake.close()


def test_free_cache_without_start_reads_the_registry(runtime):
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    fake.register(runtime)
    hub = AgentHub(runtime)
    try:
        assert [e.pid for e in hub.entries()] == [fake.pid]
        assert hub.free_cache(fake.pid, 2.0).ok
    finally:
        hub.close()
        fake.close()


def test_close_is_prompt_and_safe_twice(runtime):
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    fake.hang = True
    fake.register(runtime)
    hub = AgentHub(runtime, period_s=0.05)
    hub.start()
    time.sleep(0.2)
    started = time.monotonic()
    hub.close()
    hub.close()
    assert time.monotonic() - started < hub.report_timeout_s + 1.0
    fake.close()


def test_reports_keep_coming_after_the_agent_rewrites_its_registry_file(runtime):
    """An agent rewrites its registry file when torch loads (the ``run``
    launcher's case: the agent starts first); the hub keeps the same worker
    and must keep taking its reports."""
    fake = FakeAgent(sock_dir=runtime, own_process=True)
    path = fake.register(runtime)
    hub = AgentHub(runtime, period_s=0.05, registry_period_s=0.05)
    try:
        hub.start()
        assert wait_for(lambda: fake.pid in hub.reports())
        with open(path, "rb") as fh:
            data = fh.read()
        time.sleep(0.02)
        with open(path, "wb") as fh:  # same agent, new file contents
            fh.write(data.replace(b'"train.py"', b'"train.py", "--resume"'))
        assert wait_for(lambda: any("--resume" in e.argv for e in hub.entries()))
        fake.reserved = 7777
        assert wait_for(lambda: hub.reports()[fake.pid].devices[0].reserved == 7777)
    finally:
        hub.close()
        fake.close()
