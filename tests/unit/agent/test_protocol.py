from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.agent import protocol
from app.agent.protocol import FrameDecoder, ProtocolError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)
objects = st.dictionaries(st.text(max_size=10), json_values, max_size=6)


def test_round_trip_simple():
    msg = protocol.request(7, "report", {"models": False})
    frames = list(FrameDecoder().feed(protocol.encode(msg)))
    assert frames == [msg]


def test_byte_by_byte_and_several_frames():
    msgs = [protocol.request(i, "ping") for i in range(5)] + [protocol.event("oom", {"x": "é"})]
    data = b"".join(protocol.encode(m) for m in msgs)
    dec = FrameDecoder()
    out = []
    for i in range(len(data)):
        out.extend(dec.feed(data[i:i + 1]))
    assert out == msgs and dec.pending == 0


def test_feed_without_iterating_keeps_bytes():
    dec = FrameDecoder()
    data = protocol.encode({"a": 1})
    dec.feed(data[:3])  # not iterated: the bytes must still be buffered
    assert dec.pending == 3
    assert list(dec.feed(data[3:])) == [{"a": 1}]


def test_oversize_and_zero_length_rejected():
    with pytest.raises(ProtocolError):
        list(FrameDecoder().feed(struct.pack(">I", protocol.MAX_FRAME_BYTES + 1)))
    with pytest.raises(ProtocolError):
        list(FrameDecoder().feed(struct.pack(">I", 0)))
    with pytest.raises(ProtocolError):
        protocol.encode({"x": "a" * (protocol.MAX_FRAME_BYTES + 1)})


@pytest.mark.parametrize("body", [b"\xff\xfe{}", b"[1,2]", b"42", b'"s"', b"{",
                                  b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}',
                                  b"[" * 100000 + b"]" * 100000])
def test_bad_bodies(body):
    with pytest.raises(ProtocolError):
        list(FrameDecoder().feed(struct.pack(">I", len(body)) + body))


def test_encode_rejects_nan_and_escapes_surrogates():
    with pytest.raises(ValueError):
        protocol.encode({"x": float("nan")})
    frame = protocol.encode({"argv": ["caf\udce9"]})
    assert list(FrameDecoder().feed(frame)) == [{"argv": ["caf\udce9"]}]


def test_parse_request():
    assert protocol.parse_request({"id": 1, "method": "ping"}) == (1, "ping", {})
    assert protocol.parse_request({"id": "a", "method": "x", "params": None}) == ("a", "x", {})
    for bad in ({"id": True, "method": "ping"}, {"id": 1.5, "method": "ping"},
                {"id": "x" * 65, "method": "ping"}, {"id": 1}, {"id": 1, "method": 3},
                {"id": 1, "method": "ping", "params": []}):
        with pytest.raises(ProtocolError):
            protocol.parse_request(bad)


def test_auth_hmac_known_value():
    import hashlib
    import hmac
    assert protocol.auth_hmac("ab", "00ff") == hmac.new(b"ab", b"\x00\xff", hashlib.sha256).hexdigest()


@settings(max_examples=200, deadline=None)
@given(st.lists(objects, min_size=1, max_size=5), st.lists(st.integers(1, 50), max_size=20))
def test_round_trip_property(msgs, cuts):
    data = b"".join(protocol.encode(m) for m in msgs)
    dec = FrameDecoder()
    out, pos = [], 0
    for cut in cuts:
        out.extend(dec.feed(data[pos:pos + cut]))
        pos += cut
    out.extend(dec.feed(data[pos:]))
    assert out == [json.loads(json.dumps(m)) for m in msgs]
    assert dec.pending == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_unexpectedly(data):
    dec = FrameDecoder(max_frame=1000)
    try:
        for msg in dec.feed(data):
            assert isinstance(msg, dict)
    except ProtocolError:
        pass
