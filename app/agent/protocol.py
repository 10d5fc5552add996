"""The agent's wire protocol: length-prefixed JSON, versioned, bounded.

Standard library only: this module is loaded inside users' training processes
(by the agent) and by the app (by the client).

Frame
    4-byte big-endian unsigned length N (1 <= N <= MAX_FRAME_BYTES), then N
    bytes of UTF-8 JSON whose top level is an object.  Nothing else is ever
    decoded: no pickle, no eval.

Conversation
    1. On connect the agent sends ``{"hello": {"protocol": 1, "agent": "0.1.0",
       "pid": 123, "auth": null | {"challenge": "<hex>"}}}``.
    2. Where ``auth`` is not null (TCP on Windows), the first request must be
       ``{"id": 1, "method": "auth", "params": {"hmac": "<hex>"}}`` with
       HMAC-SHA256(key=token, msg=bytes.fromhex(challenge)), where the key is
       the registry file's ``token`` string encoded as ASCII (``auth_hmac``
       computes it); anything else, or a wrong HMAC, closes the connection.
    3. Requests ``{"id": <int|str>, "method": "<name>", "params": {...}}``
       get exactly one reply with the same id: ``{"id": .., "result": {...}}``
       or ``{"id": .., "error": {"code": "<code>", "message": "<text>"}}``.
    4. Events ``{"event": "<name>", "data": {...}}`` may arrive at any time
       after a ``subscribe`` request; they carry no id.

Methods (the allowlist; anything else is ``unknown_method``)
    ``hello``       the hello payload again
    ``ping``        ``{}`` -> ``{"pong": true}``
    ``report``      ``{"models": true}`` -> the report (see ``app.agent.introspect``)
    ``free_cache``  ``{}`` -> ``{"reserved_before", "reserved_after", "freed",
                    "devices": [{"index", "reserved_before", "reserved_after"}],
                    "gc_collected"}`` (bytes)
    ``gc``          ``{}`` -> ``{"collected": n, "seconds": s}``
    ``subscribe``   ``{"events": ["oom", ...]}`` -> ``{"events": [...]}``
    ``unload``      ``{"model": "m1", "to": "cpu"|"disk", "force": false,
                    "reason": "manual"|"pressure"}`` (``to`` defaults to "cpu" for
                    a model with CUDA weights, else "disk"; ``force`` overrides
                    training evidence only, manual unloads only; "pressure"
                    obeys the automatic rules: never pinned, never with training
                    evidence) -> the model event (below) once the model is
                    offloaded; refused with ``refused`` and a reason (training
                    evidence, a forward running, torch.compile, shared tensors,
                    ...) leaving the model resident and usable; in a model server
                    that manages its own models (the report's ``managed_by``)
                    every unload, forced or not, is refused with ``managed``
    ``reload``      ``{"model": "m1"}`` -> the model event once resident again;
                    a model that is resident already is refused with ``refused``
                    and ``not_offloaded("resident")``'s words (an older agent
                    answered an unrecorded event with ``"note": "already resident"``)
    ``pin``         ``{"model": "m1", "pinned": true}`` -> ``{"model", "pinned"}``;
                    pinned models are exempt from automatic unloading
    ``set_policy``  ``{"idle_unload_s": 600 | null}`` -> ``{"idle_unload_s"}``: the
                    agent's own idle TTL (works with no app running; off = null),
                    ``IDLE_UNLOAD_MIN_S``..``IDLE_UNLOAD_MAX_S`` (10 s to 30 days)
    ``record``      ``{"seconds": 1..300, "max_entries": 1000..500000 (100000)}`` ->
                    ``{"path", "entries", "seconds", "device": null, "truncated",
                    "sites": [{"site": "train.py:42 in step", "bytes", "count",
                    "live_bytes"}]}`` (top 25 by bytes): PyTorch's allocation history
                    (Python stacks, at most ``max_entries`` events) for ``seconds``,
                    written to ``<state dir>/recordings/<pid>-<time>.pickle`` (0600;
                    memory_viz opens it) and turned off after (``app.agent.recording``);
                    ``refused`` without CUDA or while the process records its own
                    history, ``busy`` while a recording runs; runs on a thread of its
                    own (other actions are not held up).  Once the history is on,
                    the requesting connection gets ``{"event": "record_started",
                    "data": {"seconds", "max_entries"}}`` ahead of the reply, with
                    no ``subscribe`` (an older agent sends none)

The report also carries ``"managed_by"``: the model server the process runs, which
loads and frees its own models ("ComfyUI", "Forge", "AUTOMATIC1111",
"text-generation-webui", "vLLM", "SGLang"; ``app.agent.managed``), or null; each
model's ``unload_blocker`` and ``auto_unload_blocker`` then say ``managed by <server>``.
It also carries ``"ooms"``: the last 8 OOM captures, oldest first, each
``{"seq", "time", "device", "uuid", "request", "limit", "free", "stats": {"allocated",
"reserved", "active", "inactive_split", "peak_allocated", "peak_reserved",
"num_alloc_retries", "num_ooms"}, "segments": {"count", "reserved", "allocated", "free",
"largest_free_block", "expandable"} | null, "step", "thread", "capture_s", "errors"}``
(``app.agent.oom_capture``), and ``"steps"``: ``{"count", "samples": [{"step", "time",
"device", "allocated"}]}`` or null before torch's step hook is installed
(``app.agent.step_memory``).  The ``oom`` event's data is the capture plus the older
keys ``alloc``, ``device_allocated`` (the device's total or cap) and ``device_free``.

Model events (in ``report``'s ``"events"``, the last 64, and pushed as the
``model_state`` event to subscribers):
    ``{"seq": n, "time": epoch_s, "model": "m1", "name", "action": "unload"|"reload",
    "state": "resident"|"unloading"|"offloaded"|"reloading", "target": "cpu"|"disk"|null,
    "bytes_moved", "bytes_released", "seconds",
    "reason": "manual"|"idle"|"pressure"|"forward"|"access"|"compile",
    "ok": bool, "error": str|null}`` ("access": a read of the weights brought it
    back, "compile": torch.compile or torch.jit.script did)

Error codes
    ``bad_request`` (not a valid request object), ``unknown_method``,
    ``bad_params``, ``unauthorized``, ``busy`` (also, with ``"id": null``,
    the last frame of a connection closed to make room for a new one),
    ``refused``, ``managed`` (an unload in a model server that manages its own
    models: the message says whose unload to use), ``not_found``, ``failed``
    (the action ran and raised; the message says why), ``internal``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

PROTOCOL_VERSION = 1
MAX_FRAME_BYTES = 1024 * 1024  # 1 MiB: reports are a few KiB; a model list stays far below
HEADER = struct.Struct(">I")

METHODS = frozenset({"hello", "ping", "report", "free_cache", "gc", "subscribe", "auth",
                     "unload", "reload", "pin", "set_policy", "record"})
EVENTS = frozenset({"oom", "alloc_retries", "models_changed", "model_state"})
#: Sent to the connection whose ``record`` request turned the history on (no subscription).
RECORD_STARTED = "record_started"

BAD_REQUEST = "bad_request"
UNKNOWN_METHOD = "unknown_method"
BAD_PARAMS = "bad_params"
UNAUTHORIZED = "unauthorized"
BUSY = "busy"
REFUSED = "refused"  # a model action that would not be safe: the reason says why
MANAGED = "managed"  # an unload refused: a model server manages the process's models
NOT_FOUND = "not_found"  # no such model (it may have been garbage-collected)
FAILED = "failed"
INTERNAL = "internal"

#: The idle timer's bounds (``set_policy``, ``VRAM_STEWARD_IDLE_UNLOAD``, the app and
#: the CLI): shorter would unload a model between two ordinary uses; longer is no
#: timer anyone means (and a typo away from "never").
IDLE_UNLOAD_MIN_S = 10.0
IDLE_UNLOAD_MAX_S = 30 * 86400.0
#: No automatic unload (the idle timer's or the app's pressure policy's) takes a
#: model reloaded less than this long ago (a model's ``reloaded_at``): what was
#: just brought back is wanted, and unloading it again would only thrash.
RELOAD_GRACE_S = 60.0


def not_offloaded(state: str) -> str:
    """Why a reload of a model in ``state`` is refused: the agent's, the demo's
    and the app's one wording ("not offloaded (it is resident)")."""
    return "not offloaded (it is %s)" % state


