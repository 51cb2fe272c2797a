"""Both Spark sources over ``s3://`` (moto's S3 server on loopback, endpoint and keys as
``fs.*`` options): the same rows as the same files read from local disk."""
from __future__ import annotations

import os
import sys
import time

import pyarrow as pa
import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(_TESTS, "storage") not in sys.path:
    sys.path.append(os.path.join(_TESTS, "storage"))

from s3_support import BUCKET, start_s3_server  # noqa: E402
from storage_fixtures import LOGDIRS  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(_TESTS), "examples", "logdir")
CAPTURES = os.path.join(os.path.dirname(_TESTS), "..", "shared", "captures")


@pytest.fixture(scope="module")
def s3():
    server = start_s3_server()
    yield server
    server.stop()


def _fs_options(s3) -> dict[str, str]:
    return {f"fs.{k}": v for k, v in s3.options.items()}


def _sorted(df, keys: list[str]) -> pa.Table:
    table = df.toArrow()
    return table.sort_by([(k, "ascending") for k in keys])


@pytest.mark.parametrize("name", ["example", "broker1-clean"])
def test_kafka_segments_from_s3(spark, s3, name):
    local = EXAMPLE if name == "example" else os.path.join(LOGDIRS, name)
    uri = s3.upload_tree(local, BUCKET, f"spark/{name}")
    keys = ["topic", "partition", "offset"]
    want = _sorted(spark.read.format("kafka-segments").option("splitSize", "64k").load(local),
                   keys)
    got = _sorted(spark.read.format("kafka-segments").options(**_fs_options(s3))
                  .option("splitSize", "64k").load(uri), keys)
    assert want.num_rows > 0
    assert got.equals(want)
    # pushed-down bounds and read_committed go through the same planning
    q = (spark.read.format("kafka-segments").options(**_fs_options(s3))
         .option("isolation", "read_committed"))
    local_q = spark.read.format("kafka-segments").option("isolation", "read_committed")
    assert _sorted(q.load(uri).where("offset >= 100 and offset < 700"), keys).equals(
        _sorted(local_q.load(local).where("offset >= 100 and offset < 700"), keys))


def test_kafka_segments_missing_bucket(spark, s3):
    with pytest.raises(Exception, match="no-such-bucket-kproto"):
        (spark.read.format("kafka-segments").options(**_fs_options(s3))
         .load("s3://no-such-bucket-kproto/logs").count())


def test_kafka_pcap_from_s3(spark, s3, tmp_path):
    picked = sorted((os.path.getsize(os.path.join(CAPTURES, f)), f) for f in os.listdir(CAPTURES)
                    if ".pcap" in f)[:4]
    for _, f in picked:
        os.symlink(os.path.join(CAPTURES, f), tmp_path / f)
    uri = s3.upload_tree(str(tmp_path), BUCKET, "captures")
    for expand in ("exchanges", "records"):
        keys = ["name", "index"] + (["topic", "partition", "offset"] if expand == "records" else [])
        want = spark.read.format("kafka-pcap").option("expand", expand).load(
            str(tmp_path / "*.pcap*"))
        got = spark.read.format("kafka-pcap").options(**_fs_options(s3)).option(
            "expand", expand).load(f"{uri}/*.pcap*")
        a = _sorted(want.selectExpr("*", "substring_index(file, '/', -1) AS name").drop("file"),
                    keys)
        b = _sorted(got.selectExpr("*", "substring_index(file, '/', -1) AS name").drop("file"),
                    keys)
        assert a.num_rows > 0
        assert sorted(set(b.column("name").to_pylist())) == sorted(f for _, f in picked) \
            or expand == "records"
        assert a.equals(b), expand


@pytest.fixture(scope="module")
def gcs():
    from gcs_support import start_gcs_server

    server = start_gcs_server()
    yield server
    server.stop()


def test_both_sources_from_gcs(spark, gcs, tmp_path):
    """gs:// (pyarrow's GcsFileSystem against gcp-storage-emulator on loopback, objects
    without folder markers): both sources give the rows of the same files read locally."""
    options = {f"fs.{k}": v for k, v in gcs.options.items()}
    uri = gcs.upload_tree(EXAMPLE, "spark/example")
    keys = ["topic", "partition", "offset"]
    want = _sorted(spark.read.format("kafka-segments").option("isolation", "read_committed")
                   .load(EXAMPLE), keys)
    got = _sorted(spark.read.format("kafka-segments").options(**options)
                  .option("isolation", "read_committed").load(uri), keys)
    assert want.num_rows > 0 and got.equals(want)
    picked = sorted((os.path.getsize(os.path.join(CAPTURES, f)), f) for f in os.listdir(CAPTURES)
                    if ".pcap" in f)[:2]
    for _, f in picked:
        os.symlink(os.path.join(CAPTURES, f), tmp_path / f)
    captures = gcs.upload_tree(str(tmp_path), "captures")
    a = _sorted(spark.read.format("kafka-pcap").load(str(tmp_path / "*.pcap*"))
                .selectExpr("*", "substring_index(file, '/', -1) AS name").drop("file"),
                ["name", "index"])
    b = _sorted(spark.read.format("kafka-pcap").options(**options).load(f"{captures}/*.pcap*")
                .selectExpr("*", "substring_index(file, '/', -1) AS name").drop("file"),
                ["name", "index"])
    assert a.num_rows > 0 and a.equals(b)


