"""Fuzz the parsers of the non-.log log-dir files (index, time index, txn index, producer
snapshot, checkpoints, partition.metadata, meta.properties, clean-shutdown marker) and the
internal-topic record decoders.

Only DecodeError may escape. Run: ``python fuzz/fuzz_storage_files.py -runs=2000``.
"""
from __future__ import annotations

import json
import os
import sys

import atheris

# runnable from a checkout without installing kproto
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.errors import DecodeError
    from kproto.storage.dump import DUMP_KINDS, dump_bytes
    from kproto.storage.internal import (INTERNAL_TOPICS, decode_internal_record,
                                         decode_internal_typed)

KINDS = sorted(DUMP_KINDS) + [f"internal:{t}" for t in INTERNAL_TOPICS]


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    kind = KINDS[data[0] % len(KINDS)]
    body = data[1:]
    try:
        if kind.startswith("internal:"):
            # body = key length byte, key, value (0xff length: null key)
            n = body[0] if body else 0
            key = None if n == 255 else body[1:1 + n]
            value = body[1 + (0 if n == 255 else n):] or None
            docs = [decode_internal_record(kind[9:], 0, key, value)]
            decode_internal_typed(kind[9:], key, value)
        else:
            docs = dump_bytes(kind, body, 0)
    except DecodeError:
        return
    json.dumps(docs)  # every dump must be plain JSON


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
