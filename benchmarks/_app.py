"""The whole app as a child process, for the CPU benchmarks: ``main.py`` offscreen
with its own settings, instance socket and no session bus (never the user's
running app), and its process's CPU time as a share of one core."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psutil

from tests.fakes.processes import end

REPO = Path(__file__).resolve().parents[1]


def app_env(tmp: str | Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without a display, offscreen, with state of its own under ``tmp``."""
    (Path(tmp) / "run").mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in base.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return env | {"QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(REPO),
                  "VRAM_STEWARD_SETTINGS": f"{tmp}/settings.ini",
                  "VRAM_STEWARD_INSTANCE": f"{tmp}/run/gui.sock",
                  "DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp}/no-bus"}


@contextmanager
def running_app(args: list[str], env: Mapping[str, str], warmup_s: float
                ) -> Iterator[psutil.Process]:
    """``main.py ARGS`` started and warmed up for ``warmup_s``; stopped on exit."""
    app = subprocess.Popen([sys.executable, str(REPO / "main.py"), *args], env=dict(env),
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc = psutil.Process(app.pid)
        time.sleep(warmup_s)
        if app.poll() is not None:
            assert app.stderr is not None
            raise SystemExit(f"the app exited: {app.stderr.read().decode()[-2000:]}")
        yield proc
    finally:
        end(app, wait_s=20.0)


def cpu_percent(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """(CPU time of ``proc`` over the next ``seconds`` as % of one core, the seconds
    measured)."""
    t0, c0 = time.monotonic(), sum(proc.cpu_times()[:2])
    time.sleep(seconds)
    t1, c1 = time.monotonic(), sum(proc.cpu_times()[:2])
    return (c1 - c0) / (t1 - t0) * 100, t1 - t0
