"""End to end: a real Prometheus scrapes two ``serve`` hosts; PromQL gives the truth.

Two ``python -m app serve`` processes, each on its own ABI-level fake of
libnvidia-ml (different GPU counts and byte counts; processes are real
helper processes so psutil sees them).  Host A has an agent (a fake one, in
a real process on its GPU 0) that later reports an OOM; host B takes reads
only with a Bearer token, which Prometheus sends from a ``credentials_file``.
``/usr/bin/prometheus`` scrapes both every second, and the test asks it:

* used, total and reserved bytes per GPU uuid and memory per process equal
  the fakes' figures byte for byte; the agent's allocator and model figures
  equal what it reported; the OOM is counted once, on the GPU it happened on;
* every query of the Grafana dashboard returns data;
* ``promtool check metrics`` accepts a real server's ``/metrics``.

Skips with the reason where the prometheus package or the fake is missing.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.core.agents.demo import DemoAgents
from app.core.diagnosis.types import KINDS
from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import demo_source
from app.core.serve.metrics import metrics_registry, render
from app.core.serve.state import ServeState
from tests.e2e import prometheus_fleet as pf
from tests.e2e.prometheus_fleet import Prometheus, Serve, as_promql, dashboard_queries, wait_for
from tests.fakes import nvml_abi
from tests.fakes.fake_agent import FakeAgent
from tests.fakes.nvml_abi import FakeNvml, Helpers, expected_processes

needs_prometheus = pytest.mark.skipif(pf.unavailable_reason() is not None,
                                      reason=pf.unavailable_reason() or "")


class OomAgent(FakeAgent):
    """A fake agent whose report carries the OOM captures in ``ooms``, as a real
    agent's does after its process hit CUDA out of memory."""

    ooms: list[dict[str, Any]]

    def _answer(self, rid: Any, method: str, params: dict) -> dict:
        answer = super()._answer(rid, method, params)
        if method == "report" and getattr(self, "ooms", None):
            answer["result"]["ooms"] = list(self.ooms)
        return answer


def oom_capture(request: int) -> dict[str, Any]:
    return {"seq": 1, "time": time.time(), "device": 0, "uuid": None, "request": request,
            "limit": None, "free": None, "stats": {}, "thread": "MainThread"}


@dataclass
class Fleet:
    prometheus: Prometheus
    a: Serve  # agent, OOM, no token
    b: Serve  # token-protected
    agent: OomAgent
    started: float


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    reason = pf.unavailable_reason()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    lib = nvml_abi.build()
    runtime = pf.private_dir("vsrt-")
    serves: list[Serve] = []
    prometheus = None
    with Helpers(5) as pids:
        agent = OomAgent(sock_dir=str(runtime), own_process=True).with_models()
        agent.allocated, agent.reserved = 1_234_567_891, 2_109_876_543
        try:
            agent.register(str(runtime))
            fake_a = nvml_abi.server([[pids[0], pids[1], agent.pid], [pids[2]]], seed=11)
            fake_b = nvml_abi.server([[pids[3]], [pids[4]], []], seed=29)
            fake_b.gpus[2].total -= 17 * 4096  # three cards, none the size of A's
            serves.append(Serve(fake_a, lib, runtime))
            serves.append(Serve(fake_b, lib, pf.private_dir("vsrt-"),
                                token=secrets.token_urlsafe(24)))
            a, b = serves
            prometheus = Prometheus([(a.instance, None), (b.instance, b.token)])
            world = Fleet(prometheus, a, b, agent, started)
            settle(world)
            yield world
        finally:
            if prometheus is not None:
                prometheus.stop()
            for serve in serves:
                serve.stop()
            agent.close()
            subprocess.run(["rm", "-rf", str(runtime)], check=False)


