"""The GUI command's options: ``--size``, an unwritable ``--screenshot`` path,
and the screenshot itself in a real process."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import cli
from app.cli.gui import parse_size, unwritable

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("text", "size"), [
    ("800x600", (800, 600)), ("640x400", (640, 400)), ("7680x4320", (7680, 4320)),
    ("1920X1080", (1920, 1080)),
])
def test_size_is_parsed(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["639x400", "640x399", "7681x4320", "7680x4321", "800",
                                  "800x", "x600", "800*600", "-800x600", "big"])
def test_bad_size_is_an_argparse_error(capsys, text):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--screenshot", "x.png", f"--size={text}"])
    assert exc.value.code == 2
    assert "--size" in capsys.readouterr().err


def test_size_without_screenshot_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--size", "800x600"])
    assert exc.value.code == 2
    assert "--size applies to --screenshot only" in capsys.readouterr().err


def test_a_writable_path_is_left_as_it_was(tmp_path):
    fresh = tmp_path / "shot.png"
    assert unwritable(fresh) is None
    assert not fresh.exists()
    missing = tmp_path / "new" / "deeper" / "shot.png"
    assert unwritable(missing) == f"{missing.parent}: no such folder"
    assert not (tmp_path / "new").exists()  # no folder is made for a typo
    kept = tmp_path / "old.png"
    kept.write_bytes(b"old")
    assert unwritable(kept) is None
    assert kept.read_bytes() == b"old"


def test_unwritable_paths_say_why(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert unwritable(blocker / "x.png") == f"{blocker} is not a folder"
    assert unwritable(tmp_path) == f"{tmp_path} is a folder"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not bind root")
def test_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert "Permission denied" in (unwritable(folder / "x.png") or "")
    finally:
        folder.chmod(0o700)


def _screenshot(tmp_path: Path, png: Path | str, *extra: str,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)
    env["VRAM_STEWARD_SETTINGS"] = str(tmp_path / "settings.ini")
    return subprocess.run([sys.executable, "main.py", "--screenshot", str(png), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_screenshot_to_an_unwritable_path_fails_fast_with_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    started = time.monotonic()
    done = _screenshot(tmp_path, blocker / "dir" / "x.png", "--demo", timeout=20)
    assert time.monotonic() - started < 20
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [f"vram-steward: cannot write the screenshot: {blocker / 'dir'}: "
                     "no such folder"]
    assert not (blocker.parent / "dir").exists()


def _png_size(png: Path) -> tuple[int, int]:
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_screenshot_has_the_size_asked_for(tmp_path):
    png = tmp_path / "shot.png"
    done = _screenshot(tmp_path, png, "--size", "1024x700", "--demo", "--after", "0.5")
    assert done.returncode == 0, done.stderr
    assert _png_size(png) == (1024, 700)
    assert "cannot be" not in done.stderr


def test_screenshot_below_the_windows_minimum_says_its_real_size(tmp_path):
    png = tmp_path / "shot.png"
    done = _screenshot(tmp_path, png, "--size", "640x400", "--demo=2x8", "--after", "0.5")
    assert done.returncode == 0, done.stderr
    width, height = _png_size(png)
    assert width >= 640 and height >= 400
    if (width, height) != (640, 400):
        assert (f"the window cannot be 640x400; the screenshot is {width}x{height}"
                in done.stderr)


def test_the_windows_host_option_before_a_command_is_refused(capsys):
    from app.cli import main

    with pytest.raises(SystemExit) as ended:
        main(["--host", "ssh://gpu1", "status"])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "--host before 'status' is the window's" in err and "COMMAND --host URL" in err


def test_hosts_given_to_the_window_are_checked_before_it_starts(tmp_path, capsys):
    from app.cli import build_parser, main
    from app.cli.gui import given_hosts

    token = tmp_path / "token"
    token.write_text("vst_secret\n")
    token.chmod(0o600)
    args = build_parser().parse_args(["--host", "ssh://me@gpu1:2222", "--host",
                                      "https://gpu2:9847", "--token-file", str(token),
                                      "--remote-command", "~/venv/bin/vram-steward"])
    ssh, https = given_hosts(args)
    assert (ssh.url, ssh.token_file, ssh.remote_command) == (
        "ssh://me@gpu1:2222", None, "~/venv/bin/vram-steward")
    assert (https.url, https.token_file, https.remote_command) == (
        "https://gpu2:9847", str(token), None)
    for argv, why in ((["--host", "http://gpu2:9847", "--token-file", str(token)],
                       "in the clear"),
                      (["--demo", "--host", "ssh://gpu1"], "--demo and --host"),
                      (["--host", "ssh://gpu1", "--host", "ssh://gpu1"], "already in the list")):
        assert main([*argv, "--screenshot", str(tmp_path / "x.png")]) == 1
        err = capsys.readouterr().err
        assert why in err and not (tmp_path / "x.png").exists()
