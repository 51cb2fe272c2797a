"""kproto's client against real brokers: kproto's own (``kafka_broker``) and Apache Kafka 4.4.0's
single node (``apache_kafka``, shared by the session), through ``any_broker``.

What the tests of the peers (test_client_io_interop.py) do not reach: producers at acks 0, 1
and all, the KIP-848 consumer group protocol, static members, a seek by time, and the admin
client's methods; and the answers a broker gives while it is still creating its internal
topics, which a fresh Apache Kafka gives and kproto's broker gives on request (an Intercept).
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from kproto.broker import Intercept
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.producer import Producer
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def is_apache(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.callspec.params["any_broker"] == "apache")


async def consume(consumer: Consumer, count: int, deadline_s: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.getmany(0.3)
    return got


# ---- a broker still creating its internal topics ------------------------------------------------

def test_idempotent_producer_retries_init_producer_id_while_the_coordinator_loads(kafka_broker):
    # a fresh Apache Kafka answers COORDINATOR_LOAD_IN_PROGRESS while it creates
    # __transaction_state; Kafka's producer retries it after its backoff
    hook = kafka_broker.control(ApiKey.INIT_PRODUCER_ID,
                                Intercept(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), times=3)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 1})
            producer = await Producer(cluster).start()
            meta = await (await producer.send("t", b"v"))
            await producer.close()
            return producer.producer_id, meta.offset

    pid, offset = run(main())
    assert hook.seen == 3 and pid >= 0 and offset == 0


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
def test_classic_consumer_rejoins_while_the_group_coordinator_loads(kafka_broker, code):
    # a fresh Apache Kafka answers JoinGroup with NOT_COORDINATOR while it creates
    # __consumer_offsets: Kafka's client looks the coordinator up again and joins again
    join = kafka_broker.control(ApiKey.JOIN_GROUP, Intercept(error=code), times=4)
    sync = kafka_broker.control(ApiKey.SYNC_GROUP, Intercept(error=code), times=1)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 2})
            producer = await Producer(cluster).start()
            for i in range(4):
                await producer.send("t", b"v%d" % i, partition=i % 2)
            await producer.close()
            consumer = await Consumer(cluster, ["t"], group_id="g", heartbeat_interval_ms=200).start()
            got = await consume(consumer, 4)
            assignment = sorted(consumer.assignment)
            await consumer.close()
            return got, assignment

    got, assignment = run(main())
    assert join.seen == 4 and sync.seen == 1
    assert assignment == [("t", 0), ("t", 1)] and len(got) == 4


def test_classic_consumer_gives_up_when_no_coordinator_answers(kafka_broker):
    kafka_broker.control(ApiKey.JOIN_GROUP, Intercept(error=ErrorCode.NOT_COORDINATOR), times=None)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 1})
            consumer = await Consumer(cluster, ["t"], group_id="g", rebalance_timeout_ms=1000).start()
            t0 = time.monotonic()
            with pytest.raises(Exception, match="NOT_COORDINATOR"):
                await consumer.getmany(0.1)
            return time.monotonic() - t0

    took = run(main())
    assert 1.0 <= took < 10
