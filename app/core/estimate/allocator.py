"""PyTorch's CUDA caching allocator replayed on a trace of allocations.

``torch.cuda.max_memory_reserved`` is larger than the peak of live tensors:
each request is rounded, small ones are packed into 2 MiB segments, medium
ones into 20 MiB segments, and a freed block is only reused by a request that
fits it, so holes between live blocks make the allocator ask the driver for
more.  This module follows the rules of ``c10/cuda/CUDACachingAllocator.cpp``
with the default settings (no ``PYTORCH_CUDA_ALLOC_CONF``: no expandable
segments, no ``max_split_size_mb``, no power-of-two rounding), one device and
one stream, and memory that never runs out, so nothing is given back to the
driver: the peak of reserved bytes is its final value.

The rules, as the allocator has them:

* ``round_size``: a request is rounded up to a multiple of 512 bytes
  (``kMinBlockSize``), at least 512.
* Requests of at most 1 MiB (``kSmallSize``) use the small pool, larger ones
  the large pool; a block never moves between pools.
* ``get_free_block``: the smallest free block of the pool that is large
  enough, the lowest address among equal sizes.
* ``get_allocation_size``: with no such block a new segment is allocated:
  2 MiB (``kSmallBuffer``) for the small pool, 20 MiB (``kLargeBuffer``) for
  requests under 10 MiB (``kMinLargeAlloc``), else the request rounded up to
  2 MiB (``kRoundLarge``).
* ``should_split``: the block found is split when what remains is at least
  512 bytes (small pool) or more than 1 MiB (large pool); otherwise the whole
  block is handed out and counted as allocated.
* ``free_block``: a freed block merges with its free neighbours in the same
  segment and goes back to its pool.

``memory_allocated`` counts the size of the blocks handed out (after
rounding, and whole unsplit blocks), which is what :func:`replay` reports.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass

MIN_BLOCK_BYTES = 512  # kMinBlockSize: every size is a multiple of it
SMALL_REQUEST_BYTES = 1 << 20  # kSmallSize: the largest request of the small pool
SMALL_SEGMENT_BYTES = 2 << 20  # kSmallBuffer: the small pool's segments
LARGE_SEGMENT_BYTES = 20 << 20  # kLargeBuffer: segments for requests under 10 MiB
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc: from here a segment fits the request
LARGE_ROUND_BYTES = 2 << 20  # kRoundLarge: larger segments are rounded to it


@dataclass(frozen=True, slots=True)
class AllocatorPeak:
    """The peaks ``max_memory_allocated`` and ``max_memory_reserved`` would show."""

    allocated_bytes: int
    reserved_bytes: int


def round_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` gets (``round_size``)."""
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_size(block_bytes: int) -> int:
    """The bytes asked of the driver when no cached block fits (``get_allocation_size``)."""
    if block_bytes <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if block_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-block_bytes // LARGE_ROUND_BYTES) * LARGE_ROUND_BYTES


class _Block:
    """A piece of a segment: its neighbours in the segment are ``prev`` and ``next``."""

    __slots__ = ("addr", "size", "prev", "next", "free", "small")

    def __init__(self, addr: int, size: int, prev: _Block | None, next_: _Block | None,
                 small: bool) -> None:
        self.addr = addr
        self.size = size
        self.prev = prev
        self.next = next_
        self.free = True
        self.small = small  # in the small pool's segments


class _Pool:
    """Free blocks ordered by (size, address), as the allocator's ``BlockPool.blocks``."""

    __slots__ = ("keys", "blocks")

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[int, _Block] = {}

    def add(self, block: _Block) -> None:
        insort(self.keys, (block.size, block.addr))
        self.blocks[block.addr] = block

    def remove(self, block: _Block) -> None:
        del self.keys[bisect_left(self.keys, (block.size, block.addr))]
        del self.blocks[block.addr]

    def best_fit(self, size: int) -> _Block | None:
        """Take the smallest block of at least ``size`` bytes, lowest address first."""
        i = bisect_left(self.keys, (size, -1))
        if i == len(self.keys):
            return None
        _, addr = self.keys.pop(i)
        return self.blocks.pop(addr)


class CachingAllocator:
    """One device's caching allocator, fed allocations and frees in program order."""

    def __init__(self) -> None:
        self._small = _Pool()
        self._large = _Pool()
        self._live: dict[int, _Block] = {}
        self._next_addr = 0  # segments get increasing addresses, as fresh cudaMallocs mostly do
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.peak_allocated_bytes = 0

    def malloc(self, key: int, nbytes: int) -> None:
        """Hand out a block of at least ``nbytes`` under ``key``."""
        if key in self._live:
            raise ValueError(f"block {key} is allocated twice without a free")
        size = round_size(nbytes)
        small = size <= SMALL_REQUEST_BYTES
        pool = self._small if small else self._large
        block = pool.best_fit(size)
        if block is None:
            block = self._new_segment(segment_size(size), small)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK_BYTES) if small else (remaining > SMALL_REQUEST_BYTES):
            rest = _Block(block.addr + size, remaining, block, block.next, small)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.add(rest)
        block.free = False
        self._live[key] = block
        self.allocated_bytes += block.size
        if self.allocated_bytes > self.peak_allocated_bytes:
            self.peak_allocated_bytes = self.allocated_bytes

    def free(self, key: int) -> None:
        """Give back block ``key``; a key not live (made before the trace began) is ignored."""
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated_bytes -= block.size
        pool = self._small if block.small else self._large
        prev = block.prev
        if prev is not None and prev.free:
            pool.remove(prev)
            block.addr = prev.addr
            block.size += prev.size
            block.prev = prev.prev
            if block.prev is not None:
                block.prev.next = block
        nxt = block.next
        if nxt is not None and nxt.free:
            pool.remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if block.next is not None:
                block.next.prev = block
        block.free = True
        pool.add(block)

    def _new_segment(self, nbytes: int, small: bool) -> _Block:
        block = _Block(self._next_addr, nbytes, None, None, small)
        self._next_addr += nbytes
        self.reserved_bytes += nbytes
        return block


def replay(events: Iterable[tuple[int, int]]) -> AllocatorPeak:
    """The allocator's peaks over ``events``: ``(key, nbytes)`` allocates block
    ``key`` of ``nbytes`` when ``nbytes > 0`` and frees it when ``nbytes == 0``."""
    allocator = CachingAllocator()
    malloc = allocator.malloc
    free = allocator.free
    for key, nbytes in events:
        if nbytes > 0:
            malloc(key, nbytes)
        elif nbytes == 0:
            free(key)
        else:
            raise ValueError(f"block {key}: a negative size ({nbytes})")
    return AllocatorPeak(allocator.peak_allocated_bytes, allocator.reserved_bytes)
