"""Autostart: Exec quoting, the XDG entry, and the Windows Run key (with a fake winreg)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import autostart as au
from app.core.autostart import (
    ForeignEntryError,
    UnsupportedAutostart,
    WindowsAutostart,
    XdgAutostart,
    autostart_for_platform,
    default_command,
    desktop_exec,
    exec_quote_arg,
)

NASTY = ["/opt/my apps/python3", "--name=it's \"quoted\"", "C:\\dir\\", "$HOME", "`id`",
         "100%", "%f", "", "tab\there", "line\nbreak", "~user", "a&b;c|d", "(x)", "#hash",
         "*?", "<in>", "ünïcödé"]


# ------------------------------------------------------------- Exec quoting


def parse_exec(value: str) -> list[str]:
    """The spec's reading of an ``Exec=`` value: string escapes, then quoting, then %%."""
    unescaped, i = [], 0
    escapes = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value) and value[i + 1] in escapes:
            unescaped.append(escapes[value[i + 1]])
            i += 2
        else:
            unescaped.append(value[i])
            i += 1
    line = "".join(unescaped)
    args: list[str] = []
    current: list[str] | None = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == " ":
            if current is not None:
                args.append("".join(current))
                current = None
            i += 1
        elif c == '"':
            current = current if current is not None else []
            i += 1
            while line[i] != '"':
                if line[i] == "\\" and line[i + 1] in '"`$\\':
                    i += 1
                current.append(line[i])
                i += 1
            i += 1
        else:
            assert c not in au._EXEC_RESERVED, f"unquoted reserved {c!r} in {line!r}"
            current = (current if current is not None else []) + [c]
            i += 1
    if current is not None:
        args.append("".join(current))
    return [_expand_percent(a) for a in args]


def _expand_percent(arg: str) -> str:
    out, i = [], 0
    while i < len(arg):
        if arg[i] == "%":
            assert arg[i + 1] == "%", f"field code in {arg!r}"
            i += 2
            out.append("%")
        else:
            out.append(arg[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("arg, quoted", [
    ("/usr/bin/python3", "/usr/bin/python3"),
    ("--minimised", "--minimised"),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("it's", '"it\'s"'),
    ("C:\\x", '"C:\\\\x"'),
    ("$HOME", '"\\$HOME"'),
    ("`id`", '"\\`id\\`"'),
    ("100%", "100%%"),
    ("50% off", '"50%% off"'),
    ("", '""'),
    ("key=value", "key=value"),
])
def test_exec_quote_arg(arg, quoted):
    assert exec_quote_arg(arg) == quoted


def test_exec_value_applies_string_escapes_after_quoting():
    # A literal backslash is four in the file, a dollar sign is \\$ (the spec's own examples).
    assert desktop_exec(["prog", "a\\b"]) == 'prog "a\\\\\\\\b"'
    assert desktop_exec(["prog", "$x"]) == 'prog "\\\\$x"'
    assert desktop_exec(["prog", 'q"']) == 'prog "q\\\\""'
    assert desktop_exec(["prog", "two\nlines"]) == 'prog "two\\nlines"'
    assert desktop_exec(["/usr/bin/python3", "/home/me/main.py", "--minimised"]) == \
        "/usr/bin/python3 /home/me/main.py --minimised"


def test_exec_round_trips_nasty_arguments():
    assert parse_exec(desktop_exec(NASTY)) == NASTY


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from(
    list(" \t\n\"'\\$`%")), max_size=12), min_size=1, max_size=5))
def test_exec_round_trips_any_arguments(args):
    assert parse_exec(desktop_exec(args)) == args


def test_control_characters_are_refused():
    with pytest.raises(ValueError):
        desktop_exec(["prog", "bell\x07"])
    with pytest.raises(ValueError):
        desktop_exec([])


def test_unwritable_command_is_an_autostart_error(tmp_path):
    entry = XdgAutostart(config_home=tmp_path, config_dirs=[])
    with pytest.raises(au.AutostartError, match="control character"):
        entry.enable(["prog", "nul\x00"])
    assert not entry.path().exists()


