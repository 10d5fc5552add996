"""The pre-flight display check: which platform Qt will use, and why it cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.display import DisplayProblem, Probes, check_display, platforms

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = Path("/qt/plugins/platforms/libqxcb.so")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux check")


def probes(missing: list[str] | None = None, refuses: bool = False,
           plugin: Path | None = PLUGIN) -> Probes:
    return Probes(plugin=lambda _env: plugin, missing=lambda _path: list(missing or []),
                  refuses=lambda _display: refuses)


@pytest.mark.parametrize(("env", "expected"), [
    ({}, []),
    ({"DISPLAY": ":0"}, ["xcb"]),
    ({"WAYLAND_DISPLAY": "wayland-0"}, ["wayland"]),
    ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, ["wayland", "xcb"]),
    ({"DISPLAY": ""}, []),
    ({"QT_QPA_PLATFORM": "offscreen"}, ["offscreen"]),
    ({"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":0"}, ["wayland", "xcb"]),
    ({"QT_QPA_PLATFORM": "vnc:size=800x600"}, ["vnc"]),
])
def test_platforms_qt_will_try(env, expected):
    assert platforms(env) == expected


def test_no_display_at_all():
    problem = check_display({}, "linux", probes())
    assert problem == DisplayProblem("no display (DISPLAY and WAYLAND_DISPLAY are unset)")
    assert problem.line == ('vram-steward: cannot open a window: no display (DISPLAY and '
                            'WAYLAND_DISPLAY are unset); for a text view run '
                            '"vram-steward status"')


def test_xcb_asked_for_without_display():
    problem = check_display({"QT_QPA_PLATFORM": "xcb"}, "linux", probes())
    assert problem is not None and "DISPLAY is unset" in problem.cause


def test_missing_libraries_are_named_with_their_packages():
    problem = check_display({"DISPLAY": ":0"}, "linux",
                            probes(missing=["libxcb-cursor.so.0", "libxkbcommon-x11.so.0"]))
    assert problem is not None
    assert "missing libxcb-cursor.so.0, libxkbcommon-x11.so.0" in problem.cause
    assert "apt install libxcb-cursor0 libxkbcommon-x11-0" in problem.cause


def test_unreachable_x_server():
    problem = check_display({"DISPLAY": ":42"}, "linux", probes(refuses=True))
    assert problem is not None and "cannot connect to display :42" in problem.cause


def test_a_working_display_passes():
    assert check_display({"DISPLAY": ":0"}, "linux", probes()) is None


def test_no_plugin_found_is_not_a_failure():
    seen = []
    plugs = Probes(plugin=lambda _env: None, missing=lambda p: seen.append(p) or ["x"],
                   refuses=lambda _d: False)
    assert check_display({"DISPLAY": ":0"}, "linux", plugs) is None
    assert seen == []


@pytest.mark.parametrize("env", [
    {"QT_QPA_PLATFORM": "offscreen"},
    {"WAYLAND_DISPLAY": "wayland-0"},
    {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"},  # wayland may work where xcb cannot
    {"QT_QPA_PLATFORM": "xcb;offscreen", "DISPLAY": ":0"},
])
def test_a_platform_other_than_xcb_is_left_to_qt(env):
    assert check_display(env, "linux", probes(missing=["libxcb.so.1"], refuses=True)) is None


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_macos_and_windows_are_not_checked(platform):
    assert check_display({}, platform, probes()) is None


# The real app in a real process: one line and status 2 instead of Qt's abort.

def _fake_ldd(folder: Path, output: str) -> Path:
    ldd = folder / "ldd"
    ldd.write_text(f"#!/bin/sh\ncat <<'END'\n{output}END\n")
    ldd.chmod(0o755)
    return folder


def _start_gui(tmp_path: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["VRAM_STEWARD_SETTINGS"] = str(tmp_path / "settings.ini")
    env.update(env_vars)
    return subprocess.run([sys.executable, "main.py", "--demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def _assert_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("vram-steward: cannot open a window: ")
    assert lines[0].endswith('for a text view run "vram-steward status"')
    assert "Aborted" not in done.stderr and "qt.qpa" not in done.stderr
    return lines[0]


@linux_only
def test_gui_without_a_display_exits_2_with_one_line(tmp_path):
    line = _assert_one_line(_start_gui(tmp_path))
    assert "no display (DISPLAY and WAYLAND_DISPLAY are unset)" in line


@linux_only
def test_gui_names_the_libraries_the_xcb_plugin_lacks(tmp_path):
    bin_dir = _fake_ldd(tmp_path, "\tlibQt6XcbQpa.so.6 => /x/libQt6XcbQpa.so.6 (0x1)\n"
                                  "\tlibxcb-cursor.so.0 => not found\n"
                                  "\tlibxkbcommon-x11.so.0 => not found\n"
                                  "\tlibxcb-cursor.so.0 => not found\n")
    done = _start_gui(tmp_path, DISPLAY=":4711",
                      PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    line = _assert_one_line(done)
    if "cannot connect" in line:
        pytest.skip("PySide6's xcb plugin is not where the check looks")
    assert "Qt's xcb platform plugin cannot load: missing libxcb-cursor.so.0, " \
           "libxkbcommon-x11.so.0 (" in line


@linux_only
def test_gui_with_a_display_nobody_serves(tmp_path):
    bin_dir = _fake_ldd(tmp_path, "\tlibxcb.so.1 => /lib/libxcb.so.1 (0x1)\n")
    done = _start_gui(tmp_path, DISPLAY=":4711",
                      PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    assert "cannot connect to display :4711" in _assert_one_line(done)
