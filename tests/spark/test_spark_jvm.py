"""``kafka-segments-jvm`` (kproto/spark/jvm/*.java) against ``kafka-segments`` with
``columns=kafka``: the same schema and the same rows, collected and sorted, on log dirs
kproto's writer wrote with every codec (several topics, partitions and segments, headers,
null keys, control batches, LogAppendTime, a log start offset, tasks cut inside segments),
with transactions (read_committed, startingOffsets / endingOffsets), with startingTimestamp /
endingTimestamp (out-of-order and LogAppendTime timestamps, a delete horizon batch, segments
skipped and entered through the time index), on the log dirs Apache Kafka wrote
(../shared/fixtures/logdirs), on damage (a batch that does not decode partway, a damaged batch
length, a decompression bomb, 250 mutated segments and 160 mutated .timeindex / .index / .log
files read by timestamp, judged by fuzz/jvm_oracle.py through the LogDirCheck tool in the
session's JVM), and its errors for what it does not read. The jar joins the shared session (tests/spark/conftest.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import time
import zipfile

import pytest
from crc32c import crc32c

from kproto.codecs.primitives import read_varint, varint

from kproto.records import LegacyMessageBuilder, RecordBatchBuilder
from kproto.spark import jvm
from kproto.spark.source import kafka_spark_schema
from kproto.storage import LogDirWriter, OffsetCheckpoint

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "fixtures", "logdirs")
TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def session(spark):
    try:
        path = jvm.jar()
    except RuntimeError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    if path not in spark.conf.get("spark.jars", ""):
        pytest.fail("the kafka-segments-jvm jar is not on the shared session's class path")
    return spark


def _rows(df):
    return sorted((r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestampType,
                   None if "headers" not in r or r.headers is None
                   else tuple((h.key, h.value) for h in r.headers)) for r in df.collect())


def _both(session, path, **options):
    read = session.read.options(**options)
    ours = read.format("kafka-segments-jvm").load(path)
    theirs = read.format("kafka-segments").option("columns", "kafka").load(path)
    return ours, theirs


def _write(root, codec):
    """Two topics (3 and 1 partitions) of 1,600 records in small segments; a control batch
    (a committed transaction), a LogAppendTime batch and a log start offset in partition 0."""
    w = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=6000)
    n = 0
    for topic, parts in (("orders", 3), ("clicks", 1)):
        for p in range(parts):
            part = w.partition(topic, p)
            for b in range(40):
                builder = RecordBatchBuilder(compression=codec, base_offset=part.next_offset,
                                             **({"timestamp_type": 1, "log_append_time": TS + 99}
                                                if b == 7 else {}))
                for i in range(10):
                    n += 1
                    key = None if n % 4 == 0 else b"k%d" % (n % 13)
                    headers = [("h", b"%d" % n), ("nil", None)] if n % 3 == 0 else []
                    value = None if n % 50 == 0 else b"v%d-" % n * (1 + n % 5)
                    builder.append(TS + n, key, value, headers)
                part.append(builder.build())
                if b == 20:
                    tx = RecordBatchBuilder(base_offset=part.next_offset, producer_id=9,
                                            producer_epoch=0, transactional=True, control=True)
                    tx.append_end_txn_marker(True, 0, TS)
                    part.append(tx.build())
    w.close()
    with open(os.path.join(root, "log-start-offset-checkpoint"), "wb") as f:
        f.write(OffsetCheckpoint([("orders", 0, 123)]).encode())


@pytest.mark.parametrize("codec", CODECS)
def test_the_rows_of_kafka_segments_with_every_codec(session, tmp_path, codec):
    root = str(tmp_path)
    _write(root, codec)
    ours, theirs = _both(session, root, includeHeaders="true", splitSize="2k")
    assert ours.schema == theirs.schema == kafka_spark_schema(True)
    segments = sum(f.endswith(".log") for _, _, files in os.walk(root) for f in files)
    assert ours.rdd.getNumPartitions() > segments > 4  # segments of ~6 kB cut into tasks
    got, want = _rows(ours), _rows(theirs)
    assert len(want) == 1600 - 123
    assert got == want
    assert any(r[6] == 1 for r in got) and any(r[3] is None for r in got)
    ours, theirs = _both(session, root, subscribe="clicks")
    assert ours.schema == kafka_spark_schema(False)
    assert _rows(ours) == _rows(theirs) and len(_rows(ours)) == 400


def test_the_rows_of_apache_kafkas_log_dirs(session):
    clean, crashed = (os.path.join(FIXTURES, d) for d in ("broker1-clean", "broker1-crashed"))
    # magic 2 topics; the transactional one read_uncommitted (aborted records too)
    topics = "orders,payments,users,clicks,__consumer_offsets,__transaction_state"
    ours, theirs = _both(session, clean, includeHeaders="true", topics=topics, splitSize="16k")
    got = _rows(ours)
    assert got == _rows(theirs) and len(got) > 1000
    # a torn tail and a flipped byte: the rest is read, the damaged batch skipped (CRC-32C)
    ours, _ = _both(session, crashed, includeHeaders="true")
    theirs = (session.read.format("kafka-segments").option("columns", "kafka")
              .option("includeHeaders", "true").option("verifyCrc", "true").load(crashed))
    assert _rows(ours) == _rows(theirs)


def test_a_task_larger_than_the_read_window(session, tmp_path):
    """One task over a 12 MB segment: the reader's window (8 MiB) moves along it, batches
    that straddle its end included."""
    part = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A",
                        segment_bytes=1 << 30).partition("big", 0)
    for b in range(400):
        builder = RecordBatchBuilder(base_offset=part.next_offset)
        for i in range(5):
            builder.append(TS + b, b"%d" % i, os.urandom(6000 + 7 * b))
        part.append(builder.build())
    part.close()
    ours, theirs = _both(session, str(tmp_path), splitSize="1g")
    assert ours.rdd.getNumPartitions() == 1
    summary = ("count(*)", "sum(offset)", "sum(length(value))", "sum(crc32(value))",
               "sum(crc32(key))")
    got = ours.selectExpr(*summary).collect()
    assert got == theirs.selectExpr(*summary).collect() and got[0][0] == 2000


@pytest.mark.parametrize("length, last", [(3, 399), (0x7FFFFFF0, 199)])
def test_a_damaged_batch_length_as_kafka_segments_reads_it(session, tmp_path, length, last):
    """A batch length overwritten in the middle of a segment: too small to frame anything, the
    read goes on from the next .index position (the batches between are lost); past the end of
    the file, it is a torn tail and the segment's read ends there, as in kafka-segments."""
    part = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    for b in range(100):
        builder = RecordBatchBuilder(base_offset=part.next_offset)
        for i in range(4):
            builder.append(TS + b, None, b"%d-%d-" % (b, i) * 40)
        part.append(builder.build())
    part.close()
    log = tmp_path / "t-0" / ("0" * 20 + ".log")
    data = bytearray(log.read_bytes())
    position = 0
    for _ in range(50):  # the 51st batch
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    data[position + 8:position + 12] = length.to_bytes(4, "big")
    log.write_bytes(bytes(data))
    ours, theirs = _both(session, str(tmp_path))
    got = _rows(ours)
    assert got == _rows(theirs)
    assert got[-1][2] == last and (len(got) == 200 if last == 199 else 200 < len(got) < 396)


