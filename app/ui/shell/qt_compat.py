"""Qt binding quirks, handled in one place.

PySide6/shiboken6 6.12.0 wheels drop a reference to ``None``/``True``/``False``
on every call of a void or bool method when run on CPython < 3.12, where those
objects are not yet immortal; after tens of thousands of calls the interpreter
aborts ("none_dealloc").  The project pins PySide6 below 6.12 on those Pythons;
this guard protects an environment that got 6.12 anyway, by checking for the
leak at start-up and, only if present, making those singletons effectively
immortal, as CPython 3.12 does.
"""

from __future__ import annotations

import ctypes
import sys

_IMMORTAL_BOOST = 1 << 40
_applied = False


def singleton_refcount_leak() -> bool:
    """True when a void Qt call loses a reference to None (measured, not guessed)."""
    if sys.version_info >= (3, 12):
        return False
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(64):
        probe.setObjectName("probe")
    return sys.getrefcount(None) < before - 32


def guard_singleton_refcounts() -> bool:
    """Apply the workaround if this PySide6 needs it; returns whether it did."""
    global _applied
    if _applied:
        return True
    if not singleton_refcount_leak():
        return False
    for obj in (None, True, False, Ellipsis, NotImplemented):
        ctypes.c_ssize_t.from_address(id(obj)).value += _IMMORTAL_BOOST
    _applied = True
    return True
