"""Where a remote server is: ``ssh://[user@]host[:port]`` or ``http(s)://host:port``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

#: What a host name or address may hold: nothing ssh could read as an option.
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]%-]+$")
_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class RemoteAddress:
    scheme: str  # "ssh", "http" or "https"
    host: str
    port: int | None
    user: str | None = None

    @property
    def url(self) -> str:
        who = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{who}{host}{port}"


def parse_address(text: str) -> RemoteAddress:
    """The address ``text`` names; ValueError saying what is wrong."""
    parts = urlsplit(text.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("ssh", "http", "https"):
        raise ValueError(f"--host {text!r}: expected ssh://[user@]host[:port] or "
                         "https://host:port")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"--host {text!r}: the port is not a number from 0 to 65535") from None
    host = parts.hostname or ""
    if not host or not _HOST.match(host) or host.startswith("-"):
        raise ValueError(f"--host {text!r}: no host name")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"--host {text!r}: a server is named by scheme, host and port only")
    if scheme == "ssh":
        user = parts.username
        if user is not None and not _USER.match(user):
            raise ValueError(f"--host {text!r}: {user!r} is not a user name")
        if parts.password is not None:
            raise ValueError(f"--host {text!r}: SSH does the authentication: no password here")
        return RemoteAddress("ssh", host, port, user)
    if parts.username is not None:
        raise ValueError(f"--host {text!r}: HTTP takes a token (--token-file), not a user")
    if port is None:
        raise ValueError(f"--host {text!r}: name the server's port (it printed "
                         "'listening on …')")
    return RemoteAddress(scheme, host, port)
