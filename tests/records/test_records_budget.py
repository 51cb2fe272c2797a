"""Every public entry point that decompresses takes a DecompressionBudget by default: with
default arguments, a decompression bomb (kilobytes of zstd that expand to hundreds of MiB of
7-byte records) costs at most the budget's floor plus a multiple of its compressed bytes, and
is reported as a limit, never a MemoryError."""
from __future__ import annotations

import tracemalloc

import pytest

from kproto.capture.records_view import iter_records, records_json
from kproto.client.consumer import parse_records
from kproto.records.batch import RecordBatch
from kproto.records.compression import (DEFAULT_BUDGET_FLOOR, DEFAULT_BUDGET_RATIO,
                                        DecompressionLimitError)
from kproto.records.dump import dump_lines
from kproto.records.reader import decode_columns, iter_batches, iter_column_batches

from fuzz_support import zstd_bomb

MIB = 1 << 20


def _records(data):
    return [r for b in iter_batches(data) for r in b.record_list()]


def _records_iter(data):
    return [r for b in iter_batches(data) for r in b.records()]


def _one_batch(data):
    return RecordBatch(data).record_list()


def _columns(data):
    return decode_columns(data)


def _column_chunks(data):
    return list(iter_column_batches(data))


def _capture_view(data):
    doc = records_json(data)
    assert doc["records"] == [] and "decompression budget" in str(doc["errors"])


def _capture_records(data):
    return list(iter_records(data))


def _client_fetch(data):
    return parse_records("t", 0, data, 0)


def _dump(data):
    lines = list(dump_lines(data))
    assert not [x for x in lines if x["type"] == "record"]
    assert "decompression budget" in str([x for x in lines if x["type"] == "error"])


ENTRY_POINTS = [_records, _records_iter, _one_batch, _columns, _column_chunks, _capture_view,
                _capture_records, _client_fetch, _dump]


@pytest.fixture(scope="module", params=[73, 255], ids=["6KB-73MiB", "24KB-255MiB"])
def bomb(request):
    return zstd_bomb(request.param)


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f.__name__.strip("_"))
def test_bomb_is_cut_by_the_default_budget_on_every_entry_point(bomb, entry):
    allowed = DEFAULT_BUDGET_FLOOR + DEFAULT_BUDGET_RATIO * len(bomb)
    tracemalloc.start()
    try:
        if entry in (_capture_view, _dump):
            entry(bomb)
        else:
            with pytest.raises(DecompressionLimitError, match="budget"):
                entry(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # what was decompressed before the cut, one more read chunk, and the join of them
    assert peak < 2 * allowed + 2 * MIB, (entry.__name__, peak)


def test_batches_under_the_budget_cost_a_bounded_multiple_of_it():
    """A bomb just under the floor is decoded (its records are valid records); the columns
    are sized by what the decompressed bytes can hold, so the cost is a fixed multiple."""
    bomb = zstd_bomb(8)
    tracemalloc.start()
    try:
        cols = decode_columns(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(cols) == (8 * MIB) // 7
    # ten int64 scan columns, then the offset, timestamp and narrowed ones: about 81 + 80
    # bytes per 7-byte record, 21 x the decompressed bytes (8 MiB: 177 MB)
    assert peak < 24 * 8 * MIB, peak



def test_decode_columns_takes_a_budget():
    from kproto.records.compression import DecompressionBudget

    bomb = zstd_bomb(73)
    cols = decode_columns(bomb, budget=DecompressionBudget(floor=80 * MIB))
    assert len(cols) == (73 * MIB) // 7
    with pytest.raises(DecompressionLimitError):
        decode_columns(zstd_bomb(8), budget=DecompressionBudget(floor=MIB, ratio=1))
