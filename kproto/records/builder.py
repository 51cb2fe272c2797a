"""Writing batches as Kafka's ``MemoryRecordsBuilder`` does (for producers and for tests).

:class:`RecordBatchBuilder` writes one magic v2 batch; :class:`LegacyMessageBuilder` writes a
magic 0/1 message set (one entry per record, or one compressed wrapper).
"""
from __future__ import annotations

import struct
import zlib
from typing import Sequence

from crc32c import crc32c

from kproto.accelerators import load
from kproto.records.compression import codec_id, compress
from kproto.codecs.primitives import varint
from kproto.errors import EncodeError
from kproto.records.batch import CRC_START, HEADER, HEADER_SIZE
from kproto.records.record import (ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TIMESTAMP_TYPE,
                                   ATTR_TRANSACTIONAL, LOG_OVERHEAD)
from kproto.records.control import encode_control_key, encode_end_txn_marker

__all__ = ["RecordBatchBuilder", "LegacyMessageBuilder", "HeaderInput"]

HeaderInput = Sequence[tuple[str, "bytes | None"]]
_NULL = varint(-1)
_I32 = struct.Struct(">i")
_LEGACY_PREFIX = struct.Struct(">qiI")  # offset, size, crc
_Q = struct.Struct(">q")
# optional C accelerator (kproto.accelerators): encode_records writes what encode_record does
_speedups = load("kproto.records._speedups")


def _bytes_field(v: bytes | None) -> bytes:
    return _NULL if v is None else varint(len(v)) + bytes(v)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: HeaderInput = ()) -> bytes:
    """One v2 record, length prefix included (``DefaultRecord.writeTo``)."""
    parts = [b"\0", varint(timestamp_delta), varint(offset_delta), _bytes_field(key),
             _bytes_field(value), varint(len(headers))]
    for hk, hv in headers:
        if hk is None:
            raise EncodeError("header keys cannot be null")
        kb = hk.encode("utf-8") if isinstance(hk, str) else bytes(hk)
        parts.append(varint(len(kb)))
        parts.append(kb)
        parts.append(_bytes_field(hv))
    body = b"".join(parts)
    return varint(len(body)) + body


class RecordBatchBuilder:
    """Accumulates records and writes one magic v2 batch.

    Offsets default to consecutive from ``base_offset``; the base timestamp is the first
    record's (or ``delete_horizon_ms`` when given), the max timestamp the largest record
    timestamp (or ``log_append_time`` for LogAppendTime). ``last_offset``/``first_timestamp``/
    ``max_timestamp`` override the computed values (e.g. to rewrite a compacted batch).
    """

    def __init__(self, *, compression: int | str = 0, compression_level: int | None = None,
                 base_offset: int = 0, timestamp_type: int = 0,
                 log_append_time: int | None = None, partition_leader_epoch: int = -1,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False, control: bool = False,
                 delete_horizon_ms: int | None = None) -> None:
        self.compression = codec_id(compression)
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional
        self.control = control
        self.delete_horizon_ms = delete_horizon_ms
        self.last_offset: int | None = None
        self.first_timestamp: int | None = None
        self.max_timestamp: int | None = None
        self._records: list[tuple[int, int, bytes | None, bytes | None, HeaderInput]] = []

    def __len__(self) -> int:
        return len(self._records)

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               headers: HeaderInput = (), offset: int | None = None) -> int:
        """Add a record; returns its offset. Offsets must increase."""
        if offset is None:
            offset = self._records[-1][0] + 1 if self._records else self.base_offset
        elif self._records and offset <= self._records[-1][0]:
            raise EncodeError(f"offset {offset} does not increase")
        elif offset < self.base_offset:
            raise EncodeError(f"offset {offset} is below the base offset {self.base_offset}")
        headers = tuple(headers)
        if headers and any(hk is None for hk, _ in headers):
            raise EncodeError("header keys cannot be null")
        self._records.append((offset, timestamp, key, value, headers))
        return offset

    def extend(self, records: Sequence[tuple[int, bytes | None, bytes | None, HeaderInput]]) -> None:
        """Add ``(timestamp, key, value, headers)`` records at the next consecutive offsets
        (headers: tuples of ``(key, value)`` tuples, as :meth:`append` stores them)."""
        start = self._records[-1][0] + 1 if self._records else self.base_offset
        self._records.extend([(start + i, *r) for i, r in enumerate(records)])

    def append_end_txn_marker(self, commit: bool, coordinator_epoch: int, timestamp: int) -> int:
        """A COMMIT/ABORT control record (the batch must be a transactional control batch)."""
        return self.append(timestamp, encode_control_key(1 if commit else 0),
                           encode_end_txn_marker(coordinator_epoch))

    def append_control(self, type_id: int, value: bytes, timestamp: int) -> int:
        """A KRaft control record; ``value`` is the encoded message (which starts with its
        own int16 Version field)."""
        return self.append(timestamp, encode_control_key(type_id), value)

    @property
    def attributes(self) -> int:
        a = self.compression
        if self.timestamp_type == 1:
            a |= ATTR_TIMESTAMP_TYPE
        if self.transactional:
            a |= ATTR_TRANSACTIONAL
        if self.control:
            a |= ATTR_CONTROL
        if self.delete_horizon_ms is not None:
            a |= ATTR_DELETE_HORIZON
        return a

    def build(self) -> bytes:
        """The batch bytes, CRC-32C computed."""
        recs = self._records
        if self.delete_horizon_ms is not None:
            base_ts = self.delete_horizon_ms
        else:
            base_ts = recs[0][1] if recs else -1
        if self.first_timestamp is not None:
            base_ts = self.first_timestamp
        if _speedups is not None:
            try:
                body = _speedups.encode_records(recs, self.base_offset, base_ts)
            except (ValueError, OverflowError) as e:  # as the Python writer: a null header key
                raise EncodeError(str(e)) from None  # (extend looks at no record), a huge delta
        else:
            body = b"".join([encode_record(off - self.base_offset, ts - base_ts, k, v, h)
                             for off, ts, k, v, h in recs])
        if self.compression and recs:  # an empty batch is a bare header (filterTo's form)
            body = compress(self.compression, body, self.compression_level)
        last = self.last_offset if self.last_offset is not None else (
            recs[-1][0] if recs else self.base_offset)
        if self.max_timestamp is not None:
            max_ts = self.max_timestamp
        elif self.timestamp_type == 1 and self.log_append_time is not None:
            max_ts = self.log_append_time
        else:
            max_ts = max((r[1] for r in recs), default=-1)
        length = HEADER_SIZE - LOG_OVERHEAD + len(body)
        head = bytearray(HEADER.pack(self.base_offset, length, self.partition_leader_epoch, 2, 0,
                                     self.attributes, last - self.base_offset, base_ts, max_ts,
                                     self.producer_id, self.producer_epoch, self.base_sequence,
                                     len(recs)))
        crc = crc32c(body, crc32c(memoryview(head)[CRC_START:]))
        struct.pack_into(">I", head, 17, crc)
        return bytes(head) + body


