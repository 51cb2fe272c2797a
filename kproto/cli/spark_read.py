"""``kproto spark-read PATH``: read a log directory with the ``kafka-segments`` Spark source
and print records per partition (count, offset and time range), the first rows, or the damage
the read meets."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any

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
    p.add_argument("--format", choices=("auto", "text", "jsonl"), default="auto",
                   help="a table (text) or JSON lines, one per row (default: text on a "
                        "terminal, jsonl otherwise)")
    p.set_defaults(func=run)


def shown(value: Any) -> Any:
    """A key or value as a person reads it: text when the bytes are UTF-8, the bytes
    otherwise (``b'\\x00\\x01'``); None stays None."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    return value


def _emit(rows: list[dict[str, Any]], columns: list[str], fmt: str, width: int = 40) -> None:
    """Rows as JSON lines, or as a table with each cell cut to ``width`` characters."""
    if fmt == "jsonl":
        for row in rows:
            doc = {c: (repr(v) if isinstance(v, bytes) else v) for c, v in row.items()}
            print(json.dumps(doc, ensure_ascii=False, default=str))
        return
    cells = [[_cell(row[c], width) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


#: Times as ``kproto logdir`` prints them (ISO 8601, milliseconds, the session's zone: UTC)
_TIME = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"


def _cell(value: Any, width: int) -> str:
    text = "null" if value is None else value if isinstance(value, str) else (
        repr(value) if isinstance(value, bytes) else str(value))
    from kproto.cli.dump_log import _ESCAPES  # one row stays on one line, as in dump-log

    text = text.translate(_ESCAPES)
    return text if len(text) <= width else text[:width - 3] + "..."


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
                 # Spark's own progress bar, on a terminal only
                 .config("spark.ui.showConsoleProgress", str(sys.stderr.isatty()).lower())
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
        fmt = args.format
        if fmt == "auto":
            fmt = "text" if sys.stdout.isatty() else "jsonl"
        if args.damage:
            columns = ["topic", "partition", "file", "position", "kind", "bytes_skipped", "reason"]
            found = [r.asDict() for r in
                     df.orderBy("topic", "partition", "file", "position").collect()]
            if fmt == "jsonl":
                _emit([{c: r[c] for c in columns} for r in found], columns, fmt)
            else:
                for r in found:
                    print(f"{r['topic']}-{r['partition']}  {r['file']}  position={r['position']}  "
                          f"{r['kind']}  bytes_skipped={r['bytes_skipped']}  {r['reason']}")
                print(f"{len(found)} damage item(s)")
            return 1 if found else 0
        if args.show:
            columns = ["topic", "partition", "offset", "timestamp", "key", "value", "is_control"]
            picked = df.withColumn("timestamp", F.date_format("timestamp", _TIME))
            rows = [{c: shown(r[c]) for c in columns}
                    for r in picked.select(*columns).take(args.show)]
            _emit(rows, columns, fmt)
            return 0
        summary = (df.groupBy("topic", "partition")
                   .agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                        F.max("offset").alias("last_offset"),
                        F.date_format(F.min("timestamp"), _TIME).alias("first_time"),
                        F.date_format(F.max("timestamp"), _TIME).alias("last_time"))
                   .orderBy("topic", "partition").collect())
        columns = ["topic", "partition", "records", "first_offset", "last_offset", "first_time",
                   "last_time"]
        _emit([r.asDict() for r in summary], columns, fmt, width=200)
        return 0
    finally:
        if own:
            spark.stop()
