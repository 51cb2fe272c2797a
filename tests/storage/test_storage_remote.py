"""Log dirs and captures read from object storage (kproto.storage.fs) give what local reads
give; planning reads indexes, never segment bodies. Against moto's S3 server on loopback
(tests/storage/s3_support.py), which counts what it serves."""
from __future__ import annotations

import os
import random
import shutil
import sys

import pyarrow as pa
import pytest

import kproto.storage as ks
from kproto.problems import Problems
from kproto.records.builder import RecordBatchBuilder
from kproto.storage import fs
from kproto.storage.reader import REMOTE_READ_BYTES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_support import BUCKET, start_s3_server  # noqa: E402
from storage_fixtures import LOGDIRS  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "logdir")
CAPTURES = os.path.join(REPO, "..", "shared", "captures")


@pytest.fixture(scope="module")
def s3():
    server = start_s3_server()
    yield server
    server.stop()


def _same(local: str, uri: str, options: dict, **read) -> None:
    found_local, found_remote = Problems(), Problems()
    a = ks.read_arrow(local, problems=found_local, **read)
    b = ks.read_arrow(uri, problems=found_remote, storage_options=options, **read)
    assert a.num_rows > 0
    assert a.equals(b), read
    # the same damage, at the same places of the same files
    assert [(d.kind, os.path.relpath(d.source, local), d.position, d.bytes_skipped)
            for d in found_local] == \
        [(d.kind, d.source[len(uri) + 1:], d.position, d.bytes_skipped) for d in found_remote]


@pytest.mark.parametrize("name", ["example", "broker1-clean", "broker1-crashed"])
def test_log_dir_rows_as_local(s3, name):
    local = EXAMPLE if name == "example" else os.path.join(LOGDIRS, name)
    uri = s3.upload_tree(local, BUCKET, f"logdirs/{name}")
    for isolation in ("read_uncommitted", "read_committed"):
        _same(local, uri, s3.options, isolation=isolation)
    _same(local, uri, s3.options, start_offset=100, end_offset=900)
    part = sorted(p for p in os.listdir(local) if p[-2:] in ("-0", "-1"))[-1]
    _same(os.path.join(local, part), f"{uri}/{part}", s3.options)  # a partition folder


def test_splits_and_tasks_as_local(s3):
    uri = s3.upload_tree(EXAMPLE, BUCKET, "splits/example")
    local = ks.plan_splits(EXAMPLE, split_bytes=16 << 10)
    remote = ks.plan_splits(uri, split_bytes=16 << 10, storage_options=s3.options)
    assert len(local) > 5
    key = [(s.topic, s.partition, os.path.basename(s.path), s.start, s.end, s.resync)
           for s in local]
    assert key == [(s.topic, s.partition, os.path.basename(s.path), s.start, s.end, s.resync)
                   for s in remote]
    for a, b in zip(local, remote):
        assert pa.Table.from_batches(list(ks.read_split(a)), ks.arrow_schema()).equals(
            pa.Table.from_batches(list(ks.read_split(b)), ks.arrow_schema()))


