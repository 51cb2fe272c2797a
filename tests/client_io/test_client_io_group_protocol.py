"""The consumer group protocol of KIP-848 (``group_protocol="consumer"``) against librdkafka's
mock cluster, which speaks ConsumerGroupHeartbeat v1 with its own server-side assignment (a
range over the members) and needs no setting to do so. The mock answers a heartbeat every 3 s
(its HeartbeatIntervalMs), so a rebalance takes a few of those."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.membership import MemberState
from kproto.client.producer import Producer
from kproto.error_codes import ErrorCode

PARTITIONS = 4  # the mock auto-creates topics with 4 partitions


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def cluster_for(peer) -> Cluster:
    return await Cluster(peer.bootstrap, version_caps=peer.version_caps).start()


async def produce(cluster: Cluster, topic: str, per_partition: int) -> None:
    await cluster.wait_for_leaders([topic], allow_auto_create=True)
    producer = Producer(cluster)
    for i in range(per_partition * PARTITIONS):
        await producer.send(topic, f"{i}".encode(), partition=i % PARTITIONS)
    await producer.flush()


async def wait_until(pred, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not pred():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def drain(consumers, want: int, timeout: float = 20.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for c in consumers:
            got += await c.getmany(0.2)
    return got


def test_two_members_share_then_one_takes_all_and_commits_survive(rdkafka_mock):
    topic, group = new_name("kip848"), new_name("g848")

    async def go():
        async with await cluster_for(rdkafka_mock) as c1, await cluster_for(rdkafka_mock) as c2:
            await produce(c1, topic, 5)
            a = await Consumer(c1, [topic], group_id=group, group_protocol="consumer").start()
            assert sorted(await a.wait_for_assignment(15)) == [(topic, p) for p in range(PARTITIONS)]
            first = await drain([a], 20)                  # offsets 0-4 by A alone
            assert len(first) == 20
            b = await Consumer(c2, [topic], group_id=group, group_protocol="consumer").start()
            shared = await wait_until(lambda: b.membership.state is MemberState.STABLE
                                      and a.membership.state is MemberState.STABLE
                                      and len(a.assignment) == 2 and len(b.assignment) == 2, 20,
                                      "the partitions shared")
            assert set(a.assignment).isdisjoint(b.assignment)
            assert set(a.assignment) | set(b.assignment) == {(topic, p) for p in range(PARTITIONS)}
            # A never stopped: it kept its two partitions and their positions throughout
            assert all(tp in a.positions for tp in a.assignment)
            # A revoked two partitions and committed them first; B starts there (not at the
            # beginning, auto_offset_reset's earliest, which would repeat offsets 0-4)
            await produce(c1, topic, 5)
            rest = await drain([a, b], 20)
            everything = first + rest
            assert sorted((r.partition, r.offset) for r in everything) == \
                sorted((p, o) for p in range(PARTITIONS) for o in range(10)), "each record exactly once"
            await b.commit()
            await a.commit()
            t0 = time.monotonic()
            await b.close()                               # leaves with epoch -1
            closed = time.monotonic() - t0
            took_over = await wait_until(lambda: len(a.assignment) == PARTITIONS
                                         and a.membership.state is MemberState.STABLE, 20, "A takes all")
            # the committed offsets of B's partitions are where B got to
            committed = await a.committed([(topic, p) for p in range(PARTITIONS)])
            assert committed == {(topic, p): 10 for p in range(PARTITIONS)}
            await produce(c1, topic, 1)
            more = await drain([a], 4)
            assert sorted((r.partition, r.offset) for r in more) == [(p, 10) for p in range(PARTITIONS)]
            await a.close()
            assert a.membership.state is MemberState.UNSUBSCRIBED
            print(f"\nshare: {shared:.2f} s, take over after leave: {took_over:.2f} s "
                  f"(the leaving member's close: {closed:.2f} s)")

    run(go())


def test_regex_subscription_is_resolved_by_the_broker(rdkafka_mock):
    prefix = new_name("rx")
    group = new_name("g848rx")

    async def go():
        async with await cluster_for(rdkafka_mock) as c:
            for name in (f"{prefix}-a", f"{prefix}-b", new_name("other")):
                await produce(c, name, 1)
            cons = await Consumer(c, [], pattern=f"^{prefix}-.*", group_id=group, group_protocol="consumer").start()
            got = sorted(await cons.wait_for_assignment(15))
            assert got == sorted((f"{prefix}-{x}", p) for x in "ab" for p in range(PARTITIONS))
            records = await drain([cons], 8)
            assert sorted({r.topic for r in records}) == [f"{prefix}-a", f"{prefix}-b"]
            await cons.close()

    run(go())


def test_fenced_member_releases_and_rejoins(rdkafka_mock):
    topic, group = new_name("fence"), new_name("g848f")

    async def go():
        async with await cluster_for(rdkafka_mock) as c1, await cluster_for(rdkafka_mock) as c2:
            await produce(c1, topic, 2)
            a = await Consumer(c1, [topic], group_id=group, group_protocol="consumer",
                               enable_auto_commit=False).start()
            await a.wait_for_assignment(15)
            assert len(await drain([a], 8)) == 8
            await a.commit()                              # offsets 2
            await produce(c1, topic, 1)
            assert len(await drain([a], 4)) == 4          # offsets 2, consumed, not committed
            m = a.membership
            mid = m.member_id
            m.member_epoch += 7   # an epoch the broker never gave: the mock fences the member
            m._next_heartbeat = 0.0
            m.state = MemberState.ACKNOWLEDGING           # heartbeat at once
            a._wake.set()
            await wait_until(lambda: m.error is not None, 10, "the fence")
            assert m.error[0] == ErrorCode.FENCED_MEMBER_EPOCH
            # the partitions were lost: positions dropped, nothing committed
            await wait_until(lambda: m.state is not MemberState.FENCED, 5, "rejoining")
            assert m.member_id == mid                     # the same member, with epoch 0 again
            # librdkafka's mock answers the rejoin of a member it still knows with its old epoch
            # and no assignment (a real broker sends the assignment to every epoch-0 heartbeat);
            # a new member makes it compute a new target for both
            b = await Consumer(c2, [topic], group_id=group, group_protocol="consumer",
                               enable_auto_commit=False).start()
            await wait_until(lambda: m.state is MemberState.STABLE and len(a.assignment) == 2
                             and b.membership.state is MemberState.STABLE and len(b.assignment) == 2,
                             20, "rejoined and shared")
            assert m.member_epoch > 0
            again = await drain([a, b], 4)
            assert sorted((r.partition, r.offset) for r in again) == [(p, 2) for p in range(PARTITIONS)]
            await b.close()
            await a.close()

    run(go())


def test_with_a_confluent_kafka_member_in_the_same_group(rdkafka_mock):
    ck = pytest.importorskip("confluent_kafka")
    topic, group = new_name("mixed"), new_name("g848ck")

    async def go():
        async with await cluster_for(rdkafka_mock) as c:
            await produce(c, topic, 5)
            ours = await Consumer(c, [topic], group_id=group, group_protocol="consumer").start()
            await ours.wait_for_assignment(15)
            theirs = ck.Consumer({"bootstrap.servers": rdkafka_mock.bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
            theirs.subscribe([topic])
            their_records: list = []
            loop = asyncio.get_running_loop()
            ours_records: list = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = await loop.run_in_executor(None, theirs.poll, 0.2)
                if msg is not None and not msg.error():
                    their_records.append((msg.partition(), msg.offset()))
                ours_records += [(r.partition, r.offset) for r in await ours.getmany(0.1)]
                theirs_parts = {(tp.topic, tp.partition) for tp in theirs.assignment()}
                if (len(ours.assignment) == 2 and len(theirs_parts) == 2
                        and ours.membership.state is MemberState.STABLE
                        and len(set(ours_records) | set(their_records)) == 20):
                    break
            theirs_parts = {(tp.topic, tp.partition) for tp in theirs.assignment()}
            assert len(ours.assignment) == 2 and len(theirs_parts) == 2
            assert set(ours.assignment).isdisjoint(theirs_parts)
            # every record once over both members (ours committed what it gave up first)
            assert sorted(set(ours_records) | set(their_records)) == \
                sorted((p, o) for p in range(PARTITIONS) for o in range(5))
            assert not set(ours_records) & set(their_records)
            await loop.run_in_executor(None, theirs.close)
            await wait_until(lambda: len(ours.assignment) == PARTITIONS, 20, "ours takes all back")
            await ours.close()

    run(go(), timeout=120)
