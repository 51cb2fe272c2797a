"""``spark.readStream.format("kafka-segments")`` over the data directory of kproto's broker
while clients write to it: a parquet sink gets every produced record exactly once (by topic,
partition, offset and value) across a stop and restart of the query from its checkpoint, with
read_committed: a committed transaction's records are there, an aborted one's are not, and
transactions still open when a micro-batch is planned are not cut; a topic created while the
query runs is read. Reads stop at the checkpointed high watermark (Trigger.AvailableNow on a
storage-writer log dir), and options a stream cannot honour are refused."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
from collections import Counter

import pytest

from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.producer import Producer
from kproto.records import RecordBatchBuilder
from kproto.storage import LogDirWriter, OffsetCheckpoint
from kproto.testing import TEST_DEFAULTS, BrokerThread

TOPICS = {"events": 2, "audit": 1}
TS = 1_700_000_000_000
WAVES = 20  # one wave every 0.2 s
PAUSE = 14  # the clients wait there (transaction 2 open) until the first query is stopped


class Clients:
    """Produces in a background thread: plain records in waves, one transaction aborted and
    one committed, each spanning several waves (so several micro-batches see it open), and a
    topic created half-way; waits at wave ``PAUSE`` until ``resume`` is set. Keeps what the
    broker acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: list[tuple[str, int, int, str]] = []   # what the sink must hold
        self.aborted: list[tuple[str, int, int, str]] = []
        self.wave = 0
        self.error: BaseException | None = None
        self.paused, self.resume = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, name="producers", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(asyncio.wait_for(self._produce(), 60))
        except BaseException as exc:  # reported by the test
            self.error = exc

    async def _produce(self) -> None:
        async with Cluster(self.bootstrap) as cluster:
            await Admin(cluster).create_topics({"events": TOPICS["events"]})
            plain = await Producer(cluster, linger_ms=2).start()
            tx = await Producer(cluster, transactional_id="stream-tx", linger_ms=2).start()
            pending: list = []
            tx_sent: list = []
            for wave in range(WAVES):
                self.wave = wave
                if wave == PAUSE:
                    self.paused.set()
                    await asyncio.get_running_loop().run_in_executor(None, self.resume.wait, 60)
                if wave == WAVES // 2:
                    await Admin(cluster).create_topics({"audit": TOPICS["audit"]})
                if wave in (2, 12):
                    tx.begin_transaction()
                if 2 <= wave < 8 or 12 <= wave < 17:
                    for part in range(2):
                        v = f"tx{wave // 10}-{wave}-{part}"
                        tx_sent.append((v, await tx.send("events", v.encode(), partition=part)))
                    await tx.flush()
                if wave == 8:
                    await tx.abort_transaction()
                    self.aborted += [self._row(f, v) for v, f in tx_sent]
                    tx_sent = []
                if wave == 17:
                    await tx.commit_transaction()
                    self.acked += [self._row(f, v) for v, f in tx_sent]
                    tx_sent = []
                for i in range(15):
                    topic = "audit" if wave >= WAVES // 2 and i % 3 == 0 else "events"
                    v = f"p-{wave}-{i}"
                    pending.append((v, await plain.send(topic, v.encode())))
                await plain.flush()
                self.acked += [self._row(f, v) for v, f in pending]
                pending = []
                await asyncio.sleep(0.2)
            self.wave = WAVES

    @staticmethod
    def _row(fut, value: str) -> tuple[str, int, int, str]:
        md = fut.result()
        return md.topic, md.partition, md.offset, value


def _rows(spark, out):
    from pyspark.errors import AnalysisException

    try:  # only the files of committed micro-batches (the sink's _spark_metadata log)
        found = spark.read.parquet(out).select("topic", "partition", "offset", "value").collect()
    except AnalysisException:  # no micro-batch committed a file yet
        return []
    # the broker's internal topics are streamed too (transaction state, ...): not ours
    return [(r.topic, r.partition, r.offset, r.value.decode())
            for r in found if not r.topic.startswith("__")]


