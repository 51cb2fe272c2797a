"""Bridge from captured frames to kproto's message codec and framing.

Kept in one place so the rest of the capture package deals only in frame bytes, API keys and
versions.
"""
from __future__ import annotations

import functools
import struct
from typing import Any, Callable, NamedTuple, Optional

from kproto.capture.walk import Leaf, walker

__all__ = ["BestEffort", "api_name", "api_versions", "best_effort_version", "decode_request",
           "decode_request_as", "decode_response_version", "decode_response_as", "read_request_header",
           "response_error_codes", "schemas_release"]

_I16 = struct.Struct(">h")
_REQUEST_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id: in every version


@functools.lru_cache(maxsize=1024)
def api_versions(api_key: int) -> Optional[range]:
    """Valid request versions of an API key (every version of the schemas, up to the newest
    release's and down to the ones 4.0 dropped); None if the key is unknown."""
    import kproto.codecs as codecs

    try:
        return codecs.request(api_key).valid_versions
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
    if len(data) < 8:  # the framing's error
        from kproto.framing import peek_request_header

        peek_request_header(data, size_prefix=False)
    key, ver, corr = _REQUEST_HEAD.unpack_from(data, 0)
    n = _I16.unpack_from(data, 8)[0] if len(data) >= 10 else -1
    if n < 0 or 10 + n > len(data):
        return key, ver, corr, None
    return key, ver, corr, bytes(data[10:10 + n]).decode("utf-8", "replace")


def decode_request(data: bytes) -> tuple[Any, Any]:
    """(header, body) of a request frame without its size prefix. Raises DecodeError."""
    from kproto.framing import decode_request

    return decode_request(data, size_prefix=False)


def decode_response_version(data: bytes, api_key: int, api_version: int) -> tuple[Any, Any, int]:
    """(header, body, version read) of a response frame (no size prefix), by its request's API
    key and version: an ApiVersions answer may be a v0 body (KIP-511)."""
    from kproto.framing import decode_response_version

    return decode_response_version(data, api_key, api_version, size_prefix=False)


def schemas_release() -> str:
    """The newest Kafka release kproto's schemas come from (``"4.4.0"``)."""
    from kproto.codecs import KAFKA_VERSION

    return KAFKA_VERSION


@functools.lru_cache(maxsize=4096)
def _header_versions(api_key: int, version: int) -> tuple[int, int]:
    """(request, response) header versions of any version, known to the schemas or newer.

    Kafka's flexibleVersions are open-ended ("9+"): a version newer than the schemas is flexible
    when the spec's range says so. The codec's ``flexible_versions`` are cut at the highest valid
    version, so the spec's range is asked directly; known versions go through kproto's framing.
    """
    import kproto.codecs as codecs
    from kproto.framing import request_header_version, response_header_version
    from kproto.schemas.api_keys import ApiKey

    req, resp = codecs.request(api_key), codecs.response(api_key)
    if version in req.valid_versions:
        return request_header_version(api_key, version), response_header_version(api_key, version)
    rh = 2 if version in req.schema.flexible_range else 1
    sh = 0 if api_key == ApiKey.API_VERSIONS else (1 if version in resp.schema.flexible_range else 0)
    return rh, sh


@functools.lru_cache(maxsize=1024)
def best_effort_version(api_key: int, api_version: int) -> Optional[int]:
    """The version to decode a newer-than-the-schemas ``api_version`` with, or None.

    That is the highest version the schemas define, provided ``api_version`` is above it and both
    use the same request and response header versions (the bodies' layouts are then guessed to
    share their known prefix; the header must be read correctly for that guess to be worth trying).
    """
    versions = api_versions(api_key)
    if versions is None or not len(versions) or api_version <= versions[-1]:
        return None
    top = versions[-1]
    return top if _header_versions(api_key, api_version) == _header_versions(api_key, top) else None


class BestEffort(NamedTuple):
    """A frame decoded with an older version's layout: the header, the body and what was left."""

    header: Any
    body: Any
    body_start: int   # offset of the body in the frame (without size prefix)
    unread: int       # bytes after the part of the body the older layout explains

    def tail(self, data: Any) -> bytes:
        """The bytes not understood, from the frame they were decoded from."""
        return bytes(data[len(data) - self.unread:]) if self.unread else b""


@functools.lru_cache(maxsize=None)
def _header_codec(kind: str) -> Any:
    import kproto.codecs as codecs

    return codecs.message(kind)


def decode_request_as(data: Any, api_key: int, api_version: int, version: int) -> BestEffort:
    """Decode a request frame (no size prefix) of ``api_key`` at ``api_version`` (as its header
    says) whose body is read with ``version``'s layout.

    The header is read as the frame's own version wants it. Unlike :func:`decode_request`,
    trailing bytes are not an error: they are counted in ``unread``. Raises DecodeError.
    """
    header_from, header_version, body_from = _readers(api_key, api_version, True)
    header, pos = header_from(data, 0, header_version)
    body = memoryview(data)[pos:]
    obj, end = body_from(body, 0, version)
    return BestEffort(header, obj, pos, len(body) - end)


def decode_response_as(data: Any, api_key: int, api_version: int, version: int) -> BestEffort:
    """Decode a response frame (no size prefix) to a request of ``api_key`` at ``api_version``,
    its body read with ``version``'s layout; trailing bytes are counted. Raises DecodeError."""
    header_from, header_version, body_from = _readers(api_key, api_version, False)
    header, pos = header_from(data, 0, header_version)
    body = memoryview(data)[pos:]
    obj, end = body_from(body, 0, version)
    return BestEffort(header, obj, pos, len(body) - end)


_Reader = Callable[[Any, int, int], tuple[Any, int]]  # a codec's decode_from


@functools.lru_cache(maxsize=4096)
def _readers(api_key: int, api_version: int, request: bool) -> tuple[_Reader, int, _Reader]:
    """(header's decode_from, header version, body's decode_from) of a request
    (``request``) or response frame of ``api_key`` at ``api_version``: looked up once, not
    per frame."""
    import kproto.codecs as codecs

    header = _header_codec("RequestHeader" if request else "ResponseHeader")
    body = codecs.request(api_key) if request else codecs.response(api_key)
    # bodies are built whole: every reader of an exchange (the JSON lines, the tables) reads it all
    return (header.decode_from, _header_versions(api_key, api_version)[0 if request else 1],
            functools.partial(body.decode_from, lazy=False))


def response_error_codes(obj: Any, out: Optional[list[int]] = None) -> list[int]:
    """Every non-zero ``error_code`` (or ``*_error_code``) in a message object, in field order."""
    if out is None:
        out = []
    walker(type(obj), _ERROR_CODES)(obj, out)
    return out


def _is_error_code(name: str) -> bool:
    return name == "error_code" or name.endswith("_error_code")


def _walk_error_codes(obj: Any, out: list[int]) -> None:
    """The generic walk: every field of ``obj`` (objects with ``_fields`` looked into)."""
    for name in getattr(obj, "_fields", ()):
        v = getattr(obj, name)
        if isinstance(v, list):
            if v and hasattr(v[0], "_fields"):
                for item in v:
                    _walk_error_codes(item, out)
        elif hasattr(v, "_fields"):
            _walk_error_codes(v, out)
        elif v and _is_error_code(name) and isinstance(v, int):
            out.append(v)


_ERROR_CODES = Leaf(lambda f: not f.is_array and _is_error_code(f.attr),
                    "if v and isinstance(v, int):\n    out.append(v)", _walk_error_codes)
