"""What can go wrong talking to a server, in words a user can act on."""

from __future__ import annotations

from typing import Any

from app.core.wire.snapshot import WireVersionError, check_version


class RemoteError(Exception):
    """The server answered with a refusal or an error; ``code`` says which
    (``unauthorized``, ``forbidden``, ``not_owned``, ``version``, …)."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code


class RemoteUnavailable(RemoteError):
    """The server cannot be reached, or stopped answering."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "unavailable")


def check_wire(data: Any, url: str) -> None:
    """RemoteError (code ``version``) unless the server's answer ``data``
    carries this client's wire version."""
    try:
        check_version(data, url)
    except WireVersionError as exc:
        raise RemoteError(str(exc), "version") from None
