"""Who is asking, and what they may do: tokens, scopes, callers.

Two scopes: ``read`` (metrics, status, history, reports) and ``control``
(actions).  Every token is bound to one user of the server's host, and a
control token acts only on that user's processes: no token controls
everyone's.  Over SSH (``serve --stdio``) the caller is the SSH user, who
runs the server, and SSH did the authentication.

The token file holds one token per line, ``TOKEN USER SCOPES`` (scopes
comma-separated), ``#`` for comments.  It is read only when it is a private
(0600) file of the server's user, and tokens are compared in constant time.
A client's token file may hold the token alone: its first word is used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass

from app.agent.paths import create_private_file

READ = "read"
CONTROL = "control"
SCOPES = frozenset({READ, CONTROL})
TOKEN_ENV = "VRAM_STEWARD_TOKEN"
#: Who reads without a token (a loopback server with no token file of the user's).
ANONYMOUS = "anonymous"


class AccessError(Exception):
    """A request refused: ``status`` is the HTTP status it maps to."""

    def __init__(self, message: str, status: int = 403, code: str = "forbidden") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class Caller:
    """The identity a request acts as."""

    user: str  # the user's login name on the server's host
    uid: int | None  # None: a name the host does not know (a read-only token's label)
    scopes: frozenset[str]
    via: str  # "ssh", "http", "local"

    def may(self, scope: str) -> bool:
        return scope in self.scopes

    @property
    def who(self) -> str:
        """How the server's log names the caller."""
        return f"{self.user} (uid {self.uid}) via {self.via}" if self.uid is not None \
            else f"{self.user} via {self.via}"


@dataclass(frozen=True, slots=True)
class Grant:
    digest: bytes  # sha256 of the token: equal lengths for the constant-time compare
    user: str
    uid: int | None
    scopes: frozenset[str]


def uid_of(user: str) -> int | None:
    try:
        import pwd
    except ImportError:
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def own_user() -> tuple[str, int | None]:
    """The server's own user name and uid."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        import pwd

        return (pwd.getpwuid(uid).pw_name if uid is not None else "user"), uid
    except (ImportError, KeyError):
        return str(uid), uid


def parse_tokens(text: str, where: str = "token file") -> list[Grant]:
    """The grants of a token file; ValueError naming the line for a bad one."""
    grants = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"{where}, line {n}: expected TOKEN USER SCOPES")
        token, user, scope_text = parts
        scopes = frozenset(s for s in scope_text.split(",") if s)
        if not scopes or not scopes <= SCOPES:
            raise ValueError(f"{where}, line {n}: scopes are read and/or control, "
                             f"not {scope_text!r}")
        if len(token) < 16:
            raise ValueError(f"{where}, line {n}: a token has at least 16 characters")
        uid = uid_of(user)
        if CONTROL in scopes and uid is None:
            raise ValueError(f"{where}, line {n}: a control token acts as a user of this "
                             f"host, and there is no user {user!r}")
        grants.append(Grant(_digest(token), user, uid, scopes))
    return grants


def read_token_file(path: str) -> list[Grant]:
    """The grants in ``path``; ValueError when it is not a private file of
    ours or says nothing usable."""
    grants = parse_tokens(read_private_text(path), f"token file {path}")
    if not grants:
        raise ValueError(f"token file {path} holds no token")
    return grants


def create_token_file(path: str) -> str:
    """A new token file at ``path`` (0600, never over an existing file) with
    one token for the server's own user, read and control; the token."""
    token = new_token()
    user, _uid = own_user()
    fd = create_private_file(path, os.O_WRONLY)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("# VRAM Steward server tokens: TOKEN USER SCOPES (read,control)\n")
        f.write(f"{token} {user} {READ},{CONTROL}\n")
    return token


def read_private_text(path: str, limit: int = 1 << 20) -> str:
    """The text of ``path`` when it is a regular 0600 file of ours (never
    through a link); ValueError saying why not."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise ValueError(f"{path} belongs to uid {st.st_uid}, not you")
        if st.st_mode & 0o077:
            raise ValueError(f"{path} is open to group/others (mode "
                             f"{stat.S_IMODE(st.st_mode):o}): chmod 600 it")
        return f.read(limit).decode("utf-8", "replace")


def new_token() -> str:
    return "vst_" + secrets.token_urlsafe(32)


def find_grant(grants: list[Grant], token: str) -> Grant | None:
    """The grant ``token`` names; every grant is compared (constant time)."""
    digest = _digest(token)
    found = None
    for grant in grants:
        if hmac.compare_digest(grant.digest, digest):
            found = grant
    return found


def client_token(path: str | None) -> str | None:
    """The token a client sends: ``path``'s first word, else ``$VRAM_STEWARD_TOKEN``."""
    if path:
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = raw.split("#", 1)[0].strip()
                if line:
                    return line.split()[0]
        raise ValueError(f"token file {path} holds no token")
    return os.environ.get(TOKEN_ENV) or None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