def idle_unload_problem(value: Any) -> str | None:
    """Why ``value`` is not an idle timer in seconds (None: it is one).  NaN,
    infinities, booleans and anything out of bounds are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number of seconds"
    if not IDLE_UNLOAD_MIN_S <= value <= IDLE_UNLOAD_MAX_S:  # False for NaN
        return (f"must be between {IDLE_UNLOAD_MIN_S:g} s and "
                f"{IDLE_UNLOAD_MAX_S / 86400:g} days ({IDLE_UNLOAD_MAX_S:g} s)")
    return None


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def encode(message: dict[str, Any]) -> bytes:
    """One frame for ``message``; raises ProtocolError if it is too large."""
    try:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        # lone surrogates (e.g. undecodable argv bytes): escape them instead
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False).encode("ascii")
    if not body or len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(body)) + body


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"non-standard JSON constant {name}")


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("a frame must hold a JSON object")
    return value


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole messages.

    After a ProtocolError the stream is unusable (framing is lost) and the
    connection must be closed.
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_frame
        self._need: int | None = None

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a whole message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        # Buffer now, decode lazily: a generator function would only buffer
        # ``data`` once iterated, silently losing bytes fed but not iterated.
        self._buffer += data
        return self._messages()

    def _messages(self) -> Iterator[dict[str, Any]]:
        while True:
            if self._need is None:
                if len(self._buffer) < HEADER.size:
                    return
                (length,) = HEADER.unpack_from(self._buffer)
                if length == 0 or length > self._max:
                    raise ProtocolError(f"frame length {length} outside 1..{self._max}")
                del self._buffer[: HEADER.size]
                self._need = length
            if len(self._buffer) < self._need:
                return
            body = bytes(self._buffer[: self._need])
            del self._buffer[: self._need]
            self._need = None
            yield decode_body(body)


def request(request_id: int | str, method: str, params: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    return {"id": request_id, "method": method, "params": params or {}}


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"id": request_id, "result": value}


def error(request_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"code": code, "message": message}}


def event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"event": name, "data": data}


def auth_hmac(token: str, challenge: str) -> str:
    """The ``auth`` request's ``hmac``: HMAC-SHA256(token as ASCII, challenge bytes), hex."""
    import hashlib  # only the TCP transport needs these: keep start-up light
    import hmac

    return hmac.new(token.encode("ascii"), bytes.fromhex(challenge), hashlib.sha256).hexdigest()


def parse_request(message: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """(id, method, params) of a request; raises ProtocolError with a reason.

    The id is echoed back only if it is an int or a short string.
    """
    request_id = message.get("id")
    if not (isinstance(request_id, int) and not isinstance(request_id, bool)
            or isinstance(request_id, str) and len(request_id) <= 64):
        raise ProtocolError("request id must be an integer or a string of <= 64 characters")
    method = message.get("method")
    if not isinstance(method, str):
        raise ProtocolError("method must be a string")
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError("params must be an object")
    return request_id, method, params