def _synthetic_log_dir(path: str, value_size: int, segments: int = 6, partitions: int = 2,
                       batches: int = 24) -> None:
    """``partitions`` partitions of ``segments`` closed segments of ``batches`` batches each
    (10 records of ``value_size`` bytes a batch): bodies scale with ``value_size``, the
    number of files does not."""
    rnd = random.Random(7)

    def batch(offset: int) -> bytes:
        b = RecordBatchBuilder(base_offset=offset)
        for i in range(10):
            b.append(1_700_000_000_000 + offset + i, b"k%07d" % (offset + i),
                     rnd.randbytes(value_size))
        return b.build()

    size = len(batch(0))
    d = ks.LogDirWriter(path, cluster_id="c3ludGhldGljLWNsdXN0ZXI",
                        segment_bytes=batches * size + size // 2)
    for p in range(partitions):
        w = d.partition("big", p, topic_id=bytes([p + 1]) * 16)
        for _ in range(segments * batches + 1):  # + 1: the active segment
            w.append(batch(w.next_offset))
    d.close()


def _planning_cost(s3, tmp_path, value_size: int) -> tuple[list, int, int]:
    local = str(tmp_path / f"v{value_size}")
    _synthetic_log_dir(local, value_size)
    uri = s3.upload_tree(local, BUCKET, f"planning/v{value_size}")
    log_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs_ in os.walk(local)
                    for f in fs_ if f.endswith(".log"))
    s3.log.clear()
    splits = ks.plan_splits(uri, split_bytes=log_bytes // 7, storage_options=s3.options)
    served = list(s3.log)
    assert sum(s.size for s in splits) == log_bytes  # the whole scan is planned...
    assert len({s.path for s in splits}) == 2 * 7
    assert splits == ks.plan_splits(uri, split_bytes=log_bytes // 7)  # options are kept
    return served, log_bytes, len(splits)


def test_planning_reads_no_segment_bodies(s3, tmp_path):
    """A scan is planned from listings and index files: no request touches a ``.log``, and
    the requests do not grow with the segments' bodies (32x larger here)."""
    small, small_bytes, _ = _planning_cost(s3, tmp_path, 256)
    large, large_bytes, _ = _planning_cost(s3, tmp_path, 8192)
    assert large_bytes > 25 * small_bytes
    for served in (small, large):
        assert not [r for r in served if r.key.endswith(".log")]
        assert all(r.method in ("GET", "HEAD") for r in served)
        # listings (bucket-level GETs) and small files: indexes, checkpoints
        body_files = {os.path.basename(r.key) for r in served if r.bytes and "list-type" not in r.query}
        assert all(f.endswith((".index", ".timeindex")) or "checkpoint" in f for f in body_files)
    shape = [(r.method, "list-type" in r.query, os.path.basename(r.key).split(".")[-1])
             for r in small]
    assert sorted(shape) == sorted((r.method, "list-type" in r.query,
                                    os.path.basename(r.key).split(".")[-1]) for r in large)
    # index bytes: a few per 4 KiB of log, nothing like the bodies
    assert sum(r.bytes for r in large) < large_bytes / 200


def test_remote_reads_are_large_ranges(s3, tmp_path):
    """Tasks read their byte ranges of the ``.log`` in ranged GETs of at most
    REMOTE_READ_BYTES, each byte once."""
    local = str(tmp_path / "ranges")
    _synthetic_log_dir(local, 4096, segments=2, partitions=1)
    uri = s3.upload_tree(local, BUCKET, "ranges")
    splits = ks.plan_splits(uri, split_bytes=200 << 10, storage_options=s3.options)
    assert len(splits) > 2
    s3.log.clear()
    rows = sum(rb.num_rows for s in splits for rb in ks.read_split(s))
    assert rows == ks.read_arrow(local).num_rows
    gets = [r for r in s3.log if r.method == "GET" and r.key.endswith(".log")]
    assert gets and all(r.range and r.status == 206 and r.bytes <= REMOTE_READ_BYTES for r in gets)
    assert sum(r.bytes for r in gets) == sum(s.size for s in splits)
    assert len(gets) == len(splits)  # one ranged GET per split of < REMOTE_READ_BYTES


def test_missing_bucket_or_key(s3):
    options = s3.options
    with pytest.raises(FileNotFoundError, match="s3://no-such-bucket-kproto/logs"):
        ks.read_arrow("s3://no-such-bucket-kproto/logs", storage_options=options)
    s3.upload_tree(EXAMPLE, BUCKET, "present")
    with pytest.raises(FileNotFoundError, match=f"s3://{BUCKET}/absent"):
        ks.read_arrow(f"s3://{BUCKET}/absent", storage_options=options)
    with pytest.raises(FileNotFoundError, match="orders-0/00000000000000000999.log"):
        fs.read_range(f"s3://{BUCKET}/present/orders-0/00000000000000000999.log")


def test_credentials_from_the_environment(s3, monkeypatch):
    """No options: pyarrow's S3 client takes the endpoint and keys from AWS_* variables."""
    uri = s3.upload_tree(EXAMPLE, "kproto-env", "example")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert ks.read_arrow(uri).equals(ks.read_arrow(EXAMPLE))


def test_fsspec_only_scheme(tmp_path):
    """A scheme pyarrow lacks (fsspec's memory://) goes through PyFileSystem(FSSpecHandler)."""
    import fsspec

    mem = fsspec.filesystem("memory")
    for root, _dirs, files in os.walk(EXAMPLE):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), EXAMPLE)
            with open(os.path.join(root, f), "rb") as src:
                mem.pipe(f"/kproto-example/{rel}", src.read())
    try:
        assert ks.read_arrow("memory://kproto-example").equals(ks.read_arrow(EXAMPLE))
    finally:
        mem.rm("/kproto-example", recursive=True)


