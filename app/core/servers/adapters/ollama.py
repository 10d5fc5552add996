"""Ollama: ``/api/ps`` lists what is loaded, ``keep_alive: 0`` unloads.

The memory sits in a runner child (``ollama runner`` or ``llama-server``),
attributed to the server by recognition.  Ollama's scheduler sets a model's
``expires_at`` to the end of its last request plus its keep-alive, so the
last request is ``expires_at`` minus the keep-alive (the server's
``OLLAMA_KEEP_ALIVE``, else 5 min).  A keep-alive sent with a request can
differ; the directory also notes every change of ``expires_at`` (a request
ended), and an unload sent while a request runs is held by Ollama until it
ends, so a busy model is never cut off.
"""

from __future__ import annotations

import re
import time
from datetime import datetime

from app.core.servers.adapters.base import Ack, Adapter, Probe, items, mapping, number, text
from app.core.servers.http import LocalHttp, ServerHttpError
from app.core.servers.recognise import Found
from app.core.servers.types import ServerModel

UNLOAD = "Ollama unloads it now (keep_alive 0) and frees its memory; the next request loads it"
DEFAULT_KEEP_ALIVE_S = 300.0


def parse_time(value: object) -> float | None:
    """An RFC 3339 time as Go writes it (nanoseconds, offset or Z), epoch seconds."""
    if not isinstance(value, str) or not value:
        return None
    fixed = re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))
    try:
        stamp = datetime.fromisoformat(fixed)
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None


def parse_duration(value: str | None) -> float | None:
    """``OLLAMA_KEEP_ALIVE``: seconds, or a Go duration ("5m", "1h30m", "-1")."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
        parts = re.findall(r"(-?[0-9.]+)(ms|h|m|s)", value)
        if not parts or "".join(n + u for n, u in parts) != value:
            return None
        seconds = sum(float(n) * units[u] for n, u in parts)
    return None if seconds < 0 else seconds  # negative: forever


class Ollama(Adapter):
    kind = "ollama"
    defers_while_busy = True  # its scheduler unloads once the running request ends
    reloads_on_use = True

    def __init__(self) -> None:
        self._files: dict[tuple[str, str], str | None] = {}  # (endpoint, digest) -> blob

    def _file(self, http: LocalHttp, name: str, digest: str | None) -> str | None:
        """The weights file Ollama hands its runner: the FROM line of the model's
        Modelfile (``/api/show``), asked once per model version."""
        key = (http.endpoint, digest or name)
        if key in self._files:
            return self._files.get(key)  # probes run on several threads: no KeyError
        try:
            shown = mapping(http.post("/api/show", {"model": name}))
        except ServerHttpError:
            return None  # asked again next time
        lines = re.findall(r"^FROM (.+)$", text(shown.get("modelfile")) or "", re.M)
        found = next((f.strip() for f in lines if "sha256" in f), None)
        if len(self._files) > 256:
            self._files = {}
        self._files[key] = found
        return found

    def probe(self, found: Found, http: LocalHttp) -> Probe:
        version = text(mapping(http.get("/api/version")).get("version"))
        keep_alive = parse_duration(found.option("OLLAMA_KEEP_ALIVE"))
        if found.option("OLLAMA_KEEP_ALIVE") is None:
            keep_alive = DEFAULT_KEEP_ALIVE_S
        models = []
        for entry in items(mapping(http.get("/api/ps")).get("models")):
            entry = mapping(entry)
            name = text(entry.get("name")) or text(entry.get("model"))
            if not name:
                continue
            expires = parse_time(entry.get("expires_at"))
            if expires is not None and expires <= 0:
                expires = None  # Go's zero time: not set yet
            idle_since = None
            if expires is not None and keep_alive is not None:
                idle_since = expires - keep_alive
                if idle_since > time.time():  # a longer keep-alive sent with a request
                    idle_since = None
            models.append(ServerModel(
                id=name, name=name, vram_bytes=number(entry.get("size_vram")),
                size_bytes=number(entry.get("size")), figure="size_vram",
                expires_at=expires, idle_since=idle_since, unload=UNLOAD,
                file=self._file(http, name, text(entry.get("digest")))))
        return Probe(version=version, models=tuple(models), can_unload=True, unload_note=UNLOAD)

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        answer = mapping(http.post("/api/generate", {"model": model.id, "keep_alive": 0,
                                                      "stream": False}, timeout_s=60.0))
        reason = text(answer.get("done_reason"))
        return Ack(True, "Ollama unloaded it" if reason == "unload"
                   else f"Ollama answered {reason or 'without a reason'}")


__all__ = ["Ollama", "parse_duration", "parse_time"]
