"""record_tuples (a client's record tuples from decoded columns): the C loop and the Python
path give the same records as the field-by-field decoder, on the vectors and on random
batches; the C loop checks what it is handed and keeps plain records out of the collector."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.client.consumer import ConsumerRecord, parse_records
from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records import RecordBatchBuilder, iter_batches
from kproto.records.columns import decode_batches, record_tuples
from kproto.records.legacy import LegacyMessage

from .conftest import VECTORS, vector_names


def _reference(data: bytes, position: int) -> list[tuple]:
    """What parse_records must return, from the field-by-field decoder."""
    out = []
    for b in iter_batches(data, problems=Problems()):
        if getattr(b, "is_control", False):
            continue
        recs = b.record_list() if isinstance(b, LegacyMessage) else list(b.iter_records_slow())
        out += [("t", 3, r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                for r in recs if r.offset >= position]
    return out


def _outcome(data: bytes, position: int):
    try:
        recs, _ = parse_records("t", 3, data, position)
    except DecodeError:
        return "DecodeError"
    assert all(type(r) is ConsumerRecord for r in recs)
    return [tuple(r) for r in recs]


def _reference_outcome(data: bytes, position: int):
    try:
        return _reference(data, position)
    except DecodeError:
        return "DecodeError"


def test_vectors(engine):
    checked = 0
    for name in vector_names():
        data = (VECTORS / f"{name}.bin").read_bytes()
        ref = _reference_outcome(data, 0)
        assert _outcome(data, 0) == ref, name
        if ref != "DecodeError" and len(ref) > 1:  # a position inside the data skips a prefix
            assert _outcome(data, ref[1][2]) == ref[1:], name
            checked += 1
    assert checked


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                               HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(st.integers(0, 2**45), st.none() | st.binary(max_size=50),
                               st.none() | st.binary(max_size=300),
                               st.lists(st.tuples(st.text(max_size=5),
                                                  st.none() | st.binary(max_size=5)),
                                        max_size=2)), min_size=1, max_size=30),
       codec=st.sampled_from(["none", "gzip", "zstd"]), position=st.integers(0, 140))
def test_random_batches(engine, recs, codec, position):
    data = b""
    for base in (100, 100 + len(recs)):
        b = RecordBatchBuilder(base_offset=base, compression=codec)
        for ts, k, v, h in recs:
            b.append(ts, k, v, h)
        data += b.build()
    assert _outcome(data, position) == _reference(data, position)


def _columns():
    b = RecordBatchBuilder(base_offset=5)
    b.append(1, b"k", b"v")
    b.append(2, None, b"w")
    return decode_batches(list(iter_batches(b.build())))


def test_c_records_are_untracked_unless_their_headers_are(speedups):
    cols = _columns()
    recs = speedups.record_tuples(ConsumerRecord, "t", 0, cols.data, cols.offset, cols.timestamp,
                                  cols.key_start, cols.key_length, cols.value_start,
                                  cols.value_length, None, 0)
    assert recs == [("t", 0, 5, 1, b"k", b"v", ()), ("t", 0, 6, 2, None, b"w", ())]
    assert not any(gc.is_tracked(r) for r in recs)
    tracked = [("h", [b"a list can form a cycle"])]
    recs = speedups.record_tuples(ConsumerRecord, "t", 0, cols.data, cols.offset, cols.timestamp,
                                  cols.key_start, cols.key_length, cols.value_start,
                                  cols.value_length, [(), tuple(tracked)], 0)
    assert [gc.is_tracked(r) for r in recs] == [False, True]


def test_c_records_hold_their_references(speedups):
    cols = _columns()
    topic = "".join(["to", "pic"])  # a string of its own, to count its references
    before = sys.getrefcount(topic)
    recs = speedups.record_tuples(ConsumerRecord, topic, 0, cols.data, cols.offset, cols.timestamp,
                                  cols.key_start, cols.key_length, cols.value_start,
                                  cols.value_length, None, 1)
    assert [r.offset for r in recs] == [6]
    assert sys.getrefcount(topic) == before + 1
    del recs
    assert sys.getrefcount(topic) == before


def _call(speedups, cols, **change):
    args = dict(cls=ConsumerRecord, topic="t", partition=0, data=cols.data, offset=cols.offset,
                timestamp=cols.timestamp, key_start=cols.key_start, key_length=cols.key_length,
                value_start=cols.value_start, value_length=cols.value_length, headers=None,
                first=0)
    args.update(change)
    return speedups.record_tuples(*args.values())


@pytest.mark.parametrize("change, error", [
    ({"key_start": np.array([1 << 40, 0], np.int64)}, ValueError),
    ({"value_start": np.array([-1, 0], np.int64)}, ValueError),
    ({"value_length": np.array([1, -2], np.int32)}, ValueError),
    ({"key_length": np.array([1 << 30, 0], np.int32)}, ValueError),
    ({"key_length": np.array([1, 0], np.int64)}, ValueError),  # not int32
    ({"timestamp": np.array([1], np.int64)}, ValueError),
    ({"first": 3}, ValueError),
    ({"first": -1}, ValueError),
    ({"headers": [()]}, ValueError),
    ({"headers": ((), ())}, ValueError),
    ({"cls": dict}, TypeError),
])
def test_c_rejects_what_does_not_fit(speedups, change, error):
    cols = _columns()
    assert len(_call(speedups, cols)) == 2
    with pytest.raises(error):
        _call(speedups, cols, **change)


def test_plain_tuples_too(speedups):
    cols = _columns()
    for _ in range(3):  # through tuple's free lists and back
        recs = _call(speedups, cols, cls=tuple)
        assert recs == [("t", 0, 5, 1, b"k", b"v", ()), ("t", 0, 6, 2, None, b"w", ())]
        assert all(type(r) is tuple for r in recs)
        del recs


def test_python_path_is_the_same(monkeypatch, speedups):
    from kproto.records import columns

    cols = _columns()
    for first in (0, 1, 2):
        monkeypatch.setattr(columns, "_speedups", None)
        want = record_tuples(cols, ConsumerRecord, "t", 1, first)
        monkeypatch.setattr(columns, "_speedups", speedups)
        assert record_tuples(cols, ConsumerRecord, "t", 1, first) == want
        assert all(type(r) is ConsumerRecord for r in want)
