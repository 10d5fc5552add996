"""Room on the disk for an unload, asked before the first byte, with the figures."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from app.agent.errors import ActionError
from app.agent.storage import room

MiB = 1 << 20


def _disk(monkeypatch, free_mib: int, size_mib: int = 1000, block: int = 4096) -> None:
    blocks = size_mib * MiB // block
    st = SimpleNamespace(f_frsize=block, f_bsize=block, f_bavail=free_mib * MiB // block,
                         f_blocks=blocks)
    monkeypatch.setattr(os, "statvfs", lambda path: st)


def test_a_model_that_does_not_fit_is_refused_with_the_figures(monkeypatch):
    _disk(monkeypatch, free_mib=20)
    with pytest.raises(ActionError) as refused:
        room.check("/x/offload", [16 * MiB, 16 * MiB])
    assert refused.value.code == "refused"
    assert str(refused.value) == ("not enough room on the disk: needs 32 MiB, 20 MiB free in "
                                  "/x/offload")


def test_the_headroom_stays_free_for_the_users_own_writes(monkeypatch):
    _disk(monkeypatch, free_mib=40, size_mib=1000)  # 5 % of 1000 MiB = 50 MiB kept
    with pytest.raises(ActionError, match=r"needs 32 MiB, 40 MiB free in /x \(50 MiB of it "
                                          r"stays free for other writes\)"):
        room.check("/x", [32 * MiB])
    _disk(monkeypatch, free_mib=90, size_mib=1000)
    room.check("/x", [32 * MiB])  # 90 - 50 >= 32


def test_the_headroom_is_at_most_a_gib(monkeypatch):
    _disk(monkeypatch, free_mib=1100, size_mib=100_000)  # 5 % would be 5,000 MiB
    room.check("/x", [50 * MiB])


def test_files_take_whole_blocks():
    assert room.needed_bytes([1, 4096, 4097, 0], 4096) == 4096 * 4
    assert room.size_text(5 * 1024) == "5 KiB" and room.size_text(3 << 30) == "3.0 GiB"


def test_a_file_over_the_processs_file_size_limit_is_refused_up_front(monkeypatch):
    """Past ``ulimit -f`` a write is SIGXFSZ: asked before the first byte."""
    _disk(monkeypatch, free_mib=10_000, size_mib=100_000)
    monkeypatch.setattr(room, "file_size_limit", lambda: MiB)
    with pytest.raises(ActionError, match=r"a file of 4 MiB is over this process's file-size "
                                          r"limit of 1 MiB \(ulimit -f\)"):
        room.check("/x", [16 * 1024, 4 * MiB])
    room.check("/x", [16 * 1024, MiB])
