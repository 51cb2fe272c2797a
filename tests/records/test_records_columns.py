"""The bulk decoder's two engines (numpy reference, optional C accelerator) agree with the
field-by-field reference decoder, on the vectors and on random or damaged batches."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.errors import DecodeError
from kproto.records import RecordBatch, RecordBatchBuilder, iter_batches

from .conftest import VECTORS, vector_names


def _outcome(fn):
    try:
        return fn()
    except DecodeError:
        return "DecodeError"


def _compare(data: bytes) -> None:
    for batch in iter_batches(data, errors=[]):
        if isinstance(batch, RecordBatch):
            bulk = _outcome(batch.record_list)
            ref = _outcome(lambda: list(batch.iter_records_slow()))
            assert bulk == ref, batch


def test_vectors(engine):
    for name in vector_names():
        _compare((VECTORS / f"{name}.bin").read_bytes())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                               HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(st.integers(0, 2**45), st.none() | st.binary(max_size=200),
                               st.none() | st.binary(max_size=9000),
                               st.lists(st.tuples(st.text(max_size=5),
                                                  st.none() | st.binary(max_size=5)),
                                        max_size=3)), min_size=1, max_size=30),
       flips=st.lists(st.tuples(st.integers(61, 10**6), st.integers(0, 255)), max_size=3))
def test_random_and_damaged(engine, recs, flips):
    b = RecordBatchBuilder(base_offset=100)
    for ts, k, v, h in recs:
        b.append(ts, k, v, h)
    data = bytearray(b.build())
    _compare(bytes(data))
    for at, val in flips:  # damage the records section; CRC left stale (not verified here)
        data[at % (len(data) - 61) + 61] = val
    _compare(bytes(data))
