"""kproto's share consumer (KIP-932): the sans-I/O parts (share sessions, acknowledgement batches,
acquired records, the member's heartbeats) on their own, then :class:`ShareConsumer` against kproto's
broker, kproto's cluster and Apache Kafka 4.4.0 (``any_broker``: the shared ``apache_kafka`` node), alone and in one
share group with Java's ``KafkaShareConsumer`` (``java/KprotoShareMember.java``, kafka-clients 4.4.0),
and against session errors and a lost connection that kproto's broker makes happen.

Each test's group gets short locks and a small delivery limit through group configs
(IncrementalAlterConfigs on the group), which the Apache Kafka harness's lowered floors allow, so
one node serves every test.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

import pytest

from kproto.broker import Intercept
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.membership import MemberState
from kproto.client.producer import Producer
from kproto.client.share_consumer import AcknowledgementResult, ShareConsumer
from kproto.client.share_membership import ShareConsumerMembership
from kproto.client.share_session import (AcknowledgeType, Acknowledgements, ShareSession, acquired_records,
                                         next_epoch)
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.errors import KprotoError
from kproto.records.builder import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey

T1, T2 = Uuid(b"\x01" * 16), Uuid(b"\x02" * 16)
FETCH = request_codec(ApiKey.SHARE_FETCH)
ACK = request_codec(ApiKey.SHARE_ACKNOWLEDGE)


def roundtrip(codec: Any, obj: Any, version: int) -> Any:
    """Encode and decode at ``version``: the request is one the codec writes."""
    return codec.decode(codec.encode(obj, version), version)


def fetched(req: Any) -> dict[tuple[Uuid, int], list[tuple[int, int, list[int]]]]:
    return {(t.topic_id, p.partition_index): [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                              for b in p.acknowledgement_batches]
            for t in req.topics for p in t.partitions}


def forgotten(req: Any) -> set[tuple[Uuid, int]]:
    return {(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions}


# ---- share sessions -----------------------------------------------------------------------------

def test_a_share_session_opens_with_every_partition_then_sends_only_changes():
    s = ShareSession(node=1)
    req = s.fetch_request("g", "m", [(T1, 0), (T1, 1)], {})
    assert req.share_session_epoch == 0 and fetched(req) == {(T1, 0): [], (T1, 1): []} and not forgotten(req)
    assert (req.max_records, req.batch_size) == (500, 500)
    assert s.on_response(ErrorCode.NONE) and s.epoch == 1
    # nothing changed, nothing acknowledged: an empty incremental request
    req = s.fetch_request("g", "m", [(T1, 0), (T1, 1)], {})
    assert req.share_session_epoch == 1 and fetched(req) == {} and not forgotten(req)
    s.on_response(ErrorCode.NONE)
    # one partition moves away, one comes, one carries acknowledgements
    acks = Acknowledgements()
    acks.add(5, 5, AcknowledgeType.ACCEPT)
    acks.add(6, 6, AcknowledgeType.ACCEPT)
    acks.add(7, 7, AcknowledgeType.RELEASE)
    req = s.fetch_request("g", "m", [(T1, 0), (T2, 3)], {(T1, 0): acks})
    assert req.share_session_epoch == 2
    assert fetched(req) == {(T1, 0): [(5, 6, [1]), (7, 7, [2])], (T2, 3): []}
    assert forgotten(req) == {(T1, 1)}
    assert roundtrip(FETCH, req, 2) == req and roundtrip(FETCH, req, 1).topics == req.topics
    # a session error: the next request opens a new session with every partition
    assert not s.on_response(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    assert s.is_new and s.partitions == set()
    req = s.fetch_request("g", "m", [(T1, 0), (T2, 3)], {})
    assert req.share_session_epoch == 0 and set(fetched(req)) == {(T1, 0), (T2, 3)}


def test_acknowledgements_never_open_a_session_and_final_closes_it():
    s = ShareSession(node=1)
    acks = {(T1, 0): Acknowledgements([(0, 0, AcknowledgeType.ACCEPT)])}
    with pytest.raises(ValueError, match="new share session"):
        s.fetch_request("g", "m", [(T1, 0)], acks)
    with pytest.raises(ValueError, match="cannot be opened"):
        s.acknowledge_request("g", "m", acks)
    s.fetch_request("g", "m", [(T1, 0)], {})
    s.on_response(ErrorCode.NONE)
    with pytest.raises(ValueError, match="ShareAcknowledge"):   # a partition not fetched
        s.fetch_request("g", "m", [(T1, 0)], {(T2, 0): Acknowledgements([(0, 0, 1)])})
    req = s.acknowledge_request("g", "m", acks)
    assert req.share_session_epoch == 1 and roundtrip(ACK, req, 2) == req
    # another error moves the epoch on all the same (the broker did)
    assert not s.on_response(ErrorCode.GROUP_AUTHORIZATION_FAILED) and s.epoch == 2
    final = s.acknowledge_request("g", "m", acks, final=True)
    assert final.share_session_epoch == -1 and s.is_new
    assert [next_epoch(e) for e in (0, 1, 2**31 - 1, -1)] == [1, 2, 1, -1]


def test_a_renewal_says_so_and_asks_for_no_records():
    """A RENEW among the acknowledgements makes the request a renewal (IsRenewAck, v2) and a
    ShareFetch ask for nothing (Apache Kafka refuses a renewal asking for records); without
    one the flag is off and the fetch asks as configured."""
    s = ShareSession(node=1)
    s.fetch_request("g", "m", [(T1, 0)], {})
    s.on_response(ErrorCode.NONE)
    renew = {(T1, 0): Acknowledgements([(0, 0, AcknowledgeType.RENEW), (1, 2, AcknowledgeType.ACCEPT)])}
    req = s.fetch_request("g", "m", [(T1, 0)], renew, max_wait_ms=500, min_bytes=1, max_bytes=1000, max_records=10)
    assert (req.is_renew_ack, req.max_wait_ms, req.min_bytes, req.max_bytes, req.max_records) == (True, 0, 0, 0, 0)
    assert roundtrip(FETCH, req, 2) == req
    s.on_response(ErrorCode.NONE)
    plain = s.fetch_request("g", "m", [(T1, 0)], {(T1, 0): Acknowledgements([(3, 3, AcknowledgeType.ACCEPT)])},
                            max_wait_ms=500, min_bytes=1, max_bytes=1000, max_records=10)
    assert (plain.is_renew_ack, plain.max_wait_ms, plain.max_records) == (False, 500, 10)
    s.on_response(ErrorCode.NONE)
    assert s.acknowledge_request("g", "m", renew).is_renew_ack
    assert not s.acknowledge_request("g", "m", {(T1, 0): Acknowledgements([(3, 3, 1)])}).is_renew_ack


def test_acknowledgement_batches_merge_runs_of_one_type_and_keep_gaps_as_ranges():
    a = Acknowledgements()
    for off, kind in [(3, 1), (4, 1), (10, 3), (5, 2), (6, 2)]:
        a.add(off, off, kind)
    a.add(11, 2**40, AcknowledgeType.GAP)        # a huge gap is one run, not 2**40 entries
    batches = [(b.first_offset, b.last_offset, b.acknowledge_types) for b in a.batches(FETCH.cls.AcknowledgementBatch)]
    assert batches == [(3, 4, [1]), (5, 6, [2]), (10, 10, [3]), (11, 2**40, [0])]
    assert a.offsets() == (3, 4, 5, 6, 10)


def batch(base: int, values: list[bytes]) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for v in values:
        b.append(7, None, v)
    return b.build()


def test_only_acquired_records_are_delivered_with_their_count_and_holes_become_gaps():
    R = response_codec(ApiKey.SHARE_FETCH).cls.AcquiredRecords
    data = batch(0, [b"a", b"b", b"c"]) + batch(5, [b"f", b"g"])     # offsets 3 and 4 compacted away
    acquired = [R(first_offset=1, last_offset=4, delivery_count=2), R(first_offset=6, last_offset=8, delivery_count=1)]
    records, gaps = acquired_records("t", 0, data, acquired)
    assert [(r.offset, r.value, r.delivery_count) for r in records] == [(1, b"b", 2), (2, b"c", 2), (6, b"g", 1)]
    assert gaps == [(3, 4), (7, 8)]
    assert acquired_records("t", 0, data, []) == ([], [])
    # a broker claiming a huge acquired range costs ranges, not an entry per offset
    records, gaps = acquired_records("t", 0, data, [R(first_offset=0, last_offset=2**62, delivery_count=1)])
    assert [r.offset for r in records] == [0, 1, 2, 5, 6] and gaps == [(3, 4), (7, 2**62)]


# ---- the member ---------------------------------------------------------------------------------

def heartbeat_response(epoch: int, assignment: Any = None, error: int = 0, interval_ms: int = 500) -> Any:
    cls = response_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
    resp = cls(error_code=error, member_epoch=epoch, heartbeat_interval_ms=interval_ms)
    if assignment is not None:
        resp.assignment = cls.Assignment(topic_partitions=[cls.TopicPartitions(topic_id=t, partitions=ps)
                                                           for t, ps in assignment.items()])
    return resp


def test_share_member_joins_takes_its_assignment_and_leaves():
    m = ShareConsumerMembership("g", topics=["a"], rack_id="r1")
    m.join()
    req = m.heartbeat_request(0.0)
    assert (req.member_epoch, req.rack_id, req.subscribed_topic_names) == (0, "r1", ["a"])
    assert roundtrip(request_codec(ApiKey.SHARE_GROUP_HEARTBEAT), req, 1) == req
    m.on_heartbeat_response(heartbeat_response(3, {T1: [0, 1]}), 0.0)
    assert m.state is MemberState.RECONCILING and m.heartbeat_interval == 0.5
    plan = m.reconcile({T1: "a"})
    assert plan is not None and plan.added == {("a", 0), ("a", 1)}
    assert m.reconciled(plan) and m.time_to_heartbeat(0.1) == 0.0     # acknowledged at once
    req = m.heartbeat_request(0.1)
    assert (req.member_epoch, req.rack_id, req.subscribed_topic_names) == (3, None, None)  # unchanged: null
    m.on_heartbeat_response(heartbeat_response(3), 0.1)
    assert m.state is MemberState.STABLE and m.time_to_heartbeat(0.2) == pytest.approx(0.4)
    # a new subscription goes with the next heartbeat; fencing rejoins with epoch 0 and the same id
    m.subscribe(["a", "b"])
    assert m.heartbeat_request(0.6).subscribed_topic_names == ["a", "b"]
    member_id = m.member_id
    m.on_heartbeat_response(heartbeat_response(0, error=ErrorCode.FENCED_MEMBER_EPOCH), 0.7)
    assert m.state is MemberState.FENCED
    m.released()
    req = m.heartbeat_request(0.8)
    assert (req.member_epoch, req.member_id, req.subscribed_topic_names) == (0, member_id, ["a", "b"])
    m.on_heartbeat_response(heartbeat_response(5, {T1: [1]}), 0.8)
    m.reconciled(m.reconcile({T1: "a"}))
    m.leave()
    m.left_prepared()
    req = m.heartbeat_request(1.0)
    assert (req.member_epoch, req.subscribed_topic_names) == (-1, None)
    m.on_heartbeat_response(heartbeat_response(-1), 1.0)
    assert m.state is MemberState.UNSUBSCRIBED
    with pytest.raises(ValueError):
        ShareConsumerMembership("g", pattern="a.*")


# ---- against kproto's broker, kproto's cluster and Apache Kafka 4.4.0 ----------------------------

@pytest.fixture(params=["kproto", "apache", "kproto-cluster"])
def any_broker(request: pytest.FixtureRequest) -> Any:
    """kproto.testing's ``any_broker`` (kproto's broker, Apache Kafka's node), and kproto's
    3-broker cluster (``kafka_cluster``), whose share groups are spread over its brokers."""
    return request.getfixturevalue({"kproto": "kafka_broker", "apache": "apache_kafka",
                                    "kproto-cluster": "kafka_cluster"}[request.param])


#: the test groups' configs: records locked 2 s, delivered at most 3 times, members heartbeat
#: every 500 ms and are dropped 6 s after their last heartbeat, reading from the start
LOCK_MS, DELIVERY_LIMIT = 2000, 3
GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS),
                "share.delivery.count.limit": str(DELIVERY_LIMIT), "share.heartbeat.interval.ms": "500",
                "share.session.timeout.ms": "6000"}



def run(coro: Any, timeout: float = 90) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def setup(cluster: Cluster, topic: str, group: str, partitions: int, values: list[int],
                **config: str) -> None:
    """The topic, the group's configs (:data:`GROUP_CONFIG` and ``config``) and the records."""
    admin = Admin(cluster)
    await admin.create_topics({topic: partitions})
    await admin.alter_configs({("group", group): {**GROUP_CONFIG, **config}})
    producer = await Producer(cluster).start()
    for i in values:
        await producer.send(topic, str(i).encode(), partition=i % partitions)
    await producer.close()


