"""``.option("output", "damage")``: the damage a read meets, as rows, through the real
SparkSession on the crashed fixture log dir; and one reader class serving both pushdown
settings."""
from __future__ import annotations

import json
import os
import pickle

import pytest
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSourceReader

from kproto.spark import KafkaSegmentsReader, damage_spark_schema, parse_options, spark_schema
from kproto.storage import read_arrow
from kproto.problems import Problems

from spark_expected import LOGDIRS, expected_records

CRASHED = os.path.join(LOGDIRS, "broker1-crashed")
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _damage(spark, path, **options):
    reader = spark.read.format("kafka-segments").option("output", "damage")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def _rows(df) -> list[tuple]:
    return sorted((r.topic, r.partition, r.file, r.position, r.kind, r.reason, r.bytes_skipped)
                  for r in df.collect())


def _reference(path, **options) -> list[tuple]:
    """What read_arrow reports for the same read (each record says its topic and partition:
    those of the folder holding its file)."""
    damage = Problems()
    read_arrow(path, problems=damage, **options)
    out = []
    for d in damage:
        topic, part = os.path.basename(os.path.dirname(d.source)).rsplit("-", 1)
        assert (d.topic, d.partition) == (topic, int(part))
        out.append((d.topic, d.partition, d.source, d.position, d.kind, d.reason,
                    d.bytes_skipped))
    return sorted(out)


def test_damage_rows_of_the_crashed_broker(spark):
    df = _damage(spark, CRASHED)
    assert df.schema == damage_spark_schema()
    rows = _rows(df)
    assert rows == _reference(CRASHED)
    # the fixtures' facts: events-1 ends in a torn batch, events-2 has a batch with a bad CRC
    crc = [r for r in expected_records("broker1-crashed/events-2") if not r["batch"]["is_valid"]]
    kinds = {(r[0], r[1], r[4]) for r in rows}
    assert ("events", 1, "torn-tail") in kinds and ("events", 2, "crc") in kinds
    (bad,) = [r for r in rows if r[4] == "crc"]
    assert (os.path.basename(bad[2]), bad[3], bad[6]) == \
        (crc[0]["segment"], crc[0]["batch"]["position"], 0)
    torn = [r for r in rows if r[4] == "torn-tail"]
    assert len(torn) == 1 and torn[0][6] > 0


def test_damage_rows_follow_the_options(spark):
    # verifying CRCs skips the bad batch: its bytes are counted as skipped
    rows = _rows(_damage(spark, CRASHED, verifyCrc="true", splitSize="4k"))
    assert rows == _reference(CRASHED, verify_crc=True)
    (bad,) = [r for r in rows if r[4] == "crc"]
    assert bad[6] > 0
    # small splits, one partition, a topic filter (pushed down or not): the same rows
    part = os.path.join(CRASHED, "events-1")
    assert _rows(_damage(spark, part, splitSize="4k")) == _reference(part)
    for pushdown in ("false", "true"):
        spark.conf.set(PUSHDOWN, pushdown)
        try:
            got = _rows(_damage(spark, CRASHED).filter(F.col("partition") == 2))
        finally:
            spark.conf.unset(PUSHDOWN)
        assert got == [r for r in _reference(CRASHED) if r[1] == 2]


def test_damage_rows_take_topic_and_partition_from_the_record():
    # not from the file's folder name: a record found outside a partition folder (or in a
    # folder named otherwise) still lands on its partition's row
    from kproto.spark.source import DAMAGE_SCHEMA, _damage_batch

    found = Problems()
    found.scope(topic="orders", partition=3).report(
        "index", "bad; rebuilt by scanning", source="/copied/somewhere/00000000000000000000.index")
    found.report("file", "no topic known", source="/logs/meta.properties")
    rows = _damage_batch(found, DAMAGE_SCHEMA).to_pylist()
    assert [(r["topic"], r["partition"], r["file"], r["kind"]) for r in rows] == [
        ("orders", 3, "/copied/somewhere/00000000000000000000.index", "index"),
        (None, None, "/logs/meta.properties", "file")]


def test_planning_damage_rows_carry_the_partition(spark, tmp_path):
    # a bad index is found while planning, on the driver: its row still has its partition
    import shutil

    part = tmp_path / "events-1"
    shutil.copytree(os.path.join(CRASHED, "events-1"), part)
    index = sorted(part.glob("*.index"))[0]
    index.chmod(0o644)
    index.write_bytes(b"\xff" * 12)
    rows = _rows(_damage(spark, str(tmp_path)))
    assert rows == _reference(str(tmp_path))
    assert ("events", 1, "index") in {(r[0], r[1], r[4]) for r in rows}


def test_no_damage_rows_on_a_clean_broker(spark):
    assert _damage(spark, os.path.join(LOGDIRS, "broker1-clean")).count() == 0


def test_one_reader_for_both_pushdown_settings():
    # Spark's planner without pushdown accepts only readers whose pushFilters is the
    # inherited one; the reader must still take filters when the other planner calls it
    spec = parse_options({"path": CRASHED})
    reader = KafkaSegmentsReader(spec, spark_schema())
    assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters
    assert type(reader).pushFilters is DataSourceReader.pushFilters
    from pyspark.sql.datasource import EqualTo, GreaterThan
    keep = GreaterThan(("position",), 5)
    rest = reader.pushFilters([EqualTo(("topic",), "events"), keep])
    assert list(rest) == [keep] and reader.spec.topics == frozenset({"events"})
    # the reader travels to the executors pickled, with what was pushed
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.spec == reader.spec
    copy.pushFilters([EqualTo(("partition",), 1)])
    assert copy.spec.partition_range == (1, 1) and reader.spec.partition_range == (None, None)


def test_bad_output_option_is_refused():
    with pytest.raises(ValueError, match="output"):
        parse_options({"path": CRASHED, "output": "everything"})


def test_cli_prints_the_damage(spark, capsys):
    from kproto.cli.main import main

    assert main(["spark-read", CRASHED, "--damage", "--format", "text"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"{len(_reference(CRASHED))} damage item(s)"
    assert any(" crc " in ln and ln.startswith("events-2 ") for ln in lines)
    assert main(["spark-read", os.path.join(LOGDIRS, "broker1-clean"), "--damage",
                 "--format", "text"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 damage item(s)"
    assert main(["spark-read", CRASHED, "--damage", "--format", "jsonl"]) == 1
    docs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert len(docs) == len(_reference(CRASHED)) and {d["kind"] for d in docs} >= {"crc"}
