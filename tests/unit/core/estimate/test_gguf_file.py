"""GGUF metadata read from real files written by the gguf package's own writer,
checked against the package's plain reader: the shape llama.cpp would load,
the exact tensor bytes at each quantization, and broken files refused with
the reason."""

from __future__ import annotations

import pytest

from app.core.estimate.gguf_file import read_gguf
from app.core.estimate.llm import shape_from_hf_config
from app.core.estimate.types import EstimateError
from tests.fakes.gguf_files import write_llama_gguf

gguf = pytest.importorskip("gguf")


def _plain(path):
    """What the package's unmodified reader says of every tensor."""
    reader = gguf.GGUFReader(str(path))
    return reader, reader.tensors


@pytest.mark.parametrize("quant, hidden, name", [
    ("F16", 64, "F16"),
    ("Q8_0", 64, "Q8_0"),
    ("Q4_K", 256, "Q4_K_M"),  # K-quants need rows of 256 elements
])
def test_the_weights_are_the_tensors_bytes_at_their_quantization(tmp_path, quant, hidden, name):
    path = write_llama_gguf(tmp_path / "m.gguf", quant=quant, hidden=hidden, layers=3, heads=4,
                            kv_heads=2, vocab=160, context=32768)
    model = read_gguf(path)
    _, tensors = _plain(path)
    assert model.weights_bytes == sum(int(t.n_bytes) for t in tensors)
    assert model.shape.params == sum(int(t.n_elements) for t in tensors)
    assert model.quantization == name
    quantized = [t for t in tensors if t.name.endswith("attn_q.weight")]
    assert {t.tensor_type.name for t in quantized} == {quant}
    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[quant]]
    assert quantized[0].n_bytes == hidden * hidden // block * type_size
    shape = model.shape
    assert (shape.model_type, shape.layers, shape.heads, shape.kv_heads, shape.head_dim,
            shape.hidden, shape.intermediate, shape.vocab, shape.max_context) == (
        "llama", 3, 4, 2, hidden // 4, hidden, 4 * hidden, 160, 32768)


def test_the_parameter_count_matches_the_same_model_as_an_hf_config(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", layers=2, heads=4, kv_heads=2, hidden=64,
                            ffn=96, vocab=128, context=4096)
    hf = shape_from_hf_config({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 128, "max_position_embeddings": 4096, "tie_word_embeddings": False})
    assert read_gguf(path).shape.params == hf.params
    tied = write_llama_gguf(tmp_path / "tied.gguf", layers=2, heads=4, kv_heads=2, hidden=64,
                            ffn=96, vocab=128, tied=True)
    assert read_gguf(tied).shape.params == hf.params - 128 * 64  # no output.weight


def test_a_real_sized_vocabulary_is_counted_without_parsing_every_token(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", vocab=128256, hidden=32, layers=1, heads=2,
                            kv_heads=1, quant="F16")
    reader, _ = _plain(path)
    assert read_gguf(path).shape.vocab == len(reader.fields["tokenizer.ggml.tokens"].data)


def test_without_a_token_list_the_vocabulary_comes_from_the_embeddings(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", vocab=77, tokens=False)
    assert read_gguf(path).shape.vocab == 77


def test_without_a_file_type_the_dominant_tensor_type_names_it(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", quant="Q8_0", file_type=None)
    assert read_gguf(path).quantization == "Q8_0"


def test_absent_optional_keys_take_llama_cpps_defaults(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", heads=4, kv_heads=4, hidden=64, omit=(
        "attention.head_count_kv", "attention.key_length", "attention.value_length"))
    shape = read_gguf(path).shape
    assert (shape.kv_heads, shape.head_dim) == (4, 16)  # n_head_kv = n_head, n_embd / n_head


def test_a_split_model_counts_every_shard(tmp_path):
    first = write_llama_gguf(tmp_path / "m.gguf", layers=4, split_max_tensors=12)
    shards = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert first == shards[0] and len(shards) > 1
    expected = sum(int(t.n_bytes) for s in shards for t in _plain(s)[1])
    assert read_gguf(first).weights_bytes == expected
    shards[-1].unlink()
    with pytest.raises(EstimateError, match=shards[-1].name):
        read_gguf(first)


def test_what_the_kv_formula_cannot_follow_is_said(tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", layers=2, kv_heads=[1, 2],
                            extra=lambda w: w.add_sliding_window(1024))
    model = read_gguf(path)
    assert model.shape.kv_heads == 2
    assert any("sliding window" in c for c in model.caveats)
    assert any("differ between layers" in c for c in model.caveats)
    assert read_gguf(write_llama_gguf(tmp_path / "plain.gguf")).caveats == ()


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model at all, just some text")
    with pytest.raises(EstimateError, match="not a readable GGUF"):
        read_gguf(text)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(EstimateError, match="not a readable GGUF"):
        read_gguf(empty)
    with pytest.raises(EstimateError, match="no such GGUF file"):
        read_gguf(tmp_path / "missing.gguf")


@pytest.mark.parametrize("where", ["magic", "counts", "token list", "tensor infos",
                                   "tensor data"])
def test_a_truncated_file_is_refused(tmp_path, where):
    path = write_llama_gguf(tmp_path / "m.gguf", vocab=8000, hidden=32, heads=2, kv_heads=1)
    reader, tensors = _plain(path)
    tokens = reader.fields["tokenizer.ggml.tokens"]
    cut = {"magic": 3, "counts": 12, "token list": tokens.offset + 5000,  # a long, skipped array
           "tensor infos": tensors[-1].field.offset + 4,
           "tensor data": tensors[-1].data_offset + 10}[where]
    data = path.read_bytes()
    del reader, tensors
    path.write_bytes(data[:cut])
    with pytest.raises(EstimateError, match="not a readable GGUF"):
        read_gguf(path)


@pytest.mark.parametrize("key", ["block_count", "embedding_length", "attention.head_count",
                                 "context_length"])
def test_a_missing_key_is_named(tmp_path, key):
    path = write_llama_gguf(tmp_path / "m.gguf", omit=[key])
    with pytest.raises(EstimateError, match=f"llama.{key}"):
        read_gguf(path)
