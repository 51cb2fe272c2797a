"""Options and filters select exactly the rows they name, with Spark's filter pushdown on
(the scan is narrowed: fewer tasks) and off (Spark filters the rows itself)."""
from __future__ import annotations

import datetime as dt
import os

import pytest
from pyspark.sql import functions as F

from spark_expected import LOGDIRS, expected_rows, partition_dirs

BROKER = os.path.join(LOGDIRS, "broker1-clean")
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
UTC = dt.timezone.utc


@pytest.fixture(params=[False, True], ids=["pushdown-off", "pushdown-on"])
def pushdown(request, spark):
    spark.conf.set(PUSHDOWN, str(request.param).lower())
    yield request.param
    spark.conf.unset(PUSHDOWN)


def _all_rows() -> list[dict]:
    return [r for p in partition_dirs() if p.startswith("broker1-clean/")
            for r in expected_rows(p, "read_uncommitted", False)]


def _keys(rows) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)


def _got(df) -> list[tuple[str, int, int]]:
    t = df.select("topic", "partition", "offset").toArrow()
    return sorted(zip(*(t.column(i).to_pylist() for i in range(3))))


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, UTC)


def test_filters_on_topic_partition_offset_timestamp(spark, pushdown):
    rows = _all_rows()
    orders = sorted(r["timestamp"] for r in rows if r["topic"] == "orders")
    t_lo, t_hi = orders[len(orders) // 4], orders[3 * len(orders) // 4]
    df = spark.read.format("kafka-segments").load(BROKER)
    # with 4 KiB splits each task holds a few batches: pruning shows in the task count
    fine = spark.read.format("kafka-segments").option("splitSize", "4k").load(BROKER)
    full_tasks = fine.rdd.getNumPartitions()
    col = F.col
    cases = [  # (filter, the same predicate on expected rows)
        ((col("topic") == "orders") & (col("partition") == 1) & (col("offset") >= 100)
         & (col("offset") < 180),
         lambda r: r["topic"] == "orders" and r["partition"] == 1 and 100 <= r["offset"] < 180),
        (col("topic").isin("users", "clicks") & (col("offset") > 1000),
         lambda r: r["topic"] in ("users", "clicks") and r["offset"] > 1000),
        (col("topic").startswith("__") & (col("partition") <= 0),
         lambda r: r["topic"].startswith("__")),
        ((col("topic") == "orders") & (col("timestamp") >= F.lit(_ts(t_lo)))
         & (col("timestamp") <= F.lit(_ts(t_hi))),
         lambda r: r["topic"] == "orders" and t_lo <= r["timestamp"] <= t_hi),
        (col("offset").isin(3, 500, 2100) & (col("topic") == "orders"),
         lambda r: r["topic"] == "orders" and r["offset"] in (3, 500, 2100)),
        ((col("offset") == 5) & (col("offset") == 6), lambda r: False),
    ]
    for i, (cond, pred) in enumerate(cases):
        want = _keys(r for r in rows if pred(r))
        assert want or i == len(cases) - 1
        assert _got(df.filter(cond)) == want, i
        if want:  # (Spark's optimizer drops a contradiction before any scan)
            tasks = fine.filter(cond).rdd.getNumPartitions()
            assert tasks < full_tasks if pushdown else tasks == full_tasks, i


def test_options_select_rows(spark):
    rows = _all_rows()
    reader = spark.read.format("kafka-segments")
    df = (reader.option("topics", "orders,payments").option("partitions", "0")
          .option("startingOffsets", "50").option("endingOffsets", "400").load(BROKER))
    assert _got(df) == _keys(r for r in rows if r["topic"] in ("orders", "payments")
                             and r["partition"] == 0 and 50 <= r["offset"] < 400)
    stamps = sorted(r["timestamp"] for r in rows if r["topic"] == "clicks")
    lo, hi = stamps[10], stamps[-10]
    df = (spark.read.format("kafka-segments").option("topics", "clicks")
          .option("startingTimestamp", str(lo)).option("endingTimestamp", str(hi)).load(BROKER))
    assert _got(df) == _keys(r for r in rows if r["topic"] == "clicks"
                             and lo <= r["timestamp"] < hi)


def test_bad_option_fails_the_read(spark):
    with pytest.raises(Exception, match="isolation must be one of"):
        spark.read.format("kafka-segments").option("isolation", "dirty").load(BROKER).count()


def test_several_paths(spark):
    parts = ["broker1-clean/users-0", "broker1-crashed/events-0"]
    df = spark.read.format("kafka-segments").load([os.path.join(LOGDIRS, p) for p in parts])
    assert _got(df) == _keys(r for p in parts for r in expected_rows(p, "read_uncommitted", False))


def test_user_schema_selects_columns(spark):
    part = "broker1-clean/orders-2"
    df = (spark.read.format("kafka-segments").schema("offset bigint, topic string, partition int")
          .load(os.path.join(LOGDIRS, part)))
    assert df.columns == ["offset", "topic", "partition"]
    t = df.toArrow()
    assert sorted(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist(),
                      t.column("offset").to_pylist())) == \
        _keys(expected_rows(part, "read_uncommitted", False))
