"""``vram-steward estimate``: the real command, on real models built from small
configs, against the ABI fake of libnvidia-ml read through the real pynvml.

Each GPU's free memory is set in the fake's config; a fake agent in a process
of its own holds a cache on GPU 0, as a real agent reports it.  The truth the
answers are checked against is the real estimate, asked in this process."""

from __future__ import annotations

import dataclasses
import importlib.abc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.estimate.context import fresh_process_bytes
from app.core.estimate.run import estimate
from app.core.estimate.types import StepRequest
from tests.fakes import nvml_abi
from tests.fakes.fake_agent import FakeAgent
from tests.fakes.nvml_abi import FakeGpu, FakeNvml, FakeProcess
from tests.unit.cli.running import run_cli

T = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[3]
MiB = 1024**2
GiB = 1024**3
NAME = "NVIDIA RTX A6000"
CONTEXT = fresh_process_bytes(NAME)  # the context, and cuBLAS's workspaces in the allocator
TOTAL = 48 * GiB

needs_abi = pytest.mark.skipif(nvml_abi.unavailable_reason() is not None,
                               reason=nvml_abi.unavailable_reason() or "")


@pytest.fixture(scope="module")
def lib() -> Path:
    return nvml_abi.build()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("gpt2")
    T.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256,
                 bos_token_id=0, eos_token_id=0).save_pretrained(folder)
    return str(folder)


def gpus(*free: int) -> FakeNvml:
    return FakeNvml([FakeGpu(NAME, f"GPU-{i:08x}-0000-0000-0000-000000000000", TOTAL,
                             TOTAL - f) for i, f in enumerate(free)])


