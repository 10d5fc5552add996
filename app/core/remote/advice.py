"""Why a host is not connected, with what to do about it, in one line.

SSH runs with ``BatchMode=yes``: it never waits on a prompt the window
cannot show, so an unknown host key or a key with a passphrase ends the
connection at once, and the line says what to run in a terminal instead.
"""

from __future__ import annotations

from app.core.remote.address import RemoteAddress
from app.core.remote.errors import RemoteError

_SSH_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("host key verification failed", "no ed25519 host key is known",
      "host key for", "remote host identification has changed"),
     "the host key is not known here: add it by running `ssh {target}` once in a terminal"),
    (("permission denied",),
     "SSH was refused without a prompt: load your key into the agent (`ssh-add`) or "
     "check that `ssh {target}` logs in without a password"),
    (("enter passphrase", "passphrase"),
     "the key needs its passphrase: run `ssh-add` in a terminal first"),
    (("could not resolve hostname", "name or service not known"),
     "the host name is not known here: check the address"),
    (("connection refused",),
     "nothing listens for SSH there: check the port"),
    (("connection timed out", "no route to host", "network is unreachable"),
     "the host cannot be reached from here: check the network or VPN"),
)


def reason(exc: RemoteError, address: RemoteAddress) -> str:
    """``exc`` in words, with what to do where there is something to do."""
    text = str(exc)
    low = text.lower()
    target = f"{address.user}@{address.host}" if address.user else address.host
    if address.port is not None and address.scheme == "ssh":
        target = f"-p {address.port} {target}"
    if exc.code == "version":
        return text
    if exc.code == "unauthorized":
        if "wrong token" in low:
            return (f"{address.url} refused the token: copy a token from the server's "
                    "token file (`serve` printed its path: `tokens: FILE`) into this "
                    "host's token file")
        return (f"{address.url} wants a token: give this host a token file holding one "
                "from the server's token file (`serve` printed its path: `tokens: FILE`)")
    if exc.code == "forbidden":
        return f"{text}: ask for a token with the control scope to act there"
    if exc.code == "tls":
        return text
    if address.scheme == "ssh":
        for needles, hint in _SSH_HINTS:
            if any(n in low for n in needles):
                return f"{text} — {hint.format(target=target)}"
    return text
