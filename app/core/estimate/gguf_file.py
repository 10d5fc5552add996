"""A GGUF file's metadata: the shape of its model and the exact bytes of its
weights, read from the header without touching the tensor data.

The ``gguf`` package's reader memory-maps the file and walks the key/value
section and the tensor infos; the weights' bytes are the sum of each tensor's
size at its quantization, as llama.cpp loads them.  The tokenizer's arrays
(hundreds of thousands of strings in a real model) are skipped by their
lengths instead of being parsed item by item, which keeps a 128k-vocabulary
file's header to a fraction of a second.
"""

from __future__ import annotations

import re
import struct
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.estimate.llm import LlmShape
from app.core.estimate.types import EstimateError

INSTALL_HINT = 'pip install "vram-steward[estimate]"'
#: Arrays longer than this are skipped by length (only their length is kept).
_LONG_ARRAY = 4096
_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)


@dataclass(frozen=True, slots=True)
class GgufModel:
    """What the formula needs of a GGUF file."""

    path: Path
    architecture: str
    shape: LlmShape
    weights_bytes: int  # the tensors' bytes at their quantization, every shard together
    quantization: str  # "Q4_K_M", "F16": the file type, or the dominant tensor type
    key_length: int  # K head size
    value_length: int  # V head size
    caveats: tuple[str, ...]  # what the KV formula does not follow for this architecture


def _reader_class() -> Any:
    """``gguf.GGUFReader`` with long arrays skipped by their lengths."""
    try:
        import gguf
        import numpy as np
    except ImportError as exc:
        raise EstimateError(f"reading a GGUF file needs the gguf package: {INSTALL_HINT}") from exc

    fixed = {t: np.dtype(n).itemsize for t, n in gguf.GGUFReader.gguf_scalar_to_np.items()}
    string, array = gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY

    class MetadataReader(gguf.GGUFReader):
        def _get_field_parts(self, orig_offs: int, raw_type: int) -> Any:
            if raw_type != array:
                return super()._get_field_parts(orig_offs, raw_type)
            item_type = self._get(orig_offs, np.uint32)
            length = self._get(orig_offs + 4, np.uint64)
            if len(item_type) < 1 or len(length) < 1:
                raise ValueError("the file ends inside a metadata array")
            count, item = int(length[0]), int(item_type[0])
            if count <= _LONG_ARRAY or (item != string and item not in fixed):
                return super()._get_field_parts(orig_offs, raw_type)
            offs = orig_offs + 12
            if item == string:
                swapped = "<" if sys.byteorder == "big" else ">"
                order = "=" if self.byte_order == "I" else swapped
                view = self.data.data
                unpack = struct.Struct(order + "Q").unpack_from
                try:
                    for _ in range(count):
                        offs += 8 + unpack(view, offs)[0]
                except struct.error as exc:
                    raise ValueError("the file ends inside a metadata array") from exc
            else:
                offs += count * fixed[gguf.GGUFValueType(item)]
            if offs > len(self.data):
                raise ValueError("the file ends inside a metadata array")
            return offs - orig_offs, [item_type, length], [], [array, gguf.GGUFValueType(item)]

    return MetadataReader


def _open(path: Path) -> Any:
    reader_class = _reader_class()
    try:
        return reader_class(str(path))
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, OSError) as exc:
        raise EstimateError(f"{path.name} is not a readable GGUF file ({exc})") from exc


def _value(reader: Any, key: str) -> Any:
    """A key's value: a scalar, a string, or a list (a per-layer array); None when absent."""
    import gguf

    field = reader.get_field(key)
    if field is None or not field.data:  # absent, or an array skipped by its length
        return None
    items = [field.parts[i] for i in field.data]
    if field.types[-1] == gguf.GGUFValueType.STRING:
        values = [bytes(item).decode("utf-8", "replace") for item in items]
    else:
        values = [item.tolist()[0] for item in items]
    return values if field.types[0] == gguf.GGUFValueType.ARRAY else values[0]


def _array_length(reader: Any, key: str) -> int | None:
    field = reader.get_field(key)
    if field is None or len(field.types) < 2:
        return None
    return int(field.parts[4][0])  # key length, key, type, item type, item count