def test_a_decompression_bomb_is_skipped_and_the_rest_read(session, tmp_path):
    """A zstd batch of 40 MiB of zeros (kilobytes on disk) spends the task's decompression
    allowance (16 MiB plus 64x the compressed bytes), as in kproto's Python reader: that batch
    is skipped, the batches around it are read."""
    part = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    for value in (b"before", bytes(40 << 20), b"after"):
        builder = RecordBatchBuilder(compression="zstd", base_offset=part.next_offset)
        builder.append(TS, None, value)
        part.append(builder.build())
    part.close()
    rows = session.read.format("kafka-segments-jvm").load(str(tmp_path)).collect()
    assert [(r.offset, r.value) for r in rows] == [(0, b"before"), (2, b"after")]


def _check(session, *inputs: str) -> list[dict]:
    """LogDirCheck's JSON lines for these input lines, run in the session's JVM."""
    out = session._jvm.kproto.spark.jvm.LogDirCheck.checkAll("\n".join(inputs) + "\n")
    return [json.loads(line) for line in out.splitlines()]


def _malformed_third_record(batch: bytes) -> bytes:
    """The batch with its 3rd record's key length past the record, CRC-32C made valid again."""
    data = bytearray(batch)
    pos = 61
    for _ in range(2):
        length, after = read_varint(data, pos)
        pos = after + length
    length, at = read_varint(data, pos)  # the 3rd record: attributes, timestamp and offset deltas
    at += 1
    for _ in range(2):
        _, at = read_varint(data, at)
    key_length, after = read_varint(data, at)
    bad = varint(length + 5)
    assert len(bad) == after - at  # same size: the framing around it stays
    data[at:after] = bad
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def test_a_batch_that_does_not_decode_gives_none_of_its_rows(session, tmp_path):
    """A CRC-valid batch whose 3rd record is malformed, starting 2 rows before the end of a
    columnar batch (4,096 rows): none of its rows, the skip reported, the batch after it
    read; as kafka-segments reads it."""
    part = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    for n, bad in ((4094, False), (10, True), (5, False)):
        builder = RecordBatchBuilder(base_offset=part.next_offset)
        for i in range(n):
            builder.append(TS + i, b"k%d" % i, b"v%d" % i, [("h", b"x")] if i % 2 else [])
        part.append(_malformed_third_record(builder.build()) if bad else builder.build())
    part.close()
    ours, theirs = _both(session, str(tmp_path), includeHeaders="true")
    got = _rows(ours)
    assert got == _rows(theirs)
    assert [r[2] for r in got] == [*range(4094), *range(4104, 4109)]
    [report] = _check(session, str(tmp_path))
    assert len(report["rows"]) == len(got) and [r[2] for r in report["rows"]] == [r[2] for r in got]
    [skip] = report["skips"]
    assert "records do not decode" in skip and "offset 4094" in skip


