"""Settings on disk, through QSettings.

One INI file per user (``~/.config/vram-steward/vram-steward.ini`` on Linux,
``%APPDATA%\\vram-steward\\vram-steward.ini`` on Windows), readable and
editable by hand.  Every key holds a JSON value, so types survive the INI
format (which would otherwise hand back every number as a string); a value
that is not valid JSON is kept as the raw string and left to
:meth:`UiSettings.read` to accept or replace with its default.  A value that
cannot be read at all (brackets nested past Python's recursion limit, a value
too large for memory, a type nothing expects) uses its default too: the
window must start whatever the file holds.  Those values are named in one
notice (``SettingsStore.notice``, logged once).

``VRAM_STEWARD_SETTINGS`` names another file (tests, or a second profile).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from PySide6.QtCore import QSettings

from app.ui.settings.values import UiSettings

log = logging.getLogger(__name__)
ORGANISATION = "vram-steward"
APPLICATION = "vram-steward"
ENV_FILE = "VRAM_STEWARD_SETTINGS"
#: Bumped when a key changes meaning; older files are migrated on load.
FORMAT_VERSION = 1


def open_settings(path: str | None = None) -> QSettings:
    path = path or os.environ.get(ENV_FILE)
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                     ORGANISATION, APPLICATION)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become ``group/key`` entries; ``per_gpu`` maps stay one JSON value
    (their keys are GPU UUIDs, not setting names)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "per_gpu":
            out.update(_flatten(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _decode(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class SettingsStore:
    def __init__(self, qsettings: QSettings | None = None) -> None:
        self.qsettings = qsettings if qsettings is not None else open_settings()
        #: After ``load``: the one line naming the values that could not be read, or None.
        self.notice: str | None = None

    @property
    def path(self) -> str:
        return self.qsettings.fileName()

    def load(self) -> UiSettings:
        self.qsettings.sync()
        data: dict[str, Any] = {}
        unread: list[str] = []
        for key in self.qsettings.allKeys():
            if key == "format_version":
                continue
            try:
                value = _decode(self.qsettings.value(key))
            except Exception:  # RecursionError, MemoryError, ...: the default, and a notice
                unread.append(key)
                continue
            node = data
            *groups, leaf = key.split("/")
            for group in groups:
                child = node.get(group)
                if not isinstance(child, dict):
                    child = node[group] = {}
                node = child
            node[leaf] = value
        settings, failed = UiSettings.read(data)
        unread += failed
        self.notice = None
        if unread:
            self.notice = ("Settings that could not be read use their defaults: "
                           f"{', '.join(sorted(unread))} ({self.path}).")
            log.warning("%s", self.notice)
        return settings

    def save(self, settings: UiSettings) -> bool:
        """Write every value; False when the file could not be written (read-only home)."""
        for key, value in _flatten(settings.to_dict()).items():
            if isinstance(value, str) and _decode(value) == value:
                self.qsettings.setValue(key, value)  # a plain word stays readable: theme=dark
            else:
                self.qsettings.setValue(key, json.dumps(value, sort_keys=True))
        self.qsettings.setValue("format_version", FORMAT_VERSION)
        self.qsettings.sync()
        return self.qsettings.status() == QSettings.Status.NoError


__all__ = ["SettingsStore", "open_settings", "ENV_FILE"]
