"""The JSON lines written as text directly (kproto.capture.json_text, exchange_to_json_text)
are the reference's ``json.dumps(exchange_to_json(ex), ensure_ascii=False)``, byte for byte:
on every exchange of the real captures, and on random message objects of every message
version (as built and after a round trip through the decoder), with topic ids named."""
from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_support import ALL, CAPTURES
from kproto import codecs
from kproto.capture import BodyDecoder, CaptureDecoder, read_packets
from kproto.capture import json_text
from kproto.capture.exchange import (_body_json, _request_body, _response_body,
                                     body_json_text, exchange_to_json, exchange_to_json_text)
from kproto.codecs.objects import MessageObject
from kproto.codecs.primitives import Uuid

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "protocol"))
from protocol_support import all_message_versions, objects  # noqa: E402

EXTERNAL = CAPTURES.parent / "external" / "captures"


def _capture_files() -> list:
    return [CAPTURES / n for n in ALL] + sorted(p for p in EXTERNAL.rglob("*.pcap*"))


def _reference(ex) -> str:
    return json.dumps(exchange_to_json(ex), ensure_ascii=False)


def test_real_captures_lines_are_the_reference():
    files = _capture_files()
    assert len(files) > 20  # both capture folders
    fast = lines = 0
    for path in files:
        for ex in CaptureDecoder(decode=BodyDecoder()).feed_all(read_packets(path)):
            assert exchange_to_json_text(ex) == _reference(ex), (path.name, ex)
            assert exchange_to_json_text(ex, "\n") == _reference(ex) + "\n"  # the CLI's line
            lines += 1
            for side, body in (("request", _request_body), ("response", _response_body)):
                if getattr(ex, side) is not None:
                    codec, obj, version = body(ex)
                    fast += json_text._compiled(codec, version) is not None
    assert lines > 1000
    assert fast > 2 * lines * 0.9  # nearly every body went through the generated writers


def _uuids(obj, out: set) -> set:
    for name in obj._fields:
        v = getattr(obj, name)
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, MessageObject):
                _uuids(x, out)
            elif isinstance(x, Uuid):
                out.add(str(x))
    return out


_VERSIONS = list(all_message_versions())


def _has_topic_ids(name: str, version: int) -> bool:
    plans, seen = [codecs.message(name).json_plan(version)], set()
    while plans:
        plan = plans.pop()
        if id(plan) not in seen:
            seen.add(id(plan))
            if any(f.json_key == "topicId" for f, _t, _d, _s in plan.entries):
                return True
            plans += [sub for _f, _t, _d, sub in plan.entries if sub is not None]
    return False


# half the examples: messages with topic ids, where topicName is added (or not)
_WITH_IDS = [nv for nv in _VERSIONS if _has_topic_ids(*nv)]


@st.composite
def _bodies(draw):
    name, version = draw(st.sampled_from(_VERSIONS) | st.sampled_from(_WITH_IDS))
    codec = codecs.message(name)
    obj = draw(objects(codec, version, max_list=2))
    if draw(st.booleans()):  # as the C decoder leaves it (lazy default structs)
        obj = codec.decode(codec.encode(obj, version), version)
    ids = sorted(_uuids(obj, set()))
    named = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    names = {tid: draw(st.text(max_size=8)) for tid in named}
    return codec, obj, version, names


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_bodies())
def test_random_bodies_are_the_reference(body):
    codec, obj, version, names = body
    want = json.dumps(_body_json(codec, obj, version, None, names), ensure_ascii=False)
    fn = json_text._compiled(codec, version)
    if fn is not None:  # the generated writer itself, not a fallback
        out: list[str] = []
        fn(obj, names, out)
        assert "".join(out) == want
    assert json_text.body_text(codec, obj, version, names, lambda: want) == want


def test_topic_named_only_where_the_struct_has_no_name():
    codec = codecs.message("MetadataResponse")
    ids = [Uuid(bytes([i]) * 16) for i in (1, 2, 3)]
    topic = codec.cls.MetadataResponseTopic
    obj = codec.cls(topics=[topic(name="orders", topic_id=ids[0]), topic(name=None, topic_id=ids[1]),
                            topic(name="", topic_id=ids[2])])
    names = {str(ids[0]): "x", str(ids[1]): "payments", str(ids[2]): "y"}
    text = json_text.body_text(codec, obj, 12, names, lambda: "reference")
    assert text == json.dumps(_body_json(codec, obj, 12, None, names), ensure_ascii=False)
    assert '"topicName": "x"' not in text  # the struct names its topic
    assert f'"topicId": "{ids[1]}", "topicName": "payments"' in text
    assert f'"topicId": "{ids[2]}", "topicName": "y"' in text  # an empty name names nothing


