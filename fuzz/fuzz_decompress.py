"""Fuzz each decompressor (gzip, snappy raw and xerial, lz4 frame and its legacy variant, zstd).

Garbage must give :class:`kproto.DecodeError` (never another exception, never more than the
cap of output); and compress -> decompress must give the input back.

Run: ``python fuzz/fuzz_decompress.py -runs=2000`` (atheris), or import ``TestOneInput``.
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
        from kproto.records.compression import compress, decompress
        from kproto.errors import DecodeError
else:
    from kproto.records.compression import compress, decompress
    from kproto.errors import DecodeError

LIMIT = 1 << 16
# Valid frames to start mutations from, so the fuzzer gets past the magic numbers quickly.
PREFIXES = [compress(c, b"seed " * 40, legacy_lz4=legacy)
            for c in (1, 2, 3, 4) for legacy in ((False, True) if c == 3 else (False,))]


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    codec = 1 + data[0] % 4
    legacy = bool(data[1] & 1)
    body = data[2:]
    if data[1] & 2:  # mutate a valid frame rather than start from nothing
        frame = bytearray(PREFIXES[data[0] % len(PREFIXES)])
        for i in range(0, len(body) - 1, 2):
            frame[body[i] % len(frame)] = body[i + 1]
        body = bytes(frame)
    try:
        out = decompress(codec, body, max_size=LIMIT, legacy_lz4=legacy)
    except DecodeError:
        pass
    else:
        if len(out) > LIMIT:
            raise AssertionError(f"codec {codec} returned {len(out)} bytes past the cap")
    if decompress(codec, compress(codec, data, legacy_lz4=legacy), legacy_lz4=legacy) != data:
        raise AssertionError(f"codec {codec} round trip changed the data")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
