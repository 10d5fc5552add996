"""A remote host the window watches: its address and how to reach it, as
kept in the settings and given with ``--host``; checked before use.

The token is never stored: only the path of a private file holding it
(``serve token`` writes one), read when the host is connected.
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.remote.address import RemoteAddress, parse_address

MAX_HOSTS = 16
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:-]+")


@dataclass(frozen=True, slots=True)
class HostConfig:
    url: str
    token_file: str | None = None  # HTTP(S): a private file with the token
    ca_file: str | None = None  # HTTPS: the certificate to trust (self-signed)
    remote_command: str | None = None  # SSH: what starts VRAM Steward there

    @property
    def address(self) -> RemoteAddress:
        return parse_address(self.url)


def host_key(address: RemoteAddress) -> str:
    """The short name a host goes by in the window: its host name, with the
    port when one was named (``gpu1``, ``gpu1:8443``)."""
    host = address.host if address.port is None else f"{address.host}:{address.port}"
    return _KEY_CHARS.sub("_", host)


def unique_keys(configs: list[HostConfig]) -> list[str]:
    """One key per host, told apart by the user name or a number where two
    would be the same."""
    keys: list[str] = []
    for config in configs:
        address = config.address
        key = host_key(address)
        if key in keys and address.user:
            key = f"{address.user}@{key}"
        base, n = key, 2
        while key in keys:
            key, n = f"{base}#{n}", n + 1
        keys.append(key)
    return keys


def check_host(config: HostConfig, others: Sequence[HostConfig] = ()) -> HostConfig:
    """``config`` with its URL in one spelling; ValueError saying what is wrong
    (a bad address, a file that is missing or not private, a duplicate)."""
    address = parse_address(config.url)  # ValueError in the user's words
    url = address.url
    if address.scheme == "ssh":
        if config.token_file or config.ca_file:
            raise ValueError(f"{url}: SSH does the authentication: no token file or "
                             "certificate here")
    else:
        if config.remote_command:
            raise ValueError(f"{url}: a remote command is for ssh:// hosts")
        if config.token_file:
            if address.scheme == "http" and not is_loopback(address.host):
                raise ValueError(f"{url}: a token would cross the network in the clear: use "
                                 "https:// (serve --tls-cert) or ssh://")
            check_private_file(config.token_file, "token file")
        if config.ca_file:
            if address.scheme != "https":
                raise ValueError(f"{url}: a certificate is for https:// hosts")
            check_readable_file(config.ca_file, "certificate")
    if len(others) >= MAX_HOSTS:
        raise ValueError(f"at most {MAX_HOSTS} hosts")
    if any(parse_address(o.url).url == url for o in others):
        raise ValueError(f"{url} is already in the list")
    command = (config.remote_command or "").strip() or None
    if command is not None and ("\n" in command or "\0" in command):
        raise ValueError("the remote command is one line")
    return HostConfig(url, config.token_file or None, config.ca_file or None, command)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback (a name is not resolved)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_private_file(path: str, what: str) -> None:
    """A regular file of this user that nobody else can read (as ssh wants a key)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from None
    _check_private(st, what, path)


def _check_private(st: os.stat_result, what: str, path: str) -> None:
    """ValueError unless ``st`` is a regular file of this user that only it may read."""
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {path}: not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise ValueError(f"{what} {path}: not yours (owner uid {st.st_uid})")
    if st.st_mode & 0o077:
        raise ValueError(f"{what} {path}: others may read it (chmod 600 {path})")


def check_readable_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{what} {path}: not readable")


def read_token_file(path: str) -> str:
    """The token in ``path`` (its first word), read from the file checked, not
    from what a swapped-in link names: opened without following a link, then
    checked as opened (a regular file of ours, private).  ValueError saying
    what is wrong."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ValueError(f"token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        _check_private(os.fstat(f.fileno()), "token file", path)
        for raw in f.read(64 * 1024).splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                return line.split()[0]
    raise ValueError(f"token file {path} holds no token")
