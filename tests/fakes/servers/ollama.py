"""A fake Ollama server (``ollama serve``) with its model runner child.

Process shape, as the real one: ``<home>/bin/ollama serve`` (process name
``ollama``), and per loaded model a child ``<home>/bin/ollama runner
--ollama-engine --model <blob> --port <random>`` that holds the model's VRAM
(the real server's NVML figure is on the child pid).  ``bin/ollama`` is a link
to the base interpreter; with ``cwd=<home>`` the interpreter runs the
directory ``serve`` (or ``runner``) given as its first argument, whose
``__main__.py`` calls :func:`main` (:func:`prepare` lays the home out).

Routes (server/routes.go GenerateRoutes, api/types.go):

* ``GET|HEAD /``: "Ollama is running"; ``GET /api/version``: ``{"version"}``.
* ``GET /api/tags``: ``ListResponse`` of the models on disk.
* ``GET /api/ps``: ``ProcessResponse``: ``name, model, size, digest,
  details{parent_model, format, family, families, parameter_size,
  quantization_level}, expires_at, size_vram, context_length``, longest
  remaining first; times as Go's ``time.Time`` marshals them (RFC 3339 with
  nanoseconds and the local offset, ``Z`` for UTC).
* ``POST /api/generate`` / ``POST /api/chat``: an empty ``prompt`` /
  ``messages`` loads the model (``done_reason: "load"``), or with
  ``keep_alive`` 0 unloads it (``done_reason: "unload"``), one JSON object
  either way; otherwise "generates" for ``FAKE_OLLAMA_GENERATE_S`` seconds,
  streaming NDJSON unless ``"stream": false``.  ``keep_alive`` is an
  ``api.Duration``: a number of seconds, a Go duration string ("5m", "0"), a
  negative value for forever.

Scheduler (server/sched.go), reproduced:

* A request takes a reference on the runner and stops its expiry timer;
  ``expires_at`` is not touched while it runs (a model loaded by the running
  request has none yet, and ``/api/ps`` shows now + the session duration).
* When the last reference ends: keep-alive <= 0 unloads at once; otherwise
  the timer (re)starts and ``expires_at`` = now + keep-alive.
* Unload (``keep_alive`` 0 with an empty prompt): ``expires_at`` = now, the
  session duration becomes 0, and the answer comes at once.  A runner still
  generating is not stopped: the unload happens when its last request ends
  (an expiry with references pending is retried every 10 ms).
* At ``OLLAMA_MAX_LOADED_MODELS`` loaded, loading another expires the one
  with the shortest keep-alive that is idle, and waits for it to go.

Knobs (environment):

* ``OLLAMA_HOST`` (``127.0.0.1:11434``), ``OLLAMA_KEEP_ALIVE`` (5m),
  ``OLLAMA_MODELS`` (``<home>/models``), ``OLLAMA_MAX_LOADED_MODELS`` (3),
  ``OLLAMA_CONTEXT_LENGTH`` (4096): as the real server reads them.
* ``FAKE_OLLAMA_MODELS``: models on disk, ``name=file_bytes`` separated by
  commas (default ``llama3.2:3b=2019393189,qwen2.5:7b=4683075271``).  A
  loaded model's ``size`` is the file plus its KV cache and compute graph.
* ``FAKE_OLLAMA_GENERATE_S``: seconds one generation takes (0.3).
* ``FAKE_OLLAMA_PARTIAL``: fraction of ``size`` in VRAM (``size_vram``) for a
  partial offload (unset: all of it).
* ``FAKE_OLLAMA_LOAD_S``: seconds a runner takes to load (0.05).
* ``FAKE_OLLAMA_SM``: the runner's SM % while generating (83).
* ``FAKE_OLLAMA_VERSION``: ``/api/version`` (0.32.4).
* ``FAKE_NVML_PROCDIR``, ``FAKE_GPU``: see ``common``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.fakes.servers.common import (
    CLOCK,
    Allocation,
    App,
    BadRequest,
    Handler,
    base_python,
    env_float,
    env_int,
    env_str,
    launcher,
    listen,
    serve,
)

FOREVER = (1 << 63) - 1  # Go's math.MaxInt64 nanoseconds: keep_alive < 0
SECOND = 1_000_000_000
DEFAULT_MODELS = "llama3.2:3b=2019393189,qwen2.5:7b=4683075271"
WORDS = ("The", " sky", " is", " blue", " because", " air", " scatters", " short",
         " wavelengths", " of", " sunlight", " more", " than", " long", " ones", ".")


# ----------------------------------------------------------------- layout


def prepare(home: str | os.PathLike[str]) -> Path:
    """``home/bin/ollama`` (a link to the base interpreter) and the ``serve``
    and ``runner`` directories it runs with ``cwd=home``."""
    home = Path(home)
    (home / "bin").mkdir(parents=True, exist_ok=True)
    link = home / "bin" / "ollama"
    if not link.is_symlink():
        link.symlink_to(base_python())
    for mode in ("serve", "runner"):
        (home / mode).mkdir(exist_ok=True)
        launcher(str(home / mode / "__main__.py"), "tests.fakes.servers.ollama")
    return link


def command(home: str | os.PathLike[str]) -> list[str]:
    return [str(Path(home) / "bin" / "ollama"), "serve"]


# ------------------------------------------------------------ Go's formats


def go_time(ns: int, utc: bool = False) -> str:
    """A time as Go's encoding/json writes a ``time.Time`` (RFC 3339 with
    nanoseconds, trailing zeros dropped; ``Z`` when the offset is zero)."""
    sec, frac = divmod(ns, SECOND)
    tm = datetime.fromtimestamp(sec, UTC) if utc else datetime.fromtimestamp(sec).astimezone()
    text = tm.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    offset = tm.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    if minutes == 0:
        return text + "Z"
    sign = "+" if minutes > 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": SECOND,
          "m": 60 * SECOND, "h": 3600 * SECOND}
_PART = re.compile(r"(\d*\.?\d*)([a-zµμ]*)")


def parse_go_duration(text: str) -> int:
    """``time.ParseDuration``: "300ms", "-1.5h", "2h45m", "0"; ValueError with Go's message."""
    original, s = text, text
    sign = 1
    if s[:1] in "+-" and s:
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f'time: invalid duration "{original}"')
    total = 0
    while s:
        m = _PART.match(s)
        if m is None or not m.group(1) or m.group(1) == ".":
            raise ValueError(f'time: invalid duration "{original}"')
        number, unit = m.group(1), m.group(2)
        if not unit:
            raise ValueError(f'time: missing unit in duration "{original}"')
        if unit not in _UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{original}"')
        whole, _, frac = number.partition(".")
        value = int(whole or 0) * _UNITS[unit]
        if frac:
            value += int(frac) * _UNITS[unit] // 10 ** len(frac)
        total += value
        s = s[m.end():]
    return sign * total


