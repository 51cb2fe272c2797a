"""Fuzz the record-batch reader: framing, v2 and legacy batches, every codec, control records.

Inputs are either raw bytes or a valid seed batch (one per magic x codec) with fuzz bytes
written over it. Anything but :class:`kproto.DecodeError` escaping is a bug, and so is the
bulk (columnar) decoder disagreeing with the field-by-field reference decoder.

Run: ``python fuzz/fuzz_records.py -runs=2000`` (atheris), or import ``TestOneInput``.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import atheris
except ImportError:  # pragma: no cover - the test suite drives TestOneInput without atheris
    atheris = None

if atheris is not None:
    with atheris.instrument_imports():
        from kproto.errors import DecodeError, EncodeError
        from kproto.problems import Problems
        from kproto.records import (LegacyMessageBuilder, RecordBatch, RecordBatchBuilder,
                                    iter_batches)
        from kproto.records.builder import _speedups, encode_record
        from kproto.records.columns import record_tuples
        from kproto.records.dump import dump_lines
else:
    from kproto.errors import DecodeError, EncodeError
    from kproto.problems import Problems
    from kproto.records import LegacyMessageBuilder, RecordBatch, RecordBatchBuilder, iter_batches
    from kproto.records.builder import _speedups, encode_record
    from kproto.records.columns import record_tuples
    from kproto.records.dump import dump_lines

LIMIT = 1 << 20  # decompression cap, keeps bombs cheap


def _seeds() -> list[bytes]:
    seeds = []
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        b = RecordBatchBuilder(compression=codec, base_offset=5, producer_id=7, producer_epoch=1,
                               base_sequence=3)
        b.append(1000, b"k", b"value" * 3, [("h", b"x"), ("n", None)])
        b.append(1003, None, b"", [])
        b.append(999, b"key2", None)
        seeds.append(b.build())
        if codec != "zstd":
            for magic in (0, 1):
                lb = LegacyMessageBuilder(magic, compression=codec, base_offset=9)
                lb.append(1000, b"k", b"v" * 20)
                lb.append(1001, None, b"w")
                seeds.append(lb.build())
    return seeds


SEEDS = _seeds()


def _same_writing(batch: object, rows: list) -> None:
    """The records written again: the C writer (the producer's) agrees with the reference,
    bytes or failure."""
    base_o, base_t = rows[0][0], rows[0][1]
    try:
        want: object = b"".join(encode_record(o - base_o, t - base_t, k, v, h) for o, t, k, v, h in rows)
    except (EncodeError, UnicodeError):
        want = "fails"
    try:
        got: object = _speedups.encode_records(rows, base_o, base_t)
    except (ValueError, OverflowError):  # UnicodeError is a ValueError
        got = "fails"
    if got != want:
        raise AssertionError(f"encode_records and encode_record disagree on {batch!r}")


def check(buf: bytes) -> None:
    """Read everything in ``buf`` every way kproto can; only DecodeError may escape."""
    found = Problems()
    for batch in iter_batches(buf, max_decompressed=LIMIT, problems=found):
        batch.is_valid()
        try:
            recs = batch.record_list()
        except DecodeError:
            recs = None
        if isinstance(batch, RecordBatch):
            try:
                ref = list(batch.iter_records_slow())
            except DecodeError:
                ref = None
            if (recs is None) != (ref is None) or (recs is not None and recs != ref):
                raise AssertionError(f"bulk and reference decoders disagree on {batch!r}")
            if recs is not None:
                cols = batch.columns()
                cols.to_arrow()
                # a client's record tuples (built in C when the accelerator is there)
                got = [tuple(r[2:6]) + (tuple(r[6]),) for r in record_tuples(cols, tuple, "t", 0)]
                if got != [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in ref]:
                    raise AssertionError(f"record_tuples and the reference disagree on {batch!r}")
                if ref and _speedups is not None:
                    _same_writing(batch, [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                                          for r in ref])
    for _ in dump_lines(buf, max_decompressed=LIMIT):
        pass


def TestOneInput(data: bytes) -> None:
    if len(data) < 2 or data[0] % 3 == 0:
        check(data[1:])
        return
    seed = bytearray(SEEDS[data[1] % len(SEEDS)])
    # The rest is (position, byte) pairs written over the seed.
    for i in range(2, len(data) - 1, 2):
        seed[data[i] % len(seed)] = data[i + 1]
    check(bytes(seed))


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
