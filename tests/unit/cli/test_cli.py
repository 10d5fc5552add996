"""The command line: the ``status`` JSON contract, exit codes, no Qt, screenshots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from app.cli import status as cli_status
from app.core.monitor.nvml_source import NvmlSource
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml, GiB, MiB
from tests.unit.cli.running import run_cli

ROOT = Path(__file__).resolve().parents[3]

GPU_KEYS = {"index", "name", "uuid", "memory_total", "memory_used", "memory_free",
            "utilization_gpu", "temperature", "processes"}
PROCESS_KEYS = {"pid", "name", "user", "command", "gpu_memory", "sm_util", "cpu_percent",
                "host_rss"}


@pytest.fixture
def fake_nvml(monkeypatch):
    """Route the CLI's NVML source through a fake at the pynvml boundary."""
    fake = FakeNvml([FakeGpu("NVIDIA RTX A6000", total=48 * GiB, used=5 * GiB),
                     FakeGpu("NVIDIA RTX A6000", total=48 * GiB, used=0)])

    def make_source(demo: bool, seed: int = 7, size=None):
        if demo:
            from app.core.monitor.demo_source import DemoSource
            return DemoSource(seed=seed)
        return NvmlSource(nvml=fake)

    monkeypatch.setattr(cli_status, "make_source", make_source)
    return fake


def test_status_json_with_demo_follows_the_contract(capsys):
    rc, out, err = run_cli(capsys, "status", "--demo", "--json", "--interval", "0")
    assert rc == 0, err
    data = json.loads(out)
    assert data["source"] == "demo"
    assert isinstance(data["driver_version"], str)
    assert len(data["gpus"]) == 2
    for gpu in data["gpus"]:
        assert gpu.keys() >= GPU_KEYS
        for key in ("memory_total", "memory_used", "memory_free"):
            assert isinstance(gpu[key], int) and gpu[key] >= 0
        assert gpu["memory_used"] + gpu["memory_free"] + gpu["memory_reserved"] == gpu["memory_total"]
        assert gpu["processes"], "the demo always has processes on both GPUs"
        for proc in gpu["processes"]:
            assert proc.keys() >= PROCESS_KEYS
            assert isinstance(proc["gpu_memory"], int)
        assert gpu["memory_used"] >= sum(p["gpu_memory"] for p in gpu["processes"])
    assert data["gpus"][0]["memory_total"] == 24 * GiB


def test_demo_flag_is_accepted_before_the_subcommand(capsys):
    rc, out, _ = run_cli(capsys, "--demo", "status", "--json", "--interval", "0")
    assert rc == 0
    assert json.loads(out)["source"] == "demo"


def test_status_json_from_nvml_reports_bytes_and_null_for_unknown(capsys, fake_nvml):
    me = os.getpid()
    fake_nvml.gpus[0].add_process(me, 3 * GiB, compute=True, graphics=True)
    fake_nvml.gpus[0].add_process(4_000_000, None)  # WDDM-style: no per-process figure
    rc, out, err = run_cli(capsys, "status", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["source"] == "nvml"
    assert data["driver_version"] == "550.54.14"
    gpu0 = data["gpus"][0]
    assert gpu0["memory_total"] == 48 * GiB
    assert gpu0["memory_used"] == 5 * GiB
    procs = {p["pid"]: p for p in gpu0["processes"]}
    assert set(procs) == {me, 4_000_000}  # a pid in both lists is one row
    mine = procs[me]
    assert mine["gpu_memory"] == 3 * GiB
    assert mine["command"] and "python" in mine["command"].lower()
    assert mine["host_rss"] and mine["host_rss"] > 10 * MiB
    assert isinstance(mine["cpu_percent"], float)  # two readings: a real rate
    ghost = procs[4_000_000]
    assert ghost["gpu_memory"] is None  # unknown stays unknown, never 0
    assert ghost["name"] is None and ghost["host_status"] == "not_visible"
    assert data["gpus"][1]["processes"] == []


def test_status_table_shows_na_for_unknown(capsys, fake_nvml):
    fake_nvml.gpus[0].add_process(4_000_001, None)
    rc, out, _ = run_cli(capsys, "status", "--interval", "0")
    assert rc == 0
    assert "NVIDIA RTX A6000" in out
    line = next(row for row in out.splitlines() if "4000001" in row)
    assert "n/a" in line and "pid not visible here" in line


def test_status_without_driver_exits_2_with_one_line_reason(capsys, monkeypatch):
    monkeypatch.setattr(cli_status, "make_source", lambda demo, seed=7, size=None: NvmlSource(nvml=FakeNvml.no_library()))
    rc, out, err = run_cli(capsys, "status", "--json")
    assert rc == cli.EXIT_NO_SOURCE == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "NVIDIA driver not found" in err


def test_status_does_not_import_qt():
    code = ("import sys, io, contextlib; from app.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['status','--demo','--json','--interval','0'])\n"
            "qt = sorted(m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'shiboken')))\n"
            "print(rc, qt)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "0 []", done.stderr


def test_period_outside_range_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--period", "0.01"])
    assert exc.value.code == 2
    assert "--period" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--demo"], []])
def test_screenshot_writes_a_png_without_a_display(tmp_path, extra):
    png = tmp_path / "window.png"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # --screenshot must choose offscreen itself
    env["VRAM_STEWARD_SETTINGS"] = str(tmp_path / "settings.ini")  # not the user's own
    done = subprocess.run([sys.executable, "main.py", *extra, "--screenshot", str(png),
                           "--after", "0.8"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "propagateSizeHints" not in done.stderr  # only its own lines
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    from PySide6.QtGui import QImage
    image = QImage(str(png))
    assert image.width() >= 800 and image.height() >= 500
