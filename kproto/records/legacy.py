"""Legacy message sets, magic 0 and 1 (``LegacyRecord`` / ``AbstractLegacyRecordBatch``).

An entry is ``offset int64 | size int32 | crc uint32 | magic int8 | attributes int8 |
[timestamp int64, magic 1] | key bytes | value bytes`` (int32 length, -1 = null); the CRC-32
covers magic..end. A compressed entry (a "wrapper") holds a whole message set, compressed, as
its value. Magic 1 inner offsets are relative (0..n-1) and the wrapper's offset is the absolute
offset of the last inner message; magic 0 inner offsets are absolute.
"""
from __future__ import annotations

import struct
import zlib
from typing import Iterator, NamedTuple

from kproto.records.compression import DEFAULT_MAX_SIZE, DecompressionBudget, decompress
from kproto.errors import DecodeError
from kproto.records.record import LOG_OVERHEAD, CompressionAttributes

__all__ = ["LegacyMessage", "LegacyRecord", "LEGACY_TIMESTAMP_TYPES"]

_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TS = struct.Struct(">q")
_I32 = struct.Struct(">i")
MIN_SIZE = {0: 14, 1: 22}  # LegacyRecord.RECORD_OVERHEAD_V0 / _V1 (crc..value length)
ATTR_TIMESTAMP_TYPE = 0x08
LEGACY_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NoTimestampType")


