"""Start the app at login: an XDG autostart entry, or the Windows Run key.

Linux and other XDG desktops
    ``${XDG_CONFIG_HOME:-~/.config}/autostart/vram-steward.desktop``.  The
    entry carries ``X-VRAM-Steward-Autostart=true`` so that only entries this
    app wrote are ever removed or replaced; an entry of the same name written
    by someone else (a distribution, the user by hand) is left alone and
    reported with :class:`ForeignEntryError`.  A system-wide entry (in
    ``$XDG_CONFIG_DIRS``) is turned off with a ``Hidden=true`` user entry, as
    the Desktop Application Autostart spec prescribes.
Windows
    ``HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run``, value
    ``VRAM Steward``; a "Disabled" mark from Task Manager (the StartupApproved
    key) counts as off and is cleared by ``enable``.
macOS
    Not supported (``is_supported()`` is False).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

APP_NAME = "VRAM Steward"
DESKTOP_FILE_NAME = "vram-steward.desktop"
MARKER_KEY = "X-VRAM-Steward-Autostart"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
APPROVED_KEY = r"Software\Microsoft\Windows\CurrentVersion\Explorer\StartupApproved\Run"
RUN_VALUE = APP_NAME
MAIN_PY = Path(__file__).resolve().parents[2] / "main.py"
MINIMISED_FLAG = "--minimised"

__all__ = ["Autostart", "AutostartError", "ForeignEntryError", "UnsupportedAutostart",
           "WindowsAutostart", "XdgAutostart", "autostart_for_platform", "default_command",
           "desktop_exec", "exec_quote_arg"]


class AutostartError(OSError):
    """Autostart could not be changed (the message is meant for the user)."""


class ForeignEntryError(AutostartError):
    """An autostart entry this app did not write is in the way; it was left alone."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path


class Autostart(Protocol):
    def is_supported(self) -> bool: ...
    def is_enabled(self) -> bool: ...
    def enable(self, command: Sequence[str]) -> None: ...
    def disable(self) -> None: ...
    def location(self) -> str: ...


def default_command(minimised: bool = True) -> list[str]:
    """The command line that starts this app (as installed, or from the source tree)."""
    if not sys.executable:
        raise AutostartError("cannot tell which program runs this app")
    if getattr(sys, "frozen", False):  # a PyInstaller bundle: the executable is the app
        command = [sys.executable]
    else:
        python = os.path.abspath(sys.executable)  # not resolved: a venv's python stays
        if sys.platform == "win32":
            pythonw = Path(python).with_name("pythonw.exe")  # no console window at login
            if pythonw.exists():
                python = str(pythonw)
        command = [python, str(MAIN_PY)]
    if minimised:
        command.append(MINIMISED_FLAG)
    return command


# --------------------------------------------------------- desktop entries

# Characters that force an Exec argument into double quotes (Desktop Entry spec, "The Exec key").
_EXEC_RESERVED = frozenset(" \t\n\"'\\><~|&;$*?#()`")
# Inside double quotes these four are escaped with a backslash.
_EXEC_ESCAPED = frozenset('"`$\\')
# The string-type escapes, applied to the whole value after the Exec quoting.
_VALUE_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def exec_quote_arg(arg: str) -> str:
    """One argument quoted per the Exec key's rules (before the string escapes)."""
    if any(ord(c) < 0x20 and c not in "\n\t\r" or c == "\x7f" for c in arg):
        raise ValueError(f"control character in argument {arg!r}")
    if arg and not any(c in _EXEC_RESERVED or c == "\r" for c in arg):
        quoted = arg
    else:
        quoted = '"' + "".join("\\" + c if c in _EXEC_ESCAPED else c for c in arg) + '"'
    return quoted.replace("%", "%%")  # a literal % is %% (field codes), quoted or not


def desktop_exec(command: Sequence[str]) -> str:
    """The ``Exec=`` value, as written in the file, that runs ``command`` exactly.

    Two layers: the Exec quoting, then the string escapes of every desktop
    entry value, so a literal backslash in an argument becomes four.
    """
    if not command:
        raise ValueError("empty command")
    line = " ".join(exec_quote_arg(arg) for arg in command)
    return "".join(_VALUE_ESCAPES.get(c, c) for c in line)


def _desktop_entry(command: Sequence[str], hidden: bool = False) -> str:
    lines = [
        "[Desktop Entry]",
        "Type=Application",
        f"Name={APP_NAME}",
        "Comment=See which processes hold your NVIDIA GPU memory",
        f"Exec={desktop_exec(command)}",
        "Icon=vram-steward",
        "Terminal=false",
        "X-GNOME-Autostart-enabled=true",
        f"{MARKER_KEY}=true",
    ]
    if hidden:
        lines.insert(-1, "Hidden=true")
    return "\n".join(lines) + "\n"