def _oracle():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "fuzz", "jvm_oracle.py")
    spec = importlib.util.spec_from_file_location("jvm_oracle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_damaged_segments_read_as_kproto_reads_them(session, tmp_path):
    """250 mutations of a segment of every codec (bit flips, overwritten bytes, cuts, inserts,
    edge values in batch lengths, base offsets, magic bytes, offset deltas and counts), read in
    one JVM by LogDirCheck through the reader's own code: never a crash, and the rows of
    kproto's Python reader (CRCs checked) wherever the JVM reads the directory at all."""
    oracle = _oracle()
    pristine = tmp_path / "seed"
    log = oracle.seed_logdir(str(pristine))
    data = open(log, "rb").read()
    rnd = random.Random(20261129)
    paths = []
    for i in range(250):
        root = tmp_path / f"m{i}"
        shutil.copytree(pristine, root)
        (root / os.path.relpath(log, pristine)).write_bytes(oracle.mutate(rnd, data))
        paths.append(str(root))
    started = time.monotonic()
    reports = _check(session, *paths)
    assert len(reports) == len(paths) and time.monotonic() - started < 60
    verdicts = [oracle.judge(path, report) for path, report in zip(paths, reports)]
    assert verdicts.count("rows") > 200  # a refusal (a whole legacy message) stays rare
    assert sum(bool(r.get("skips")) for r in reports) > 100  # the damage was met and skipped


def _transactions(root, snapshots=True):
    """kproto's log writer: producers 7, 8 and 9 commit and abort transactions between plain
    batches in segments of 1.5 kB (with .txnindex and producer snapshots), producer 9's last
    transaction left open before two plain records; a second topic of plain batches."""
    w = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=1500)
    part = w.partition("tx", 0)

    def batch(n, tag, pid=-1, seq=0):
        b = RecordBatchBuilder(base_offset=part.next_offset, producer_id=pid,
                               producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=seq if pid >= 0 else -1, transactional=pid >= 0)
        for i in range(n):
            b.append(TS + i, b"k", f"{tag}-{i}".encode())
        part.append(b.build())

    def marker(commit, pid):
        b = RecordBatchBuilder(base_offset=part.next_offset, producer_id=pid, producer_epoch=0,
                               transactional=True, control=True)
        b.append_end_txn_marker(commit, 3, TS)
        part.append(b.build())

    seq = dict.fromkeys((7, 8, 9), 0)
    for r in range(12):
        for pid in (7, 8, 9):
            batch(3, f"t{pid}r{r}", pid, seq[pid])
            seq[pid] += 3
        batch(2, f"plain{r}")
        marker(r % 3 != 0, 7)  # aborted on rounds 0, 3, 6, 9
        marker(r % 2 == 0, 8)  # aborted on odd rounds
        marker(True, 9)
    batch(2, "open", 9, seq[9])
    batch(2, "after")
    for p in range(2):
        other = w.partition("plain", p)
        for b in range(10):
            builder = RecordBatchBuilder(base_offset=other.next_offset)
            for i in range(3):
                builder.append(TS + i, None, b"p%d-%d-%d" % (p, b, i))
            other.append(builder.build())
    w.close()
    if not snapshots:
        for snap in (tmp for tmp in os.listdir(os.path.join(root, "tx-0")) if tmp.endswith(".snapshot")):
            os.remove(os.path.join(root, "tx-0", snap))


@pytest.mark.parametrize("options, snapshots", [
    ({"isolation": "read_committed", "splitSize": "1k"}, True),
    ({"kafka.isolation.level": "read_committed"}, False),
    ({"kafka.isolation.level": "read_committed", "endingOffsets": "150",
      "startingOffsets": '{"tx": {"0": 33}, "plain": {"1": 7, "0": -2}}'}, True),
    ({"startingOffsets": "4", "endingOffsets": '{"tx": {"0": 120}, "plain": {"0": -1, "1": 20}}'}, True),
])
def test_read_committed_and_offset_bounds_as_kafka_segments(session, tmp_path, options, snapshots):
    """read_committed leaves out aborted transactions (.txnindex) and stops at the last stable
    offset (a producer snapshot's open transactions brought up to date by the batches after
    it, or every batch when there is no snapshot); startingOffsets / endingOffsets bound each
    partition, as numbers or Spark's JSON. The rows of kafka-segments on the same options."""
    _transactions(str(tmp_path), snapshots)
    assert any(f.endswith(".snapshot") for f in os.listdir(tmp_path / "tx-0")) == snapshots
    ours, theirs = _both(session, str(tmp_path), **options)
    got = _rows(ours)
    assert got == _rows(theirs)
    values = [r[4].decode() for r in got]
    if "read_committed" in options.values():
        assert not [v for v in values if v.startswith(("open-", "after-", "t7r0-", "t8r1-"))]
        assert "t7r4-0" in values and "t8r4-0" in values
    else:
        assert "t7r3-0" in values and "open-0" not in values  # aborted, read; ends at 120
    if "startingOffsets" in options:
        assert min(r[2] for r in got if r[0] == "tx") in (4, 33)
    full = {"tx": 136, "plain": 60}
    assert 0 < len(got) < sum(full.values())