def parse_keep_alive(value: object) -> int | None:
    """``api.Duration.UnmarshalJSON``: nanoseconds, FOREVER for negatives, None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("Unsupported type: 'bool'")
    if isinstance(value, (int, float)):
        return FOREVER if value < 0 else int(value * SECOND)
    if isinstance(value, str):
        ns = parse_go_duration(value)
        return FOREVER if ns < 0 else ns
    raise ValueError(f"Unsupported type: '{type(value).__name__}'")


def default_keep_alive() -> int:
    """``envconfig.KeepAlive``: OLLAMA_KEEP_ALIVE as a duration or whole seconds, else 5m."""
    keep = 5 * 60 * SECOND
    text = os.environ.get("OLLAMA_KEEP_ALIVE", "")
    if text:
        try:
            keep = parse_go_duration(text)
        except ValueError:
            try:
                keep = int(text) * SECOND
            except ValueError:
                pass
    return FOREVER if keep < 0 else keep


def add_ns(now: int, duration: int) -> int:
    """``time.Now().Add(d)``; FOREVER lands some 292 years ahead, as in Go."""
    return now + duration


# ----------------------------------------------------------------- models

_FAMILIES = {"llama": "llama", "qwen": "qwen2", "gemma": "gemma3", "mistral": "llama",
             "phi": "phi3", "deepseek": "qwen2"}


@dataclass
class Model:
    name: str  # "llama3.2:3b"
    file_bytes: int
    digest: str  # manifest digest, 64 hex
    blob: str  # model layer path handed to the runner
    family: str
    parameter_size: str
    modified_ns: int

    def memory(self, context: int) -> int:
        """Weights + KV cache for ``context`` tokens + compute graph."""
        return self.file_bytes + context * (self.file_bytes // 35_017) + 184_549_379

    def details(self) -> dict:
        return {"parent_model": "", "format": "gguf", "family": self.family,
                "families": [self.family], "parameter_size": self.parameter_size,
                "quantization_level": "Q4_K_M"}


def full_name(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def catalog(models_dir: Path) -> dict[str, Model]:
    """The models of FAKE_OLLAMA_MODELS, each with a small blob on disk."""
    out: dict[str, Model] = {}
    blobs = models_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for item in env_str("FAKE_OLLAMA_MODELS", DEFAULT_MODELS).split(","):
        if not item.strip():
            continue
        name, _, size = item.strip().partition("=")
        name = full_name(name)
        base, _, tag = name.partition(":")
        letters = re.match(r"[a-z]+", base.rsplit("/", 1)[-1])
        family = _FAMILIES.get(letters.group(0) if letters else base, letters.group(0) if letters else base)
        param = tag.upper() if re.fullmatch(r"\d+(\.\d+)?[bm]", tag) else "8.0B"
        layer = hashlib.sha256(b"layer:" + name.encode()).hexdigest()
        blob = blobs / f"sha256-{layer}"
        if not blob.exists():
            blob.write_bytes(b"GGUF\x03\x00\x00\x00")
        out[name] = Model(name=name, file_bytes=int(size), blob=str(blob),
                          digest=hashlib.sha256(b"manifest:" + name.encode()).hexdigest(),
                          family=family, parameter_size=param,
                          modified_ns=int(blob.stat().st_mtime_ns))
    return out


# -------------------------------------------------------------- scheduler


class LoadError(Exception):
    pass


class Runner:
    """One loaded model: its runner child and the scheduler's bookkeeping."""

    def __init__(self, model: Model, session_ns: int, context: int) -> None:
        self.model = model
        self.session_ns = session_ns
        self.context = context
        self.size = model.memory(context)
        partial = os.environ.get("FAKE_OLLAMA_PARTIAL")
        self.size_vram = int(self.size * float(partial)) if partial else self.size
        self.refs = 0
        self.timer: threading.Timer | None = None
        self.expires_at_ns: int | None = None  # None: Go's zero time
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.ready = threading.Event()
        self.failed: str | None = None
        self.unloaded = threading.Event()


