"""Arrays of structs decoded by the C decoder from a read-only buffer: checked whole when the
message is decoded, built on the field's first read (or by the encoder). What users see is what the
generated Python decoders (KPROTO_PURE's) make: equal lists, at any depth, on every vector; a
damaged element fails the decode, never a later read; encoding, copies, pickles and mutation
behave as for a message built whole."""
from __future__ import annotations

import copy
import gc
import pickle
import random

import pytest

import kproto
from kproto.codecs import MessageObject, Uuid
from kproto.codecs import program as _program
from kproto.codecs.program import pending_fields
from protocol_support import VECTOR_SETS, codec_for, good_vectors

_decoder = _program._decoder
pytestmark = pytest.mark.skipif(_decoder is None, reason="the C decoder is not built (KPROTO_PURE)")

GOOD = [(k, v) for k in sorted(VECTOR_SETS) for v in good_vectors(k)]
MD = kproto.response(3)
FETCH = kproto.response(1)


def _struct_arrays(obj) -> set:
    """The fields of obj holding a non-empty list of message objects (read without building)."""
    out = set()
    for name in obj._fields:
        v = getattr(obj, name) if name not in pending_fields(obj) else None
        if isinstance(v, list) and v and isinstance(v[0], MessageObject):
            out.add(name)
    return out


def _check_built_on_read(c, py, decoded: bool = True) -> int:
    """c (pending arrays) against py (the Python decoder's object), depth first: exactly the
    non-empty arrays of structs of objects the decode made (not those built with an array) are
    pending, each builds a list equal to py's; the count of pending arrays seen."""
    values = [(name, getattr(py, name)) for name in py._fields]
    want = {n for n, v in values if isinstance(v, list) and v and isinstance(v[0], MessageObject)}
    if not decoded:
        want = set()   # built with the array that holds it: its own arrays were built with it
    got = pending_fields(c)
    assert set(got) == want, (type(c).__qualname__, got, want)
    seen = len(want)
    for name, pv in values:
        cv = getattr(c, name)
        if isinstance(pv, MessageObject):
            seen += _check_built_on_read(cv, pv, decoded)
        elif isinstance(pv, list):
            assert type(cv) is list and len(cv) == len(pv) and getattr(c, name) is cv   # built once, kept
            for a, b in zip(cv, pv):
                if isinstance(b, MessageObject):
                    assert type(a) is type(b)
                    seen += _check_built_on_read(a, b, False)
                else:
                    assert a == b or a != a   # NaN
        else:
            assert cv == pv or cv != cv, name
    assert not want or pending_fields(c) == ()
    return seen


def _python_bytes(codec, obj, version: int) -> bytes:
    parts: list = []
    codec._get(version).encode(obj, parts.append)   # the generated Python encoder: the reference
    return b"".join(parts)


def test_every_vector_builds_its_pending_arrays_as_the_python_decoder_does():
    pending = 0
    for kafka, vec in GOOD:
        data = bytes.fromhex(vec["hex"])
        codec = codec_for(vec, kafka)
        compiled = codec._get(vec["version"])
        c, end = compiled.decode_c(data, 0)
        py, _ = compiled.decode_py(data, 0)
        assert end == len(data)
        pending += _check_built_on_read(c, py)
        assert c == py
    assert pending > 500   # the vectors have many arrays of structs


def test_a_never_read_message_encodes_as_the_python_encoder_writes_it():
    for kafka, vec in GOOD:
        data = bytes.fromhex(vec["hex"])
        codec = codec_for(vec, kafka)
        v = vec["version"]
        compiled = codec._get(v)
        want = _python_bytes(codec, compiled.decode_py(data, 0)[0], v)
        c = compiled.decode_c(data, 0)[0]
        had = pending_fields(c)
        assert compiled.encode_c(c) == want, (kafka, vec["name"], v)
        assert pending_fields(c) == ()   # built for the encoder, and kept
        c = compiled.decode_c(data, 0)[0]
        parts: list = []
        compiled.encode_parts_c(c, parts)
        assert b"".join(parts) == want and (had or not pending_fields(c))
        assert codec.encode(compiled.decode_c(data, 0)[0], v) == want


def _metadata(n_topics=30, n_parts=5, version=12, name=lambda t: f"topic-{t:03d}"):
    C = MD.cls
    topics = [C.MetadataResponseTopic(
        name=name(t), topic_id=Uuid(t.to_bytes(16, "big")), partitions=[
            C.MetadataResponsePartition(partition_index=p, leader_id=p % 3, leader_epoch=5, replica_nodes=[1, 2, 3],
                                        isr_nodes=[1, 2], offline_replicas=[]) for p in range(n_parts)])
        for t in range(n_topics)]
    brokers = [C.MetadataResponseBroker(node_id=i, host=f"b{i}", port=9092, rack=None) for i in range(3)]
    return MD.encode(C(brokers=brokers, cluster_id="c", controller_id=1, topics=topics), version)


def _outcome(codec, data, version):
    """("ok", object fully read) or ("fail", DecodeError text) through codec.decode."""
    try:
        obj = codec.decode(data, version)
    except kproto.DecodeError as exc:
        return ("fail", str(exc))
    return ("ok", obj)


