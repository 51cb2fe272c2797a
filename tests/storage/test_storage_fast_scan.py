"""The storage reader's one-pass path (the C helper's frame_v2, build_columns and build_headers,
driven by kproto.storage.reader._SplitRead.fast) against the reference path (batch objects,
decode_arrow): the same Arrow batches and the same damage reports, on the fixtures, on every
codec and on generated and damaged batches; and the C functions' own checks."""
from __future__ import annotations

import dataclasses
import glob
import os
import random

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.problems import Problems
from kproto.records import RecordBatchBuilder, columns, iter_batches
from kproto.records.builder import encode_legacy_message
from kproto.records.compression import compress, decompress
from kproto.storage import reader
from kproto.storage.indexes import AbortedTxn
from kproto.storage.reader import ReadOptions, Split, plan_splits, read_arrow, read_buffer
from kproto.storage.sample import write_sample_log_dir

from storage_fixtures import LOGDIRS

TS = 1_700_000_000_000


class _Counting:
    """The C helper, counting calls of build_columns (so a test knows the fast path ran)."""

    def __init__(self, mod) -> None:
        self._mod, self.builds = mod, 0

    def __getattr__(self, name):
        return getattr(self._mod, name)

    def build_columns(self, *args):
        self.builds += 1
        return self._mod.build_columns(*args)


@pytest.fixture
def fast(speedups, monkeypatch) -> _Counting:
    helper = _Counting(speedups)
    monkeypatch.setattr(columns, "_speedups", helper)
    return helper


def _read(data, split, opts, chunk, monkeypatch, fast_scan: bool):
    monkeypatch.setattr(reader, "FAST_SCAN", fast_scan)
    found = Problems()
    out = list(read_buffer(data, split, opts, problems=found, chunk_bytes=chunk))
    monkeypatch.setattr(reader, "FAST_SCAN", True)
    return out, list(found)


def _same(data, split, opts, chunk, monkeypatch) -> tuple[int, int]:
    """Asserts both paths give the same batches (cut at the same records) and reports."""
    got, got_found = _read(data, split, opts, chunk, monkeypatch, True)
    want, want_found = _read(data, split, opts, chunk, monkeypatch, False)
    assert [b.num_rows for b in got] == [b.num_rows for b in want]
    for g, w in zip(got, want):
        assert g.schema == w.schema
        for name in w.schema.names:
            assert g.column(name).equals(w.column(name)), name
    assert got_found == want_found
    return sum(b.num_rows for b in got), len(got_found)


def _splits(root: str, opts: ReadOptions) -> list[tuple[bytes, Split]]:
    out = []
    for s in plan_splits(root, options=opts):
        with open(s.path, "rb") as f:
            out.append((f.read()[s.start:s.end], s))
    return out


OPTIONS = [ReadOptions(), ReadOptions(isolation="read_committed"),
           ReadOptions(include_control=True, verify_crc=True, binary_view=True),
           ReadOptions(start_offset=37, end_offset=900, start_timestamp=TS + 500)]


# ------------------------------------------------------------------------------ C functions
def test_crc32c_matches_the_reference(speedups):
    rnd = random.Random(4)
    sizes = list(range(80)) + [767, 768, 769, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 9, 100_003]
    for n in sizes:
        for skew in (0, 3):
            data = rnd.randbytes(n + skew)
            view = memoryview(data)[skew:]
            want = crc32c(view)
            assert speedups.crc32c(view) == want, n
            assert speedups.crc32c(view, True) == want, n  # the table path, whatever the CPU


