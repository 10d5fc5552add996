"""Which weights are shared with other processes (never moved), read from the
mappings' flags and torch.multiprocessing's own record, not guessed."""

from __future__ import annotations

import time
from multiprocessing import shared_memory

import torch
from torch import nn

from app.agent import sharing


def test_shared_mappings_are_looked_up_by_address():
    maps = sharing.SharedMaps([0x1000, 0x5000], [0x2000, 0x6000])
    assert maps.covers(0x1000) and maps.covers(0x1FFF) and maps.covers(0x5800)
    assert not maps.covers(0x0FFF) and not maps.covers(0x2000) and not maps.covers(0x9000)


def test_memory_of_a_process_alone_is_not_shared():
    model = nn.Linear(8, 8)
    assert not sharing.shared_storage(list(model.parameters()))
    assert not sharing.shared_storage([torch.zeros(16)])


def test_a_devices_shared_mapping_is_not_memory_other_processes_see():
    """Page-locked host memory is mapped shared from ``/dev/nvidiactl``."""
    assert not sharing._other_processes_see(b"/dev/nvidiactl")
    assert not sharing._other_processes_see(b"/dev/dri/renderD128")
    for path in (b"/dev/shm/torch_1_2_0 (deleted)", b"/dev/zero (deleted)", b"",
                 b"/memfd:torch (deleted)", b"/SYSV00000000 (deleted)", b"/data/w.bin"):
        assert sharing._other_processes_see(path), path


def test_share_memory_is_refused_at_once_and_reported_within_a_second():
    model = nn.Linear(8, 8)
    assert sharing.blocker(model, {"tensor_ids": {1}}) is None  # reads (and keeps) the maps
    model.share_memory()
    assert sharing.shared_storage(list(model.parameters()))  # an unload asks afresh
    time.sleep(sharing.MAPS_TTL_S + 0.05)
    assert sharing.blocker(model, {"tensor_ids": {1}}) == sharing.BLOCKER


def test_nothing_shared_in_the_process_answers_without_reading_a_tensor(monkeypatch):
    monkeypatch.setattr(sharing, "_shared_maps", lambda fresh: sharing.SharedMaps([], []))

    class Untouchable:
        def untyped_storage(self):
            raise AssertionError("read a tensor")

    assert sharing.shared_storage([Untouchable()]) is False


def test_a_tensor_over_a_posix_shared_memory_block_is_shared():
    """``torch.frombuffer`` over ``multiprocessing.shared_memory``: torch does
    not call it shared, the mapping's flags do."""
    block = shared_memory.SharedMemory(create=True, size=4096)
    try:
        t = torch.frombuffer(block.buf, dtype=torch.uint8, count=4096)
        assert not t.untyped_storage().is_shared()
        assert sharing.shared_storage([t])
        del t
    finally:
        block.close()
        block.unlink()


def test_shared_anonymous_memory_counts_unless_the_driver_page_locked_it(monkeypatch):
    """Some drivers map page-locked host memory as shared anonymous memory
    (``/dev/zero (deleted)`` in the maps): process-private, so not shared.
    Shared anonymous memory that is not page-locked is what ``fork()``
    children share: it counts."""
    import mmap

    block = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    t = torch.frombuffer(block, dtype=torch.uint8)
    maps = sharing.SharedMaps.read()
    start = maps.mapping(t.untyped_storage().data_ptr())
    assert start is not None and start in maps.anonymous
    assert sharing.shared_storage([t])  # CUDA is not initialised: nothing is page-locked
    monkeypatch.setattr(sharing, "_page_locked", lambda storage: True)
    assert not sharing.shared_storage([t])
    del t
