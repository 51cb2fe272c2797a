"""Atheris target: the C encoder against the generated Python encoder (differential).

First byte picks a request or response by API key, second its version, the rest is the body (the
layout of fuzz_protocol_c_decoder, so both share the messages family's seeds). A body the decoder
accepts gives an object; the C encoder must write it exactly as the Python
encoder does, whole and as parts (and both give back the decoded message). The same object with
one field (chosen by the body's last two bytes) set to an odd value (wrong type, out of range, a tuple for a list) must be written alike
by both, or declined by C: then codec.encode answers as the Python encoder does.
Run: python fuzz/fuzz_protocol_c_encoder.py -runs=20000
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    import kproto
    from kproto import codecs
    from kproto.codecs import MessageObject

CODECS = [kproto.request(k) for k in sorted(codecs.api_keys())] + \
         [kproto.response(k) for k in sorted(codecs.api_keys())]
ODD = [None, -1, 2**31, 2**63, 1.5, True, "x", "\udc80", b"ab", bytearray(b"xy"), (), [1], [None],
       memoryview(b"0123456789abcdef")]


def _python(codec, version, obj):
    parts: list = []
    try:
        codec._encode_py(codec._get(version), obj, version, parts)
        return ("ok", b"".join(parts))
    except Exception as exc:  # the reference's answer, whatever it is
        return ("fail", type(exc), str(exc))


def _c(compiled, obj):
    try:
        whole = compiled.encode_c(obj)
    except Exception:
        whole = None
    parts: list = []
    try:
        compiled.encode_parts_c(obj, parts)
    except Exception:
        if parts or whole is not None:
            raise AssertionError("encode and encode_parts disagree on failing, or parts left behind")
        return None
    if whole is None or b"".join(parts) != whole:
        raise AssertionError("encode and encode_parts disagree")
    return ("ok", whole)


def _struct_in(obj, pick: int):
    """A struct of the message (the message itself or one nested in a field)."""
    found = [obj]
    for attr in type(obj)._fields:
        v = getattr(obj, attr)
        if isinstance(v, MessageObject):
            found.append(v)
        elif isinstance(v, list) and v and isinstance(v[0], MessageObject):
            found.extend(v)
    return found[pick % len(found)]


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    codec = CODECS[data[0] % len(CODECS)]
    vs = codec.valid_versions
    version = vs.start + data[1] % len(vs)
    compiled = codec._get(version)
    if compiled.encode_c is None:   # built without the C module: nothing to compare
        return
    try:
        obj, _ = compiled.decode_py(data[2:], 0)
    except Exception:   # not a message: nothing to encode
        return
    c = _c(compiled, obj)
    if c is None or _python(codec, version, obj) != c:
        raise AssertionError(f"{codec.name} v{version}: C encoder gave {c!r}")
    target = _struct_in(obj, data[-1])
    fields = type(target)._fields
    if fields:
        setattr(target, fields[data[-2] % len(fields)], ODD[data[-2] // len(fields) % len(ODD)])
    c, py = _c(compiled, obj), _python(codec, version, obj)
    if c is not None and c != py:
        raise AssertionError(f"{codec.name} v{version}: C wrote {c!r}, Python {py!r}")
    try:
        public = ("ok", codec.encode(obj, version))
    except Exception as exc:
        public = ("fail", type(exc), str(exc))
    if public != py:
        raise AssertionError(f"{codec.name} v{version}: encode gave {public!r}, Python {py!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
