"""Small real models for the "Will it fit?" dialog, and the real ``estimate``
command's answer about them on the demo's GPUs."""

from __future__ import annotations

import subprocess

import pytest

from app.ui.estimate.fit_command import FitChoice, GpuTarget, command_line
from app.ui.estimate.fit_runner import child_env


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    """A 1.1 B-parameter Llama config (no weights): a causal LM the formula reads."""
    from transformers import LlamaConfig

    path = tmp_path_factory.mktemp("llama")
    LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                max_position_embeddings=131072).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory):
    """A tiny GPT-2 config.json."""
    from transformers import GPT2Config

    path = tmp_path_factory.mktemp("gpt2")
    GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=1024,
               bos_token_id=0, eos_token_id=0).save_pretrained(path)
    return str(path)


def run_estimate(choice: FitChoice, target: GpuTarget | None,
                 *extra: str) -> subprocess.CompletedProcess:
    """The dialog's own command line, run to its end (off any GUI)."""
    return subprocess.run([*command_line(choice, target), *extra], capture_output=True,
                          text=True, env=child_env(), timeout=120, check=False)


@pytest.fixture(scope="session")
def llama_answer(llama_dir):
    """The Llama at a 32k context on every demo GPU: fits on GPU 0, short on GPU 1."""
    done = run_estimate(FitChoice(llama_dir, context=32768, dtype="bfloat16"), None, "--demo")
    assert done.returncode == 0, done.stderr
    return done.stdout
