"""A producer over its byte-rate quota is held to the quota, on kproto's broker as on Apache
Kafka 4.4.0: confluent-kafka writes as fast as it can for 10 s under a 200 KB/s
producer_byte_rate set with AlterClientQuotas at runtime, and what it got acknowledged in those
10 s is within 10% of 10 s of quota (the broker answers with throttle_time_ms and mutes the
connection, librdkafka waits that long before its next request to it)."""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Optional

import pytest

from kproto.client.connection import Connection
from kproto.conformance.scenario import build
from kproto.schemas.api_keys import ApiKey

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

QUOTA = 200_000.0   # bytes per second
SECONDS = 10.0
VALUE = 1000        # bytes per record, four to a request: small requests keep the overshoot small


def set_producer_quota(bootstrap: str, client_id: str, rate: Optional[float]) -> None:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    op = {"key": "producer_byte_rate", "value": rate or 0.0, "remove": rate is None}

    async def go() -> Any:
        async with await Connection.open(host, int(port)) as conn:
            return await conn.request(build(ApiKey.ALTER_CLIENT_QUOTAS, validate_only=False, entries=[
                {"entity": [{"entity_type": "client-id", "entity_name": client_id}], "ops": [op]}]), 1)
    resp = asyncio.run(go())
    assert [e.error_code for e in resp.entries] == [0]


def throttled_rate(bootstrap: str) -> tuple[float, int]:
    """Bytes per second acknowledged to a producer writing flat out for SECONDS, and the
    largest throttle time it was told (from its statistics)."""
    client_id = f"quota-{uuid.uuid4().hex[:8]}"
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    set_producer_quota(bootstrap, client_id, QUOTA)
    time.sleep(1.0)  # Apache Kafka's brokers apply a quota once its record reaches them
    throttles: list[int] = []

    def stats(doc: str) -> None:
        import json
        for b in json.loads(doc).get("brokers", {}).values():
            throttles.append(int(b.get("throttle", {}).get("max", 0)))

    producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                            "batch.size": 4096, "max.in.flight.requests.per.connection": 1,
                            "queue.buffering.max.kbytes": 256, "acks": 1,
                            "statistics.interval.ms": 500, "stats_cb": stats})
    acked: list[tuple[float, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))
    value = b"q" * VALUE
    try:
        for _ in range(20):  # the topic's leader known before the clock starts
            if producer.list_topics(topic, timeout=5).topics[topic].partitions[0].leader >= 0:
                break
            time.sleep(0.2)
        start = time.monotonic()
        while time.monotonic() - start < SECONDS:
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
            except BufferError:
                producer.poll(0.02)
                continue
            producer.poll(0)
        producer.poll(0.1)
        got = sum(n for t, n in acked if t - start <= SECONDS)
    finally:
        producer.purge()
        producer.flush(5)
        set_producer_quota(bootstrap, client_id, None)
    return got / SECONDS, max(throttles, default=0)


@pytest.mark.slow
@pytest.mark.parametrize("broker", ["kafka_broker", "apache_kafka"])
def test_a_producer_over_its_byte_rate_is_held_to_it(broker: str, request: pytest.FixtureRequest) -> None:
    rate, throttle_ms = throttled_rate(request.getfixturevalue(broker).bootstrap)
    assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate:.0f} B/s under a quota of {QUOTA:.0f}"
    assert throttle_ms > 0  # the broker said so in its answers
