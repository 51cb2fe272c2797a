"""The records accelerator's writer (encode_records) against the pure Python one, byte for byte."""
from __future__ import annotations

import random

import pytest

from kproto.errors import EncodeError
from kproto.records import RecordBatchBuilder, builder, iter_batches
from kproto.records.builder import encode_record

speedups = builder._speedups
needs_c = pytest.mark.skipif(speedups is None, reason="the records accelerator is not built")


def _blob(rng: random.Random) -> bytes | None:
    n = rng.choice([-1, 0, 1, 5, 63, 64, 127, 128, 300, 20000])
    return None if n < 0 else rng.randbytes(n)


def _records(rng: random.Random, n: int, base_offset: int, base_ts: int) -> list[tuple]:
    recs, off = [], base_offset
    for _ in range(n):
        off += rng.choice([1, 1, 2, 1000, 1 << 40])
        ts = base_ts + rng.choice([0, 1, -1, 63, -64, 64, 1 << 35, -(1 << 40)])
        headers = tuple((rng.choice(["", "h", "ключ", "x" * 200]) if rng.random() < 0.7
                         else rng.randbytes(rng.randrange(4)), _blob(rng))
                        for _ in range(rng.choice([0, 0, 1, 3, 130])))
        recs.append((off, ts, _blob(rng), _blob(rng), headers))
    return recs


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_writes_what_python_writes(seed):
    rng = random.Random(seed)
    base_offset = rng.choice([0, 7, 1 << 50])
    base_ts = rng.choice([-1, 0, 1_700_000_000_000])
    recs = _records(rng, rng.randrange(0, 60), base_offset, base_ts)
    want = b"".join(encode_record(o - base_offset, t - base_ts, k, v, h) for o, t, k, v, h in recs)
    assert speedups.encode_records(recs, base_offset, base_ts) == want


@needs_c
def test_c_takes_bytes_likes_and_list_headers():
    recs = [(3, 10, bytearray(b"k"), memoryview(b"value"), [["hk", b"hv"], (b"raw", None)])]
    want = encode_record(3, 10, b"k", b"value", [("hk", b"hv"), (b"raw", None)])
    assert speedups.encode_records(recs, 0, 0) == want


@needs_c
@pytest.mark.parametrize("bad", [
    [(0, 0, "text", None, ())],             # a str key
    [(0, 0, None, None, ((b"k",),))],       # a header that is not a pair
    [(0, 0, None, None, "headers")],        # headers not a tuple or list
    [(0, 0, None, None)],                   # a short record
    [("0", 0, None, None, ())],             # an offset that is not an int
    [(0, 1 << 64, None, None, ())],         # a timestamp beyond 64 bits
])
def test_c_rejects_what_it_cannot_write(bad):
    with pytest.raises((TypeError, ValueError, OverflowError)):
        speedups.encode_records(bad, 0, 0)


def test_extend_is_append_at_consecutive_offsets():
    rng = random.Random(5)
    recs = [(ts, k, v, h) for _, ts, k, v, h in _records(rng, 50, 0, 1_700_000_000_000)]
    one, many = RecordBatchBuilder(base_offset=9), RecordBatchBuilder(base_offset=9)
    for ts, k, v, h in recs[:3]:
        one.append(ts, k, v, h)
        many.append(ts, k, v, h)
    for ts, k, v, h in recs[3:]:
        one.append(ts, k, v, h)
    many.extend(recs[3:])
    assert one.build() == many.build()
    (batch,) = list(iter_batches(many.build(), verify_crc=True))
    assert [r.offset for r in batch.record_list()] == list(range(9, 59))
    assert [(r.timestamp, r.key, r.value) for r in batch.record_list()] == [r[:3] for r in recs]


@needs_c
def test_a_delta_beyond_64_bits_fails_as_in_python():
    from kproto.errors import EncodeError as Err

    big = [(0, (1 << 63) - 1, None, None, ())]
    with pytest.raises(Err):
        encode_record(0, (1 << 63) - 1 - (-5), None, None)
    with pytest.raises(ValueError):
        speedups.encode_records(big, 0, -5)
    b = RecordBatchBuilder()
    b.extend([(-5, None, None, ()), ((1 << 63) - 1, None, None, ())])
    with pytest.raises(Err):
        b.build()


def test_null_header_key_is_an_encode_error():
    b = RecordBatchBuilder()
    with pytest.raises(EncodeError):
        b.append(0, None, b"v", [(None, b"x")])
    b.extend([(0, None, b"v", ((None, b"x"),))])
    with pytest.raises(EncodeError):
        b.build()