def test_local_paths_and_file_uris_stay_local(tmp_path):
    assert not fs.is_remote("/var/lib/kafka") and not fs.is_remote("C:/kafka")
    assert not fs.is_remote("file:///var/lib/kafka") and fs.is_remote("s3a://b/k")
    assert fs.normpath("s3://bucket/a/./b/") == "s3://bucket/a/b"
    with pytest.raises(ValueError, match="nosuchscheme"):
        ks.read_arrow("nosuchscheme://bucket/logs")
    shutil.copytree(EXAMPLE, tmp_path / "logdir")
    assert ks.read_arrow(f"file://{tmp_path}/logdir").equals(ks.read_arrow(EXAMPLE))


def test_captures_listed_and_read_as_local(s3):
    from kproto.capture.api import iter_exchanges
    from kproto.capture.table import capture_files, capture_packets, exchange_batches

    uri = s3.upload_tree(CAPTURES, BUCKET, "captures")
    local = capture_files([os.path.join(CAPTURES, "*.pcap*")])
    remote = capture_files([f"{uri}/*.pcap*"], s3.options)
    assert len(local) > 3
    assert [(os.path.basename(p), n) for p, n in local] == \
        [(os.path.basename(p), n) for p, n in remote]
    assert [p for p, _ in capture_files([uri])] == [p for p, _ in remote]  # a folder
    for (lp, _), (rp, _) in zip(local[:4], remote[:4]):
        a = pa.Table.from_batches(list(exchange_batches(iter_exchanges(lp), "f")))
        b = pa.Table.from_batches(list(exchange_batches(iter_exchanges(capture_packets(rp)), "f")))
        assert a.num_rows and a.equals(b)
    with pytest.raises(FileNotFoundError, match="no capture file"):
        capture_files([f"{uri}/*.nothing"])


@pytest.mark.parametrize("name", ["example", "broker1-crashed"])
def test_segments_fetched_in_pieces(s3, monkeypatch, name):
    """A segment larger than a ranged read is fetched in pieces cut at its batch boundaries
    (the next one downloading while one decodes): the same rows and damage as local."""
    import kproto.storage.reader as reader

    monkeypatch.setattr(reader, "REMOTE_READ_BYTES", 16 << 10)
    local = EXAMPLE if name == "example" else os.path.join(LOGDIRS, name)
    uri = s3.upload_tree(local, BUCKET, f"pieces/{name}")
    splits = ks.plan_splits(uri, storage_options=s3.options)
    s3.log.clear()
    _same(local, uri, s3.options)
    gets = [r for r in s3.log if r.method == "GET" and r.key.endswith(".log")]
    assert len(gets) > 2 * len(splits)
    assert max(r.bytes for r in gets) < 64 << 10


@pytest.mark.parametrize("pattern", ["*.pcap*", "**/*.pcap", "sub/*/x?.cap", "[ab]*",
                                     "sub/**", "[!a]*.pcap*"])
def test_remote_glob_matches_like_glob(tmp_path, pattern):
    """``fs.glob`` on a URI picks what ``glob.glob(recursive=True)`` picks on the same tree."""
    import glob as globmod

    import fsspec

    names = ["a.pcap", "b.pcap0", "c.cap", "sub/d.pcap", "sub/e/x1.cap", "sub/e/x22.cap",
             "sub/f/g/h.pcap"]
    mem = fsspec.filesystem("memory")
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
        mem.pipe(f"/kproto-glob/{name}", b"x")
    try:
        want = sorted(os.path.relpath(p, tmp_path)
                      for p in globmod.glob(str(tmp_path / pattern), recursive=True))
        got = sorted(p[len("memory://kproto-glob/"):]
                     for p in fs.glob(f"memory://kproto-glob/{pattern}"))
        assert want and got == want
    finally:
        mem.rm("/kproto-glob", recursive=True)


@pytest.fixture(scope="module")
def gcs():
    from gcs_support import start_gcs_server

    server = start_gcs_server()
    yield server
    server.stop()


@pytest.mark.parametrize("name", ["example", "broker1-crashed"])
def test_gcs_log_dir_rows_as_local(gcs, name):
    """gs:// through pyarrow's GcsFileSystem against gcp-storage-emulator: the objects have
    no folder markers (as gsutil, rclone or tiered storage write them), so the partition
    folders are found only through a recursive listing; rows and damage are those of local."""
    local = EXAMPLE if name == "example" else os.path.join(LOGDIRS, name)
    uri = gcs.upload_tree(local, f"logdirs/{name}")
    import pyarrow.fs as pafs

    plain = gcs.filesystem().get_file_info(pafs.FileSelector(uri[5:]))
    assert not [i for i in plain if i.type == pafs.FileType.Directory]  # what pyarrow lists
    fs.configure(uri, gcs.options)
    assert {e.name for e in fs.listdir(uri) if e.is_dir} >= {
        n for n in os.listdir(local) if os.path.isdir(os.path.join(local, n))}
    for isolation in ("read_uncommitted", "read_committed"):
        _same(local, uri, gcs.options, isolation=isolation)
    _same(local, uri, gcs.options, start_offset=100, end_offset=900)


