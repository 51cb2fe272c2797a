"""Magic v2 record batches (``DefaultRecordBatch``): lazy header access, records on demand.

Layout (big-endian), the 61-byte header then the records section::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
    crc uint32 (CRC-32C of attributes..end) | attributes int16 | lastOffsetDelta int32
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    baseSequence int32 | recordsCount int32 | records...

Each record is zig-zag varint framed: length, attributes int8, timestampDelta varlong,
offsetDelta varint, key (varint length, -1 = null), value (same), header count and headers
(varint key length + UTF-8 key, varint value length + value, -1 = null).
"""
from __future__ import annotations

import struct
from typing import Iterator

from crc32c import crc32c

from kproto.records.compression import DEFAULT_MAX_SIZE, DecompressionBudget, decompress
from kproto.codecs.primitives import read_varint, read_varlong
from kproto.errors import DecodeError
from kproto.records.record import (ATTR_CONTROL, ATTR_DELETE_HORIZON,
                                   ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, LOG_OVERHEAD,
                                   CompressionAttributes, Header, Record, _long,
                                   increment_sequence, parse_headers)

__all__ = ["RecordBatch", "Record", "Header", "HEADER_SIZE", "TIMESTAMP_TYPES",
           "header_problem"]

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
CRC_START = 21  # the CRC covers attributes .. end of batch
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
MAX_CODEC = 4  # zstd; Kafka's CompressionType.forId refuses any higher id


def header_problem(attributes: int, count: int, size: int) -> str | None:
    """Why a framed v2 batch (``attributes``, record ``count``, ``size`` in bytes with its
    offset and length) is one Kafka refuses or would read wrong, or None. Both timestamp types,
    control batches with or without the transactional bit (KRaft's are not transactional) and
    the unused high bits are accepted as Kafka accepts them; an unknown codec id is not
    (``CompressionType.forId``), nor records behind a count of 0 (Kafka's iterator returns
    nothing for it: they would vanish; the empty batches Kafka writes have no records)."""
    codec = attributes & 0x07
    if codec > MAX_CODEC:
        return f"unknown compression codec id {codec} in the batch attributes"
    if count == 0 and size > HEADER_SIZE:
        return f"record count 0 but {size - HEADER_SIZE} bytes of records"
    return None


