"""Unloads through a server's API and their outcomes, measured on the
snapshots that follow: freed, pending, not freed, refused while busy."""

from __future__ import annotations

import threading
import time

import pytest

from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.servers import unloading
from app.core.servers.adapters.base import Ack, Adapter, Probe
from app.core.servers.directory import ServerDirectory
from app.core.servers.host import HostProc
from app.core.servers.http import LocalHttp, ServerHttpError
from app.core.servers.recognise import Found
from app.core.servers.types import FAILED, FREED, NOT_FREED, PENDING, REFUSED, ServerModel

MiB = 1024 * 1024
MODEL_BYTES = 3_187_654_321


class Scripted(Adapter):
    """An adapter whose server is a few fields a test changes."""

    kind = "ollama"
    deadline_s = 1.5

    def __init__(self) -> None:
        self.busy: bool | None = False
        self.loaded = True
        self.deferred = False
        self.fail: str | None = None
        self.unloads: list[str] = []

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        if self.fail:
            raise ServerHttpError(self.fail)
        models = (ServerModel("llama3.2:3b", "llama3.2:3b", MODEL_BYTES, figure="size_vram",
                              idle_since=time.time() - 600),) if self.loaded else ()
        return Probe(version="0.12.3", models=models, busy=self.busy, can_unload=True,
                     unload_note="unloads")

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        self.unloads.append(model.id)
        return Ack(True, "unloaded", deferred=self.deferred)


def host() -> list[HostProc]:
    return [HostProc(900, 1, "ollama", ("ollama", "serve")),
            HostProc(950, 900, "ollama", ("ollama", "runner", "--ollama-engine"))]


def snapshot(runner_bytes: int | None, sm: float | None = 0.0) -> Snapshot:
    procs = () if runner_bytes == 0 else (ProcessSample(950, runner_bytes, sm),)
    gpu = GpuSample(0, "NVIDIA GeForce RTX 4090", "GPU-1", 25_757_220_864,
                    1_000_000_000 + (runner_bytes or 0), None, processes=procs)
    return Snapshot(time.time(), time.monotonic(), "nvml", "580", (gpu,))


@pytest.fixture
def world():
    adapter = Scripted()
    directory = ServerDirectory(host_reader=host, adapters={"ollama": adapter}, keys=[])
    directory.refresh()
    return adapter, directory


def feed(directory: ServerDirectory, frames: list[Snapshot], every_s: float = 0.05
         ) -> threading.Thread:
    """Snapshots arriving as a sampler would give them, the last one repeated."""
    def run() -> None:
        for frame in frames:
            time.sleep(every_s)
            directory.current(frame)
        end = time.monotonic() + 3
        while time.monotonic() < end:
            time.sleep(every_s)
            directory.current(frames[-1])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_runner_child_memory_is_the_servers_and_its_model_gets_that_gpu(world) -> None:
    _adapter, directory = world
    (server,) = directory.current(snapshot(MODEL_BYTES + 300 * MiB))
    assert (server.kind, server.pid, server.pids) == ("ollama", 900, (900, 950))
    assert server.models[0].gpu == 0 and server.models[0].busy is False
    assert directory.owner(950) is server


def test_freed_with_the_bytes_nvml_saw(world) -> None:
    adapter, directory = world
    directory.current(snapshot(MODEL_BYTES + 300 * MiB))
    feed(directory, [snapshot(MODEL_BYTES + 300 * MiB), snapshot(0)])
    done = unloading.unload(directory, 950, "llama3.2:3b")
    assert done.outcome == FREED, done.reason
    assert done.freed_bytes == MODEL_BYTES + 300 * MiB
    assert "freed 3.3 GiB" in done.reason and adapter.unloads == ["llama3.2:3b"]


def test_not_freed_when_nvml_shows_no_drop_by_the_deadline(world) -> None:
    adapter, directory = world
    directory.current(snapshot(MODEL_BYTES))
    feed(directory, [snapshot(MODEL_BYTES - 10 * MiB)])
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome == NOT_FREED
    assert "held outside what the server manages" in done.reason
    assert done.deadline_s == Scripted.deadline_s and done.seconds >= Scripted.deadline_s


def test_pending_when_the_server_said_it_frees_later(world) -> None:
    adapter, directory = world
    adapter.deferred = True
    directory.current(snapshot(MODEL_BYTES))
    feed(directory, [snapshot(MODEL_BYTES)])
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome == PENDING and done.ok


def test_refused_while_generating_and_nothing_is_sent(world) -> None:
    adapter, directory = world
    adapter.busy = True
    directory.current(snapshot(MODEL_BYTES))
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome == REFUSED and "generating now" in done.reason
    assert adapter.unloads == []


def test_the_runner_busy_on_its_sms_counts_as_generating_when_the_api_says_nothing(world
                                                                                   ) -> None:
    adapter, directory = world
    adapter.busy = None
    directory.refresh()
    (server,) = directory.current(snapshot(MODEL_BYTES, sm=63.0))
    assert server.models[0].busy is True and server.models[0].idle_since is None
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome == REFUSED and adapter.unloads == []


def test_unknown_model_unknown_process_and_an_api_that_fails(world) -> None:
    adapter, directory = world
    directory.current(snapshot(MODEL_BYTES))
    assert unloading.unload(directory, 900, "mistral").outcome == REFUSED
    assert unloading.unload(directory, 12345, "llama3.2:3b").outcome == REFUSED
    adapter.fail = "no answer in 2 s"
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome == FAILED and "no answer in 2 s" in done.reason
    assert adapter.unloads == []


def test_a_probe_error_is_shown_and_its_models_are_not(world) -> None:
    adapter, directory = world
    adapter.fail = "connection refused (not listening there)"
    directory.refresh()
    (server,) = directory.current(snapshot(MODEL_BYTES))
    assert server.models == () and not server.reachable
    assert server.error == "connection refused (not listening there)"


def test_nvml_without_per_process_figures_measures_the_gpu(world) -> None:
    """WDDM: the runner is listed with no bytes; the GPU's used memory is the measure."""
    _adapter, directory = world
    (server,) = directory.current(snapshot(None))
    assert server.models[0].gpu == 0  # listed there, bytes unknown: still its GPU
    feed(directory, [snapshot(None), snapshot(0)])
    done = unloading.unload(directory, 900, "llama3.2:3b")
    assert done.outcome in (FREED, NOT_FREED)
    assert done.before_bytes is not None


def test_a_server_that_holds_an_unload_until_idle_gets_a_manual_one_as_pending(world) -> None:
    adapter, directory = world
    adapter.busy, adapter.defers_while_busy = True, True
    directory.current(snapshot(MODEL_BYTES))
    automatic = unloading.unload(directory, 900, "llama3.2:3b", automatic=True)
    assert automatic.outcome == REFUSED and adapter.unloads == []
    feed(directory, [snapshot(MODEL_BYTES)])
    manual = unloading.unload(directory, 900, "llama3.2:3b")
    assert manual.outcome == PENDING and adapter.unloads == ["llama3.2:3b"]
    assert "is busy and frees once its current work ends" in manual.reason
