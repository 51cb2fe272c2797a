"""FetchRequest/FetchResponse layout of the session pieces (Kafka's FetchRequest.Builder and
FetchResponse.toMessage rules), through kproto's codec."""
from __future__ import annotations


import pytest

import kproto
from kproto.codecs.primitives import Uuid
from kproto.fetch_session import (
    FetchContextResponse,
    FetchMetadata,
    FetchSessionHandler,
    PartitionData,
    TopicIdPartition,
    TopicPartition,
)
from kproto.fetch_session.messages import (
    build_fetch_request,
    build_fetch_response,
    request_fetch_data,
    request_metadata,
    request_replica_id,
)

A, B = Uuid(bytes([1] * 16)), Uuid(bytes([2] * 16))
A2 = Uuid(bytes([3] * 16))  # topic "a" recreated


def _built_incremental():
    """A session of a-0, a-1, b-0, then: a-1 removed, a's id replaced, b-0 altered, b-1 added."""
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(TopicPartition("a", 0), PartitionData(A, 1))
    b.add(TopicPartition("a", 1), PartitionData(A, 1))
    b.add(TopicPartition("b", 0), PartitionData(B, 1))
    b.build()
    h.next_metadata = FetchMetadata(77, 3)
    b = h.new_builder()
    b.add(TopicPartition("b", 1), PartitionData(B, 5))
    b.add(TopicPartition("a", 0), PartitionData(A2, 1))
    b.add(TopicPartition("b", 0), PartitionData(B, 2))
    return b.build()


def _roundtrip(obj, version):
    codec = kproto.request(1)
    return codec.decode(codec.encode(obj, version), version)


@pytest.mark.parametrize("version", [7, 12, 13, 15, 16, 17])
def test_incremental_request_layout(version):
    built = _built_incremental()
    assert [str(t) for t in built.to_send] == ["b-1", "a-0", "b-0"]
    req = _roundtrip(build_fetch_request(built, version, replica_id=4, replica_epoch=9), version)
    assert (req.session_id, req.session_epoch) == (77, 3)
    assert request_replica_id(req, version) == 4
    assert request_metadata(req) == FetchMetadata(77, 3)
    # Consecutive partitions of one topic share an entry; b appears twice because a-0 is between.
    names = {A: "a", A2: "a", B: "b"}
    fetch_data, forgotten = request_fetch_data(req, version, names)
    assert [(t.topic, t.partition, d.fetch_offset) for t, d in fetch_data.items()] == \
        [("b", 1, 5), ("a", 0, 1), ("b", 0, 2)]
    assert len(req.topics) == 3
    # Forgotten: the removed a-1 under its old id; from v13 also the replaced a-0 (old id), in
    # the same topic entry since both are "a".
    if version >= 13:
        assert [(f.topic_id, f.partitions) for f in req.forgotten_topics_data] == [(A, [1, 0])]
        assert forgotten == [TopicIdPartition(A, "a", 1), TopicIdPartition(A, "a", 0)]
        assert {t.topic_id for t in fetch_data} == {A2, B}
    else:
        assert [(f.topic, f.partitions) for f in req.forgotten_topics_data] == [("a", [1])]
        assert forgotten == [TopicIdPartition(Uuid.ZERO, "a", 1)]


def test_unknown_topic_id_resolves_to_none():
    built = _built_incremental()
    req = _roundtrip(build_fetch_request(built, 13), 13)
    fetch_data, forgotten = request_fetch_data(req, 13, {B: "b"})
    assert TopicIdPartition(A2, None, 0) in fetch_data
    assert all(t.topic is None for t in forgotten)


def test_consumer_defaults_and_follower_state():
    built = _built_incremental()
    req = _roundtrip(build_fetch_request(built, 12), 12)
    assert request_replica_id(req, 12) == -1 and req.max_bytes == 52_428_800
    req = _roundtrip(build_fetch_request(built, 15, replica_id=2, replica_epoch=8), 15)
    assert (req.replica_state.replica_id, req.replica_state.replica_epoch) == (2, 8)


def test_version_below_12_rejects_last_fetched_epoch():
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(TopicPartition("a", 0), PartitionData(A, 1, last_fetched_epoch=3))
    with pytest.raises(kproto.EncodeError):
        kproto.request(1).encode(build_fetch_request(b.build(), 11), 11)


@pytest.mark.parametrize("version", [7, 12, 13, 17])
def test_response_groups_consecutive_partitions(version):
    PD = kproto.response(1).cls.PartitionData
    parts = {TopicIdPartition(A, "a", 0): PD(high_watermark=5), TopicIdPartition(A, "a", 1): PD(),
             TopicIdPartition(B, "b", 0): PD(), TopicIdPartition(A, "a", 2): PD(error_code=6)}
    msg = build_fetch_response(FetchContextResponse(0, 3, 99, parts), version)
    codec = kproto.response(1)
    back = codec.decode(codec.encode(msg, version), version)
    assert (back.throttle_time_ms, back.session_id) == (3, 99)
    key = (lambda t: t.topic_id) if version >= 13 else (lambda t: t.topic)
    assert [(key(t), [p.partition_index for p in t.partitions]) for t in back.responses] == \
        ([(A, [0, 1]), (B, [0]), (A, [2])] if version >= 13 else [("a", [0, 1]), ("b", [0]), ("a", [2])])


def test_topic_ids_required_from_v13():
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(TopicPartition("a", 0), PartitionData(Uuid.ZERO, 1))
    built = b.build()
    assert not built.can_use_topic_ids
    with pytest.raises(ValueError):
        build_fetch_request(built, 13)
    assert _roundtrip(build_fetch_request(built, 12), 12).topics[0].topic == "a"
