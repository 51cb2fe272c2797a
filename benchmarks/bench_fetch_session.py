"""Benchmark of KIP-227 fetch sessions: per-request cost of both ends at 1,000 partitions, and
the bandwidth figure (bytes per fetch with and without a session, kproto's own encoder).

Run: ``python benchmarks/bench_fetch_session.py [--quick]``.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kproto.fetch_session import (  # noqa: E402
    FetchMetadata,
    FetchSessionCache,
    FetchSessionHandler,
    TopicIdPartition,
)
from kproto.fetch_session.handler import response_data  # noqa: E402
from kproto.fetch_session.sim import SimulatedBroker, bandwidth_table, consumer_partitions  # noqa: E402


def bench(name: str, fn: Callable[[], object], number: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    print(f"{name:<58} {best * 1e6:>10.1f} us")
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    n = 20 if args.quick else 200
    rng = random.Random(0)
    wanted, ids = consumer_partitions(100, 10, rng)
    keys = list(wanted)
    changed = {tp: wanted[tp]._replace(fetch_offset=1) for tp in rng.sample(keys, 10)}

    print("client: FetchSessionHandler, 1,000 partitions")

    def build(next_metadata: FetchMetadata, overrides: dict) -> Callable[[], object]:
        handler = FetchSessionHandler(0)
        b = handler.new_builder()
        for tp, d in wanted.items():
            b.add(tp, d)
        b.build()

        def run() -> object:
            handler.next_metadata = next_metadata
            b = handler.new_builder()
            for tp, d in wanted.items():
                b.add(tp, overrides.get(tp, d))
            return b.build()
        return run

    bench("build full request", build(FetchMetadata(0, 0), {}), n)
    bench("build incremental request, nothing changed", build(FetchMetadata(7, 3), {}), n)
    # Alternate between two wanted sets so that every build sees 10 altered partitions.
    handler = FetchSessionHandler(0)
    b = handler.new_builder()
    for tp, d in wanted.items():
        b.add(tp, d)
    b.build()
    state = [False]

    def build_changed() -> object:
        handler.next_metadata = FetchMetadata(7, 3)
        state[0] = not state[0]
        b = handler.new_builder()
        for tp, d in wanted.items():
            b.add(tp, changed.get(tp, d) if state[0] else d)
        return b.build()
    bench("build incremental request, 10 altered", build_changed, n)

    # Responses decoded from real bytes, as a client sees them.
    import kproto
    from kproto.fetch_session.messages import build_fetch_request
    broker = SimulatedBroker(FetchSessionCache(rng=random.Random(1)), record_bytes=10)
    for tid, name in ids.items():
        broker.create_topic(name, 10, tid)
    h = FetchSessionHandler(0)
    b = h.new_builder()
    for tp, d in wanted.items():
        b.add(tp, d)
    full_req = kproto.request(1).encode(build_fetch_request(b.build(), 13), 13)
    full_resp = kproto.response(1).decode(broker.handle(full_req, 13, 0), 13)
    names = dict(ids)

    def handle_full() -> bool:
        h.next_metadata = FetchMetadata(0, 0)
        h.session_topic_names = names
        return h.handle_response(full_resp, 13)
    assert handle_full()
    bench("handle full response (1,000 partitions, v13)", handle_full, n)
    bench("  of which response_data()", lambda: response_data(full_resp, 13, names), n)

    print("broker: FetchSessionCache, one session of 1,000 partitions")
    cache = FetchSessionCache(rng=random.Random(2))
    fetch_data = {TopicIdPartition(d.topic_id, tp.topic, tp.partition): d for tp, d in wanted.items()}
    ctx = cache.new_context(13, FetchMetadata(0, 0), False, fetch_data, [], names, 0)
    ctx_updates = {tip: full_resp.responses[0].partitions[0] for tip in fetch_data}
    PD = kproto.response(1).cls.PartitionData
    base = {tip: PD(high_watermark=0, log_start_offset=0) for tip in fetch_data}
    sid = ctx.update_and_generate_response_data(dict(base)).session_id
    del ctx_updates
    hot = list(fetch_data)[:10]
    epoch = [1]

    def serve_incremental() -> object:
        c = cache.new_context(13, FetchMetadata(sid, epoch[0]), False, {}, [], names, 1)
        epoch[0] += 1
        updates = {tip: base[tip] for tip, _ in c.partitions()}
        for tip in hot:  # 10 partitions with a new high watermark each time
            updates[tip] = PD(high_watermark=epoch[0], log_start_offset=0)
        return c.update_and_generate_response_data(updates)
    answer = serve_incremental()
    assert len(answer.partitions) == 10
    bench("serve incremental request (read 1,000, answer 10)", serve_incremental, n)

    full_cache = FetchSessionCache(max_entries=1000, eviction_ms=120_000, rng=random.Random(3))
    for i in range(1000):
        full_cache.next_shard().maybe_create_session(0, False, 1 + i % 50, True, dict)
    now = [200_000]

    def create_evicting() -> int:
        now[0] += 120_001  # the least recently used session is always stale by now
        sid = full_cache.next_shard().maybe_create_session(now[0], False, 10, True, dict)
        assert sid
        return sid
    bench("create session in a full 1,000-slot cache (evicts stale)", create_evicting, n * 5)
    assert full_cache.size == 1000

    print()
    print("bandwidth: average body bytes per fetch, 1,000 partitions (100 topics x 10)")
    print(f"{'version':>8} {'changed':>8} {'req no-session':>15} {'req incr':>9} {'resp no-session':>16} {'resp incr':>10}")
    for r in bandwidth_table([7, 12, 13, 15, 17], [0, 10, 100]):
        print(f"{r.version:>8} {r.changed:>8} {r.sessionless_request:>15} {r.incremental_request:>9} "
              f"{r.sessionless_response:>16} {r.incremental_response:>10}")


if __name__ == "__main__":
    main()