async def group_lag(cluster: Cluster, group: str) -> dict[int, Optional[int]]:
    """The lag of ``group`` per partition (DescribeShareGroupOffsets v1): how many records are
    neither acknowledged nor archived."""
    return {p: lag for (_, p), (_, lag) in (await Admin(cluster).list_share_group_offsets(group)).items()}


async def poll_until(consumer: ShareConsumer, count: int, deadline_s: float = 30) -> list:
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.poll(0.3)
    return got


def test_release_and_an_expired_lock_deliver_again_and_the_limit_archives(any_broker):
    """Explicit acknowledgement: a RELEASE comes back with delivery count 2, a record left
    unacknowledged past its lock comes back to another member (and the late acknowledgement is
    refused), a record released at every delivery is archived after the third; the rest accepted
    once. The group's lag is 0: nothing is left."""
    topic, group = new_name("share-ack"), new_name("share-g")

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            await setup(cluster, topic, group, 1, list(range(10)))
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit",
                                    max_poll_records=10).start()
            await a.wait_for_assignment()
            first = await poll_until(a, 10)
            assert [(r.offset, r.delivery_count) for r in first] == [(o, 1) for o in range(10)]
            with pytest.raises(KprotoError, match="not acknowledged"):
                await a.poll(0.1)
            held = first[9]                                  # left unacknowledged: its lock expires
            for r in first[:9]:
                a.acknowledge(r, AcknowledgeType.RELEASE if r.offset in (1, 2) else AcknowledgeType.ACCEPT)
            with pytest.raises(KprotoError, match="not a record"):
                a.acknowledge(first[0])                      # once only
            results = await a.commit_sync()
            assert results == {(topic, 0): AcknowledgementResult((0, 1, 2, 3, 4, 5, 6, 7, 8), None)}
            # a second member takes the expired record; offset 2 is released every time, offset 1 accepted
            b = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            deliveries: list = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                    (9, 2) in deliveries and (1, 2) in deliveries and (2, DELIVERY_LIMIT) in deliveries):
                for r in await b.poll(0.2):
                    deliveries.append((r.offset, r.delivery_count))
                    b.acknowledge(r, AcknowledgeType.RELEASE if r.offset == 2 else AcknowledgeType.ACCEPT)
            assert sorted(deliveries) == [(1, 2), (2, 2), (2, 3), (9, 2)], deliveries
            # the first member's acknowledgement of the record whose lock expired comes too late
            a.acknowledge(held)
            late = await a.commit_sync()
            assert late[(topic, 0)].offsets == (9,) and late[(topic, 0)].error is not None
            await b.commit_sync()
            await asyncio.sleep(0.5)
            assert [r for r in await b.poll(0.5)] == []      # offset 2 archived at the limit
            lags = await group_lag(cluster, group)
            await a.close()
            await b.close()
            return lags

    lags = run(main())
    assert lags == {0: 0}, lags