class Scheduler:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.lock = threading.Lock()  # loadedMu and every runner's refMu in one
        self.pending = threading.Lock()  # processPending: one load decision at a time
        self.loaded: dict[str, Runner] = {}
        self.events: queue.Queue = queue.Queue()  # finishedReqCh and expiredCh
        self.max_runners = env_int("OLLAMA_MAX_LOADED_MODELS", 3)
        self.context = env_int("OLLAMA_CONTEXT_LENGTH", 4096)
        threading.Thread(target=self._completed_loop, daemon=True).start()

    # ------------------------------------------------------- requests

    def acquire(self, model: Model, keep_alive: int | None) -> Runner:
        """getRunner: a reference on the model's runner, loading it when needed."""
        runner = self._use_loaded(model, keep_alive)
        if runner is not None:
            return runner
        with self.pending:
            runner = self._use_loaded(model, keep_alive)
            if runner is not None:
                return runner
            while True:
                with self.lock:
                    full = len(self.loaded) >= self.max_runners > 0
                    victim = self._runner_to_unload() if full else None
                if victim is None:
                    return self._load(model, keep_alive)
                with self.lock:
                    self._cancel_timer(victim)
                    victim.session_ns = 0
                    if victim.refs <= 0:
                        self.events.put(("expired", victim))
                victim.unloaded.wait(120)

    def release(self, runner: Runner) -> None:
        """The request's context is done."""
        self.events.put(("finished", runner))

    def expire(self, model: Model) -> None:
        """expireRunner: keep_alive 0 with an empty prompt."""
        with self.lock:
            runner = self.loaded.get(model.name)
            if runner is None:
                return
            runner.expires_at_ns = CLOCK.now_ns()
            self._cancel_timer(runner)
            runner.session_ns = 0
            if runner.refs <= 0:
                self.events.put(("expired", runner))

    def snapshot(self) -> list[Runner]:
        with self.lock:
            runners = list(self.loaded.values())
        for runner in runners:
            runner.ready.wait(120)  # a loading runner's refMu is held: ps waits
        return [r for r in runners if r.failed is None]

    def unload_all(self) -> None:
        with self.lock:
            runners = list(self.loaded.values())
            self.loaded.clear()
        for runner in runners:
            self._stop(runner)

    # ------------------------------------------------------- internals

    def _use_loaded(self, model: Model, keep_alive: int | None) -> Runner | None:
        with self.lock:
            runner = self.loaded.get(model.name)
        if runner is None:
            return None
        runner.ready.wait(120)
        with self.lock:
            if runner.failed is not None or self.loaded.get(model.name) is not runner:
                return None
            runner.refs += 1  # useLoadedRunner: expiresAt stays as it was
            self._cancel_timer(runner)
            if keep_alive is not None:
                runner.session_ns = keep_alive
            return runner

    def _runner_to_unload(self) -> Runner | None:
        """findRunnerToUnload: shortest keep-alive first, an idle one if any."""
        runners = sorted(self.loaded.values(), key=lambda r: r.session_ns)
        for runner in runners:
            if runner.refs == 0:
                return runner
        return runners[0] if runners else None

    def _load(self, model: Model, keep_alive: int | None) -> Runner:
        runner = Runner(model, default_keep_alive() if keep_alive is None else keep_alive, self.context)
        with self.lock:
            self.loaded[model.name] = runner
        try:
            self._spawn(runner)
        except LoadError as e:
            with self.lock:
                if self.loaded.get(model.name) is runner:
                    del self.loaded[model.name]
                runner.failed = str(e)
            self._stop(runner)
            runner.ready.set()
            runner.unloaded.set()
            raise
        with self.lock:
            runner.refs += 1
        runner.ready.set()
        return runner

    def _spawn(self, runner: Runner) -> None:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            runner.port = s.getsockname()[1]
        env = dict(os.environ)
        env["FAKE_OLLAMA_RUNNER_BYTES"] = str(runner.size_vram)
        exe = str(self.home / "bin" / "ollama")
        runner.proc = subprocess.Popen(
            [exe, "runner", "--ollama-engine", "--model", runner.model.blob, "--port", str(runner.port)],
            cwd=self.home, env=env, stdin=subprocess.DEVNULL)
        deadline = CLOCK.monotonic() + 30
        while CLOCK.monotonic() < deadline:
            if runner.proc.poll() is not None:
                raise LoadError(f"llama runner process has terminated: exit status {runner.proc.returncode}")
            try:
                status, _ = runner_call(runner.port, "GET", "/health", timeout=1)
                if status == 200:
                    return
            except OSError:
                pass
            CLOCK.sleep(0.01)
        raise LoadError("timed out waiting for llama runner to start")

    def _stop(self, runner: Runner) -> None:
        """llama.Close: end the runner; its memory goes with it."""
        proc = runner.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None:
            Allocation(pid=proc.pid).clear()

    def _cancel_timer(self, runner: Runner) -> None:
        if runner.timer is not None:
            runner.timer.cancel()
            runner.timer = None

    def _start_timer(self, runner: Runner) -> None:
        if runner.session_ns >= 10 * 365 * 86400 * SECOND:
            runner.timer = threading.Timer(1e9, lambda: None)  # never fires: not started
            return
        timer = threading.Timer(runner.session_ns / SECOND, self._timer_fired, (runner,))
        timer.daemon = True
        runner.timer = timer
        timer.start()

    def _timer_fired(self, runner: Runner) -> None:
        with self.lock:
            if runner.timer is None or runner.timer is not threading.current_thread():
                return
            runner.timer = None
            self.events.put(("expired", runner))

    def _completed_loop(self) -> None:
        """processCompleted: finished requests and expired runners, in order."""
        while True:
            kind, runner = self.events.get()
            if kind == "finished":
                with self.lock:
                    if self.loaded.get(runner.model.name) is not runner:
                        continue  # finished after the model was unloaded
                    runner.refs -= 1
                    if runner.refs > 0:
                        continue
                    if runner.session_ns <= 0:
                        self._cancel_timer(runner)
                        self.events.put(("expired", runner))
                    else:
                        self._cancel_timer(runner)  # a new timer, or the old one reset
                        self._start_timer(runner)
                        runner.expires_at_ns = add_ns(CLOCK.now_ns(), runner.session_ns)
            elif kind == "expired":
                with self.lock:
                    if runner.refs > 0:
                        # Not yet: try again as soon as the current request completes.
                        retry = threading.Timer(0.01, self.events.put, (("expired", runner),))
                        retry.daemon = True
                        retry.start()
                        continue
                    if self.loaded.get(runner.model.name) is not runner:
                        continue  # a duplicate expiry
                    self._stop(runner)  # under the lock: /api/ps never lists a dead runner
                    del self.loaded[runner.model.name]
                runner.unloaded.set()


