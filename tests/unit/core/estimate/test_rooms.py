"""Each GPU's room: its free memory now (unknown stays unknown) and what the
Doctor's own rules say could be freed on it."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.agents.demo_moment import demo_moment
from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo
from app.core.diagnosis import advice
from app.core.estimate.rooms import MIN_CACHE_BYTES, gpu_rooms
from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView, qualify_gpu
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample, Snapshot
from app.core.servers.types import ModelServer, ServerModel

MiB = 1024**2
GiB = 1024**3
NOW = 100_000.0
IDLE = advice.AdviceConfig().model_idle_s


def model(mid: str, nbytes: int, idle_s: float | None, **kw) -> ModelInfo:
    return ModelInfo(mid, f"net-{mid}", "Net", 1, nbytes, 0, "cuda:0", "float16", False, None,
                     bytes_by_device={"cuda:0": {"params": nbytes}},
                     idle_since=None if idle_s is None else NOW - idle_s, **kw)


def agent(pid: int, allocated: int, reserved: int, *models: ModelInfo,
          managed_by: str | None = None) -> AgentReport:
    return AgentReport(pid, ("python", "x.py"), None, "2.5", "loaded", True, "native",
                       (DeviceMemory(0, allocated, reserved, uuid="GPU-aaa"),), models,
                       received_at=NOW, managed_by=managed_by)


TRAIN = ProcessSample(10, 14 * GiB, 90.0, command="python train.py")
NOTEBOOK = ProcessSample(30, 5 * GiB, 0.0, command="python -m ipykernel_launcher")
OLD = ProcessSample(40, 3 * GiB, 0.0, command="python old_eval.py")
OLLAMA = ProcessSample(50, 6 * GiB, 0.0, name="ollama", command="ollama serve")


def world() -> Snapshot:
    """GPU 0: a trainer with a cache, a notebook with idle and busy models, a
    process the Doctor found idle, Ollama with an idle model; GPU 1: free unknown;
    GPU 2: lost."""
    gpu0 = GpuSample(0, "NVIDIA RTX A6000", "GPU-aaa", 48 * GiB, 30 * GiB, 18 * GiB,
                     processes=(TRAIN, NOTEBOOK, OLD, OLLAMA))
    gpu1 = GpuSample(1, "NVIDIA RTX A6000", "GPU-bbb", 48 * GiB, None, None)
    gpu2 = GpuSample(2, "NVIDIA RTX A6000", "GPU-ccc", 48 * GiB, 1 * GiB, 47 * GiB,
                     state=DeviceState.LOST)
    agents = {
        10: agent(10, 10 * GiB, 12 * GiB, model("t", 4 * GiB, 1.0, training_evidence="train")),
        30: agent(30, 4 * GiB, 4 * GiB + 32 * MiB,  # a cache too small to name
                  model("vae", 200 * MiB, IDLE + 60), model("unet", 3 * GiB, 2 * IDLE),
                  model("busy", 500 * MiB, 5.0), model("compiled", 300 * MiB, 2 * IDLE,
                                                      unload_blocker="torch.compile")),
    }
    # The Doctor's idle-process rule, from an hour of no kernels.
    idle_old = advice.idle_process(advice.ProcessView(gpu0, OLD, None, None, 3600.0),
                                   advice.AdviceConfig())
    assert idle_old is not None
    server = ModelServer("ollama", "Ollama", 50, (50,), "me", "http://127.0.0.1:11434",
                         "0.12", (ServerModel("qwen:7b", "qwen:7b", 5 * GiB, gpu=0, busy=False,
                                              idle_since=NOW - 2 * IDLE, unload="frees it"),
                                  ServerModel("fresh", "fresh", 1 * GiB, gpu=0, busy=False,
                                              idle_since=NOW - 5)),
                         can_unload=True, unload_note="keep_alive 0", reachable=True)
    return Snapshot(NOW, 1.0, "nvml", "580", (gpu0, gpu1, gpu2), agents=agents,
                    diagnoses=(idle_old,), servers=(server,))


def test_a_room_names_what_could_be_freed_in_the_doctors_order():
    room0, room1, room2 = gpu_rooms(world())
    assert (room0.gpu, room0.name, room0.total_bytes, room0.free_bytes) == (
        "0", "NVIDIA RTX A6000", 48 * GiB, 18 * GiB)
    got = [(f.action, f.pid, f.model, f.bytes) for f in room0.freeable]
    assert got == [
        ("free_cache", 10, None, 2 * GiB),  # the notebook's 32 MiB cache is not worth one
        ("unload_model", 50, "qwen:7b", 5 * GiB),  # largest first among the idle models
        ("unload_model", 30, "unet", 3 * GiB),
        ("unload_model", 30, "vae", 200 * MiB),
        ("stop_process", 40, None, 3 * GiB),
    ]
    by_model = {f.model: f for f in room0.freeable if f.model}
    assert by_model["unet"].holder == "ipykernel_launcher (30)"
    assert by_model["unet"].idle_s == pytest.approx(2 * IDLE)
    assert by_model["qwen:7b"].holder == "Ollama" and by_model["qwen:7b"].note == "frees it"
    # Free memory unknown stays unknown, never 0; a lost GPU's figures are not "free now".
    assert room1.free_bytes is None and room1.freeable == ()
    assert room2.free_bytes is None


def test_a_server_managed_process_offers_its_cache_but_not_its_models():
    snap = world()
    managed = dict(snap.agents)
    managed[30] = dataclasses.replace(snap.agents[30], managed_by="ComfyUI",
                                      devices=(DeviceMemory(0, 1 * GiB, 2 * GiB, uuid="GPU-aaa"),))
    room0 = gpu_rooms(dataclasses.replace(snap, agents=managed))[0]
    assert ("free_cache", 30) in [(f.action, f.pid) for f in room0.freeable]
    assert not [f for f in room0.freeable if f.pid == 30 and f.action == "unload_model"]


def test_a_longer_idle_time_leaves_recently_used_models_out():
    room0 = gpu_rooms(world(), model_idle_s=1.5 * IDLE)[0]
    assert {f.model for f in room0.freeable if f.action == "unload_model"} == {"unet", "qwen:7b"}


def test_connected_hosts_add_their_gpus_and_disconnected_ones_do_not():
    remote = world()
    gpu = qualify_gpu(remote.gpus[0], "gpu1")
    host_snap = dataclasses.replace(remote, gpus=(gpu,), diagnoses=(dataclasses.replace(
        remote.diagnoses[0], gpu="0@gpu1"),))
    local = Snapshot(NOW, 1.0, "nvml", "580", (GpuSample(0, "RTX 4090", "GPU-loc", 24 * GiB,
                                                         4 * GiB, 20 * GiB),),
                     hosts=(HostView("gpu1", "ssh://gpu1", CONNECTED, snapshot=host_snap),
                            HostView("gpu2", "ssh://gpu2", DISCONNECTED, snapshot=host_snap)))
    rooms = gpu_rooms(local)
    assert [r.gpu for r in rooms] == ["0", "0@gpu1"]
    assert [f.action for f in rooms[1].freeable] == [
        "free_cache", "unload_model", "unload_model", "unload_model", "stop_process"]


def test_the_demo_moment_matches_its_doctor():
    """The rooms of the demo at its moment: free memory as NVML says, and the idle
    models the Doctor's own finding names, with the same bytes."""
    snap = demo_moment().snapshot
    rooms = {r.gpu: r for r in gpu_rooms(snap)}
    assert set(rooms) == {g.display_id for g in snap.gpus}
    for g in snap.gpus:
        assert rooms[g.display_id].free_bytes == g.memory_free
    doctors = {(d.gpu, f.pid, f.model, f.gain_bytes) for d in snap.diagnoses
               if d.kind == "idle_model" for f in d.fixes}
    ours = {(r.gpu, f.pid, f.model, f.bytes) for r in rooms.values() for f in r.freeable
            if f.action == "unload_model"}
    assert doctors and ours == doctors
    caches = {(g.display_id, p.pid): snap.agents[p.pid].device_for_gpu(g.index, g.uuid).cache
              for g in snap.gpus for p in g.processes if p.pid in snap.agents}
    for room in rooms.values():
        for f in room.freeable:
            if f.action == "free_cache":
                assert caches[(room.gpu, f.pid)] == f.bytes >= MIN_CACHE_BYTES
