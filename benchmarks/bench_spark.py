"""Rows/s scanning a 1,000,000-record log dir (uncompressed, lz4, zstd) made by the storage
writer in a temp dir: ``kproto.storage.read_arrow`` on one core, and the ``kafka-segments``
Spark source in ``local[1]`` and ``local[2]``, next to Spark's ceiling for a Python data
source measured in the same run: a trivial source yielding ready-made Arrow batches of the same
schema, row count and number of tasks. Spark scans are ``write.format("noop")`` (every column
of every row materialised, nothing written).

    python benchmarks/bench_spark.py [--records N] [--codecs none,lz4,zstd] [--split-size 16m]
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
os.environ["PYSPARK_PYTHON"] = sys.executable  # executors need kproto and pyarrow
# workers import this module by name, so the ceiling's batch cache lives in their process
os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.path.join(HERE, ".."),
                                            os.environ.get("PYTHONPATH", "")])

import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

import kproto.spark  # noqa: E402
from kproto.storage import plan_splits, read_arrow, read_split  # noqa: E402
from kproto.storage.sample import write_benchmark_log_dir  # noqa: E402


@functools.lru_cache(maxsize=4)
def _sample_batch(path: str, rows: int) -> pa.RecordBatch:
    """``rows`` real records of the log dir, already in the Spark schema's Arrow form, made
    once per worker process (workers are reused; the timed scans follow a warm-up scan)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    split = plan_splits(path)[0]
    table = pa.Table.from_batches(list(read_split(split))).slice(0, rows)
    return table.combine_chunks().to_batches()[0].cast(
        to_arrow_schema(kproto.spark.spark_schema(), timezone="UTC"))


class _Ceiling(DataSourceReader):
    def __init__(self, options: dict) -> None:
        self.path = options["path"]
        self.rows = int(options["rows"])
        self.tasks = int(options["tasks"])
        self.batch_rows = int(options["batch_rows"])

    def partitions(self):
        per = self.rows // self.tasks
        return [InputPartition(per + (self.rows - per * self.tasks if i == 0 else 0))
                for i in range(self.tasks)]

    def read(self, partition):
        batch = _sample_batch(self.path, self.batch_rows)
        n = partition.value
        while n > 0:
            yield batch if n >= batch.num_rows else batch.slice(0, n)
            n -= batch.num_rows


class CeilingSource(DataSource):
    """Spark's ceiling for a Python source: the same batches, made once, yielded again."""

    @classmethod
    def name(cls) -> str:
        return "arrow-ceiling"

    def schema(self):
        return kproto.spark.spark_schema()

    def reader(self, schema):
        return _Ceiling(self.options)


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def spark_session(master: str):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("bench-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kproto.spark.register(spark)
    import bench_spark  # this file as an importable module: its classes pickle by name

    spark.dataSource.register(bench_spark.CeilingSource)
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--codecs", default="none,lz4,zstd")
    ap.add_argument("--masters", default="local[1],local[2]")
    ap.add_argument("--split-size", default=None, help="kafka-segments splitSize (default: auto)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    codecs = args.codecs.split(",")
    results: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for codec in codecs:
            dirs[codec] = os.path.join(tmp, codec)
            t = time.perf_counter()
            write_benchmark_log_dir(dirs[codec], args.records, compression=codec)
            print(f"wrote {codec} log dir in {time.perf_counter() - t:.1f} s", flush=True)
            n = read_arrow(dirs[codec]).num_rows
            assert n == args.records, n
            results[(codec, "read_arrow")] = args.records / best_of(
                lambda: read_arrow(dirs[codec]), args.repeat)
        for master in args.masters.split(","):
            spark = spark_session(master)
            for codec in codecs:
                reader = spark.read.format("kafka-segments")
                if args.split_size:
                    reader = reader.option("splitSize", args.split_size)
                df = reader.load(dirs[codec])
                tasks = df.rdd.getNumPartitions()
                assert df.count() == args.records
                ceiling = (spark.read.format("arrow-ceiling").option("path", dirs[codec])
                           .option("rows", args.records).option("tasks", tasks)
                           .option("batch_rows", 30_000).load())
                for name, frame in (("spark", df), ("ceiling", ceiling)):
                    def scan(frame=frame):
                        frame.write.format("noop").mode("overwrite").save()
                    scan()  # warm the Python workers
                    results[(codec, f"{name} {master}")] = args.records / best_of(scan, args.repeat)
                print(f"{master} {codec}: {tasks} tasks", flush=True)
            spark.stop()
    masters = args.masters.split(",")
    cols = ["read_arrow"] + [f"{n} {m}" for m in masters for n in ("spark", "ceiling")]
    print("\nrows/s (best of %d)" % args.repeat)
    print(f"{'codec':6} " + " ".join(f"{c:>18}" for c in cols)
          + f" {'spark/ceiling':>14} {'local2/local1':>14}")
    for codec in codecs:
        r = {c: results[(codec, c)] for c in cols}
        line = f"{codec:6} " + " ".join(f"{r[c]:18,.0f}" for c in cols)
        last = masters[-1]
        line += f" {r[f'spark {last}'] / r[f'ceiling {last}']:14.2f}"
        if len(masters) > 1:
            line += f" {r[f'spark {last}'] / r[f'spark {masters[0]}']:14.2f}"
        print(line)


if __name__ == "__main__":
    main()
