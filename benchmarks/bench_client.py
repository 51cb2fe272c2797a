"""Benchmarks of the client building blocks.

    python benchmarks/bench_client.py [--quick]

Reports murmur2 throughput (per key and batched), assignor run time on the golden group
scenarios and on a large synthetic group, and the cost of one SCRAM client exchange.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kproto.client.assignors import ASSIGNORS, Subscription  # noqa: E402
from kproto.client.partitioner import murmur2, murmur2_batch, partition_for_key  # noqa: E402
from kproto.client.sasl import ScramClient  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors")) / "client"


def timeit(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_murmur2(n: int) -> None:
    rng = random.Random(1)
    for size in (16, 100):
        keys = [rng.randbytes(size) for _ in range(n)]
        dt = timeit(lambda: [murmur2(k) for k in keys])
        print(f"murmur2 {size:>3} B keys, one at a time: {n / dt:>12,.0f} keys/s")
        dt = timeit(lambda: murmur2_batch(keys))
        print(f"murmur2 {size:>3} B keys, batched:       {n / dt:>12,.0f} keys/s")
    keys = [rng.randbytes(16) for _ in range(n)]
    dt = timeit(lambda: [partition_for_key(k, 100) for k in keys])
    print(f"partition_for_key (16 B, 100 parts):   {n / dt:>12,.0f} keys/s")


def _scenarios():
    with gzip.open(VECTORS / "assignors.jsonl.gz", "rt") as f:
        for line in f:
            sc = json.loads(line)
            cluster = {t["topic"]: t["replica_racks"] or t["partitions"] for t in sc["topics"]}
            subs = {m["member_id"]: Subscription(
                m["topics"], None, [tuple(tp) for tp in m["owned_partitions"]], m["generation"],
                m["rack"], m["group_instance_id"]) for m in sc["members"]}
            yield cluster, subs


def bench_assignors(large_members: int, large_partitions: int) -> None:
    scenarios = list(_scenarios()) if (VECTORS / "assignors.jsonl.gz").exists() else []
    for name, fn in ASSIGNORS.items():
        if scenarios:
            dt = timeit(lambda: [fn(c, s) for c, s in scenarios], repeat=1)
            print(f"{name:<19} 300 golden scenarios: {dt * 1000:8.1f} ms ({dt / len(scenarios) * 1e3:.2f} ms each)")
    # a large group: same subscription (constrained path), then one member with an extra topic
    topics = {f"topic-{i}": large_partitions // 10 for i in range(10)}
    members = [f"consumer-{i:04d}" for i in range(large_members)]
    first = ASSIGNORS["sticky"](topics, {m: Subscription(list(topics)) for m in members})
    rejoin = {m: Subscription(list(topics), owned_partitions=first[m], generation_id=1) for m in members[1:]}
    rejoin["consumer-new"] = Subscription(list(topics))
    general = dict(rejoin)
    general["consumer-odd"] = Subscription(["topic-0"])
    for label, group in (("rebalance, equal subscriptions", rejoin), ("rebalance, general path", general)):
        for name in ("range", "roundrobin", "cooperative-sticky"):
            dt = timeit(lambda: ASSIGNORS[name](topics, group), repeat=1)
            print(f"{name:<19} {len(group)} members x {large_partitions} partitions, {label}: {dt * 1000:8.1f} ms")


def bench_scram() -> None:
    def exchange():
        c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
        c.initial()
        c.step(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=4096")
    dt = timeit(exchange)
    print(f"SCRAM-SHA-256 client-final (4096 iterations): {dt * 1000:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    args = ap.parse_args()
    bench_murmur2(20_000 if args.quick else 200_000)
    bench_assignors(20 if args.quick else 100, 200 if args.quick else 2000)
    bench_scram()


if __name__ == "__main__":
    main()
