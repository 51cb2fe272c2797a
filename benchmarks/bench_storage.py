"""Throughput of ``kproto.storage.read_arrow`` scanning a 1,000,000-record log dir
(uncompressed, lz4, zstd; 4 partitions, 1000-record batches, indexes present), next to the
records layer's bulk path on the same segment files (the storage reader's ceiling) and, when
``KPROTO_JAVA_BENCH`` is set (see ``benchmarks/java_runner.py``), Apache Kafka's own classes
scanning the same files, in the same run. Median CPU time of interleaved runs (the machine is
shared; look at the ratios).

Column types differ by default, so both are shown: ``read_arrow`` returns classic Arrow
``binary`` keys and values (what pandas, Spark and pyarrow.compute take everywhere), the bulk
path ``binary_view`` (zero-copy views of the decoded data). Columns:

* ``read_arrow``: the default, binary;
* ``bulk``: ``decode_columns`` + ``to_arrow`` (binary_view), the faster of one call per
  segment file and ``iter_column_batches`` chunks (both the records layer's bulk path);
* ``bulk+cast``: the same, keys and values then cast to binary (read_arrow's default types);
* ``read_arrow view``: ``read_arrow(binary_view=True)`` (bulk's types).

Both engines: the C helper (``kproto/records/_speedups.c``) and the numpy one without it.
Java (run first, alone, so that the JVM and Python do not share the two cores): every record
of every file iterated with ``MemoryRecords`` over the mapped files (``mapped``: the
reference), the same with each batch's CRC checked (read_arrow computes every CRC), and through
``FileRecords`` (Kafka's log reads); records per second of the JVM's CPU time (all its
threads, as Python's is its process time), median of its rounds.

    python benchmarks/bench_storage.py [--records N] [--batch-records N] [--engines c,numpy]
                                       [--codecs none,lz4,zstd] [--repeat N] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import glob
import mmap
import os
import pstats
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, ".."))
sys.path.insert(0, _HERE)

import pyarrow as pa  # noqa: E402

import java_runner  # noqa: E402
from kproto.records import columns, decode_columns, iter_column_batches  # noqa: E402
from kproto.storage import read_arrow  # noqa: E402
from kproto.storage.sample import write_benchmark_log_dir  # noqa: E402

CODECS = ("none", "lz4", "zstd")


def write_log_dir(root: str, records: int, codec: str, batch_records: int = 1000) -> None:
    """The benchmark's log dir: ``records`` records over 4 partitions of topic ``bench``."""
    write_benchmark_log_dir(root, records, compression=codec, batch_records=batch_records)


def segment_files(root: str) -> list[str]:
    """The ``.log`` files of a log dir, in partition order."""
    return sorted(glob.glob(os.path.join(root, "*", "*.log")))


def median_of(fns, repeat: int = 5) -> list[tuple[float, int]]:
    """Median CPU time and row count of each function, runs interleaved so that load bursts
    hit all of them."""
    times: list[list[float]] = [[] for _ in fns]
    rows = [fn() for fn in fns]  # a first run of each, untimed: imports and first-use costs
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.process_time()  # CPU time: less disturbed by other jobs on a shared box
            rows[i] = fn()
            times[i].append(time.process_time() - t)
    return [(statistics.median(t), n) for t, n in zip(times, rows)]


