"""Request/response framing: size prefix, headers, correlation ids (sans-I/O).

A Kafka frame on the wire is ``int32 size`` + header + body. :func:`encode_request` writes the whole
frame (:func:`encode_request_parts`/:func:`encode_response_parts` as a list of buffers, records
not copied); :func:`decode_request` and :func:`decode_response` read one, by default *with* its
4-byte size prefix (the form :func:`encode_request` produces and a socket delivers); pass
``size_prefix=False`` for a frame whose prefix was already stripped. :class:`FrameBuffer` cuts a byte stream into frames.
"""
from __future__ import annotations

from typing import Any, Iterator, List, Optional, Tuple, Union

from kproto.codecs import message, request, response
from kproto.codecs.primitives import INT16, INT32, Buffer
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schemas.api_keys import ApiKey

_REQUEST_HEADER = message("RequestHeader")
_RESPONSE_HEADER = message("ResponseHeader")

RequestHeader = _REQUEST_HEADER.cls
"""Request header class: ``request_api_key``, ``request_api_version``, ``correlation_id``, ``client_id``."""
ResponseHeader = _RESPONSE_HEADER.cls
"""Response header class: ``correlation_id``."""

DEFAULT_MAX_FRAME = 100 * 1024 * 1024   # like Kafka's socket.request.max.bytes default


def request_header_version(api_key: int, api_version: int) -> int:
    """Header version of a request: 2 for flexible versions, else 1 (0 for ControlledShutdown v0)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        # ControlledShutdownRequest v0 predates the client id: Kafka gives it header v0.
        return 0
    return 2 if api_version in request(api_key).flexible_versions else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Header version of a response: 1 for flexible versions, else 0.

    ApiVersionsResponse is always read and written with header v0, whatever its version: a client
    that does not yet know the broker's versions must be able to parse the answer (KIP-511).
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if api_version in response(api_key).flexible_versions else 0


def _sized(parts: List[Any]) -> List[Any]:
    parts[0] = INT32.pack(sum(map(len, parts)))
    return parts


def encode_request_parts(header: Any, obj: Any) -> List[Any]:
    """:func:`encode_request`'s frame as a list of buffers, the size prefix first, for
    ``writelines``/``sendmsg``: ``records`` (and other bytes) values of 1 KiB or more are in it
    as they are, not copied, as Kafka's ``Send`` writes them."""
    key, ver = header.request_api_key, header.request_api_version
    codec = request(key)
    if type(obj) is not codec.cls:
        raise EncodeError(f"header says {codec.name} (API key {key}) but the body is a {type(obj).__name__}")
    parts: List[Any] = [b""]
    _REQUEST_HEADER.encode_parts(header, request_header_version(key, ver), parts)
    codec.encode_parts(obj, ver, parts)
    return _sized(parts)


def encode_request(header: Any, obj: Any) -> bytes:
    """A size-prefixed request frame; ``header.request_api_key``/``request_api_version`` pick the codec."""
    return b"".join(encode_request_parts(header, obj))


def encode_response_parts(header: Any, obj: Any, api_key: int, api_version: int) -> List[Any]:
    """:func:`encode_response`'s frame as a list of buffers, the size prefix first, for
    ``writelines``/``sendmsg`` (a zero-copy send of the records, as for requests)."""
    codec = response(api_key)
    if type(obj) is not codec.cls:
        raise EncodeError(f"API key {api_key} answers with {codec.name}, not a {type(obj).__name__}")
    parts: List[Any] = [b""]
    _RESPONSE_HEADER.encode_parts(header, response_header_version(api_key, api_version), parts)
    codec.encode_parts(obj, api_version, parts)
    return _sized(parts)


def encode_response(header: Any, obj: Any, api_key: int, api_version: int) -> bytes:
    """A size-prefixed response frame for a response of ``api_key`` at ``api_version``."""
    return b"".join(encode_response_parts(header, obj, api_key, api_version))


def _strip_size(frame: Buffer, size_prefix: bool) -> Buffer:
    if not size_prefix:
        return frame
    if len(frame) < 4:
        raise DecodeError("frame shorter than its 4-byte size prefix", what="frame", offset=0)
    size, = INT32.unpack_from(frame, 0)
    if size != len(frame) - 4:
        raise DecodeError(f"size prefix says {size} bytes but the frame holds {len(frame) - 4}",
                          what="frame", offset=0)
    return memoryview(frame)[4:] if not isinstance(frame, memoryview) else frame[4:]


