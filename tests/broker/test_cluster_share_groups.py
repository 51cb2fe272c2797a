"""Share groups (KIP-932) on kproto's cluster (3 brokers, ``kafka_cluster``), placed as Apache
Kafka places them: the group on the leader of its ``__consumer_offsets`` partition, each
share-partition's in-flight records on the leader of its data partition, its durable state on
the leader of its ``__share_group_state`` partition. Records are delivered once and acknowledged;
a data-partition leader killed -9 mid-stream loses nothing (what it handed out unacknowledged
comes again, what was acknowledged does not); a killed share coordinator's states survive on
the next leader of its partition."""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Optional

import pytest

from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for
from kproto.broker.coordinators.share_state import SHARE_STATE_TOPIC, share_key
from kproto.broker.share_partition import ACKNOWLEDGED
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.producer import Producer
from kproto.client.share_consumer import ShareConsumer
from kproto.client.share_session import AcknowledgeType
from kproto.testing import ClusterThread

pytestmark = pytest.mark.kafka_cluster(group_share_assignment_interval_ms=0)

#: short locks and sessions, every record from the start of the log
GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000",
                "share.heartbeat.interval.ms": "500", "share.session.timeout.ms": "6000"}


def run(coro: Any, timeout: float = 120) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def produce(cluster: Cluster, topic: str, values: range, partitions: int) -> None:
    producer = await Producer(cluster).start()
    for i in values:
        await producer.send(topic, str(i).encode(), partition=i % partitions)
    await producer.close()


def topic_id(kafka_cluster: ClusterThread, topic: str) -> Any:
    return kafka_cluster.inspect(lambda c: c.image().topics[topic].topic_id)


def share_coordinator(kafka_cluster: ClusterThread, key: str) -> Optional[int]:
    n = kafka_cluster.inspect(lambda c: len(c.image().topics[SHARE_STATE_TOPIC].partitions))
    return kafka_cluster.leader(SHARE_STATE_TOPIC, partition_for(key, n))


def holders(kafka_cluster: ClusterThread, what: Any) -> list[int]:
    """The brokers where ``what(core)`` is true."""
    return kafka_cluster.inspect(lambda c: [n for n, b in sorted(c.brokers.items())
                                            if b.core is not None and not b.core.detached and what(b.core)])


async def consume(consumer: ShareConsumer, want: set[int], seen: list[tuple[int, int, int]],
                  deadline_s: float = 60) -> None:
    """Poll, accepting everything, until every value of ``want`` was accepted; ``seen`` gets
    (value, partition, delivery count) of each delivery."""
    deadline = time.monotonic() + deadline_s
    while not want <= {v for v, _, _ in seen} and time.monotonic() < deadline:
        for r in await consumer.poll(0.3):
            consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            seen.append((int(r.value or b"-1"), r.partition, r.delivery_count))
        await consumer.commit_sync()


def test_share_group_over_spread_leaders_delivers_each_record_once(kafka_cluster: ClusterThread) -> None:
    topic, group = new_name("share-spread"), new_name("share-g")
    kafka_cluster.create_topic(topic, 6, 3)
    leaders = {p: kafka_cluster.leader(topic, p) for p in range(6)}
    assert set(leaders.values()) == {1, 2, 3}

    async def main() -> tuple[list, list, dict]:
        async with Cluster(kafka_cluster.bootstrap) as cluster:
            await Admin(cluster).alter_configs({("group", group): GROUP_CONFIG})
            await produce(cluster, topic, range(60), 6)
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            b = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            seen: list = []
            await asyncio.gather(consume(a, set(range(60)), seen), consume(b, set(range(60)), seen))
            await asyncio.sleep(2.5)  # past the lock duration: anything held would come back
            extra = await a.poll(0.5) + await b.poll(0.5)
            lags = await Admin(cluster).list_share_group_offsets(group)
            placed = placement()
            await a.close()
            await b.close()
            return seen, extra, lags, placed

    def placement() -> tuple[dict, dict]:
        """Where things live, (found, expected): the group on its coordinator, each
        share-partition on its data leader, each state on its share coordinator."""
        tid = topic_id(kafka_cluster, topic)
        n_offsets = kafka_cluster.inspect(lambda c: len(c.image().topics[OFFSETS_TOPIC].partitions))
        found = {"group": holders(kafka_cluster, lambda core: group in core.share_groups.groups)}
        expected = {"group": [kafka_cluster.leader(OFFSETS_TOPIC, partition_for(group, n_offsets))]}
        for p in range(6):
            key = (group, tid, p)
            found[f"in flight {p}"] = holders(kafka_cluster, lambda core: key in core.shares.partitions)
            expected[f"in flight {p}"] = [leaders[p]]
            found[f"state {p}"] = holders(kafka_cluster, lambda core: key in core.share_state.states)
            expected[f"state {p}"] = [share_coordinator(kafka_cluster, share_key(*key))]
        return found, expected

    seen, extra, lags, (found, expected) = run(main())
    assert sorted(v for v, _, _ in seen) == list(range(60)), seen
    assert all(count == 1 and v % 6 == p for v, p, count in seen)
    assert extra == []
    assert {p: lag for (_, p), (_, lag) in lags.items()} == {p: 0 for p in range(6)}
    assert found == expected
