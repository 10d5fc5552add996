"""Real GGUF files, written with the ``gguf`` package's own writer: a Llama
layout with llama.cpp's key and tensor names, tiny so that a test writes one in
milliseconds.  The weights are zeros (the estimate reads metadata only); the
quantized tensors are raw blocks of the quantization's exact byte length."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np


def _weight(writer, name: str, rows: int, cols: int, quant: str) -> None:
    """A ``rows × cols`` matrix (ggml stores it as ``[cols, rows]``) in ``quant``."""
    import gguf

    qtype = gguf.GGMLQuantizationType[quant]
    if qtype == gguf.GGMLQuantizationType.F16:
        writer.add_tensor(name, np.zeros((rows, cols), dtype=np.float16))
    elif qtype == gguf.GGMLQuantizationType.F32:
        writer.add_tensor(name, np.zeros((rows, cols), dtype=np.float32))
    else:
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        if cols % block:
            raise ValueError(f"{quant} needs rows of a multiple of {block} elements, not {cols}")
        raw = np.zeros((rows, cols // block * type_size), dtype=np.uint8)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)


def write_llama_gguf(path: str | Path, *, layers: int = 2, heads: int = 4,
                     kv_heads: int | list[int] = 2,
                     hidden: int = 64, vocab: int = 96, context: int = 8192,
                     quant: str = "Q8_0", ffn: int | None = None, head_dim: int | None = None,
                     file_type: str | None = "auto", tied: bool = False,
                     omit: Iterable[str] = (), tokens: bool = True,
                     extra: Callable[[object], None] | None = None,
                     split_max_tensors: int = 0) -> Path:
    """Write a Llama-architecture GGUF and return its path.

    ``quant`` is the matrices' GGML type ("F16", "Q8_0", "Q4_K", …; rows must
    be a multiple of its block); norms stay F32 and the token embeddings F16,
    as llama.cpp's quantizer leaves them.  ``file_type`` is the
    ``general.file_type`` name ("MOSTLY_Q8_0"); "auto" derives it from
    ``quant``, None leaves the key out.  ``omit`` leaves metadata keys out
    (suffixes after ``llama.``, e.g. "block_count") to make a broken file.
    ``kv_heads`` may be a per-layer list; ``extra(writer)`` adds keys of its
    own; ``split_max_tensors`` splits the model into ``-0000N-of-0000M.gguf``
    shards as llama.cpp's gguf-split does (the path returned is the first).
    """
    import gguf

    path = Path(path)
    ffn = ffn or 4 * hidden
    head_dim = head_dim or hidden // heads
    omit = set(omit)
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name("tiny-llama")
    keys = {
        "block_count": lambda: writer.add_block_count(layers),
        "context_length": lambda: writer.add_context_length(context),
        "embedding_length": lambda: writer.add_embedding_length(hidden),
        "feed_forward_length": lambda: writer.add_feed_forward_length(ffn),
        "attention.head_count": lambda: writer.add_head_count(heads),
        "attention.head_count_kv": lambda: writer.add_head_count_kv(kv_heads),
        "attention.key_length": lambda: writer.add_key_length(head_dim),
        "attention.value_length": lambda: writer.add_value_length(head_dim),
        "attention.layer_norm_rms_epsilon": lambda: writer.add_layer_norm_rms_eps(1e-5),
        "rope.freq_base": lambda: writer.add_rope_freq_base(10000.0),
    }
    for key, add in keys.items():
        if key not in omit:
            add()
    if file_type == "auto":
        file_type = "ALL_F32" if quant == "F32" else f"MOSTLY_{quant}"
        if file_type not in gguf.LlamaFileType.__members__:
            file_type = f"{file_type}_M"  # Q4_K → MOSTLY_Q4_K_M, as llama-quantize names it
    if file_type is not None:
        writer.add_file_type(int(gguf.LlamaFileType[file_type]))
    if tokens:
        writer.add_tokenizer_model("llama")
        writer.add_token_list([f"<t{i}>" for i in range(vocab)])

    if extra is not None:
        extra(writer)
    per_layer = kv_heads if isinstance(kv_heads, list) else [kv_heads] * layers
    q_out = heads * head_dim
    _weight(writer, "token_embd.weight", vocab, hidden, "F16")
    for i in range(layers):
        blk, kv_out = f"blk.{i}", per_layer[i] * head_dim
        writer.add_tensor(f"{blk}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        _weight(writer, f"{blk}.attn_q.weight", q_out, hidden, quant)
        _weight(writer, f"{blk}.attn_k.weight", kv_out, hidden, quant)
        _weight(writer, f"{blk}.attn_v.weight", kv_out, hidden, quant)
        _weight(writer, f"{blk}.attn_output.weight", hidden, q_out, quant)
        writer.add_tensor(f"{blk}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        _weight(writer, f"{blk}.ffn_gate.weight", ffn, hidden, quant)
        _weight(writer, f"{blk}.ffn_up.weight", ffn, hidden, quant)
        _weight(writer, f"{blk}.ffn_down.weight", hidden, ffn, quant)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    if not tied:
        _weight(writer, "output.weight", vocab, hidden, quant)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path)[0]
