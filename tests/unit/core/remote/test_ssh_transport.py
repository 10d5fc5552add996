"""The SSH transport's own logic, with ``ssh`` replaced by a script that runs
the server directly (the real sshd is tests/e2e/test_ssh_remote.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from app.core.remote import ssh_transport
from app.core.remote.address import parse_address
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteUnavailable
from app.core.remote.ssh_transport import SshTransport

ROOT = Path(__file__).resolve().parents[4]


def fake_ssh(tmp_path: Path, body: str) -> str:
    """An executable standing in for ssh: it ignores ssh's arguments."""
    path = tmp_path / "ssh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def server_ssh(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(state))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return fake_ssh(tmp_path, f"exec {sys.executable} -m app serve --demo --stdio")


def test_hello_calls_and_the_command_line(server_ssh):
    transport = SshTransport(parse_address("ssh://me@gpu-box:2222"), "~/venv/bin/vram-steward",
                             ssh=server_ssh)
    assert transport.command[-3:] == ["--", "me@gpu-box", "~/venv/bin/vram-steward serve --stdio"]
    assert transport.command[transport.command.index("-p") + 1] == "2222"
    try:
        hello = transport.open()
        assert hello["via"] in ("local", "ssh") and hello["scopes"] == ["control", "read"]
        client = RemoteClient(transport)
        assert client.snapshot().gpus and len(client.agents()) == 3
    finally:
        transport.close()


def test_a_slow_reader_loses_frames_but_never_its_place(server_ssh, monkeypatch):
    monkeypatch.setattr(ssh_transport, "MAX_FRAMES", 2)
    transport = SshTransport(parse_address("ssh://gpu-box"), ssh=server_ssh)
    transport.open()
    try:
        got = []
        for snapshot in RemoteClient(transport).snapshots():
            got.append(snapshot)
            if len(got) == 1:
                time.sleep(2.0)  # ~8 ticks arrive while 2 fit: a gap, then a whole snapshot
            if len(got) == 6:
                break
        assert all(s.gpus for s in got)
        assert [s.monotonic for s in got] == sorted(s.monotonic for s in got)
    finally:
        transport.close()


def test_ssh_failing_is_one_clear_line(tmp_path):
    ssh = fake_ssh(tmp_path, 'echo "me@gpu-box: Permission denied (publickey)." >&2; exit 255')
    transport = SshTransport(parse_address("ssh://me@gpu-box"), ssh=ssh, timeout_s=5)
    with pytest.raises(RemoteUnavailable, match=r"Permission denied \(publickey\)"):
        transport.open()


def test_options_from_the_environment_come_before_the_host(monkeypatch):
    monkeypatch.setenv("VRAM_STEWARD_SSH_OPTIONS", "-F '/tmp/my config' -o ConnectTimeout=5")
    command = SshTransport(parse_address("ssh://gpu-box")).command
    assert command[command.index("-F") + 1] == "/tmp/my config"
    assert command.index("ConnectTimeout=5") < command.index("gpu-box")
    assert os.path.basename(command[0]) == "ssh"