def compact(obj: object) -> bytes:
    """One NDJSON line as Go's json.Marshal writes it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def runner_call(port: int, method: str, path: str, body: dict | None = None,
                timeout: float = 60) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ------------------------------------------------------------------ server


class OllamaApp(App):
    server_header = None  # Go's net/http sends none

    def __init__(self, home: Path, models_dir: Path) -> None:
        super().__init__()
        self.models = catalog(models_dir)
        self.sched = Scheduler(home)
        self.version = env_str("FAKE_OLLAMA_VERSION", "0.32.4")
        self.route("GET", "/")(lambda h: h.send_text(200, "Ollama is running"))
        self.route("GET", "/api/version")(lambda h: h.send_json(200, {"version": self.version}))
        self.route("GET", "/api/tags")(self.tags)
        self.route("GET", "/api/ps")(self.ps)
        self.route("POST", "/api/show")(self.show)
        self.route("POST", "/api/generate")(lambda h: self.generate(h, chat=False))
        self.route("POST", "/api/chat")(lambda h: self.generate(h, chat=True))

    def not_found(self, h: Handler) -> None:
        h.send_text(404, "404 page not found", content_type="text/plain")

    def method_not_allowed(self, h: Handler) -> None:
        h.send_text(405, "405 method not allowed", content_type="text/plain")

    def tags(self, h: Handler) -> None:
        models = sorted(self.models.values(), key=lambda m: m.modified_ns, reverse=True)
        h.send_json(200, {"models": [
            {"name": m.name, "model": m.name, "modified_at": go_time(m.modified_ns),
             "size": m.file_bytes, "digest": m.digest, "details": m.details()} for m in models]})

    def show(self, h: Handler) -> None:
        """ShowHandler: the Modelfile names the model's layer blob in its FROM
        line (server/routes.go GetModelInfo, parser.Format)."""
        try:
            req = h.json() or {}
        except BadRequest as e:
            h.send_json(400, {"error": str(e)})
            return
        name = req.get("model") or req.get("name")
        if not name:
            h.send_json(400, {"error": "model is required"})
            return
        model = self.models.get(name) or self.models.get(f"{name}:latest")
        if model is None:
            h.send_json(404, {"error": f"model '{name}' not found"})
            return
        modelfile = (f'# Modelfile generated by "ollama show"\n# To build a new Modelfile '
                     f"based on this, replace FROM with:\n# FROM {model.name}\n\n"
                     f"FROM {model.blob}\nTEMPLATE {{{{ .Prompt }}}}\n")
        h.send_json(200, {"license": "", "modelfile": modelfile, "parameters": "",
                          "template": "{{ .Prompt }}", "details": model.details(),
                          "model_info": {"general.architecture": "llama"},
                          "capabilities": ["completion"],
                          "modified_at": go_time(model.modified_ns)})

    def ps(self, h: Handler) -> None:
        now = CLOCK.now_ns()
        rows = []
        for r in self.sched.snapshot():
            # loadedModels: a model still loading (or loaded by the request still
            # running) has the zero expiresAt; estimate it from the session duration.
            expires = r.expires_at_ns if r.expires_at_ns is not None else add_ns(now, r.session_ns)
            rows.append((expires, {
                "name": r.model.name, "model": r.model.name, "size": r.size,
                "digest": r.model.digest, "details": r.model.details(),
                "expires_at": go_time(expires), "size_vram": r.size_vram,
                "context_length": r.context}))
        rows.sort(key=lambda row: -(row[0] // SECOND))  # longest remaining first, stable
        h.send_json(200, {"models": [row[1] for row in rows]})

    def generate(self, h: Handler, chat: bool) -> None:
        started = CLOCK.now_ns()
        try:
            req = h.json()
        except BadRequest as e:
            h.send_json(400, {"error": str(e)})
            return
        if req is None:
            h.send_json(400, {"error": "missing request body"})
            return
        if not isinstance(req, dict):
            h.send_json(400, {"error": "json: cannot unmarshal into Go value of type api.GenerateRequest"})
            return
        asked = str(req.get("model") or "")
        model = self.models.get(full_name(asked)) if asked else None
        if model is None:
            h.send_json(404, {"error": f"model '{asked}' not found"})
            return
        try:
            keep_alive = parse_keep_alive(req.get("keep_alive"))
        except ValueError as e:
            h.send_json(400, {"error": str(e)})
            return
        empty = not req.get("messages") if chat else not req.get("prompt")
        if empty and keep_alive == 0:
            self.sched.expire(model)
            h.send_json(200, self._final(asked, chat, "unload"), content_type="application/json; charset=utf-8")
            return
        try:
            runner = self.sched.acquire(model, keep_alive)
        except LoadError as e:
            h.send_json(500, {"error": str(e)})
            return
        try:
            loaded = CLOCK.now_ns()
            if empty:
                h.send_json(200, self._final(asked, chat, "load"), content_type="application/json; charset=utf-8")
                return
            self._complete(h, runner, asked, chat, req, started, loaded)
        finally:
            self.sched.release(runner)

    def _final(self, model: str, chat: bool, reason: str) -> dict:
        out: dict = {"model": model, "created_at": go_time(CLOCK.now_ns(), utc=True)}
        if chat:
            out["message"] = {"role": "assistant", "content": ""}
        else:
            out["response"] = ""
        out.update({"done": True, "done_reason": reason})
        return out

    def _complete(self, h: Handler, runner: Runner, model: str, chat: bool, req: dict,
                  started: int, loaded: int) -> None:
        seconds = env_float("FAKE_OLLAMA_GENERATE_S", 0.3)
        tokens = max(3, int(seconds / 0.05))
        stream = req.get("stream", True) is not False
        conn = http.client.HTTPConnection("127.0.0.1", runner.port, timeout=seconds + 60)
        conn.request("POST", "/completion", body=json.dumps({"seconds": seconds, "tokens": tokens}).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if stream:
            h.start_chunked(200, "application/x-ndjson")
        pieces: list[str] = []
        eval_start = CLOCK.now_ns()
        try:
            for line in resp:
                event = json.loads(line)
                if event.get("done"):
                    break
                pieces.append(event["content"])
                if stream:
                    h.write_chunk(compact(self._chunk(model, chat, event["content"])))
        finally:
            conn.close()
        end = CLOCK.now_ns()
        final = self._final(model, chat, "stop")
        if not stream:
            if chat:
                final["message"]["content"] = "".join(pieces)
            else:
                final["response"] = "".join(pieces)
        if not chat:
            final["context"] = [128006 + i * 7 for i in range(len(pieces) + 5)]
        final.update({"total_duration": end - started, "load_duration": loaded - started,
                      "prompt_eval_count": 26, "prompt_eval_duration": max(eval_start - loaded, 1),
                      "eval_count": len(pieces), "eval_duration": max(end - eval_start, 1)})
        if stream:
            h.write_chunk(compact(final))
            h.end_chunked()
        else:
            h.send_json(200, final, content_type="application/json; charset=utf-8")

    @staticmethod
    def _chunk(model: str, chat: bool, piece: str) -> dict:
        out: dict = {"model": model, "created_at": go_time(CLOCK.now_ns(), utc=True)}
        if chat:
            out["message"] = {"role": "assistant", "content": piece}
        else:
            out["response"] = piece
        out["done"] = False
        return out


def host_and_port() -> tuple[str, int]:
    """OLLAMA_HOST as envconfig.Host reads it: [scheme://]host[:port]."""
    text = env_str("OLLAMA_HOST", "127.0.0.1:11434")
    text = text.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        host, port = text, "11434"
    return host.strip("[]") or "127.0.0.1", int(port)


def main_serve(argv: list[str]) -> int:
    home = Path.cwd()
    models_dir = Path(env_str("OLLAMA_MODELS", str(home / "models")))
    app = OllamaApp(home, models_dir)
    host, port = host_and_port()
    servers = listen(app, [host], port)
    return serve(servers, cleanup=app.sched.unload_all,
                 banner=f"Listening on {host}:{port} (version {app.version})")


# ------------------------------------------------------------------ runner


class RunnerApp(App):
    """The model runner: holds the model's VRAM, "generates" on request."""

    def __init__(self) -> None:
        super().__init__()
        self.alloc = Allocation()
        self.loaded = threading.Event()
        self.busy = threading.Lock()
        self.route("GET", "/health")(self.health)
        self.route("POST", "/completion")(self.completion)

    def load(self) -> None:
        CLOCK.sleep(env_float("FAKE_OLLAMA_LOAD_S", 0.05))
        self.alloc.set(env_int("FAKE_OLLAMA_RUNNER_BYTES", 0))
        self.loaded.set()

    def health(self, h: Handler) -> None:
        if self.loaded.is_set():
            h.send_json(200, {"status": "ok", "progress": 1})
        else:
            h.send_json(503, {"status": "loading model", "progress": 0.5})

    def completion(self, h: Handler) -> None:
        req = h.json(default={}) or {}
        seconds = float(req.get("seconds", 0.3))
        tokens = max(int(req.get("tokens", 6)), 1)
        with self.busy:
            self.alloc.busy(env_int("FAKE_OLLAMA_SM", 83))
            try:
                h.start_chunked(200, "application/x-ndjson")
                for i in range(tokens):
                    CLOCK.sleep(seconds / tokens)
                    h.write_chunk(json.dumps({"content": WORDS[i % len(WORDS)]}).encode() + b"\n")
                h.write_chunk(b'{"done": true}\n')
                h.end_chunked()
            finally:
                self.alloc.busy(None)


def main_runner(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ollama runner")
    parser.add_argument("--ollama-engine", action="store_true")
    parser.add_argument("--mlx-engine", action="store_true")
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = RunnerApp()
    servers = listen(app, ["127.0.0.1"], args.port)
    threading.Thread(target=app.load, daemon=True).start()
    return serve(servers, cleanup=app.alloc.clear)


def main(argv: list[str] | None = None) -> int:
    """Entry of ``bin/ollama``: the mode is the directory the interpreter ran."""
    argv = sys.argv[1:] if argv is None else argv
    mode = os.path.basename(os.path.normpath(sys.argv[0]))
    if mode == "runner":
        return main_runner(argv)
    if mode == "serve":
        return main_serve(argv)
    print(f"Error: unknown command {mode!r} for \"ollama\"", file=sys.stderr)
    return 1