def test_renew_keeps_a_record_past_its_lock_and_hands_it_out_again(any_broker):
    """RENEW (explicit mode): the next poll sends the renewal (a ShareFetch that asks for no
    records: the records produced meanwhile wait) and returns the renewed record again, same
    delivery; accepted after its first lock would have run out, the acknowledgement takes
    effect, and no other member got the record meanwhile."""
    topic, group = new_name("share-renew"), new_name("share-g")
    lock_s = 5.0

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            await setup(cluster, topic, group, 1, list(range(3)),
                        **{"share.record.lock.duration.ms": str(int(lock_s * 1000))})
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            await a.wait_for_assignment()
            first = await poll_until(a, 3)
            polled_at = time.monotonic()
            assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
            a.acknowledge(first[0], AcknowledgeType.RENEW)
            for r in first[1:]:
                a.acknowledge(r)
            with pytest.raises(KprotoError, match="not a record"):
                a.acknowledge(first[0])                      # renewing: not waiting for one now
            producer = await Producer(cluster).start()
            for v in (b"3", b"4"):
                await producer.send(topic, v, partition=0)
            await producer.close()
            await asyncio.sleep(1.0)
            renewed = await a.poll(1.0)                      # the renewal, nothing fetched
            assert renewed == [first[0]]
            with pytest.raises(KprotoError, match="not acknowledged"):
                await a.poll(0.1)
            other = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            seen = []
            while time.monotonic() < polled_at + lock_s + 0.5:  # past the first lock's end
                for r in await other.poll(0.2):
                    seen.append(r.offset)
                    other.acknowledge(r)
            a.acknowledge(renewed[0])
            results = await a.commit_sync()
            await other.close()
            await a.close()
            return results, seen

    results, seen = run(main())
    assert results == {(topic, 0): AcknowledgementResult((0,), None)}
    assert sorted(seen) == [3, 4]          # the records the renewal did not fetch; never offset 0


