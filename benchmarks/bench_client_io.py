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
4-partition topic and reads it back with a fresh consumer, the clients in turn; the medians
of the rounds and their ratios are printed.
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


async def _kproto(bootstrap: str, topics: list[str], n: int, value: bytes,
                  codec: str, idempotent: bool = True) -> tuple[float, float]:
    async with Cluster(bootstrap) as cluster:
        producer = await Producer(cluster, compression=codec, linger_ms=5, batch_size=65536,
                                  idempotent=idempotent).start()
        dt_p = float("inf")
        for topic in topics:  # one topic per run: each holds exactly n records
            t = time.perf_counter()
            futs = [await producer.send(topic, value, b"%d" % (i % 1000)) for i in range(n)]
            await producer.flush()
            dt_p = min(dt_p, time.perf_counter() - t)
            assert all(f.exception() is None for f in futs)
        await producer.close()
        best = float("inf")
        for _ in topics:  # a fresh consumer each time, reading the first topic from the start
            consumer = await Consumer(cluster, topics[:1], fetch_max_wait_ms=50).start()
            t = time.perf_counter()
            got = 0
            while got < n:
                got += len(await consumer.getmany(1.0))
            best = min(best, time.perf_counter() - t)
            await consumer.close()
        return dt_p, best


async def _aiokafka(bootstrap: str, topics: list[str], n: int, value: bytes,
                    codec: str, idempotent: bool = True) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                                compression_type=None if codec == "none" else codec,
                                linger_ms=5, max_batch_size=65536)
    await producer.start()
    try:
        dt_p = float("inf")
        for topic in topics:
            t = time.perf_counter()
            futs = [await producer.send(topic, value, key=b"%d" % (i % 1000)) for i in range(n)]
            await producer.flush()
            await asyncio.gather(*futs)
            dt_p = min(dt_p, time.perf_counter() - t)
    finally:
        await producer.stop()
    best = float("inf")
    for _ in topics:
        consumer = AIOKafkaConsumer(topics[0], bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=50, enable_auto_commit=False)
        await consumer.start()
        t = time.perf_counter()
        got = 0
        while got < n:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
        best = min(best, time.perf_counter() - t)
        await consumer.stop()
    return dt_p, best


def _kafka_python(bootstrap: str, topics: list[str], n: int, value: bytes,
                  codec: str, idempotent: bool = True) -> tuple[float, float]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=idempotent,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=5, batch_size=65536)
    dt_p = float("inf")
    for topic in topics:
        t = time.perf_counter()
        for i in range(n):
            producer.send(topic, value, key=b"%d" % (i % 1000))
        producer.flush()
        dt_p = min(dt_p, time.perf_counter() - t)
    producer.close()
    best = float("inf")
    for _ in topics:
        consumer = KafkaConsumer(topics[0], bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=50, enable_auto_commit=False)
        t = time.perf_counter()
        got = 0
        while got < n:
            got += sum(len(v) for v in consumer.poll(timeout_ms=1000).values())
        best = min(best, time.perf_counter() - t)
        consumer.close()
    return dt_p, best


def _confluent(bootstrap: str, topics: list[str], n: int, value: bytes,
               codec: str, idempotent: bool = True) -> tuple[float, float]:
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                            "compression.type": codec, "linger.ms": 5, "batch.size": 65536,
                            "queue.buffering.max.messages": max(n, 100_000)})
    dt_p = float("inf")
    for topic in topics:
        t = time.perf_counter()
        for i in range(n):
            producer.produce(topic, value, b"%d" % (i % 1000))
            if i % 1000 == 0:
                producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("confluent-kafka: records left undelivered")
        dt_p = min(dt_p, time.perf_counter() - t)
    best = float("inf")
    for _ in topics:
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                                "queued.min.messages": max(n, 100_000) + 1})
        # assigned, not subscribed: the other clients' consumers join their group before the
        # clock starts, so no group join is in any client's time
        parts = consumer.list_topics(topics[0], timeout=10).topics[topics[0]].partitions
        t = time.perf_counter()
        consumer.assign([ck.TopicPartition(topics[0], p, ck.OFFSET_BEGINNING) for p in parts])
        got = 0
        while got < n:
            got += sum(1 for m in consumer.consume(min(10000, n - got), 1.0) if m.error() is None)
        best = min(best, time.perf_counter() - t)
        consumer.close()
    return dt_p, best