class _Synced:
    """A log dir written locally with kproto's storage writer and copied to the S3 server as a
    sync tool does (``aws s3 sync --delete``): files whose size or time changed are uploaded
    whole, files gone are deleted."""

    def __init__(self, s3, local: str, prefix: str) -> None:
        self.s3, self.local, self.prefix = s3, local, prefix
        self.client = s3.client()
        self.sent: dict[str, tuple[int, int]] = {}

    def sync(self) -> None:
        now = {}
        for root, _dirs, files in os.walk(self.local):
            for name in files:
                path = os.path.join(root, name)
                st = os.stat(path)
                key = os.path.relpath(path, self.local).replace(os.sep, "/")
                now[key] = (st.st_size, st.st_mtime_ns)
                if self.sent.get(key) != now[key]:
                    with open(path, "rb") as f:
                        self.client.put_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}",
                                               Body=f.read())
        for key in set(self.sent) - set(now):
            self.client.delete_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}")
        self.sent = now


def test_stream_of_a_log_dir_synced_to_s3_exactly_once_across_a_restart(spark, s3, tmp_path):
    """readStream over s3:// while the log dir grows (plain records, an aborted and a
    committed transaction, segments rolling) and is synced: the sink gets every committed
    record exactly once across a stop and restart of the query; segment bodies are only
    read by range, each step reading what was appended (no step downloads whole segments)."""
    from kproto.records import RecordBatchBuilder
    from kproto.storage import LogDirWriter

    local, out, ckpt = (str(tmp_path / n) for n in ("logs", "out", "ckpt"))
    writer = LogDirWriter(local, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=12 << 10)
    parts = [writer.partition("t", p) for p in range(2)]
    s3.client().create_bucket(Bucket=BUCKET)
    synced = _Synced(s3, local, "stream")
    uri = f"s3://{BUCKET}/stream"
    sent: list[str] = []
    aborted: list[str] = []

    def batch(w, values, pid=-1, txn=False):
        b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=0,
                               base_sequence=0 if pid >= 0 else -1, transactional=txn)
        for v in values:
            b.append(1_700_000_000_000, None, v.encode() + b"." * 300)
        w.append(b.build())

    def marker(w, commit, pid):
        b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=0,
                               transactional=True, control=True)
        b.append_end_txn_marker(commit, 0, 1_700_000_000_000)
        w.append(b.build())

    def wave(i):
        for p, w in enumerate(parts):
            values = [f"w{i}-p{p}-{k}" for k in range(6)]
            batch(w, values)
            sent.extend(values)
        if i in (1, 3):  # a transaction on t-0 spanning waves: aborted, then committed
            batch(parts[0], [f"tx{i}-{k}" for k in range(3)], pid=40 + i, txn=True)
            (aborted if i == 1 else sent).extend(f"tx{i}-{k}" for k in range(3))
        if i in (2, 5):
            marker(parts[0], i == 5, 40 + i - 1 - (i == 5))
        synced.sync()

    def start():
        return (spark.readStream.format("kafka-segments").options(**_fs_options(s3))
                .option("isolation", "read_committed").option("bound", "end").load(uri)
                .writeStream.format("parquet").option("checkpointLocation", ckpt)
                .trigger(processingTime="200 milliseconds").start(out))

    def rows():
        try:
            return [r.value.decode().rstrip(".") for r in spark.read.parquet(out).collect()]
        except Exception:  # no micro-batch committed a file yet
            return []

    wave(0)
    s3.log.clear()
    q = start()
    for i in range(1, 4):  # written while the query runs
        q.processAllAvailable()
        wave(i)
    q.processAllAvailable()
    q.stop()
    first = rows()
    for i in range(4, 7):  # written while no query runs; transaction 3 ends in wave 5
        wave(i)
    q = start()
    q.processAllAvailable()
    q.stop()
    got = rows()
    assert 0 < len(first) < len(got)
    assert not [v for v in first if v.startswith("tx3")]  # open when the first query stopped
    assert sorted(got) == sorted(sent)  # each once: no duplicates, nothing missing
    assert not set(aborted) & set(got)
    assert len([n for n in os.listdir(os.path.join(local, "t-0")) if n.endswith(".log")]) > 1
    logs = [r for r in s3.log if r.key.endswith(".log") and r.method == "GET"]
    assert logs and all(r.range and r.status == 206 for r in logs)
    # each step reads the bytes appended since the last one (a few times: the log end, the
    # open transactions, the task), not the active segment again and again: at most a few
    # times each segment's bytes (a new segment, and the restarted query, start from its
    # first byte), though each segment was the active one over several steps
    read: dict[str, int] = {}
    for r in logs:
        read[r.key] = read.get(r.key, 0) + r.bytes
    for key, n in read.items():  # a segment stays active over several steps
        size = os.path.getsize(os.path.join(local, key.split("/", 1)[1]))
        assert n <= 8 * size, (key, n, size)
