"""The C encoder against the generated Python encoders: the same bytes on every vector of both
vector sets and on random objects of every message and version, the same failures on broken
objects (whatever C declines, the Python encoder decides), and zero-copy parts."""
from __future__ import annotations

import random
from typing import Any, List, Tuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kproto
from kproto.codecs import MessageObject, Uuid
from protocol_support import VECTOR_SETS, all_message_versions, codec_for, good_vectors, objects

GOOD = [(k, v) for k in sorted(VECTOR_SETS) for v in good_vectors(k)]
PAIRS = sorted(all_message_versions())


def _c(codec, version: int, obj) -> Tuple[Any, ...]:
    """("ok", bytes) of the C encoder, both entry points agreeing, or ("fail",)."""
    compiled = codec._get(version)
    try:
        data = compiled.encode_c(obj)
    except Exception:
        data = None
    parts: List[Any] = [b"before"]
    try:
        compiled.encode_parts_c(obj, parts)
    except Exception:
        assert parts == [b"before"], "a failed encode_parts leaves the list as it was"
        assert data is None
        return ("fail",)
    assert parts[0] == b"before" and b"".join(parts[1:]) == data
    return ("ok", data)


def _py(codec, version: int, obj) -> Tuple[Any, ...]:
    """("ok", bytes) of the generated Python encoder (the reference), or ("fail", exception type)."""
    parts: List[Any] = []
    try:
        codec._encode_py(codec._get(version), obj, version, parts)
        return ("ok", b"".join(parts))
    except Exception as exc:
        return ("fail", type(exc), str(exc))


def _public(codec, version: int, obj) -> Tuple[Any, ...]:
    try:
        return ("ok", codec.encode(obj, version))
    except Exception as exc:
        return ("fail", type(exc), str(exc))


def _agree(codec, version: int, obj) -> None:
    """Whatever C writes the Python encoder writes too, and codec.encode answers as Python does."""
    c, py = _c(codec, version, obj), _py(codec, version, obj)
    if c[0] == "ok":
        assert py == c, (codec.name, version, obj)
    assert _public(codec, version, obj) == py


def test_c_encoder_is_built_and_used():
    codec = kproto.message("MetadataRequest")
    compiled = codec._get(12)
    assert compiled.encode_c is not None and compiled.encode_parts_c is not None
    saved = compiled.encode_c, compiled.encode_parts_c
    try:   # codec.encode and encode_parts go through the C program
        compiled.encode_c = lambda obj: b"from C"
        compiled.encode_parts_c = lambda obj, parts: parts.append(b"parts from C")
        assert codec.encode(codec.cls(), 12) == b"from C"
        out: List[Any] = []
        codec.encode_parts(codec.cls(), 12, out)
        assert out == [b"parts from C"]
    finally:
        compiled.encode_c, compiled.encode_parts_c = saved


def test_every_good_vector_encodes_the_same_in_c_and_python():
    assert {k for k, _ in GOOD} == set(VECTOR_SETS)
    for kafka, vec in GOOD:
        data = bytes.fromhex(vec["hex"])
        codec = codec_for(vec, kafka)
        version = vec["version"]
        obj, _ = codec._get(version).decode_py(data, 0)
        assert _c(codec, version, obj) == ("ok", data), (kafka, vec["name"], version, vec.get("case"))
        assert _py(codec, version, obj) == ("ok", data)
        # the C decoder's objects (default structs not yet made) encode the same
        lazy, _ = codec._get(version).decode_c(data, 0)
        assert _c(codec, version, lazy) == ("ok", data)
        assert _py(codec, version, lazy) == ("ok", data) and lazy == obj


@settings(max_examples=600, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(PAIRS), st.data())
def test_random_objects_encode_the_same(pair, data):
    name, version = pair
    codec = kproto.message(name)
    obj = data.draw(objects(codec, version))
    c = _c(codec, version, obj)
    assert c[0] == "ok" and _py(codec, version, obj) == c
    assert codec.decode(c[1], version) == obj


# values of the wrong kind, out of range, or merely unusual (a tuple for a list, a bytearray or a
# memoryview for bytes, a bool for an int): C must write them exactly as Python does or decline
_ODD = [None, -1, 0, 1, 2**7, 2**15, 2**31, 2**63, -(2**63) - 1, 1.5, float("nan"), True, "x", "\udc80",
        "é" * 20000, b"", b"ab", bytearray(b"xyz"), memoryview(b"0123456789abcdef"),
        memoryview(b"abcd").cast("H"), Uuid(bytes(range(16))), bytes(16), (), [], [1, 2], ("a",),
        [None], object()]


