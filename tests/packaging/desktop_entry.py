"""Reading desktop entries the way launchers do (Desktop Entry spec 1.5)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

_STRING_ESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def read_entry(path: Path) -> dict[str, str]:
    """The [Desktop Entry] group, values as written (escapes not undone)."""
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return dict(parser["Desktop Entry"])


def exec_argv(value: str) -> list[str]:
    """The argv an Exec= value runs: string escapes undone, then quoting, then ``%%``."""
    text = re.sub(r"\\(.)", lambda m: _STRING_ESCAPES.get(m[1], m[0]), value)
    args: list[str] = []
    current, quoted, started, i = "", False, False, 0
    while i < len(text):
        char = text[i]
        if quoted and char == "\\" and text[i + 1:i + 2] in ('"', "`", "$", "\\"):
            current += text[i + 1]
            i += 1
        elif char == '"':
            quoted, started = not quoted, True
        elif char == " " and not quoted:
            if current or started:
                args.append(current)
            current, started = "", False
        else:
            current += char
        i += 1
    if quoted:
        raise ValueError(f"unterminated quote in Exec={value}")
    if current or started:
        args.append(current)
    return [arg.replace("%%", "%") for arg in args]
