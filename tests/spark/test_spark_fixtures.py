"""The Spark source returns exactly the fixtures' expected records (every partition of every
log dir, both isolations, with and without control records) and handles their damage."""
from __future__ import annotations

import os

import pytest

from kproto.spark import spark_schema
from kproto.storage import arrow_schema

from spark_expected import (COLUMNS, LOGDIRS, by_partition, expected_records, expected_rows,
                            partition_dirs, spark_rows)

PARTS = partition_dirs()
BROKERS = sorted({p.split("/")[0] for p in PARTS})


def _read(spark, path, **options):
    reader = spark.read.format("kafka-segments")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_schema(spark):
    df = _read(spark, os.path.join(LOGDIRS, BROKERS[0]))
    assert df.columns == COLUMNS == arrow_schema().names
    assert df.schema == spark_schema()


@pytest.mark.parametrize("broker", BROKERS)
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("include_control", [False, True])
def test_log_dir_matches_expected(spark, broker, isolation, include_control):
    # small splits on half the runs: cuts inside segments must not change the rows
    split = {"splitSize": "16k"} if include_control else {}
    df = _read(spark, os.path.join(LOGDIRS, broker), isolation=isolation,
               includeControl=str(include_control).lower(), **split)
    got = by_partition(spark_rows(df.toArrow()))
    parts = [p for p in PARTS if p.startswith(broker + "/")]
    want = {}
    for p in parts:
        topic, n = os.path.basename(p).rsplit("-", 1)
        rows = expected_rows(p, isolation, include_control)
        if rows:
            want[(topic, int(n))] = rows
    assert sorted(got) == sorted(want)
    for key, rows in want.items():
        assert len(got[key]) == len(rows), key
        assert got[key] == rows, key


def test_partition_folder_and_small_splits(spark):
    part = "broker1-clean/orders-1"
    path = os.path.join(LOGDIRS, part)
    whole = _read(spark, path)
    small = _read(spark, path, splitSize="4096")
    # the 64 KiB segments are cut at .index positions into many tasks
    assert small.rdd.getNumPartitions() > 2 * whole.rdd.getNumPartitions()
    want = expected_rows(part, "read_uncommitted", False)
    assert spark_rows(small.toArrow()) == want


def test_crc_verification_skips_the_bad_batch(spark):
    part = "broker1-crashed/events-2"
    records = expected_records(part)
    bad = {r["offset"] for r in records if not r["batch"]["is_valid"]}
    assert bad
    path = os.path.join(LOGDIRS, part)
    plain = _read(spark, path).select("offset").toArrow().column(0).to_pylist()
    checked = _read(spark, path, verifyCrc="true").select("offset").toArrow().column(0).to_pylist()
    assert plain == [r["offset"] for r in records]
    assert checked == [r["offset"] for r in records if r["offset"] not in bad]


def test_tasks_follow_registration(spark, tmp_path):
    import kproto.spark
    from kproto.storage.sample import write_benchmark_log_dir

    write_benchmark_log_dir(str(tmp_path), 120_000, partitions=2)  # two ~7.5 MB segments
    try:
        counts = {}
        for tasks in (2, 3):
            kproto.spark.register(spark, tasks=tasks)
            df = spark.read.format("kafka-segments").load(str(tmp_path))
            counts[tasks] = df.rdd.getNumPartitions()
            assert df.count() == 120_000
    finally:
        kproto.spark.register(spark)
    assert counts == {2: 2, 3: 3}
