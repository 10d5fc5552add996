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
    with pytest.raises(UnsafeDir, match="owned by"):
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