def _sample_segment(codec: str) -> bytes:
    parts, offset = [], 0
    for i in range(6):
        b = RecordBatchBuilder(compression=codec, base_offset=offset, producer_id=i,
                               partition_leader_epoch=i, producer_epoch=2, base_sequence=i * 10,
                               transactional=i == 2, timestamp_type=i % 2,
                               log_append_time=TS + 9 if i % 2 else None)
        for j in range(5):
            b.append(TS + j, b"k%d" % j, b"v" * j, [("h", b"x")] if j == 1 else ())
        offset = b.append(TS, None, None) + 1
        parts.append(b.build())
    return b"".join(parts)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_frame_v2_reads_what_the_batch_reader_reads(speedups, codec):
    data = _sample_segment(codec) + glob_first_segment()
    table = columns.frame_table(64)
    k, nxt, stop = speedups.frame_v2(data, 0, len(data), 1 << 40, table)
    batches = list(iter_batches(data))
    assert (k, nxt, stop) == (len(batches), len(data), 0)
    for row, b in zip(table[:k], batches):
        want = (b.position, b.size_in_bytes, b.base_offset, b.partition_leader_epoch,
                b.attributes, b.last_offset_delta, b.first_timestamp, b.max_timestamp,
                b.producer_id, b.producer_epoch, b.base_sequence, b.count, b.crc, b.compute_crc())
        assert dict(zip(columns.FRAME_FIELDS, row.tolist())) == \
            dict(zip(columns.FRAME_FIELDS, want))


