"""A model's config and last input shape, as a real agent in a real child reports them."""

from __future__ import annotations

import json
import subprocess

import pytest

from app.agent import model_config
from app.core.agents.types import AgentReport
from tests.fakes.processes import quit_child

from .conftest import PYTHON, Client, agent_env, short_tmpdir, wait_entry, wait_line

CHILD = r'''
import sys
import torch
import transformers
torch.set_num_threads(1)
cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64)
gpt2 = transformers.GPT2LMHeadModel(cfg).eval()
plain = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
print("READY", flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
        break
    with torch.no_grad():
        if cmd[0] == "kwargs":  # as model(**batch) calls it
            gpt2(input_ids=torch.zeros(int(cmd[1]), int(cmd[2]), dtype=torch.long),
                 attention_mask=torch.ones(int(cmd[1]), int(cmd[2]), dtype=torch.long))
        elif cmd[0] == "positional":
            gpt2(torch.zeros(int(cmd[1]), int(cmd[2]), dtype=torch.long))
            plain(torch.ones(int(cmd[1]), 8))
    print("DONE", flush=True)
'''


@pytest.fixture(scope="module")
def child():
    rt = short_tmpdir()
    proc = subprocess.Popen([PYTHON, "-c", CHILD], env=agent_env(rt), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=rt)
    wait_line(proc, "READY", timeout=120)
    client = Client(wait_entry(rt, proc.pid)["address"], timeout=60)
    client.call("report")  # the agent lists both models and points their hooks at them
    yield proc, client
    client.close()
    quit_child(proc)


def _run(proc, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    wait_line(proc, "DONE")


def _models(client) -> dict:
    raw = client.call("report")["result"]
    report = AgentReport.from_json(raw)
    assert report is not None
    return {m.class_name.rsplit(".", 1)[-1]: m for m in report.models}


def test_a_transformers_model_reports_its_config_and_last_input_shape(child):
    proc, client = child
    _run(proc, "kwargs 3 7")
    models = _models(client)
    gpt2 = models["GPT2LMHeadModel"]
    assert gpt2.config is not None
    assert (gpt2.config["model_type"], gpt2.config["n_layer"], gpt2.config["n_embd"]) == \
        ("gpt2", 2, 32)
    assert gpt2.config["architectures"] == ["GPT2LMHeadModel"]  # as save_pretrained writes it
    assert gpt2.input_shape == (3, 7)  # input_ids, passed by keyword


def test_the_last_call_wins_and_a_model_without_config_reports_none(child):
    proc, client = child
    _run(proc, "positional 5 11")
    models = _models(client)
    assert models["GPT2LMHeadModel"].input_shape == (5, 11)
    plain = models["Sequential"]
    assert plain.config is None
    assert plain.input_shape == (5, 8)


def test_a_diffusers_config_carries_its_class_name():
    diffusers = pytest.importorskip("diffusers")
    unet = diffusers.UNet2DModel(sample_size=8, block_out_channels=(8, 8), layers_per_block=1,
                                 norm_num_groups=4, down_block_types=("DownBlock2D",) * 2,
                                 up_block_types=("UpBlock2D",) * 2)
    config, size = model_config.config_of(unet)
    assert config is not None and config["_class_name"] == "UNet2DModel"
    assert config["block_out_channels"] == [8, 8] and config["sample_size"] == 8
    assert size == len(json.dumps(config, separators=(",", ":")))


def test_values_json_cannot_carry_are_left_out_and_a_huge_config_is_not_sent():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=8, n_head=1, vocab_size=16, n_positions=8))
    model.config.odd = {"ok": 1, "no": object(), "inf": float("inf"), 3: [1, 2]}
    config, _ = model_config.config_of(model)
    assert config is not None and config["odd"] == {"ok": 1, "3": [1, 2]}
    model.config.huge = "x" * (model_config.MAX_CONFIG_BYTES + 1)
    assert model_config.config_of(model) == (None, 0)
    assert model_config.config_of(torch.nn.Linear(2, 2)) == (None, 0)


def test_a_report_sends_configs_within_its_budget():
    transformers = pytest.importorskip("transformers")
    models = [transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=8, n_head=1, vocab_size=16, n_positions=8)) for _ in range(5)]
    for m in models:
        m.config.pad = "x" * (60 * 1024)  # each just under the limit of one config
    cache = model_config.ConfigCache()
    cache.start_report()
    sent = [cache.get(m) is not None for m in models]
    assert sent == [True, True, True, True, False]  # 4 x ~62 KiB fit 256 KiB, a fifth not
    cache.start_report()
    assert cache.get(models[4]) is not None
