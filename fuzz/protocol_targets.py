"""Shared body of the protocol fuzz targets (fuzz_protocol_*.py): pick a codec from the first bytes,
decode the rest; anything but kproto.DecodeError escaping, or a decoded message that does not survive
a re-encode/decode round trip, is a bug."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kproto  # noqa: E402
from kproto import codecs  # noqa: E402

API_KEYS = sorted(codecs.api_keys())
HEADERS = [("RequestHeader", v) for v in range(3)] + [("ResponseHeader", v) for v in range(2)]


def check_round_trip(codec, data: bytes, version: int) -> None:
    try:
        obj = codec.decode(data, version)
    except kproto.DecodeError:
        return
    enc = codec.encode(obj, version)
    again = codec.decode(enc, version)
    # Unknown tagged fields are kept in wire order but written in tag order (Kafka's writer
    # refuses them unordered; its reader, like ours, takes any order): a message read with
    # them out of order comes back sorted, everything else unchanged.
    if again != obj and (codec.to_json(again, version) != codec.to_json(obj, version)
                         or codec.encode(again, version) != enc):
        raise AssertionError(f"{codec.name} v{version}: round trip changed the message")


def body(kind: str, data: bytes) -> None:
    """First byte picks the API key, second the version; the rest is the body."""
    if len(data) < 2:
        return
    codec = (kproto.request if kind == "request" else kproto.response)(API_KEYS[data[0] % len(API_KEYS)])
    vs = codec.valid_versions
    check_round_trip(codec, data[2:], vs.start + data[1] % len(vs))


def request_frame(data: bytes) -> None:
    """A whole request frame without its size prefix: the header picks the codec."""
    try:
        kproto.decode_request(data, size_prefix=False)
    except kproto.DecodeError:
        pass


def header(data: bytes) -> None:
    if not data:
        return
    name, v = HEADERS[data[0] % len(HEADERS)]
    try:
        kproto.message(name).decode_from(data[1:], 0, v)
    except kproto.DecodeError:
        pass
