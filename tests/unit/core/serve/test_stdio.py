"""The server over a pipe, as SSH runs it: hello first, answers by id, frames."""

from __future__ import annotations

import json
import os
import threading

import pytest

from app.core.serve.access import CONTROL, READ, Caller, own_user
from app.core.serve.api import ServerApi
from app.core.serve.stdio import MAX_LINE_BYTES, StdioServer
from app.core.wire.delta import apply
from app.core.wire.snapshot import decode_snapshot


class Pipe:
    def __init__(self, engine) -> None:
        to_server, self._write = os.pipe()
        self._read, from_server = os.pipe()
        self.writer = os.fdopen(self._write, "wb", buffering=0)
        self.reader = os.fdopen(self._read, "rb")
        user, uid = own_user()
        self.server = StdioServer(ServerApi(engine), os.fdopen(to_server, "rb"),
                                  os.fdopen(from_server, "wb", buffering=0),
                                  Caller(user, uid, frozenset({READ, CONTROL}), "ssh"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def send(self, data) -> None:
        self.writer.write((data if isinstance(data, bytes) else json.dumps(data).encode())
                          + b"\n")

    def read(self) -> dict:
        return json.loads(self.reader.readline())

    def close(self) -> None:
        self.writer.close()
        self.thread.join(5)


@pytest.fixture
def pipe(demo_engine):
    p = Pipe(demo_engine)
    yield p
    p.close()


def answer(pipe, ident):
    while True:
        message = pipe.read()
        if message.get("id") == ident:
            return message


def test_hello_comes_first_with_the_callers_identity(pipe):
    hello = pipe.read()
    assert hello["wire"] == 1 and hello["type"] == "hello"
    assert hello["result"]["user"] == own_user()[0] and hello["result"]["via"] == "ssh"
    assert hello["result"]["scopes"] == ["control", "read"]


def test_requests_are_answered_by_id(pipe, demo_engine):
    pipe.read()
    pipe.send({"wire": 1, "id": 1, "method": "snapshot"})
    pipe.send({"wire": 1, "id": "b", "method": "free_cache", "params": {"pid": 18822}})
    got = {m["id"]: m for m in (pipe.read(), pipe.read())}
    assert decode_snapshot(got[1]["result"]).gpus
    assert got["b"]["result"]["ok"] is True


def test_bad_lines_get_clear_errors_and_the_server_goes_on(pipe):
    pipe.read()
    pipe.send(b"{nope")
    assert "not JSON" in pipe.read()["error"]
    pipe.send({"id": 2, "method": "snapshot", "wire": 9})
    reply = answer(pipe, 2)
    assert reply["code"] == "version" and "wire version 1" in reply["error"]
    pipe.send({"id": 3, "method": "unload", "params": {"pid": 1, "model": "m", "x": 1}})
    assert answer(pipe, 3)["code"] == "bad_request"
    pipe.send(b"[" * (MAX_LINE_BYTES + 10))
    assert pipe.read()["code"] == "too_large"
    pipe.send({"id": 4, "method": "hello"})
    assert answer(pipe, 4)["result"]["user"] == own_user()[0]


def test_subscribe_streams_frames_that_rebuild_the_snapshots(pipe):
    pipe.read()
    pipe.send({"wire": 1, "id": 1, "method": "subscribe"})
    assert answer(pipe, 1)["result"] == {"subscribed": True}
    encoded, kinds = None, []
    while len(kinds) < 5:
        frame = pipe.read()
        kinds.append(frame["type"])
        encoded = frame["snapshot"] if frame["type"] == "full" else \
            apply(encoded, frame.get("patch"))
    assert kinds[0] == "full" and "delta" in kinds
    assert decode_snapshot(encoded).gpus


def test_the_end_of_stdin_ends_the_server(pipe):
    pipe.read()
    pipe.writer.close()
    pipe.thread.join(5)
    assert pipe.server.closed.is_set()
