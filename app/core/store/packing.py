"""Per-process bytes of one sample, packed in one blob.

Each entry is 8 bytes: the ``process`` table's id (uint32) and the bytes in
KiB (uint32, up to 4 TiB; drivers report whole MiB, so nothing shown is lost).
``UNKNOWN_KIB`` marks a process present with unknown bytes (NULL, never 0).
"""

from __future__ import annotations

import numpy as np

ENTRY = np.dtype([("process", "<u4"), ("kib", "<u4")])
ENTRY_BYTES = ENTRY.itemsize
UNKNOWN_KIB = 0xFFFFFFFF
_MAX_KIB = UNKNOWN_KIB - 1


def pack(entries: dict[int, int | None]) -> bytes:
    """process id → bytes (None: unknown) as a blob."""
    out = np.empty(len(entries), dtype=ENTRY)
    for i, (process, value) in enumerate(entries.items()):
        out[i] = (process, UNKNOWN_KIB if value is None
                  else min(_MAX_KIB, (int(value) + 512) // 1024))
    return out.tobytes()


def unpack(blob: bytes | None) -> np.ndarray:
    """A blob as an ``ENTRY`` array (empty for None or a torn blob)."""
    if not blob or len(blob) % ENTRY_BYTES:
        return np.empty(0, dtype=ENTRY)
    return np.frombuffer(blob, dtype=ENTRY)


def to_bytes(kib: np.ndarray) -> np.ndarray:
    """KiB figures as float64 bytes, NaN where unknown."""
    out = kib.astype(np.float64) * 1024.0
    out[kib == UNKNOWN_KIB] = np.nan
    return out