def test_acquired_records_come_in_ranges_of_batch_size_along_the_log_batches(any_broker):
    """ShareFetch's BatchSize, as Apache Kafka 4.4.0 applies it: records acquired for the first
    time are cut into AcquiredRecords ranges along the log's batches (a range closes before a
    batch starting BatchSize or more records after its first offset; a batch is never split;
    BatchSize 0 sends an empty range first); re-acquired records and the record-limit mode are
    not cut. The log: batches of 10, 1, 1, 1, 1, 1 and 7 records."""
    topic = new_name("share-bs")
    P = request_codec(ApiKey.PRODUCE).cls
    F = FETCH.cls

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.create_topics({topic: 1})
            await cluster.wait_for_leaders([topic])
            leader = cluster.metadata.leader(topic, 0)
            conn = await cluster.connection(leader)
            now = int(time.time() * 1000)
            for n in (10, 1, 1, 1, 1, 1, 7):
                b = RecordBatchBuilder(base_offset=0)
                for _ in range(n):
                    b.append(now, None, b"x")
                r = await conn.request(P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
                    name=topic, partition_data=[P.PartitionProduceData(index=0, records=b.build())])]), 11)
                assert r.responses[0].partition_responses[0].error_code == 0
            tid = cluster.metadata.topic_id(topic)
            out = {}
            for name, steps in (("bs3", [([], 500, 3, 0)]), ("bs0", [([], 500, 0, 0)]),
                                ("max12-bs5", [([], 12, 5, 0)]), ("record-limit13-bs4", [([], 13, 4, 1)]),
                                ("released-bs2", [([], 500, 500, 0), ([(2, 4, [2]), (11, 12, [2]), (15, 21, [2])],
                                                                     500, 2, 0)])):
                group = new_name("share-g")
                await admin.alter_configs({("group", group): GROUP_CONFIG})
                member = await ShareConsumer(cluster, [topic], group_id=group).start()
                await member.wait_for_assignment()   # joined; it never fetches: the requests below do
                got = []
                for epoch, (acks, max_records, batch_size, mode) in enumerate(steps):
                    resp = await conn.request(F(
                        group_id=group, member_id=member.member_id, share_session_epoch=epoch, max_wait_ms=200,
                        min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=batch_size,
                        share_acquire_mode=mode, forgotten_topics_data=[], topics=[F.FetchTopic(
                            topic_id=tid, partitions=[F.FetchPartition(partition_index=0, acknowledgement_batches=[
                                F.AcknowledgementBatch(first_offset=a, last_offset=z, acknowledge_types=t)
                                for a, z, t in acks])])]), 2)
                    got.append([(x.first_offset, x.last_offset, x.delivery_count)
                                for t in resp.responses for p in t.partitions for x in p.acquired_records])
                out[name] = got[-1]
                await member.close()
            return out

    assert run(main(), 180) == {
        "bs3": [(0, 9, 1), (10, 12, 1), (13, 21, 1)],
        "bs0": [(0, -1, 1), (0, 9, 1), (10, 10, 1), (11, 11, 1), (12, 12, 1), (13, 13, 1), (14, 14, 1),
                (15, 21, 1)],
        "max12-bs5": [(0, 9, 1), (10, 11, 1)],
        "record-limit13-bs4": [(0, 12, 1)],
        "released-bs2": [(2, 4, 2), (11, 12, 2), (15, 21, 2)]}