def test_a_start_offset_enters_its_segment_through_the_index(session, tmp_path):
    """A segment whose first message is of magic 1 (refused when read) then record batches:
    from startingOffsets 20 the read starts at the .index position for offset 20, as
    kafka-segments' does, and never meets the legacy message."""
    part = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A",
                        index_interval=100).partition("t", 0)
    legacy = LegacyMessageBuilder(1)
    legacy.append(1000, b"k", b"old" * 50)
    part.append(legacy.build())
    for b in range(10):
        builder = RecordBatchBuilder(base_offset=part.next_offset)
        for i in range(3):
            builder.append(TS, None, b"x%d" % i * 40)
        part.append(builder.build())
    part.close()
    ours, theirs = _both(session, str(tmp_path), startingOffsets="20")
    got = _rows(ours)
    assert got == _rows(theirs) and [r[2] for r in got] == list(range(20, 31))
    [whole] = _check(session, str(tmp_path))
    assert "magic 1" in whole["refused"]


def test_read_committed_and_bounds_on_apache_kafkas_log_dir(session):
    """Apache Kafka's transactional topic read_committed, bounded per partition in JSON."""
    clean = os.path.join(FIXTURES, "broker1-clean")
    options = {"topics": "payments,orders", "isolation": "read_committed",
               "startingOffsets": '{"orders": {"1": 40}, "payments": {"0": 700}}',
               "endingOffsets": '{"orders": {"0": 50, "2": -1}}'}
    ours, theirs = _both(session, clean, **options)
    got = _rows(ours)
    assert got == _rows(theirs)
    payments = [r for r in got if r[0] == "payments"]
    everything = _rows(session.read.format("kafka-segments-jvm").options(topics="payments")
                       .load(clean))
    assert payments and payments[0][2] >= 700 and len(payments) < len([r for r in everything if r[2] >= 700])


@pytest.mark.parametrize("option, value, error", [
    ("startingOffsets", "latest", "startingOffsets can't be latest for batch queries"),
    ("endingOffsets", '{"orders": {"0": -2}}', "endingOffsets for orders-0 can't be earliest"),
    ("endingOffsets", '{"x": 5}', "endingOffsets must be earliest, latest, an offset or JSON"),
    ("isolation", "serializable", "isolation must be read_uncommitted or read_committed"),
    ("startingTimestamp", "12x", "startingtimestamp must be an integer: 12x"),
    ("endingTimestamp", "1.5", "endingtimestamp must be an integer: 1.5"),
    ("includeControl", "true", "includecontrol=true is not supported.*kafka-segments"),
])
def test_option_values_it_refuses(session, option, value, error):
    with pytest.raises(Exception, match=error):
        session.read.format("kafka-segments-jvm").option(option, value) \
            .load(os.path.join(FIXTURES, "broker1-clean")).schema


@pytest.mark.parametrize("option", ["startingTimestamp", "endingTimestamp"])
def test_a_timestamp_that_is_no_integer_is_refused_as_kafka_segments_refuses_it(session, option):
    path = os.path.join(FIXTURES, "broker1-clean")
    for source, name in (("kafka-segments-jvm", "kafka-segments-jvm"), ("kafka-segments", "kafka-segments")):
        with pytest.raises(Exception, match=f"{name}: {option.lower()} must be an integer"):
            session.read.format(source).option(option, "soon").load(path).collect()
    ours, theirs = _both(session, path, topics="orders", **{option: " 1_717_000_555_130 "})
    assert _rows(ours) == _rows(theirs) and _rows(ours)


