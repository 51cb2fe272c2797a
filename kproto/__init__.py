"""kproto: a Kafka protocol toolkit.

Schemas for every Kafka message (``kproto.schemas``), byte-exact codecs generated from them
(``kproto.codecs``), and on top of those: record batches, segment storage, traffic capture,
fetch sessions and client pieces.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kproto.errors import DecodeError, EncodeError, KprotoError, UnsupportedVersionError

if TYPE_CHECKING:  # type checkers see the real names; at run time they load on first use
    from kproto.codecs import Uuid, message, request, response
    from kproto.framing import (RequestHeader, ResponseHeader, decode_request, decode_response,
                                encode_request, encode_response, request_header_version,
                                response_header_version)
    from kproto.problems import Problem, Problems

__version__ = "0.1.0"

__all__ = [
    "DecodeError", "EncodeError", "KprotoError", "UnsupportedVersionError", "Problem", "Problems",
    "message", "request", "response", "Uuid",
    "RequestHeader", "ResponseHeader",
    "encode_request", "decode_request", "encode_response", "decode_response",
    "request_header_version", "response_header_version",
]

_LAZY = {
    "message": "kproto.codecs",
    "request": "kproto.codecs",
    "response": "kproto.codecs",
    "Uuid": "kproto.codecs",
    "RequestHeader": "kproto.framing",
    "ResponseHeader": "kproto.framing",
    "encode_request": "kproto.framing",
    "decode_request": "kproto.framing",
    "encode_response": "kproto.framing",
    "decode_response": "kproto.framing",
    "request_header_version": "kproto.framing",
    "response_header_version": "kproto.framing",
    "Problem": "kproto.problems",
    "Problems": "kproto.problems",
}


def __getattr__(name: str) -> object:  # PEP 562: keep ``import kproto`` cheap
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kproto' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
