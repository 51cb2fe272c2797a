"""kproto.testing's kafka_broker fixture, with kafka-python and aiokafka consumer groups."""
from __future__ import annotations

import asyncio
import time

import pytest

from kproto.broker import Intercept
from kproto.schemas.api_keys import ApiKey
from kproto.testing import TEST_DEFAULTS


def drain(consumers, want, timeout=15.0):
    """Poll kafka-python consumers in turn until ``want`` records arrived; value -> consumer index."""
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for records in c.poll(timeout_ms=50).values():
                for r in records:
                    got[r.value] = i
            c.commit()
    return got


@pytest.mark.kafka_broker(num_partitions=4)
def test_kafka_python_group_of_two_shares_partitions_commits_and_resumes_after_restart(kafka_broker):
    kafka = pytest.importorskip("kafka")
    assert kafka_broker.broker.core.config.group_initial_rebalance_delay_ms == \
        TEST_DEFAULTS["group_initial_rebalance_delay_ms"]
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5)
    for i in range(200):
        producer.send("kp", value=b"m%d" % i, partition=i % 4)
    producer.flush(10)
    producer.close()

    def member():
        consumer = kafka.KafkaConsumer("kp", bootstrap_servers=kafka_broker.bootstrap, group_id="kp-group",
                                       auto_offset_reset="earliest", enable_auto_commit=False,
                                       heartbeat_interval_ms=200, session_timeout_ms=6000,
                                       max_poll_records=20)
        # The partitions known before the first JoinGroup: a leader that joins without them
        # assigns nothing and rejoins once its metadata arrives, and kafka-python 3.0.12 drops
        # that rejoin's result if poll() times out while it is in flight (need_rejoin() turned
        # False when the leader computed the assignment): the member stays REBALANCING with no
        # partitions and no heartbeats until the broker expires it.
        assert consumer.partitions_for_topic("kp") == {0, 1, 2, 3}
        return consumer

    a = member()
    got = drain([a], 1)                    # a owns every partition and starts reading
    b = member()
    got.update(drain([a, b], 200 - len(got)))
    assert set(got) == {b"m%d" % i for i in range(200)}
    deadline = time.monotonic() + 10
    while not (a.assignment() and b.assignment()) and time.monotonic() < deadline:
        a.poll(timeout_ms=50)
        b.poll(timeout_ms=50)
    assert len(a.assignment()) + len(b.assignment()) == 4 and a.assignment() and b.assignment()
    a.close()
    b.close()
    kafka_broker.restart()
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(200, 220):
        producer.send("kp", value=b"m%d" % i, partition=i % 4)
    producer.flush(10)
    producer.close()
    c = member()
    got = drain([c], 20)
    time.sleep(0.2)
    got.update(drain([c], 0, 0.3))
    c.close()
    assert set(got) == {b"m%d" % i for i in range(200, 220)}


def test_aiokafka_produces_and_consumes_in_a_group_with_commits(kafka_broker):
    aiokafka = pytest.importorskip("aiokafka")

    async def main():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all",
                                             enable_idempotence=True)
        await producer.start()
        try:
            for i in range(100):
                await producer.send("aio", b"a%d" % i)
            await producer.flush()
        finally:
            await producer.stop()

        async def consume(n):
            consumer = aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=kafka_broker.bootstrap,
                                                 group_id="aio-group", auto_offset_reset="earliest",
                                                 enable_auto_commit=False)
            await consumer.start()
            got = []
            try:
                deadline = time.monotonic() + 10
                while len(got) < n and time.monotonic() < deadline:
                    batch = await consumer.getmany(timeout_ms=100)
                    for records in batch.values():
                        got += [r.value for r in records]
                await consumer.commit()
            finally:
                await consumer.stop()
            return got

        first = await consume(60)
        rest = await consume(100 - len(first))
        return first, rest

    first, rest = asyncio.run(asyncio.wait_for(main(), 30))
    assert len(first) >= 60
    assert first + rest == [b"a%d" % i for i in range(100)]     # resumed at the committed offset


def test_hooks_are_set_from_the_tests_thread(kafka_broker):
    ck = pytest.importorskip("confluent_kafka")
    hook = kafka_broker.control(ApiKey.PRODUCE, Intercept(error=6), times=2)  # NOT_LEADER twice
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap, "retry.backoff.ms": 10})
    errors = []
    p.produce("hooked", b"v", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(10) == 0
    assert errors == [None] and hook.seen == 2 and not hook.active