def _timestamped(root, topics=("ct", "la")):
    """Partitions of 60 batches of 5 records in segments of 900 bytes (.index / .timeindex
    entries every 100 bytes): topic ct CreateTime, each batch's timestamps out of order
    (batch b: TS + 100 b + 0..80, its largest not last), topic la LogAppendTime (batch b:
    TS + 100 b + 50, the records' own timestamps ignored); in ct-0 batch 30 has the delete
    horizon bit and a max timestamp (TS + 1) below its records' (read whole all the same)."""
    w = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=900,
                     index_interval=100)
    for topic in topics:
        for p in range(2):
            part = w.partition(topic, p)
            for b in range(60):
                extra = {"timestamp_type": 1, "log_append_time": TS + 100 * b + 50} if topic == "la" else {}
                horizon = topic == "ct" and p == 0 and b == 30
                if horizon:
                    extra = {"delete_horizon_ms": TS + 100 * b}
                builder = RecordBatchBuilder(base_offset=part.next_offset, **extra)
                for i, d in enumerate((40, 0, 80, 20, 60)):
                    builder.append(TS + 100 * b + d, b"k%d" % i, b"%s-%d-%d-%d" % (topic.encode(), p, b, i))
                data = bytearray(builder.build())
                if horizon:
                    data[35:43] = (TS + 1).to_bytes(8, "big")
                    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
                part.append(bytes(data))
    w.close()


@pytest.mark.parametrize("options", [
    {"startingTimestamp": TS},
    {"startingTimestamp": TS + 3040},
    {"startingTimestamp": TS + 3041, "splitSize": "1k"},
    {"endingTimestamp": TS + 2020},
    {"startingTimestamp": TS + 1234, "endingTimestamp": TS + 4321, "startingOffsets": "80"},
    {"startingTimestamp": TS + 900, "endingTimestamp": TS + 5000,
     "startingOffsets": '{"ct": {"0": 200}}', "endingOffsets": '{"la": {"1": 150}, "ct": {"1": 260}}'},
    {"startingTimestamp": 0, "endingTimestamp": TS + 10**7},
    {"startingTimestamp": TS + 10**7},
    {"endingTimestamp": TS},
    {"startingTimestamp": TS + 4000, "endingTimestamp": TS + 3000},
])
def test_timestamp_bounds_as_kafka_segments(session, tmp_path, options):
    """startingTimestamp / endingTimestamp (``[start, end)``), alone and with offset bounds
    and task cuts, at, between and outside the records' timestamps: the rows of
    kafka-segments, a record kept by its own timestamp (LogAppendTime: its batch's), the
    delete horizon batch whose max timestamp is below the start still read."""
    _timestamped(str(tmp_path))
    assert sum(f.endswith(".log") for f in os.listdir(tmp_path / "ct-0")) > 5
    ours, theirs = _both(session, str(tmp_path), **options)
    got = _rows(ours)
    assert got == _rows(theirs)
    start = options.get("startingTimestamp", -1) * 1000
    end = options.get("endingTimestamp", 2**62) * 1000
    assert all(start <= int(r[5].timestamp() * 1e6) < end for r in got)
    assert bool(got) == (start < end and start <= (TS + 5980) * 1000 and end > TS * 1000)
    if options.get("startingTimestamp") == TS + 3041:
        assert [r[4] for r in got if r[4].startswith(b"ct-0-30-")] == [b"ct-0-30-2", b"ct-0-30-4"]


def test_a_late_start_timestamp_reads_no_closed_segment_below_it(session, tmp_path):
    """Closed segments whose .timeindex ends below startingTimestamp are not planned at all;
    the first read is entered through the time index (a task less per skipped segment)."""
    _timestamped(str(tmp_path), topics=("ct",))
    n_every, n_late = (session.read.format("kafka-segments-jvm").options(splitSize="100", **late)
                       .load(str(tmp_path)).rdd.getNumPartitions()
                       for late in ({}, {"startingTimestamp": str(TS + 5000)}))
    assert n_late < n_every / 4
    ours, theirs = _both(session, str(tmp_path), startingTimestamp=str(TS + 5000))
    assert _rows(ours) == _rows(theirs) and _rows(ours)


def _horizon(root, batches, **writer):
    """Partition h-0 of batches of 3 records (tag, ms after TS, 1000x values: a big batch);
    batch "h" has the delete horizon bit and a max timestamp (TS + 1) below its records'."""
    part = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", **writer).partition("h", 0)
    for tag, at, big in batches:
        builder = RecordBatchBuilder(base_offset=part.next_offset,
                                     **({"delete_horizon_ms": TS + at} if tag == "h" else {}))
        for i in range(3):
            builder.append(TS + at + i, None, b"%s%d" % (tag.encode(), i) * (1000 if big else 1))
        data = bytearray(builder.build())
        if tag == "h":
            data[35:43] = (TS + 1).to_bytes(8, "big")
            data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
        part.append(bytes(data))
    part.close()
    return root + "/h-0/"