# not on kproto's cluster: its broker writes a dead-letter copy only to a DLQ partition it leads
@pytest.mark.parametrize("any_broker", ["kproto", "apache"], indirect=True)
def test_rejected_and_exhausted_records_go_to_the_dead_letter_queue(any_broker):
    """KIP-1191 as Apache Kafka 4.4.0 does it: with the group's errors.deadletterqueue.topic.name
    (a dlq.* topic whose errors.deadletterqueue.group.enable is true) a rejected record and one
    released past the delivery count limit are written there, to the partition of the same
    number, with __dlq.errors.* headers, and with the original key and value (not its headers)
    when errors.deadletterqueue.copy.record.enable; an accepted one is not."""
    topic, dlq = new_name("share-dlq-src"), "dlq." + new_name("share")

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.create_topics({topic: 2, dlq: 2})
            await admin.alter_configs({("topic", dlq): {"errors.deadletterqueue.group.enable": "true"}})
            async with Producer(cluster) as producer:
                for i in range(3):
                    await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=1, headers=[("h", b"x")])
            groups = {}
            for copy in ("false", "true"):
                group = groups[copy] = new_name("share-g")
                await admin.alter_configs({("group", group): {
                    **GROUP_CONFIG, "errors.deadletterqueue.topic.name": dlq,
                    "errors.deadletterqueue.copy.record.enable": copy}})
                c = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
                await c.wait_for_assignment()
                deadline = time.monotonic() + 30
                done = 0
                while done < 2 and time.monotonic() < deadline:   # offset 1 released until archived
                    for r in await c.poll(0.3):
                        kind = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE}.get(r.offset, AcknowledgeType.ACCEPT)
                        c.acknowledge(r, kind)
                        done += r.offset == 0 or (r.offset == 1 and r.delivery_count == DELIVERY_LIMIT)
                await c.commit_sync()
                await c.close()
            dead = await Consumer(cluster, [dlq]).start()
            got: list = []
            deadline = time.monotonic() + 20
            while len(got) < 4 and time.monotonic() < deadline:
                got += await dead.getmany(0.5)
            await dead.close()
            return groups, got

    groups, got = run(main(), 120)
    seen = sorted(((r.partition, r.key, r.value, [(k, v) for k, v in r.headers]) for r in got), key=repr)

    def headers(offset: int, group: str, count: int, why: str) -> list:
        return [("__dlq.errors.topic", topic.encode()), ("__dlq.errors.partition", b"1"),
                ("__dlq.errors.offset", str(offset).encode()), ("__dlq.errors.group", group.encode()),
                ("__dlq.errors.delivery.count", str(count).encode()), ("__dlq.errors.message", why.encode())]

    rejected, exhausted = "Offset rejected by client.", "Offset delivery count exceeded the threshold."
    assert seen == sorted([
        (1, None, None, headers(0, groups["false"], 1, rejected)),
        (1, None, None, headers(1, groups["false"], DELIVERY_LIMIT, exhausted)),
        (1, b"k0", b"v0", headers(0, groups["true"], 1, rejected)),
        (1, b"k1", b"v1", headers(1, groups["true"], DELIVERY_LIMIT, exhausted))], key=repr)


