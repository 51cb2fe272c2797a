"""The sans-I/O parts of the client: metadata cache, producer batching, consumer helpers."""
from __future__ import annotations

import struct

import pytest

import kproto
from kproto.client.assignors import assign, decode_sticky_user_data
from kproto.client.cluster import MetadataCache, parse_bootstrap
from kproto.client.consumer import leader_assignments, parse_records, subscription_metadata
from kproto.client.consumer_protocol import decode_assignment, decode_subscription
from kproto.client.partitioner import partition_for_key
from kproto.client.accumulator import PendingBatch, RecordAccumulator, build_produce_request, encode_batch
from kproto.codecs.primitives import Uuid
from kproto.records import RecordBatchBuilder, iter_batches


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    for bad in ("", "host", "host:x", ","):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def metadata_response(partitions_leaders: dict[str, list[int]], error_topics=()):
    cls = kproto.response(3).cls
    topics = [cls.MetadataResponseTopic(name=t, topic_id=Uuid(bytes([i + 1] * 16)), partitions=[
        cls.MetadataResponsePartition(partition_index=p, leader_id=leader, leader_epoch=3,
                                      replica_nodes=[1, 2], isr_nodes=[1])
        for p, leader in enumerate(leaders)]) for i, (t, leaders) in enumerate(partitions_leaders.items())]
    topics += [cls.MetadataResponseTopic(name=t, error_code=3) for t in error_topics]
    return cls(cluster_id="c", controller_id=2, topics=topics, brokers=[
        cls.MetadataResponseBroker(node_id=n, host=f"h{n}", port=9000 + n) for n in (1, 2)])


def test_metadata_cache():
    md = MetadataCache()
    md.update(metadata_response({"a": [1, -1, 2], "b": [2]}, error_topics=["gone"]))
    assert md.cluster_id == "c" and md.controller_id == 2
    assert md.brokers[2].port == 9002
    assert md.partitions("a") == [0, 1, 2]
    assert md.available_partitions("a") == [0, 2]  # partition 1 has no leader
    assert md.leader("a", 0) == 1 and md.leader("a", 1) is None and md.leader("x", 0) is None
    assert md.topics["a"].partitions[2].leader_epoch == 3
    assert md.topic_names() == {Uuid(bytes([1] * 16)): "a", Uuid(bytes([2] * 16)): "b"}
    assert md.partition_counts() == {"a": 3, "b": 1}  # the errored topic is not assignable
    md.update(metadata_response({"b": [1, 1]}))  # a partial refresh keeps other topics
    assert md.partitions("a") == [0, 1, 2] and md.leader("b", 1) == 1
    md.update(metadata_response({"b": [1]}), all_topics=True)  # a full one drops them
    assert list(md.topics) == ["b"]


def test_accumulator_partitions_like_kafka():
    acc = RecordAccumulator(batch_size=100, random=iter(range(1000, 2000)).__next__)
    for key in (b"", b"a", b"key-123", bytes(range(40))):
        assert acc.partition("t", key, 7, range(7)) == partition_for_key(key, 7)
    # keyless: sticky on one partition until ~batch_size bytes were appended, then the next draw
    seen = []
    for i in range(12):
        p = acc.partition("t", None, 5, [0, 1, 2, 3, 4])
        seen.append(p)
        acc.append("t", p, 0, None, b"x" * 20, (), None, num_partitions=5, available=[0, 1, 2, 3, 4], keyed=False)
    assert seen == [1000 % 5] * 3 + [1001 % 5] * 3 + [1002 % 5] * 3 + [1003 % 5] * 3