def _ends(rows):
    """The offset after the last of ``rows`` in each partition."""
    ends: dict = {}
    for t, p, o, _ in rows:
        ends[(t, p)] = max(ends.get((t, p), 0), o + 1)
    return ends


def _reached(q, ends):
    """Whether a micro-batch of ``q`` (done: in the sink) ended at or past ``ends``."""
    for progress in q.recentProgress:
        done = json.loads(progress["sources"][0]["endOffset"] or "{}")
        if all(done.get(t, {}).get(str(p), -1) >= end for (t, p), end in ends.items()):
            return True
    return False


def _high_watermarks(data):
    try:
        with open(os.path.join(data, "replication-offset-checkpoint"), "rb") as f:
            return {(t, p): o for t, p, o in OffsetCheckpoint.parse(f.read()).entries}
    except FileNotFoundError:
        return {}


def _wait(what, cond, timeout=45.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_stream_of_a_live_broker_exactly_once_across_a_restart(spark, tmp_path):
    data, out, ckpt = (str(tmp_path / n) for n in ("kafka", "out", "ckpt"))
    broker = BrokerThread(data, segment_bytes=2048, **TEST_DEFAULTS,
                          replica_high_watermark_checkpoint_interval_ms=200).start()
    try:
        clients = Clients(broker.bootstrap)

        def start():
            return (spark.readStream.format("kafka-segments").option("isolation", "read_committed")
                    .load(data).writeStream.format("parquet").option("checkpointLocation", ckpt)
                    .trigger(processingTime="300 milliseconds").start(out))

        clients.thread.start()
        _wait("the topic", lambda: os.path.isdir(os.path.join(data, "events-1")))
        q = start()
        # stop once the sink has the audit records written while transaction 2 is open
        # (so a micro-batch was planned then), the clients waiting with it still open
        _wait("the clients' pause", clients.paused.is_set)
        audit = {tp: end for tp, end in _ends(clients.acked).items() if tp[0] == "audit"}
        _wait("the first query's records", lambda: _reached(q, audit))
        q.stop()
        first = _rows(spark, out)
        q = start()
        clients.resume.set()
        clients.thread.join(60)
        assert clients.error is None, clients.error
        # the stream reads below the high watermarks the broker checkpoints (bound=auto):
        # everything is available once the checkpoint has caught up with the last records
        ends = _ends(clients.acked)
        _wait("the high-watermark checkpoint", lambda: all(
            hw.get(tp, 0) >= end for hw in [_high_watermarks(data)] for tp, end in ends.items()))
        q.processAllAvailable()
        q.stop()
        rows = _rows(spark, out)
    finally:
        broker.stop()
    assert 0 < len(first) < len(rows)
    assert not any(v.startswith("tx1-") for *_, v in first)  # open when the first query stopped
    counts = Counter((t, p, o) for t, p, o, _ in rows)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:5]
    want = set(clients.acked)
    got = set(rows)
    assert got == want, (f"{len(want - got)} records missing, e.g. {sorted(want - got)[:3]}; "
                         f"{len(got - want)} too many, e.g. {sorted(got - want)[:3]}")
    assert {t for t, _, _, _ in rows} == set(TOPICS)
    assert any(v.startswith("tx1-") for *_, v in rows) and clients.aborted
    assert not {v for *_, v in clients.aborted} & {v for *_, v in rows}


def _append(w, values):
    b = RecordBatchBuilder(base_offset=w.next_offset)
    for v in values:
        b.append(1_700_000_000_000, None, v.encode())
    w.append(b.build())


