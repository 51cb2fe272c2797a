"""What every magic has in common: a record as the decoders give it (with its headers), the
attribute bits, the 12-byte entry prefix, and the v2 record-header parser shared by the
per-record and the bulk decoders."""
from __future__ import annotations

from typing import NamedTuple

from kproto.records.compression import CODEC_NAMES
from kproto.codecs.primitives import read_varint
from kproto.errors import DecodeError

__all__ = ["Record", "Header", "CompressionAttributes", "parse_headers", "increment_sequence",
           "LOG_OVERHEAD"]

LOG_OVERHEAD = 12  # offset + length prefix common to every magic
ATTR_COMPRESSION = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


def _long(v: int) -> int:
    """Wrap to a signed 64-bit value, as Java's long arithmetic (and numpy's int64) does."""
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap at 2^31."""
    if sequence < 0:
        return -1
    return (sequence + increment) & 0x7FFFFFFF


class Header(NamedTuple):
    """A record header: UTF-8 key and a value that may be null (None)."""

    key: str
    value: bytes | None


class Record(NamedTuple):
    """One record of a batch, with absolute offset and timestamp already resolved. A tuple, so
    the bulk path can make millions of them cheaply."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = -1
    size_in_bytes: int = 0
    attributes: int = 0

    def __repr__(self) -> str:
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={_short(self.key)}, "
                f"value={_short(self.value)}, headers={list(self.headers)!r})")


def _short(v: bytes | None) -> str:
    return repr(v) if v is None or len(v) <= 32 else repr(v[:32])[:-1] + "...'"


def parse_headers(data: bytes, pos: int, count: int, end: int,
                  what: str) -> tuple[tuple[Header, ...], int]:
    """Decode ``count`` record headers from ``data[pos:end]``."""
    if count > (end - pos) // 2:  # each header takes at least two bytes
        raise DecodeError(f"header count {count} exceeds the record size", what=what, offset=pos)
    out = []
    for _ in range(count):
        klen, pos = read_varint(data, pos)
        if klen < 0 or pos + klen > end:
            raise DecodeError(f"bad header key length {klen}", what=what, offset=pos)
        # Kafka decodes header keys leniently (new String(bytes, UTF_8) replaces bad bytes).
        key = data[pos:pos + klen].decode("utf-8", "replace")
        pos += klen
        vlen, pos = read_varint(data, pos)
        if vlen < -1 or pos + vlen > end:
            raise DecodeError(f"bad header value length {vlen}", what=what, offset=pos)
        if vlen < 0:
            out.append(Header(key, None))
        else:
            out.append(Header(key, data[pos:pos + vlen]))
            pos += vlen
    return tuple(out), pos


class CompressionAttributes:
    """``compression``/``compression_name`` from an ``attributes`` field: the codec bits are the
    same in v2 batches and legacy messages."""

    __slots__ = ()  # keeps the subclasses' instances without a __dict__
    attributes: int  # a slot of each subclass

    @property
    def compression(self) -> int:
        """Codec id, 0-4 (see :mod:`kproto.records.compression`)."""
        return self.attributes & ATTR_COMPRESSION

    @property
    def compression_name(self) -> str:
        return CODEC_NAMES.get(self.compression, f"unknown({self.compression})")
