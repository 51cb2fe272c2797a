"""Atheris target: protocol headers decoders (see protocol_targets.py). Run: python fuzz/fuzz_protocol_headers.py -runs=20000"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

with atheris.instrument_imports():
    import protocol_targets as targets


def TestOneInput(data: bytes) -> None:
    targets.header(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