def _read_entry(path: Path) -> dict[str, str] | None:
    """The keys of the ``[Desktop Entry]`` group; None if there is no such file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AutostartError(f"cannot read {path}: {exc.strerror or exc}") from exc
    keys: dict[str, str] = {}
    group = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
        elif group == "Desktop Entry" and "=" in line:
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), value.strip())
    return keys


def _entry_enabled(keys: dict[str, str]) -> bool:
    return (keys.get("Hidden", "").lower() != "true"
            and keys.get("X-GNOME-Autostart-enabled", "").lower() != "false")


def _is_ours(keys: dict[str, str]) -> bool:
    return keys.get(MARKER_KEY, "").lower() == "true"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _env_dir(name: str, default: Path) -> Path:
    value = os.environ.get(name, "")
    return Path(value) if os.path.isabs(value) else default


@dataclass
class XdgAutostart:
    """Autostart per the XDG Desktop Application Autostart spec.

    The directories are read from the environment on every call unless given,
    so the UI always shows where the entry is now.
    """

    config_home: Path | None = None
    config_dirs: Sequence[Path] | None = None

    def _home(self) -> Path:
        if self.config_home is not None:
            return self.config_home
        return _env_dir("XDG_CONFIG_HOME", Path.home() / ".config")

    def _system_dirs(self) -> list[Path]:
        if self.config_dirs is not None:
            return list(self.config_dirs)
        value = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        return [Path(d) for d in value.split(os.pathsep) if os.path.isabs(d)]

    def path(self) -> Path:
        return self._home() / "autostart" / DESKTOP_FILE_NAME

    def location(self) -> str:
        return str(self.path())

    def is_supported(self) -> bool:
        return True

    def _system_entry(self) -> dict[str, str] | None:
        """The entry a system directory provides (the most important one), if any."""
        for directory in self._system_dirs():
            try:
                keys = _read_entry(directory / "autostart" / DESKTOP_FILE_NAME)
            except AutostartError:
                continue
            if keys is not None:
                return keys
        return None

    def is_enabled(self) -> bool:
        keys = _read_entry(self.path())
        if keys is None:
            keys = self._system_entry()
        return keys is not None and _entry_enabled(keys)

    def enable(self, command: Sequence[str]) -> None:
        path = self.path()
        keys = _read_entry(path)
        if keys is not None and not _is_ours(keys):
            if _entry_enabled(keys):
                return  # someone else's entry already starts the app
            raise ForeignEntryError(path, f"{path} was not written by {APP_NAME} and turns "
                                    "autostart off; edit or remove it there")
        try:
            text = _desktop_entry(command)
        except ValueError as exc:
            raise AutostartError(f"cannot write this command to a desktop entry: {exc}") from exc
        _write_atomically(path, text)

    def disable(self) -> None:
        path = self.path()
        keys = _read_entry(path)
        if keys is not None and not _is_ours(keys):
            if not _entry_enabled(keys):
                return
            raise ForeignEntryError(path, f"{path} was not written by {APP_NAME}; "
                                    "edit or remove it there")
        system = self._system_entry()
        if system is not None and _entry_enabled(system):
            # Only a user entry with Hidden=true turns a system-wide one off.
            _write_atomically(path, _desktop_entry(default_command(), hidden=True))
        elif keys is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise AutostartError(f"cannot remove {path}: {exc.strerror or exc}") from exc


# ----------------------------------------------------------------- Windows


@dataclass
class WindowsAutostart:
    """The per-user Run key.  ``winreg`` is injectable (tests use a fake)."""

    winreg: Any = field(default=None, repr=False)

    def _reg(self) -> Any:
        if self.winreg is None:
            self.winreg = importlib.import_module("winreg")
        return self.winreg

    def is_supported(self) -> bool:
        try:
            self._reg()
        except ImportError:
            return False
        return True

    def location(self) -> str:
        return f"HKCU\\{RUN_KEY}\\{RUN_VALUE}"

    def _query(self, key_path: str) -> Any:
        reg = self._reg()
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, key_path, 0, reg.KEY_READ) as key:
                value, _kind = reg.QueryValueEx(key, RUN_VALUE)
        except FileNotFoundError:
            return None
        return value

    def _delete(self, key_path: str) -> None:
        reg = self._reg()
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, key_path, 0, reg.KEY_SET_VALUE) as key:
                reg.DeleteValue(key, RUN_VALUE)
        except FileNotFoundError:
            pass

    def is_enabled(self) -> bool:
        command = self._query(RUN_KEY)
        if not isinstance(command, str) or not command.strip():
            return False
        approved = self._query(APPROVED_KEY)
        # Task Manager's mark: first byte even (2, 6) = enabled, odd (3, 7) = disabled.
        return not (isinstance(approved, bytes) and approved and approved[0] & 1)

    def enable(self, command: Sequence[str]) -> None:
        if not command:
            raise ValueError("empty command")
        reg = self._reg()
        try:
            with reg.CreateKeyEx(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_SET_VALUE) as key:
                reg.SetValueEx(key, RUN_VALUE, 0, reg.REG_SZ, subprocess.list2cmdline(command))
            self._delete(APPROVED_KEY)
        except OSError as exc:
            raise AutostartError(f"cannot write {self.location()}: {exc}") from exc

    def disable(self) -> None:
        try:
            self._delete(RUN_KEY)
            self._delete(APPROVED_KEY)
        except OSError as exc:
            raise AutostartError(f"cannot remove {self.location()}: {exc}") from exc


# ------------------------------------------------------------- elsewhere


class UnsupportedAutostart:
    """Platforms without an implementation (macOS): always off, cannot be turned on."""

    def is_supported(self) -> bool:
        return False

    def is_enabled(self) -> bool:
        return False

    def enable(self, command: Sequence[str]) -> None:
        raise AutostartError("starting at login is not supported on this platform")

    def disable(self) -> None:
        pass

    def location(self) -> str:
        return ""


def autostart_for_platform(platform: str | None = None, winreg: Any = None) -> Autostart:
    """The autostart mechanism of ``platform`` (``sys.platform`` by default)."""
    platform = sys.platform if platform is None else platform
    if platform == "win32":
        return WindowsAutostart(winreg)
    if platform == "darwin":
        return UnsupportedAutostart()
    return XdgAutostart()