def _glib():
    name = ctypes.util.find_library("glib-2.0")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.g_key_file_new.restype = ctypes.c_void_p
    lib.g_key_file_load_from_file.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                              ctypes.c_void_p]
    lib.g_key_file_get_string.restype = ctypes.c_void_p
    lib.g_key_file_get_string.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_void_p]
    lib.g_shell_parse_argv.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                       ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
                                       ctypes.c_void_p]
    lib.g_key_file_free.argtypes = [ctypes.c_void_p]
    lib.g_free.argtypes = [ctypes.c_void_p]
    lib.g_strfreev.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    return lib


def glib_exec_argv(lib, path: Path) -> list[str]:
    """How GLib (GKeyFile, then g_shell_parse_argv, as GIO launches it) reads Exec."""
    kf = lib.g_key_file_new()
    try:
        assert lib.g_key_file_load_from_file(kf, str(path).encode(), 0, None)
        raw = lib.g_key_file_get_string(kf, b"Desktop Entry", b"Exec", None)
        assert raw
        value = ctypes.string_at(raw).decode()
        lib.g_free(raw)
    finally:
        lib.g_key_file_free(kf)
    argc = ctypes.c_int()
    argv = ctypes.POINTER(ctypes.c_char_p)()
    # GIO expands field codes before shell-parsing the line; %% is the only one used here.
    assert lib.g_shell_parse_argv(value.replace("%%", "%").encode(), ctypes.byref(argc),
                                  ctypes.byref(argv), None)
    try:
        return [argv[i].decode() for i in range(argc.value)]
    finally:
        lib.g_strfreev(argv)


@pytest.mark.skipif(_glib() is None, reason="GLib not installed")
def test_glib_reads_the_command_back(tmp_path):
    entry = XdgAutostart(config_home=tmp_path, config_dirs=[])
    entry.enable(NASTY)
    assert glib_exec_argv(_glib(), entry.path()) == NASTY


# -------------------------------------------------------------------- XDG


@pytest.fixture
def xdg(tmp_path, monkeypatch) -> XdgAutostart:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "system"))
    return XdgAutostart()


def read_keys(path: Path) -> dict[str, str]:
    keys = au._read_entry(path)
    assert keys is not None
    return keys


def test_enable_writes_a_desktop_entry(xdg, tmp_path):
    assert not xdg.is_enabled()
    xdg.enable(["/opt/my apps/python", "/src/main.py", "--minimised"])
    path = tmp_path / "config" / "autostart" / "vram-steward.desktop"
    assert xdg.location() == str(path)
    assert xdg.is_enabled()
    keys = read_keys(path)
    assert keys["Type"] == "Application"
    assert keys["Name"] == "VRAM Steward"
    assert keys["Exec"] == '"/opt/my apps/python" /src/main.py --minimised'
    assert keys["Icon"] == "vram-steward"
    assert keys["Terminal"] == "false"
    assert keys["X-GNOME-Autostart-enabled"] == "true"
    assert keys["X-VRAM-Steward-Autostart"] == "true"
    assert keys["Comment"]
    assert path.read_text().startswith("[Desktop Entry]\n")
    assert [p.name for p in path.parent.iterdir()] == ["vram-steward.desktop"]  # no temp left


def test_disable_removes_our_entry(xdg):
    xdg.enable(["prog"])
    xdg.disable()
    assert not xdg.path().exists()
    assert not xdg.is_enabled()
    xdg.disable()  # already off: nothing to do


