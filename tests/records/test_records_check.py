"""``check_records`` (the broker's one-pass record checks, C accelerator) answers as the
columnar decoding it stands in for: the same verdict and the same (max timestamp, offset
delta) on random, damaged and out-of-order batches, compressed or not."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kproto.errors import DecodeError
from kproto.records import RecordBatch, RecordBatchBuilder, columns

I64 = 2**63 - 1
NOW = 1_700_000_000_000


def reference(batch, now, before, after, check_ts, need_keys):
    """The verdict from the decoded columns (the numpy engine: the reference)."""
    try:
        cols = batch.columns()
    except DecodeError:
        return None
    n = len(cols)
    if n == 0 or n != batch.count or list(cols.offset - batch.base_offset) != list(range(n)):
        return None
    if need_keys and (cols.key_length < 0).any():
        return None
    ts = cols.timestamp if batch.timestamp_type == 0 else np.full(n, batch.first_timestamp)
    if check_ts and (((now - ts) > before) | ((ts - now) > after)).any():
        return None
    i = int(np.argmax(ts))
    return int(ts[i]), i


@pytest.fixture
def c_engine(speedups, monkeypatch):
    monkeypatch.setattr(columns, "_speedups", speedups)


def _codecs():
    out = [0]
    for codec in (1, 2, 3, 4):
        try:
            RecordBatchBuilder(compression=codec).build()
        except Exception:  # a codec whose library is not installed
            continue
        out.append(codec)
    return out


CODECS = _codecs()
BOUNDS = st.sampled_from([0, 1, 1000, 3_600_000, 2**40, I64, 2**64])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(st.integers(-2**20, 2**20), st.none() | st.binary(max_size=20),
                               st.none() | st.binary(max_size=300),
                               st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)),
                                        max_size=2)), min_size=1, max_size=20),
       base_ts=st.sampled_from([NOW, 0, -5, I64 - 2**21, -I64 + 2**21]),
       gap=st.none() | st.integers(0, 19), codec=st.sampled_from(CODECS),
       log_append=st.booleans(), now=st.sampled_from([NOW, 0, I64, -I64 - 1]),
       before=BOUNDS, after=BOUNDS, check_ts=st.booleans(), need_keys=st.booleans(),
       flips=st.lists(st.tuples(st.integers(61, 10**6), st.integers(0, 255)), max_size=2))
def test_agrees_with_the_columns(c_engine, recs, base_ts, gap, codec, log_append, now, before,
                                 after, check_ts, need_keys, flips):
    b = RecordBatchBuilder(base_offset=0, compression=codec, timestamp_type=1 if log_append else 0,
                           log_append_time=NOW if log_append else None)
    for i, (dt, k, v, h) in enumerate(recs):
        # an offset gap makes the deltas run out of order, as a hostile producer's would
        b.append(base_ts + dt, k, v, h, offset=i + (1 if gap is not None and i >= gap else 0))
    data = bytearray(b.build())
    for at, val in flips:  # damage the records section (the CRC is not what is checked here)
        data[at % (len(data) - 61) + 61] = val
    batch = RecordBatch(bytes(data))
    got = columns.check_records(batch, now, before, after, check_timestamps=check_ts,
                                need_keys=need_keys)
    event("passed" if got is not None else "refused")
    assert got == reference(RecordBatch(bytes(data)), now, min(before, I64), min(after, I64),
                            check_ts, need_keys)


def test_a_count_beyond_the_records_is_refused_without_allocating(c_engine):
    b = RecordBatchBuilder()
    b.append(NOW, b"k", b"v")
    data = bytearray(b.build())
    data[57:61] = (2**31 - 1).to_bytes(4, "big")  # the record count
    batch = RecordBatch(bytes(data))
    assert columns.check_records(batch, NOW, I64, I64, check_timestamps=False, need_keys=False) is None


def test_without_the_accelerator_the_columns_decide(monkeypatch):
    # (a build of an older source is not loaded at all: tests/test_accelerators.py)
    monkeypatch.setattr(columns, "_speedups", None)
    b = RecordBatchBuilder()
    b.append(NOW, b"k", b"v")
    assert columns.check_records(RecordBatch(b.build()), NOW, I64, I64, check_timestamps=False,
                                 need_keys=False) is None