def test_available_now_stops_at_the_checkpointed_high_watermark(spark, tmp_path):
    data, out, ckpt = (str(tmp_path / n) for n in ("logs", "out", "ckpt"))
    w = LogDirWriter(data, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    for i in range(4):
        _append(w, [f"v{i}a", f"v{i}b"])

    def hw(offset):
        with open(os.path.join(data, "replication-offset-checkpoint"), "wb") as f:
            f.write(OffsetCheckpoint([("t", 0, offset)]).encode())

    def run(**options):
        reader = spark.readStream.format("kafka-segments")
        for k, v in options.items():
            reader = reader.option(k, v)
        q = (reader.load(data).writeStream.format("parquet").option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start(out))
        q.awaitTermination(60)
        assert q.exception() is None, q.exception()
        return sorted(v for *_, v in _rows(spark, out))

    hw(4)
    assert run() == ["v0a", "v0b", "v1a", "v1b"]
    hw(8)
    assert run() == sorted(f"v{i}{s}" for i in range(4) for s in "ab")
    _append(w, ["late"])
    assert run() == sorted(f"v{i}{s}" for i in range(4) for s in "ab")  # not below the hw yet
    shutil.rmtree(ckpt)
    shutil.rmtree(out)
    assert run(bound="end", startingOffsets='{"t": {"0": 6}}') == ["late", "v3a", "v3b"]


def test_stream_options_that_a_stream_cannot_honour_are_refused(tmp_path):
    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    def reader(**options):
        return KafkaSegmentsDataSource({"path": str(tmp_path), **options}).streamReader(
            spark_schema())

    with pytest.raises(ValueError, match="bound must be one of"):
        reader(bound="lso")
    with pytest.raises(ValueError, match="startingOffsets of a stream"):
        reader(startingOffsets="12")
    for option in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(NotImplementedError, match="do not support.*batch reads"):
            reader(**{option: "5"})
    with pytest.raises(NotImplementedError, match="records only"):
        reader(output="damage")
    with pytest.raises(ValueError, match="startingTimestamp must be ms"):
        reader(startingTimestamp="yesterday")
    with pytest.raises(ValueError, match="startingOffsetsByTimestamp must be JSON"):
        reader(startingOffsetsByTimestamp='{"t": 5}')
    with pytest.raises(ValueError, match="startingOffsetsByTimestampStrategy must be one of"):
        reader(startingTimestamp="5", startingOffsetsByTimestampStrategy="earliest")
    with pytest.raises(ValueError, match="failondataloss must be true or false"):
        reader(failOnDataLoss="maybe")
    # the batch source refuses the stream's own options
    with pytest.raises(ValueError, match="unknown option"):
        KafkaSegmentsDataSource({"path": str(tmp_path), "bound": "end"}).reader(spark_schema())


def test_stream_reader_calls_as_spark_makes_them(tmp_path):
    """The reader without a session: startingOffsets=latest, positions through latestOffset,
    tasks from partitions, rows from read; AvailableNow keeps to what was there first."""
    import pyarrow as pa

    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    w = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    _append(w, ["old"])
    source = KafkaSegmentsDataSource({"path": str(tmp_path), "startingOffsets": "latest",
                                      "bound": "end"})
    reader = source.streamReader(spark_schema())
    start = reader.initialOffset()
    assert start == {"t": {"0": 1}}
    _append(w, ["a", "b"])
    reader.prepareForTriggerAvailableNow()
    _append(w, ["c"])
    end = reader.latestOffset(start, None)
    assert end == {"t": {"0": 3}}
    values = [v for part in reader.partitions(start, end) for rb in reader.read(part)
              for v in pa.Table.from_batches([rb])["value"].to_pylist()]
    assert values == [b"a", b"b"]
    assert reader.latestOffset(end, None) == end
    assert reader.partitions(end, end) == []


def test_segments_deleted_before_they_were_read_fail_or_resume_at_the_log_start(spark, tmp_path):
    """failOnDataLoss (true by default, as in Spark's Kafka source): offsets deleted before
    they were read fail the query; with false the stream resumes at the log start."""
    data, out, ckpt = (str(tmp_path / n) for n in ("logs", "out", "ckpt"))
    w = LogDirWriter(data, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=150).partition("t", 0)

    def run(fail="false"):
        q = (spark.readStream.format("kafka-segments").option("failOnDataLoss", fail).load(data)
             .writeStream.format("parquet")
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start(out))
        try:
            q.awaitTermination(60)
        except Exception as exc:  # the query's failure, raised by awaitTermination
            return exc
        assert q.exception() is None, q.exception()
        return sorted(o for _, _, o, _ in _rows(spark, out))

    _append(w, ["a"])
    assert run() == [0]
    for i in range(6):
        _append(w, [f"b{i}"])
    # retention removes the segments holding offsets 1-3 (never read) and moves the log start
    folder = os.path.join(data, "t-0")
    bases = sorted(int(n[:20]) for n in os.listdir(folder) if n.endswith(".log"))
    start = next(b for b in bases if b >= 4)
    for name in os.listdir(folder):
        if name[:20].isdigit() and int(name[:20]) < start:
            os.remove(os.path.join(folder, name))
    with open(os.path.join(data, "log-start-offset-checkpoint"), "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, start)]).encode())
    failed = run("true")
    assert "DataLossError" in str(failed) and f"offsets [1, {start}) were deleted" in str(failed)
    assert "failOnDataLoss to false" in str(failed)
    assert sorted(o for _, _, o, _ in _rows(spark, out)) == [0]  # nothing committed after 0
    assert run() == [0] + list(range(start, 7))


def test_max_offsets_per_trigger_limits_each_micro_batch(spark, tmp_path):
    """``maxOffsetsPerTrigger`` through Spark's admission control: AvailableNow reads what is
    there in micro-batches of at most that many offsets; without the option, one batch."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    data = str(tmp_path / "logs")
    w = LogDirWriter(data, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    for i in range(5):
        _append(w, [f"v{i}a", f"v{i}b"])
    reader = KafkaSegmentsDataSource({"path": data, "bound": "end", "maxOffsetsPerTrigger": "4"}
                                     ).streamReader(spark_schema())
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    assert reader.latestOffset({}, ReadMaxRows(4)) == {"t": {"0": 4}}
    assert reader.latestOffset({}, ReadAllAvailable()) == {"t": {"0": 10}}   # the engine's word wins
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger"):
        KafkaSegmentsDataSource({"path": data, "maxOffsetsPerTrigger": "0"}).streamReader(spark_schema())

    sizes: list[int] = []
    q = (spark.readStream.format("kafka-segments").option("bound", "end").option("maxOffsetsPerTrigger", 4)
         .load(data).writeStream.foreachBatch(lambda df, _: sizes.append(df.count()))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(60)
    assert q.exception() is None, q.exception()
    assert sizes == [4, 4, 2]


def test_a_transaction_longer_than_the_limit_is_read_whole(tmp_path):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    w = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    b = RecordBatchBuilder(base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    for i in range(5):
        b.append(1_700_000_000_000, None, b"x%d" % i)
    w.append(b.build())
    m = RecordBatchBuilder(base_offset=5, producer_id=7, producer_epoch=0, transactional=True, control=True)
    m.append_end_txn_marker(True, 0, 1_700_000_000_000)
    w.append(m.build())
    _append(w, ["after1", "after2", "after3"])
    reader = KafkaSegmentsDataSource({"path": str(tmp_path), "bound": "end", "isolation": "read_committed",
                                      "maxOffsetsPerTrigger": "2"}).streamReader(spark_schema())
    first = reader.latestOffset({}, ReadMaxRows(2))
    # not stuck at 0: the share widens (2, 4, 8) until the step ends past the marker (5)
    assert first == {"t": {"0": 8}}
    assert reader.latestOffset(first, ReadMaxRows(2)) == {"t": {"0": 9}}



def test_min_offsets_per_trigger_waits_for_enough_new_offsets_or_the_delay(tmp_path):
    """``minOffsetsPerTrigger``/``maxTriggerDelay`` as Spark's Kafka source: the first trigger
    runs, later ones with fewer new offsets are skipped (the positions stay), until enough are
    new or the delay has passed since the last micro-batch; AvailableNow is never delayed."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    w = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    _append(w, ["a", "b"])
    options = {"path": str(tmp_path), "bound": "end", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "30s"}
    reader = KafkaSegmentsDataSource(options).streamReader(spark_schema())
    now = [1000.0]
    reader._clock = lambda: now[0]
    first = reader.latestOffset({}, ReadAllAvailable())
    assert first == {"t": {"0": 2}}                       # the first trigger is not delayed
    _append(w, ["c", "d", "e"])
    now[0] += 10
    assert reader.latestOffset(first, ReadAllAvailable()) == first    # 3 new < 5: skipped
    _append(w, ["f", "g"])
    now[0] += 1
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {"t": {"0": 7}}                      # 5 new: runs
    _append(w, ["h"])
    now[0] += 29.9
    assert reader.latestOffset(second, ReadAllAvailable()) == second
    now[0] += 0.1                                         # 30 s since the last micro-batch
    assert reader.latestOffset(second, ReadAllAvailable()) == {"t": {"0": 8}}

    available_now = KafkaSegmentsDataSource(options).streamReader(spark_schema())
    available_now._clock = lambda: now[0]
    available_now.latestOffset({}, ReadAllAvailable())
    available_now.prepareForTriggerAvailableNow()
    assert available_now.latestOffset({"t": {"0": 7}}, ReadAllAvailable()) == {"t": {"0": 8}}

    for bad, match in (({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger"),
                       ({"maxTriggerDelay": "soon"}, "maxTriggerDelay"),
                       ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "4"}, "greater")):
        with pytest.raises(ValueError, match=match):
            KafkaSegmentsDataSource({"path": str(tmp_path), **bad}).streamReader(spark_schema())
    from kproto.spark.stream import _duration_ms
    assert [_duration_ms("d", v) for v in ("15m", "30s", "500ms", "250", "1h", "2 min")] == \
        [900_000, 30_000, 500, 250, 3_600_000, 120_000]


def test_a_query_with_min_offsets_per_trigger_runs_a_batch_once_enough_is_new(spark, tmp_path):
    data = str(tmp_path / "logs")
    w = LogDirWriter(data, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A").partition("t", 0)
    _append(w, ["a", "b", "c", "d"])
    sizes: list[int] = []
    q = (spark.readStream.format("kafka-segments").option("bound", "end").option("minOffsetsPerTrigger", 6)
         .option("maxTriggerDelay", "1h").load(data).writeStream
         .foreachBatch(lambda df, _: sizes.append(df.count()))
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="100 milliseconds").start())
    try:
        q.processAllAvailable()
        assert sizes == [4]
        _append(w, ["e", "f", "g"])
        q.processAllAvailable()
        assert sizes == [4]                               # 3 new: the trigger waits
        _append(w, ["h", "i", "j"])
        q.processAllAvailable()
        assert sizes == [4, 6]
    finally:
        q.stop()
    assert q.exception() is None, q.exception()

def _stamped(w, stamps, tag):
    """One batch per timestamp of ``stamps``, each record's value ``tag-<ms>``."""
    for ts in stamps:
        b = RecordBatchBuilder(base_offset=w.next_offset)
        b.append(ts, None, f"{tag}-{ts}".encode())
        w.append(b.build())


def test_starting_timestamps_start_where_list_offsets_would(tmp_path):
    """startingTimestamp / startingOffsetsByTimestamp: each partition from its first offset
    whose record is that late (the time index, then a scan), the per-partition form winning;
    a partition without such a record fails the start, or starts at its end with
    startingOffsetsByTimestampStrategy=latest; a restart resumes from the checkpoint."""
    import pyarrow as pa

    from kproto.spark import KafkaSegmentsDataSource, spark_schema

    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=300)
    a, b = d.partition("t", 0), d.partition("t", 1)
    _stamped(a, [TS + 1000 * i for i in range(12)], "a")            # several segments
    _stamped(b, [TS + 500, TS + 9000, TS + 3000, TS + 9500], "b")   # out of order
    assert len([n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")]) > 2

    def reader(**options):
        return KafkaSegmentsDataSource({"path": str(tmp_path), "bound": "end", **options}
                                       ).streamReader(spark_schema())

    assert reader(startingTimestamp=str(TS + 4500)).initialOffset() == {"t": {"0": 5, "1": 1}}
    assert reader(startingTimestamp=str(TS)).initialOffset() == {"t": {"0": 0, "1": 0}}
    # per partition wins over startingTimestamp and startingOffsets; t-1 is not listed: earliest
    r = reader(startingOffsetsByTimestamp=json.dumps({"t": {"0": TS + 10_000}}),
               startingTimestamp=str(TS), startingOffsets="latest")
    start = r.initialOffset()
    assert start == {"t": {"0": 10}}
    end = r.latestOffset(start, None)
    rows = [v.decode() for part in r.partitions(start, end) for rb in r.read(part)
            for v in pa.Table.from_batches([rb])["value"].to_pylist()]
    assert sorted(rows) == sorted([f"a-{TS + 10_000}", f"a-{TS + 11_000}"]
                                  + [f"b-{TS + s}" for s in (500, 9000, 3000, 9500)])
    with pytest.raises(ValueError, match="no record at or after the starting timestamp in t-1"):
        reader(startingTimestamp=str(TS + 9700)).initialOffset()
    assert reader(startingTimestamp=str(TS + 9700), startingOffsetsByTimestampStrategy="latest"
                  ).initialOffset() == {"t": {"0": 10, "1": 4}}


def test_fail_on_data_loss_fails_a_step_whose_offsets_are_gone(tmp_path):
    """failOnDataLoss (default true): a step from a position below the log start offset, or
    past a log that was truncated, raises DataLossError naming the partition and offsets;
    false reports and goes on (the rows the log still has)."""
    import pyarrow as pa

    from kproto.spark import KafkaSegmentsDataSource, spark_schema
    from kproto.spark.stream import DataLossError

    data = str(tmp_path / "logs")
    d = LogDirWriter(data, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=150)
    w = d.partition("t", 0)
    for i in range(6):
        _append(w, [f"v{i}"])
    folder = os.path.join(data, "t-0")
    bases = sorted(int(n[:20]) for n in os.listdir(folder) if n.endswith(".log"))
    keep = next(b for b in bases if b >= 3)
    for name in os.listdir(folder):
        if name[:20].isdigit() and int(name[:20]) < keep:
            os.remove(os.path.join(folder, name))

    def reader(**options):
        return KafkaSegmentsDataSource({"path": data, "bound": "end", **options}
                                       ).streamReader(spark_schema())

    start = {"t": {"0": 1}}
    end = reader().latestOffset(start, None)
    assert end == {"t": {"0": 6}}
    with pytest.raises(DataLossError, match=rf"t-0: offsets \[1, {keep}\) were deleted"):
        reader().partitions(start, end)
    lenient = reader(failOnDataLoss="false")
    rows = [v.decode() for part in lenient.partitions(start, end) for rb in lenient.read(part)
            for v in pa.Table.from_batches([rb])["value"].to_pylist()]
    assert rows == [f"v{i}" for i in range(keep, 6)]
    # a position past the log end: the log was truncated (or deleted and created again)
    with pytest.raises(DataLossError, match="past the log end"):
        r = reader()
        r.partitions({"t": {"0": 40}}, r.latestOffset({"t": {"0": 40}}, None))
    # a segment deleted between planning and reading
    r = reader()
    tasks = r.partitions({"t": {"0": keep}}, end)
    for split in tasks[0].splits:
        os.remove(split.path)
    with pytest.raises(DataLossError, match="was deleted before offsets"):
        list(r.read(tasks[0]))
    assert list(reader(failOnDataLoss="false").read(tasks[0])) == []