def test_default_config_home_is_dot_config(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert XdgAutostart().location() == str(tmp_path / ".config/autostart/vram-steward.desktop")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    assert XdgAutostart().location() == str(tmp_path / ".config/autostart/vram-steward.desktop")


@pytest.mark.parametrize("line", ["Hidden=true", "X-GNOME-Autostart-enabled=false",
                                  "Hidden = True"])
def test_entry_turned_off_by_the_desktop_counts_as_off(xdg, line):
    xdg.enable(["prog"])
    path = xdg.path()
    path.write_text(path.read_text().replace("X-GNOME-Autostart-enabled=true", line))
    assert not xdg.is_enabled()
    xdg.enable(["prog"])  # ours: rewritten, on again
    assert xdg.is_enabled()


def test_keys_of_other_groups_do_not_count(xdg):
    xdg.enable(["prog"])
    with xdg.path().open("a") as f:
        f.write("\n[Desktop Action x]\nHidden=true\n")
    assert xdg.is_enabled()


FOREIGN = "[Desktop Entry]\nType=Application\nName=GPU thing\nExec=vram-steward\n"


def test_foreign_entry_is_never_removed(xdg):
    path = xdg.path()
    path.parent.mkdir(parents=True)
    path.write_text(FOREIGN)
    assert xdg.is_enabled()
    xdg.enable(["prog"])  # it already starts the app: left as it is
    assert path.read_text() == FOREIGN
    with pytest.raises(ForeignEntryError) as info:
        xdg.disable()
    assert info.value.path == path
    assert str(path) in str(info.value)
    assert path.read_text() == FOREIGN


def test_foreign_disabled_entry_is_never_replaced(xdg):
    path = xdg.path()
    path.parent.mkdir(parents=True)
    path.write_text(FOREIGN + "Hidden=true\n")
    assert not xdg.is_enabled()
    xdg.disable()  # already off
    with pytest.raises(ForeignEntryError):
        xdg.enable(["prog"])
    assert path.read_text() == FOREIGN + "Hidden=true\n"


def test_system_wide_entry_is_overridden_by_a_hidden_user_entry(xdg, tmp_path):
    system = tmp_path / "system" / "autostart" / "vram-steward.desktop"
    system.parent.mkdir(parents=True)
    system.write_text(FOREIGN)
    assert xdg.is_enabled()
    xdg.disable()
    assert not xdg.is_enabled()
    keys = read_keys(xdg.path())
    assert keys["Hidden"] == "true" and keys["X-VRAM-Steward-Autostart"] == "true"
    assert system.read_text() == FOREIGN
    xdg.enable(["prog"])
    assert xdg.is_enabled() and "Hidden" not in read_keys(xdg.path())


def test_failed_write_leaves_the_old_entry(xdg, monkeypatch):
    xdg.enable(["old"])
    before = xdg.path().read_text()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(au.os, "replace", broken_replace)
    with pytest.raises(OSError):
        xdg.enable(["new"])
    assert xdg.path().read_text() == before
    assert [p.name for p in xdg.path().parent.iterdir()] == ["vram-steward.desktop"]


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None,
                    reason="desktop-file-validate not installed")