def test_odd_values_go_to_the_reference():
    codec = codecs.message("ProduceRequest")
    obj = codec.cls(acks=True, timeout_ms=None, transactional_id=None,
                    topic_data=[codec.cls.TopicProduceData(name="t", partition_data=[])])
    ref = lambda: json.dumps(codec.to_json(obj, 3), ensure_ascii=False)  # noqa: E731
    # a bool in an int field is written as the reference writes int(True); None as null
    assert json_text.body_text(codec, obj, 3, {}, ref) == ref()
    assert '"acks": 1' in ref() and '"timeoutMs": null' in ref()
    obj.topic_data = [object()]  # not a struct: the reference raises, so does the text path
    with pytest.raises(AttributeError):
        json_text.body_text(codec, obj, 3, {}, ref)


def test_redacted_sasl_token_and_missing_bodies():
    codec = codecs.message("SaslAuthenticateRequest")
    from kproto.capture.exchange import Endpoint, Exchange

    ex = Exchange(Endpoint(b"\x7f\0\0\1", 1), Endpoint(b"\x7f\0\0\1", 9092), api_key=36,
                  api_version=2, request=codec.cls(auth_bytes=b"secret"),
                  sasl={"mechanism": "PLAIN"})
    assert exchange_to_json_text(ex) == _reference(ex)
    assert "<redacted>" in exchange_to_json_text(ex) and "c2VjcmV0" not in exchange_to_json_text(ex)
    assert body_json_text(ex, "response") == "null"


def _iso_reference(ts):
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, ValueError, OSError):
        return f"{ts}s"


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(), st.floats(0, 2e9), st.floats(253402300790.0, 253402300801.0),
                 st.integers(-2**70, 2**70),
                 # halves of a microsecond: rounded to even, carried into the next second
                 st.builds(lambda s, us: s + us / 2e6, st.integers(0, 2**33), st.integers(0, 2000001))))
def test_line_times_are_datetimes_text(ts):
    from kproto.capture.exchange import _iso

    assert _iso(ts) == _iso_reference(ts)


def test_line_heads_and_tails_of_any_content_are_the_reference():
    from kproto.capture.exchange import Endpoint, Exchange
    from kproto.problems import Problem
    from kproto.schemas.api_keys import ApiKey

    ex = Exchange(Endpoint(b"\x7f\0\0\1", 1), Endpoint(b"\0" * 15 + b"\1", 9092),
                  api_key=ApiKey.METADATA, api_version=12, correlation_id=7, client_id='c"\u00e9\n',
                  ts=1, request_end=1.5, response_end=1.5000004, request_bytes=10)
    assert exchange_to_json_text(ex) == _reference(ex)
    assert '"api_key": 3,' in _reference(ex) and '"ts": "1970-01-01T00:00:01.000000Z"' in _reference(ex)
    ex.ts = float("nan")
    ex.errors.append("UNKNOWN_TOPIC_OR_PARTITION")
    assert exchange_to_json_text(ex) == _reference(ex)
    ex.errors.clear()
    for change in (lambda: ex.problems.add(Problem("gap", "lost")),
                   lambda: ex.notes.add(Problem("topic", "unnamed")),
                   lambda: ex.unread.update(request=(3, 4, b"\1\2")),
                   lambda: setattr(ex, "fetch_session", {"id": 1}),
                   lambda: setattr(ex, "sasl", {"mechanism": "PLAIN"})):
        change()
        assert exchange_to_json_text(ex) == _reference(ex)


def test_line_bodies_the_writers_refuse_are_the_reference():
    """A line whose bodies hold values a writer refuses (a bool in an int field, a str
    subclass) is the reference's, as is one whose response has its own version; a body the
    reference cannot write raises as it does."""
    from kproto.capture.exchange import Endpoint, Exchange

    class Name(str):
        pass

    req, resp = codecs.message("ProduceRequest"), codecs.message("ApiVersionsResponse")
    ex = Exchange(Endpoint(b"\x7f\0\0\1", 1), Endpoint(b"\x7f\0\0\1", 9092), api_key=0,
                  api_version=3, ts=1.0,
                  request=req.cls(acks=True, timeout_ms=5, transactional_id=Name("tx"),
                                  topic_data=[req.cls.TopicProduceData(name="t", partition_data=[])]),
                  response=resp.cls(error_code=True))
    ex.api_key, ex.response_version = 18, 0  # (an ApiVersions answered with a v0 body)
    ex.request = codecs.message("ApiVersionsRequest").cls(client_software_name=Name("x"))
    for response_version in (0, None):
        ex.response_version = response_version
        assert exchange_to_json_text(ex) == _reference(ex)
        assert exchange_to_json_text(ex, "\n") == _reference(ex) + "\n"
    ex.api_key, ex.api_version = 0, 3
    ex.request, ex.response = req.cls(acks=1, timeout_ms=5, topic_data=[object()]), None
    with pytest.raises(AttributeError):
        _reference(ex)
    with pytest.raises(AttributeError):
        exchange_to_json_text(ex)
