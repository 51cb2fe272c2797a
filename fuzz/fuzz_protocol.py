"""Fuzz the protocol decoders: request frames, response bodies of any API key/version, headers.

Anything but :class:`kproto.DecodeError` escaping a decoder is a bug; so is a decoded message that
does not survive a re-encode/decode round trip.

Run: ``python fuzz/fuzz_protocol.py -runs=20000`` (atheris), or import ``TestOneInput``.
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
        import kproto
        from kproto import codecs
else:
    import kproto
    from kproto import codecs

API_KEYS = sorted(codecs.api_keys())
HEADERS = [("RequestHeader", v) for v in range(3)] + [("ResponseHeader", v) for v in range(2)]


def _check(codec, data: bytes, version: int) -> None:
    try:
        obj = codec.decode(data, version)
    except kproto.DecodeError:
        return
    again = codec.encode(obj, version)
    if codec.decode(again, version) != obj:
        raise AssertionError(f"{codec.name} v{version}: round trip changed the message")


def TestOneInput(data: bytes) -> None:
    if len(data) < 3:
        return
    mode, sel, ver = data[0] % 4, data[1], data[2]
    rest = data[3:]
    if mode == 0:      # a whole request frame, header picks the codec
        try:
            kproto.decode_request(rest, size_prefix=False)
        except kproto.DecodeError:
            pass
    elif mode == 1:    # a response body
        codec = kproto.response(API_KEYS[sel % len(API_KEYS)])
        vs = codec.valid_versions
        _check(codec, rest, vs.start + ver % len(vs))
    elif mode == 2:    # a request body
        codec = kproto.request(API_KEYS[sel % len(API_KEYS)])
        vs = codec.valid_versions
        _check(codec, rest, vs.start + ver % len(vs))
    else:              # a header
        name, v = HEADERS[sel % len(HEADERS)]
        codec = kproto.message(name)
        try:
            codec.decode_from(rest, 0, v)
        except kproto.DecodeError:
            pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
