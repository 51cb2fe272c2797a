"""Compaction of ``__consumer_offsets`` by kproto's broker: a broker that committed many offsets
is cleaned to about its live state, and its restart (log recovery and the group coordinator's
replay of the topic) is timed before and after.

    python benchmarks/bench_compaction.py [--groups 10] [--partitions 100] [--commits 1000]
                                          [--segment-bytes 1048576]

Each of ``--groups`` groups commits ``--commits`` times an offset for each of ``--partitions``
partitions of one topic (one OffsetCommit request, one batch, per commit): by default 10 x
1000 x 100 = 1,000,000 offset records, 1,000 of them live. ``__consumer_offsets`` gets
``segment.bytes`` ``--segment-bytes`` (Kafka's offsets.topic.segment.bytes is 100 MiB: a
partition of this run would never roll, and only closed segments are cleaned). The broker
runs sans-I/O (no sockets) on a fake clock; the cleaner runs its rounds in this thread.

Measured with the defaults on a shared 2-core machine (load average about 19): 50.0 MB and
10,000 batches before; 10 rounds in 80 s left 1,000 records (50 kB) below the active segments,
8.25 MB in all (the active segments hold the rest); the restart took 50.8 s before and 6.8 s
after (another run: 39.2 s and 2.0 s).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "broker"))

import kproto  # noqa: E402
from kproto.broker.configs import BrokerConfig  # noqa: E402
from kproto.broker.core import BrokerCore  # noqa: E402
from kproto.broker.timer import FakeClock  # noqa: E402
from kproto.schemas.api_keys import ApiKey as K  # noqa: E402

from broker_support import Client  # noqa: E402

WALL0 = 1_700_000_000_000


def open_core(path: str, clock: FakeClock, groups: int) -> BrokerCore:
    return BrokerCore(path, BrokerConfig(port=9092, offsets_topic_num_partitions=50,
                                         log_cleaner_backoff_ms=3_600_000),
                      clock=clock, wall_clock=lambda: WALL0 + clock.now_ms())


def offsets_bytes(core: BrokerCore) -> tuple[int, int]:
    topic = core.logs.topics["__consumer_offsets"]
    return sum(lg.total_bytes for lg in topic.logs), sum(len(lg.last_offsets) for lg in topic.logs)


def closed_segments(core: BrokerCore) -> tuple[int, int]:
    """Bytes and records of the segments below the active ones (what a cleaning may touch)."""
    size = records = 0
    for lg in core.logs.topics["__consumer_offsets"].logs:
        if not lg.segments:
            continue
        active = lg.segments[-1].base_offset
        size += lg.segments[-1].global_start - lg.segments[0].global_start
        records += sum(len(b.record_list()) for b in lg.batches() if b.last_offset < active)
    return size, records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--segment-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    clock = FakeClock(1_000)
    with tempfile.TemporaryDirectory() as tmp:
        core = open_core(tmp, clock, args.groups)
        c = Client(core)
        meta = kproto.request(K.METADATA).cls
        create = kproto.request(K.CREATE_TOPICS).cls
        c.call(K.CREATE_TOPICS, 7, timeout_ms=1000, validate_only=False, topics=[
            create.CreatableTopic(name="t", num_partitions=args.partitions, replication_factor=1,
                                  assignments=[], configs=[])])
        c.call(K.METADATA, 12, topics=[meta.MetadataRequestTopic(name="t")],
               allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        core.groups.ensure_topic()
        offsets = core.logs.topics["__consumer_offsets"]
        core.configs.set_topic(offsets, {**offsets.configs, "segment.bytes": str(args.segment_bytes)})
        req = kproto.request(K.OFFSET_COMMIT).cls
        t0 = time.perf_counter()
        for i in range(args.commits):
            for g in range(args.groups):
                parts = [req.OffsetCommitRequestPartition(partition_index=p, committed_offset=i,
                                                          committed_leader_epoch=0, committed_metadata="")
                         for p in range(args.partitions)]
                r = c.call(K.OFFSET_COMMIT, 8, group_id="group-%d" % g, generation_id_or_member_epoch=-1,
                           member_id="", group_instance_id=None,
                           topics=[req.OffsetCommitRequestTopic(name="t", partitions=parts)])
                assert all(p.error_code == 0 for t in r.topics for p in t.partitions)
            clock.advance(10)
        records = args.groups * args.commits * args.partitions
        print(f"committed {records:,} offsets ({args.groups} groups x {args.commits} commits x "
              f"{args.partitions} partitions) in {time.perf_counter() - t0:.1f} s")
        size, batches = offsets_bytes(core)
        print(f"__consumer_offsets before cleaning: {size / 1e6:.1f} MB, {batches:,} batches")
        core.close()

        t0 = time.perf_counter()
        core = open_core(tmp, clock, args.groups)
        restart_before = time.perf_counter() - t0
        print(f"restart before cleaning: {restart_before:.2f} s")
        t0 = time.perf_counter()
        rounds = 0
        while core.cleaner.clean_now():
            rounds += 1
        cleaning = time.perf_counter() - t0
        size2, batches2 = offsets_bytes(core)
        closed, closed_records = closed_segments(core)
        print(f"cleaned in {rounds} rounds, {cleaning:.1f} s: {size2 / 1e6:.2f} MB, {batches2:,} batches "
              f"({size / max(size2, 1):.0f}x smaller); live offsets: {args.groups * args.partitions:,}")
        print(f"  below the active segments: {closed / 1e3:.1f} kB, {closed_records:,} records "
              "(the active segments, never cleaned, hold the rest)")
        core.close()

        t0 = time.perf_counter()
        core = open_core(tmp, clock, args.groups)
        restart_after = time.perf_counter() - t0
        print(f"restart after cleaning: {restart_after:.2f} s ({restart_before / restart_after:.1f}x faster)")
        # the state replayed is the same
        fetch = kproto.request(K.OFFSET_FETCH).cls
        c = Client(core)
        for g in range(args.groups):
            r = c.call(K.OFFSET_FETCH, 7, group_id="group-%d" % g, require_stable=False, topics=[
                fetch.OffsetFetchRequestTopic(name="t", partition_indexes=list(range(args.partitions)))])
            assert [p.committed_offset for p in r.topics[0].partitions] == [args.commits - 1] * args.partitions
        print("every group's offsets read back after the restart")
        core.close()


if __name__ == "__main__":
    main()