def run(fake: FakeNvml, lib: Path, tmp_path: Path, *args: str,
        runtime: str | None = None) -> subprocess.CompletedProcess:
    """``python -m app estimate ARGS`` whose libnvidia-ml is the fake."""
    env = fake.env(lib, fake.write(tmp_path / "nvml.conf"))
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if runtime is None:
        runtime = str(tmp_path / "runtime")
        os.makedirs(runtime, mode=0o700, exist_ok=True)
    env["VRAM_STEWARD_RUNTIME_DIR"] = runtime
    env["VRAM_STEWARD_STATE_DIR"] = str(tmp_path / "state")
    return subprocess.run([sys.executable, "-m", "app", "estimate", *args], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def needs(request: StepRequest) -> int:
    return estimate(request).reserved_bytes + CONTEXT


@needs_abi
def test_a_training_step_fits_the_roomy_gpu_and_the_full_one_gets_ranked_fixes(
        lib, gpt2, tmp_path, runtime):
    request = StepRequest(gpt2, batch=16, seq=128, train=True)
    at_16, at_1 = needs(request), needs(dataclasses.replace(request, batch=1))
    tight = (at_1 + at_16) // 2
    agent = FakeAgent(sock_dir=runtime, own_process=True)
    agent.allocated, agent.reserved = 1 * GiB, 3 * GiB  # a 2 GiB cache
    agent.register(runtime)
    try:
        fake = gpus(tight, 40 * GiB)
        fake.processes.append(FakeProcess(agent.pid, 0, 3 * GiB + 300 * MiB))
        done = run(fake, lib, tmp_path, "--model", gpt2, "--batch", "16", "--seq", "128",
                   "--train", "--json", runtime=runtime)
    finally:
        agent.close()
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["reserved_bytes"] == at_16 - CONTEXT
    assert data["peak_bytes"] <= data["reserved_bytes"]
    assert data["gpu"] == "1" and data["needs_bytes"] == at_16  # the GPU with most free
    assert sum(data["breakdown"].values()) > 0 and data["breakdown"]["optimizer"] > 0
    assert data["estimate"]["request"]["batch"] == 16
    full, roomy = data["gpus"]
    assert (roomy["fits"], roomy["free_bytes"], roomy["margin_bytes"], roomy["fixes"]) == (
        True, 40 * GiB, 40 * GiB - at_16, [])
    assert (full["fits"], full["free_bytes"], full["margin_bytes"]) == (False, tight,
                                                                     tight - at_16)
    actions = [f["action"] for f in full["fixes"]]
    assert actions[0] == "free_cache" and actions[1] == "batch"
    cache = full["fixes"][0]
    assert (cache["pid"], cache["gain_bytes"], cache["fits_after"]) == (agent.pid, 2 * GiB, True)
    assert "gives 2.0 GiB" in cache["text"]
    batch = full["fixes"][1]
    assert batch["fits_after"]
    assert needs(dataclasses.replace(request, batch=batch["value"])) <= tight
    assert needs(dataclasses.replace(request, batch=batch["value"] + 1)) > tight
    assert set(actions[2:]) <= {"checkpointing", "bfloat16", "lora"}
    assert actions[2:] == [a for a in ("checkpointing", "bfloat16", "lora") if a in actions]


@needs_abi
def test_the_text_keeps_the_three_figures_apart_and_ranks_the_fixes(lib, gpt2, tmp_path):
    request = StepRequest(gpt2, batch=16, seq=128, train=True)
    tight = (needs(request) + needs(dataclasses.replace(request, batch=1))) // 2
    done = run(gpus(tight), lib, tmp_path, "--model", gpt2, "--batch", "16", "--seq", "128",
               "--train")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("  peak ", "  reserved ", "  needs "):
        assert sum(line.startswith(label) for line in out.splitlines()) == 1
    assert "grows with the batch" in out and "Breakdown at the peak:" in out
    assert f"GPU 0 ({NAME}): free" in out and "does not fit, short by" in out
    assert "    1. Batch " in out and "(--batch " in out


@needs_abi
def test_max_batch_on_one_gpu_is_the_largest_batch_that_fits(lib, gpt2, tmp_path):
    request = StepRequest(gpt2, batch=4, seq=128, train=True)
    free = needs(dataclasses.replace(request, batch=24)) + MiB
    done = run(gpus(40 * GiB, free), lib, tmp_path, "--model", gpt2, "--batch", "4",
               "--seq", "128", "--train", "--gpu", "1", "--max-batch", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    best = data["max_batch"]
    assert [g["gpu"] for g in data["gpus"]] == ["1"] and data["gpus"][0]["max_batch"] == best
    assert best >= 24
    assert needs(dataclasses.replace(request, batch=best)) <= free
    assert needs(dataclasses.replace(request, batch=best + 1)) > free


@needs_abi
def test_a_gpu_that_is_not_there_is_an_error_on_stderr(lib, gpt2, tmp_path):
    done = run(gpus(40 * GiB), lib, tmp_path, "--model", gpt2, "--seq", "32", "--gpu", "7")
    assert done.returncode == 2 and done.stdout == ""
    assert "no GPU 7 here (GPUs: 0)" in done.stderr


@needs_abi
def test_a_gguf_file_at_several_contexts(lib, tmp_path):
    pytest.importorskip("gguf")
    from tests.fakes.gguf_files import write_llama_gguf

    path = str(write_llama_gguf(tmp_path / "tiny.gguf", layers=8, hidden=512, heads=8,
                                kv_heads=8, context=32768, quant="Q8_0"))
    at_4k = needs(StepRequest(path, context=4096))
    free = at_4k + 16 * MiB
    answers = {}
    for context in (4096, 16384, 32768):
        done = run(gpus(free), lib, tmp_path, "--model", path, "--context", str(context),
                   "--json")
        assert done.returncode == 0, done.stderr
        answers[context] = json.loads(done.stdout)
    assert answers[4096]["gpus"][0]["fits"] is True
    for context in (16384, 32768):
        data = answers[context]
        assert data["estimate"]["method"] == "formula"
        assert data["breakdown"]["kv_cache"] > answers[4096]["breakdown"]["kv_cache"]
        (gpu,) = data["gpus"]
        assert gpu["fits"] is False
        (shorter,) = [f for f in gpu["fixes"] if f["action"] == "context"]
        assert shorter["fits_after"] and 4096 <= shorter["value"] < context
    text = run(gpus(free), lib, tmp_path, "--model", path, "--context", "8192")
    assert text.returncode == 0, text.stderr
    assert "Context lengths (batch 1):" in text.stdout
    row = next(line for line in text.stdout.splitlines() if line.strip().startswith("4096 "))
    assert row.rstrip().endswith("yes")


def test_a_model_that_is_not_there_is_an_error_on_stderr(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "estimate", "--model", str(tmp_path / "nothing"), "--demo")
    assert rc == 1 and out == ""
    assert "no such file or folder" in err


class NoTransformers(importlib.abc.MetaPathFinder):
    """An environment without transformers: importing it fails as it would there."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "transformers":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_a_missing_package_names_the_extra_to_install(capsys, gpt2, monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [NoTransformers(), *sys.meta_path])
    for name in [m for m in sys.modules if m.split(".")[0] == "transformers"]:
        monkeypatch.delitem(sys.modules, name)
    rc, out, err = run_cli(capsys, "estimate", "--model", gpt2, "--seq", "16", "--demo")
    assert rc == 1 and out == ""
    assert 'pip install "vram-steward[estimate]"' in err


def test_training_options_without_train_are_refused(capsys, gpt2):
    rc, out, err = run_cli(capsys, "estimate", "--model", gpt2, "--lora", "8", "--demo")
    assert rc == 1 and out == "" and "--train" in err


def test_the_demo_gpus_at_its_moment(capsys, gpt2):
    from app.core.agents.demo_moment import demo_moment

    rc, out, err = run_cli(capsys, "estimate", "--model", gpt2, "--seq", "64", "--batch", "4",
                           "--demo", "--json")
    assert rc == 0, err
    data = json.loads(out)
    snap = demo_moment().snapshot
    assert data["source"] == "demo"
    assert {g["gpu"]: g["free_bytes"] for g in data["gpus"]} == {
        g.display_id: g.memory_free for g in snap.gpus}
    assert all(g["fits"] is True for g in data["gpus"])


def test_the_gpus_of_another_host(gpt2, tmp_path):
    """``--host``: the free memory of the GPUs a server watches, from its snapshot."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = {**os.environ, "VRAM_STEWARD_STATE_DIR": str(state), "PYTHONPATH": str(REPO),
           "PYTHONDONTWRITEBYTECODE": "1"}
    serve = subprocess.Popen([sys.executable, "-m", "app", "serve", "--demo", "--listen",
                              "127.0.0.1:0", "--no-history"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        first = serve.stdout.readline()
        assert first.startswith("listening on http://127.0.0.1:"), serve.stderr.read()
        url = first.split()[-1]
        done = subprocess.run([sys.executable, "-m", "app", "estimate", "--model", gpt2,
                               "--seq", "64", "--json", "--host", url], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=300)
    finally:
        serve.kill()
        serve.wait()
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["source"] == url and [g["gpu"] for g in data["gpus"]] == ["0", "1"]
    for gpu in data["gpus"]:
        assert gpu["free_bytes"] > 0 and "(demo)" in gpu["gpu_name"]
        assert gpu["fits"] is (gpu["needs_bytes"] <= gpu["free_bytes"])


FIVE = {"gpt2": ["--seq", "64"], "llama": ["--seq", "64"], "resnet": ["--image", "64"],
        "vit": [], "unet": []}


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> dict[str, str]:
    from tests.unit.core.estimate.tiny_models import save_all

    return save_all(tmp_path_factory.mktemp("five"))


@needs_abi
@pytest.mark.parametrize("mode", ["inference", "training"])
@pytest.mark.parametrize("name", list(FIVE))
def test_each_model_of_the_table_answers_with_its_figures_and_fit(lib, five, tmp_path, name,
                                                                    mode):
    """GPT-2, a Llama, a ResNet, a ViT and a diffusers UNet, in both modes: the breakdown,
    the three figures, a roomy GPU it fits and one a MiB short of its needs, where the
    largest batch that fits is offered if a smaller batch lowers the need."""
    train = ["--train"] if mode == "training" else []
    request = StepRequest(five[name], batch=8, train=bool(train),
                          **{k.lstrip("-"): int(v) for k, v in zip(FIVE[name][::2],
                                                                   FIVE[name][1::2])})
    short = needs(request) - MiB
    done = run(gpus(40 * GiB, short), lib, tmp_path, "--model", five[name], "--batch", "8",
               *FIVE[name], *train, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["peak_bytes"] <= data["reserved_bytes"] < data["needs_bytes"]
    assert data["breakdown"]["weights"] > 0 and data["breakdown"]["activations"] > 0
    assert (data["breakdown"]["optimizer"] > 0) is (mode == "training")
    assert "activations" in data["scales_with_batch"]
    roomy, tight = data["gpus"]
    assert roomy["fits"] is True and roomy["fixes"] == []
    assert tight["fits"] is False and tight["margin_bytes"] == -MiB
    batches = [f for f in tight["fixes"] if f["action"] == "batch"]
    if needs(dataclasses.replace(request, batch=1)) > short:
        # The tiny models' inference fits one 2 MiB segment at any batch: a smaller
        # batch would not lower the need, so it is not offered.
        assert batches == []
        return
    (batch,) = batches
    assert batch["fits_after"] and batch["value"] < 8
    assert needs(dataclasses.replace(request, batch=batch["value"])) <= short
    assert needs(dataclasses.replace(request, batch=batch["value"] + 1)) > short