def _positive(value: Any) -> int | None:
    """An integer key (the largest, for a per-layer array); None when absent or not positive."""
    if isinstance(value, list):
        value = max((v for v in value if isinstance(v, int)), default=None)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _shards(path: Path, reader: Any) -> list[Path]:
    """The other files of a split model (``name-00001-of-00003.gguf``)."""
    count = _positive(_value(reader, "split.count")) or 1
    if count <= 1:
        return []
    match = _SPLIT_NAME.match(path.name)
    if match is None:
        raise EstimateError(f"{path.name} is shard of a model split in {count} files, "
                            "but its name does not say where the others are")
    stem, width = match["stem"], len(match["count"])
    others = [path.with_name(f"{stem}-{i:0{width}d}-of-{count:0{width}d}.gguf")
              for i in range(1, count + 1)]
    others = [p for p in others if p != path]
    missing = [p.name for p in others if not p.is_file()]
    if missing:
        raise EstimateError(f"the model is split in {count} files; missing: {', '.join(missing)}")
    return others


def _quantization(reader: Any, tensors: list[Any]) -> str:
    """The file type's name ("Q4_K_M"), else the type holding most of the bytes."""
    import gguf

    file_type = _value(reader, "general.file_type")
    if isinstance(file_type, int):
        try:
            name = gguf.LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    by_type: Counter[str] = Counter()
    for tensor in tensors:
        by_type[tensor.tensor_type.name] += int(tensor.n_bytes)
    return by_type.most_common(1)[0][0] if by_type else "unknown"


def _caveats(reader: Any, arch: str, key_length: int, value_length: int) -> tuple[str, ...]:
    out = []
    if reader.get_field(f"{arch}.attention.sliding_window") is not None:
        out.append("Some layers use a sliding window: llama.cpp keeps a shorter cache for them, "
                   "so the KV cache here (every layer at the full context) is an upper bound.")
    if reader.get_field(f"{arch}.attention.kv_lora_rank") is not None:
        out.append("The attention caches a compressed latent (MLA): llama.cpp's cache layout "
                   "differs from K and V of every head.")
    if reader.get_field(f"{arch}.ssm.state_size") is not None:
        out.append("Recurrent (SSM) layers keep a state per sequence that is not counted.")
    head_counts = _value(reader, f"{arch}.attention.head_count_kv")
    if isinstance(head_counts, list) and len(set(head_counts)) > 1:
        out.append("The KV heads differ between layers: the cache is sized with the largest "
                   "count on every layer, an upper bound.")
    if (key_length + value_length) % 2:
        out.append("K and V heads have sizes of different parity; the cache is rounded down "
                   "by one element per head.")
    return tuple(out)


def read_gguf(path: str | Path) -> GgufModel:
    """The shape and weight bytes of a GGUF file (every shard of a split one)."""
    path = Path(path)
    if not path.is_file():
        raise EstimateError(f"no such GGUF file: {path}")
    reader = _open(path)
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise EstimateError(f"{path.name} has no general.architecture")

    def need(suffix: str) -> int:
        value = _positive(_value(reader, f"{arch}.{suffix}"))
        if value is None:
            raise EstimateError(f"{path.name} has no {arch}.{suffix}")
        return value

    layers = need("block_count")
    hidden = need("embedding_length")
    heads = need("attention.head_count")
    max_context = need("context_length")
    kv_heads = _positive(_value(reader, f"{arch}.attention.head_count_kv")) or heads
    key_length = _positive(_value(reader, f"{arch}.attention.key_length")) or hidden // heads
    value_length = _positive(_value(reader, f"{arch}.attention.value_length")) or key_length
    intermediate = _positive(_value(reader, f"{arch}.feed_forward_length")) or 0

    tensors = list(reader.tensors)
    for shard in _shards(path, reader):
        tensors += list(_open(shard).tensors)
    vocab = (_array_length(reader, "tokenizer.ggml.tokens")
             or _positive(_value(reader, f"{arch}.vocab_size")))
    if vocab is None:
        embedding = next((t for t in tensors if t.name == "token_embd.weight"), None)
        if embedding is None or len(embedding.shape) < 2:
            raise EstimateError(f"{path.name} has no tokenizer.ggml.tokens nor token_embd.weight "
                                "to take the vocabulary size from")
        vocab = int(embedding.shape[1])  # ggml order: [hidden, vocab]

    shape = LlmShape(model_type=arch, layers=layers, heads=heads, kv_heads=kv_heads,
                     head_dim=(key_length + value_length) // 2, hidden=hidden,
                     intermediate=intermediate, vocab=vocab,
                     params=sum(int(t.n_elements) for t in tensors),
                     max_context=max_context, exact=True)
    return GgufModel(path=path, architecture=arch, shape=shape,
                     weights_bytes=sum(int(t.n_bytes) for t in tensors),
                     quantization=_quantization(reader, tensors),
                     key_length=key_length, value_length=value_length,
                     caveats=_caveats(reader, arch, key_length, value_length))


__all__ = ["GgufModel", "read_gguf"]
