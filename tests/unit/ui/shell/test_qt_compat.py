"""The installed Qt binding must not leak references to None (see app.ui.shell.qt_compat)."""

import sys

from PySide6.QtCore import QObject

from app.ui.shell.qt_compat import singleton_refcount_leak


def test_installed_pyside_keeps_none_refcount_balanced():
    # Measured directly as well as through the helper, so a broken helper can't hide it.
    if sys.version_info < (3, 12):
        probe = QObject()
        before = sys.getrefcount(None)
        for _ in range(1000):
            probe.setObjectName("x")
        assert abs(sys.getrefcount(None) - before) < 100
    assert singleton_refcount_leak() is False
