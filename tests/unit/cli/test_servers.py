"""``server-key``: the key read from stdin, kept private; a full disk or a bad
entry is a clear refusal that changes nothing."""

from __future__ import annotations

import io
import json
import os

import pytest

from app import cli
from tests.fakes.full_disk import fill, free, small_disk, why_no_tmpfs


def keep(capsys, monkeypatch, text: str, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    rc = cli.main(["server-key", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_key_is_kept_private_and_never_taken_from_the_command_line(
        tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(tmp_path / "state"))
    rc, out, err = keep(capsys, monkeypatch, "ada:s3cret\n", "a1111", "--basic", "--port", "7860")
    assert rc == 0 and "(mode 0600)" in out and err == ""
    path = tmp_path / "state" / "server-keys.json"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == [{"kind": "a1111", "port": 7860, "basic": "ada:s3cret"}]
    rc, out, err = keep(capsys, monkeypatch, "no-colon\n", "a1111", "--basic")
    assert rc == 1 and "as user:password" in err and out == ""
    assert json.loads(path.read_text())[0]["basic"] == "ada:s3cret"  # unchanged


@pytest.mark.skipif(why_no_tmpfs() is not None, reason=why_no_tmpfs() or "")
def test_a_full_disk_is_a_refusal_that_keeps_the_old_keys(tmp_path, capsys, monkeypatch) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        state = disk / "state"
        monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(state))
        assert keep(capsys, monkeypatch, "sk-1\n", "lmstudio")[0] == 0
        before = (state / "server-keys.json").read_bytes()
        fill(disk)
        try:
            rc, out, err = keep(capsys, monkeypatch, "sk-2\n", "vllm")
        finally:
            free(disk)
        assert rc == 1 and out == "" and "No space left on device" in err
        assert (state / "server-keys.json").read_bytes() == before
        assert sorted(os.listdir(state)) == ["server-keys.json"]  # no temporary file left
