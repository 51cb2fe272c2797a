"""Benchmarks of the asyncio client against a real broker (tansu or Apache Kafka on loopback).

    python benchmarks/bench_client_io.py [--broker tansu|apache] [--bootstrap HOST:PORT]
        [--records N] [--rounds 3] [--peers confluent,java,aiokafka,kafka-python] [--quick]

Without ``--bootstrap`` it starts tansu through ``$KPROTO_PEERS/tansu.py`` (default
``../shared/peers``) or, with ``--broker apache``, Apache Kafka 4.4.0 (one combined-mode node,
kproto.testing.apache, its JVM as Kafka's start script runs it). Reports: pipelined
Heartbeat round trips per second on one connection (and one at a time, for comparison), and
producer/consumer throughput in records/s and MB/s per compression codec, next to
confluent-kafka, the Java client (Kafka's ProducerPerformance/ConsumerPerformance tools:
null keys, the consumer's fetch phase only, its group join left out), aiokafka and
kafka-python: acks=all, linger 5 ms, 64 KiB batches, idempotent producers (not against tansu,
which answers InitProducerId with an error). Each round every client produces to a fresh
4-partition topic, then every client's fresh consumer reads the same records (kproto's topic
of the round) from the start: its clock starts once it is connected and has the topic's
metadata, no group join in anyone's time, and stops at the n-th record. The medians of the
rounds, the consumers' CPU seconds (this process, every thread) and the ratios are printed.
200,000 records by default: 50,000 take a consumer 0.05-0.2 s, where its first fetch and
start-up weigh as much as the records.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _bench_support

import kproto  # noqa: E402
from kproto.client.admin import Admin  # noqa: E402
from kproto.client.cluster import Cluster  # noqa: E402
from kproto.client.consumer import Consumer  # noqa: E402
from kproto.client.producer import Producer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("KPROTO_PEERS", REPO.parent / "shared" / "peers"))


def bench_protocol_core(n: int) -> None:
    """The sans-I/O cost per request: encode, then match and decode its answer."""
    from kproto.client.protocol import ClientProtocol
    from kproto.framing import ResponseHeader, encode_response

    proto = ClientProtocol()
    req = kproto.request(12).cls(group_id="g", generation_id=1, member_id="m")
    resp = kproto.response(12).cls(error_code=16)
    answers = b"".join(encode_response(ResponseHeader(correlation_id=i), resp, 12, 4) for i in range(n))
    t = time.perf_counter()
    for i in range(n):
        proto.encode(req, 4, i)
    t_enc = time.perf_counter() - t
    t = time.perf_counter()
    got = proto.feed(answers)
    t_dec = time.perf_counter() - t
    assert len(got) == n
    print(f"ClientProtocol (Heartbeat v4): encode {t_enc / n * 1e6:.1f} us, "
          f"match+decode {t_dec / n * 1e6:.1f} us per request")


async def bench_round_trips(bootstrap: str, n: int) -> None:
    async with Cluster(bootstrap) as cluster:
        conn = await cluster.bootstrap_connection()
        # A request with a tiny answer (an error), so the numbers measure the round trip and
        # not the decoding of a big body.
        req = kproto.request(12).cls(group_id="bench-none", generation_id=1, member_id="m")
        t = time.perf_counter()
        for _ in range(n // 10):
            await conn.request(req)
        serial = (n // 10) / (time.perf_counter() - t)
        t = time.perf_counter()
        await asyncio.gather(*(conn.send(req) for _ in range(n)))
        piped = n / (time.perf_counter() - t)
    print(f"Heartbeat round trips: {serial:,.0f}/s one at a time, {piped:,.0f}/s pipelined ({n} in flight)")


# Each client has a producer (writes n records to its own topic; returns seconds) and a
# consumer (reads the n records of the round's shared topic from the start; returns wall and
# CPU seconds). The consumers' clocks start once they are connected and know the topic's
# metadata, before any fetch; none joins a group inside its time.

def _cpu() -> float:
    """CPU seconds of this process, every thread (librdkafka's included)."""
    return time.process_time()


async def _kproto_produce(bootstrap: str, topic: str, n: int, value: bytes, codec: str,
                          idempotent: bool = True) -> float:
    async with Cluster(bootstrap) as cluster:
        producer = await Producer(cluster, compression=codec, linger_ms=5, batch_size=65536,
                                  idempotent=idempotent).start()
        t = time.perf_counter()
        futs = [await producer.send(topic, value, b"%d" % (i % 1000)) for i in range(n)]
        await producer.flush()
        dt = time.perf_counter() - t
        assert all(f.exception() is None for f in futs)
        await producer.close()
        return dt


async def _kproto_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    async with Cluster(bootstrap) as cluster:
        consumer = await Consumer(cluster, [topic], fetch_max_wait_ms=50).start()
        t, c = time.perf_counter(), _cpu()
        got = 0
        while got < n:
            got += len(await consumer.getmany(1.0))
        dt, dc = time.perf_counter() - t, _cpu() - c
        await consumer.close()
        return dt, dc


async def _aiokafka_produce(bootstrap: str, topic: str, n: int, value: bytes, codec: str,
                            idempotent: bool = True) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                                compression_type=None if codec == "none" else codec,
                                linger_ms=5, max_batch_size=65536)
    await producer.start()
    try:
        t = time.perf_counter()
        futs = [await producer.send(topic, value, key=b"%d" % (i % 1000)) for i in range(n)]
        await producer.flush()
        await asyncio.gather(*futs)
        return time.perf_counter() - t
    finally:
        await producer.stop()


