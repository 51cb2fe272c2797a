"""Deterministic sample log directories, written through :mod:`kproto.storage.writer`: the
project's example data and benchmark inputs (nothing is copied from elsewhere).

    python -m kproto.storage.sample OUT_DIR [--records N] [--compression lz4]
"""
from __future__ import annotations

import argparse
import random
from typing import Sequence

from kproto.records import RecordBatchBuilder
from kproto.storage.writer import LogDirWriter, PartitionWriter

_WORDS = [b"alpha", b"beta", b"gamma", b"kafka", b"offset", b"epoch", b"delta", b"order",
          b"payment", b"refund", b"cart", b"click"]
BASE_TS = 1_700_000_000_000


def _value(rnd: random.Random, size: int = 100) -> bytes:
    """Half repetitive text, half random bytes, so codecs have realistic work."""
    text = b" ".join(rnd.choice(_WORDS) for _ in range(size // 8))[: size // 2]
    return text.ljust(size // 2, b".") + rnd.randbytes(size - size // 2)


def _uuid(rnd: random.Random) -> bytes:
    return rnd.randbytes(16)


def write_plain_partition(w: PartitionWriter, rnd: random.Random, records: int, *,
                          batch_records: int = 1000, compression: str = "none",
                          headers: bool = False, producer_id: int = -1, epoch: int = 0,
                          value_size: int = 100) -> None:
    """``records`` records in batches of ``batch_records`` (idempotent when ``producer_id``)."""
    ts = BASE_TS
    seq = 0
    while records > 0:
        n = min(batch_records, records)
        b = RecordBatchBuilder(base_offset=w.next_offset, compression=compression,
                               partition_leader_epoch=epoch, producer_id=producer_id,
                               producer_epoch=0 if producer_id >= 0 else -1,
                               base_sequence=seq if producer_id >= 0 else -1)
        for i in range(n):
            hdrs = [("trace", rnd.randbytes(8)), ("src", b"sample")] if headers and i % 3 == 0 else ()
            b.append(ts, b"key-%06d" % rnd.randrange(1_000_000), _value(rnd, value_size), hdrs)
            ts += rnd.randrange(3)
        w.append(b.build())
        seq += n
        records -= n


def write_transactions(w: PartitionWriter, rnd: random.Random, transactions: int, *,
                       compression: str = "none") -> None:
    """Two transactional producers interleaving transactions; about one in four aborts; the
    last transaction of producer 7001 is left open."""
    ts = BASE_TS
    seqs = {7001: 0, 7002: 0}
    for t in range(transactions):
        for pid in (7001, 7002):
            b = RecordBatchBuilder(base_offset=w.next_offset, compression=compression,
                                   partition_leader_epoch=1, producer_id=pid, producer_epoch=0,
                                   base_sequence=seqs[pid], transactional=True)
            for _ in range(rnd.randint(1, 20)):
                b.append(ts, b"pay-%d" % rnd.randrange(1000), _value(rnd, 60))
                ts += 1
            seqs[pid] += len(b)
            w.append(b.build())
        for pid in (7001, 7002):
            if pid == 7001 and t == transactions - 1:
                continue  # an open transaction: read_committed stops before it
            m = RecordBatchBuilder(base_offset=w.next_offset, partition_leader_epoch=1,
                                   producer_id=pid, producer_epoch=0, transactional=True,
                                   control=True)
            m.append_end_txn_marker(rnd.random() >= 0.25, 3, ts)
            w.append(m.build())


def write_offset_commits(w: PartitionWriter, rnd: random.Random, commits: int) -> None:
    """``__consumer_offsets`` records (record type 1: OffsetCommitKey / OffsetCommitValue v3)
    encoded through the schemas, plus a tombstone."""
    from kproto.codecs import message

    key_c, val_c = message("OffsetCommitKey"), message("OffsetCommitValue")
    for i in range(commits):
        key = b"\x00\x01" + key_c.encode(key_c.from_json(
            {"group": "sample-group", "topic": "orders", "partition": i % 3}, 0), 0)
        value = None if i == commits - 1 else b"\x00\x03" + val_c.encode(val_c.from_json(
            {"offset": 100 * i, "leaderEpoch": 0, "metadata": "", "commitTimestamp": BASE_TS + i},
            3), 3)
        b = RecordBatchBuilder(base_offset=w.next_offset, partition_leader_epoch=0)
        b.append(BASE_TS + i, key, value)
        w.append(b.build())


def write_sample_log_dir(path: str, *, records: int = 2000, compression: str = "none",
                         seed: int = 0, segment_bytes: int = 64 * 1024,
                         created: float = 1_700_000_000.0) -> LogDirWriter:
    """A small broker-like log dir: ``orders`` (3 partitions, idempotent, headers),
    ``payments`` (transactions with aborts and one left open), ``users`` and
    ``__consumer_offsets``; ``records`` per orders partition."""
    rnd = random.Random(seed)
    d = LogDirWriter(path, cluster_id="a2Byb3RvLXNhbXBsZS0wMQ", node_id=1,
                     directory_id="c2FtcGxlLWRpcmVjdG9yeQ", segment_bytes=segment_bytes,
                     created=created)
    topic_ids = {t: _uuid(rnd) for t in ("orders", "payments", "users", "__consumer_offsets")}
    for p in range(3):
        write_plain_partition(d.partition("orders", p, topic_id=topic_ids["orders"]), rnd, records,
                              batch_records=50, compression=compression, headers=True,
                              producer_id=1000 + p)
    write_transactions(d.partition("payments", 0, topic_id=topic_ids["payments"]), rnd,
                       max(4, records // 40), compression=compression)
    write_plain_partition(d.partition("users", 0, topic_id=topic_ids["users"]), rnd,
                          records // 2, batch_records=20, compression=compression)
    write_offset_commits(d.partition("__consumer_offsets", 0,
                                     topic_id=topic_ids["__consumer_offsets"]), rnd, 12)
    d.close(broker_epoch=7)
    return d


def write_benchmark_log_dir(path: str, records: int = 1_000_000, *, compression: str = "none",
                            partitions: int = 4, batch_records: int = 1000,
                            seed: int = 42) -> None:
    """``records`` records (10-byte keys, 100-byte values, like the records benchmark) over
    ``partitions`` partitions of topic ``bench``, 1 GiB segments."""
    rnd = random.Random(seed)
    d = LogDirWriter(path, cluster_id="YmVuY2gtY2x1c3Rlci0wMQ", created=1_700_000_000.0)
    per = records // partitions
    for p in range(partitions):
        n = per + (records - per * partitions if p == partitions - 1 else 0)
        write_plain_partition(d.partition("bench", p, topic_id=b"\x01" * 16), rnd, n,
                              batch_records=batch_records, compression=compression)
    d.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(prog="python -m kproto.storage.sample", description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--benchmark", action="store_true", help="the benchmark layout instead")
    args = ap.parse_args(argv)
    if args.benchmark:
        write_benchmark_log_dir(args.out, args.records, compression=args.compression)
    else:
        write_sample_log_dir(args.out, records=args.records, compression=args.compression)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
