"""The LLM formula's estimate: for a real GGUF file against the figures its own
metadata gives (read with the gguf package's plain reader), and for an HF
config against transformers' model built from it on CPU (its parameters'
bytes, the real cache after a forward, the real logits of a step)."""

from __future__ import annotations

import json

import pytest

from app.core.estimate.formula import (
    CONTEXT_PAD,
    UBATCH_TOKENS,
    estimate_llm,
    largest_context_for,
)
from app.core.estimate.llm import CONTEXTS
from app.core.estimate.run import estimate
from app.core.estimate.types import KINDS, EstimateError, StepRequest
from tests.fakes.gguf_files import write_llama_gguf

gguf = pytest.importorskip("gguf")


def _metadata_kv_per_token(path) -> int:
    """K and V bytes per token in f16, from the keys as llama.cpp reads them."""
    fields = gguf.GGUFReader(str(path)).fields

    def get(key):
        return fields[f"llama.{key}"].contents()

    per_layer = get("attention.head_count_kv") * (get("attention.key_length")
                                                  + get("attention.value_length"))
    return get("block_count") * per_layer * 2


@pytest.fixture
def q4(tmp_path):
    return write_llama_gguf(tmp_path / "tiny-q4.gguf", quant="Q4_K", hidden=256, layers=3,
                            heads=8, kv_heads=2, vocab=300, context=32768)


def test_a_gguf_at_its_contexts(q4):
    est = estimate_llm(StepRequest(str(q4), context=8192, batch=2))
    tensors = gguf.GGUFReader(str(q4)).tensors
    weights = sum(int(t.n_bytes) for t in tensors)
    per_token = _metadata_kv_per_token(q4)
    assert est.method == "formula" and est.peak_phase is None and not est.exact
    assert est.params == sum(int(t.n_elements) for t in tensors)
    assert est.breakdown["weights"] == weights
    assert est.breakdown["kv_cache"] == per_token * 8192 * 2
    assert set(est.breakdown) == set(KINDS)
    assert sum(est.breakdown.values()) == est.peak_bytes == est.reserved_bytes
    # llama.cpp's compute buffer: at least a micro-batch's logits and their input, float32
    assert est.breakdown["temporaries"] == UBATCH_TOKENS * (300 + 256) * 4
    assert est.scales_with_batch == ("kv_cache",)
    assert [r.context for r in est.contexts] == [c for c in CONTEXTS if c <= 32768]
    for row in est.contexts:
        assert row.weights_bytes == weights
        assert row.kv_cache_bytes == per_token * row.context * 2
        assert row.peak_bytes == row.reserved_bytes == (weights + row.kv_cache_bytes
                                                        + est.breakdown["temporaries"])
    assert "Q4_K_M" in est.model_name and est.model_name.startswith("llama")
    assert any("reserved equals peak" in text for text in est.limits)


def test_a_gguf_without_a_context_is_sized_at_its_own_limit_and_padded_like_llama_cpp(q4):
    assert estimate_llm(StepRequest(str(q4))).breakdown["kv_cache"] == (
        _metadata_kv_per_token(q4) * 32768)
    est = estimate_llm(StepRequest(str(q4), context=5000))
    assert est.breakdown["kv_cache"] == _metadata_kv_per_token(q4) * 5120
    assert any("5120" in text for text in est.limits)
    longer = estimate_llm(StepRequest(str(q4), context=65536))
    assert any("trained for 32768" in text for text in longer.limits)


def test_the_dispatch_sends_a_gguf_to_the_formula_and_refuses_training(q4):
    assert estimate(StepRequest(str(q4), context=4096)).method == "formula"
    with pytest.raises(EstimateError, match="inference only"):
        estimate_llm(StepRequest(str(q4), train=True))
    with pytest.raises(EstimateError, match="context"):
        estimate_llm(StepRequest(str(q4), context=0))