def test_a_10_gib_log_dir_is_planned_without_reading_segment_bodies(s3):
    """A 10 GiB log dir on the S3 server (5 partitions of two 1 GiB segments of 1 MiB
    batches, their indexes written by Kafka's rules) planned by plan_splits and by the Spark
    source's reader: listings, index reads and nothing else; no request touches a segment
    body. The bodies are real (each batch a valid 1 MiB batch at its offsets) but made on
    demand by the server for the bytes a ranged GET asks (s3_support.put_generated), never
    uploaded or stored: a sample read of one split's batches gives the offsets the indexes
    promise."""
    import struct

    from kproto.spark import KafkaSegmentsDataSource, spark_schema
    from kproto.storage.indexes import IndexBuilder
    from s3_support import GeneratedBody, put_generated

    rnd = random.Random(10)
    records = 16
    b = RecordBatchBuilder(base_offset=0)
    for i in range(records):
        b.append(1_700_000_000_000 + i, b"k%02d" % i, rnd.randbytes(64 << 10))
    template = b.build()
    size, per_segment, partitions, segments = len(template), 1024, 5, 2

    def body(base: int) -> GeneratedBody:
        def piece(start: int, stop: int) -> bytes:
            first, last = start // size, (stop - 1) // size
            data = b"".join(struct.pack(">q", base + k * records) + template[8:]
                            for k in range(first, last + 1))
            return data[start - first * size:stop - first * size]
        return GeneratedBody(size * per_segment, piece)

    client = s3.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    prefix = "ten-gib"
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/meta.properties",
                      Body=b"version=1\ncluster.id=c3ludGhldGljLWNsdXN0ZXI\nnode.id=1\n")
    for p in range(partitions):
        for s in range(segments):
            base = s * per_segment * records
            index = IndexBuilder(base)
            for k in range(per_segment):
                last = base + (k + 1) * records - 1
                index.append(k * size, size, last, [(1_700_000_000_000 + records - 1, last)])
            index.close()
            name = f"{prefix}/big-{p}/{base:020d}"
            put_generated(BUCKET, f"{name}.log", body(base))
            client.put_object(Bucket=BUCKET, Key=f"{name}.index", Body=index.offset_index().encode())
            client.put_object(Bucket=BUCKET, Key=f"{name}.timeindex", Body=index.time_index().encode())
    uri = f"s3://{BUCKET}/{prefix}"
    total = partitions * segments * per_segment * size
    assert total >= 10 << 30

    s3.log.clear()
    splits = ks.plan_splits(uri, split_bytes=128 << 20, storage_options=s3.options)
    planned = list(s3.log)
    s3.log.clear()
    reader = KafkaSegmentsDataSource({"path": uri, **{f"fs.{k}": v for k, v in s3.options.items()}}
                                     ).reader(spark_schema())
    tasks = reader.partitions()
    spark_planned = list(s3.log)
    assert sum(sp.size for sp in splits) == total == sum(sp.size for t in tasks for sp in t.splits)
    assert min(len(splits), len(tasks)) >= total // (128 << 20)  # tasks of at most ~128 MiB
    for served in (planned, spark_planned):
        assert not [r for r in served if r.key.endswith(".log") and r.method == "GET"]
        assert {r.method for r in served} <= {"GET", "HEAD"}
        # listings, then the indexes: bytes per task far below a megabyte
        assert sum(r.bytes for r in served) < len(tasks) * (64 << 10), sum(r.bytes for r in served)
    # the bodies agree with the indexes: a ranged read of three batches in the middle
    mid = splits[len(splits) // 2]
    cut = ks.Split(mid.path, mid.topic, mid.partition, mid.base_offset, mid.resync[10],
                   mid.resync[13], (), (), None, mid.next_base_offset)
    s3.log.clear()
    offsets = [o for rb in ks.read_split(cut) for o in rb.column("offset").to_pylist()]
    first = mid.base_offset + (mid.resync[10] // size) * records
    assert offsets == list(range(first, first + 3 * records))
    assert [r.range for r in s3.log if r.method == "GET"] == \
        [f"bytes={mid.resync[10]}-{mid.resync[13] - 1}"]
