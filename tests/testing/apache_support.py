"""Helpers of the Apache Kafka harness tests: kproto's client and confluent-kafka, run
synchronously against a bootstrap address."""
from __future__ import annotations

import asyncio
import time
from typing import Any


def kproto_produce_consume(bootstrap: str, topic: str, n: int, partitions: int = 1,
                           create: bool = True) -> tuple[list[Any], list[Any]]:
    """Create ``topic`` (unless not ``create``), produce ``n`` records with kproto's Producer
    and read them back with its Consumer: (delivery metadata, consumed records)."""
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer

    async def main() -> tuple[list[Any], list[Any]]:
        async with Cluster(bootstrap) as cluster:
            if create:
                await Admin(cluster).create_topics({topic: partitions})
            # not idempotent: kproto's Producer does not yet retry InitProducerId's retriable
            # COORDINATOR_LOAD_IN_PROGRESS, which a fresh Apache Kafka answers while it creates
            # __transaction_state (the harness is under test here, not the client)
            producer = await Producer(cluster, compression="lz4", idempotent=False).start()
            sent = [await producer.send(topic, b"v%d" % i, b"k%d" % i) for i in range(n)]
            await producer.flush()
            metas = [await s for s in sent]
            await producer.close()
            consumer = await Consumer(cluster, [topic], enable_auto_commit=False).start()
            got: list[Any] = []
            deadline = time.monotonic() + 20
            while len(got) < n and time.monotonic() < deadline:
                got += await consumer.getmany(0.5)
            await consumer.close()
        return metas, got

    return asyncio.run(asyncio.wait_for(main(), 60))


def confluent_consume(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of the first ``n`` records of a partition, read by librdkafka."""
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
    c.close()
    return got


def confluent_produce(bootstrap: str, topic: str, n: int, **config: Any) -> list[tuple[int, bytes, bytes]]:
    """Produce ``n`` records (acks=all, idempotent) with librdkafka: (offset, key, value) acked."""
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, **config})
    acked: list[tuple[Any, int, bytes, bytes]] = []
    for i in range(n):
        p.produce(topic, value=b"c%d" % i, key=b"%d" % i,
                  on_delivery=lambda err, msg: acked.append((err, msg.offset(), msg.key(), msg.value())))
    assert p.flush(30) == 0
    assert all(err is None for err, *_ in acked), acked[:3]
    return [(o, k, v) for _, o, k, v in acked]