@pytest.mark.parametrize("damage", [None, "no .timeindex", "no .index", "disorder"])
def test_the_time_index_decides_where_a_timestamp_read_starts(session, tmp_path, damage):
    """The horizon batch (records at TS + 5000) before batches of max TS + 3002 (of 6 kB: a
    rebuilt index has an entry after it) and TS + 3502: from TS + 4000 on, kafka-segments
    starts where the time index's entry for TS + 3502 points, past the horizon batch's
    records; the JVM source too, with the indexes as written, one of them missing, or the
    .timeindex's timestamps not growing (unusable: both rebuilt by a scan, as the Python
    reader rebuilds them; taken as they are it would start before the horizon batch)."""
    folder = _horizon(str(tmp_path), (("a", 0, False), ("h", 5000, False), ("b", 3000, True),
                                      ("x", 3500, False), ("c", 6000, False)), index_interval=1)
    if damage in ("no .timeindex", "no .index"):
        os.remove(folder + "0" * 20 + damage[3:])
    elif damage == "disorder":
        path = folder + "0" * 20 + ".timeindex"
        data = bytearray(open(path, "rb").read())
        assert len(data) >= 36
        data[12:20] = (TS + 9999).to_bytes(8, "big")  # the 2nd entry past the start
        open(path, "wb").write(bytes(data))
    ours, theirs = _both(session, str(tmp_path), startingTimestamp=TS + 4000)
    got = _rows(ours)
    assert got == _rows(theirs)
    assert [r[4] for r in got] == [b"c0", b"c1", b"c2"]
    everything = _rows(session.read.format("kafka-segments-jvm").load(str(tmp_path)))
    assert b"h0" in [r[4] for r in everything]


@pytest.mark.parametrize("preallocated", [False, True])
def test_a_closed_segment_is_skipped_by_its_time_index_unless_preallocated(session, tmp_path,
                                                                         preallocated):
    """A first segment of a batch at TS and the horizon batch (its .timeindex ends at TS + 2,
    below its records): from TS + 4000 on, kafka-segments does not read it, unless its
    .timeindex is preallocated (zeros after the entries: its end says nothing), when the
    horizon batch's records are read; the JVM source the same."""
    folder = _horizon(str(tmp_path), (("a", 0, False), ("h", 5000, False), ("c", 6000, False)),
                      segment_bytes=250, index_interval=1)
    logs = sorted(f for f in os.listdir(folder) if f.endswith(".log"))
    assert len(logs) == 2
    if preallocated:
        with open(folder + logs[0][:-4] + ".timeindex", "ab") as f:
            f.write(bytes(120))
    ours, theirs = _both(session, str(tmp_path), startingTimestamp=TS + 4000)
    got = _rows(ours)
    assert got == _rows(theirs)
    assert [r[4] for r in got] == [b"h0", b"h1", b"h2"] * preallocated + [b"c0", b"c1", b"c2"]


def test_read_committed_with_timestamps_as_kafka_segments(session, tmp_path):
    """read_committed (aborted transactions, the last stable offset) with a timestamp range
    and startingOffsets: the rows of kafka-segments."""
    _transactions(str(tmp_path))
    options = {"isolation": "read_committed", "startingTimestamp": TS + 1,
               "endingTimestamp": TS + 2, "startingOffsets": "20", "splitSize": "1k"}
    ours, theirs = _both(session, str(tmp_path), **options)
    got = _rows(ours)
    assert got == _rows(theirs) and got
    assert {r[4].decode().rsplit("-", 1)[1] for r in got} == {"1"}


def test_timestamp_bounds_on_apache_kafkas_log_dirs(session):
    """Apache Kafka's log dirs (segments of CreateTime and LogAppendTime topics, the
    crashed broker's preallocated and damaged files), bounded by timestamps: the rows of
    kafka-segments."""
    clean, crashed = (os.path.join(FIXTURES, d) for d in ("broker1-clean", "broker1-crashed"))
    topics = "orders,payments,users,clicks"
    for options in ({"startingTimestamp": 1717000555130},
                    {"startingTimestamp": 1717000563806, "endingTimestamp": 1717000577585},
                    {"endingTimestamp": 1717000559139, "isolation": "read_committed",
                     "startingOffsets": "100", "splitSize": "16k"}):
        ours, theirs = _both(session, clean, topics=topics, **options)
        got = _rows(ours)
        assert got == _rows(theirs) and got
    ours, _ = _both(session, crashed, startingTimestamp=1717000563806)
    theirs = (session.read.format("kafka-segments").option("columns", "kafka")
              .option("verifyCrc", "true").option("startingTimestamp", 1717000563806).load(crashed))
    assert _rows(ours) == _rows(theirs)


