from __future__ import annotations

import os
import stat

import pytest

from app.agent import paths
from app.agent.paths import UnsafeDir


def test_creates_0700(tmp_path):
    d = str(tmp_path / "rt")
    paths.ensure_private_dir(d)
    assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700
    paths.ensure_private_dir(d)  # idempotent


def test_refuses_group_writable(tmp_path):
    d = tmp_path / "rt"
    d.mkdir()
    os.chmod(d, 0o770)
    with pytest.raises(UnsafeDir, match="group/others"):
        paths.ensure_private_dir(str(d))


def test_refuses_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafeDir, match="symlink"):
        paths.ensure_private_dir(str(link))


def test_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("")
    with pytest.raises(UnsafeDir):
        paths.check_private_dir(str(f))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
def test_refuses_other_owner(tmp_path):
    d = tmp_path / "rt"
    d.mkdir(mode=0o700)
    os.chown(d, 12345, 12345)
    with pytest.raises(UnsafeDir, match="belongs to uid 12345"):
        paths.ensure_private_dir(str(d))


def test_runtime_dir_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAM_STEWARD_RUNTIME_DIR", str(tmp_path / "x"))
    assert paths.runtime_dir() == str(tmp_path / "x")
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/999")
    assert paths.runtime_dir().endswith("vram-steward-%d" % os.getuid())
    assert "/run/user" not in paths.runtime_dir()


def test_long_runtime_dir_falls_back_to_short_socket_dir(tmp_path):
    long = tmp_path / ("x" * 90)
    sock = paths.socket_path(str(long), 4242)
    assert len(sock.encode()) <= paths.MAX_SOCKET_PATH
    assert sock.startswith("/tmp/vst-")
    assert stat.S_IMODE(os.lstat(os.path.dirname(sock)).st_mode) == 0o700
    os.rmdir(os.path.dirname(sock))


def test_registry_dir_checked(tmp_path):
    rt = tmp_path / "rt"
    reg = paths.ensure_registry_dir(str(rt))
    assert reg == str(rt / "agents")
    os.chmod(reg, 0o755)
    with pytest.raises(UnsafeDir):
        paths.ensure_registry_dir(str(rt))


# -- the fallback when the default runtime dir is not private ---------------------------