def glob_first_segment() -> bytes:
    """A segment Kafka wrote (the fixtures' first non-empty one)."""
    for path in sorted(glob.glob(os.path.join(LOGDIRS, "*", "*", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) > 200 and data[16] == 2:
            return data
    raise AssertionError("no Kafka segment in the fixtures")


def test_frame_v2_stops_where_the_reference_must_look(speedups):
    data = _sample_segment("none")
    starts = [b.position for b in iter_batches(data)]
    table = columns.frame_table(64)
    frame = speedups.frame_v2
    # a torn tail, bytes too few for a batch header, another magic: stop 2 where they start
    assert frame(data[:-1], 0, len(data) - 1, 1 << 40, table) == (5, starts[5], 2)
    assert frame(data + b"\0" * 11, 0, len(data) + 11, 1 << 40, table) == (6, len(data), 2)
    legacy = encode_legacy_message(30, 1, 0, TS, b"k", b"v")
    assert frame(data + legacy, 0, len(data) + len(legacy), 1 << 40, table) == \
        (6, len(data), 2)
    bad_size = bytearray(data)
    bad_size[starts[2] + 8:starts[2] + 12] = (13).to_bytes(4, "big")
    assert frame(bytes(bad_size), 0, len(data), 1 << 40, table)[1:] == (starts[2], 2)
    negative = bytearray(data)
    negative[starts[3] + 57:starts[3] + 61] = b"\xff\xff\xff\xff"
    assert frame(bytes(negative), 0, len(data), 1 << 40, table)[1:] == (starts[3], 2)
    # a window: the batch that reaches max_bytes is its last; a full table ends it too
    assert frame(data, starts[1], len(data), starts[3] - starts[1] + 1, table) == \
        (3, starts[4], 1)
    assert frame(data, 0, len(data), 1 << 40, columns.frame_table(2)) == (2, starts[2], 1)
    assert frame(data, len(data), len(data), 1, table) == (0, len(data), 0)
    assert frame(data, 0, len(data), 1 << 40, table, False) == (6, len(data), 0)
    assert (table[:6, columns.F_CRC_COMPUTED] == -1).all()  # left to the caller
    with pytest.raises(ValueError):
        frame(data, 0, len(data) + 1, 1, table)


def _built(speedups, data, n=None, outs=None, table=None, parts=()):
    batches = list(iter_batches(data))
    if table is None:
        table = columns.frame_table(len(batches))
        speedups.frame_v2(data, 0, len(data), 1 << 40, table)
    count = sum(b.count for b in batches) if n is None else n
    if outs is None:
        outs = [bytearray(s) for s in (8 * count, 8 * count, count, 4 * count + 4,
                                       count, len(data), 4 * count + 4, count, len(data),
                                       4 * count + 4)] + [None] * 7
    return speedups.build_columns(data, list(parts), table, count, 0, outs)


def test_build_columns_checks_what_it_is_given(speedups):
    data = _sample_segment("none")
    n = sum(b.count for b in iter_batches(data))
    kbytes, vbytes, knulls, vnulls, headers = _built(speedups, data)[:5]
    assert (knulls, vnulls, headers) == (6, 6, 6)
    for wrong in (dict(n=n - 1), dict(n=n + 1),
                  dict(outs=[bytearray(1)] * 10 + [None] * 7)):  # outputs too small
        with pytest.raises(ValueError):
            _built(speedups, data, **wrong)
    table = columns.frame_table(6)
    speedups.frame_v2(data, 0, len(data), 1 << 40, table)
    for col, value in ((columns.F_POS, len(data)), (columns.F_SIZE, 1 << 40),
                       (columns.F_COUNT, 1 << 30), (columns.F_COUNT, -1)):
        bad = table.copy()
        bad[2, col] = value
        with pytest.raises(ValueError):
            _built(speedups, data, table=bad)
    with pytest.raises(ValueError):  # a compressed batch needs its part
        _built(speedups, _sample_segment("lz4"))
    with pytest.raises(TypeError):
        _built(speedups, data, outs=[None] * 17)


# ---------------------------------------------------------------------- same as the reference
@pytest.mark.parametrize("crc_in_c", [True, False])
def test_fixtures_and_samples_read_the_same(fast, monkeypatch, tmp_path, crc_in_c):
    # crc_in_c False: the CRCs as a machine without the CRC instruction computes them
    monkeypatch.setattr(reader, "CRC_IN_C", crc_in_c)
    roots = sorted(glob.glob(os.path.join(LOGDIRS, "*")))
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        roots.append(str(tmp_path / codec))
        write_sample_log_dir(roots[-1], records=150, compression=codec, segment_bytes=16 << 10)
    rows = 0
    for i, root in enumerate(roots):
        for j, opts in enumerate(OPTIONS):
            for data, split in _splits(root, opts):
                rows += _same(data, split, opts, (64, 4 << 20)[(i + j) % 2], monkeypatch)[0]
    assert rows > 5_000 and fast.builds > 100


def test_clean_data_never_takes_the_reference_path(fast, monkeypatch, tmp_path):
    # headers, null values, transactions with aborts, control batches, every codec: all read
    # by the one-pass path (the reference's batch scan and decoder would raise here)
    root = str(tmp_path / "sample")
    write_sample_log_dir(root, records=500, compression="zstd")
    want = {iso: read_arrow(root, isolation=iso, include_control=True)
            for iso in ("read_uncommitted", "read_committed")}

    def refuse(*args, **kwargs):
        raise AssertionError("the reference path ran")

    monkeypatch.setattr(reader, "_decode", refuse)
    monkeypatch.setattr(reader, "scan_batches", refuse)
    for iso, table in want.items():
        got = read_arrow(root, isolation=iso, include_control=True)
        assert got.equals(table)
    assert want["read_committed"].num_rows < want["read_uncommitted"].num_rows


def _recompressed(batch: bytes, records: bytes, codec: str) -> bytes:
    """``batch`` with ``records`` (compressed with ``codec``) as its records section, its
    length and CRC made to match."""
    body = compress(codec, records)
    out = bytearray(batch[:61] + body)
    out[8:12] = (len(out) - 12).to_bytes(4, "big")
    out[17:21] = crc32c(bytes(out[21:])).to_bytes(4, "big")
    return bytes(out)


def test_records_that_do_not_decode_are_reported_with_the_budget_as_it_was(fast, monkeypatch):
    # the one-pass path decompresses a chunk, meets a bad record and hands the chunk to the
    # reference, which decompresses it again: from the budget as it was before, or the second
    # decompression would be charged twice and stop the last batch as "limit"
    batches = []
    for i in range(3):
        b = RecordBatchBuilder(compression="lz4", base_offset=10 * i)
        for j in range(10):
            b.append(TS + j, b"k", bytes(range(200)) * 5)
        batches.append(b.build())
    first = next(iter_batches(batches[1]))
    records = bytearray(decompress("lz4", first.buffer[61:]))
    records[0] = 0x7E  # the first record's length: past the record
    batches[1] = _recompressed(batches[1], bytes(records), "lz4")
    data = b"".join(batches)
    size = sum(len(decompress("lz4", b.buffer[61:])) for b in iter_batches(data))
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data))
    opts = ReadOptions(budget_floor=size + 100, budget_ratio=0)
    rows, reports = _same(data, split, opts, 4 << 20, monkeypatch)
    assert rows == 20 and fast.builds >= 1
    found = _read(data, split, opts, 4 << 20, monkeypatch, True)[1]
    assert [(p.kind, p.position) for p in found] == [("corrupt", len(batches[0]))]