def _mutate_time_index(rnd, data: bytes, oracle) -> bytes | None:
    """One edit of a .timeindex (None: the file removed): an entry's timestamp or offset set
    to an edge value, entries dropped, swapped or cut, the file zeroed (preallocation without
    entries), emptied or given a partial slot, or the byte edits of the oracle."""
    slots = [data[i:i + 12] for i in range(0, len(data) - len(data) % 12, 12)]
    op = rnd.randrange(8)
    if op == 0:
        return None
    if op == 1 or not slots:
        return b""
    i = rnd.randrange(len(slots))
    if op == 2:
        ts, rel = int.from_bytes(slots[i][:8], "big", signed=True), int.from_bytes(slots[i][8:], "big")
        if rnd.random() < 0.5:
            ts = rnd.choice((0, -1, ts - 1, ts + 1, TS, TS + 10**6, 2**63 - 1))
        else:
            rel = rnd.choice((0, rel + 1, rel - 1, 2**31 - 1)) % 2**32
        slots[i] = (ts % 2**64).to_bytes(8, "big") + rel.to_bytes(4, "big")
    elif op == 3:
        del slots[i:i + rnd.randint(1, 3)]
    elif op == 4 and len(slots) > 1:
        j = rnd.randrange(len(slots))
        slots[i], slots[j] = slots[j], slots[i]
    elif op == 5:
        return bytes(len(data) + 12 * rnd.randint(0, 4))
    elif op == 6:
        return b"".join(slots) + bytes(rnd.randint(1, 11))
    else:
        return oracle.mutate(rnd, data)
    return b"".join(slots)


def test_damaged_files_with_timestamps_read_as_kproto_reads_them(session, tmp_path):
    """160 mutations of one file of a partition of several segments (a .timeindex most
    often, else an .index or a .log), read from a random startingTimestamp to a random
    endingTimestamp (some with a start offset or read_committed): never a crash, and the
    rows of kproto's Python reader (time index rules, rebuilt indexes, skipped segments)."""
    oracle = _oracle()
    pristine = tmp_path / "seed"
    _timestamped(str(pristine), topics=("ct",))
    shutil.rmtree(pristine / "ct-1")
    names = sorted(os.listdir(pristine / "ct-0"))
    rnd = random.Random(1129)
    cases = []
    for i in range(160):
        root = tmp_path / f"m{i}"
        shutil.copytree(pristine, root)
        kind = rnd.choice((".timeindex", ".timeindex", ".timeindex", ".index", ".log"))
        victim = root / "ct-0" / rnd.choice([n for n in names if n.endswith(kind)])
        data = victim.read_bytes()
        if kind == ".timeindex":
            new = _mutate_time_index(rnd, data, oracle)
        elif kind == ".index" and rnd.random() < 0.3:
            new = None
        else:
            new = oracle.mutate(rnd, data) if data else rnd.randbytes(rnd.randint(1, 40))
        if new is None:
            victim.unlink()
        else:
            victim.write_bytes(new)
        options = {"start_timestamp": rnd.choice((None, TS + rnd.randrange(-100, 6100))),
                   "end_timestamp": rnd.choice((None, TS + rnd.randrange(0, 6200)))}
        if options["start_timestamp"] is None and options["end_timestamp"] is None:
            options["start_timestamp"] = TS + rnd.randrange(0, 6000)
        if rnd.random() < 0.2:
            options["start_offset"] = rnd.randrange(0, 300)
        if rnd.random() < 0.2:
            options["isolation"] = "read_committed"
        cases.append((str(root), {k: v for k, v in options.items() if v is not None}))
    names_of = {"start_timestamp": "startingTimestamp", "end_timestamp": "endingTimestamp",
                "start_offset": "startingOffsets", "isolation": "isolation"}
    reports = _check(session, *(root + "".join(f"\t{names_of[k]}={v}" for k, v in options.items())
                                for root, options in cases))
    verdicts = [oracle.judge(root, report, **options)
                for (root, options), report in zip(cases, reports)]
    assert verdicts.count("rows") == len(cases)
    assert sum(bool(r["rows"]) for r in reports) > 100


def test_check_command_reads_each_line_of_its_stdin(session, tmp_path):
    """LogDirCheck as its own program (the fuzz campaign's way): a JSON line per input line,
    in order, options after tabs."""
    import subprocess

    _write(str(tmp_path), "lz4")
    lines = [f"{tmp_path}\tsubscribe=clicks\tendingOffsets=7", str(tmp_path / "missing")]
    run = subprocess.run(jvm.check_command(), input="\n".join(lines) + "\n", capture_output=True,
                         text=True, timeout=300)
    first, second = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r[:3] for r in first["rows"]] == [["clicks", 0, o] for o in range(7)]
    assert "is not a directory" in second["refused"]


