"""kafka-segments beside Spark's own Kafka source (format ``kafka``, spark-sql-kafka-0-10):
records written to Apache Kafka 4.4.0 (three partitions, keys and null keys, headers, every
codec, a transaction committed and one aborted, and a LogAppendTime topic) read through the
broker by Spark's source and from the broker's data directory by kafka-segments with the same
options (``subscribe``, ``includeHeaders``, ``kafka.isolation.level``, ``startingOffsets`` /
``endingOffsets`` in Spark's JSON form with -2 and -1, plus ``columns=kafka``): the same
column names and types and the same rows, in batch reads and in Trigger.AvailableNow streams.
The option parsing behind it is checked without Spark."""
from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest
from pyspark.sql.datasource import GreaterThanOrEqual

from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.producer import Producer
from kproto.spark.scan import parse_options
from kproto.spark.stream import parse_stream_options
from kproto.storage import read_arrow
from kproto.storage.tail import tail_log_dirs
from kproto.testing import spark as spark_kafka

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 30
TXN = 12  # records per transaction: committed, aborted, committed


async def _write(bootstrap: str, topic: str, appended: str) -> None:
    """``topic`` (3 partitions) and ``appended`` (1 partition, LogAppendTime) with their
    records; the aborted transaction's records are sent before its abort, so they are in the
    log (and left out by read_committed)."""
    # CreateTime timestamps of the last minute, one second apart: older ones would make Kafka
    # roll segments and delete them by retention
    ts = int(time.time() * 1000) - 60_000
    async with Cluster(bootstrap) as cluster:
        await Admin(cluster).create_topics({topic: 3, appended: 1}, configs={
            appended: {"message.timestamp.type": "LogAppendTime"}})
        await cluster.wait_for_leaders([topic, appended])
        for codec in CODECS:
            p = await Producer(cluster, compression=codec).start()
            for n in range(PER_CODEC):
                key = None if n % 5 == 0 else f"k{n % 7}".encode()
                headers = [("h", f"{codec}{n}".encode()), ("nil", None)] if n % 3 == 0 else []
                await p.send(topic, f"{codec}-{n}".encode() * (1 + n % 4), key=key,
                             partition=n % 3, headers=headers, timestamp_ms=ts + n * 1000)
            await p.send(appended, f"{codec}".encode(), key=codec.encode())
            await p.flush()
            await p.close()
        t = await Producer(cluster, transactional_id=f"tx-{topic}", compression="lz4").start()
        for outcome in ("committed", "aborted", "committed-too"):
            t.begin_transaction()
            for n in range(TXN):
                await t.send(topic, f"{outcome}-{n}".encode(), key=f"t{n}".encode(),
                             partition=n % 3, headers=[("txn", outcome.encode())])
            if outcome == "aborted":
                await t.flush()
                await t.abort_transaction()
            else:
                await t.commit_transaction()
        await t.close()


_written: dict[str, tuple[str, str, str]] = {}


@pytest.fixture
def kafka_topics(request, spark):
    """(bootstrap, topic, LogAppendTime topic, data directory) of the session's Apache Kafka
    node, the records written once per node. Without Spark's Kafka source (tools/setup.sh
    fetches it) the test is skipped, or fails under CI as the Apache Kafka tests do."""
    reason = spark_kafka.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark's Kafka source is needed under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    apache_kafka = request.getfixturevalue("apache_kafka")
    if apache_kafka.bootstrap not in _written:
        suffix = uuid.uuid4().hex[:8]
        topic, appended = f"spark-vs-kafka-{suffix}", f"spark-vs-kafka-lat-{suffix}"
        asyncio.run(_write(apache_kafka.bootstrap, topic, appended))
        data = str(apache_kafka.log_dir(1))

        def checkpointed() -> bool:
            tails = tail_log_dirs([data], topics=[topic, appended])
            return len(tails) == 4 and all(t.high_watermark == t.log_end for t in tails.values())
        # kafka-segments streams read up to the high watermarks Kafka checkpoints (every 5 s)
        apache_kafka.wait_for(checkpointed, 30, "the high watermarks checkpointed")
        _written[apache_kafka.bootstrap] = (topic, appended, data)
    topic, appended, data = _written[apache_kafka.bootstrap]
    return apache_kafka.bootstrap, topic, appended, data


