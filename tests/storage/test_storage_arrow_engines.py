"""The storage reader's path to Arrow (kproto.records.columns.decode_arrow / binary_array and
the C helper's scan_parts / gather_binary): classic binary keys and values built directly,
checked against the per-record reference decoder with the C helper and with the numpy engine,
and read_arrow giving the same table whichever engine and key/value type."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.errors import DecodeError
from kproto.records import RecordBatchBuilder, columns, iter_batches
from kproto.records.builder import LegacyMessageBuilder
from kproto.storage import arrow_schema, read_arrow


def _batches(seed: int = 7) -> bytes:
    """Batches of every codec and shape: null and empty keys/values, headers (null values
    too), LogAppendTime, transactional and control batches, long values."""
    rnd = random.Random(seed)
    out, offset = [], 0
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"] * 3):
        b = RecordBatchBuilder(compression=codec, base_offset=offset, producer_id=i,
                               timestamp_type=1 if i % 4 == 3 else 0,
                               log_append_time=1_700_000_999_000 if i % 4 == 3 else None,
                               transactional=i % 5 == 2)
        for j in range(rnd.randint(1, 40)):
            key = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 30))])
            value = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 3000))])
            headers = [(f"h{k}", rnd.choice([None, rnd.randbytes(rnd.randint(0, 8))]))
                       for k in range(rnd.choice([0, 0, 1, 3]))]
            b.append(1_700_000_000_000 + rnd.randint(-5000, 5000), key, value, headers)
        offset = b.append(1_700_000_000_000, b"k", None) + 1
        out.append(b.build())
    return b"".join(out)


def _reference(batches) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, [(h[0], h[1]) for h in r.headers])
            for b in batches for r in b.iter_records_slow()]


def _got(recs) -> list[tuple]:
    headers = [[(h["key"], h["value"]) for h in hs] for hs in recs.headers.to_pylist()]
    return list(zip(recs.offset.tolist(), recs.timestamp.tolist(), recs.key.to_pylist(),
                    recs.value.to_pylist(), headers))


def test_decode_arrow_matches_reference(engine):
    data = _batches()
    batches = list(iter_batches(data))
    recs = columns.decode_arrow(batches)
    assert recs.key.type == recs.value.type == pa.binary()
    recs.key.validate(full=True)
    recs.value.validate(full=True)
    assert _got(recs) == _reference(batches)
    assert recs.counts.tolist() == [b.count for b in batches]


def test_decode_arrow_reads_records_where_they_lie(engine):
    # uncompressed sections are views into the caller's buffer (a mapped file): the result
    # must not depend on it afterwards
    buf = bytearray(_batches(3))
    batches = list(iter_batches(memoryview(buf)))
    want = _reference(batches)
    recs = columns.decode_arrow(batches)
    del batches
    buf[:] = b"\xff" * len(buf)
    assert _got(recs) == want


def test_decode_arrow_empty_and_damaged(engine):
    assert len(columns.decode_arrow([])) == 0
    data = bytearray(_batches(5))
    first = next(iter_batches(bytes(data)))
    assert first.compression == 0
    data[61] = 0x7E  # the first record's length prefix: 63 bytes, past the record
    with pytest.raises(DecodeError):
        columns.decode_arrow(list(iter_batches(bytes(data))))


def _outcome(fn):
    try:
        return fn()
    except DecodeError:
        return "DecodeError"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                               HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(st.none() | st.binary(max_size=40),
                               st.none() | st.binary(max_size=300),
                               st.lists(st.tuples(st.text(max_size=4),
                                                  st.none() | st.binary(max_size=4)),
                                        max_size=2)), min_size=1, max_size=20),
       codec=st.sampled_from(["none", "lz4"]),
       flips=st.lists(st.tuples(st.integers(61, 10**6), st.integers(0, 255)), max_size=3))
def test_decode_arrow_random_and_damaged(engine, recs, codec, flips):
    b = RecordBatchBuilder(base_offset=7, compression=codec)
    for i, (k, v, h) in enumerate(recs):
        b.append(1_700_000_000_000 + i, k, v, h)
    data = bytearray(b.build() * 2)
    half = len(data) // 2
    for at, val in flips:  # damage the first batch's records section (CRC not verified here)
        data[61 + at % (half - 61)] = val
    batches = list(iter_batches(bytes(data)))
    want = _outcome(lambda: _reference(batches))
    got = _outcome(lambda: _got(columns.decode_arrow(batches)))
    assert got == want


def test_binary_array_with_legacy_records(engine):
    # legacy messages are spliced in after the v2 data, out of order: views and a cast then
    legacy = LegacyMessageBuilder(1, base_offset=0)
    for i in range(5):
        legacy.append(1_700_000_000_000 + i, None if i == 2 else b"lk%d" % i, b"lv" * i)
    v2 = RecordBatchBuilder(base_offset=5)
    for i in range(5):
        v2.append(1_700_000_000_000 + i, b"k%d" % i, None if i == 1 else b"v" * i)
    batches = list(iter_batches(v2.build() + legacy.build() + v2.build()))
    cols = columns.decode_batches(batches)
    for which in ("key", "value"):
        arr = columns.binary_array(cols, which)
        assert arr.type == pa.binary()
        arr.validate(full=True)
        assert arr.to_pylist() == [getattr(cols, which)(i) for i in range(len(cols))]
    assert columns.decode_arrow(batches).value.to_pylist() == \
        [cols.value(i) for i in range(len(cols))]


def test_gather_binary_checks_its_ranges(speedups):
    part = b"abcdef"
    counts = np.array([2], np.int64)
    offsets = np.empty(3, np.int32)
    for start, length in (([0, 5], [2, 2]), ([-1, 0], [1, 1]), ([0, 0], [7, 0])):
        with pytest.raises(ValueError):
            speedups.gather_binary([part], counts, np.array(start, np.int64),
                                   np.array(length, np.int64), offsets,
                                   np.empty(max(0, sum(length)), np.uint8))
    data = np.empty(3, np.uint8)
    speedups.gather_binary([part], counts, np.array([1, 4], np.int64),
                           np.array([2, 1], np.int64), offsets, data)
    assert offsets.tolist() == [0, 2, 3] and bytes(data) == b"bce"


def test_scan_parts_reports_the_damaged_part(speedups):
    good = list(iter_batches(_batches()))[0].records_data()
    bad = bytes(good[:-1])  # the last record is cut short
    counts = np.array([next(iter_batches(_batches())).count] * 2, np.int64)
    n = int(counts.sum())
    outs = [np.empty(n, np.int64) for _ in range(10)]
    with pytest.raises(ValueError) as exc:
        speedups.scan_parts([bytes(good), bad], counts, *outs, np.empty(n, np.uint8))
    assert exc.value.args[2] == 1


def test_read_arrow_same_table_with_every_engine_and_type(monkeypatch, speedups, tmp_path):
    from kproto.storage.sample import write_sample_log_dir
    root = str(tmp_path / "sample")
    write_sample_log_dir(root, records=3000, compression="lz4")
    tables = {}
    for name, mod in (("c", speedups), ("numpy", None)):
        monkeypatch.setattr(columns, "_speedups", mod)
        for view in (False, True):
            for isolation in ("read_uncommitted", "read_committed"):
                t = read_arrow(root, binary_view=view, isolation=isolation, include_control=True)
                if view:
                    t = t.cast(arrow_schema())
                tables[name, view, isolation] = t
    for isolation in ("read_uncommitted", "read_committed"):
        ref = tables["c", False, isolation]
        # the sample has what the engines must agree on: null values, headers, control
        assert ref.column("value").null_count > 0 and ref.column("is_control").to_numpy().any()
        assert pc.list_value_length(ref.column("headers")).to_numpy().any()
        for key, t in tables.items():
            if key[2] == isolation:
                assert t.equals(ref), key
