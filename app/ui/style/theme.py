"""Light, dark, or whatever the desktop uses.

Every colour in the app's widgets and plots comes from the application
palette (see :mod:`app.ui.style.palette`), so a theme is only a palette.  "light"
and "dark" use the Fusion style with a fixed palette: it looks the same on
every platform and Qt version.  "system" keeps the platform's own style and
palette, and follows the desktop's colour scheme as it changes; where the
desktop says "dark" but the style still hands out a light palette (some
Linux set-ups), the dark palette is applied so the app is not the one light
window on a dark desktop.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.ui.settings.values import THEMES
from app.ui.style.palette import is_dark

_Role = QPalette.ColorRole
_Group = QPalette.ColorGroup


def _palette(colors: dict[_Role, str], disabled_text: str) -> QPalette:
    palette = QPalette()
    for role, value in colors.items():
        palette.setColor(role, QColor(value))
    for role in (_Role.WindowText, _Role.Text, _Role.ButtonText):
        palette.setColor(_Group.Disabled, role, QColor(disabled_text))
    palette.setColor(_Group.Disabled, _Role.Light, QColor(colors[_Role.Window]))
    return palette


def dark_palette() -> QPalette:
    return _palette({
        _Role.Window: "#202124",
        _Role.WindowText: "#E8EAED",
        _Role.Base: "#2A2B2F",
        _Role.AlternateBase: "#303136",
        _Role.ToolTipBase: "#303136",
        _Role.ToolTipText: "#E8EAED",
        _Role.PlaceholderText: "#9AA0A6",
        _Role.Text: "#E8EAED",
        _Role.Button: "#303136",
        _Role.ButtonText: "#E8EAED",
        _Role.BrightText: "#FF6B6B",
        _Role.Light: "#4A4C52",
        _Role.Midlight: "#3A3B40",
        _Role.Mid: "#2C2D31",
        _Role.Dark: "#18191B",
        _Role.Shadow: "#000000",
        _Role.Highlight: "#3D7BD9",
        _Role.HighlightedText: "#FFFFFF",
        _Role.Link: "#8AB4F8",
        _Role.LinkVisited: "#C58AF9",
    }, disabled_text="#80868B")


def light_palette() -> QPalette:
    return _palette({
        _Role.Window: "#EFEFEF",
        _Role.WindowText: "#1F1F1F",
        _Role.Base: "#FFFFFF",
        _Role.AlternateBase: "#F5F5F5",
        _Role.ToolTipBase: "#FFFFDC",
        _Role.ToolTipText: "#000000",
        _Role.PlaceholderText: "#7F7F7F",
        _Role.Text: "#1F1F1F",
        _Role.Button: "#EFEFEF",
        _Role.ButtonText: "#1F1F1F",
        _Role.BrightText: "#FFFFFF",
        _Role.Light: "#FFFFFF",
        _Role.Midlight: "#CACACA",
        _Role.Mid: "#B8B8B8",
        _Role.Dark: "#9F9F9F",
        _Role.Shadow: "#767676",
        _Role.Highlight: "#308CC6",
        _Role.HighlightedText: "#FFFFFF",
        _Role.Link: "#0000FF",
        _Role.LinkVisited: "#FF00FF",
    }, disabled_text="#A0A0A0")


def system_prefers_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    return scheme is not None and scheme() == Qt.ColorScheme.Dark


class ThemeManager(QObject):
    """Applies a theme to the application and keeps "system" in step with the desktop."""

    def __init__(self, app: QApplication, parent: QObject | None = None) -> None:
        super().__init__(parent or app)
        self._app = app
        self._native_style = app.style().name()
        self._native_palette = QPalette(app.palette())
        self.mode = "system"
        hints = QGuiApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(self._on_scheme_changed)

    @property
    def effective(self) -> str:
        """"light" or "dark": what the app looks like now."""
        return "dark" if is_dark(self._app.palette()) else "light"

    def apply(self, mode: str) -> str:
        self.mode = mode if mode in THEMES else "system"
        if self.mode == "dark":
            self._use("Fusion", dark_palette())
        elif self.mode == "light":
            self._use("Fusion", light_palette())
        elif system_prefers_dark() and not is_dark(self._native_palette):
            self._use("Fusion", dark_palette())
        else:
            self._use(self._native_style, self._native_palette)
        return self.effective

    def _use(self, style: str, palette: QPalette) -> None:
        if self._app.style().name().lower() != style.lower():
            self._app.setStyle(style)
        self._app.setPalette(palette)

    def _on_scheme_changed(self, *_args: object) -> None:
        if self.mode == "system":
            self._native_palette = QPalette(self._app.style().standardPalette())
            self.apply("system")


__all__ = ["ThemeManager", "dark_palette", "light_palette", "is_dark", "system_prefers_dark"]