class LegacyRecord(NamedTuple):
    """A record read from a legacy message, with that message's own checksum and validity;
    the same fields as :class:`~kproto.records.batch.Record` plus ``checksum``/``crc_valid``."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    sequence: int = -1
    size_in_bytes: int = 0
    attributes: int = 0
    checksum: int = 0
    crc_valid: bool = True


class LegacyMessage(CompressionAttributes):
    """One magic 0/1 log entry: a plain message or a compressed wrapper. Lazy like
    :class:`~kproto.records.batch.RecordBatch`: the value is decompressed on first use."""

    __slots__ = ("buffer", "position", "offset", "crc", "magic", "attributes", "timestamp",
                 "key", "value", "max_decompressed", "budget", "_inner")

    def __init__(self, buffer: bytes | memoryview, position: int = 0, *,
                 max_decompressed: int = DEFAULT_MAX_SIZE,
                 budget: DecompressionBudget | None = None) -> None:
        mv = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        avail = len(mv) - position
        if avail < LOG_OVERHEAD + 6:
            raise DecodeError(f"legacy message needs {LOG_OVERHEAD + 6} bytes, {avail} left",
                              what="LegacyMessage", offset=position)
        self.offset, size, self.crc, self.magic, self.attributes = _PREFIX.unpack_from(mv, position)
        if self.magic not in MIN_SIZE:
            raise DecodeError(f"magic {self.magic} is not a legacy message", what="LegacyMessage",
                              offset=position + 16)
        if size < MIN_SIZE[self.magic]:
            raise DecodeError(f"message size {size} is below the magic {self.magic} minimum",
                              what="LegacyMessage", offset=position + 8)
        end = LOG_OVERHEAD + size
        if end > avail:
            raise DecodeError(f"message of {end} bytes runs past the end ({avail} left)",
                              what="LegacyMessage", offset=position + 8)
        self.buffer = mv[position:position + end]
        self.position = position
        self.max_decompressed = max_decompressed
        self.budget = budget
        self._inner: list[LegacyRecord] | None = None
        pos = 18
        if self.magic == 1:
            self.timestamp = _TS.unpack_from(self.buffer, pos)[0]
            pos += 8
        else:
            self.timestamp = -1
        self.key, pos = self._bytes(pos, end)
        self.value, pos = self._bytes(pos, end)
        if pos != end:
            raise DecodeError(f"{end - pos} bytes left over inside the message",
                              what="LegacyMessage", offset=position + pos)

    def _bytes(self, pos: int, end: int) -> tuple[memoryview | None, int]:
        if pos + 4 > end:
            raise DecodeError("truncated length field", what="LegacyMessage",
                              offset=self.position + pos)
        n = _I32.unpack_from(self.buffer, pos)[0]
        pos += 4
        if n < 0:
            if n != -1:
                raise DecodeError(f"bad length {n}", what="LegacyMessage",
                                  offset=self.position + pos)
            return None, pos
        if pos + n > end:
            raise DecodeError(f"length {n} runs past the message", what="LegacyMessage",
                              offset=self.position + pos - 4)
        return self.buffer[pos:pos + n], pos + n

    # -------------------------------------------------------------------------------- header
    @property
    def size_in_bytes(self) -> int:
        return len(self.buffer)

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime, 2 none (magic 0)."""
        if self.magic == 0:
            return 2
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def timestamp_type_name(self) -> str:
        return LEGACY_TIMESTAMP_TYPES[self.timestamp_type]

    @property
    def last_offset(self) -> int:
        """The entry's offset field (a wrapper carries its last inner offset)."""
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """First inner absolute offset (decompresses a wrapper)."""
        if self.compression == 0:
            return self.offset
        inner = self.record_list()
        return inner[0].offset

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def compute_crc(self) -> int:
        return zlib.crc32(self.buffer[16:])

    # ------------------------------------------------------------------------------- records
    def records(self) -> Iterator[LegacyRecord]:
        """Deep iteration: the message itself, or the messages inside a compressed wrapper."""
        return iter(self.record_list())

    __iter__ = records

    def record_list(self) -> list[LegacyRecord]:
        if self._inner is None:
            if self.compression == 0:
                self._inner = [self._as_record(self.offset, self.timestamp)]
            else:
                self._inner = self._deep()
        return self._inner

    def _as_record(self, offset: int, timestamp: int) -> LegacyRecord:
        return LegacyRecord(offset, timestamp, _b(self.key), _b(self.value), (), -1,
                            len(self.buffer), self.attributes, self.crc, self.is_valid())

    def _deep(self) -> list[LegacyRecord]:
        codec = self.compression
        if codec > 3 or self.value is None:
            reason = (f"unsupported codec id {codec} for magic {self.magic}" if codec > 3
                      else "compressed wrapper with a null value")
            raise DecodeError(reason, what="LegacyMessage", offset=self.position)
        try:
            if self.budget is None:
                self.budget = DecompressionBudget()
            data = decompress(codec, self.value, max_size=self.max_decompressed,
                              legacy_lz4=self.magic == 0, budget=self.budget)
        except DecodeError as e:
            e.offset = self.position
            raise
        inner: list[LegacyMessage] = []
        pos = 0
        while pos < len(data):
            if len(data) - pos < LOG_OVERHEAD:
                break  # Kafka's stream reader stops at a partial entry header
            m = LegacyMessage(data, pos, max_decompressed=self.max_decompressed,
                              budget=self.budget)
            if m.magic != self.magic:
                raise DecodeError(f"inner message magic {m.magic} does not match wrapper magic "
                                  f"{self.magic}", what="LegacyMessage", offset=self.position)
            inner.append(m)
            pos += m.size_in_bytes
        if not inner:
            raise DecodeError("compressed wrapper with no inner messages", what="LegacyMessage",
                              offset=self.position)
        log_append = self.timestamp_type == 1
        if self.magic == 0:
            return [m._as_record(m.offset, -1) for m in inner]
        base = self.offset - inner[-1].offset
        lo, hi = min(m.offset for m in inner), max(m.offset for m in inner)
        if not (-2**63 <= base + lo and base + hi < 2**63):
            # Java's long arithmetic would wrap: such offsets are not data
            raise DecodeError(f"inner offsets {lo}..{hi} from wrapper offset {self.offset} pass "
                              "the int64 range", what="LegacyMessage", offset=self.position)
        return [m._as_record(base + m.offset, self.timestamp if log_append else m.timestamp)
                for m in inner]

    def __repr__(self) -> str:
        return (f"LegacyMessage(magic={self.magic}, offset={self.offset}, "
                f"compression={self.compression_name}, position={self.position}, "
                f"size={self.size_in_bytes})")


def _b(v: memoryview | None) -> bytes | None:
    return None if v is None else v.tobytes()
