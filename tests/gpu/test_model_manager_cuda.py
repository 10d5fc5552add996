"""Model manager on a real GPU: CUDA -> CPU offload frees VRAM (NVML per process)."""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")

from app.agent import manager as mgr_mod  # noqa: E402
from app.agent import models  # noqa: E402


@pytest.fixture
def env(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    tracker = models.ModelTracker()
    tracker.hooks = True
    tracker.use_torch(torch)
    manager = mgr_mod.Manager(tracker)

    def track(m):
        # what start() does for a model built before it: hooks placed on this thread
        tracker.placement.attach_existing(list(m.modules()))
        tracker.refresh(torch)
        return tracker.model_id(m)

    yield tracker, manager, track
    tracker.release()


def nvml_used_by_me() -> int:
    pynvml.nvmlInit()
    try:
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory or 0)
        return 0
    finally:
        pynvml.nvmlShutdown()


def big_model(device="cuda:0", layers=8):
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(layers)]).to(device).eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def test_cuda_to_cpu_offload_frees_vram_and_reload_is_identical(env):
    tracker, manager, track = env
    model = big_model()
    mid = track(model)
    x = torch.randn(4, 4096, device="cuda:0")
    ref = model(x).clone()
    torch.cuda.synchronize()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    time.sleep(0.5)
    before = nvml_used_by_me()
    params = list(model.parameters())  # held references: reading them is no reload
    ev = manager.handle_unload({"model": mid})
    assert ev["target"] == "cpu" and ev["bytes_moved"] == nbytes
    assert all(p.device.type == "cpu" and p.is_pinned() for p in params)
    time.sleep(0.5)
    after = nvml_used_by_me()
    assert 0.8 * nbytes <= before - after <= 1.25 * nbytes, (before, after, nbytes)
    assert ev["bytes_released"] >= 0.8 * nbytes
    out = model(x)  # transparent reload
    assert torch.equal(out, ref)
    assert all(p.device == torch.device("cuda:0") for p in model.parameters())
    ev = manager.recent_events()[-1]
    assert ev["action"] == "reload" and ev["reason"] == "forward" and ev["ok"]


def test_cuda_to_disk_and_back(env):
    tracker, manager, track = env
    model = big_model(layers=2)
    mid = track(model)
    x = torch.randn(4, 4096, device="cuda:0")
    ref = model(x).clone()
    assert manager.handle_unload({"model": mid, "to": "disk"})["ok"]
    assert torch.equal(model(x), ref)


def test_split_model_cpu_and_cuda(env):
    tracker, manager, track = env

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(256, 256)
            self.b = torch.nn.Linear(256, 256).to("cuda:0", torch.float16)

        def forward(self, x):
            return self.b(self.a(x).to("cuda:0", torch.float16)).float().cpu()

    model = Split().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    mid = track(model)
    x = torch.randn(3, 256)
    ref = model(x)
    a_weight = model.a.weight
    a_ptr = a_weight.data_ptr()
    b_bytes = sum(p.numel() * p.element_size() for p in model.b.parameters())
    ev = manager.handle_unload({"model": mid, "to": "cpu"})
    assert ev["bytes_moved"] == b_bytes
    assert a_weight.data_ptr() == a_ptr  # the CPU half stayed
    assert torch.equal(model(x), ref)
    assert model.b.weight.device.type == "cuda" and model.b.weight.dtype == torch.float16
    assert manager.handle_unload({"model": mid, "to": "disk"})["ok"]
    assert torch.equal(model(x), ref)


def test_reads_of_an_offloaded_cuda_model_see_it_at_home(env):
    """state_dict, .half() and a reload inside inference_mode: as if never unloaded."""
    tracker, manager, track = env
    model = big_model(layers=2)
    mid = track(model)
    x = torch.randn(4, 4096, device="cuda:0")
    ref = model(x).clone()
    manager.handle_unload({"model": mid})
    sd = model.state_dict()  # brings it back first
    assert all(t.device == torch.device("cuda:0") for t in sd.values())
    manager.handle_unload({"model": mid})
    with torch.inference_mode():
        assert torch.equal(model(x), ref)
    assert all(not p.is_inference() and p.device.type == "cuda" for p in model.parameters())
    manager.handle_unload({"model": mid})
    model.half()
    assert all(p.dtype == torch.float16 and p.device.type == "cuda" for p in model.parameters())


def test_from_pretrained_model_in_eval_unloads_without_force(env, tmp_path):
    transformers = pytest.importorskip("transformers")
    tracker, manager, track = env
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128,
                                  n_positions=64, bos_token_id=0, eos_token_id=0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    model = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").to("cuda:0").eval()
    assert all(p.requires_grad for p in model.parameters())
    mid = track(model)
    ids = torch.tensor([[1, 2, 3, 4]], device="cuda:0")
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=8, do_sample=False)
    ev = manager.handle_unload({"model": mid})
    assert ev["ok"] and ev["target"] == "cpu" and ev["bytes_released"] > 0
    with torch.inference_mode():
        assert torch.equal(model.generate(ids, max_new_tokens=8, do_sample=False), ref)


def test_page_locked_memory_is_not_taken_for_memory_shared_with_other_processes(env):
    """Pinned host memory is mapped shared from the driver's device file: an
    offloaded model (its weights in pinned copies) and a user's pinned CPU
    weights are not "shared with other processes", and the copy alone is the
    offload's timed move."""
    from app.agent import sharing

    tracker, manager, track = env
    pinned = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
    assert not sharing.shared_storage([pinned])
    model = big_model(layers=2)
    mid = track(model)
    ev = manager.handle_unload({"model": mid, "to": "cpu"})
    assert ev["ok"] and 0 < ev["copy_seconds"] <= ev["seconds"]
    from app.agent import figures

    offloaded = figures.tensors(model)  # read as the agent reads them: no reload
    g = tracker.guard(model)
    assert g.state == "offloaded" and offloaded
    assert all(t.device.type == "cpu" and t.is_pinned() for t in offloaded)
    assert not sharing.shared_storage(offloaded)
    assert manager.blocker(model, g) != sharing.BLOCKER
    assert g.state == "offloaded"
    manager.handle_reload({"model": mid})
