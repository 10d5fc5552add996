"""The form's inputs become the ``estimate`` command line, and the command's
own parser takes every one of them."""

from __future__ import annotations

import sys

import pytest

from app.cli import build_parser
from app.core.monitor.hosts import HostView
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.remote.host_config import HostConfig
from app.ui.estimate.fit_command import GpuTarget, gpu_targets
from app.ui.estimate.fit_inputs import FitInputs

GiB = 1 << 30


@pytest.fixture
def form(qtbot):
    f = FitInputs()
    qtbot.addWidget(f)
    f.set_targets([GpuTarget("0", "GPU 0"), GpuTarget("1", "GPU 1", demo=True)])
    return f


def command(form: FitInputs) -> list[str]:
    from app.ui.estimate.fit_command import command_line

    choice = form.choice()
    assert choice is not None
    argv = command_line(choice, form.target())
    assert argv[:5] == [sys.executable, "-m", "app", "estimate", "--json"]
    parsed = build_parser().parse_args(argv[3:])  # the command takes it as it is
    assert parsed.model == choice.model
    return argv[5:]


def test_no_model_no_command(form):
    assert form.choice() is None
    form.set_model("  ")
    assert form.choice() is None


def test_the_defaults(form):
    form.set_model("/models/gpt2")
    assert command(form) == ["--model", "/models/gpt2", "--batch", "1", "--dtype", "float32",
                             "--gpu", "0"]


def test_a_text_model_at_a_sequence_length_with_autocast(form):
    form.set_model("/models/gpt2/config.json")
    form.batch.setValue(8)
    form.seq.setValue(512)
    form.autocast.setCurrentText("bfloat16")
    assert not form.image.isEnabled()  # one of the two sizes
    form.image.setValue(224)  # (kept, but not sent while a sequence is given)
    assert command(form) == ["--model", "/models/gpt2/config.json", "--batch", "8", "--seq",
                             "512", "--dtype", "float32", "--autocast", "bfloat16",
                             "--gpu", "0"]


def test_an_image_model_on_the_demos_gpu(form):
    form.set_model("torchvision_models:resnet50")
    form.image.setValue(224)
    form.dtype.setCurrentText("float16")
    form.select_gpu("1")
    assert not form.seq.isEnabled()
    assert command(form) == ["--model", "torchvision_models:resnet50", "--batch", "1",
                             "--image", "224", "--dtype", "float16", "--gpu", "1", "--demo"]


def test_training_with_its_options(form):
    form.set_model("/models/llama")
    form.context.setValue(4096)  # inference only: not sent for a training step
    form.mode.setCurrentIndex(1)
    assert not form.context.isEnabled() and form.optimizer.isEnabled()
    form.optimizer.setCurrentText("sgd")
    form.checkpointing.setChecked(True)
    form.lora.setValue(16)
    form.seq.setValue(1024)
    form.max_batch.setChecked(True)
    assert command(form) == ["--model", "/models/llama", "--batch", "1", "--seq", "1024",
                             "--dtype", "float32", "--train", "--optimizer", "sgd",
                             "--checkpointing", "--lora", "16", "--max-batch", "--gpu", "0"]


def test_training_options_are_not_sent_for_inference(form):
    form.set_model("/models/llama")
    form.mode.setCurrentIndex(1)
    form.checkpointing.setChecked(True)
    form.lora.setValue(8)
    form.mode.setCurrentIndex(0)
    assert not form.checkpointing.isEnabled()
    assert command(form) == ["--model", "/models/llama", "--batch", "1", "--dtype", "float32",
                             "--gpu", "0"]


def test_a_gguf_file_is_asked_its_context_only(form):
    form.set_model("/models/llama-8b.Q4_K_M.gguf")
    form.mode.setCurrentIndex(1)
    form.seq.setValue(512)
    form.autocast.setCurrentText("float16")
    form.context.setValue(32768)
    assert not form.mode.isEnabled() and not form.seq.isEnabled()
    assert command(form) == ["--model", "/models/llama-8b.Q4_K_M.gguf", "--batch", "1",
                             "--context", "32768", "--dtype", "float32", "--gpu", "0"]


def test_every_gpu_of_the_snapshot_and_how_to_reach_a_remote_one(form):
    local = GpuSample(index=0, name="NVIDIA H100", uuid="GPU-a", memory_total=80 * GiB,
                      memory_used=20 * GiB, memory_free=60 * GiB)
    remote = GpuSample(index=1, name="NVIDIA A100", uuid="GPU-b", memory_total=40 * GiB,
                       memory_used=None, memory_free=None, display_id="1@gpu1", host="gpu1")
    view = HostView("gpu1", "https://gpu1:8443", "connected",
                    snapshot=Snapshot(1.0, 1.0, "nvml", "550", gpus=(remote,)))
    snapshot = Snapshot(1.0, 1.0, "nvml", "550", gpus=(local,), hosts=(view,))
    config = HostConfig("https://gpu1:8443", token_file="/home/me/gpu1.token",
                        ca_file="/home/me/ca.pem")
    targets = gpu_targets(snapshot, [config])
    assert [t.label for t in targets] == ["GPU 0 · H100 · 60.0 GiB free",
                                          "GPU 1 on gpu1 · A100 · n/a free"]
    form.set_targets(targets, "1@gpu1")
    form.set_model("/models/gpt2")
    assert command(form) == ["--model", "/models/gpt2", "--batch", "1", "--dtype", "float32",
                             "--gpu", "1", "--host", "https://gpu1:8443", "--token-file",
                             "/home/me/gpu1.token", "--tls-ca", "/home/me/ca.pem"]
    # Asked again with the same GPUs, the choice stays.
    form.set_targets(targets)
    assert form.target() == targets[1]


def test_every_edit_says_so(form, qtbot):
    form.set_model("/models/gpt2")
    for change in (lambda: form.batch.setValue(2), lambda: form.mode.setCurrentIndex(1),
                   lambda: form.max_batch.setChecked(True), lambda: form.select_gpu("1"),
                   lambda: form.set_model("/models/other")):
        with qtbot.waitSignal(form.changed, timeout=1000):
            change()