@pytest.mark.parametrize("command", [
    ["/usr/bin/python3", "/home/me/vram-steward/main.py", "--minimised"],
    NASTY,
])
def test_entry_passes_desktop_file_validate(tmp_path, command):
    entry = XdgAutostart(config_home=tmp_path, config_dirs=[])
    entry.enable(command)
    result = subprocess.run(["desktop-file-validate", str(entry.path())],
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in (result.stdout + result.stderr).lower()


# ---------------------------------------------------------------- Windows


class FakeWinreg:
    """Enough of ``winreg`` for the Run key: keys are dicts in ``hives``."""

    HKEY_CURRENT_USER = "HKCU"
    KEY_READ, KEY_SET_VALUE = 0x20019, 0x0002
    REG_SZ, REG_BINARY = 1, 3

    def __init__(self) -> None:
        self.hives: dict[tuple[str, str], dict[str, tuple[object, int]]] = {}

    class _Key:
        def __init__(self, values: dict) -> None:
            self.values = values

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def OpenKey(self, hive, path, reserved=0, access=KEY_READ):
        if (hive, path) not in self.hives:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return self._Key(self.hives[hive, path])

    def CreateKeyEx(self, hive, path, reserved=0, access=KEY_SET_VALUE):
        return self._Key(self.hives.setdefault((hive, path), {}))

    def QueryValueEx(self, key, name):
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return key.values[name]

    def SetValueEx(self, key, name, reserved, kind, value):
        key.values[name] = (value, kind)

    def DeleteValue(self, key, name):
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        del key.values[name]


RUN = ("HKCU", r"Software\Microsoft\Windows\CurrentVersion\Run")
APPROVED = ("HKCU", r"Software\Microsoft\Windows\CurrentVersion\Explorer\StartupApproved\Run")


def test_windows_run_key_round_trip():
    reg = FakeWinreg()
    win = WindowsAutostart(reg)
    assert win.is_supported()
    assert win.location() == r"HKCU\Software\Microsoft\Windows\CurrentVersion\Run\VRAM Steward"
    assert not win.is_enabled()
    win.enable([r"C:\Program Files\VRAM Steward\vram-steward.exe", "--minimised"])
    assert reg.hives[RUN]["VRAM Steward"] == (
        r'"C:\Program Files\VRAM Steward\vram-steward.exe" --minimised', reg.REG_SZ)
    assert win.is_enabled()
    win.disable()
    assert "VRAM Steward" not in reg.hives[RUN]
    assert not win.is_enabled()
    win.disable()  # already off


def test_windows_task_manager_disabled_mark():
    reg = FakeWinreg()
    win = WindowsAutostart(reg)
    win.enable(["app.exe"])
    reg.hives[APPROVED] = {"VRAM Steward": (b"\x03" + bytes(11), reg.REG_BINARY)}
    assert not win.is_enabled()
    reg.hives[APPROVED]["VRAM Steward"] = (b"\x02" + bytes(11), reg.REG_BINARY)
    assert win.is_enabled()
    reg.hives[APPROVED]["VRAM Steward"] = (b"\x03" + bytes(11), reg.REG_BINARY)
    win.enable(["app.exe"])  # turning it on in the app clears the mark
    assert win.is_enabled() and "VRAM Steward" not in reg.hives[APPROVED]


def test_windows_quoting_follows_list2cmdline():
    reg = FakeWinreg()
    args = ["C:\\Python 3\\pythonw.exe", "C:\\src dir\\main.py", 'say "hi"', "trailing\\"]
    WindowsAutostart(reg).enable(args)
    assert reg.hives[RUN]["VRAM Steward"][0] == subprocess.list2cmdline(args)


def test_windows_write_failure_is_reported():
    class Denied(FakeWinreg):
        def CreateKeyEx(self, *args, **kwargs):
            raise PermissionError(5, "Access is denied")

    with pytest.raises(au.AutostartError, match="Access is denied"):
        WindowsAutostart(Denied()).enable(["app.exe"])


# ------------------------------------------------------------- everything else


def test_platform_choice():
    assert isinstance(autostart_for_platform("linux"), XdgAutostart)
    assert isinstance(autostart_for_platform("freebsd14"), XdgAutostart)
    reg = FakeWinreg()
    win = autostart_for_platform("win32", winreg=reg)
    assert isinstance(win, WindowsAutostart) and win.winreg is reg
    mac = autostart_for_platform("darwin")
    assert isinstance(mac, UnsupportedAutostart)
    assert not mac.is_supported() and not mac.is_enabled() and mac.location() == ""
    with pytest.raises(au.AutostartError):
        mac.enable(["x"])


def test_default_command_from_source(monkeypatch):
    monkeypatch.delattr(sys, "frozen", raising=False)
    command = default_command()
    assert command == [os.path.abspath(sys.executable), str(au.MAIN_PY), "--minimised"]
    assert Path(command[1]).is_file() and Path(command[1]).name == "main.py"
    assert default_command(minimised=False) == command[:2]


def test_default_command_when_frozen(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/VRAM Steward/vram-steward")
    assert default_command() == ["/opt/VRAM Steward/vram-steward", "--minimised"]
    assert default_command(minimised=False) == ["/opt/VRAM Steward/vram-steward"]
