"""Both Spark sources over ``s3://`` (moto's S3 server on loopback, endpoint and keys as
``fs.*`` options): the same rows as the same files read from local disk."""
from __future__ import annotations

import os
import sys

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
