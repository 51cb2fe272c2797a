"""Damaged logs: bad CRCs, torn and truncated batches, wrong lengths, garbage, bombs. Always a
DecodeError or a reported (skipped) batch with its position; never another exception."""
from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from kproto.errors import DecodeError
from kproto.problems import Problem, Problems
from kproto.records import RecordBatch, RecordBatchBuilder, decode_columns, iter_batches
from kproto.records.dump import dump_lines


def _batch(base=0, n=3, codec="none", value=b"value") -> bytes:
    b = RecordBatchBuilder(compression=codec, base_offset=base)
    for i in range(n):
        b.append(1000 + i, b"k%d" % i, value)
    return b.build()


def _fix_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_bad_crc_reported_and_skipped_with_verify():
    good1, bad, good2 = _batch(0), bytearray(_batch(3)), _batch(6)
    bad[-2] ^= 0x40
    data = good1 + bytes(bad) + good2
    found = Problems()
    got = [b.base_offset for b in iter_batches(data, verify_crc=True, problems=found)]
    assert got == [0, 6]
    assert list(found) == [Problem("crc", found[0].reason, position=len(good1), index=1,
                                   fatal=False)]
    assert "CRC" in found[0].reason
    # without verification the batch is read, flagged invalid
    assert [b.is_valid() for b in iter_batches(data)] == [True, False, True]
    with pytest.raises(DecodeError):
        list(iter_batches(data, verify_crc=True))


def test_torn_tail_is_not_an_error():
    data = _batch(0) + _batch(3)[:-7]
    found = Problems()
    from kproto.records import BatchReader
    r = BatchReader(data, problems=found)
    assert [b.base_offset for b in r] == [0]
    assert r.trailing_bytes == len(_batch(3)) - 7 and r.stopped_by is None and not found


@pytest.mark.parametrize("size", [-1, 0, 13])
def test_batch_size_below_minimum_stops(size):
    bad = bytearray(_batch(3))
    struct.pack_into(">i", bad, 8, size)
    data = _batch(0) + bytes(bad) + _batch(6)
    found = Problems()
    assert [b.base_offset for b in iter_batches(data, problems=found)] == [0]
    assert found[0].fatal and found[0].kind == "corrupt" and found[0].position == len(_batch(0))
    summary = list(dump_lines(data))[-1]
    assert summary["stopped_by"] and summary["valid_bytes"] == len(_batch(0))
    with pytest.raises(DecodeError):
        list(iter_batches(data))


def test_unknown_magic_and_garbage_after_a_batch():
    # garbage whose "size" does not fit reads as a torn tail (as in Kafka) ...
    summary = list(dump_lines(_batch(0) + bytes(range(7, 60))))[-1]
    assert summary["batches"] == 1 and summary["trailing_bytes"] == 53
    # ... and garbage whose "size" is impossible is corruption that stops the scan
    data = _batch(0) + b"\xff" * 40
    found = Problems()
    assert len(list(iter_batches(data, problems=found))) == 1
    assert found and found[0].fatal and found[0].position == len(_batch(0))
    garbage = bytearray(_batch(3))
    garbage[16] = 3
    found = Problems()
    assert list(iter_batches(bytes(garbage), problems=found)) == []
    assert "magic" in found[0].reason


def test_v2_length_below_header_size():
    bad = bytearray(_batch(0))
    struct.pack_into(">i", bad, 8, 30)
    with pytest.raises(DecodeError, match="below the v2 minimum"):
        RecordBatch(bytes(bad))


@pytest.mark.parametrize("mutate", ["count_high", "count_low", "record_length", "key_length"])
def test_inconsistent_records_give_decode_error(mutate):
    b = bytearray(_batch(0, n=3))
    if mutate == "count_high":
        struct.pack_into(">i", b, 57, 4)
    elif mutate == "count_low":
        struct.pack_into(">i", b, 57, 2)
    elif mutate == "record_length":
        b[61] += 2  # first record's zig-zag length prefix: one byte longer
    else:
        b[61 + 1 + 1 + 1 + 1] = 0x7E  # first record's key length (after attrs, ts, offset)
    batch = RecordBatch(_fix_crc(b))
    assert batch.is_valid()
    with pytest.raises(DecodeError):
        batch.record_list()
    with pytest.raises(DecodeError):
        list(batch.iter_records_slow())
    lines = list(dump_lines(bytes(batch.buffer)))
    assert [ln["type"] for ln in lines] == ["batch", "error", "summary"]


def test_decompression_bomb_in_a_batch():
    bomb = _batch(0, n=1, codec="zstd", value=b"\0" * (32 << 20))
    assert len(bomb) < 10_000
    batch = next(iter_batches(bomb, max_decompressed=1 << 20))
    with pytest.raises(DecodeError, match="limit"):
        batch.record_list()
    lines = list(dump_lines(bomb, max_decompressed=1 << 20))
    assert lines[1]["type"] == "error" and "limit" in lines[1]["error"]
    with pytest.raises(DecodeError):
        decode_columns(bomb, max_decompressed=1 << 20)


def test_corrupt_compressed_payload():
    b = bytearray(_batch(0, n=20, codec="lz4"))
    b[61 + 7 + 1] ^= 0x7F  # the first lz4 block's size
    lines = list(dump_lines(_fix_crc(b)))
    assert lines[0]["is_valid"] and lines[1]["type"] == "error"


@pytest.mark.parametrize("cut", range(0, 120, 7))
def test_every_truncation_of_a_batch_is_clean(cut):
    data = _batch(0, n=4) + _batch(4, n=2, codec="gzip")
    data = data[:len(data) - cut]
    lines = list(dump_lines(data))
    assert lines[-1]["type"] == "summary"
    assert lines[-1]["valid_bytes"] + lines[-1]["trailing_bytes"] == len(data)


def test_memoryview_and_mmap_sources(tmp_path):
    import mmap
    data = _batch(0) + _batch(3, codec="snappy")
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(data)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        offsets = [r.offset for b in iter_batches(m) for r in b.records()]
    assert offsets == [0, 1, 2, 3, 4, 5]
    mv = memoryview(b"xx" + data)
    assert [b.position for b in iter_batches(mv, 2)] == [2, 2 + len(_batch(0))]
