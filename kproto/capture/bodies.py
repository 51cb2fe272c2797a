"""Bridge from captured frames to kproto's message codec and framing.

Kept in one place so the rest of the capture package deals only in frame bytes, API keys and
versions.
"""
from __future__ import annotations

import functools
import struct
from typing import Any, Optional

__all__ = ["api_name", "api_versions", "decode_request", "decode_response", "read_request_header",
           "response_error_codes"]

_I16 = struct.Struct(">h")


@functools.lru_cache(maxsize=1024)
def api_versions(api_key: int) -> Optional[range]:
    """Valid request versions of an API key (Kafka 3.9's); None if the key is unknown."""
    import kproto

    try:
        return kproto.request(api_key).valid_versions
    except KeyError:
        return None


def api_name(api_key: Optional[int]) -> Optional[str]:
    """Kafka's name of an API key (``"Fetch"``), or None."""
    return None if api_key is None else _api_names().get(api_key)


@functools.lru_cache(maxsize=1)
def _api_names() -> dict[int, str]:
    from kproto.codecs import api_keys

    return api_keys()


def read_request_header(data: bytes) -> tuple[int, int, int, Optional[str]]:
    """(api_key, api_version, correlation_id, client_id) of a request frame without size prefix.

    These fields sit at the same place in every header version, so the body need not be
    decoded. client_id is None when absent or cut. Raises DecodeError if ``data`` is too short.
    """
    from kproto.framing import peek_request_header

    key, ver, corr = peek_request_header(data, size_prefix=False)
    n = _I16.unpack_from(data, 8)[0] if len(data) >= 10 else -1
    if n < 0 or 10 + n > len(data):
        return key, ver, corr, None
    return key, ver, corr, bytes(data[10:10 + n]).decode("utf-8", "replace")


def decode_request(data: bytes) -> tuple[Any, Any]:
    """(header, body) of a request frame without its size prefix. Raises DecodeError."""
    from kproto.framing import decode_request

    return decode_request(data, size_prefix=False)


def decode_response(data: bytes, api_key: int, api_version: int) -> tuple[Any, Any]:
    """(header, body) of a response frame (no size prefix), by its request's API key and version."""
    from kproto.framing import decode_response

    return decode_response(data, api_key, api_version, size_prefix=False)


def response_error_codes(obj: Any, out: Optional[list[int]] = None) -> list[int]:
    """Every non-zero ``error_code`` (or ``*_error_code``) in a message object, in field order."""
    if out is None:
        out = []
    for name in getattr(obj, "_fields", ()):
        v = getattr(obj, name)
        if isinstance(v, list):
            if v and hasattr(v[0], "_fields"):
                for item in v:
                    response_error_codes(item, out)
        elif hasattr(v, "_fields"):
            response_error_codes(v, out)
        elif v and (name == "error_code" or name.endswith("_error_code")) and isinstance(v, int):
            out.append(v)
    return out
