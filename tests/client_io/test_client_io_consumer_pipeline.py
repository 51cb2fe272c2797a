"""The consumer's pipelined fetches on the real peers: the next FetchRequest leaves before
getmany returns, and an answer that arrived for a partition seeked or paused since its fetch
left is dropped (Kafka's Fetcher), so positions and records stay as without the pipeline."""
from __future__ import annotations

import asyncio

import pytest

from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.connection import Connection
from kproto.client.consumer import Consumer
from kproto.client.producer import Producer
from kproto.schemas.api_keys import ApiKey

from test_client_io_interop import cluster_for, consume_all, created_topic, new_topic, run


async def _answered(consumer: Consumer) -> None:
    """Until the fetch in flight has its answer (the broker got records meanwhile)."""
    for _ in range(200):
        if consumer._fetches and all(t.done() for t in consumer._fetches.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the fetch in flight got no answer")


@pytest.mark.apache
def test_next_fetch_leaves_before_getmany_returns(peer, monkeypatch):
    topic = created_topic(peer, "pipeline")
    fetches: list[int] = []
    send = Connection.send

    def counting(conn, body, *args, **kwargs):
        if body.API_KEY == ApiKey.FETCH:
            fetches.append(len(fetches))
        return send(conn, body, *args, **kwargs)

    monkeypatch.setattr(Connection, "send", counting)

    async def main():
        async with await cluster_for(peer) as cluster:
            producer = await Producer(cluster).start()
            for i in range(5):
                await producer.send(topic, b"v%d" % i, partition=0)
            await producer.flush()
            consumer = await Consumer(cluster, [topic], fetch_max_wait_ms=200).start()
            got: list = []
            calls = 0
            while len(got) < 5 and calls < 40:
                got += await consumer.getmany(0.5)
                calls += 1
            sent = len(fetches)
            await consumer.close()
            await producer.close()
            return got, calls, sent

    got, calls, sent = run(main())
    assert [r.value for r in got] == [b"v%d" % i for i in range(5)]
    # each call read one answer and sent the next fetch before it returned
    assert sent == calls + 1


def test_answers_for_seeked_or_paused_partitions_are_dropped(apache_kafka):
    """Against Apache Kafka only: it answers one batch per partition when the partition's
    byte limit is smaller (the other peers send more, and the test needs one at a time)."""
    topic = new_topic("pipeline-stale")
    p0 = (topic, 0)

    async def main():
        async with await Cluster(apache_kafka.bootstrap).start() as cluster:
            await Admin(cluster).create_topics({topic: 2})
            await cluster.wait_for_leaders([topic])
            producer = await Producer(cluster).start()

            async def write(values):
                for v in values:
                    await producer.send(topic, v, partition=0)
                await producer.flush()

            # three batches; one batch per partition and answer (max_partition_fetch_bytes=1)
            await write([b"a%d" % i for i in range(10)])
            await write([b"a10", b"a11", b"a12"])
            await write([b"a13", b"a14"])
            consumer = await Consumer(cluster, [topic], max_partition_fetch_bytes=1).start()
            first = await consume_all(consumer, 10)
            # the next fetch (from 10) left before getmany returned; its answer holds 10..12
            await _answered(consumer)
            consumer.seek(topic, 0, 3)
            after_seek = await consume_all(consumer, 10)
            position_after_seek = consumer.position(*p0)
            # the same with a pause: the answer holding 13..14 is not returned, nor lost
            await _answered(consumer)
            consumer.pause(p0)
            while_paused = await consume_all(consumer, 1, deadline_s=1.5)
            position_paused = consumer.position(*p0)
            consumer.resume(p0)
            after_resume = await consume_all(consumer, 2)
            await consumer.close()
            await producer.close()
            return first, after_seek, position_after_seek, while_paused, position_paused, after_resume

    first, after_seek, pos_seek, while_paused, pos_paused, after_resume = run(main())
    assert [r.offset for r in first] == list(range(10))
    assert [(r.offset, r.value) for r in after_seek] == [(i, b"a%d" % i) for i in range(3, 13)]
    assert pos_seek == 13
    assert while_paused == [] and pos_paused == 13
    assert [(r.offset, r.value) for r in after_resume] == [(13, b"a13"), (14, b"a14")]


def test_a_fetch_sent_earlier_is_waited_for_until_the_timeout_only(apache_kafka):
    """The fetch left in flight by getmany(5) may wait 3 s in the broker at the log's end
    (fetch_max_wait_ms); getmany(0.1) returns after its own timeout, the fetch still out, and
    a producer on the same cluster is not held up behind it."""
    topic = new_topic("pipeline-wait")

    async def main():
        async with await Cluster(apache_kafka.bootstrap).start() as cluster:
            await Admin(cluster).create_topics({topic: 1})
            await cluster.wait_for_leaders([topic])
            producer = await Producer(cluster).start()
            await producer.send(topic, b"x", partition=0)
            await producer.flush()
            consumer = await Consumer(cluster, [topic], fetch_max_wait_ms=3000).start()
            first = await consumer.getmany(5.0)  # the next fetch leaves with max wait 3 s
            loop = asyncio.get_running_loop()
            t = loop.time()
            short = await consumer.getmany(0.1)
            took = loop.time() - t
            still_out = bool(consumer._fetches)
            # the producer shares the cluster, not the fetch's connection: a broker answers a
            # connection's requests in order, so the Produce would wait out the fetch there
            t = loop.time()
            await producer.send(topic, b"y", partition=0)  # the fetch in flight answers it
            await producer.flush()
            produced_in = loop.time() - t
            later = await consume_all(consumer, 1)
            await consumer.close()
            await producer.close()
            return first, short, took, still_out, produced_in, later

    first, short, took, still_out, produced_in, later = run(main())
    assert [r.value for r in first] == [b"x"] and short == [] and still_out
    assert took < 1.5 and produced_in < 1.5
    assert [r.value for r in later] == [b"y"]
