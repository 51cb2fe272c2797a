"""The bulk decoder's two engines (numpy reference, optional C accelerator) agree with the
field-by-field reference decoder, on the vectors and on random or damaged batches."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records import RecordBatch, RecordBatchBuilder, iter_batches

from .conftest import VECTORS, vector_names


def _outcome(fn):
    try:
        return fn()
    except DecodeError:
        return "DecodeError"


def _compare(data: bytes) -> None:
    for batch in iter_batches(data, problems=Problems()):
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


def test_legacy_attribute_bits_above_the_codec_survive_the_merge(engine):
    """A magic 1 message whose attributes byte has its high bit set (a signed byte in the
    format) beside a v2 batch: the merged column keeps the byte, it does not overflow."""
    from kproto.records.builder import LegacyMessageBuilder
    from kproto.records.columns import decode_batches

    legacy = LegacyMessageBuilder(1, base_offset=0)
    legacy.append(1_700_000_000_000, b"k", b"v")
    data = bytearray(legacy.build())
    data[17] = 0xF8  # offset 8 + size 4 + crc 4 + magic 1: no codec, other bits set
    v2 = RecordBatchBuilder(base_offset=1)
    v2.append(1_700_000_000_001, b"k2", b"v2")
    data += v2.build()
    cols = decode_batches(list(iter_batches(bytes(data), problems=Problems())))
    assert list(cols.offset) == [0, 1] and list(cols.attributes) == [0xF8, 0]
