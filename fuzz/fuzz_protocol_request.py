"""Atheris target: protocol request decoders (see protocol_targets.py). Run: python fuzz/fuzz_protocol_request.py -runs=20000"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import protocol_targets as targets


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"\x00":
        targets.request_frame(data[1:])
    else:
        targets.body("request", data[1:])


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
