"""The PyInstaller spec, without PyInstaller: it is run against stand-ins that
record what it asks for.  (Building the bundle is CI's ``packaging/build.py --smoke``.)"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYINSTALLER_DIR = ROOT / "packaging" / "pyinstaller"
SPEC = PYINSTALLER_DIR / "vram-steward.spec"


def load(name: str) -> types.ModuleType:
    path = PYINSTALLER_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_packaging_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorded:
    """A stand-in for Analysis, PYZ, EXE and COLLECT: keeps its arguments."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs
        self.pure = self.scripts = self.binaries = self.datas = ()


def run_spec(monkeypatch: pytest.MonkeyPatch, platform: str) -> dict[str, list[Recorded]]:
    calls: dict[str, list[Recorded]] = {}

    def recorder(kind: str) -> type:
        class Call(Recorded):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                calls.setdefault(kind, []).append(self)
        return Call

    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda package, filter=None: [
        name for name in (f"{package}.cli", f"{package}.__main__", f"{package}.core.monitor.demo_source")
        if filter is None or filter(name)]
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setitem(sys.modules, "bundle_files", load("bundle_files"))
    namespace = {"SPECPATH": str(PYINSTALLER_DIR), "__file__": str(SPEC),
                 **{kind: recorder(kind) for kind in ("Analysis", "PYZ", "EXE", "COLLECT")}}
    exec(compile(SPEC.read_text(), str(SPEC), "exec"), namespace)
    return calls


def test_agent_source_ships_where_agent_path_points() -> None:
    """Other interpreters load app/agent by path, so every .py must sit in the
    bundle exactly where it sits in the repository (relative to the app package)."""
    pairs = load("bundle_files").data_files()
    shipped = {(Path(dest) / Path(src).name).as_posix() for src, dest in pairs}
    agent_sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "app" / "agent").rglob("*.py")}
    assert agent_sources <= shipped
    assert {"app/agent/_bootstrap/sitecustomize.py",
            "app/agent/_bootstrap/vram_steward_agent.py", "app/agent/__init__.py"} <= shipped
    for src, dest in pairs:
        assert Path(src).relative_to(ROOT).parent == Path(dest)
        assert "__pycache__" not in src and not src.endswith(".pyc")


def test_icons_ship_next_to_the_app_package() -> None:
    # app.ui.shell.application looks for <bundle>/resources/icons.
    pairs = load("bundle_files").data_files()
    icons = {Path(src).name for src, dest in pairs if Path(dest) == Path("resources", "icons")}
    assert {p.name for p in (ROOT / "resources" / "icons").iterdir()} <= icons


def test_spec_freezes_the_launcher_with_the_data_files(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run_spec(monkeypatch, "linux")
    (analysis,) = calls["Analysis"]
    assert analysis.args[0] == [os.path.join(str(PYINSTALLER_DIR), "launcher.py")]
    assert analysis.kwargs["datas"] == load("bundle_files").data_files()
    assert analysis.kwargs["hiddenimports"] == ["app.cli", "app.core.monitor.demo_source"]
    assert {"torch", "tkinter", "matplotlib"} <= set(analysis.kwargs["excludes"])
    (collect,) = calls["COLLECT"]
    assert collect.kwargs["name"] == "vram-steward"
    assert list(collect.args[:2]) == calls["EXE"]


def test_windows_gets_a_windowed_app_and_a_console_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    exes = {exe.kwargs["name"]: exe.kwargs for exe in run_spec(monkeypatch, "win32")["EXE"]}
    assert exes["vram-steward"]["console"] is False  # double-click opens no console window
    assert exes["vram-steward-cli"]["console"] is True
    for exe in exes.values():
        assert exe["icon"].endswith(".ico") and Path(exe["icon"]).is_file()


def test_linux_launchers_both_keep_their_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    exes = run_spec(monkeypatch, "linux")["EXE"]
    assert {exe.kwargs["name"] for exe in exes} == {"vram-steward", "vram-steward-cli"}
    assert all(exe.kwargs["console"] for exe in exes)


def test_launcher_gives_children_the_environment_from_before_the_bundle(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundle = str(tmp_path / "_internal")
    monkeypatch.setattr(sys, "_MEIPASS", bundle, raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{bundle}:/opt/cuda/lib64")
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/opt/cuda/lib64")
    monkeypatch.setenv("QT_PLUGIN_PATH", f"{bundle}/PySide6/Qt/plugins")
    monkeypatch.setenv("QML2_IMPORT_PATH", "/usr/lib/qt6/qml")

    load("launcher").restore_environment()

    assert os.environ["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"
    assert "LD_LIBRARY_PATH_ORIG" not in os.environ
    assert "QT_PLUGIN_PATH" not in os.environ
    assert os.environ["QML2_IMPORT_PATH"] == "/usr/lib/qt6/qml"  # not the bundle's: kept


def test_launcher_drops_a_library_path_that_only_held_the_bundle(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundle = str(tmp_path / "_internal")
    monkeypatch.setattr(sys, "_MEIPASS", bundle, raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", bundle)
    monkeypatch.delenv("LD_LIBRARY_PATH_ORIG", raising=False)
    load("launcher").restore_environment()
    assert "LD_LIBRARY_PATH" not in os.environ


def test_launcher_leaves_an_unfrozen_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "_MEIPASS", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/lib")
    monkeypatch.setenv("QT_PLUGIN_PATH", "/opt/plugins")
    load("launcher").restore_environment()
    assert os.environ["LD_LIBRARY_PATH"] == "/opt/lib"
    assert os.environ["QT_PLUGIN_PATH"] == "/opt/plugins"
