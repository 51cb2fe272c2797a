"""Atheris target: the C decoder against the generated Python decoder (differential).

First byte picks a request or response by API key, second its version, the rest is the body: both
decoders must fail alike or return equal objects at the same position.
Run: python fuzz/fuzz_protocol_c_decoder.py -runs=20000
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    import kproto
    from kproto import codecs
    from kproto.codecs.engine import _DECODE_FAULTS

CODECS = [kproto.request(k) for k in sorted(codecs.api_keys())] + \
         [kproto.response(k) for k in sorted(codecs.api_keys())]


def _outcome(fn, data):
    try:
        return fn(data, 0)
    except _DECODE_FAULTS:
        return None


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    codec = CODECS[data[0] % len(CODECS)]
    vs = codec.valid_versions
    version = vs.start + data[1] % len(vs)
    compiled = codec._get(version)
    if compiled.decode_c is None:   # built without the C decoder: nothing to compare
        return
    body = data[2:]
    c, py = _outcome(compiled.decode_c, body), _outcome(compiled.decode_py, body)
    if c != py and not (c and py and c[1] == py[1] and codec.encode(c[0], version) == codec.encode(py[0], version)):
        # (a float64 NaN is not equal to itself: such messages compare by their bytes)
        raise AssertionError(f"{codec.name}: C decoder gave {c!r}, Python decoder {py!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