def test_the_largest_context_that_fits_a_gguf(q4):
    request = StepRequest(str(q4), batch=1)
    at_8k = estimate_llm(StepRequest(str(q4), context=8192)).reserved_bytes
    assert largest_context_for(request, at_8k) == 8192
    assert largest_context_for(request, at_8k - 1) == 8192 - CONTEXT_PAD
    assert largest_context_for(request, 10**12) == 32768  # the model's own limit
    weights = estimate_llm(request).breakdown["weights"]
    assert largest_context_for(request, weights) == 0


# ------------------------------------------------------------------ HF configs

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")


def _llama_config():
    return T.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                         max_position_embeddings=16384)


def _folder(tmp_path, config):
    folder = tmp_path / "model"
    folder.mkdir()
    config.save_pretrained(folder)
    return folder


def _cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_an_hf_model_in_its_dtype_against_the_real_one(tmp_path, dtype):
    config = _llama_config()
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    batch, context = 2, 33
    with torch.no_grad():
        out = model(torch.randint(0, 100, (batch, context)), use_cache=True, logits_to_keep=1)
    est = estimate_llm(StepRequest(str(_folder(tmp_path, config)), batch=batch,
                                   context=context, dtype=dtype))
    assert est.breakdown["weights"] == sum(p.numel() * p.element_size()
                                           for p in model.parameters())
    assert est.breakdown["kv_cache"] == _cache_bytes(out.past_key_values)
    # the step's logits and generate's float32 copy of them
    logits = out.logits[:, -1]
    assert est.breakdown["temporaries"] == (logits.numel() * logits.element_size()
                                            + logits.numel() * 4)
    assert est.peak_bytes == sum(est.breakdown.values())
    assert est.reserved_bytes >= est.peak_bytes
    assert est.scales_with_batch == ("kv_cache", "temporaries")
    assert est.model_name == f"llama · 86.8 K params · {dtype}"
    assert [r.context for r in est.contexts] == [c for c in CONTEXTS if c <= 16384]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_under_autocast_the_cache_is_kept_as_transformers_keeps_it(tmp_path, kind):
    # Llama's rotary embedding keeps K in float32, V takes bfloat16; GPT-2 has no rotary.
    config = _llama_config() if kind == "llama" else T.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=4096)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model(torch.randint(0, 100, (1, 21)), use_cache=True).past_key_values
    est = estimate_llm(StepRequest(str(_folder(tmp_path, config)), context=21,
                                   autocast="bfloat16"))
    assert est.breakdown["kv_cache"] == _cache_bytes(cache)
    assert est.breakdown["weights"] == sum(p.numel() * 4 for p in model.parameters())


def test_the_largest_context_that_fits_an_hf_model(tmp_path):
    folder = _folder(tmp_path, _llama_config())
    request = StepRequest(str(folder / "config.json"), dtype="bfloat16")
    at_4k = estimate_llm(StepRequest(request.model, context=4096, dtype="bfloat16"))
    found = largest_context_for(request, at_4k.reserved_bytes)
    assert found >= 4096 and found % CONTEXT_PAD == 0
    above = estimate_llm(StepRequest(request.model, context=found + CONTEXT_PAD,
                                     dtype="bfloat16"))
    assert above.reserved_bytes > at_4k.reserved_bytes
    assert largest_context_for(request, 10**12) == 16384


def test_a_multimodal_config_sizes_its_language_model_and_says_so(tmp_path):
    text = _llama_config().to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llava", "architectures": ["LlavaForCausalLM"],
                                "text_config": text, "vision_config": {"hidden_size": 32}}))
    est = estimate_llm(StepRequest(str(path), context=4096))
    assert est.breakdown["kv_cache"] == 2 * 2 * 2 * 16 * 4096 * 4
    assert any("Only the language model" in text for text in est.limits)


def test_a_config_it_cannot_read_is_refused_with_the_reason(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(EstimateError, match="not a readable JSON"):
        estimate_llm(StepRequest(str(bad), context=4096))
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(EstimateError, match="num_hidden_layers"):
        estimate_llm(StepRequest(str(bad), context=4096))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EstimateError, match="no config.json"):
        estimate_llm(StepRequest(str(tmp_path / "empty"), context=4096))