def _mutate(obj, rnd: random.Random, depth: int = 0) -> None:
    """Replace a few fields (at any depth) by odd values, shuffle unknown tagged fields."""
    fields = type(obj)._fields
    for attr in fields:
        value = getattr(obj, attr)
        if isinstance(value, MessageObject) and depth < 4:
            _mutate(value, rnd, depth + 1)
        elif isinstance(value, list) and value and isinstance(value[0], MessageObject):
            _mutate(rnd.choice(value), rnd, depth + 1)
        if rnd.random() < 0.15:
            setattr(obj, attr, rnd.choice(_ODD))
    unknown = obj._unknown_tagged_fields
    if unknown and rnd.random() < 0.5:
        rnd.shuffle(unknown)
    if rnd.random() < 0.1:
        obj._unknown_tagged_fields = rnd.choice(([(0, b"\x01")], [(5, b"")], [(1, bytearray(b"a"))], ((2, b""),)))


@settings(max_examples=1500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(PAIRS), st.data(), st.integers(0, 2**32 - 1))
def test_broken_objects_agree(pair, data, seed):
    name, version = pair
    codec = kproto.message(name)
    obj = data.draw(objects(codec, version))
    _mutate(obj, random.Random(seed))
    _agree(codec, version, obj)


def test_fields_absent_at_the_version_and_foreign_objects():
    codec = kproto.message("MetadataResponse")
    C = codec.cls
    # ClusterAuthorizedOperations exists in v8-10: a value elsewhere is refused by both, with
    # Kafka's message; an ignorable field (ClusterId before v2) is left out
    obj = C(cluster_authorized_operations=7)
    for version in (7, 11):
        assert _c(codec, version, obj) == ("fail",)
        out = _public(codec, version, obj)
        assert out[0] == "fail" and out[1] is kproto.UnsupportedVersionError
        assert "ClusterAuthorizedOperations" in out[2]
    assert _c(codec, 8, obj)[0] == "ok"
    assert _c(codec, 1, C(cluster_id="c")) == ("ok", codec.encode(C(), 1))
    # not the message's class: C declines, Python decides
    _agree(codec, 9, kproto.message("MetadataRequest").cls())
    # a user's subclass: C declines (slots are read only from the generated classes), Python writes it
    class Mine(C):
        pass

    mine = Mine(cluster_id="c", controller_id=4)
    assert _c(codec, 9, mine) == ("fail",)
    assert _public(codec, 9, mine) == ("ok", codec.encode(C(cluster_id="c", controller_id=4), 9))
    # a slot never set
    bare = object.__new__(C)
    assert _c(codec, 9, bare) == ("fail",) and _public(codec, 9, bare)[0] == "fail"


def test_tagged_fields_in_tag_order():
    codec = kproto.message("FetchRequest")
    R = codec.cls
    obj = R(cluster_id="c", replica_state=R.ReplicaState(replica_id=3, replica_epoch=4),
            _unknown_tagged_fields=[(9, b"\x09"), (2, b"\x02"), (0, b"\x00\x00")])
    # v15 has ClusterId (tag 0) and ReplicaState (tag 1): unknown tag 0 is written before the
    # known one, as the Python encoder's stable sort leaves them
    c = _c(codec, 15, obj)
    assert c[0] == "ok" and _py(codec, 15, obj) == c
    replica = b"\x00\x00\x00\x03" + (4).to_bytes(8, "big") + b"\x00"   # id, epoch, no tags
    assert c[1].endswith(b"\x05" + b"\x00\x02\x00\x00" + b"\x00\x02\x02c" + b"\x01\x0d" + replica
                         + b"\x02\x01\x02" + b"\x09\x01\x09")


def test_zero_copy_parts():
    codec = kproto.message("FetchResponse")
    R = codec.cls
    big, small = bytes(range(256)) * 8, b"tiny records"
    view = memoryview(bytearray(big))[1:]
    parts_of = [R.PartitionData(partition_index=i, records=r) for i, r in enumerate((big, small, view))]
    obj = R(responses=[R.FetchableTopicResponse(topic="t", partitions=parts_of)])
    parts: List[Any] = []
    codec.encode_parts(obj, 12, parts)
    assert b"".join(parts) == codec.encode(obj, 12) == _py(codec, 12, obj)[1]
    # the large values are parts as they are (no copy), the small one is copied into a part
    assert any(p is big for p in parts) and any(p is view for p in parts)
    assert not any(p is small for p in parts)
    assert all(isinstance(p, bytes) for p in parts if p is not view)


