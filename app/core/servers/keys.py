"""API keys for model servers that ask for one: one private file per user.

``<state dir>/server-keys.json`` (0600, ours, never through a link), a list
of ``{"kind": "a1111", "port": 7860, "basic": "user:pass"}`` or ``{"kind":
"lmstudio", "bearer": "…"}`` entries (text-generation-webui: ``"admin"`` too,
its ``--admin-key`` for loading and unloading) (``port`` optional: any port of that
kind).  A key is sent only to the local endpoint of a server of its kind
(``LocalHttp`` refuses any other address).  A file that is not private is
refused with one line and no key is used.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from app.agent.paths import replace_private_file
from app.core.paths import private_state_dir, state_dir
from app.core.serve.access import read_private_text
from app.core.servers.http import Auth

FILE_NAME = "server-keys.json"
KINDS = ("ollama", "comfyui", "a1111", "forge", "lmstudio", "tgw", "vllm", "sglang",
         "llamacpp", "tgi")


@dataclass(frozen=True, slots=True)
class ServerKey:
    kind: str
    port: int | None
    auth: Auth


def keys_path() -> str:
    return os.path.join(state_dir(), FILE_NAME)


def parse_keys(text: str, where: str) -> list[ServerKey]:
    """The entries of a keys file; ValueError naming what is wrong."""
    try:
        data = json.loads(text) if text.strip() else []
    except ValueError as exc:
        raise ValueError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a list of entries")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
            raise ValueError(f"{where}: entry {i} needs a kind, one of {', '.join(KINDS)}")
        port = entry.get("port")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                                 or not 0 < port < 65536):
            raise ValueError(f"{where}: entry {i}: port must be 1..65535")
        bearer, basic, admin = (_text(entry.get(k)) for k in ("bearer", "basic", "admin"))
        if basic is not None and ":" not in basic:
            basic = None
        if bearer is None and basic is None and admin is None:
            raise ValueError(f"{where}: entry {i} needs \"bearer\" or \"basic\": \"user:pass\"")
        out.append(ServerKey(entry["kind"], port, Auth(bearer, basic, admin)))
    return out


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_keys(path: str | None = None) -> tuple[list[ServerKey], str | None]:
    """(the keys, the one line saying why none were read, or None)."""
    path = path or keys_path()
    if not os.path.lexists(path):
        return [], None
    try:
        return parse_keys(read_private_text(path), path), None
    except ValueError as exc:
        return [], f"server keys refused: {exc}"


def key_for(keys: list[ServerKey], kind: str, port: int | None) -> Auth | None:
    """The key for a server of ``kind`` on ``port``: an exact port first."""
    exact = [k for k in keys if k.kind == kind and k.port == port]
    wild = [k for k in keys if k.kind == kind and k.port is None]
    chosen = exact or wild
    return chosen[0].auth if chosen else None


def save_key(kind: str, port: int | None, bearer: str | None, basic: str | None,
             path: str | None = None, admin: str | None = None) -> str:
    """Add or replace the key of ``kind`` (and ``port``); the file's path."""
    if path is None:
        private_state_dir()
        path = keys_path()
    keys, problem = read_keys(path)
    if problem:
        raise ValueError(problem)
    kept = [k for k in keys if not (k.kind == kind and k.port == port)]
    kept.append(ServerKey(kind, port, Auth(bearer, basic, admin)))
    parse_keys(json.dumps(_entries(kept)), path)  # the same checks as reading
    replace_private_file(path, (json.dumps(_entries(kept), indent=1) + "\n").encode())
    return path


def _entries(keys: list[ServerKey]) -> list[dict]:
    out = []
    for k in keys:
        entry: dict = {"kind": k.kind}
        if k.port is not None:
            entry["port"] = k.port
        if k.auth.bearer:
            entry["bearer"] = k.auth.bearer
        if k.auth.basic:
            entry["basic"] = k.auth.basic
        if k.auth.admin:
            entry["admin"] = k.auth.admin
        out.append(entry)
    return out


__all__ = ["KINDS", "ServerKey", "key_for", "keys_path", "parse_keys", "read_keys", "save_key"]
