"""Fuzz segment reading: batch framing with damage reports and index resync, the Arrow read
path in both isolations, index parsing/lookup and index rebuild, over arbitrary segment bytes.

Only DecodeError may escape, and only from the strict parsers; the reader itself must turn any
damage into reports. Run: ``python fuzz/fuzz_storage_log.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

# runnable from a checkout without installing kproto
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.problems import Problems
    from kproto.storage.indexes import AbortedTxn, OffsetIndex
    from kproto.storage.partition import rebuild_indexes
    from kproto.storage.reader import ReadOptions, Split, read_buffer


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    flags = fdp.ConsumeIntInRange(0, 255)
    index_bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    segment = fdp.ConsumeBytes(fdp.remaining_bytes())
    idx = OffsetIndex.parse(index_bytes, 0)
    idx.lookup(flags * 7)
    resync = tuple(int(p) for p in idx.positions if 0 < p < len(segment))
    split = Split("fuzz.log", "t", 0, 0, 0, len(segment), tuple(sorted(set(resync))),
                  (AbortedTxn(1, 0, 10, 0),), 5 if flags & 4 else None)
    opts = ReadOptions(isolation="read_committed" if flags & 1 else "read_uncommitted",
                       include_control=bool(flags & 2), verify_crc=bool(flags & 8),
                       start_offset=1 if flags & 16 else None)
    damage = Problems()
    rows = sum(rb.num_rows for rb in read_buffer(segment, split, opts, problems=damage,
                                                  chunk_bytes=64))
    assert rows >= 0 and all(d.bytes_skipped >= 0 for d in damage)
    if flags & 32:
        rebuild_indexes(segment, 0)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