def peek_request_header(frame: Buffer, *, size_prefix: bool = True) -> Tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame without decoding it.

    These three fields sit at the same place in every request header version.
    """
    base = 4 if size_prefix else 0
    if len(frame) < base + 8:
        raise DecodeError("request frame too short for a header", what="RequestHeader", offset=0)
    key, ver = INT16.unpack_from(frame, base)[0], INT16.unpack_from(frame, base + 2)[0]
    return key, ver, INT32.unpack_from(frame, base + 4)[0]


def decode_request(frame: Buffer, *, size_prefix: bool = True, lazy: bool = True) -> Tuple[Any, Any]:
    """Decode a request frame into ``(header, body)``.

    ``frame`` includes the 4-byte size prefix unless ``size_prefix=False``. ``lazy=False``
    builds the body's arrays of structs now (see :meth:`kproto.codecs.engine.MessageCodec.decode`).
    """
    data = _strip_size(frame, size_prefix)
    key, ver, _ = peek_request_header(data, size_prefix=False)
    try:
        codec = request(key)
    except KeyError:
        raise DecodeError(f"unknown API key {key}", what="RequestHeader", offset=0) from None
    if ver not in codec.valid_versions:
        raise DecodeError(f"{codec.name} has no version {ver}", what="RequestHeader", offset=2)
    header, pos = _REQUEST_HEADER.decode_from(data, 0, request_header_version(key, ver))
    return header, codec.decode(memoryview(data)[pos:], ver, lazy)


def decode_response(frame: Buffer, api_key: int, api_version: int, *, size_prefix: bool = True) -> Tuple[Any, Any]:
    """Decode a response frame to a request of ``api_key`` at ``api_version`` into ``(header, body)``.

    ``frame`` includes the 4-byte size prefix unless ``size_prefix=False``. An ApiVersions answer
    may be a v0 body (see :func:`decode_response_version`).
    """
    header, body, _ = decode_response_version(frame, api_key, api_version, size_prefix=size_prefix)
    return header, body


def decode_response_version(frame: Buffer, api_key: int, api_version: int, *,
                            size_prefix: bool = True) -> Tuple[Any, Any, int]:
    """:func:`decode_response` that also says which version the body was read at.

    That is ``api_version``, except for an ApiVersions response that does not parse at it but
    does as v0, which is then read so, as Kafka's ``ApiVersionsResponse.parse`` does: a broker
    answers a version it does not support with a v0 body and UNSUPPORTED_VERSION (KIP-511).
    """
    data = _strip_size(frame, size_prefix)
    try:
        codec = response(api_key)
    except KeyError:
        raise DecodeError(f"unknown API key {api_key}", what="ResponseHeader", offset=0) from None
    header, pos = _RESPONSE_HEADER.decode_from(data, 0, response_header_version(api_key, api_version))
    body = memoryview(data)[pos:]
    try:
        return header, codec.decode(body, api_version), api_version
    except (DecodeError, UnsupportedVersionError):  # the latter: a version newer than ours
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        try:
            return header, codec.decode(body, 0), 0
        except DecodeError:
            pass
        raise


class FrameBuffer:
    """Cut a byte stream into size-prefixed frames (sans-I/O).

    ``feed()`` bytes as they arrive; ``frames()`` yields every complete frame (without its size
    prefix). A size larger than ``max_frame`` or negative raises :class:`DecodeError`.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: Buffer) -> None:
        self._buf += data

    def __len__(self) -> int:
        return len(self._buf)

    def frames(self) -> Iterator[bytes]:
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= 4:
                size, = INT32.unpack_from(buf, pos)
                if size < 0 or size > self.max_frame:
                    raise DecodeError(f"frame size {size} out of range (max {self.max_frame})",
                                      what="frame", offset=pos)
                if len(buf) - pos - 4 < size:
                    break
                yield bytes(buf[pos + 4:pos + 4 + size])
                pos += 4 + size
        finally:
            del buf[:pos]
