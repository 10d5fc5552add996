"""The LLM formula against transformers' own models built from configs: the
parameter count of the meta-device model, and the bytes of the real KV cache a
CPU forward leaves."""

from __future__ import annotations

import pytest

from app.core.estimate.llm import (
    ConfigError,
    LlmShape,
    footprints,
    kv_cache_bytes,
    largest_context,
    shape_from_hf_config,
    weight_bytes,
)

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

SMALL = dict(num_hidden_layers=2, hidden_size=128, intermediate_size=344, num_attention_heads=4,
             vocab_size=1000)


def configs():
    return {
        "gpt2": T.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256),
        "llama-gqa": T.LlamaConfig(num_key_value_heads=2, max_position_embeddings=512, **SMALL),
        "llama-tied": T.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, **SMALL),
        "mistral-mqa": T.MistralConfig(num_key_value_heads=1, **SMALL),
        "qwen2-bias": T.Qwen2Config(num_key_value_heads=2, **SMALL),
        "gpt-neox": T.GPTNeoXConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=512,
                                    num_attention_heads=4, vocab_size=1000),
    }


@pytest.mark.parametrize("name", list(configs()))
def test_the_parameter_count_is_the_models_own(name):
    config = configs()[name]
    with torch.device("meta"):
        model = T.AutoModelForCausalLM.from_config(config)
    shape = shape_from_hf_config(config.to_dict())
    assert shape.exact
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_the_kv_cache_is_the_bytes_a_real_forward_keeps():
    config = T.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 100, (3, 17)), use_cache=True).past_key_values
    kept = sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values))
    assert kv_cache_bytes(shape_from_hf_config(config.to_dict()), 17, 3, 4.0) == kept


def _llama_8b() -> LlmShape:
    # Llama 3 8B's published config: 32 layers, 8 KV heads of 128, 128k vocabulary.
    return shape_from_hf_config({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "max_position_embeddings": 131072,
        "tie_word_embeddings": False})


def test_a_published_config_gives_its_published_size_and_cache():
    shape = _llama_8b()
    assert shape.params == 8_030_261_248  # "8.03B" on its model card
    # 128 KiB of K and V per token in fp16: 16 GiB at 128k
    assert kv_cache_bytes(shape, 131072) == 16 * 2**30
    rows = footprints(shape, weight_bytes(shape, 2.0))
    assert [r.context for r in rows] == [4096, 8192, 16384, 32768, 65536, 131072]
    assert rows[0].total_bytes == weight_bytes(shape, 2.0) + 512 * 2**20


def test_the_largest_context_that_fits_and_none_when_the_weights_do_not():
    shape = _llama_8b()
    weights = weight_bytes(shape, 0.6)  # about Q4_K_M
    room = weights + 1 * 2**30  # 1 GiB left for the cache: 8192 tokens of 128 KiB
    assert largest_context(shape, weights, room) == 8192
    assert largest_context(shape, weights, room, kv_bytes_per_element=1.0) == 16384  # q8 cache
    assert largest_context(shape, weights, weights - 1) == 0
    assert largest_context(shape, weights, 10**15) == 131072  # the model's own limit


def test_a_config_without_what_the_formula_needs_says_which_key():
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        shape_from_hf_config({"model_type": "llama", "hidden_size": 64,
                              "num_attention_heads": 4, "vocab_size": 10})
    odd = shape_from_hf_config({"model_type": "mamba-hybrid", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "vocab_size": 10})
    assert not odd.exact  # a layout the count does not know: a lower bound, and it says so
