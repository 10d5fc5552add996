"""Can the GUI open a window here?  Asked before ``QApplication`` exists.

Without a display, or when Qt's xcb plugin cannot load its libraries, Qt
prints that "reinstalling the application may fix this problem" and aborts
the process (status 134).  This check names the real cause in one line
instead.  It refuses only what is certain to fail: a platform it does not
know, a remote X server, a missing ``ldd`` all pass, and Qt decides.  Linux
only: macOS and Windows always have their own platform plugin and screen.
Standard library only (it runs before Qt is imported).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.cli import xcb

PROG = "vram-steward"
_HINT = f'for a text view run "{PROG} status"'


@dataclass(frozen=True)
class DisplayProblem:
    """Why no window can open; ``line`` is what the user reads."""

    cause: str

    @property
    def line(self) -> str:
        return f"{PROG}: cannot open a window: {self.cause}; {_HINT}"


@dataclass(frozen=True)
class Probes:
    """The checks that touch the system, replaceable in tests."""

    plugin: Callable[[Mapping[str, str]], Path | None] = xcb.plugin_path
    missing: Callable[[Path], list[str]] = xcb.missing_libraries
    refuses: Callable[[str], bool] = xcb.server_refuses


def platforms(env: Mapping[str, str]) -> list[str]:
    """The platform plugins Qt will try, in order: ``QT_QPA_PLATFORM`` (a
    ``;``-separated list, each maybe with ``:options``), else wayland when
    ``WAYLAND_DISPLAY`` is set and xcb when ``DISPLAY`` is; empty when neither."""
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return [p.split(":", 1)[0].strip() for p in chosen.split(";") if p.strip()]
    return ([name for name, var in (("wayland", "WAYLAND_DISPLAY"), ("xcb", "DISPLAY"))
             if env.get(var)])


def check_display(env: Mapping[str, str] | None = None, platform: str | None = None,
                  probes: Probes | None = None) -> DisplayProblem | None:
    """None when a window may open, else the reason it cannot.  Any platform
    but xcb counts as able; with several, one able one is enough."""
    env = os.environ if env is None else env
    if not (platform or sys.platform).startswith("linux"):
        return None
    names = platforms(env)
    if not names:
        return DisplayProblem("no display (DISPLAY and WAYLAND_DISPLAY are unset)")
    problems = [_xcb_problem(env, probes or Probes()) if name == "xcb" else None
                for name in names]
    return None if None in problems else problems[0]


def _xcb_problem(env: Mapping[str, str], probes: Probes) -> DisplayProblem | None:
    display = env.get("DISPLAY", "")
    if not display:
        return DisplayProblem("no display (DISPLAY is unset)")
    plugin = probes.plugin(env)
    missing = probes.missing(plugin) if plugin is not None else []
    if missing:
        packages = " ".join(dict.fromkeys(xcb.debian_package(lib) for lib in missing))
        return DisplayProblem(
            f"Qt's xcb platform plugin cannot load: missing {', '.join(missing)} "
            f"(install them, e.g. on Debian/Ubuntu: sudo apt install {packages})")
    if probes.refuses(display):
        return DisplayProblem(f"cannot connect to display {display} (no X server answers)")
    return None