def test_bad_utf8_header_keys_are_replaced_as_python_does(fast, monkeypatch):
    b = RecordBatchBuilder()
    b.append(TS, b"k", b"v", [(b"ok", b"1"), (b"\xff\xfebad\xed\xa0\x80", None)])
    b.append(TS, b"k", b"v", [("\u00e9t\u00e9", b"2")])
    data = b.build()
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data))
    _same(data, split, ReadOptions(), 4 << 20, monkeypatch)
    got = _read(data, split, ReadOptions(), 4 << 20, monkeypatch, True)[0][0]
    assert got.column("headers").to_pylist()[0][1]["key"] == "\ufffd\ufffdbad\ufffd\ufffd\ufffd"


@pytest.mark.parametrize("key", [
    b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xf4\x90\x80\x80",
    b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80",  # not UTF-8: each a different way
    "\u20ac".encode(), "\U0001d11e".encode(), b"\xed\x9f\xbf", b"\xf4\x8f\xbf\xbf", b""])
def test_header_keys_decode_as_python_decodes_them(fast, monkeypatch, key):
    b = RecordBatchBuilder()
    b.append(TS, b"k", b"v", [(key, b"1")])
    data = b.build()
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data))
    got = _read(data, split, ReadOptions(), 4 << 20, monkeypatch, True)[0][0]
    assert got.column("headers").to_pylist() == [[{"key": key.decode("utf-8", "replace"),
                                                   "value": b"1"}]]
    got.validate(full=True)


_record = st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=60),
                    st.lists(st.tuples(st.text(max_size=3) | st.binary(max_size=3),
                                       st.none() | st.binary(max_size=3)), max_size=2))
_batch = st.fixed_dictionaries({
    "records": st.lists(_record, max_size=6),
    "codec": st.sampled_from(["none", "none", "lz4", "gzip"]),
    "producer": st.integers(-1, 3), "kind": st.sampled_from(["plain", "txn", "control"]),
    "log_append": st.booleans(), "epoch": st.integers(-1, 2), "gap": st.integers(0, 3)})


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(spec=st.lists(_batch, min_size=1, max_size=8),
       damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
       cut=st.integers(0, 40), options=st.sampled_from(OPTIONS + [
           ReadOptions(isolation="read_committed", include_control=True)]),
       chunk=st.sampled_from([1, 300, 4 << 20]))