def _python_outcome(codec, data, version):
    compiled = codec._get(version)
    try:
        obj, end = compiled.decode_py(data, 0)
    except Exception:
        return ("fail",)
    return ("ok", obj) if end == len(data) else ("fail",)


def test_a_damaged_element_deep_inside_fails_the_decode_with_the_same_error():
    data = _metadata()
    last = data.rindex(b"topic-029")
    cases = {
        "UTF-8": data[:last] + b"\xff" + data[last + 1:],                # a topic name, last element
        "surrogate": data[:last] + b"\xed\xa0\x80" + data[last + 3:],     # UTF-8 of a surrogate
        "truncated": data[:-7],                                          # inside the last partition
        # the last topic's partition count (after its name, id and is_internal): more than there are
        "count": data[:last + 26] + b"\x7f" + data[last + 27:],
    }
    for what, bad in cases.items():
        assert _python_outcome(MD, bad, 12)[0] == "fail", what
        with pytest.raises(ValueError):
            MD._get(12).decode_c(bad, 0)   # fails at decode: nothing is left pending to fail later
        with pytest.raises(kproto.DecodeError) as err:
            MD.decode(bad, 12)
        # the same explanation (message, field path, offset) as the checked Python decoder gives
        assert str(err.value) == str(MD._explain_decode(bad, 0, 12)), what
        assert "topics" in str(err.value), (what, str(err.value))


def test_mutated_large_messages_fail_at_decode_or_read_whole_as_python_does():
    rnd = random.Random(11)
    inputs = [(MD, _metadata(12, 4, v), v) for v in (1, 9, 12)]
    fetch = FETCH.encode(FETCH.cls(responses=[FETCH.cls.FetchableTopicResponse(topic=f"t{t}", partitions=[
        FETCH.cls.PartitionData(partition_index=p, high_watermark=p, records=bytes([p]) * 20,
                                aborted_transactions=[FETCH.cls.AbortedTransaction(producer_id=1, first_offset=2)])
        for p in range(4)]) for t in range(4)]), 12)
    inputs.append((FETCH, fetch, 12))
    ok = 0
    for _ in range(600):
        codec, data, version = rnd.choice(inputs)
        data = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(data))
            if rnd.random() < 0.8:
                data[i] = rnd.choice((0, 1, 0x7F, 0x80, 0xFF, rnd.randrange(256)))
            else:
                del data[i:i + rnd.randint(1, 8)]
        data = bytes(data)
        got, want = _outcome(codec, data, version), _python_outcome(codec, data, version)
        assert got[0] == want[0]
        if got[0] == "ok":
            ok += 1
            obj = got[1]
            obj.to_dict()   # every field read: building never fails after a decode that did not
            assert obj == want[1] or codec.encode(obj, version) == codec.encode(want[1], version)
    assert ok > 50


def test_strings_inside_pending_arrays_are_checked_as_python_decodes_utf8():
    rnd = random.Random(5)
    edge = [b"\xc2\x80", b"\xc1\xbf", b"\xe0\x9f\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xed\xa0\x80",
            b"\xef\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
            b"\xf5\x80\x80\x80", b"\xc2", b"\xe2\x82", b"\x80", b"\xff", "é€😀".encode()]
    width = 12
    data = _metadata(40, 1, name=lambda t: "n" * width)
    starts = [i for i in range(len(data)) if data.startswith(b"n" * width, i) and data[i - 1] != ord("n")]
    assert len(starts) == 40
    for _ in range(40):
        buf = bytearray(data)
        names = []
        for s in starts:
            raw = b"".join(rnd.choice(edge) if rnd.random() < 0.7 else bytes([rnd.randrange(256)])
                           for _ in range(6))
            raw = (raw + b"a" * width)[:width] if rnd.random() < 0.5 else (b"a" * width + raw)[-width:]
            buf[s:s + width] = raw
            names.append(raw)
        buf = bytes(buf)
        valid = all(_utf8(n) for n in names)
        try:
            obj = MD._get(12).decode_c(buf, 0)[0]
        except ValueError:
            assert not valid
        else:
            assert valid and [t.name.encode() for t in obj.topics] == names


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_copy_equality_repr_and_pickle_of_a_message_never_read():
    data = _metadata()
    py = _python_outcome(MD, data, 12)[1]
    one, two = MD.decode(data, 12), MD.decode(data, 12)
    assert pending_fields(one) == pending_fields(two) == ("brokers", "topics")
    assert one == two and pending_fields(one) == ()   # equality reads both
    three = MD.decode(data, 12)
    assert repr(three) == repr(py) and MD.decode(data, 12).to_dict() == py.to_dict()
    back = pickle.loads(pickle.dumps(MD.decode(data, 12)))
    assert back == py and pending_fields(back) == ()
    src = MD.decode(data, 12)
    shallow = copy.copy(src)
    assert shallow.topics is src.topics and shallow == py   # a shallow copy shares the built list
    src = MD.decode(data, 12)
    made = src.copy(controller_id=7)
    assert made.topics is src.topics and made.controller_id == 7 and made.brokers == py.brokers
    deep = copy.deepcopy(MD.decode(data, 12))
    assert deep == py and MD.encode(deep, 12) == data


