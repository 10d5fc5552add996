"""Build the desktop bundle with PyInstaller: ``dist/vram-steward/``.

    python packaging/build.py           # build (needs: python -m pip install pyinstaller)
    python packaging/build.py --smoke   # build, then start the bundle and check it works

Run it with the interpreter of the environment the app is installed in (the
bundle freezes that environment's PySide6, pyqtgraph, numpy ...).  The smoke
check renders the window offscreen (``--demo --screenshot``), reads a demo
``status --json``, checks that ``agent-path`` names a directory with the
agent's ``sitecustomize.py`` -- the files other Python processes load by path --
and that ``run`` starts the agent in a child Python (this interpreter).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "pyinstaller" / "vram-steward.spec"
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"
BUNDLE = DIST / "vram-steward"
EXE_SUFFIX = ".exe" if os.name == "nt" else ""
GUI_EXE = BUNDLE / f"vram-steward{EXE_SUFFIX}"
CLI_EXE = BUNDLE / f"vram-steward-cli{EXE_SUFFIX}"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_SCREENSHOT = (640, 400)  # the window is far larger; a blank or tiny image means failure
SMOKE_TIMEOUT_S = 120


class SmokeFailure(Exception):
    pass


def build(clean: bool) -> None:
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        raise SystemExit(f"PyInstaller is not installed in this environment; install it with\n"
                         f"    {sys.executable} -m pip install pyinstaller") from None
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm",
               "--distpath", str(DIST), "--workpath", str(WORK), str(SPEC)]
    if clean:
        command.insert(3, "--clean")
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"PyInstaller failed (exit {result.returncode})")
    print(f"built {BUNDLE} in {time.monotonic() - started:.0f} s")


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG's IHDR chunk; SmokeFailure if it is not a PNG."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or not head.startswith(PNG_SIGNATURE) or head[12:16] != b"IHDR":
        raise SmokeFailure(f"{path} is not a PNG")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _run(exe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    try:
        result = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True,
                                timeout=SMOKE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SmokeFailure(
            f"{exe.name} {' '.join(args)}: no exit after {SMOKE_TIMEOUT_S} s") from None
    if result.returncode != 0:
        raise SmokeFailure(f"{exe.name} {' '.join(args)}: exit {result.returncode}\n"
                           f"{result.stdout}{result.stderr}")
    return result


def _json(text: str, what: str):  # type: ignore[no-untyped-def]
    try:
        return json.loads(text)
    except ValueError:
        raise SmokeFailure(f"{what}: expected JSON, got:\n{text}") from None


def smoke() -> None:
    for exe in (GUI_EXE, CLI_EXE):
        if not exe.is_file():
            raise SmokeFailure(f"missing {exe}")
    with tempfile.TemporaryDirectory() as tmp:
        shot = Path(tmp) / "bundle.png"
        started = time.monotonic()
        _run(GUI_EXE, "--demo", "--screenshot", str(shot), "--after", "1")
        if not shot.is_file():
            raise SmokeFailure(f"--screenshot exited 0 but wrote no {shot.name}")
        width, height = png_size(shot)
        if width < MIN_SCREENSHOT[0] or height < MIN_SCREENSHOT[1]:
            raise SmokeFailure(f"screenshot is only {width}x{height}")
        print(f"ok  window: {width}x{height} PNG, {shot.stat().st_size} bytes, "
              f"{time.monotonic() - started:.1f} s")

    status = _json(_run(CLI_EXE, "status", "--demo", "--json").stdout, "status --json")
    if not status.get("gpus"):
        raise SmokeFailure("status --demo --json lists no GPUs")
    print(f"ok  status --demo --json: {len(status['gpus'])} GPUs")

    agent_dir = Path(_run(CLI_EXE, "agent-path").stdout.strip())
    for name in ("sitecustomize.py", "vram_steward_agent.py"):
        if not (agent_dir / name).is_file():
            raise SmokeFailure(f"agent-path printed {agent_dir}, which has no {name}")
    if not (agent_dir.parent / "__init__.py").is_file():
        raise SmokeFailure(f"no agent package source next to {agent_dir}")
    print(f"ok  agent-path: {agent_dir}")

    # `run` starts a Python program with the agent loaded from the bundle, and with
    # none of the bundle's library or Qt paths in its environment.
    probe = ("import json, os, vram_steward_agent as a; "
             "print(json.dumps([a.__file__, a.is_running(), "
             "[os.environ.get(k, '') for k in ('LD_LIBRARY_PATH', 'QT_PLUGIN_PATH')]]))")
    out = _run(CLI_EXE, "run", "--", sys.executable, "-c", probe).stdout.strip()
    agent_file, running, paths = _json(out.splitlines()[-1] if out else "", "run")
    if Path(agent_file).parent != agent_dir or not running:
        raise SmokeFailure(f"run: agent not started from the bundle "
                           f"({agent_file}, running={running})")
    if any(str(BUNDLE.resolve()) in path for path in paths):
        raise SmokeFailure(f"run: the bundle's paths leak into the program's environment: {paths}")
    print("ok  run: agent started in a child Python, environment clean")

    icons = agent_dir.parent.parent.parent / "resources" / "icons"
    if not (icons / "vram-steward-256.png").is_file():
        raise SmokeFailure(f"no icons in {icons}")
    print(f"ok  icons: {icons}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="start the built bundle and check it")
    parser.add_argument("--clean", action="store_true", help="discard PyInstaller's cache first")
    parser.add_argument("--no-build", action="store_true", help="only check the existing bundle")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # in order with PyInstaller's output in CI logs
    if not args.no_build:
        build(args.clean)
    if args.smoke or args.no_build:
        try:
            smoke()
        except SmokeFailure as exc:
            print(f"smoke check FAILED: {exc}", file=sys.stderr)
            return 1
        print("smoke check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
