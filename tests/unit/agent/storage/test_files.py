"""The disk target's files: nameless where the system allows, blocks reserved
before a byte is written, plain writes, a private mapping of what was written."""

from __future__ import annotations

import errno
import os
import stat

import pytest
import torch

from app.agent.storage import files, leftovers


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "offload"
    path.mkdir(mode=0o700)
    return str(path)


def test_a_file_has_no_name_and_mode_0600(folder):
    f = files.create(folder, "x.bin")
    try:
        assert os.listdir(folder) == [] and f.path is None
        st = os.fstat(f.fd)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    finally:
        f.close()


def test_without_o_tmpfile_the_name_goes_right_after_the_open(folder, monkeypatch):
    monkeypatch.delattr(os, "O_TMPFILE")
    f = files.create(folder, leftovers.identity() + "-m1-0.bin")
    try:
        assert os.listdir(folder) == [] and f.path is None
        assert stat.S_IMODE(os.fstat(f.fd).st_mode) == 0o600
    finally:
        f.close()


def test_a_filesystem_without_o_tmpfile_falls_back_to_a_name(folder, monkeypatch):
    real_open = os.open

    def no_tmpfile(path, flags, *args, **kwargs):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(errno.EOPNOTSUPP, "not supported")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    f = files.create(folder, "y.bin")
    f.close()
    assert os.listdir(folder) == []


def test_a_planted_link_is_never_followed(folder, tmp_path, monkeypatch):
    """Without /proc the file keeps its name while written: O_EXCL|O_NOFOLLOW."""
    monkeypatch.setattr(files, "proc_fds", lambda: False)
    target = tmp_path / "victim"
    target.write_text("mine")
    os.symlink(target, os.path.join(folder, "z.bin"))
    with pytest.raises(FileExistsError):
        files.create(folder, "z.bin")
    assert target.read_text() == "mine"


def test_reserve_allocates_the_blocks_or_says_why(folder):
    f = files.create(folder, "r.bin")
    try:
        files.reserve(f.fd, 1 << 20)
        st = os.fstat(f.fd)
        assert st.st_size == 1 << 20 and st.st_blocks * 512 >= 1 << 20  # not a sparse hole
    finally:
        f.close()


def test_the_written_bytes_are_what_the_mapping_reads(folder):
    src = torch.arange(3 * files.CHUNK_BYTES // 2 + 7, dtype=torch.int64).view(torch.uint8)
    src = src[: 3 * files.CHUNK_BYTES // 2 + 5]  # several chunks, an odd tail
    f = files.create(folder, "w.bin")
    files.reserve(f.fd, src.numel())
    files.FileSink(torch, f.fd).copy_(src)
    mapped = torch.UntypedStorage.from_file("/proc/self/fd/%d" % f.fd, shared=False,
                                            nbytes=src.numel())
    f.close()
    assert torch.equal(torch.empty(0, dtype=torch.uint8).set_(mapped), src)


def test_gpu_bytes_go_through_a_small_host_buffer(folder, monkeypatch):
    """A CUDA model unloaded to disk: one chunk at a time through the host."""
    monkeypatch.setattr(files._dev, "is_cuda", lambda device: True)
    made: list = []
    real = files._dev.host_buffer

    def buffer(torch_, nbytes, pin):
        made.append((nbytes, pin))
        return real(torch_, nbytes, False)

    monkeypatch.setattr(files._dev, "host_buffer", buffer)
    monkeypatch.setattr(files, "CHUNK_BYTES", 4096)
    src = torch.randint(0, 255, (3 * 4096 + 100,), dtype=torch.uint8)
    f = files.create(folder, "g.bin")
    files.FileSink(torch, f.fd).copy_(src)
    data = os.pread(f.fd, src.numel() + 10, 0)
    f.close()
    assert made == [(4096, True)]
    assert data == bytes(src.tolist())


def test_a_write_error_is_an_oserror(folder, monkeypatch):
    f = files.create(folder, "e.bin")

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError, match="No space"):
        files.FileSink(torch, f.fd).copy_(torch.zeros(10, dtype=torch.uint8))
    f.close()
