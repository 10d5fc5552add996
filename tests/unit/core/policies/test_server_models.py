"""The pressure policy and the alerts with model servers in the snapshot: an
idle Ollama model is unloaded through the directory, a busy one never, a
server that says nothing about use never automatically; a vLLM pool moves
the near-limit alert to what it leaves."""

from __future__ import annotations

import dataclasses

from app.core.agents.types import ModelActionResult
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.policies.alerts import AlertPolicy
from app.core.policies.pressure import NOTHING_ELIGIBLE, UNLOAD, PolicyRunner, PressurePolicy
from app.core.servers.types import ModelServer, Reservation, ServerModel
from tests.fakes.directories import EmptyDirectory

GiB = 1024**3
NOW = 2_000_000.0
TOTAL = 25_757_220_864


def snap(servers: tuple[ModelServer, ...], used: int, procs: tuple[ProcessSample, ...],
         mono: float = 1000.0) -> Snapshot:
    gpu = GpuSample(0, "NVIDIA GeForce RTX 4090", "GPU-1", TOTAL, used, TOTAL - used,
                    processes=procs)
    return Snapshot(NOW, mono, "nvml", "580", (gpu,), servers=servers)


def ollama(busy: bool | None = False, idle_s: float | None = 900.0, can_unload: bool = True,
           kind: str = "ollama", **kw) -> ModelServer:
    model = ServerModel("qwen2.5:7b", "qwen2.5:7b", 5_012_345_678, figure="size_vram", gpu=0,
                        idle_since=None if idle_s is None else NOW - idle_s, busy=busy)
    return dataclasses.replace(ModelServer(
        kind, "Ollama" if kind == "ollama" else "LM Studio", 900, (900, 950),
        "ollama", "http://127.0.0.1:11434", "0.12.3", (model,), busy=busy,
        can_unload=can_unload, unload_note="keep_alive 0", reachable=True,
        reloads_on_use=True), **kw)


RUNNER = (ProcessSample(950, 5_400_000_000),)


def decide(server: ModelServer) -> list:
    policy = PressurePolicy()
    policy.evaluate(snap((server,), int(0.5 * TOTAL), RUNNER, mono=0.0))  # seen for 20 min
    return policy.evaluate(snap((server,), int(0.93 * TOTAL), RUNNER, mono=1200.0))


def test_an_idle_ollama_model_is_chosen_with_the_servers_own_bytes() -> None:
    (decision,) = decide(ollama())
    assert decision.kind == UNLOAD
    (action,) = decision.actions
    assert (action.pid, action.model, action.device) == (900, "qwen2.5:7b", "server")
    assert action.bytes == 5_012_345_678 and action.idle_s == 900.0
    assert "qwen2.5:7b (Ollama)" in decision.reason


def test_a_generating_model_is_never_chosen() -> None:
    (decision,) = decide(ollama(busy=True, idle_s=None))
    assert decision.kind == NOTHING_ELIGIBLE
    assert decision.skipped == ((900, "qwen2.5:7b", "qwen2.5:7b", "generating now"),)


def test_a_server_that_does_not_say_when_it_was_used_is_left_alone() -> None:
    (decision,) = decide(ollama(busy=None, idle_s=None, kind="lmstudio"))
    assert decision.kind == NOTHING_ELIGIBLE
    assert "idle time unknown" in decision.skipped[0][3]


def test_an_unload_that_does_not_come_back_or_another_users_server_is_by_hand_only() -> None:
    (decision,) = decide(ollama(reloads_on_use=False, label="AUTOMATIC1111"))
    assert decision.kind == NOTHING_ELIGIBLE
    assert "does not come back by itself" in decision.skipped[0][3]
    (decision,) = decide(ollama(owner="other", user="bob"))
    assert decision.skipped[0][3] == "another user's server (bob): unloaded by hand only"
    (decision,) = decide(ollama(owner="service"))  # the ollama service user's: the desktop's own
    assert decision.kind == UNLOAD


def test_a_model_idle_less_than_the_minimum_is_not_chosen() -> None:
    (decision,) = decide(ollama(idle_s=60.0))
    assert decision.kind == NOTHING_ELIGIBLE and "idle 60 s" in decision.skipped[0][3]


class Recording(EmptyDirectory):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def unload(self, pid, model, to="cpu", force=False, reason="manual", timeout_s=300.0):
        self.calls.append((pid, model, reason))
        return ModelActionResult(pid, model, True, outcome="freed",
                                 note="Ollama unloaded it: freed 5.0 GiB", freed_bytes=5 * GiB)


def test_the_runner_unloads_it_through_the_directory_and_logs_the_outcome() -> None:
    directory = Recording()
    runner = PolicyRunner(directory, synchronous=True)
    server = ollama()
    runner.observe(snap((server,), int(0.5 * TOTAL), RUNNER, mono=0.0))
    runner.observe(snap((server,), int(0.93 * TOTAL), RUNNER, mono=1200.0))
    assert directory.calls == [(900, "qwen2.5:7b", "pressure")]
    (done,) = [d for d in runner.decisions() if d.kind == UNLOAD]
    assert done.done and done.bytes_released == 5 * GiB
    assert "freed 5.0 GiB" in done.reason


def vllm(pool: int) -> tuple[ModelServer, tuple[ProcessSample, ...]]:
    server = ModelServer("vllm", "vLLM", 4242, (4242, 4250), "ada", "http://127.0.0.1:8000",
                         "0.11.0", reservation=Reservation(0.9, "vLLM reserves 90 %", 0.12),
                         reachable=True)
    return server, (ProcessSample(4250, pool),)


def test_a_vllm_pool_does_not_fire_the_near_limit_alert_by_itself() -> None:
    server, procs = vllm(int(0.9 * TOTAL))
    alerts = AlertPolicy().evaluate(snap((server,), int(0.92 * TOTAL), procs))
    assert [a for a in alerts if a.kind == "memory"] == []


def test_the_alert_fires_on_what_the_pool_leaves_and_says_so() -> None:
    server, procs = vllm(int(0.9 * TOTAL))
    others = (*procs, ProcessSample(77, int(0.095 * TOTAL)))
    (alert,) = [a for a in AlertPolicy().evaluate(snap((server,), int(0.995 * TOTAL), others))
                if a.kind == "memory"]
    assert "beside a server's reservation" in alert.title
    assert "vLLM (4242) reserves" in alert.message and "by design" in alert.message
    assert alert.level is not None and alert.level > 0.9
