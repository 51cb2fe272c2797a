"""The C body writer (``kproto.capture._jsontext``, chosen by
:func:`kproto.capture.json_text._compiled`) writes what the generated Python writers write,
byte for byte, and refuses what they refuse (the caller then takes the reference path): on
every body of the shared captures, on random message objects of every message version with
topic ids named, and on objects with values of the wrong type put anywhere."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto import codecs
from kproto.capture import BodyDecoder, CaptureDecoder, json_text, read_packets
from kproto.capture.exchange import _body_json, _request_body, _response_body
from kproto.codecs.objects import MessageObject
from test_capture_json_text import _bodies, _capture_files

needs_c = pytest.mark.skipif(json_text._jsontext is None,
                             reason="the C writer is not built (KPROTO_PURE)")


def _write(codec, obj, version: int, names, accelerated: bool, monkeypatch) -> tuple:
    """("ok", text) or ("raises", exception type) of one writer."""
    monkeypatch.setattr(json_text, "accelerated", accelerated)
    fn = json_text._compiled(codec, version)
    assert fn is not None
    assert isinstance(fn, json_text._jsontext.Writer) == accelerated
    out: list[str] = []
    try:
        fn(obj, names, out)
    except Exception:  # noqa: BLE001 - which one does not matter: the reference follows
        return ("raises",)
    return ("ok", "".join(out))


def test_c_writer_is_built_and_used():
    from kproto import accelerators
    from kproto import codecs

    assert accelerators.PURE is False and json_text._jsontext is not None
    assert isinstance(json_text._compiled(codecs.message("FetchResponse"), 12),
                      json_text._jsontext.Writer)


@needs_c
def test_real_capture_bodies_alike(monkeypatch):
    n = 0
    for path in _capture_files():
        for ex in CaptureDecoder(decode=BodyDecoder()).feed_all(read_packets(path)):
            for side, body in (("request", _request_body), ("response", _response_body)):
                if getattr(ex, side) is None:
                    continue
                codec, obj, version = body(ex)
                if json_text._Generator(codec.json_plan(version)).function() is None:
                    continue
                c = _write(codec, obj, version, ex.topic_names, True, monkeypatch)
                assert c[0] == "ok"
                assert c == _write(codec, obj, version, ex.topic_names, False, monkeypatch)
                n += 1
    assert n > 2000


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_bodies())
def test_random_bodies_alike(monkeypatch, body):
    codec, obj, version, names = body
    if json_text._Generator(codec.json_plan(version)).function() is None:
        return
    c = _write(codec, obj, version, names, True, monkeypatch)
    assert c == _write(codec, obj, version, names, False, monkeypatch)
    assert c == ("ok", json.dumps(_body_json(codec, obj, version, None, names),
                                  ensure_ascii=False))


_ODD = [None, True, False, 0, -1, 2**70, -2**63, 2**63 - 1, -2**63 - 1, 2**64, 1.5, math.nan, -math.inf, "t\u00e9\n\"x\x01",
        "\ud800", b"\x00\xff", bytearray(b"ab"), memoryview(b"abc"), [], [None], [1, "a"],
        object(), {"a": 1}]


def _structs(obj, out: list) -> list:
    out.append(obj)
    for name in obj._fields:
        v = getattr(obj, name)
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, MessageObject):
                _structs(x, out)
    return out


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_bodies(), st.data())
def test_odd_values_alike(monkeypatch, body, data):
    """Values of any type in any field (None, bools in int fields, NaN, strings with escapes
    and lone surrogates, buffers, lists, other objects): the same text or a refusal."""
    codec, obj, version, names = body
    if json_text._Generator(codec.json_plan(version)).function() is None:
        return
    structs = _structs(obj, [])
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(structs))
        if target._fields:
            setattr(target, data.draw(st.sampled_from(list(target._fields))),
                    data.draw(st.sampled_from(_ODD)))
    assert (_write(codec, obj, version, names, True, monkeypatch)
            == _write(codec, obj, version, names, False, monkeypatch))


class _Str(str):
    """A str subclass: refused by both writers (the reference path writes it)."""


_STRINGS = ["", "orders", "a b~\x7f", "q\"uote", "back\\slash", "t\u00e9", "\ud800", "emoji \U0001f600",
            _Str("sub"), *(f"c{chr(c)}c" for c in range(0x20))]


@needs_c
@pytest.mark.parametrize("text", _STRINGS, ids=range(len(_STRINGS)))
def test_strings_and_topic_names_alike(monkeypatch, text):
    """Strings the C writer copies itself (ASCII, nothing to escape) and those it leaves to the
    encoder's escaping (quotes, backslashes, control characters, any other character): the
    same text as the Python writer and json.dumps, in a string field and as a topicName."""
    from kproto.codecs.primitives import Uuid

    codec = codecs.message("MetadataResponse")
    tid = Uuid(bytes(range(16)))
    topic = codec.cls.MetadataResponseTopic
    obj = codec.cls(topics=[topic(name=text, topic_id=tid), topic(name=None, topic_id=tid)])
    names = {str(tid): text}
    c = _write(codec, obj, 12, names, True, monkeypatch)
    assert c == _write(codec, obj, 12, names, False, monkeypatch)
    if text.__class__ is str:
        assert c == ("ok", json.dumps(_body_json(codec, obj, 12, None, names), ensure_ascii=False))


_BYTES = [b"", b"\x00", b"\xff\xfe", b"abc", bytes(range(256)), bytes(range(255, -1, -1)) * 3 + b"x",
          bytes(4099), b"\xfb\xef\xbe" * 1000]


@needs_c
@pytest.mark.parametrize("data", _BYTES, ids=range(len(_BYTES)))
def test_bytes_in_base64_alike(monkeypatch, data):
    """Bytes of every length modulo 3 and every byte value: base64 as the Python writer and
    json.dumps write it (the C writer encodes 12 bits per table lookup)."""
    codec = codecs.message("SaslAuthenticateRequest")
    for value in (data, bytearray(data), memoryview(data)):
        obj = codec.cls(auth_bytes=value)
        c = _write(codec, obj, 2, {}, True, monkeypatch)
        assert c == _write(codec, obj, 2, {}, False, monkeypatch)
    want = json.dumps(_body_json(codec, codec.cls(auth_bytes=data), 2, None, {}), ensure_ascii=False)
    assert _write(codec, codec.cls(auth_bytes=data), 2, {}, True, monkeypatch) == ("ok", want)


@needs_c
def test_c_head_is_the_python_head_on_real_captures():
    """The head of every line of the shared captures (connections interleaved, timestamps of
    every second): the C head writes it, and writes what the Python head writes."""
    from kproto.capture import exchange as X

    n = 0
    for path in _capture_files():
        for ex in CaptureDecoder(decode=BodyDecoder()).feed_all(read_packets(path)):
            want = X._head_text(ex)  # (which names the API key for the C head too)
            assert X._c_head(ex) == want, (path.name, ex)
            n += 1
    assert n > 1000


_INTS = [None, 0, 3, -1, 2**31 - 1, 2**70, -2**70, True, 1.0, "3"]
_HEAD_VALUES = {
    "ts": [None, 0.0, -0.0, 1.5, 0.9999995, 0.0000005, 1e9 + 0.4999995, 1700000000.0000025,
           253402300798.9999999, 253402300799.0, -1.0, math.nan, math.inf, 5, True],
    "kind": ["kafka", "stream", "sasl", "x\"y", "\u00e9", None],
    "api_key": [None, 0, 18, 999, -1, 2**70, "0", True],
    "api_version": _INTS, "decoded_as": _INTS, "correlation_id": _INTS,
    "client_id": [None, "", "c-1", "c\"1", "\u00e9", "\x01", 5],
    "request_end": [None, 1.0, 2, 1e300, math.nan, math.inf, 1700000000.0000025],
    "response_end": [None, 1.0015, 3, -1e300, math.inf, 1700000000.1234567],
    "request_bytes": [0, 1, None, -5, 2**70, 1.5, True, False],
    "response_bytes": [0, 77, None, 2**63, 0.0],
}


def _py_head(ex) -> tuple:
    from kproto.capture import exchange as X

    try:
        return ("ok", X._head_text(ex))
    except Exception as exc:  # noqa: BLE001 - the C head must then leave it to Python
        return ("raises", type(exc))


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_c_head_is_the_python_head_or_leaves_it(data):
    """Any value in any field of the head, on connections that change or not: the C head
    writes what the Python head writes, or leaves the line to it (None) for values it does
    not write (a timestamp out of its range or not a float, non-finite latencies, odd types)."""
    from kproto.capture import exchange as X
    from kproto.capture.exchange import Endpoint, Exchange

    ends = [Endpoint(b"\x7f\x00\x00\x01", 9092), Endpoint(b"\x0a\x00\x00\x02", 40000),
            Endpoint(bytes(15) + b"\x01", 9093)]
    for _ in range(data.draw(st.integers(1, 4))):
        ex = Exchange(data.draw(st.sampled_from(ends)), data.draw(st.sampled_from(ends)))
        for name, values in _HEAD_VALUES.items():
            setattr(ex, name, data.draw(st.sampled_from(values), label=name))
        want = _py_head(ex)
        got = X._c_head(ex)
        if got is not None:
            assert ("ok", got) == want
        usual = (ex.ts is None or ex.ts.__class__ is float and 0.0 <= ex.ts < 253402300799.0) and all(
            getattr(ex, f) is None or getattr(ex, f).__class__ is int
            for f in ("api_version", "decoded_as", "correlation_id", "request_bytes",
                      "response_bytes")) and ex.kind.__class__ is str and (
            ex.client_id is None or ex.client_id.__class__ is str) and (
            ex.request_end is None or ex.response_end is None
            or ex.request_end.__class__ is float and ex.response_end.__class__ is float
            and math.isfinite(ex.response_end - ex.request_end)) and (
            ex.api_key in X._KEY_TEXT and ex.api_key.__class__ in (int, type(None)))
        if usual:
            assert got is not None, ex