def _both(spark, kafka_topics, options, stream=False):
    """Spark's Kafka source and kafka-segments with ``options`` (plus what each needs to find
    the data): their DataFrames."""
    bootstrap, _, _, data = kafka_topics
    reader = spark.readStream if stream else spark.read
    spark_df = reader.format("kafka").option("kafka.bootstrap.servers", bootstrap) \
        .options(**options).load()
    reader = spark.readStream if stream else spark.read
    ours = reader.format("kafka-segments").option("columns", "kafka").options(**options).load(data)
    return spark_df, ours


def _rows(df):
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[2], r[3], r[4]))


def _same(spark_df, ours):
    """Same names and types, same rows; the rows (sorted by topic, partition, offset)."""
    assert [(f.name, f.dataType) for f in ours.schema] == \
        [(f.name, f.dataType) for f in spark_df.schema]
    expected, got = _rows(spark_df), _rows(ours)
    assert got == expected
    return got


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_batch_reads_are_spark_kafka_sources_rows(spark, kafka_topics, isolation):
    _, topic, appended, _ = kafka_topics
    rows = _same(*_both(spark, kafka_topics, {
        "subscribe": f"{topic},{appended}", "includeHeaders": "true",
        "kafka.isolation.level": isolation}))
    values = [r[1] for r in rows if r[2] == topic]
    plain = len(CODECS) * PER_CODEC
    committed = 2 * TXN if isolation == "read_committed" else 3 * TXN
    assert len(values) == plain + committed  # not two empty reads
    assert any(v.startswith(b"aborted-") for v in values) == (isolation == "read_uncommitted")
    assert {r[0] is None for r in rows} == {True, False}             # keys and null keys
    assert {r[7] is None for r in rows} == {True, False}             # headers and none
    assert {r[6] for r in rows if r[2] == appended} == {1}           # LogAppendTime
    assert {r[6] for r in rows if r[2] == topic} == {0}
    # every codec is in the log the rows come from
    assert set(read_arrow(kafka_topics[3], topics=[topic]).column("compression").to_pylist()) \
        == set(CODECS)


def test_batch_offsets_in_sparks_json_form(spark, kafka_topics):
    _, topic, _, _ = kafka_topics
    start = {topic: {"0": -2, "1": 7, "2": 3}}
    end = {topic: {"0": 20, "1": -1, "2": 40}}
    rows = _same(*_both(spark, kafka_topics, {
        "subscribe": topic, "kafka.isolation.level": "read_committed",
        "startingOffsets": json.dumps(start), "endingOffsets": json.dumps(end)}))
    by_partition = {p: [o for _, _, _, q, o, *_ in rows if q == p] for p in range(3)}
    assert min(by_partition[0]) == 0 and max(by_partition[0]) < 20
    assert min(by_partition[1]) == 7
    assert min(by_partition[2]) == 3 and max(by_partition[2]) < 40
    assert len(rows) > 50
    # a query without headers has Spark's columns without them
    spark_df, ours = _both(spark, kafka_topics, {"subscribe": topic})
    assert ours.columns == spark_df.columns == ["key", "value", "topic", "partition", "offset",
                                                "timestamp", "timestampType"]


def test_assign_and_subscribe_pattern(spark, kafka_topics):
    _, topic, appended, _ = kafka_topics
    rows = _same(*_both(spark, kafka_topics, {
        "assign": json.dumps({topic: [0, 2]}),
        "startingOffsets": json.dumps({topic: {"0": 4, "2": -2}})}))
    assert {r[3] for r in rows} == {0, 2} and min(r[4] for r in rows if r[3] == 0) == 4
    suffix = topic.rsplit("-", 1)[1]
    rows = _same(*_both(spark, kafka_topics, {"subscribePattern": f"spark-vs-kafka-(lat-)?{suffix}"}))
    assert {r[2] for r in rows} == {topic, appended}


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_available_now_streams_are_spark_kafka_sources_rows(spark, kafka_topics, tmp_path,
                                                            isolation):
    _, topic, _, _ = kafka_topics
    options = {"subscribe": topic, "includeHeaders": "true",
               "kafka.isolation.level": isolation,
               "startingOffsets": json.dumps({topic: {"0": -2, "1": 5, "2": -1}})}
    frames = _both(spark, kafka_topics, options, stream=True)
    results = []
    for name, df in zip(("spark_kafka", "kafka_segments"), frames):
        table = f"{name}_{isolation}_{uuid.uuid4().hex[:6]}"
        query = (df.writeStream.format("memory").queryName(table)
                 .option("checkpointLocation", str(tmp_path / name))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), f"{name}: the availableNow query did not end"
        assert query.exception() is None
        results.append(spark.table(table))
    rows = _same(*results)
    partitions = {r[3] for r in rows}
    assert partitions == {0, 1}                                    # -1: nothing of partition 2
    assert min(r[4] for r in rows if r[3] == 1) == 5