def test_default_structs_made_on_first_read():
    codec = kproto.message("FetchResponse")
    R = codec.cls
    obj = R(responses=[R.FetchableTopicResponse(topic="t", partitions=[R.PartitionData(partition_index=1)])])
    data = codec.encode(obj, 12)
    back, _ = codec._get(12).decode_c(data, 0)
    part = back.responses[0].partitions[0]
    assert type(R.PartitionData.__dict__["current_leader"]).__name__ == "LazyDefault"
    # encoded from the empty slots, read as the defaults (the same object on each read)
    assert codec.encode(back, 12) == data
    leader = part.current_leader
    assert leader == R.LeaderIdAndEpoch() and leader.leader_id == -1 and part.current_leader is leader
    assert back == obj
    leader.leader_id = 5   # a change to the default made on read is written
    changed = codec.encode(back, 12)
    assert changed != data and codec.decode(changed, 12).responses[0].partitions[0].current_leader.leader_id == 5
    assert _py(codec, 12, back) == ("ok", changed)


def test_an_emptied_struct_field_is_its_default():
    codec = kproto.message("FetchSnapshotRequest")
    R = codec.cls
    part = R.PartitionSnapshot(partition=3, snapshot_id=R.SnapshotId(end_offset=9, epoch=2))
    obj = R(topics=[R.TopicSnapshot(name="t", partitions=[part])])
    del part.snapshot_id   # a regular field at v0: an empty slot is written as the default struct
    c = _c(codec, 0, obj)   # (before Python reads the field, which makes the default)
    assert c[0] == "ok" and c == _py(codec, 0, obj)
    assert part.snapshot_id == R.SnapshotId()


def test_message_objects_freed_by_their_slots():
    import gc
    import sys
    import weakref

    from kproto.codecs import program

    R = kproto.message("FetchResponse").cls

    class Held:   # a value whose freeing we can see
        pass

    class Sub(R.PartitionData):   # a user's subclass keeps CPython's dealloc, then ours
        __slots__ = ("extra", "__weakref__", "__dict__")

    for cls in (R.PartitionData, Sub):
        before = sys.getrefcount(cls)
        held = Held()
        gone = weakref.ref(held)
        obj = cls(partition_index=1, records=held)
        if cls is Sub:
            obj.extra, obj.other = Held(), Held()
            extra, other, me = weakref.ref(obj.extra), weakref.ref(obj.other), weakref.ref(obj)
        del held, obj
        assert gone() is None and sys.getrefcount(cls) == before
        if cls is Sub:
            assert extra() is None and other() is None and me() is None
    gc.collect()
    # a class with more than object slots is refused
    with_dict = type("WithDict", (R.PartitionData,), {})
    try:
        program._decoder.set_fast_dealloc(with_dict)
    except TypeError:
        pass
    else:
        raise AssertionError("a class with a __dict__ must keep CPython's dealloc")


def test_framed_zero_copy_send():
    from kproto.framing import (RequestHeader, ResponseHeader, decode_request, encode_request,
                                encode_request_parts, encode_response, encode_response_parts)

    R = kproto.response(1).cls
    records = bytes(4096)
    body = R(responses=[R.FetchableTopicResponse(topic="t", partitions=[R.PartitionData(records=records)])])
    parts = encode_response_parts(ResponseHeader(correlation_id=7), body, 1, 12)
    frame = encode_response(ResponseHeader(correlation_id=7), body, 1, 12)
    assert b"".join(parts) == frame and any(p is records for p in parts)
    assert int.from_bytes(parts[0], "big") == len(frame) - 4 and len(parts[0]) == 4
    P = kproto.request(0).cls
    batch = bytes(2000)
    req = P(acks=-1, timeout_ms=1, topic_data=[P.TopicProduceData(name="t", partition_data=[
        P.PartitionProduceData(index=0, records=batch)])])
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1, client_id="c")
    parts = encode_request_parts(header, req)
    assert b"".join(parts) == encode_request(header, req) and any(p is batch for p in parts)
    assert decode_request(b"".join(parts))[1] == req