async def _aiokafka_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50, enable_auto_commit=False)
    await consumer.start()
    t, c = time.perf_counter(), _cpu()
    got = 0
    while got < n:
        got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
    dt, dc = time.perf_counter() - t, _cpu() - c
    await consumer.stop()
    return dt, dc


def _kafka_python_produce(bootstrap: str, topic: str, n: int, value: bytes, codec: str,
                          idempotent: bool = True) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=5, batch_size=65536)
    t = time.perf_counter()
    for i in range(n):
        producer.send(topic, value, key=b"%d" % (i % 1000))
    producer.flush()
    dt = time.perf_counter() - t
    producer.close()
    return dt


def _kafka_python_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             fetch_max_wait_ms=50, enable_auto_commit=False)
    t, c = time.perf_counter(), _cpu()
    got = 0
    while got < n:
        got += sum(len(v) for v in consumer.poll(timeout_ms=1000).values())
    dt, dc = time.perf_counter() - t, _cpu() - c
    consumer.close()
    return dt, dc


def _confluent_produce(bootstrap: str, topic: str, n: int, value: bytes, codec: str,
                       idempotent: bool = True) -> float:
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                            "compression.type": codec, "linger.ms": 5, "batch.size": 65536,
                            "queue.buffering.max.messages": max(n, 100_000)})
    t = time.perf_counter()
    for i in range(n):
        producer.produce(topic, value, b"%d" % (i % 1000))
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("confluent-kafka: records left undelivered")
    return time.perf_counter() - t


def _confluent_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                            "queued.min.messages": max(n, 100_000) + 1})
    # assigned, not subscribed: the other clients' consumers join no group in their time either
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    t, c = time.perf_counter(), _cpu()
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts])
    got = 0
    while got < n:
        got += sum(1 for m in consumer.consume(min(10000, n - got), 1.0) if m.error() is None)
    dt, dc = time.perf_counter() - t, _cpu() - c
    consumer.close()
    return dt, dc


def _java_produce(bootstrap: str, topic: str, n: int, value: bytes, codec: str,
                  idempotent: bool = True) -> float:
    from _bench_support import java_produce

    prod = java_produce(bootstrap, n, len(value), topic, "all",
                        props=(f"compression.type={codec}", "linger.ms=5", "batch.size=65536",
                               f"enable.idempotence={str(idempotent).lower()}"))
    return n / prod["rate"]


def _java_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from _bench_support import java_consume

    return n / java_consume(bootstrap, n, topic)["rate"], float("nan")  # another process


CLIENTS: dict[str, tuple[Any, Any]] = {
    "kproto": (_kproto_produce, _kproto_consume), "aiokafka": (_aiokafka_produce, _aiokafka_consume),
    "kafka-python": (_kafka_python_produce, _kafka_python_consume),
    "confluent": (_confluent_produce, _confluent_consume), "java": (_java_produce, _java_consume)}


async def _call(fn: Any, *args: Any) -> Any:
    if asyncio.iscoroutinefunction(fn):
        return await fn(*args)
    return await asyncio.to_thread(fn, *args)


