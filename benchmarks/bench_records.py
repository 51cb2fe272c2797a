"""Record-batch read throughput: kproto's per-record iterator and bulk columnar path against
kafka-python's and aiokafka's readers, on the same bytes, touching offset, timestamp, key and
value of every record.

    python benchmarks/bench_records.py            # 100 batches x 1000 records (quick)
    python benchmarks/bench_records.py --full     # 1000 x 1000 = 1,000,000 records
    python benchmarks/bench_records.py --cpu-time # per CPU second (a shared machine), Java too

With KPROTO_JAVA_BENCH set (``python benchmarks/java_runner.py --build`` prints it), the same bytes
are also read by Apache Kafka's own classes (MemoryRecords batches, the consumer's streaming
iterator; 5 s warm-up, median of 5 rounds by default) and kproto/Java ratios are printed.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import java_runner  # noqa: E402
from kproto.records import RecordBatchBuilder, iter_batches, iter_column_batches  # noqa: E402

CODECS = ("none", "lz4", "zstd")


def make_log(batches: int, per_batch: int, codec: str) -> bytes:
    """Batches of records with 10-byte keys and 100-byte values (half repetitive text, half
    random so codecs have something realistic to do), no headers."""
    rnd = random.Random(42)
    words = [b"alpha", b"beta", b"gamma", b"kafka", b"offset", b"epoch", b"delta"]
    out = []
    off = 0
    ts = 1_700_000_000_000
    for _ in range(batches):
        b = RecordBatchBuilder(compression=codec, base_offset=off)
        for i in range(per_batch):
            text = b" ".join(rnd.choice(words) for _ in range(10))[:50].ljust(50, b".")
            b.append(ts + i, b"key-%06d" % (off % 1_000_000), text + rnd.randbytes(50))
            off += 1
        out.append(b.build())
    return b"".join(out)


def run_kproto_records(data: bytes) -> int:
    n = 0
    for batch in iter_batches(data):
        for r in batch.records():
            r.offset, r.timestamp, r.key, r.value
            n += 1
    return n


def run_kproto_bulk(data: bytes) -> int:
    """The storage/Spark path: columns for runs of batches, each made a pyarrow.RecordBatch
    (offsets, timestamps, keys and values as Arrow arrays)."""
    n = 0
    for cols in iter_column_batches(data):
        cols.to_arrow()
        n += len(cols)
    return n


def run_kproto_headers(data: bytes) -> int:
    """Header-only scan: offsets and counts of every batch, nothing decompressed."""
    n = 0
    for batch in iter_batches(data):
        batch.base_offset, batch.last_offset, batch.max_timestamp
        n += batch.count
    return n


def run_kafka_python(data: bytes) -> int:
    from kafka.record import MemoryRecords
    mr = MemoryRecords(data)
    n = 0
    while True:
        batch = mr.next_batch()
        if batch is None:
            return n
        for r in batch:
            r.offset, r.timestamp, r.key, r.value
            n += 1


def run_aiokafka(data: bytes) -> int:
    from aiokafka.record.memory_records import MemoryRecords  # the Cython reader if built
    mr = MemoryRecords(data)
    n = 0
    while True:
        batch = mr.next_batch()
        if batch is None:
            return n
        for r in batch:
            r.offset, r.timestamp, r.key, r.value
            n += 1


READERS = {
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "kproto records()": run_kproto_records,
    "kproto bulk": run_kproto_bulk,
    "kproto headers": run_kproto_headers,
}


def measure(fn, data: bytes, repeat: int, clock=time.perf_counter) -> tuple[float, int]:
    best = float("inf")
    n = 0
    for _ in range(repeat):
        t = clock()
        n = fn(data)
        best = min(best, clock() - t)
    return best, n


def decompressor_share(data: bytes) -> float:
    """Share of the bulk path's time spent inside the zstd decompressor (profiled)."""
    prof = cProfile.Profile()
    prof.enable()
    run_kproto_bulk(data)
    prof.disable()
    st = pstats.Stats(prof)
    total = st.total_tt
    inner = sum(v[3] for k, v in st.stats.items() if k[2] == "_zstd_decompress")  # cumulative
    return inner / total if total else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--full", action="store_true", help="1,000,000 records (1000 x 1000)")
    ap.add_argument("--batches", type=int, default=None)
    ap.add_argument("--per-batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--pure", action="store_true",
                    help="force the numpy engine even if the C accelerator is built")
    ap.add_argument("--java-warmup", type=float, default=5.0, help="JVM warm-up seconds per codec")
    ap.add_argument("--java-rounds", type=int, default=5, help="JVM rounds (median reported)")
    ap.add_argument("--java-round-seconds", type=float, default=1.0)
    ap.add_argument("--cpu-time", action="store_true",
                    help="records per CPU second (Python's process_time, the JVM's process CPU time)")
    args = ap.parse_args(argv)
    clock = time.process_time if args.cpu_time else time.perf_counter
    from kproto.records import columns
    if args.pure:
        columns._speedups = None
    engine = "C accelerator" if columns._speedups is not None else "numpy"
    batches = args.batches or (1000 if args.full else 100)
    print(f"{batches} batches x {args.per_batch} records, key 10 B, value 100 B, no headers; "
          f"bulk engine: {engine}")
    logs = {codec: make_log(batches, args.per_batch, codec) for codec in args.codecs.split(",")}
    java_cmd = java_runner.command_from_env()
    java = None
    if java_cmd:   # first, alone: the JVM and Python would otherwise share the two cores
        java = java_runner.run(java_cmd, records=list(logs.items()), warmup=args.java_warmup,
                               rounds=args.java_rounds, round_seconds=args.java_round_seconds,
                               cpu_time=args.cpu_time)
        print(f"Java: Kafka {java['kafka']} classes, Java {java['java']}, {java['warmup_s']:g} s warm-up, "
              f"median of {java['rounds']} x {java['round_s']:g} s")
    else:
        print(java_runner.NO_JAVA + "; reference figure (Kafka 4.4.0's classes, this machine, per CPU "
              "second): Java reads 14.3M records/s uncompressed (bench_storage.py measures it on read_arrow's files)")
    for codec, data in logs.items():
        results = {}
        for name, fn in READERS.items():
            secs, n = measure(fn, data, args.repeat, clock)
            results[name] = n / secs
            print(f"  {codec:5} {name:18} {n / secs / 1e6:7.2f} M records/s "
                  f"{len(data) / secs / 1e6:8.1f} MB/s")
        kp, ai = results["kafka-python"], results["aiokafka"]
        print(f"  {codec:5} ratios: records()/kafka-python {results['kproto records()'] / kp:5.2f}x"
              f"  records()/aiokafka {results['kproto records()'] / ai:5.2f}x"
              f"  bulk/kafka-python {results['kproto bulk'] / kp:5.2f}x"
              f"  bulk/aiokafka {results['kproto bulk'] / ai:5.2f}x")
        if java is not None:
            j = java["records"][codec]
            assert j["records"] == n, (j["records"], n)   # the same records were read
            jr = j["records_per_s"]
            print(f"  {codec:5} {'Java (Kafka)':18} {jr / 1e6:7.2f} M records/s "
                  f"{len(data) * jr / n / 1e6:8.1f} MB/s   records()/Java "
                  f"{results['kproto records()'] / jr:5.2f}x  bulk/Java {results['kproto bulk'] / jr:5.2f}x")
        if codec == "zstd":
            print(f"  zstd: share of bulk time inside the decompressor "
                  f"{decompressor_share(data) * 100:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