def test_generated_and_damaged_batches_read_the_same(fast, monkeypatch, spec, damage, cut,
                                                     options, chunk):
    parts, offset = [], 5
    for i, b in enumerate(spec):
        offset += b["gap"]
        control = b["kind"] == "control"
        pid = b["producer"] if b["kind"] == "plain" else max(b["producer"], 0)
        builder = RecordBatchBuilder(
            compression=b["codec"], base_offset=offset, producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1, base_sequence=i if pid >= 0 else -1,
            transactional=b["kind"] != "plain", control=control,
            partition_leader_epoch=b["epoch"], timestamp_type=int(b["log_append"]),
            log_append_time=TS + 77 if b["log_append"] else None)
        if control:
            builder.append_end_txn_marker(i % 2 == 0, 1, TS + i)
        for j, (key, value, headers) in enumerate(b["records"]):
            builder.append(TS + 3 * j - i, key, value, headers)
        if not len(builder):  # an empty batch: Kafka writes them after compaction
            builder.last_offset = offset
        offset += max(len(builder), 1)
        parts.append(builder.build())
    data = bytearray(b"".join(parts))
    for at, value in damage:
        data[at % len(data)] = value
    data = bytes(data[:len(data) - cut])
    split = Split("t-0/00000000000000000005.log", "t", 0, 5, 0, len(data),
                  resync=tuple(sorted({len(parts[0])} - {len(data)})) if len(parts) > 1
                  and len(parts[0]) < len(data) else (),
                  aborted=(AbortedTxn(1, 5, offset // 2, 0), AbortedTxn(2, 0, 1 << 40, 0)),
                  last_stable_offset=offset - 2, next_base_offset=offset + 1)
    _same(data, split, options, chunk, monkeypatch)


def test_many_small_batches_and_split_pieces(fast, monkeypatch):
    # more batches than one frame table holds, and splits that start inside the segment
    b = RecordBatchBuilder(compression="none")
    b.append(TS, b"k", b"v", [("h", b"x")])
    one = b.build()
    batches = []
    for i in range(reader._FRAME_ROWS + 50):
        x = bytearray(one)
        x[0:8] = i.to_bytes(8, "big")
        batches.append(bytes(x))
    data = b"".join(batches)
    for start in (0, len(one) * 7):
        split = Split("t-0/00000000000000000000.log", "t", 0, 0, start, len(data),
                      resync=(len(one) * 100,))
        rows, _ = _same(data[start:], split, ReadOptions(), 4 << 20, monkeypatch)
        assert rows == len(batches) - start // len(one)


def test_read_arrow_splits_with_small_chunks(fast, monkeypatch, tmp_path):
    root = str(tmp_path / "logdir")
    write_sample_log_dir(root, records=200, compression="lz4", segment_bytes=8 << 10)
    splits = plan_splits(root, split_bytes=3000)
    for s in splits:
        with open(s.path, "rb") as f:
            data = f.read()[s.start:s.end]
        _same(data, dataclasses.replace(s), ReadOptions(isolation="read_committed"), 700,
              monkeypatch)
    assert len(splits) > 5


def test_offsets_at_the_end_of_int64(fast, monkeypatch):
    # after a batch ending at 2**63 - 1 no offset is left: the next batch is out of place
    # (the table's int64 arithmetic would wrap to -2**63 and let it through)
    top = (1 << 63) - 1
    parts = []
    for base in (top - 1, top, top):
        b = RecordBatchBuilder(base_offset=base)
        b.append(TS, b"k", b"v")
        parts.append(b.build())
    data = b"".join(parts)
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data))
    rows, reports = _same(data, split, ReadOptions(), 4 << 20, monkeypatch)
    assert (rows, reports) == (2, 1)


def test_a_record_count_the_bytes_cannot_hold_allocates_nothing_for_it(fast, monkeypatch):
    # the header's count is checked against the records section before any column is sized
    # (a batch of a few bytes claiming 2**31 - 1 records); the reference then reports it
    asked = []
    allocate = pa.allocate_buffer

    def counting(size, *args, **kwargs):
        asked.append(size)
        return allocate(size, *args, **kwargs)

    monkeypatch.setattr(pa, "allocate_buffer", counting)
    parts = []
    for i, codec in enumerate(("none", "lz4")):
        b = RecordBatchBuilder(compression=codec, base_offset=i)
        b.append(TS, b"k", b"v")
        raw = bytearray(b.build())
        raw[57:61] = (0x7FFFFFFF).to_bytes(4, "big")
        raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
        parts.append(bytes(raw))
    data = b"".join(parts)
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data))
    rows, reports = _same(data, split, ReadOptions(), 4 << 20, monkeypatch)
    assert (rows, reports) == (0, 2) and fast.builds == 0
    assert max(asked, default=0) < 1 << 16