def test_accumulator_sequences():
    acc = RecordAccumulator()
    for i in range(3):
        acc.append("t", 0, i, None, b"v", (), f"f{i}")
    acc.append("t", 1, 0, None, b"v", (), "g")
    assert len(acc) == 4
    first = {(b.topic, b.partition): b for b in acc.drain()}
    assert len(acc) == 0 and first[("t", 0)].base_sequence == 0 and first[("t", 0)].futures == ["f0", "f1", "f2"]
    acc.complete(first[("t", 0)])
    acc.append("t", 0, 9, None, b"v", (), None)
    acc.append("t", 1, 9, None, b"v", (), None)
    second = {(b.topic, b.partition): b for b in acc.drain()}
    # numbered as they leave: partition 1's second batch follows its first, still unacknowledged
    assert second[("t", 0)].base_sequence == 3 and second[("t", 1)].base_sequence == 1
    assert acc.acked_sequence == {("t", 0): 3}
    # partition 1's first batch failed for good: the second is numbered again from the last ack
    acc.renumber([second[("t", 1)]])
    assert second[("t", 1)].base_sequence == 0 and acc.next_sequence[("t", 1)] == 1
    acc.next_sequence[("t", 0)] = acc.acked_sequence[("t", 0)] = 2**31 - 2
    acc.append("t", 0, 0, None, b"", (), None)
    acc.append("t", 0, 0, None, b"", (), None)
    acc.append("t", 0, 0, None, b"", (), None)
    [wrapping] = acc.drain()
    assert wrapping.base_sequence == 2**31 - 2 and acc.next_sequence[("t", 0)] == 1  # wraps as in Kafka
    acc.complete(wrapping)
    assert acc.acked_sequence[("t", 0)] == 1
    acc.reset_sequences()
    assert acc.next_sequence == {} and acc.acked_sequence == {}


def test_accumulator_opens_a_new_batch_when_full_and_drains_by_limit():
    acc = RecordAccumulator(batch_size=100)
    for i in range(10):
        acc.append("t", 0, i, None, b"x" * 29, (), i)  # 50 bytes each: two records a batch
    assert len(acc) == 10 and acc.queued_bytes == 500
    assert acc.drain(lambda tp: 0) == []
    two = acc.drain(lambda tp: 2)
    assert [b.futures for b in two] == [[0, 1], [2, 3]] and [b.base_sequence for b in two] == [0, 2]
    acc.append("t", 0, 0, None, b"x", (), 10)  # joins the open batch (4 and 5 fill the third)
    full = acc.drain(full_only=True)
    assert [b.futures for b in full] == [[4, 5], [6, 7], [8, 9]] and len(acc) == 1
    assert [b.number for b in two + full] == [1, 2, 3, 4, 5]
    [rest] = acc.drain()
    assert rest.futures == [10] and rest.base_sequence == 10 and acc.queued_bytes == 0


def test_encode_batch_and_produce_request():
    batch = PendingBatch("t", 2, [(10, b"k", b"v1", (("h", b"x"),)), (11, None, b"v2", ())],
                         base_sequence=7)
    data = encode_batch(batch, 4, producer_id=42, producer_epoch=3)
    [rb] = iter_batches(data)
    assert (rb.producer_id, rb.producer_epoch, rb.base_sequence, rb.compression, rb.count) == (42, 3, 7, 4, 2)
    assert [(r.key, r.value, tuple(r.headers)) for r in rb.records()] == [
        (b"k", b"v1", (("h", b"x"),)), (None, b"v2", ())]
    req = build_produce_request({("t", 2): data, ("u", 0): b"", ("t", 0): b""}, acks=-1, timeout_ms=1234)
    again = kproto.request(0).decode(kproto.request(0).encode(req, 9), 9)
    assert [(t.name, [p.index for p in t.partition_data]) for t in again.topic_data] == [("t", [2, 0]), ("u", [0])]
    assert bytes(again.topic_data[0].partition_data[0].records) == data
    assert (again.acks, again.timeout_ms, again.transactional_id) == (-1, 1234, None)


def batch(base, values, control=False, compression=0):
    b = RecordBatchBuilder(base_offset=base, compression=compression, control=control, transactional=control)
    for v in values:
        b.append(5, None, v)
    return b.build()


def test_parse_records_positions():
    data = batch(0, [b"a", b"b", b"c"], compression=1) + batch(3, [b"\0\0\0\0"], control=True) + batch(4, [b"d"])
    recs, pos = parse_records("t", 0, data, 1)  # a compressed batch starting before the position
    assert [(r.offset, r.value) for r in recs] == [(1, b"b"), (2, b"c"), (4, b"d")]
    assert pos == 5
    assert parse_records("t", 0, data, 5) == ([], 5)
    assert parse_records("t", 0, None, 3) == ([], 3)
    recs, pos = parse_records("t", 0, batch(0, [b"x"]) + batch(1, [b"y"])[:-3], 0)  # torn tail
    assert [r.value for r in recs] == [b"x"] and pos == 1


