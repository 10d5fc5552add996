"""What Qt's xcb platform plugin needs and cannot have: shared libraries the
dynamic loader cannot find (``ldd``), an X server nobody listens for.

Each probe answers only what it can tell for certain; anything it cannot
tell (no ``ldd``, a remote host, a timeout) counts as fine, so that Qt
itself decides.  Standard library only: this runs before Qt is imported.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

PLUGIN = "libqxcb.so"
X_TCP_PORT = 6000
_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)
_DISPLAY = re.compile(r"(?P<host>[^:]*):(?P<number>\d+)(?:\.\d+)?")
_LOCAL_HOSTS = ("localhost", "127.0.0.1")


def plugin_path(env: Mapping[str, str]) -> Path | None:
    """Where Qt will load the xcb plugin from: ``QT_QPA_PLATFORM_PLUGIN_PATH``, else
    PySide6's own ``Qt/plugins/platforms``.  None when it is in neither (a
    distribution's Qt keeps its plugins elsewhere): nothing to check then."""
    override = env.get("QT_QPA_PLATFORM_PLUGIN_PATH")
    candidates = [Path(override) / PLUGIN] if override else []
    try:
        spec = importlib.util.find_spec("PySide6")  # locates the package, runs nothing
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(location) / "Qt" / "plugins" / "platforms" / PLUGIN)
    return next((p for p in candidates if p.is_file()), None)


def missing_libraries(library: Path, timeout_s: float = 10.0) -> list[str]:
    """The shared libraries ``ldd`` reports "not found" for ``library`` (its
    whole dependency tree, so the plugin's ``libQt6XcbQpa`` counts too), in
    order, once each.  Empty when there is no ``ldd`` or it fails."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return []
    try:
        done = subprocess.run([ldd, str(library)], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return list(dict.fromkeys(_NOT_FOUND.findall(done.stdout)))


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships ``soname``, by Debian's naming rule:
    ``libxcb-cursor.so.0`` -> ``libxcb-cursor0``, ``libxkbcommon-x11.so.0`` ->
    ``libxkbcommon-x11-0`` (a dash when the name ends in a digit)."""
    name, _, version = soname.partition(".so")
    version = version.lstrip(".").split(".")[0]
    name = name.lower()
    if not version:
        return name
    return f"{name}-{version}" if name[-1:].isdigit() else f"{name}{version}"


def server_refuses(display: str, timeout_s: float = 1.0) -> bool:
    """True only when no X server listens for ``display``: a local display
    (``:0``, ``unix:0``) whose sockets, abstract and in ``/tmp/.X11-unix``, and
    TCP port on this host all refuse, or a ``localhost:N`` (an SSH-forwarded
    display) whose port refuses.  Other hosts are not probed."""
    match = _DISPLAY.fullmatch(display)
    if match is None:
        return False
    host, number = match["host"], int(match["number"])
    if host in _LOCAL_HOSTS:
        return _tcp_refuses(host, X_TCP_PORT + number, timeout_s)
    if host not in ("", "unix"):
        return False
    path = f"/tmp/.X11-unix/X{number}"
    return (_unix_refuses("\0" + path, timeout_s) and _unix_refuses(path, timeout_s)
            and (host == "unix" or _tcp_refuses("localhost", X_TCP_PORT + number, timeout_s)))


def _unix_refuses(address: str, timeout_s: float) -> bool:
    if not hasattr(socket, "AF_UNIX"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            return True
        except OSError:
            return False
    return False


def _tcp_refuses(host: str, port: int, timeout_s: float) -> bool:
    """Every address of ``host`` refused (``create_connection`` raises the last error)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
