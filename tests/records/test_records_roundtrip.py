"""Random batches of every magic and codec, built and read back; plus builder/API behaviour."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.records import (LegacyMessage, LegacyMessageBuilder, RecordBatch, RecordBatchBuilder,
                            decode_columns, iter_batches)
from kproto.records.columns import decode_batches

blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=10), blobs), max_size=4)
timestamps = st.integers(min_value=0, max_value=2**41)
records = st.lists(st.tuples(timestamps, blobs, blobs, headers), min_size=1, max_size=25)


@st.composite
def v2_batches(draw):
    spec = dict(
        compression=draw(st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"])),
        base_offset=draw(st.integers(0, 2**62)),
        timestamp_type=draw(st.sampled_from([0, 1])),
        partition_leader_epoch=draw(st.integers(-1, 2**31 - 1)),
        producer_id=draw(st.integers(-1, 2**63 - 1)),
        producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        base_sequence=draw(st.integers(-1, 2**31 - 1)),
        transactional=draw(st.booleans()),
    )
    if spec["timestamp_type"] == 1:
        spec["log_append_time"] = draw(timestamps)
    gaps = draw(st.lists(st.integers(1, 1000), min_size=25, max_size=25))
    return spec, draw(records), gaps


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v2_batches())
def test_v2_round_trip(case):
    spec, recs, gaps = case
    b = RecordBatchBuilder(**spec)
    offsets = []
    off = spec["base_offset"]
    for (ts, k, v, h), gap in zip(recs, gaps):
        offsets.append(b.append(ts, k, v, h, off))
        off += gap
    data = b.build()
    (batch,) = list(iter_batches(data, verify_crc=True))
    assert isinstance(batch, RecordBatch) and batch.is_valid()
    assert batch.count == len(recs) and batch.last_offset == offsets[-1]
    assert batch.compression_name == spec["compression"]
    assert batch.is_transactional == spec["transactional"]
    assert batch.producer_id == spec["producer_id"]
    got = batch.record_list()
    assert got == list(batch.iter_records_slow())
    for r, (ts, k, v, h), o in zip(got, recs, offsets):
        assert (r.offset, r.key, r.value) == (o, k, v)
        assert [tuple(x) for x in r.headers] == [(hk, hv) for hk, hv in h]
        assert r.timestamp == (spec["log_append_time"] if spec["timestamp_type"] else ts)
    expected_max = spec.get("log_append_time") if spec["timestamp_type"] else max(
        r[0] for r in recs)
    assert batch.max_timestamp == expected_max


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from(["none", "gzip", "snappy", "lz4"]),
       log_append=st.booleans(), base=st.integers(0, 2**40),
       recs=st.lists(st.tuples(timestamps, blobs, blobs), min_size=1, max_size=15))
def test_legacy_round_trip(magic, codec, log_append, base, recs):
    lat = 1_800_000_000_000
    b = LegacyMessageBuilder(magic, compression=codec, base_offset=base,
                             timestamp_type=1 if log_append else 0, log_append_time=lat)
    for ts, k, v in recs:
        b.append(ts, k, v)
    data = b.build()
    got = [r for m in iter_batches(data, verify_crc=True) for r in m.records()]
    assert [(r.offset, r.key, r.value) for r in got] == [
        (base + i, k, v) for i, (_, k, v) in enumerate(recs)]
    if magic == 0:
        expected_ts = [-1] * len(recs)
    elif log_append:
        expected_ts = [lat] * len(recs)
    else:
        expected_ts = [ts for ts, _, _ in recs]
    assert [r.timestamp for r in got] == expected_ts
    assert all(r.crc_valid for r in got)
    batches = list(iter_batches(data))
    assert all(isinstance(m, LegacyMessage) for m in batches)
    assert len(batches) == (1 if codec != "none" else len(recs))


def test_mixed_columns_and_arrow():
    v2 = RecordBatchBuilder(compression="zstd", base_offset=10, producer_id=5, base_sequence=7)
    v2.append(100, b"a", None, [("h", None)])
    v2.append(101, None, b"bb" * 20)
    legacy = LegacyMessageBuilder(1, compression="gzip", base_offset=0)
    legacy.append(50, b"old", b"value")
    legacy.append(51, None, None)
    data = legacy.build() + v2.build()
    cols = decode_columns(data)
    assert cols.offset.tolist() == [0, 1, 10, 11]
    assert [cols.key(i) for i in range(4)] == [b"old", None, b"a", None]
    assert cols.sequence().tolist() == [-1, -1, 7, 8]
    table = cols.to_arrow()
    assert table.column("value").to_pylist() == [b"value", None, None, b"bb" * 20]
    assert table.column("headers").to_pylist()[2] == [{"key": "h", "value": None}]
    assert table.column("producer_id").to_pylist() == [-1, -1, 5, 5]
    offsets, blob, valid = cols.binary_offsets("value")
    assert blob == b"value" + b"bb" * 20 and valid.tolist() == [True, False, False, True]
    assert offsets.tolist() == [0, 5, 5, 5, 45]
    assert len(decode_batches([])) == 0
    from kproto.records.reader import iter_column_batches
    chunks = list(iter_column_batches(data, batches_per_chunk=1))
    assert [c.offset.tolist() for c in chunks] == [[0, 1], [10, 11]]


def test_header_only_scan_does_not_decompress():
    b = RecordBatchBuilder(compression="lz4")
    for i in range(100):
        b.append(i, None, b"x" * 100)
    batch = next(iter_batches(b.build()))
    assert batch.count == 100 and batch._data is None
    batch.record_list()
    assert batch._data is not None


def test_builder_rejects_decreasing_offsets():
    from kproto.errors import EncodeError
    b = RecordBatchBuilder(base_offset=5)
    b.append(0, None, None)
    with pytest.raises(EncodeError):
        b.append(0, None, None, offset=5)
    with pytest.raises(EncodeError):
        RecordBatchBuilder(base_offset=5).append(0, None, None, offset=4)


def test_cli_jsonl_matches_vectors(capsys):
    from kproto.cli.main import main

    from .conftest import VECTORS, vector_names
    for name in vector_names():
        assert main(["dump-log", "--format", "jsonl", str(VECTORS / f"{name}.bin")]) == 0
        out = capsys.readouterr().out.splitlines()
        expected = (VECTORS / f"{name}.jsonl").read_text().splitlines()
        assert [json.loads(x) for x in out] == [json.loads(x) for x in expected], name


def test_cli_text_batches_only_and_verify(capsys, tmp_path):
    from kproto.cli.main import main
    good = RecordBatchBuilder()
    good.append(1, b"k", b"v")
    bad = bytearray(good.build())
    bad[-2] ^= 1  # the value byte: CRC fails, records still readable
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(good.build() + bytes(bad))
    assert main(["dump-log", "--format", "text", str(p)]) == 0
    text = capsys.readouterr().out
    assert "baseOffset: 0" in text and "| offset: 0 CreateTime: 1" in text
    assert "isvalid: false" in text
    assert main(["dump-log", "--verify", "--batches-only", "--format", "jsonl", str(p)]) == 1
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["type"] for x in lines] == ["batch", "batch", "error", "summary"]
    assert lines[-1]["records"] == 2


def test_empty_compressed_batch_is_not_decompressed():
    # MemoryRecords.filterTo keeps an emptied idempotent batch as a bare header that still
    # carries the codec bits; Kafka never reads its (absent) payload.
    b = RecordBatchBuilder(compression="lz4", producer_id=3, base_sequence=0)
    b.first_timestamp, b.max_timestamp = -1, 5
    batch = next(iter_batches(b.build()))
    assert batch.count == 0 and batch.compression_name == "lz4" and batch.is_valid()
    assert batch.record_list() == [] and list(batch.iter_records_slow()) == []
    assert len(batch.columns()) == 0


def test_cli_text_keeps_one_line_per_record(capsys, tmp_path):
    from kproto.cli.main import main
    b = RecordBatchBuilder()
    b.append(1, b"a\nb", bytes(range(256)))
    p = tmp_path / "x.log"
    p.write_bytes(b.build())
    assert main(["dump-log", "--format", "text", str(p)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| offset: 0") and "key: a\\nb" in lines[2]


def test_building_and_framing_batches_does_not_import_numpy():
    """A producer builds and frames batches without the bulk decoder's numpy (about 50 ms of
    start-up, and BLAS threads); the columnar names load it when first used."""
    import subprocess
    import sys
    code = (
        "import sys\n"
        "from kproto.records import RecordBatchBuilder, iter_batches\n"
        "b = RecordBatchBuilder(base_offset=5)\n"
        "b.append(1, b'k', b'v')\n"
        "[batch] = iter_batches(b.build())\n"
        "assert batch.base_offset == 5 and batch.is_valid()\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "import kproto.records as r\n"
        "assert [x.value for x in batch.records()] == [b'v']\n"
        "assert r.decode_batches([batch]).offset.tolist() == [5] and callable(r.to_arrow)\n"
        "assert 'numpy' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