def test_implicit_mode_accepts_on_the_next_poll_and_close_releases_what_is_not_acknowledged(any_broker):
    """Implicit mode: each poll and commit_async accept the records of the poll before; close
    accepts nothing (as Kafka's consumer): the broker releases the last poll's records, as it
    releases what an explicit-mode member did not acknowledge."""
    topic, group = new_name("share-impl"), new_name("share-g")

    async def produce(cluster: Cluster, values: range) -> None:
        producer = await Producer(cluster).start()
        for i in values:
            await producer.send(topic, str(i).encode(), partition=i % 2)
        await producer.close()

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            await setup(cluster, topic, group, 2, list(range(20)))
            acked: list[dict] = []
            implicit = await ShareConsumer(cluster, [topic], group_id=group, max_poll_records=5,
                                           on_acknowledged=acked.append).start()
            await implicit.wait_for_assignment()
            got = await poll_until(implicit, 20)             # each poll accepts the one before
            with pytest.raises(KprotoError, match="implicit"):
                implicit.acknowledge(got[-1])
            committed = await implicit.commit_async()        # accepts the last poll's
            assert committed and acked[-1] == committed
            assert all(r.error is None for res in acked for r in res.values())
            accepted = sorted((p, o) for res in acked for (_, p), r in res.items() for o in r.offsets)
            assert accepted == sorted((r.partition, r.offset) for r in got)
            await produce(cluster, range(20, 30))
            last = await poll_until(implicit, 1)
            await implicit.close()                           # the last poll's records: released
            explicit = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            held = await poll_until(explicit, 1)
            await explicit.close()                           # not acknowledged: released
            again = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            back: list = []
            deadline = time.monotonic() + 30
            while len(back) < 10 and time.monotonic() < deadline:
                for r in await again.poll(0.3):
                    again.acknowledge(r)
                    back.append(r)
            await again.commit_sync()
            await again.close()
            lags = await group_lag(cluster, group)
            return got, last, held, back, lags

    got, last, held, back, lags = run(main())
    assert sorted(int(r.value) for r in got) == list(range(20))  # accepted: never delivered again
    assert last and all(r.delivery_count == 1 for r in last)
    closed = {int(r.value) for r in last}
    assert held and all(r.delivery_count == 1 + (int(r.value) in closed) for r in held)
    released = {int(r.value) for r in held}
    # each release made the next delivery one more
    assert sorted((int(r.value), r.delivery_count) for r in back) == [
        (i, 1 + (i in closed) + (i in released)) for i in range(20, 30)]
    assert lags == {0: 0, 1: 0}


# ---- a mixed share group: kproto and Java, one killed mid-stream -------------------------------------

JAVA_SHARE_MEMBER = Path(__file__).with_name("java") / "KprotoShareMember.java"


def policy(value: bytes, delivery: int) -> AcknowledgeType:
    """The group's acknowledgements (the same in KprotoShareMember.java): i % 10 == 3 is released
    at every delivery (archived at the limit), i % 10 == 5 released once, the rest accepted."""
    i = int(value)
    return AcknowledgeType.RELEASE if i % 10 == 3 or (i % 10 == 5 and delivery == 1) else AcknowledgeType.ACCEPT


