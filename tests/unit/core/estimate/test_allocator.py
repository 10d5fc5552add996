"""The caching allocator's replay against the behaviour its source documents
(c10/cuda/CUDACachingAllocator.cpp): rounding, the two pools and their segment
sizes, best fit, splitting, merging, and the fragmentation that makes
``max_memory_reserved`` grow beyond the live tensors."""

from __future__ import annotations

import random

import pytest

from app.core.estimate.allocator import AllocatorPeak, replay, round_size, segment_size

KIB = 1024
MIB = 1024 * 1024


def allocs(*sizes: int, start: int = 0) -> list[tuple[int, int]]:
    return [(start + i, size) for i, size in enumerate(sizes)]


def frees(*keys: int) -> list[tuple[int, int]]:
    return [(key, 0) for key in keys]


def test_one_byte_takes_a_512_byte_block_of_a_2_mib_segment():
    assert replay(allocs(1)) == AllocatorPeak(allocated_bytes=512, reserved_bytes=2 * MIB)


def test_sizes_are_rounded_up_to_512_bytes():
    assert [round_size(n) for n in (0, 1, 512, 513, 1024, 1025)] == [512, 512, 512, 1024, 1024,
                                                                     1536]
    assert replay(allocs(513, 1000, 1025)).allocated_bytes == 1024 + 1024 + 1536


def test_small_requests_are_packed_into_2_mib_segments():
    # 4096 blocks of 512 bytes fill one 2 MiB segment exactly; one more needs a second segment.
    assert replay(allocs(*[512] * 4096)).reserved_bytes == 2 * MIB
    assert replay(allocs(*[512] * 4097)).reserved_bytes == 4 * MIB


def test_one_mib_is_the_largest_small_request():
    assert replay(allocs(MIB, MIB)).reserved_bytes == 2 * MIB  # both in one small segment
    assert replay(allocs(MIB + 1)).reserved_bytes == 20 * MIB  # the large pool's 20 MiB


def test_a_5_mib_request_reserves_20_mib_that_the_next_ones_share():
    assert replay(allocs(5 * MIB)) == AllocatorPeak(5 * MIB, 20 * MIB)
    assert replay(allocs(5 * MIB, 5 * MIB)) == AllocatorPeak(10 * MIB, 20 * MIB)
    assert replay(allocs(*[5 * MIB] * 4)) == AllocatorPeak(20 * MIB, 20 * MIB)
    assert replay(allocs(*[5 * MIB] * 5)) == AllocatorPeak(25 * MIB, 40 * MIB)


def test_from_10_mib_a_segment_is_the_request_rounded_to_2_mib():
    assert segment_size(10 * MIB - 512) == 20 * MIB
    assert segment_size(10 * MIB) == 10 * MIB
    assert replay(allocs(30 * MIB)) == AllocatorPeak(30 * MIB, 30 * MIB)
    assert replay(allocs(30 * MIB + 1)).reserved_bytes == 32 * MIB


def test_a_remainder_of_at_most_1_mib_is_not_split_off_a_large_block():
    # 19.5 MiB gets a 20 MiB segment; the 0.5 MiB left is no block of its own, so the
    # whole segment counts as allocated, as memory_allocated shows it.
    assert replay(allocs(19 * MIB + 512 * KIB)) == AllocatorPeak(20 * MIB, 20 * MIB)
    # 1 MiB + 512 bytes left is split off and serves the next request of that size.
    assert replay(allocs(19 * MIB - 512, MIB + 512)) == AllocatorPeak(20 * MIB, 20 * MIB)


def test_small_blocks_split_down_to_512_bytes():
    # 1 MiB then 1 MiB - 512 leave 512 bytes of the segment: split, and a 1-byte request
    # fits there.
    assert replay(allocs(MIB, MIB - 512, 1)) == AllocatorPeak(2 * MIB, 2 * MIB)
    # The large pool is another pool: its free bytes never serve a small request.
    assert replay(allocs(5 * MIB, 1)).reserved_bytes == 22 * MIB


