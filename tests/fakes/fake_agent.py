"""A tiny agent server for tests: ``app.agent.protocol`` over real sockets.

Behaviour is set by attributes (``hang``, ``garbage``, ``delay_s``, ...), so a
test can turn one agent into a hung or misbehaving one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from app.agent import protocol
from app.core.agents.types import AgentEntry


def report_json(pid: int, allocated: int = 1000, reserved: int = 4000) -> dict[str, Any]:
    return {
        "pid": pid, "argv": ["python", "train.py"], "python": "3.11.7", "torch": "2.13.0",
        "torch_status": "loaded", "cuda_initialized": True, "allocator_backend": "native",
        "devices": [{"index": 0, "allocated": allocated, "reserved": reserved,
                     "peak_allocated": allocated, "peak_reserved": reserved,
                     "inactive_split": 0, "num_alloc_retries": 0, "num_ooms": 0}],
        "models": [{"id": "m1", "name": "model", "class": "Net", "params": 10,
                    "param_bytes": 40, "buffer_bytes": 0, "device": "cuda:0",
                    "dtype": "float32", "training": True, "last_used": None,
                    "bytes_by_device": {"cuda:0": {"params": 40, "buffers": 0}}}],
    }


#: What an ``own_process`` fake's process runs: it makes the bound socket (its fd is
#: the argument) listen, so the kernel names it as the socket's owner (SO_PEERCRED).
_HOLDER = ("import socket, sys, time; s = socket.socket(fileno=int(sys.argv[1])); "
           "s.listen(16); print('listening', flush=True); time.sleep(600)")


class FakeAgent:
    """``own_process``: the socket is made to listen in a sleeping child process
    of its own, whose pid is the agent's: the kernel then reports that process
    as the socket's owner, as for a real agent (the app checks it)."""

    def __init__(self, pid: int | None = None, transport: str = "unix",
                 sock_dir: str | None = None, own_process: bool = False) -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.process: subprocess.Popen | None = None
        self.transport = transport
        self.token = secrets.token_hex(16) if transport == "tcp" else None
        self.protocol_version: Any = protocol.PROTOCOL_VERSION
        self.hang = False  # accept, send hello, never answer
        self.hang_hello = False  # accept, never send hello
        self.garbage = False  # answer requests with a broken frame
        self.bad_result = False  # answer with a non-object result
        self.delay_s = 0.0
        self.events_before_reply = 0
        self.reserved = 4000
        self.allocated = 1000
        self.requests: list[tuple[str, dict]] = []
        # Model manager (opt-in: ``with_models()``): model dicts as in a report
        self.models: list[dict[str, Any]] | None = None
        self.events: list[dict[str, Any]] = []
        self.idle_unload_s: float | None = None
        self.action_delay_s = 0.0  # an unload/reload takes this long
        self.strict_params = False  # refuse params it does not know (an older agent)
        self._seq = 0
        self.connections = 0
        self._stop = threading.Event()
        self._dir = sock_dir or tempfile.mkdtemp(prefix="vsfa-")
        if transport == "unix":
            self.address = os.path.join(self._dir, f"{self.pid}-{secrets.token_hex(3)}.sock")
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(self.address)
        else:
            self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._server.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        if own_process:
            self._start_holder()
        else:
            self._server.listen(16)
        self._server.settimeout(0.1)
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _start_holder(self) -> None:
        fd = self._server.fileno()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(fd)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True, pass_fds=(fd,))
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "listening"
        self.pid = self.process.pid

    def with_models(self, now: float | None = None) -> FakeAgent:
        """Two models on cuda:0, reported as the agent reports them: "m1" in train mode
        (training evidence), "m2" in eval mode idle for 10 min (its parameters require
        grad, like any from_pretrained model's: that blocks nothing)."""
        now = time.time() if now is None else now
        self.models = [
            {"id": "m1", "name": "model", "class": "Net", "params": 10, "param_bytes": 40,
             "buffer_bytes": 0, "placeholder_bytes": 0, "device": "cuda:0",
             "dtype": "float32", "training": True, "requires_grad": True,
             "training_evidence": "train mode", "last_used": now - 1,
             "first_seen": now - 900, "idle_since": now - 1, "state": "resident",
             "offloaded_to": None, "pinned": False, "unload_blocker": None,
             "auto_unload_blocker": "train mode", "home_device": "cuda:0",
             "bytes_by_device": {"cuda:0": {"params": 40, "buffers": 0}}},
            {"id": "m2", "name": "head", "class": "Head", "params": 1000, "param_bytes": 2000,
             "buffer_bytes": 16, "placeholder_bytes": 0, "device": "cuda:0",
             "dtype": "float16", "training": False, "requires_grad": True,
             "training_evidence": None, "last_used": now - 600, "first_seen": now - 900,
             "idle_since": now - 600, "state": "resident", "offloaded_to": None,
             "pinned": False, "unload_blocker": None, "auto_unload_blocker": None,
             "home_device": "cuda:0",
             "bytes_by_device": {"cuda:0": {"params": 2000, "buffers": 16}}},
        ]
        return self

    def entry_json(self, create_time: float | None = None) -> dict[str, Any]:
        import psutil

        data = {"pid": self.pid, "create_time": create_time if create_time is not None
                else psutil.Process(self.pid).create_time(),
                "address": self.address, "transport": self.transport,
                "argv": ["python", "train.py"], "python": "3.11.7", "torch": "2.13.0",
                "protocol": 1, "agent": "0.1.0"}
        if self.token:
            data["token"] = self.token
        return data

    def entry(self) -> AgentEntry:
        """The registry entry a client would read for this agent."""
        entry = AgentEntry.from_json(self.entry_json())
        assert entry is not None
        return entry

    def register(self, runtime: str, create_time: float | None = None, name: str | None = None
                 ) -> str:
        """Write the entry as the agent does: 0600 in a 0700 ``agents`` dir."""
        folder = os.path.join(runtime, "agents")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, name or f"{self.pid}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self.entry_json(create_time), fh)
        return path

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._server.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(5)
            if self.process.stdout is not None:
                self.process.stdout.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        if self.transport == "unix":
            try:
                os.unlink(self.address)
            except OSError:
                pass

    # -- server
    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        try:
            if self.hang_hello:
                self._stop.wait()
                return
            challenge = secrets.token_hex(16) if self.token else None
            conn.sendall(protocol.encode({"hello": {
                "protocol": self.protocol_version, "agent": "0.1.0", "pid": self.pid,
                "auth": {"challenge": challenge} if challenge else None}}))
            decoder = protocol.FrameDecoder()
            authed = challenge is None
            while not self._stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                for message in decoder.feed(data):
                    rid, method, params = protocol.parse_request(message)
                    self.requests.append((method, params))
                    if not authed:
                        expected = hmac.new(self.token.encode(), bytes.fromhex(challenge),
                                            hashlib.sha256).hexdigest()
                        if method != "auth" or not hmac.compare_digest(
                                str(params.get("hmac")), expected):
                            conn.sendall(protocol.encode(protocol.error(
                                rid, protocol.UNAUTHORIZED, "bad hmac")))
                            return
                        authed = True
                        conn.sendall(protocol.encode(protocol.result(rid, {"ok": True})))
                        continue
                    if self.hang:
                        continue
                    if self.delay_s:
                        time.sleep(self.delay_s)
                    if self.garbage:
                        conn.sendall(b"\x00\x00\x00\x05notjs")
                        continue
                    for _ in range(self.events_before_reply):
                        conn.sendall(protocol.encode(protocol.event("oom", {"device": 0})))
                    for early in self._heralds(method, params):
                        conn.sendall(protocol.encode(early))
                    conn.sendall(protocol.encode(self._answer(rid, method, params)))
        except (OSError, protocol.ProtocolError):
            return
        finally:
            conn.close()

    def _heralds(self, method: str, params: dict) -> list[dict]:
        """Events this request's connection gets ahead of its reply (none here)."""
        return []

    def _answer(self, rid: Any, method: str, params: dict) -> dict:
        if self.bad_result:
            return {"id": rid, "result": [1, 2]}
        if method == "ping":
            return protocol.result(rid, {"pong": True})
        if method == "report":
            data = report_json(self.pid, self.allocated, self.reserved)
            if self.models is not None:
                data["models"] = [dict(m) for m in self.models]
                data["events"] = list(self.events[-64:])
                data["policy"] = {"idle_unload_s": self.idle_unload_s}
            return protocol.result(rid, data)
        if method in ("unload", "reload", "pin", "set_policy"):
            return self._model_answer(rid, method, params)
        if method == "free_cache":
            before = self.reserved
            self.reserved = self.allocated
            return protocol.result(rid, {"reserved_before": before, "reserved_after": self.reserved,
                                         "freed": before - self.reserved,
                                         "devices": [{"index": 0, "reserved_before": before,
                                                      "reserved_after": self.reserved}],
                                         "gc_collected": 3})
        if method == "gc":
            return protocol.result(rid, {"collected": 7, "seconds": 0.001})
        if method == "fail":
            return protocol.error(rid, protocol.FAILED, "it broke")
        return protocol.error(rid, protocol.UNKNOWN_METHOD, method)

    def _model_answer(self, rid: Any, method: str, params: dict) -> dict:
        """The model manager's methods, as protocol.py describes them."""
        if self.models is None:
            return protocol.error(rid, protocol.UNKNOWN_METHOD, method)
        if method == "set_policy":
            ttl = params.get("idle_unload_s")
            problem = None if ttl is None else protocol.idle_unload_problem(ttl)
            if problem is not None:  # the real agent's rule (app.agent.requests)
                return protocol.error(rid, protocol.BAD_PARAMS, f"idle_unload_s {problem}")
            self.idle_unload_s = ttl
            return protocol.result(rid, {"idle_unload_s": ttl})
        known = {"unload": {"model", "to", "force"}, "reload": {"model"},
                 "pin": {"model", "pinned"}}[method]
        if self.strict_params and set(params) - known:
            return protocol.error(rid, protocol.BAD_PARAMS,
                                  f"unknown params: {', '.join(sorted(set(params) - known))}")
        model = next((m for m in self.models if m["id"] == params.get("model")), None)
        if model is None:
            return protocol.error(rid, protocol.NOT_FOUND, f"no model {params.get('model')!r}")
        if method == "pin":
            model["pinned"] = bool(params.get("pinned"))
            return protocol.result(rid, {"model": model["id"], "pinned": model["pinned"]})
        nbytes = model["param_bytes"] + model["buffer_bytes"]
        if method == "unload":
            if model["state"] != "resident":
                return protocol.error(rid, protocol.REFUSED, f"already {model['state']}")
            if model.get("unload_blocker"):
                return protocol.error(rid, protocol.REFUSED, model["unload_blocker"])
            if model.get("training_evidence") and not params.get("force"):
                return protocol.error(rid, protocol.REFUSED,
                                      f"training evidence: {model['training_evidence']}")
            if self.action_delay_s:
                time.sleep(self.action_delay_s)
            target = params.get("to", "cpu")
            model.update(state="offloaded", offloaded_to=target,
                         device="cpu" if target == "cpu" else "disk",
                         bytes_by_device={"cpu": {"params": model["param_bytes"],
                                                  "buffers": model["buffer_bytes"]}}
                         if target == "cpu" else {})
            released = nbytes + max(0, self.reserved - self.allocated)
            self.allocated = max(0, self.allocated - nbytes)
            self.reserved = self.allocated
            event = self._event(model, "unload", "offloaded", target, nbytes, released,
                                params.get("reason", "manual"))
        else:
            if model["state"] != "offloaded":
                return protocol.error(rid, protocol.REFUSED, protocol.not_offloaded(model["state"]))
            if self.action_delay_s:
                time.sleep(self.action_delay_s)
            target = model["offloaded_to"]
            model.update(state="resident", offloaded_to=None, device=model["home_device"],
                         bytes_by_device={model["home_device"]: {
                             "params": model["param_bytes"], "buffers": model["buffer_bytes"]}})
            self.allocated += nbytes
            self.reserved += nbytes
            event = self._event(model, "reload", "resident", target, nbytes, None, "manual")
        return protocol.result(rid, event)

    def _event(self, model: dict, action: str, state: str, target: Any, moved: int,
               released: int | None, reason: str) -> dict:
        self._seq += 1
        event = {"seq": self._seq, "time": time.time(), "model": model["id"],
                 "name": model["name"], "action": action, "state": state, "target": target,
                 "bytes_moved": moved, "bytes_released": released, "seconds": 0.01,
                 "reason": reason, "ok": True, "error": None}
        self.events.append(event)
        return event