def test_subscription_metadata_per_assignor():
    owned = [("t", 1), ("t", 0)]
    # eager: the previous assignment was revoked, so it travels only in the sticky user data
    sub, version = decode_subscription(subscription_metadata("sticky", ["t", "a"], owned, 5))
    assert version == 3 and sub.topics == ["a", "t"] and sub.owned_partitions == []
    assert decode_sticky_user_data(sub.user_data) == (owned, 5)
    sub, _ = decode_subscription(subscription_metadata("cooperative-sticky", ["t"], owned, 5, cooperative=True))
    assert struct.unpack(">i", sub.user_data) == (5,) and sub.generation_id == 5
    assert sorted(sub.owned_partitions) == sorted(owned)
    sub, _ = decode_subscription(subscription_metadata("range", ["t"], [], -1, version=0))
    assert sub.user_data is None and sub.generation_id is None and sub.owned_partitions == []


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_leader_assignments_match_assignor(assignor):
    topics = {"a": ["m1", "m2", "m3"], "b": ["m2", "m3"]}
    members = [(m, None, subscription_metadata(assignor, [t for t, ms in topics.items() if m in ms], [], -1))
               for m in ("m1", "m2", "m3")]
    counts = {"a": 5, "b": 3, "unrelated": 9}
    out = leader_assignments(assignor, members, counts)
    decoded = {m: decode_assignment(b)[0].partitions for m, b in out.items()}
    subs = {m: decode_subscription(md)[0] for m, _, md in members}
    assert decoded == assign(assignor, {"a": 5, "b": 3}, subs)
    assert sorted(tp for tps in decoded.values() for tp in tps) == \
        [("a", p) for p in range(5)] + [("b", p) for p in range(3)]


@pytest.mark.parametrize("accelerated", [False, True])
def test_an_acknowledged_batch_resolves_each_pending_future(monkeypatch, accelerated):
    import asyncio
    import gc

    from kproto.client import producer as producer_module
    from kproto.client.accumulator import RecordMetadata

    if accelerated and producer_module._speedups is None:
        pytest.skip("the records accelerator is not built")
    if not accelerated:
        monkeypatch.setattr(producer_module, "_speedups", None)
    loop = asyncio.new_event_loop()
    try:
        futs = [loop.create_future() for _ in range(4)]
        futs[1].set_result("earlier")
        futs[2].set_exception(ValueError("earlier"))
        b = PendingBatch("t", 3, [(100 + i, None, b"v", ()) for i in range(4)], futs)
        producer_module.Producer._resolve(b, 50)
        assert [f.result() for f in (futs[0], futs[3])] == [
            RecordMetadata("t", 3, 50, 100), RecordMetadata("t", 3, 53, 103)]
        assert futs[1].result() == "earlier" and isinstance(futs[2].exception(), ValueError)
        assert type(futs[0].result()) is RecordMetadata and futs[3].result().offset == 53
        # the C path leaves the results (a str and ints) to reference counting alone
        assert gc.is_tracked(futs[0].result()) is not accelerated
        acks0 = [loop.create_future() for _ in range(2)]
        producer_module.Producer._resolve(PendingBatch("t", 0, [(7, None, None, ())] * 2, acks0), -1)
        assert [f.result().offset for f in acks0] == [-1, -1]
        huge = [loop.create_future() for _ in range(2)]  # an absurd offset still resolves
        producer_module.Producer._resolve(PendingBatch("t", 0, [(7, None, None, ())] * 2, huge), (1 << 63) - 1)
        assert [f.result().offset for f in huge] == [(1 << 63) - 1, 1 << 63]
    finally:
        loop.close()


def test_resolve_checks_its_arguments():
    from kproto.client.producer import _speedups

    if _speedups is None:
        pytest.skip("the records accelerator is not built")
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        futs = [loop.create_future()]
        with pytest.raises(ValueError):
            _speedups.resolve(futs, tuple, "t", 0, 0, [])
        with pytest.raises(TypeError):
            _speedups.resolve(futs, tuple, "t", 0, 0, [("not a timestamp",)])
        with pytest.raises(TypeError):
            _speedups.resolve(futs, list, "t", 0, 0, [(1,)])
        with pytest.raises(OverflowError):
            _speedups.resolve(futs, tuple, "t", 0, (1 << 63) - 1, [(1,)])
        assert not futs[0].done()
        _speedups.resolve(futs, tuple, "t", 0, 5, [(1,)])
        assert futs[0].result() == ("t", 0, 5, 1)
    finally:
        loop.close()