def test_a_freed_block_serves_a_later_request_without_new_memory():
    trace = allocs(40 * MIB) + frees(0) + allocs(30 * MIB, start=1)
    assert replay(trace) == AllocatorPeak(40 * MIB, 40 * MIB)


def test_the_smallest_free_block_that_fits_is_used():
    # Free blocks of 40 and 60 MiB: 30 MiB goes into the 40, so 50 MiB still fits the 60.
    trace = allocs(40 * MIB, 60 * MIB) + frees(0, 1) + allocs(30 * MIB, 50 * MIB, start=2)
    assert replay(trace).reserved_bytes == 100 * MIB
    # Were 60 MiB the only block, 30 MiB would take it and 50 MiB would need a new segment.
    trace = allocs(60 * MIB) + frees(0) + allocs(30 * MIB, 50 * MIB, start=1)
    assert replay(trace).reserved_bytes == 110 * MIB


def test_freed_neighbours_merge_into_one_block():
    four = allocs(*[5 * MIB] * 4)
    assert replay(four + frees(0, 1, 2, 3) + allocs(20 * MIB, start=4)).reserved_bytes == 20 * MIB
    # The middle block freed last joins its freed neighbours: 15 MiB in one piece.
    trace = four + frees(0, 2, 1) + allocs(12 * MIB, start=4)
    assert replay(trace).reserved_bytes == 20 * MIB


def test_holes_between_live_blocks_cannot_serve_a_larger_request():
    # Blocks 0 and 2 freed: two 5 MiB holes, 10 MiB free, but a 10 MiB request fits neither.
    trace = allocs(*[5 * MIB] * 4) + frees(0, 2) + allocs(10 * MIB, start=4)
    assert replay(trace) == AllocatorPeak(20 * MIB, 30 * MIB)


def test_fragmentation_grows_reserved_as_requests_grow():
    # A loop whose buffer grows each step: every freed block is too small for the next
    # request, so each step takes a new segment and reserved climbs far above what is
    # ever alive at once (two buffers).
    sizes = [(10 + 2 * step) * MIB for step in range(10)]
    trace: list[tuple[int, int]] = []
    for step, size in enumerate(sizes):
        trace += allocs(size, start=step) + frees(step - 1)
    assert replay(trace) == AllocatorPeak(sizes[-2] + sizes[-1], sum(sizes))


def test_the_allocated_peak_is_the_highest_point_not_the_end():
    trace = allocs(30 * MIB, 40 * MIB) + frees(0, 1) + allocs(10 * MIB, start=2)
    assert replay(trace) == AllocatorPeak(70 * MIB, 70 * MIB)


def test_a_free_of_an_unknown_block_is_ignored_and_bad_events_are_refused():
    assert replay(frees(7) + allocs(1)) == AllocatorPeak(512, 2 * MIB)
    with pytest.raises(ValueError, match="twice"):
        replay(allocs(1) + allocs(1))
    with pytest.raises(ValueError, match="negative"):
        replay([(0, -5)])


def test_a_random_trace_keeps_the_allocators_invariants():
    rng = random.Random(27)
    live: list[int] = []
    trace: list[tuple[int, int]] = []
    rounded_live = rounded_peak = 0
    sizes: dict[int, int] = {}
    for key in range(20_000):
        if live and rng.random() < 0.45:
            gone = live.pop(rng.randrange(len(live)))
            trace.append((gone, 0))
            rounded_live -= sizes[gone]
        nbytes = rng.choice((rng.randrange(1, 4 * KIB), rng.randrange(1, 2 * MIB),
                             rng.randrange(1, 64 * MIB)))
        trace.append((key, nbytes))
        live.append(key)
        sizes[key] = round_size(nbytes)
        rounded_live += sizes[key]
        rounded_peak = max(rounded_peak, rounded_live)
    peak = replay(trace)
    assert replay(trace) == peak
    # Unsplit blocks count whole, so allocated is at least the rounded sizes.
    assert rounded_peak <= peak.allocated_bytes <= peak.reserved_bytes
    assert peak.reserved_bytes % (2 * MIB) == 0