def test_damaged_transaction_files_read_committed_as_kproto_reads_them(session, tmp_path):
    """80 mutations of one file of a transactional partition (a segment, its .index or
    .txnindex, a producer snapshot), read read_committed from a random start to a random end:
    never a crash, and the rows of kproto's Python reader."""
    oracle = _oracle()
    pristine = tmp_path / "seed"
    _transactions(str(pristine))
    names = sorted(f for f in os.listdir(pristine / "tx-0")
                   if f.endswith((".log", ".index", ".txnindex", ".snapshot")))
    rnd = random.Random(5)
    cases = []
    for i in range(80):
        root = tmp_path / f"m{i}"
        shutil.copytree(pristine, root)
        victim = root / "tx-0" / rnd.choice(names)
        data = victim.read_bytes()
        victim.write_bytes(oracle.mutate(rnd, data) if data else rnd.randbytes(rnd.randint(1, 40)))
        start, end = rnd.randrange(0, 170), rnd.choice([None, rnd.randrange(0, 200)])
        cases.append((str(root), start, end))
    reports = _check(session, *(f"{root}\tisolation=read_committed\tstartingOffsets={start}"
                                + (f"\tendingOffsets={end}" if end is not None else "")
                                for root, start, end in cases))
    verdicts = [oracle.judge(root, report, isolation="read_committed", start_offset=start,
                             end_offset=end) for (root, start, end), report in zip(cases, reports)]
    assert verdicts.count("rows") == len(cases)


@pytest.mark.parametrize("damage", ["length", "magic"])
def test_read_committed_walks_past_framing_damage_as_kproto_reads(session, tmp_path, damage):
    """The last stable offset's walk over the batch headers (no producer snapshot) meets a
    batch that frames nothing (its length zeroed, or an unknown magic) and goes on at the next
    batch the .index knows, as kproto's Python reader does: an open transaction after the
    damage (length: the .index knows its batch) bounds the read; one inside the skipped bytes
    (magic: the .index entry of its batch removed) does not."""
    w = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", index_interval=1)
    part = w.partition("tx", 0)
    positions, size = [], 0
    for tag, pid in (("a", -1), ("b", -1), ("open", 9), ("d", -1)):
        b = RecordBatchBuilder(base_offset=part.next_offset, producer_id=pid,
                               producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=0 if pid >= 0 else -1, transactional=pid >= 0)
        for i in range(2):
            b.append(TS + i, b"k", f"{tag}-{i}".encode())
        data = b.build()
        positions.append(size)
        size += len(data)
        part.append(data)
    w.close()
    folder = tmp_path / "tx-0"
    for name in os.listdir(folder):
        if name.endswith(".snapshot"):
            os.remove(folder / name)
    [log] = [folder / n for n in os.listdir(folder) if n.endswith(".log")]
    data = bytearray(log.read_bytes())
    at = positions[1]
    if damage == "length":
        data[at + 8:at + 12] = bytes(4)
    else:
        data[at + 16] = 7
        index = log.with_suffix(".index")
        entries = index.read_bytes()
        kept = b"".join(entries[i:i + 8] for i in range(0, len(entries), 8)
                        if int.from_bytes(entries[i + 4:i + 8], "big") != positions[2]
                        and entries[i:i + 8] != bytes(8))
        index.write_bytes(kept)
    log.write_bytes(bytes(data))
    ours, theirs = _both(session, str(tmp_path), isolation="read_committed")
    got = _rows(ours)
    assert got == _rows(theirs)
    values = [r[4].decode() for r in got]
    assert values == (["a-0", "a-1"] if damage == "length" else ["a-0", "a-1", "d-0", "d-1"])
    [report] = _check(session, f"{tmp_path}\tisolation=read_committed")
    assert _oracle().judge(str(tmp_path), report, isolation="read_committed") == "rows"


def test_what_it_does_not_read_names_kafka_segments(session):
    with pytest.raises(Exception, match="magic 0.*kafka-segments"):
        session.read.format("kafka-segments-jvm").option("topics", "legacy") \
            .load(os.path.join(FIXTURES, "broker1-clean")).collect()


def test_jar_names_a_missing_javac_and_reuses_a_built_jar(tmp_path, monkeypatch):
    monkeypatch.setenv("KPROTO_CACHE_DIR", str(tmp_path))
    path = os.environ["PATH"]
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac on it
    with pytest.raises(RuntimeError, match="javac"):
        jvm.jar()
    assert not list(tmp_path.glob("*.jar"))
    monkeypatch.setenv("PATH", path)
    if os.environ.get("CI") != "true" and not shutil.which("javac"):
        pytest.skip("no javac here")
    replaced = []
    real_replace = os.replace

    def replace(src, dst):  # a move within one directory, so within one file system
        replaced.append((os.path.dirname(os.path.dirname(src)), os.path.dirname(dst)))
        return real_replace(src, dst)
    monkeypatch.setattr(jvm.os, "replace", replace)
    built = jvm.jar()
    assert os.path.dirname(built) == str(tmp_path)
    assert replaced == [(str(tmp_path), str(tmp_path))]
    with zipfile.ZipFile(built) as zf:
        assert "kproto/spark/jvm/KafkaSegmentsJvm.class" in zf.namelist()
        assert zf.read(jvm.SERVICE).strip() == b"kproto.spark.jvm.KafkaSegmentsJvm"
    monkeypatch.setattr(jvm, "_jdk_tool", lambda *a: pytest.fail("javac looked for, for a built jar"))
    assert jvm.jar() == built
