"""Wire primitives shared by every codec: varints, the Uuid type, precompiled structs."""
from __future__ import annotations

import base64
import binascii
import struct
import uuid as _uuid
from typing import Tuple, Union

from kproto.errors import DecodeError, EncodeError

Buffer = Union[bytes, bytearray, memoryview]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
#: Java's Long.MAX_VALUE: Kafka's "no limit" for offsets, timestamps and lags
INT64_MAX = 2**63 - 1

_URLSAFE = bytes.maketrans(b"+/", b"-_")


class Uuid(bytes):
    """A Kafka UUID: 16 bytes, shown as Kafka shows it (URL-safe base64, no padding)."""

    __slots__ = ()
    ZERO: "Uuid"

    def __new__(cls, value: Union[bytes, str, _uuid.UUID, "Uuid"] = b"\0" * 16) -> "Uuid":
        if isinstance(value, str):
            try:
                raw = base64.urlsafe_b64decode(value + "==")
            except (ValueError, TypeError) as exc:
                raise ValueError(f"invalid Kafka Uuid string {value!r}") from exc
            value = raw
        elif isinstance(value, _uuid.UUID):
            value = value.bytes
        if len(value) != 16:
            raise ValueError(f"a Uuid is 16 bytes, not {len(value)}")
        return bytes.__new__(cls, value)

    def __str__(self) -> str:
        # base64.urlsafe_b64encode without padding, in three C calls (topic ids are shown
        # for every topic of a capture's Metadata and Fetch bodies)
        text = binascii.b2a_base64(self, newline=False).rstrip(b"=")
        return text.translate(_URLSAFE).decode("ascii")

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"

    @property
    def uuid(self) -> _uuid.UUID:
        """The same 16 bytes as a standard :class:`uuid.UUID`."""
        return _uuid.UUID(bytes=bytes(self))


Uuid.ZERO = Uuid(b"\0" * 16)


def read_uvarint(buf: Buffer, pos: int, max_bytes: int = 5) -> Tuple[int, int]:
    """Read an unsigned varint at ``pos`` (at most ``max_bytes``: 5 for 32 bits, 10 for a varlong);
    return (value, new pos)."""
    result = 0
    shift = 0
    n = len(buf)
    limit = 7 * (max_bytes - 1)
    while True:
        if pos >= n:
            raise DecodeError("varint runs past the end of the data", offset=pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > limit:
            raise DecodeError(f"varint longer than {max_bytes} bytes", offset=pos)


def read_uvarlong(buf: Buffer, pos: int) -> Tuple[int, int]:
    """Read an unsigned varlong (at most 10 bytes, 64 bits)."""
    return read_uvarint(buf, pos, 10)


def read_varint(buf: Buffer, pos: int) -> Tuple[int, int]:
    """Read a zig-zag signed varint (32 bits)."""
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: Buffer, pos: int) -> Tuple[int, int]:
    """Read a zig-zag signed varlong (64 bits)."""
    v, pos = read_uvarlong(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


_UV_CACHE = [bytes([i]) for i in range(128)]


def uvarint(value: int) -> bytes:
    """Encode an unsigned varint."""
    if 0 <= value < 128:
        return _UV_CACHE[value]
    if value < 0 or value > 0xFFFFFFFFFFFFFFFF:
        raise EncodeError(f"{value} does not fit an unsigned varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Encode a zig-zag signed varint/varlong."""
    if -_VARINT_SMALL <= value < _VARINT_SMALL:  # lengths and deltas: one or two bytes
        return _VARINT_CACHE[value + _VARINT_SMALL]
    return uvarint((value << 1) ^ (value >> 63))


_VARINT_SMALL = 8192
_VARINT_CACHE = [uvarint((v << 1) ^ (v >> 63)) for v in range(-_VARINT_SMALL, _VARINT_SMALL)]
