"""Fuzz capture-file decoding end to end: bytes as a pcap/pcapng file, through TCP reassembly,
framing, pairing, body decoding and JSON (with the records view). Nothing may raise.

Run: ``python fuzz/fuzz_capture_file.py -runs=2000`` (seed corpus: the captures' first bytes,
e.g. ``head -c 4096 ../shared/captures/java_tansu.pcapng > corpus/java``).
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.capture import BodyDecoder, CaptureDecoder, exchange_to_json, iter_packets
    from kproto.capture.records_view import records_json


def TestOneInput(data: bytes) -> None:
    for ports in (None, [9092]):
        dec = CaptureDecoder(ports, decode=BodyDecoder())
        for ex in dec.feed_all(iter_packets(data)):
            exchange_to_json(ex, records=lambda b: records_json(b, 1 << 16))


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