def test_mutation_after_the_first_read_is_kept_and_encoded():
    data = _metadata(4, 2)
    C = MD.cls
    obj = MD.decode(data, 12)
    topics = obj.topics
    assert obj.topics is topics and pending_fields(topics[0]) == ()   # built with the topics
    topics[0].partitions[1].leader_id = 42
    topics.append(C.MetadataResponseTopic(name="new", topic_id=Uuid.ZERO))
    back = MD.decode(MD.encode(obj, 12), 12)
    assert [t.name for t in back.topics][-1] == "new" and back.topics[0].partitions[1].leader_id == 42
    assert back.topics[1].partitions == obj.topics[1].partitions
    # a field set before it was ever read replaces the pending array
    obj = MD.decode(data, 12)
    obj.topics = []
    assert obj.topics == [] and pending_fields(obj) == ("brokers",)
    assert MD.decode(MD.encode(obj, 12), 12).topics == []
    del obj.topics   # emptied: reads as its default again, as before
    assert obj.topics == []
    # an array whose default is null: pending when on the wire, None when null, and emptied it
    # reads as a plain slot does (AttributeError)
    codec = kproto.message("ListPartitionReassignmentsRequest")
    L = codec.cls
    obj = codec.decode(codec.encode(L(topics=[L.ListPartitionReassignmentsTopics(name="t", partition_indexes=[0])]),
                                    0), 0)
    assert pending_fields(obj) == ("topics",) and obj.topics[0].name == "t"
    assert codec.decode(codec.encode(L(topics=None), 0), 0).topics is None
    del obj.topics
    with pytest.raises(AttributeError):
        obj.topics


def test_a_writable_buffer_is_read_whole_and_a_read_only_one_is_kept():
    data = _metadata(3, 2)
    src = bytearray(data)
    obj = MD.decode(src, 12)
    assert pending_fields(obj) == ()   # bytes that may change are not left for later
    src[:] = bytes(len(src))
    assert obj == MD.decode(data, 12)
    view = memoryview(bytes(data))
    obj = MD.decode(view, 12)
    assert pending_fields(obj) == ("brokers", "topics")
    with pytest.raises(BufferError):
        view.release()   # the pending arrays hold the buffer, as records views do
    obj.to_dict()
    del obj
    gc.collect()
    view.release()   # all built: nothing holds it
    owned = bytes(data)
    obj = MD.decode(owned, 12)
    del owned   # kept alive by the pending arrays
    assert obj.topics[2].partitions[1].partition_index == 1 and MD.encode(obj, 12) == data


def test_decode_from_a_position_inside_a_frame():
    body = _metadata(5, 3)
    framed = b"\x00\x01\x02" + body + b"\xee"
    obj, end = MD.decode_from(framed, 3, 12)
    assert end == len(framed) - 1 and pending_fields(obj) == ("brokers", "topics")
    assert obj == MD.decode(body, 12) and MD.encode(obj, 12) == body


def test_the_field_descriptor_refuses_objects_of_other_classes():
    descr = MD.cls.__dict__["topics"]
    other = MD.cls.MetadataResponseTopic()
    for call in (lambda: descr.__get__(other), lambda: descr.__set__(other, []), lambda: descr.pending(other)):
        with pytest.raises(TypeError):
            call()   # its slot is read by offset: only where that offset is the field's
    assert descr.pending(MD.decode(_metadata(1, 1), 12)) is True


def test_lazy_false_builds_every_array_now_on_every_entry_point():
    """``lazy=False`` (what the broker, the client and the capture reader use: they read every
    field) builds at decode; the default leaves arrays pending; both give equal objects."""
    from kproto.framing import RequestHeader, decode_request, encode_request

    data = _metadata()
    lazy, eager = MD.decode(data, 12), MD.decode(data, 12, lazy=False)
    a, _ = MD.decode_from(data, 0, 12)
    b, _ = MD.decode_from(data, 0, 12, lazy=False)
    assert pending_fields(lazy) and pending_fields(a)
    assert not pending_fields(eager) and not pending_fields(b)
    assert lazy == eager == a == b == MD.decode(data, 12)
    P = kproto.request(0).cls
    req = P(acks=1, timeout_ms=10, topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.PartitionProduceData(index=0, records=b"")])])
    frame = encode_request(RequestHeader(request_api_key=0, request_api_version=9, correlation_id=7,
                                         client_id="c"), req)
    (_, lazy_body), (_, eager_body) = decode_request(frame), decode_request(frame, lazy=False)
    assert pending_fields(lazy_body) == ("topic_data",) and pending_fields(eager_body) == ()
    assert lazy_body == eager_body == req
    # the readers of every field build whole: the broker's requests, the capture reader's bodies
    from kproto.broker.core import parse_request
    from kproto.capture.bodies import decode_request_as

    assert pending_fields(parse_request(frame[4:], 0, 9)[1]) == ()
    assert pending_fields(decode_request_as(frame[4:], 0, 9, 9).body) == ()