# ---------------------------------------------------------------- option parsing (no Spark)
def test_json_offsets_per_partition():
    spec = parse_options({"path": "x", "startingOffsets": '{"t": {"0": -2, "1": 7}}',
                          "endingOffsets": '{"t": {"1": -1, "2": 40}}'})
    assert spec.read.start_offset is None and spec.read.end_offset is None
    assert dict(spec.partition_offsets) == {("t", 0): (None, None), ("t", 1): (7, None),
                                            ("t", 2): (None, 40)}
    assert spec.read_for("t", 1).start_offset == 7
    assert spec.read_for("t", 2).end_offset == 40
    assert spec.read_for("u", 0) == spec.read
    # with a pushed filter on offset: the tighter bound of the two wins
    narrowed, rest = parse_options({"path": "x", "startingOffsets": '{"t": {"0": 3, "1": 30}}'}
                                   ).push([GreaterThanOrEqual(("offset",), 10)])
    assert rest == []
    assert narrowed.read_for("t", 0).start_offset == 10
    assert narrowed.read_for("t", 1).start_offset == 30


@pytest.mark.parametrize("options, message", [
    ({"startingOffsets": '{"t": {"0": -1}}'}, "can't be latest"),
    ({"endingOffsets": '{"t": {"0": -2}}'}, "can't be earliest"),
    ({"startingOffsets": "latest"}, "can't be latest"),
    ({"endingOffsets": "earliest"}, "can't be earliest"),
    ({"startingOffsets": '{"t": {"0": -3}}'}, "-2 (earliest)"),
    ({"startingOffsets": '{"t": [0]}'}, "JSON like"),
    ({"isolation": "read_committed", "kafka.isolation.level": "read_uncommitted"},
     "say different things"),
    ({"topics": "a", "subscribe": "b"}, "say different things"),
    ({"includeHeaders": "true"}, "is for columns=kafka"),
    ({"columns": "spark"}, "columns must be one of"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "give one of"),
    ({"subscribePattern": "a.*", "topics": "a"}, "give one of"),
    ({"assign": '{"a": 0}'}, "assign must be JSON"),
    ({"assign": '["a"]'}, "assign must be JSON"),
    ({"subscribePattern": "a("}, "no regular expression"),
    ({"columns": "kafka", "output": "damage"}, "columns=kafka reads records"),
])
def test_bad_spark_forms_are_refused(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_options({"path": "x", **options})


def test_spark_kafka_aliases():
    spec = parse_options({"path": "x", "subscribe": "a,b", "kafka.isolation.level": "read_committed",
                          "columns": "kafka"})
    assert spec.topics == {"a", "b"} and spec.read.isolation == "read_committed"
    assert spec.columns == "kafka" and spec.include_headers is False
    assert parse_options({"path": "x", "columns": "kafka", "includeHeaders": "true"}).include_headers
    assert parse_options({"path": "x"}).include_headers  # kproto's columns always have them


def test_assign_and_pattern_select_partitions():
    assign = parse_options({"path": "x", "assign": '{"a": [0, 2], "b": [1]}'})
    assert assign.topics == {"a", "b"}
    assert [assign.selects(t, p) for t, p in (("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1))] \
        == [True, False, True, False, True]
    pattern = parse_options({"path": "x", "subscribePattern": "orders|pay.*"})
    assert [pattern.selects(t, 0) for t in ("orders", "orders-eu", "payments", "xpay")] \
        == [True, False, True, False]  # matched in full, as Java's Matcher.matches
    assert parse_options({"path": "x", "assign": "{}"}).empty


def test_stream_json_offsets_take_sparks_minus_two_and_minus_one():
    spec = parse_stream_options({"path": "x", "startingOffsets": '{"t": {"0": -2, "1": -1, "2": 4}}'})
    assert spec.starting == {("t", 0): -2, ("t", 1): -1, ("t", 2): 4}
    with pytest.raises(ValueError, match="-2 \\(earliest\\)"):
        parse_stream_options({"path": "x", "startingOffsets": '{"t": {"0": -5}}'})