@pytest.fixture(scope="session")
def java_share_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The class path of KprotoShareMember, compiled against kafka-clients 4.4.0."""
    from kproto.testing import apache
    if apache.unavailable() is not None or shutil.which("javac") is None:
        reason = apache.unavailable() or "no javac"
        if os.environ.get("CI"):
            pytest.fail(f"the Java client is needed under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    jars = apache.client_jars("4.4.0")
    out = tmp_path_factory.mktemp("java-share-member")
    proc = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", os.pathsep.join(jars),
                           "-d", str(out), str(JAVA_SHARE_MEMBER)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return os.pathsep.join([str(out), *jars])


class JavaShareMember:
    """KprotoShareMember in a JVM of its own; its events read by a thread as they come."""

    def __init__(self, cp: str, bootstrap: str, topic: str, group: str, workdir: Path, sleep_ms: int) -> None:
        self.stop_file = workdir / f"{group}.stop"
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
             "KprotoShareMember", bootstrap, topic, group, str(self.stop_file), "120", str(sleep_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def of(self, event: str) -> list[dict]:
        return [e for e in list(self.events) if e["event"] == event]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self._reader.join(10)


def test_mixed_share_group_with_java_one_member_killed_loses_nothing(any_broker, java_share_cp, tmp_path):
    """Two kproto share consumers and Java's KafkaShareConsumer on a 6-partition topic, all
    acknowledging explicitly by :func:`policy`; the Java member is killed (SIGKILL) while it
    holds records. Every record is accepted exactly once or archived at the delivery limit,
    checked against what was produced, and the group's lag is 0 everywhere."""
    topic, group = new_name("share-mixed"), new_name("share-mixed-g")
    partitions, count = 6, 900

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            # a member holds a fetched batch (up to 150 records, 10 ms of work each) well within its lock
            await setup(cluster, topic, group, partitions, list(range(count)), **{"share.record.lock.duration.ms": "5000"})
            java = JavaShareMember(java_share_cp, any_broker.bootstrap, topic, group, tmp_path, sleep_ms=10)
            delivered: list[tuple[str, int, int, int, AcknowledgeType]] = []   # who, partition, offset, count, ack
            confirmed: list[tuple[str, int, int]] = []                          # who, partition, offset (ACCEPT)
            value_of: dict[tuple[int, int], int] = {}
            stop = asyncio.Event()

            async def member(name: str) -> None:
                types: dict[tuple[int, int], AcknowledgeType] = {}

                def on_acknowledged(results: dict) -> None:
                    for (_, p), res in results.items():
                        if res.error is None:
                            confirmed.extend((name, p, o) for o in res.offsets if types.get((p, o)) is AcknowledgeType.ACCEPT)

                consumer = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit",
                                               max_poll_records=10, on_acknowledged=on_acknowledged).start()
                try:
                    while not stop.is_set():
                        for r in await consumer.poll(0.2):
                            await asyncio.sleep(0.01)      # the work, as the Java member's
                            kind = policy(r.value, r.delivery_count)
                            types[(r.partition, r.offset)] = kind
                            value_of[(r.partition, r.offset)] = int(r.value)
                            delivered.append((name, r.partition, r.offset, r.delivery_count, kind))
                            consumer.acknowledge(r, kind)
                    on_acknowledged(await consumer.commit_sync())
                finally:
                    await consumer.close()

            deadline = time.monotonic() + 60
            while not java.of("delivered") and time.monotonic() < deadline:
                assert java.proc.poll() is None, java.proc.stderr.read() if java.proc.stderr else ""
                await asyncio.sleep(0.1)                  # the JVM started and reads
            tasks = [asyncio.get_running_loop().create_task(member(n)) for n in ("kproto-1", "kproto-2")]
            killed_at = None
            try:
                deadline = time.monotonic() + 100
                while time.monotonic() < deadline:
                    await asyncio.sleep(0.25)
                    assert java.proc.poll() is None or killed_at is not None, java.proc.stderr.read() if java.proc.stderr else ""
                    if killed_at is None and len(delivered) >= 10 and len(java.of("delivered")) >= 30:
                        java.kill()                       # mid-stream: every member is reading
                        killed_at = len(delivered)
                    if killed_at is not None:
                        lags = await group_lag(cluster, group)
                        if all(lags.get(p) == 0 for p in range(partitions)):
                            break
                    for t in tasks:
                        if t.done():
                            t.result()
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                if java.proc.poll() is None:
                    java.kill()
            for t in tasks:
                t.result()
            lags = await group_lag(cluster, group)
            return delivered, confirmed, java, killed_at, lags, value_of

    delivered, confirmed, java, killed_at, lags, value_of = run(main(), timeout=150)
    assert killed_at is not None, "the Java member was killed mid-stream"
    assert lags == {p: 0 for p in range(partitions)}, lags
    # what was produced: value i went to partition i % 6 at offset i // 6
    produced = {(i % partitions, i // partitions): i for i in range(count)}
    assert all(produced.get(k) == v for k, v in value_of.items()), "a record came back changed"
    for e in java.of("delivered"):
        delivered.append(("java", e["partition"], e["offset"], e["delivery"], AcknowledgeType[e["ack"].upper()]))
    java_types = {(e["partition"], e["offset"]): e["ack"].upper() for e in java.of("delivered")}
    for e in java.of("acked"):
        if e["error"] is None:
            confirmed.extend(("java", e["partition"], o) for o in e["offsets"]
                             if java_types.get((e["partition"], o)) == "ACCEPT")
    accepted = Counter((p, o) for _, p, o in confirmed)
    assert not [k for k, n in accepted.items() if n > 1], "a record accepted twice"
    by_record: dict[tuple[int, int], list[tuple[str, int, AcknowledgeType]]] = defaultdict(list)
    for who, p, o, n, kind in delivered:
        assert (p, o) in produced, (p, o)
        by_record[(p, o)].append((who, n, kind))
    in_flight_at_kill = []   # accepted by the Java member, confirmation lost with it
    unseen = []              # acquired by the Java member (which fetches ahead) before it was killed, not handed out
    for key, i in produced.items():
        seen = sorted(by_record.get(key, []), key=lambda d: d[1])
        assert seen, f"record {i} at {key} was never delivered"
        counts = [n for _, n, _ in seen]
        assert len(counts) == len(set(counts)), (i, seen)                      # one member at a time
        if counts != list(range(1, len(counts) + 1)):
            unseen.append(key)
        if i % 10 == 3:
            assert key not in accepted, (i, seen)
            if counts[-1] != DELIVERY_LIMIT:                                    # archived at the limit
                unseen.append(key)
        elif key not in accepted:
            # accepted by the Java member just before it was killed: the broker has it (the lag
            # is 0) but the confirmation never came back
            last = seen[-1]
            assert last[0] == "java" and last[2] is AcknowledgeType.ACCEPT, (i, seen)
            in_flight_at_kill.append(key)
        if i % 10 == 5 and key in accepted:
            assert counts[-1] >= 2, (i, seen)                                   # released once, then accepted
    # (which partitions the records never handed out are on is not checked: the Java member,
    # alone at first, fetches from every partition, and records it buffered for a partition
    # that then moves to another member go back released, count 1 never handed out)
    # what the killed member held came back to the others with a higher delivery count: records
    # it delivered without acknowledging, or had fetched but not handed out yet
    def java_max(k: tuple[int, int]) -> int:
        return max((n for w, n, _ in by_record[k] if w == "java"), default=0)

    last = {k: max(seen, key=lambda d: d[1]) for k, seen in by_record.items()}
    redelivered = [k for k in set(unseen) | {k for k in by_record if java_max(k)}
                   if last[k][0] != "java" and last[k][1] > max(java_max(k), 1)]
    assert redelivered, "nothing the Java member held was delivered again"


# ---- what only kproto's broker can make happen -------------------------------------------------

def test_a_session_error_and_a_lost_connection_open_a_new_share_session(kafka_broker):
    """The broker answers INVALID_SHARE_SESSION_EPOCH to the ShareFetch carrying the first
    acknowledgements, then drops the connection of a later one: the acknowledgements are
    reported failed, the next ShareFetch opens a new session (epoch 0), the records come back
    once their locks expire and are accepted then."""
    topic, group = new_name("share-err"), new_name("share-g")
    epochs: list[tuple[int, bool]] = []
    failures = iter([Intercept(error=ErrorCode.INVALID_SHARE_SESSION_EPOCH), Intercept(drop=True)])

    def hook(header: Any, req: Any) -> Any:
        acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
        epochs.append((req.share_session_epoch, acks))
        if acks and req.share_session_epoch > 0:
            return next(failures, None)
        return None

    kafka_broker.control(ApiKey.SHARE_FETCH, hook, times=None)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await setup(cluster, topic, group, 1, list(range(5)))
            acked: list[dict] = []
            consumer = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit",
                                           on_acknowledged=acked.append).start()
            await consumer.wait_for_assignment()
            deliveries: list[tuple[int, int]] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (len(deliveries) >= 5 and all(
                    any(res.error is None and o in res.offsets for a in acked for res in a.values()) for o in range(5))):
                try:
                    records = await consumer.poll(0.3)
                except KprotoError:          # the dropped connection
                    continue
                for r in records:
                    deliveries.append((r.offset, r.delivery_count))
                    consumer.acknowledge(r)
            await consumer.close()
            return deliveries, acked

    deliveries, acked = run(main())
    failed = [res.error.code for a in acked for res in a.values() if res.error is not None]
    assert failed[:2] == [ErrorCode.INVALID_SHARE_SESSION_EPOCH, ErrorCode.NETWORK_EXCEPTION], acked
    # every record came back after each failed acknowledgement, one delivery more each time
    counts = Counter(o for o, _ in deliveries)
    assert set(counts) == set(range(5)) and all(n >= 2 for n in counts.values()), deliveries
    assert sorted(deliveries) == sorted((o, n) for o in range(5) for n in range(1, counts[o] + 1))
    # after each failure the next ShareFetch opened a new session
    for i, (epoch, acks) in enumerate(epochs[:-1]):
        if acks and epoch > 0 and i + 1 < len(epochs) and epochs[i + 1][0] == 0:
            break
    else:
        raise AssertionError(f"no new session after a failure: {epochs}")
    assert epochs[0] == (0, False) and sum(1 for e, _ in epochs if e == 0) >= 3, epochs
