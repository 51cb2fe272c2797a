"""Real clients against the in-process broker on 127.0.0.1: kproto's own client and
confluent-kafka (librdkafka); the data directory afterwards is read by kproto.storage.

A test that takes the ``any_broker`` fixture (kproto.testing) runs twice, against kproto's
broker (``[kproto]``) and against Apache Kafka's single node (``[apache]``, skipped without
Java and the jars of tools/setup.sh, failing under CI): Apache Kafka is the judge, so what the
test asserts must hold for both. Apache Kafka's node is shared by the session's tests: use
topic names of your own. ``isinstance(any_broker, ApacheKafka)`` tells them apart where they
differ by design (the data directory: ``any_broker.log_dir(1)`` or ``any_broker.data_dir``)."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

import kproto
import kproto.storage as ks
from kproto.broker import Broker
from kproto.testing.apache import ApacheKafka


def run(coro, timeout=30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def records_of(data_dir, topic):
    table = ks.read_arrow(str(data_dir), topics=[topic])
    rows = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                      table.column("key").to_pylist(), table.column("value").to_pylist()))
    return rows


def test_kproto_client_admin_produce_consume_and_the_directory_reads_back(tmp_path):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer

    async def main():
        async with Broker(tmp_path / "data") as broker:
            async with Cluster(broker.bootstrap) as cluster:
                admin = Admin(cluster)
                await admin.create_topics({"events": 3})
                assert "events" in await admin.list_topics()
                producer = await Producer(cluster, compression="lz4").start()
                sent = [await producer.send("events", b"v%d" % i, b"k%d" % i) for i in range(300)]
                await producer.flush()
                metas = [await s for s in sent]
                await producer.close()
                ends = await admin.list_offsets([("events", p) for p in range(3)], "latest")
                assert sum(ends.values()) == 300
                consumer = await Consumer(cluster, ["events"], enable_auto_commit=False).start()
                got = []
                deadline = time.monotonic() + 10
                while len(got) < 300 and time.monotonic() < deadline:
                    got += await consumer.getmany(0.5)
                await consumer.close()
        return metas, got

    metas, got = run(main())
    assert sorted((r.partition, r.offset, r.key, r.value) for r in got) == \
        sorted((m.partition, m.offset, b"k%d" % i, b"v%d" % i) for i, m in enumerate(metas))
    assert records_of(tmp_path / "data", "events") == \
        sorted((m.partition, m.offset, b"k%d" % i, b"v%d" % i) for i, m in enumerate(metas))


def test_confluent_kafka_produces_and_consumes_with_every_codec_and_acks(any_broker):
    """Runs against kproto's broker and against Apache Kafka (``any_broker``): the same
    records, offsets and log directory contents from both."""
    ck = pytest.importorskip("confluent_kafka")
    # a topic of its own: Apache Kafka's node is shared by the session's tests
    topic = f"cktopic-{uuid.uuid4().hex[:8]}"
    expected = []
    for codec, acks in (("none", "all"), ("gzip", "1"), ("snappy", "all"), ("lz4", "1"), ("zstd", "all")):
        p = ck.Producer({"bootstrap.servers": any_broker.bootstrap, "compression.codec": codec,
                         "acks": acks, "linger.ms": 5, "enable.idempotence": acks == "all"})
        acked = []
        for i in range(200):
            p.produce(topic, value=b"%s-%d" % (codec.encode(), i), key=b"%d" % i,
                      on_delivery=lambda err, msg: acked.append((err, msg.offset(), msg.key(), msg.value())))
        assert p.flush(20) == 0
        assert all(err is None for err, *_ in acked), acked[:3]
        expected += [(0, off, k, v) for _, off, k, v in acked]
    c = ck.Consumer({"bootstrap.servers": any_broker.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < len(expected) and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.key(), m.value()))
    c.close()
    assert sorted(got) == sorted(expected) and len(expected) == 1000
    assert [o for _, o, _, _ in sorted(expected)] == list(range(1000))
    data_dir = any_broker.log_dir(1) if isinstance(any_broker, ApacheKafka) else any_broker.data_dir
    assert records_of(data_dir, topic) == sorted(expected)


def test_a_long_poll_answers_within_a_few_ms_of_the_data_arriving(tmp_path):
    """A raw Fetch (max.wait 500 ms) is waiting; a record is produced 100 ms into the wait:
    the answer comes right after the produce, not at 500 ms."""
    from kproto.client.cluster import Cluster
    from kproto.client.producer import Producer

    async def main():
        async with Broker(tmp_path / "data") as broker:
            async with Cluster(broker.bootstrap) as cluster:
                producer = await Producer(cluster, linger_ms=0).start()
                await (await producer.send("lp", b"first"))
                delays = []
                for i in range(5):
                    reader, writer = await asyncio.open_connection(broker.host, broker.port)
                    req = kproto.request(1).cls
                    body = req(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_id=0,
                               session_epoch=-1, topics=[req.FetchTopic(topic="lp", partitions=[
                                   req.FetchPartition(partition=0, fetch_offset=1 + i,
                                                      partition_max_bytes=1 << 20)])])
                    writer.write(kproto.encode_request(kproto.RequestHeader(
                        request_api_key=1, request_api_version=12, correlation_id=1, client_id="lp"), body))
                    await writer.drain()
                    await asyncio.sleep(0.1)
                    t0 = time.perf_counter()
                    ack = await producer.send("lp", b"v%d" % i)
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    frame = await reader.readexactly(size)
                    t1 = time.perf_counter()
                    await ack
                    _, resp = kproto.decode_response(frame, 1, 12, size_prefix=False)
                    assert resp.responses[0].partitions[0].records
                    delays.append((t1 - t0) * 1000)
                    writer.close()
                await producer.close()
                return delays

    delays = run(main())
    # the send, its Produce round trip and the fetch answer: milliseconds, not the 400 ms left
    assert max(delays) < 50, delays
    print("long-poll answer after the produce (ms):", [round(d, 1) for d in delays])


def test_confluent_kafka_long_poll_latency(tmp_path):
    ck = pytest.importorskip("confluent_kafka")

    async def main():
        async with Broker(tmp_path / "data") as broker:
            def work():
                p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
                p.produce("cl", b"warm")
                p.flush(5)
                c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                                 "fetch.wait.max.ms": 500, "enable.auto.commit": False})
                c.assign([ck.TopicPartition("cl", 0, ck.OFFSET_BEGINNING)])
                assert c.poll(5).value() == b"warm"
                lat = []
                for i in range(5):
                    time.sleep(0.15)  # the consumer is now in a long poll
                    sent = time.perf_counter()
                    p.produce("cl", b"%d" % i)
                    p.flush(5)
                    m = c.poll(5)
                    lat.append((time.perf_counter() - sent) * 1000)
                    assert m is not None and m.value() == b"%d" % i
                c.close()
                return lat
            return await asyncio.to_thread(work)

    lat = run(main(), 60)
    print("confluent-kafka produce-to-consume with a waiting fetch (ms):", [round(x, 1) for x in lat])
    assert sorted(lat)[len(lat) // 2] < 100, lat