def _java(bootstrap: str, topics: list[str], n: int, value: bytes,
          codec: str, idempotent: bool = True) -> tuple[float, float]:
    from _bench_support import java_consume, java_produce

    dt_p = best = float("inf")
    for topic in topics:
        prod = java_produce(bootstrap, n, len(value), topic, "all",
                            props=(f"compression.type={codec}", "linger.ms=5", "batch.size=65536",
                                   f"enable.idempotence={str(idempotent).lower()}"))
        dt_p = min(dt_p, n / prod["rate"])
    for _ in topics:
        best = min(best, n / java_consume(bootstrap, n, topics[0])["rate"])
    return dt_p, best


CLIENTS = {"kproto": _kproto, "aiokafka": _aiokafka, "kafka-python": _kafka_python,
           "confluent": _confluent, "java": _java}


async def bench_produce_consume(bootstrap: str, n: int, size: int, codecs: list[str],
                                peers: list[str], rounds: int = 3, idempotent: bool = True) -> None:
    """Per round, each client (in turn) produces ``n`` records to a fresh 4-partition topic and
    reads it back with a fresh consumer; the medians of the rounds count."""
    value = (b"kproto benchmark payload " * (size // 25 + 1))[:size]
    mb = n * size / 1e6
    print(f"produce / consume, {n} x {size} B records, 4 partitions, acks=all, "
          f"{'idempotent' if idempotent else 'not idempotent'}, median of {rounds} interleaved "
          f"rounds, records/s (MB/s):")
    # the broker's first requests (a JVM's JIT, a Python broker's first-touch work) in no round
    await asyncio.to_thread(_confluent, bootstrap, [f"bench-warmup-{uuid.uuid4().hex[:6]}"], 20_000,
                            value, "none", idempotent)
    for codec in codecs:
        times: dict[str, list[tuple[float, float]]] = {}
        for _ in range(rounds):
            for client in ["kproto"] + peers:
                topic = f"bench-{client}-{codec}-{uuid.uuid4().hex[:6]}"
                async with Cluster(bootstrap) as cluster:
                    await Admin(cluster).create_topics({topic: 4})
                    await cluster.wait_for_leaders([topic])
                fn = CLIENTS[client]
                try:
                    if asyncio.iscoroutinefunction(fn):
                        dt = await fn(bootstrap, [topic], n, value, codec, idempotent)
                    else:
                        dt = await asyncio.to_thread(fn, bootstrap, [topic], n, value, codec, idempotent)
                except Exception as e:  # a peer without this codec's library, for one
                    print(f"  {codec:>6} {client:>12}: failed ({type(e).__name__}: {str(e)[:300]})")
                    continue
                times.setdefault(client, []).append(dt)
                print(f"  {codec:>6} {client:>12}: produce {n / dt[0]:9,.0f} ({mb / dt[0]:5.1f}) | "
                      f"consume {n / dt[1]:9,.0f} ({mb / dt[1]:5.1f})", flush=True)
        rates = {c: (n / statistics.median(t[0] for t in ts), n / statistics.median(t[1] for t in ts))
                 for c, ts in times.items()}
        print(f"  {codec} medians:")
        for client, (p, c) in rates.items():
            print(f"  {codec:>6} {client:>12}: produce {p:9,.0f} ({p * size / 1e6:5.1f}) | "
                  f"consume {c:9,.0f} ({c * size / 1e6:5.1f})")
        ours = rates.get("kproto")
        for client in peers:
            if ours and client in rates:
                p, c = rates[client]
                print(f"  {codec:>6} kproto / {client}: produce {ours[0] / p:.2f}x, consume {ours[1] / c:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--broker", choices=("tansu", "apache"), default="tansu",
                    help="the broker started when no --bootstrap is given")
    ap.add_argument("--records", type=int, default=50000)
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