def settle(world: Fleet) -> None:
    """Both hosts scraped, the agent seen; then the agent reports an OOM and
    Prometheus sees the counter rise (the 0 it had before makes the rise visible)."""
    prom, a, b = world.prometheus, world.a, world.b

    def up() -> bool:
        return all(prom.value(f'vram_steward_up{{instance="{s.instance}"}}') == "1"
                   for s in (a, b))

    try:
        wait_for("both hosts up in Prometheus", up, timeout=20.0, every=0.25)
        wait_for("the agent's series", lambda: prom.query(
            f'vram_steward_torch_reserved_bytes{{instance="{a.instance}"}}'), 20.0, 0.25)
        wait_for("host A's OOM counter at 0", lambda: prom.value(
            f'vram_steward_oom_total{{instance="{a.instance}", gpu="0"}}') == "0", 20.0, 0.25)
        world.agent.ooms = [oom_capture(request=3 * 1024 ** 3 + 5)]
        wait_for("the OOM in increase()", lambda: prom.query(
            f'increase(vram_steward_oom_total{{instance="{a.instance}"}}[1m]) > 0'), 20.0, 0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nserve A:\n{a.log()}\nserve B:\n{b.log()}\n"
                             f"prometheus:\n{prom.log()}") from None


def by_label(prom: Prometheus, expr: str, label: str) -> dict[str, str]:
    return {r["metric"][label]: r["value"][1] for r in prom.query(expr)}


# ------------------------------------------------------------------- the truth

@needs_prometheus
def test_gpu_memory_per_uuid_equals_the_fakes_byte_for_byte(fleet):
    prom = fleet.prometheus
    for serve in (fleet.a, fleet.b):
        fake: FakeNvml = serve.fake
        where = f'instance="{serve.instance}"'
        for field, metric in (("used", "used"), ("total", "total"), ("reserved", "reserved")):
            got = by_label(prom, f"vram_steward_gpu_memory_{metric}_bytes{{{where}}}", "uuid")
            assert got == {g.uuid: str(getattr(g, field)) for g in fake.gpus}, (serve.instance,
                                                                                field)
        gpus = by_label(prom, f"vram_steward_gpu_info{{{where}}}", "uuid")
        assert set(gpus) == {g.uuid for g in fake.gpus}
        named = prom.query(f"vram_steward_gpu_info{{{where}}}")
        assert {(r["metric"]["gpu"], r["metric"]["name"], r["metric"]["driver_version"])
                for r in named} == {(str(i), g.name, fake.driver_version)
                                    for i, g in enumerate(fake.gpus)}
    assert len(fleet.a.fake.gpus) != len(fleet.b.fake.gpus)


@needs_prometheus
def test_process_memory_per_pid_equals_the_fakes_byte_for_byte(fleet):
    prom = fleet.prometheus
    for serve in (fleet.a, fleet.b):
        for index, gpu in enumerate(serve.fake.gpus):
            want = {str(pid): str(p["gpu_memory"])
                    for pid, p in expected_processes(serve.fake, index).items()}
            got = by_label(prom, f'vram_steward_process_gpu_memory_bytes{{'
                                 f'instance="{serve.instance}", uuid="{gpu.uuid}"}}', "pid")
            assert got == want, (serve.instance, index)
            labels = prom.query(f'vram_steward_process_gpu_memory_bytes{{'
                                f'instance="{serve.instance}", uuid="{gpu.uuid}"}}')
            assert all(r["metric"]["gpu"] == str(index) for r in labels)


