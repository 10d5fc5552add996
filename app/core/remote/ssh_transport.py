"""A server over SSH: the system's ``ssh`` runs ``vram-steward serve --stdio``
on the host, so SSH's own keys, agent, config and known hosts do the
authentication and the host opens no port.

The remote command is a shell command line (for a virtual environment:
``~/venv/bin/vram-steward``); `` serve --stdio`` is appended.  One reader
thread hands answers to their callers by ``id`` and frames to the stream.

``$VRAM_STEWARD_SSH_OPTIONS`` adds options to every ``ssh`` command, split
as a shell would (``-F /etc/ssh/gpu-hosts -o ConnectTimeout=5``): ssh reads
its config from the user's home as the password database names it, never
``$HOME``, so this is how another config or key is chosen.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import queue
import shlex
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

from app.core.remote.address import RemoteAddress
from app.core.remote.errors import RemoteError, RemoteUnavailable, check_wire
from app.core.serve.frames import KEEPALIVE_S
from app.core.wire.snapshot import WIRE_VERSION

REMOTE_COMMAND_ENV = "VRAM_STEWARD_REMOTE_COMMAND"
SSH_OPTIONS_ENV = "VRAM_STEWARD_SSH_OPTIONS"
DEFAULT_REMOTE_COMMAND = "vram-steward"
#: Frames held for a slow reader; past this they are dropped for a whole snapshot later.
MAX_FRAMES = 256
_GAP = {"type": "gap"}


class SshTransport:
    def __init__(self, address: RemoteAddress, remote_command: str | None = None,
                 ssh: str = "ssh", options: tuple[str, ...] = (),
                 timeout_s: float = 20.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        remote = remote_command or os.environ.get(REMOTE_COMMAND_ENV) or DEFAULT_REMOTE_COMMAND
        target = f"{address.user}@{address.host}" if address.user else address.host
        port = ["-p", str(address.port)] if address.port is not None else []
        extra = shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))
        # BatchMode: never a prompt nobody can answer.  ServerAlive: a peer that
        # stops answering ends ssh itself, so nothing is left behind waiting on it.
        self.command = [ssh, "-T", "-o", "BatchMode=yes", "-o", "Compression=yes",
                        "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", *port,
                        *extra, *options, "--", target, f"{remote} serve --stdio"]
        self._ids = itertools.count(1)
        self._pending: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()  # the pending answers and the end
        self._write_lock = threading.Lock()  # one request line at a time on ssh's stdin
        self._frames: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=MAX_FRAMES)
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._hello: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        self._ended: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.address.url

    # -- connection -------------------------------------------------------------
    def open(self) -> dict[str, Any]:
        """Start ssh and read the server's hello; RemoteError on failure."""
        try:
            self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True)
        except OSError as exc:
            raise RemoteUnavailable(f"cannot run ssh: {exc.strerror or exc}") from None
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True,
                                               name="ssh-stderr")
        self._stderr_thread.start()
        threading.Thread(target=self._read, daemon=True, name="ssh-reader").start()
        try:
            hello = self._hello.get(timeout=self.timeout_s)
        except queue.Empty:
            self.close()
            raise RemoteUnavailable(f"{self.url}: no answer within {self.timeout_s:g} s"
                                    + self._why()) from None
        if hello.get("type") == "ended":
            raise RemoteUnavailable(f"{self.url}: {hello.get('why')}")
        try:
            check_wire(hello, self.url)
        except RemoteError:
            self.close()
            raise
        result: dict[str, Any] = hello.get("result") or {}
        return result

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- calls ------------------------------------------------------------------
    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> Any:
        ident = next(self._ids)
        box: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        with self._lock:
            if self._ended is not None:
                raise RemoteUnavailable(f"{self.url}: {self._ended}")
            self._pending[ident] = box
        try:
            self._send({"wire": WIRE_VERSION, "id": ident, "method": method,
                        "params": params or {}})
            try:
                answer = box.get(timeout=timeout_s or self.timeout_s)
            except queue.Empty:
                raise RemoteUnavailable(f"{self.url}: no answer to {method} within "
                                        f"{timeout_s or self.timeout_s:g} s") from None
        finally:
            with self._lock:
                self._pending.pop(ident, None)
        if answer.get("type") == "ended":
            raise RemoteUnavailable(f"{self.url}: {answer.get('why')}")
        if "error" in answer:
            raise RemoteError(f"{self.url}: {answer['error']}", str(answer.get("code")))
        check_wire(answer, self.url)
        return answer.get("result")

    def frames(self) -> Iterator[dict[str, Any]]:
        """The stream's frames.  Frames a slow reader could not take were
        dropped: the server is asked for a whole snapshot, and patches are
        skipped until it comes, so none lands on the wrong base."""
        self.call("subscribe")
        lost = False
        while True:
            try:
                frame = self._frames.get(timeout=KEEPALIVE_S * 2 + self.timeout_s)
            except queue.Empty:
                raise RemoteUnavailable(f"{self.url} stopped answering") from None
            if frame is None:
                raise RemoteUnavailable(f"{self.url}: {self._ended}")
            if frame is _GAP:
                lost = True
                self.call("subscribe")
                continue
            if lost and frame.get("type") != "full":
                continue
            lost = False
            yield frame

    def _offer_frame(self, frame: dict[str, Any]) -> None:
        """Queue a frame without ever blocking the reader (answers to calls
        come through it too); when full, drop what is queued for a gap mark."""
        try:
            self._frames.put_nowait(frame)
        except queue.Full:
            while True:
                try:
                    self._frames.get_nowait()
                except queue.Empty:
                    break
            self._frames.put_nowait(_GAP)

    # -- threads ----------------------------------------------------------------
    def _send(self, data: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RemoteUnavailable(f"{self.url}: not connected")
        try:
            with self._write_lock:
                proc.stdin.write(json.dumps(data).encode() + b"\n")
                proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise RemoteUnavailable(f"{self.url}: the connection ended" + self._why()) from None

    def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for raw in proc.stdout:
            try:
                message = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue  # not ours (a login script's echo): the protocol lines are JSON
            if not isinstance(message, dict):
                continue
            if message.get("type") == "hello":
                self._offer(self._hello, message)
            elif message.get("id") is not None:
                with self._lock:
                    box = self._pending.get(message["id"])
                if box is not None:
                    self._offer(box, message)
            elif message.get("type") in ("full", "delta", "ping"):
                self._offer_frame(message)
        proc.wait()
        self._stderr_thread.join(timeout=1.0)
        why = f"the connection ended (ssh exit status {proc.returncode})" + self._why()
        if proc.returncode == 127:  # the remote shell found no such command
            why += (" (is VRAM Steward installed there? name its command with "
                    f"--remote-command or ${REMOTE_COMMAND_ENV})")
        with self._lock:
            self._ended = why
            boxes = list(self._pending.values())
        for box in [self._hello, *boxes]:
            self._offer(box, {"type": "ended", "why": why})
        try:
            self._frames.put_nowait(None)
        except queue.Full:
            pass

    def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        for raw in proc.stderr:
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def _why(self) -> str:
        lines = [s for s in self._stderr if s and "Warning: Permanently added" not in s]
        return f": {lines[-1]}" if lines else ""

    @staticmethod
    def _offer(box: queue.Queue[dict[str, Any]], message: dict[str, Any]) -> None:
        try:
            box.put_nowait(message)
        except queue.Full:
            pass
