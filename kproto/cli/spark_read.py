"""``kproto spark-read PATH``: read a log directory with the ``kafka-segments`` Spark source
and print records per partition (count, offset and time range), the first rows, or the damage
the read meets."""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from kproto.cli.errors import CliError, require_log_dir


def register(subparsers) -> None:
    """Add the ``spark-read`` subcommand."""
    p = subparsers.add_parser(
        "spark-read", help="read a Kafka log directory with Spark (kafka-segments source)",
        description="Starts a local SparkSession, registers the kafka-segments data source and "
                    "reads PATH (a log dir or a <topic>-<partition> folder). Needs pyspark "
                    "and Java 17.")
    p.add_argument("path")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--isolation", choices=("read_uncommitted", "read_committed"),
                   default="read_uncommitted")
    p.add_argument("--include-control", action="store_true")
    p.add_argument("--topics", help="comma-separated topic names")
    p.add_argument("--where", help="a Spark SQL condition, e.g. \"topic = 'orders'\"")
    p.add_argument("--show", type=int, metavar="N", help="print N records instead of a summary")
    p.add_argument("--verify-crc", action="store_true", help="skip batches whose CRC fails")
    p.add_argument("--damage", action="store_true",
                   help="print the damage found (output=damage) instead of the records")
    p.set_defaults(func=run)


def require_java() -> None:
    """Raise :class:`CliError` when Spark cannot start its JVM (pyspark's own failure is a
    long Java gateway traceback)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise CliError(f"Spark needs Java 17 or newer ({where}): install a JDK or JRE, e.g. "
                       "apt-get install openjdk-17-jre-headless, and put it on PATH or set "
                       "JAVA_HOME")


def run(args: argparse.Namespace) -> int:
    """Exit code 0 (with ``--damage``: 1 when damage was found); 2 when the path does not
    exist or Spark is missing."""
    require_log_dir(args.path)
    try:
        from pyspark.sql import SparkSession, functions as F
    except ImportError:
        raise CliError("needs pyspark: pip install 'kproto[spark]'") from None
    require_java()
    import kproto.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need kproto
    spark = SparkSession.getActiveSession()  # inside a Spark app: use its session
    own = spark is None
    if spark is None:
        spark = (SparkSession.builder.master(args.master).appName("kproto spark-read")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    try:
        kproto.spark.register(spark)
        reader = (spark.read.format("kafka-segments").option("isolation", args.isolation)
                  .option("includeControl", str(args.include_control).lower())
                  .option("verifyCrc", str(args.verify_crc).lower()))
        if args.topics:
            reader = reader.option("topics", args.topics)
        if args.damage:
            reader = reader.option("output", "damage")
        df = reader.load(os.path.abspath(args.path))
        if args.where:
            df = df.where(args.where)
        if args.damage:
            rows = df.orderBy("topic", "partition", "file", "position").collect()
            for r in rows:
                print(f"{r.topic}-{r.partition}  {r.file}  position={r.position}  {r.kind}  "
                      f"bytes_skipped={r.bytes_skipped}  {r.reason}")
            print(f"{len(rows)} damage item(s)")
            return 1 if rows else 0
        if args.show:
            df.select("topic", "partition", "offset", "timestamp", "key", "value",
                      "is_control").show(args.show, truncate=40)
            return 0
        (df.groupBy("topic", "partition")
         .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
              F.max("offset").alias("last_offset"), F.min("timestamp").alias("first_time"),
              F.max("timestamp").alias("last_time"))
         .orderBy("topic", "partition").show(1000, truncate=False))
        return 0
    finally:
        if own:
            spark.stop()