@needs_prometheus
def test_the_agents_allocator_models_and_oom_reach_prometheus(fleet):
    prom, a, agent = fleet.prometheus, fleet.a, fleet.agent
    gpu0 = a.fake.gpus[0]
    where = f'instance="{a.instance}", pid="{agent.pid}"'
    placed = f'{where}, gpu="0", uuid="{gpu0.uuid}"'
    assert prom.value(f"vram_steward_torch_allocated_bytes{{{placed}}}") == str(agent.allocated)
    assert prom.value(f"vram_steward_torch_reserved_bytes{{{placed}}}") == str(agent.reserved)
    assert prom.value(f"vram_steward_torch_cache_bytes{{{placed}}}") == \
        str(agent.reserved - agent.allocated)
    resident = sum(m["param_bytes"] + m["buffer_bytes"] for m in agent.models or ())
    assert prom.value(f'vram_steward_model_bytes{{{where}, state="resident"}}') == str(resident)
    assert prom.value(f'vram_steward_agents{{instance="{a.instance}"}}') == "1"
    assert prom.value(f'vram_steward_oom_total{{instance="{a.instance}", gpu="0", '
                      f'uuid="{gpu0.uuid}"}}') == "1"
    assert prom.value(f'sum(vram_steward_oom_total{{instance="{a.instance}"}})') == "1"
    assert prom.value(f'sum(vram_steward_oom_total{{instance="{fleet.b.instance}"}})') == "0"
    assert prom.value(f'vram_steward_diagnoses{{instance="{a.instance}", kind="oom", '
                      f'severity="critical"}}') == "1"
    kinds = by_label(prom, f'sum by (kind) (vram_steward_diagnoses{{instance="{fleet.b.instance}"}})',
                     "kind")
    assert set(kinds) >= set(KINDS)


@needs_prometheus
def test_reads_of_the_token_protected_host_need_the_token(fleet):
    b = fleet.b
    status, _ = pf.http_get(f"{b.url}/metrics")
    assert status == 401
    status, _ = pf.http_get(f"{b.url}/metrics", token="not-" + (b.token or ""))
    assert status in (401, 403)
    assert fleet.prometheus.value(f'up{{instance="{b.instance}"}}') == "1"


# --------------------------------------------------------------- the dashboard

@needs_prometheus
def test_every_dashboard_query_returns_data(fleet):
    queries = dashboard_queries()
    assert len(queries) >= 20
    empty = []
    for where, expr in queries:
        promql, label = as_promql(expr)
        result = fleet.prometheus.query(promql)
        if not result or (label and not all(label in r["metric"] for r in result)):
            empty.append(f"{where}: {promql}")
    assert not empty, "no data:\n" + "\n".join(empty)
    print(f"\nPrometheus test: {time.monotonic() - fleet.started:.1f} s up to here")


NAME = re.compile(r"\bvram_steward_\w+")


def test_dashboard_queries_name_only_exported_metrics_and_filter_by_host():
    """Without Prometheus: every name the dashboard uses is one ``/metrics`` exports,
    and every query follows the ``instance`` variable (per-GPU ones ``gpu`` too,
    except the models', which have no GPU)."""
    source = demo_source()
    source.open(elapsed=30.0)
    collector = Collector(source, agents=DemoAgents(source))
    collector.open()
    snapshot = collector.collect()
    collector.close()
    oom = {(snapshot.gpus[0].display_id, snapshot.gpus[0].uuid or ""): 1}
    body, _ = render(metrics_registry(lambda: ServeState(snapshot, 1, oom, 1.0)), None)
    exported = set(re.findall(r"^(vram_steward_\w+)", body.decode(), re.MULTILINE))
    queries = dashboard_queries()
    for where, expr in queries:
        names = set(NAME.findall(expr))
        assert names and names <= exported, (where, names - exported)
        assert 'instance=~"$instance"' in expr or where.startswith("variable 'instance'"), where
        per_gpu = {n for n in names if n.startswith(("vram_steward_gpu_memory",
                                                     "vram_steward_process_",
                                                     "vram_steward_torch_"))}
        if per_gpu and not where.startswith("panel 'Hosts'") and "per host" not in where:
            assert 'gpu=~"$gpu"' in expr, where


# ---------------------------------------------------------------- promtool

@needs_prometheus
def test_promtool_accepts_a_real_servers_metrics(fleet):
    for serve in (fleet.a, fleet.b):
        status, body = serve.metrics()
        assert status == 200
        assert b"vram_steward_process_gpu_memory_bytes" in body
        result = subprocess.run([pf.PROMTOOL, "check", "metrics"], input=body,
                                capture_output=True, timeout=30)
        assert result.returncode == 0, (result.stdout + result.stderr).decode()