@pytest.fixture
def tmpdir_here(monkeypatch):
    """tempfile.gettempdir() is a fresh sticky dir of the test's (never the real /tmp)."""
    import subprocess
    import tempfile

    path = os.path.realpath(tempfile.mkdtemp(prefix="vstp", dir="/tmp"))
    os.chmod(path, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", path)
    monkeypatch.delenv("VRAM_STEWARD_RUNTIME_DIR", raising=False)
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


def test_a_private_default_is_used_and_read(tmpdir_here):
    primary = os.path.join(tmpdir_here, "vram-steward-%d" % os.getuid())
    assert paths.runtime_candidates() == ([], [])  # nothing yet, nothing created
    assert not os.path.exists(primary)
    assert paths.claim_runtime_dir() == (primary, None)
    assert stat.S_IMODE(os.lstat(primary).st_mode) == 0o700
    assert paths.runtime_candidates() == ([primary], [])


@pytest.mark.parametrize("spoil", ["symlink", "open", "file"])
def test_a_default_that_is_not_private_gives_way_to_one_fallback(tmpdir_here, spoil):
    primary = os.path.join(tmpdir_here, "vram-steward-%d" % os.getuid())
    elsewhere = os.path.join(tmpdir_here, "elsewhere")
    os.mkdir(elsewhere, 0o700)
    if spoil == "symlink":
        os.symlink(elsewhere, primary)
        why = "is a symlink"
    elif spoil == "open":
        os.mkdir(primary)
        os.chmod(primary, 0o777)
        why = "is open to group/others (mode 777)"
    else:
        open(primary, "w").close()
        why = "is not a directory"
    reader = paths.runtime_candidates()
    assert reader.dirs == [] and reader.notices == [
        "vram-steward: %s %s: ignored; agents use a private %s-* instead" % (primary, why,
                                                                              primary)]
    chosen = paths.claim_runtime_dir()
    fallback = chosen.path
    assert os.path.dirname(fallback) == tmpdir_here
    assert os.path.basename(fallback).startswith("vram-steward-%d-" % os.getuid())
    assert stat.S_IMODE(os.lstat(fallback).st_mode) == 0o700
    assert chosen.notice == "vram-steward: %s %s: using %s instead" % (primary, why, fallback)
    assert paths.claim_runtime_dir() == chosen  # every process agrees on the same one
    assert paths.runtime_candidates() == ([fallback], [chosen.notice])
    assert os.listdir(elsewhere) == []


def test_every_private_runtime_dir_is_read_but_only_those(tmpdir_here):
    uid = os.getuid()
    primary = os.path.join(tmpdir_here, "vram-steward-%d" % uid)
    os.mkdir(primary, 0o700)
    older = os.path.join(tmpdir_here, "vram-steward-%d-aaaa" % uid)
    os.mkdir(older, 0o700)
    loose = os.path.join(tmpdir_here, "vram-steward-%d-bbbb" % uid)
    os.mkdir(loose)
    os.chmod(loose, 0o755)
    os.symlink(older, os.path.join(tmpdir_here, "vram-steward-%d-cccc" % uid))
    os.mkdir(os.path.join(tmpdir_here, "vram-steward-%d0-dddd" % uid), 0o700)  # uid 10, 100..
    assert paths.runtime_candidates() == ([primary, older], [])


def test_an_unsafe_named_runtime_dir_is_refused_without_fallback(tmpdir_here, monkeypatch):
    named = os.path.join(tmpdir_here, "mine")
    os.mkdir(named)
    os.chmod(named, 0o755)
    monkeypatch.setenv("VRAM_STEWARD_RUNTIME_DIR", named)
    with pytest.raises(UnsafeDir, match="group/others"):
        paths.claim_runtime_dir()
    assert paths.runtime_candidates() == ([], [
        "vram-steward: %s (VRAM_STEWARD_RUNTIME_DIR) is open to group/others (mode 755): "
        "refused, no agent registers or is listed there" % named])
    assert os.listdir(tmpdir_here) == ["mine"]


def test_a_squatted_short_socket_dir_gives_way_too(tmp_path):
    long = str(tmp_path / ("x" * 90))
    first = paths.socket_path(long, 4242)
    short = os.path.dirname(first)
    try:
        os.chmod(short, 0o777)  # as if someone else had made it first
        again = os.path.dirname(paths.socket_path(long, 4242))
        assert again.startswith(short + "-") and stat.S_IMODE(os.lstat(again).st_mode) == 0o700
        os.rmdir(again)
    finally:
        os.rmdir(short)


def test_a_neighbours_default_and_lookalike_fallback_are_never_used(tmpdir_here):
    from tests.fakes.neighbour import as_neighbour, neighbour

    uid, gid = neighbour()
    primary = os.path.join(tmpdir_here, "vram-steward-%d" % os.getuid())
    lookalike = primary + "-aaaaaaaa"

    def squat():
        os.mkdir(primary, 0o700)
        os.mkdir(lookalike, 0o700)

    as_neighbour(squat, uid, gid)
    chosen = paths.claim_runtime_dir()
    assert chosen.path not in (primary, lookalike) and os.lstat(chosen.path).st_uid == os.getuid()
    assert chosen.notice == "vram-steward: %s belongs to uid %d, not you: using %s instead" % (
        primary, uid, chosen.path)
    assert paths.runtime_candidates().dirs == [chosen.path]


# -- private files and the state dir ------------------------------------------------------


def test_private_files_are_created_0600_and_never_through_a_link(tmp_path):
    old = os.umask(0)
    try:
        path = str(tmp_path / "f")
        os.close(paths.open_private_file(path, os.O_WRONLY))
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    finally:
        os.umask(old)
    target = tmp_path / "target"
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        paths.open_private_file(str(tmp_path / "link"), os.O_WRONLY | os.O_APPEND)
    assert not target.exists()
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(PermissionError, match="not a regular file"):
        paths.open_private_file(str(tmp_path / "fifo"), os.O_RDWR)
    loose = tmp_path / "loose"
    loose.write_text("x")
    os.chmod(loose, 0o644)  # an own file of an older version: tightened
    os.close(paths.open_private_file(str(loose), os.O_RDWR))
    assert stat.S_IMODE(os.lstat(loose).st_mode) == 0o600


def test_the_default_state_dir_is_tightened_a_named_one_only_checked(tmp_path):
    default = tmp_path / "state" / "vram-steward"
    assert paths.ensure_state_dir(str(default), named=False) == str(default)
    assert stat.S_IMODE(os.lstat(default).st_mode) == 0o700
    os.chmod(default, 0o755)
    paths.ensure_state_dir(str(default), named=False)
    assert stat.S_IMODE(os.lstat(default).st_mode) == 0o700
    named = tmp_path / "named"
    named.mkdir()
    os.chmod(named, 0o775)
    with pytest.raises(UnsafeDir, match="group/others"):
        paths.ensure_state_dir(str(named), named=True)
    assert stat.S_IMODE(os.lstat(named).st_mode) == 0o775
