"""Exceptions a request handler raises to choose the error reply it gets.

Standard library only (loaded inside users' processes).  The server turns
each into one error frame on the requesting connection; anything else a
handler raises becomes ``internal`` (or ``failed`` on the worker thread).
"""

from __future__ import annotations


class BadParams(Exception):
    """The request's params are wrong: replied as ``bad_params`` with this message."""


class ActionError(Exception):
    """A handler's refusal or failure with a protocol error code (``refused``,
    ``not_found``, ``failed``, ``busy``...): replied as that code, not as
    ``internal``, so the app can tell a deliberate "no" from a bug."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
