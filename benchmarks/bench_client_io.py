"""Benchmarks of the asyncio client against a real broker (tansu on loopback).

    python benchmarks/bench_client_io.py [--bootstrap HOST:PORT] [--records N] [--quick]

Without ``--bootstrap`` it starts tansu through ``$KPROTO_PEERS/tansu.py`` (default
``../shared/peers``). Reports: pipelined Heartbeat round trips per second on one connection
(and one at a time, for comparison), and producer/consumer throughput in records/s and MB/s
per compression codec, next to aiokafka and kafka-python in the same run (ratios printed).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
                  codec: str) -> tuple[float, float]:
    async with Cluster(bootstrap) as cluster:
        producer = await Producer(cluster, compression=codec, linger_ms=5, batch_size=65536).start()
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
                    codec: str) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    # not idempotent: tansu answers aiokafka's InitProducerId with an unknown error
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
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
                  codec: str) -> tuple[float, float]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
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


async def bench_produce_consume(bootstrap: str, n: int, size: int, codecs: list[str],
                                peers: list[str], repeat: int = 3) -> None:
    """Each client produces ``n`` records to each of ``repeat`` fresh 4-partition topics, then
    reads the first topic back ``repeat`` times with a fresh consumer; the best times count."""
    value = (b"kproto benchmark payload " * (size // 25 + 1))[:size]
    mb = n * size / 1e6
    print(f"produce / consume, {n} x {size} B records, 4 partitions, acks=all (kproto idempotent, "
          f"the peers not), best of {repeat}, records/s (MB/s):")
    for codec in codecs:
        rates = {}
        for client in ["kproto"] + peers:
            topics = [f"bench-{client}-{codec}-{uuid.uuid4().hex[:6]}" for _ in range(repeat)]
            async with Cluster(bootstrap) as cluster:
                await Admin(cluster).create_topics({t: 4 for t in topics})
                await cluster.wait_for_leaders(topics)
            try:
                if client == "kproto":
                    dt_p, dt_c = await _kproto(bootstrap, topics, n, value, codec)
                elif client == "aiokafka":
                    dt_p, dt_c = await _aiokafka(bootstrap, topics, n, value, codec)
                else:
                    dt_p, dt_c = await asyncio.to_thread(_kafka_python, bootstrap, topics, n, value, codec)
            except Exception as e:  # a peer without this codec's library, for one
                print(f"  {codec:>6} {client:>12}: failed ({type(e).__name__}: {e})")
                continue
            rates[client] = (n / dt_p, n / dt_c)
            print(f"  {codec:>6} {client:>12}: produce {n / dt_p:9,.0f} ({mb / dt_p:5.1f}) | "
                  f"consume {n / dt_c:9,.0f} ({mb / dt_c:5.1f})")
        ours = rates.get("kproto")
        for client in peers:
            if ours and client in rates:
                p, c = rates[client]
                print(f"  {codec:>6} kproto / {client}: produce {ours[0] / p:.2f}x, consume {ours[1] / c:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="fewer records, two codecs")
    ap.add_argument("--repeat", type=int, default=3, help="produce and consume runs per client; the best counts")
    ap.add_argument("--codecs", help="comma-separated codecs (default: all; --quick: none,lz4)")
    ap.add_argument("--peers", default="aiokafka,kafka-python",
                    help="clients to compare with, comma-separated (empty: none)")
    args = ap.parse_args()
    n = 5000 if args.quick else args.records
    codecs = ["none", "lz4"] if args.quick else ["none", "gzip", "snappy", "lz4", "zstd"]
    if args.codecs:
        codecs = args.codecs.split(",")
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc = subprocess.Popen([sys.executable, str(PEERS / "tansu.py"), "run", "--lifetime", "600"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        bootstrap = next(line.split()[1] for line in proc.stdout if line.startswith("BOOTSTRAP "))
    try:
        bench_protocol_core(20000)
        asyncio.run(bench_round_trips(bootstrap, 2000 if args.quick else 10000))
        peers = [p for p in args.peers.split(",") if p]
        asyncio.run(bench_produce_consume(bootstrap, n, args.size, codecs, peers, args.repeat))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
