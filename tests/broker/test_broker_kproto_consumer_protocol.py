"""kproto's own KIP-848 consumer (``group_protocol="consumer"``) against kproto's broker: the
two halves of the protocol written apart (kproto.client.membership, kproto.broker.coordinators.consumer_group)
meet, with the broker's server-side assignor and its revoke-before-assign rule."""
from __future__ import annotations

import asyncio
import time

from kproto.broker import Broker
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.membership import MemberState
from kproto.client.producer import Producer

TOPIC, GROUP, PARTITIONS = "k848", "k848-group", 4
CFG = dict(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=2,
           group_consumer_heartbeat_interval_ms=100, num_partitions=PARTITIONS)


async def produce(cluster: Cluster, start: int, n: int) -> None:
    producer = Producer(cluster)
    for i in range(start, start + n):
        await producer.send(TOPIC, b"r%d" % i, partition=i % PARTITIONS)
    await producer.flush()


async def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


async def drain(consumers, values: list, want: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while len(values) < want and time.monotonic() < deadline:
        for c in consumers:
            values += [r.value for r in await c.getmany(0.1)]
            await c.commit()


def test_two_kproto_members_share_hand_over_and_commit(tmp_path):
    async def go():
        async with Broker(tmp_path / "data", **CFG) as broker:
            async with await Cluster(broker.bootstrap).start() as c0, \
                    await Cluster(broker.bootstrap).start() as c1, \
                    await Cluster(broker.bootstrap).start() as c2:
                await c0.wait_for_leaders([TOPIC], allow_auto_create=True)
                await produce(c0, 0, 40)
                a = await Consumer(c1, [TOPIC], group_id=GROUP, group_protocol="consumer").start()
                assert sorted(await a.wait_for_assignment(10)) == [(TOPIC, p) for p in range(PARTITIONS)]
                values: list = []
                await drain([a], values, 40)
                b = await Consumer(c2, [TOPIC], group_id=GROUP, group_protocol="consumer").start()
                await wait_until(lambda: a.membership.state is MemberState.STABLE
                                 and b.membership.state is MemberState.STABLE
                                 and len(a.assignment) == 2 and len(b.assignment) == 2, 10,
                                 "the partitions shared two and two")
                assert set(a.assignment).isdisjoint(b.assignment)
                await produce(c0, 40, 40)
                await drain([a, b], values, 80)
                group = broker.core.groups.consumer.groups[GROUP]
                assert group.state == "Stable" and len(group.members) == 2
                await b.close()                      # leaves: a takes b's partitions back
                await wait_until(lambda: len(a.assignment) == PARTITIONS, 10, "a owns all again")
                await produce(c0, 80, 20)
                await drain([a], values, 100)
                await a.close()
                committed = {tp: om.offset for tp, om in group.offsets.items()}
                return values, committed

    values, committed = asyncio.run(asyncio.wait_for(go(), 60))
    assert sorted(values) == sorted(b"r%d" % i for i in range(100))   # each once, none lost
    assert committed == {(TOPIC, p): 25 for p in range(PARTITIONS)}