async def bench_produce_consume(bootstrap: str, n: int, size: int, codecs: list[str],
                                peers: list[str], rounds: int = 3, idempotent: bool = True) -> None:
    """Per round, each client (in turn) produces ``n`` records to a fresh 4-partition topic;
    then each client's fresh consumer reads the same records (the round's first topic, kproto's)
    from the start. The medians of the rounds count; consume CPU is this process's (every
    thread), so none for the Java tool."""
    value = (b"kproto benchmark payload " * (size // 25 + 1))[:size]
    mb = n * size / 1e6
    print(f"produce / consume, {n} x {size} B records, 4 partitions, acks=all, "
          f"{'idempotent' if idempotent else 'not idempotent'}, median of {rounds} interleaved "
          f"rounds, records/s (MB/s), consume CPU s:")
    # the broker's first requests (a JVM's JIT, a Python broker's first-touch work) in no round
    warm = f"bench-warmup-{uuid.uuid4().hex[:6]}"
    async with Cluster(bootstrap) as cluster:
        await Admin(cluster).create_topics({warm: 4})
        await cluster.wait_for_leaders([warm])
    await _call(_confluent_produce, bootstrap, warm, 20_000, value, "none", idempotent)
    await _call(_confluent_consume, bootstrap, warm, 20_000)
    clients = ["kproto"] + peers
    for codec in codecs:
        times: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(rounds):
            produced: dict[str, float] = {}
            shared = None
            for client in clients:
                topic = f"bench-{client}-{codec}-{uuid.uuid4().hex[:6]}"
                async with Cluster(bootstrap) as cluster:
                    await Admin(cluster).create_topics({topic: 4})
                    await cluster.wait_for_leaders([topic])
                try:
                    produced[client] = await _call(CLIENTS[client][0], bootstrap, topic, n, value, codec,
                                                   idempotent)
                except Exception as e:  # a peer without this codec's library, for one
                    print(f"  {codec:>6} {client:>12}: produce failed ({type(e).__name__}: {str(e)[:300]})")
                    continue
                shared = shared or topic
            for client in clients:
                if client not in produced or shared is None:
                    continue
                try:
                    dt, cpu = await _call(CLIENTS[client][1], bootstrap, shared, n)
                except Exception as e:
                    print(f"  {codec:>6} {client:>12}: consume failed ({type(e).__name__}: {str(e)[:300]})")
                    continue
                times.setdefault(client, []).append((produced[client], dt, cpu))
                print(f"  {codec:>6} {client:>12}: produce {n / produced[client]:9,.0f} "
                      f"({mb / produced[client]:5.1f}) | consume {n / dt:9,.0f} ({mb / dt:5.1f}) "
                      f"cpu {cpu:.3f}", flush=True)
        rates = {c: (n / statistics.median(t[0] for t in ts), n / statistics.median(t[1] for t in ts),
                     statistics.median(t[2] for t in ts)) for c, ts in times.items()}
        print(f"  {codec} medians:")
        for client, (p, c, cpu) in rates.items():
            print(f"  {codec:>6} {client:>12}: produce {p:9,.0f} ({p * size / 1e6:5.1f}) | "
                  f"consume {c:9,.0f} ({c * size / 1e6:5.1f}) cpu {cpu:.3f}")
        ours = rates.get("kproto")
        for client in peers:
            if ours and client in rates:
                p, c, cpu = rates[client]
                print(f"  {codec:>6} kproto / {client}: produce {ours[0] / p:.2f}x, consume {ours[1] / c:.2f}x, "
                      f"consume CPU {ours[2] / cpu:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--broker", choices=("tansu", "apache"), default="tansu",
                    help="the broker started when no --bootstrap is given")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="fewer records, two codecs")
    ap.add_argument("--rounds", "--repeat", type=int, default=3,
                    help="interleaved rounds of produce and consume per client; the median counts")
    ap.add_argument("--codecs", help="comma-separated codecs (default: all; --quick: none,lz4)")
    ap.add_argument("--peers", default="aiokafka,kafka-python",
                    help="clients to compare with, comma-separated, of confluent, java, aiokafka, "
                         "kafka-python (empty: none)")
    ap.add_argument("--skip-round-trips", action="store_true", help="only produce / consume")
    args = ap.parse_args()
    n = 5000 if args.quick else args.records
    codecs = ["none", "lz4"] if args.quick else ["none", "gzip", "snappy", "lz4", "zstd"]
    if args.codecs:
        codecs = args.codecs.split(",")
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        idempotent = args.broker != "tansu" or bootstrap is not None
        if bootstrap is None and args.broker == "apache":
            from _bench_support import serve

            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            bootstrap = stack.enter_context(serve("apache", tmp)).bootstrap
        elif bootstrap is None:
            proc = subprocess.Popen([sys.executable, str(PEERS / "tansu.py"), "run", "--lifetime", "600"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            stack.callback(proc.wait, 10)
            stack.callback(proc.terminate)
            assert proc.stdout is not None
            bootstrap = next(line.split()[1] for line in proc.stdout if line.startswith("BOOTSTRAP "))
        if not args.skip_round_trips:
            bench_protocol_core(20000)
            asyncio.run(bench_round_trips(bootstrap, 2000 if args.quick else 10000))
        peers = [p for p in args.peers.split(",") if p]
        asyncio.run(bench_produce_consume(bootstrap, n, args.size, codecs, peers, args.rounds, idempotent))


if __name__ == "__main__":
    main()
