"""Benchmarks of the asyncio client against a real broker (tansu on loopback).

    python benchmarks/bench_client_io.py [--bootstrap HOST:PORT] [--records N] [--quick]

Without ``--bootstrap`` it starts tansu through ``$KPROTO_PEERS/tansu.py`` (default
``../shared/peers``). Reports: pipelined Heartbeat round trips per second on one connection
(and one at a time, for comparison), and producer/consumer throughput in records/s and MB/s
per compression codec.
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
from kproto.client.cluster import Cluster  # noqa: E402
from kproto.client.consumer import Consumer  # noqa: E402
from kproto.client.producer import Producer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("KPROTO_PEERS", REPO.parent / "shared" / "peers"))


def bench_protocol_core(n: int) -> None:
    """The sans-I/O cost per request: encode, then match and decode its answer."""
    from kproto.client.connection import ClientProtocol
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


async def bench_produce_consume(bootstrap: str, n: int, size: int, codecs: list[str]) -> None:
    value = (b"kproto benchmark payload " * (size // 25 + 1))[:size]
    async with Cluster(bootstrap) as cluster:
        for codec in codecs:
            topic = f"bench-{codec}-{uuid.uuid4().hex[:6]}"
            await cluster.create_topics({topic: 4})
            await cluster.wait_for_leaders([topic])
            producer = await Producer(cluster, compression=codec, linger_ms=5, batch_size=65536).start()
            t = time.perf_counter()
            futs = [await producer.send(topic, value, b"%d" % (i % 1000)) for i in range(n)]
            await producer.close()
            dt_p = time.perf_counter() - t
            assert all(f.exception() is None for f in futs)
            consumer = await Consumer(cluster, [topic], fetch_max_wait_ms=50).start()
            t = time.perf_counter()
            got = 0
            while got < n:
                got += len(await consumer.getmany(1.0))
            dt_c = time.perf_counter() - t
            mb = n * size / 1e6
            print(f"{codec:>6}: produce {n / dt_p:9,.0f} rec/s {mb / dt_p:6.1f} MB/s | "
                  f"consume {n / dt_c:9,.0f} rec/s {mb / dt_c:6.1f} MB/s  ({n} x {size} B)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="fewer records, two codecs")
    args = ap.parse_args()
    n = 5000 if args.quick else args.records
    codecs = ["none", "lz4"] if args.quick else ["none", "gzip", "snappy", "lz4", "zstd"]
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc = subprocess.Popen([sys.executable, str(PEERS / "tansu.py"), "run", "--lifetime", "600"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        bootstrap = next(line.split()[1] for line in proc.stdout if line.startswith("BOOTSTRAP "))
    try:
        bench_protocol_core(20000)
        asyncio.run(bench_round_trips(bootstrap, 2000 if args.quick else 10000))
        asyncio.run(bench_produce_consume(bootstrap, n, args.size, codecs))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
