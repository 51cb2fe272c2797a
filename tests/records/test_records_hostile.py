"""Numbers past their range in record batches (issue 19): a legacy wrapper whose inner offsets
would pass 2^63-1 is corrupt data, reported as a DecodeError by every decoder, never an
OverflowError or an offset beyond int64."""
from __future__ import annotations

import pytest

from kproto.records.compression import compress
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.builder import encode_legacy_message
from kproto.records.reader import decode_columns
from kproto.records.reader import iter_batches

from fuzz_support import zstd_bomb

LZ4 = 3


def _wrapper(wrapper_offset: int, inner_offsets: list[int]) -> bytes:
    inner = b"".join(encode_legacy_message(o, 1, 0, 1000, b"k", b"v") for o in inner_offsets)
    return encode_legacy_message(wrapper_offset, 1, LZ4, 1000, None, compress(LZ4, inner))


@pytest.mark.parametrize("wrapper,inner", [
    (2**63 - 1, [5, 0]),        # first absolute offset 2^63 + 4
    (-2**63, [0, 7]),           # 2^63 below the first
])
def test_inner_offsets_past_int64_are_corrupt(wrapper, inner):
    data = _wrapper(wrapper, inner)
    (batch,) = iter_batches(data)
    with pytest.raises(DecodeError, match="int64"):
        batch.record_list()
    with pytest.raises(DecodeError, match="int64"):
        decode_columns(data)


def test_inner_offsets_at_the_edge_still_decode():
    data = _wrapper(2**63 - 1, [0, 1, 2])
    (batch,) = iter_batches(data)
    assert [r.offset for r in batch.record_list()] == [2**63 - 3, 2**63 - 2, 2**63 - 1]
    assert list(decode_columns(data).offset) == [2**63 - 3, 2**63 - 2, 2**63 - 1]


def test_batch_without_budget_gets_its_own():
    # a batch read on its own still has a decompression budget: a bomb is refused, not run
    batch = RecordBatch(zstd_bomb(64))
    with pytest.raises(DecodeError, match="budget"):
        batch.record_list()