class RecordBatch(CompressionAttributes):
    """A magic v2 batch over a buffer (bytes, memoryview or mmap), read lazily.

    The header fields are parsed on construction; nothing is decompressed or copied until
    :meth:`records`, :meth:`records_data` or :meth:`columns` is called.
    """

    __slots__ = ("buffer", "position", "base_offset", "batch_length", "partition_leader_epoch",
                 "magic", "crc", "attributes", "last_offset_delta", "first_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "count",
                 "max_decompressed", "budget", "_data")

    def __init__(self, buffer: bytes | memoryview, position: int = 0, *,
                 max_decompressed: int = DEFAULT_MAX_SIZE,
                 budget: DecompressionBudget | None = None) -> None:
        """Parse the header of the batch at ``position`` of ``buffer`` (which must hold all of
        it); raise :class:`DecodeError` if it is truncated or its lengths are inconsistent.
        ``budget``: the read's :class:`~kproto.records.compression.DecompressionBudget` (a
        batch on its own gets one of its own)."""
        mv = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        avail = len(mv) - position
        if avail < HEADER_SIZE:
            raise DecodeError(f"record batch header needs {HEADER_SIZE} bytes, {avail} left",
                              what="RecordBatch", offset=position)
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.first_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.count) = HEADER.unpack_from(mv, position)
        if self.magic != 2:
            raise DecodeError(f"magic {self.magic} is not a v2 batch", what="RecordBatch",
                              offset=position + 16)
        size = LOG_OVERHEAD + self.batch_length
        if size < HEADER_SIZE:
            raise DecodeError(f"batch length {self.batch_length} is below the v2 minimum",
                              what="RecordBatch", offset=position + 8)
        if size > avail:
            raise DecodeError(f"batch of {size} bytes runs past the end ({avail} left)",
                              what="RecordBatch", offset=position + 8)
        if self.count < 0:
            raise DecodeError(f"negative record count {self.count}", what="RecordBatch",
                              offset=position + 57)
        self.buffer = mv[position:position + size]
        self.position = position
        self.max_decompressed = max_decompressed
        self.budget = budget
        self._data: bytes | memoryview | None = None

    # ----------------------------------------------------------------- derived header fields
    @property
    def size_in_bytes(self) -> int:
        """Whole batch size including the 12-byte offset/length prefix."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return _long(self.base_offset + self.last_offset_delta)

    @property
    def next_offset(self) -> int:
        return _long(self.last_offset + 1)

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def timestamp_type_name(self) -> str:
        return TIMESTAMP_TYPES[self.timestamp_type]

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        """With the delete-horizon bit set, the base timestamp *is* the delete horizon."""
        return self.first_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    def is_valid(self) -> bool:
        """Whether the stored CRC-32C matches attributes..end of batch."""
        return crc32c(self.buffer[CRC_START:]) == self.crc

    def compute_crc(self) -> int:
        return crc32c(self.buffer[CRC_START:])

    # ------------------------------------------------------------------------------ records
    def records_data(self) -> bytes | memoryview:
        """The records section, decompressed (a view into the buffer if uncompressed)."""
        if self._data is None:
            raw = self.buffer[HEADER_SIZE:]
            codec = self.compression
            if codec == 0:
                self._data = raw
            elif codec > MAX_CODEC:
                raise DecodeError(f"unknown compression codec id {codec}", what="RecordBatch",
                                  offset=self.position + CRC_START)
            else:
                try:
                    if self.budget is None:
                        self.budget = DecompressionBudget()
                    self._data = decompress(codec, raw, max_size=self.max_decompressed,
                                            budget=self.budget)
                except DecodeError as e:
                    e.offset = self.position + HEADER_SIZE if e.offset is None else \
                        self.position + HEADER_SIZE + e.offset
                    raise
        return self._data

    def records(self) -> Iterator[Record]:
        """Iterate the records, decompressing on first use."""
        return iter(self.record_list())

    __iter__ = records

    def record_list(self) -> list[Record]:
        """All records as a list (decoded in bulk, see :mod:`kproto.records.columns`)."""
        from kproto.records.columns import batch_records
        return batch_records(self)

    def columns(self):
        """The records of this batch as :class:`kproto.records.columns.RecordColumns`."""
        from kproto.records.columns import decode_batches
        return decode_batches([self])

    def iter_records_slow(self) -> Iterator[Record]:
        """Reference per-record decoder, field by field (used to cross-check the bulk path)."""
        if self.count == 0:  # as Kafka: an empty batch's payload is never read
            return
        data = self.records_data()
        if isinstance(data, memoryview):
            data = data.tobytes()
        what = "RecordBatch record"
        pos, end = 0, len(data)
        log_append = self.timestamp_type == 1
        for _ in range(self.count):
            start = pos
            length, pos = read_varint(data, pos)
            body_end = pos + length
            if length < 0 or body_end > end:
                raise DecodeError(f"record length {length} runs past the records",
                                  what=what, offset=start)
            if pos >= body_end:
                raise DecodeError("empty record", what=what, offset=start)
            attributes = data[pos]
            pos += 1
            ts_delta, pos = read_varlong(data, pos)
            off_delta, pos = read_varint(data, pos)
            klen, pos = read_varint(data, pos)
            if klen < -1 or pos + klen > body_end:
                raise DecodeError(f"bad key length {klen}", what=what, offset=pos)
            key = None if klen < 0 else data[pos:pos + klen]
            pos += max(klen, 0)
            vlen, pos = read_varint(data, pos)
            if vlen < -1 or pos + vlen > body_end:
                raise DecodeError(f"bad value length {vlen}", what=what, offset=pos)
            value = None if vlen < 0 else data[pos:pos + vlen]
            pos += max(vlen, 0)
            hcount, pos = read_varint(data, pos)
            if hcount < 0:
                raise DecodeError(f"negative header count {hcount}", what=what, offset=pos)
            headers, pos = parse_headers(data, pos, hcount, body_end, what)
            if pos != body_end:
                raise DecodeError(f"record body is {length} bytes but its fields take "
                                  f"{pos - (body_end - length)}", what=what, offset=start)
            timestamp = self.max_timestamp if log_append else _long(self.first_timestamp + ts_delta)
            yield Record(_long(self.base_offset + off_delta), timestamp,
                         key, value, headers, increment_sequence(self.base_sequence, off_delta),
                         pos - start, attributes)
        if pos != end:
            raise DecodeError(f"{end - pos} bytes left after {self.count} records", what=what,
                              offset=pos)

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.count}, compression={self.compression_name}, "
                f"position={self.position}, size={self.size_in_bytes})")