def _mapped(path: str):
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch-records", type=int, default=1000,
                    help="records per batch (the benchmark's file: 1000)")
    ap.add_argument("--engines", default="c,numpy")
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--java-warmup", type=float, default=5.0, help="JVM warm-up seconds per scan")
    ap.add_argument("--java-rounds", type=int, default=5, help="JVM rounds (median reported)")
    ap.add_argument("--java-round-seconds", type=float, default=1.0)
    args = ap.parse_args()
    speedups = columns._speedups
    binary = pa.binary()
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for codec in args.codecs.split(","):
            roots[codec] = os.path.join(tmp, codec)
            write_log_dir(roots[codec], args.records, codec, args.batch_records)
        print(f"{args.records:,} records in {args.batch_records}-record batches, 4 partitions")
        java_cmd = java_runner.command_from_env()
        java = None
        if java_cmd:  # first, alone: the JVM and Python would otherwise share the two cores
            java = java_runner.run(java_cmd, segments=[(c, segment_files(r)) for c, r in
                                                       roots.items()],
                                   warmup=args.java_warmup, rounds=args.java_rounds,
                                   round_seconds=args.java_round_seconds, cpu_time=True)["segments"]
            print("Java: Kafka's classes (java_runner), records per CPU second of a scan of the same files")
        else:
            print(java_runner.NO_JAVA + "; reference figure (Kafka 4.4.0's classes, this machine, per CPU second): "
                  "Java scans 14.3M records/s uncompressed")
        print("rows/s, median CPU time of %d interleaved runs" % args.repeat)
        print(f"{'engine':6} {'codec':5} {'read_arrow':>11} {'bulk':>11} {'ratio':>6} "
              f"{'bulk+cast':>11} {'ratio':>6} {'read_arrow view':>16} {'vs bulk':>8}")
        results = {}
        for engine in args.engines.split(","):
            if engine == "c" and speedups is None:
                print("c      (the C helper is not built: skipped)")
                continue
            columns._speedups = speedups if engine == "c" else None
            for codec, root in roots.items():
                logs = segment_files(root)

                def storage(root=root) -> int:
                    return read_arrow(root).num_rows

                def storage_view(root=root) -> int:
                    return read_arrow(root, binary_view=True).num_rows

                def bulk_files(logs=logs, cast=False) -> int:  # one call per segment file
                    n = 0
                    for p in logs:
                        with open(p, "rb") as f:
                            rb = decode_columns(f.read()).to_arrow()
                        if cast:
                            rb = rb.set_column(2, "key", rb.column(2).cast(binary)).set_column(
                                3, "value", rb.column(3).cast(binary))
                        n += rb.num_rows
                    return n

                def bulk_chunks(logs=logs, cast=False) -> int:  # bounded memory, in chunks
                    n = 0
                    for p in logs:
                        for cols in iter_column_batches(_mapped(p)):
                            rb = cols.to_arrow()
                            if cast:
                                rb = rb.set_column(2, "key", rb.column(2).cast(binary)) \
                                    .set_column(3, "value", rb.column(3).cast(binary))
                            n += rb.num_rows
                    return n

                fns = [storage, bulk_files, bulk_chunks, lambda: bulk_files(cast=True),
                       lambda: bulk_chunks(cast=True), storage_view]
                (ts, n), (tf, nf), (tc, nc), (tfc, nfc), (tcc, ncc), (tv, nv) = \
                    median_of(fns, args.repeat)
                assert n == nf == nc == nfc == ncc == nv == args.records
                tb, tbc = min(tf, tc), min(tfc, tcc)
                r = args.records
                results[engine, codec] = r / ts
                print(f"{engine:6} {codec:5} {r / ts:11,.0f} {r / tb:11,.0f} {tb / ts:6.2f} "
                      f"{r / tbc:11,.0f} {tbc / ts:6.2f} {r / tv:16,.0f} {tb / tv:8.2f}",
                      flush=True)
                if args.profile:
                    cProfile.runctx("storage()", globals(), locals(), "/tmp/storage.prof")
                    pstats.Stats("/tmp/storage.prof").sort_stats("tottime").print_stats(15)
        columns._speedups = speedups
        if java is not None:
            print(f"{'Java':6} {'codec':5} {'mapped':>11} {'mapped+crc':>11} {'FileRecords':>12}"
                  f" {'read_arrow/mapped':>18} {'/mapped+crc':>12}")
            for codec in roots:
                j = java[codec]
                assert j["records"] == args.records, j  # the same records were read
                mine = results.get(("c", codec)) or results.get(("numpy", codec))
                ratios = f"{mine / j['mapped']:18.2f} {mine / j['mapped_crc']:12.2f}" \
                    if mine else ""
                print(f"{'Java':6} {codec:5} {j['mapped']:11,.0f} {j['mapped_crc']:11,.0f} "
                      f"{j['file_records']:12,.0f} {ratios}")


if __name__ == "__main__":
    main()