def encode_legacy_message(offset: int, magic: int, attributes: int, timestamp: int,
                          key: bytes | None, value: bytes | None) -> bytes:
    """One magic 0/1 log entry (``LegacyRecord.writeTo`` with its offset/size prefix)."""
    parts = [bytes((magic, attributes))]
    if magic == 1:
        parts.append(_Q.pack(timestamp))
    for f in (key, value):
        parts.append(_I32.pack(-1) if f is None else _I32.pack(len(f)) + bytes(f))
    body = b"".join(parts)
    return _LEGACY_PREFIX.pack(offset, len(body) + 4, zlib.crc32(body)) + body


class LegacyMessageBuilder:
    """Writes a magic 0 or 1 message set as Kafka's ``MemoryRecordsBuilder`` does: one entry per
    record uncompressed, or a single compressed wrapper (inner offsets relative for magic 1,
    absolute for magic 0; wrapper offset = last offset, timestamp = max or log append time)."""

    def __init__(self, magic: int = 1, *, compression: int | str = 0,
                 compression_level: int | None = None, base_offset: int = 0,
                 timestamp_type: int = 0, log_append_time: int | None = None) -> None:
        if magic not in (0, 1):
            raise EncodeError(f"legacy magic must be 0 or 1, not {magic}")
        self.magic = magic
        self.compression = codec_id(compression)
        if self.compression == 4:
            raise EncodeError("zstd needs magic 2")
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type if magic == 1 else 0
        self.log_append_time = log_append_time
        self._records: list[tuple[int, int, bytes | None, bytes | None]] = []

    def append(self, timestamp: int, key: bytes | None, value: bytes | None,
               offset: int | None = None) -> int:
        if offset is None:
            offset = self._records[-1][0] + 1 if self._records else self.base_offset
        elif self._records and offset <= self._records[-1][0]:
            raise EncodeError(f"offset {offset} does not increase")
        self._records.append((offset, timestamp, key, value))
        return offset

    def build(self) -> bytes:
        log_append = self.timestamp_type == 1
        ts_attr = ATTR_TIMESTAMP_TYPE if log_append else 0

        def ts(t: int) -> int:
            if self.magic == 0:
                return -1
            return self.log_append_time if log_append and self.log_append_time is not None else t

        if self.compression == 0:
            return b"".join(encode_legacy_message(o, self.magic, ts_attr, ts(t), k, v)
                            for o, t, k, v in self._records)
        if not self._records:
            return b""
        inner = b"".join(
            encode_legacy_message(o - self.base_offset if self.magic == 1 else o, self.magic,
                                  ts_attr, ts(t), k, v)
            for o, t, k, v in self._records)
        payload = compress(self.compression, inner, self.compression_level,
                           legacy_lz4=self.magic == 0)
        wrapper_ts = ts(max(t for _, t, _, _ in self._records))
        return encode_legacy_message(self._records[-1][0], self.magic,
                                     self.compression | ts_attr, wrapper_ts, None, payload)
