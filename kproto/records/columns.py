"""Bulk, columnar decoding of record batches: the fast path for storage readers and Spark.

Call :func:`~kproto.records.reader.decode_columns` with a buffer (bytes, memoryview or mmap) and a byte range holding
whole batches; it returns a :class:`RecordColumns` for every record of every batch there::

    cols = decode_columns(segment_bytes, start, end)
    cols.offset, cols.timestamp          # int64 arrays, one entry per record
    cols.key_start, cols.key_length      # int64 / int32; length -1 = null key
    cols.value_start, cols.value_length  # positions into cols.data (a bytes object)
    cols.header_count                    # int32; cols.headers[i] lists (key, value) for record i
    cols.batch_index                     # int32: the record's batch in cols.batches
    cols.batches                         # BatchColumns: base_offset, producer_id, ... per batch
    cols.key(i), cols.value(i)           # bytes or None
    cols.to_arrow()                      # pyarrow.RecordBatch (binary_view keys/values, zero-copy)

Keys and values are (start, length) views into one data buffer (Arrow's view layout) so no
per-record copy is made; :meth:`RecordColumns.binary_offsets` gives the classic Arrow layout
(int64 offsets + one contiguous buffer + validity) when needed.

Legacy (magic 0/1) batches in the range are decoded per message and spliced in, in order.
:func:`~kproto.records.reader.iter_column_batches` decodes a long range in chunks of batches to bound memory.
:func:`decode_arrow` (v2 batches) goes straight to Arrow's classic ``binary`` keys and values,
the storage reader's path: no concatenated buffer, one copy of each key and value.

How it is fast: the records sections of all batches in the range are decompressed into one
buffer; then either the optional C accelerator (``_speedups.c``, one pass) or the numpy engine
(a minimal loop over the record length prefixes, the only serial dependency, then every other
field of every record decoded at once with numpy over the varint stream) fills the columns.
The numpy engine is the reference and always available; both are tested against each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import Any, Iterable, Optional, Sequence, TypeVar

import numpy as np

from kproto.accelerators import load
from kproto.records.compression import DEFAULT_MAX_SIZE
from kproto.codecs.primitives import INT64_MAX, read_varint
from kproto.errors import DecodeError
from kproto.records.legacy import LegacyMessage
from kproto.records.record import Record, parse_headers

# The batches are RecordBatch (magic 2) or LegacyMessage (magic 0/1) objects; this module is
# what RecordBatch.record_list runs, so it names the v2 class only in prose.
RecordBatch = Any

# optional C accelerator (kproto/records/_speedups.c, see kproto.accelerators); the numpy path
# is the reference
_speedups = load("kproto.records._speedups")

__all__ = ["RecordColumns", "BatchColumns", "ArrowRecords", "decode_batches", "check_records",
           "validate_and_assign_offsets",
           "decode_arrow", "batch_records", "record_values", "record_tuples", "to_arrow",
           "binary_view_array",
           "binary_array", "headers_array"]

_PAD = b"\0" * 16  # lets vectorised varint reads run past the last record without bounds checks
_BATCH_FIELDS = ("position", "base_offset", "last_offset", "count", "magic", "attributes",
                 "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                 "first_timestamp", "max_timestamp")


@dataclass
class BatchColumns:
    """Per-batch fields, one entry per batch (int64 arrays)."""

    position: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    count: np.ndarray
    magic: np.ndarray
    attributes: np.ndarray
    partition_leader_epoch: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_sequence: np.ndarray
    first_timestamp: np.ndarray
    max_timestamp: np.ndarray


@dataclass
class RecordColumns:
    """Columnar records; see the module docstring."""

    data: bytes
    offset: np.ndarray
    timestamp: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    header_count: np.ndarray
    size_in_bytes: np.ndarray
    batch_index: np.ndarray
    batches: BatchColumns
    attributes: np.ndarray  # record attributes byte (unused by Kafka so far)
    headers: list = field(default_factory=list)  # per record list[Header]; [] if none anywhere

    def __len__(self) -> int:
        return len(self.offset)

    def key(self, i: int) -> bytes | None:
        n = int(self.key_length[i])
        return None if n < 0 else self.data[self.key_start[i]:self.key_start[i] + n]

    def value(self, i: int) -> bytes | None:
        n = int(self.value_length[i])
        return None if n < 0 else self.data[self.value_start[i]:self.value_start[i] + n]

    def batch_field(self, name: str) -> np.ndarray:
        """A per-batch field repeated for every record (e.g. ``producer_id``)."""
        return getattr(self.batches, name)[self.batch_index]

    def sequence(self) -> np.ndarray:
        """Per-record sequence numbers (base_sequence + offset delta, wrapping at 2^31)."""
        base = self.batch_field("base_sequence")
        delta = self.offset - self.batch_field("base_offset")
        return np.where(base < 0, -1, (base + delta) & 0x7FFFFFFF)

    def binary_offsets(self, which: str = "value") -> tuple[np.ndarray, bytes, np.ndarray]:
        """Arrow's classic binary layout for keys or values: (int64 offsets of n+1, one
        contiguous data buffer, validity bool array). Copies the bytes (in Arrow's C++)."""
        import pyarrow as pa
        arr = binary_view_array(self, which).cast(pa.large_binary())
        _, offsets, data = arr.buffers()
        offs = np.frombuffer(offsets, np.int64)[arr.offset:arr.offset + len(arr) + 1]
        blob = data.to_pybytes()[offs[0]:offs[-1]] if data is not None else b""
        return offs - offs[0], blob, getattr(self, which + "_length") >= 0

    def to_arrow(self):
        """This data as a ``pyarrow.RecordBatch``."""
        return to_arrow(self)


# ------------------------------------------------------------------------------ vector varints
def _varints(u8: np.ndarray, p: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints starting at every position of ``p``: (values int64, end positions)."""
    b = u8[p]
    v = (b & 0x7F).astype(np.uint64)
    more = np.flatnonzero(b >= 0x80)
    if more.size == 0:
        end = p + 1
    else:
        size = np.ones(len(p), np.int64)
        shift = 7
        while more.size:
            if shift > 63:
                raise DecodeError("varint longer than 10 bytes", what=what,
                                  offset=int(p[more[0]]))
            b = u8[p[more] + size[more]]
            v[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
            size[more] += 1
            more = more[b >= 0x80]
            shift += 7
        end = p + size
    return (v >> np.uint64(1)).view(np.int64) ^ -(v & np.uint64(1)).view(np.int64), end


def _varints32(u8: np.ndarray, p: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_varints` of int32 fields (Kafka's ``readVarint``): at most 5 bytes each."""
    v, end = _varints(u8, p, what)
    long = (end - p > 5) | (v > 2**31 - 1) | (v < -2**31)
    if long.any():
        raise DecodeError("varint longer than 5 bytes", what=what, offset=int(p[np.argmax(long)]))
    return v, end


def _check(cond: np.ndarray, reason: str, pos: np.ndarray) -> None:
    if cond.any():
        raise DecodeError(reason, what="RecordBatch record", offset=int(pos[np.argmax(cond)]))


def _walk(data: bytes, pos: int, count: int, end: int, ends: list) -> None:
    """Follow the length prefixes of ``count`` records in data[pos:end], appending where each
    record ends: the one serial dependency, kept to a minimal loop. Lengths are re-decoded and
    checked (sign, consistency) vectorised afterwards, so this only has to advance."""
    append = ends.append
    try:
        for _ in range(count):
            z = data[pos]
            if z < 0x80:
                pos += 1 + (z >> 1)
            else:
                b = data[pos + 1]
                if b < 0x80:
                    pos += 2 + (((z & 0x7F) | (b << 7)) >> 1)
                else:
                    length, pos = read_varint(data, pos)
                    if length < 0:
                        raise DecodeError(f"bad record length {length}",
                                          what="RecordBatch record", offset=pos)
                    pos += length
            append(pos)
    except IndexError:
        raise DecodeError("records run past the end of the batch", what="RecordBatch record",
                          offset=pos) from None
    if pos != end:
        raise DecodeError(f"records end at {pos}, the batch at {end}" if pos > end else
                          f"{end - pos} bytes left after the last record",
                          what="RecordBatch record", offset=min(pos, end))


_MIN_RECORD = 7  # length, attributes, timestamp delta, offset delta, key, value, headers
# Both engines return per-record arrays: (record start, record end, attributes, timestamp delta,
# offset delta, key start, key length, value start, value length, header count, headers start).
_Fields = tuple


def _scan_numpy(data: bytes, segments: list[tuple[int, int, int]]) -> _Fields:
    """Reference path: a minimal Python walk over the length prefixes, then every field of
    every record decoded at once with numpy."""
    ends: list[int] = []
    prefix: list[int] = []  # where each record (its length prefix) starts
    for st, e, c in segments:
        before = len(ends)
        _walk(data, st, c, e, ends)
        if c:
            prefix.append(st)
            prefix.extend(ends[before:-1])
    u8 = np.frombuffer(data, np.uint8)
    bend = np.array(ends, np.int64)
    pstart = np.array(prefix, np.int64)
    what = "RecordBatch record"
    length, bstart = _varints32(u8, pstart, what)
    _check((length <= 0) | (bstart + length != bend), "bad record length", pstart)
    # attributes byte (unused by Kafka) at bstart, then the varint fields
    ts_delta, p = _varints(u8, bstart + 1, what)
    off_delta, p = _varints32(u8, p, what)
    klen, p = _varints32(u8, p, what)
    _check((klen < -1) | (klen > bend - p), "bad key length", p)
    kstart = p
    p = p + np.maximum(klen, 0)
    vlen, p = _varints32(u8, p, what)
    _check((vlen < -1) | (vlen > bend - p), "bad value length", p)
    vstart = p
    p = p + np.maximum(vlen, 0)
    hcount, p = _varints32(u8, p, what)
    _check(hcount < 0, "negative header count", p)
    return pstart, bend, u8[bstart], ts_delta, off_delta, kstart, klen, vstart, vlen, hcount, p


def _scan_c(data: bytes, segments: list[tuple[int, int, int]]) -> _Fields:
    """The same fields from the optional C accelerator (one pass, no per-record Python)."""
    n = sum(c for _, _, c in segments)
    out = [np.empty(n, np.int64) for _ in range(10)]
    attrs = np.empty(n, np.uint8)
    assert _speedups is not None  # chosen only when the accelerator is there
    try:
        _speedups.scan_v2(data, np.array(segments, np.int64).reshape(-1), n, *out, attrs)
    except ValueError as e:
        reason, offset = e.args
        raise DecodeError(reason, what="RecordBatch record", offset=offset) from None
    ts, od, ks, kl, vs, vl, hc, hs, rs, re_ = out
    return rs, re_, attrs, ts, od, ks, kl, vs, vl, hc, hs




def check_records(batch: RecordBatch, now_ms: int, before_max_ms: int, after_max_ms: int, *,
                  check_timestamps: bool, need_keys: bool) -> Optional[tuple[int, int]]:
    """Kafka's ``LogValidator`` record checks of one v2 batch in one pass of the C accelerator,
    building no columns: ``count`` well-formed records filling the records section, offset
    deltas 0, 1, ..., with ``check_timestamps`` every timestamp within ``before_max_ms``
    before and ``after_max_ms`` after ``now_ms``, with ``need_keys`` every record keyed.
    Returns (max timestamp, offset delta of the first record holding it) when all pass; None
    when one fails, the batch does not decompress, or the accelerator is absent: then
    :meth:`RecordBatch.columns` is the way to the details."""
    if _speedups is None or batch.count <= 0:
        return None
    try:
        data = batch.records_data()
    except DecodeError:
        return None
    # past int64 a bound checks nothing: no int64 difference exceeds it
    return _speedups.check_v2(data, batch.count, batch.first_timestamp, batch.timestamp_type == 0, now_ms,
                 min(before_max_ms, INT64_MAX), min(after_max_ms, INT64_MAX), check_timestamps,
                 need_keys)


def validate_and_assign_offsets(records: bytes | memoryview, now_ms: int, before_max_ms: int,
                                after_max_ms: int, *, check_timestamps: bool, need_keys: bool,
                                log_append_time: bool, base_offset: int,
                                leader_epoch: int) -> Optional[tuple[bytes, int, int]]:
    """Kafka's ``LogValidator.validateMessagesAndAssignOffsets`` for the common produce in one
    pass of the C accelerator: when ``records`` are exactly one uncompressed v2 batch that passes
    every check (those of :func:`check_records`, its CRC, no control batch, a sequence with a
    producer id, a producer id with a transaction), a copy with ``base_offset`` and
    ``leader_epoch`` assigned and its timestamp type and max timestamp set (``now_ms`` under
    ``log_append_time``), as (batch bytes, max timestamp, offset delta of the record holding
    it). None otherwise, or without the accelerator: the general path then finds what fails."""
    if _speedups is None:
        return None
    return _speedups.leader_batch(records, now_ms, min(before_max_ms, INT64_MAX),
                                  min(after_max_ms, INT64_MAX), check_timestamps, need_keys,
                                  log_append_time, base_offset, leader_epoch)


# --------------------------------------------------------------------------------- decoding
def decode_batches(batches: Sequence[RecordBatch | LegacyMessage]) -> RecordColumns:
    """Decode every record of the given batches into columns."""
    parts: list = []
    seg: list[tuple[int, int, int]] = []  # (start, end, count) of each v2 batch's records
    total = 0
    for b in batches:
        if not isinstance(b, LegacyMessage):
            d = b.records_data() if b.count else b""  # Kafka never reads an empty batch
            seg.append((total, total + len(d), b.count))
            parts.append(d)
            total += len(d)
        else:
            seg.append((-1, -1, 0))
    parts.append(_PAD)
    data = b"".join(parts)
    counts = []
    legacy: dict[int, list] = {}
    v2_seg = []
    for i, (b, (st, e, c)) in enumerate(zip(batches, seg)):
        if st < 0:
            legacy[i] = b.record_list()
            counts.append(len(legacy[i]))
        else:
            if c > (e - st) // _MIN_RECORD:  # never allocate for records that cannot be there
                raise DecodeError(f"record count {c} cannot fit in {e - st} bytes",
                                  what="RecordBatch", offset=b.position + 57)
            v2_seg.append((st, e, c))
            counts.append(c)
    fields = _scan_c if _speedups is not None else _scan_numpy
    pstart, bend, attrs, ts_delta, off_delta, kstart, klen, vstart, vlen, hcount, hstart = \
        fields(data, v2_seg)
    n = len(pstart)
    headers: list = []
    if n and hcount.any():
        headers = [()] * n
        hl = hstart.tolist()
        for i in np.flatnonzero(hcount).tolist():
            headers[i], hl[i] = parse_headers(data, hl[i], int(hcount[i]), int(bend[i]),
                                              "RecordBatch record")
        hstart = np.array(hl, np.int64)
    if fields is _scan_numpy:
        _check(hstart != bend, "record fields do not fill the record length", pstart)

    nb = len(batches)
    bc = {f: np.empty(nb, np.int64) for f in _BATCH_FIELDS}
    for i, b in enumerate(batches):
        for f in _BATCH_FIELDS:
            if not isinstance(b, LegacyMessage) or f in ("position", "magic", "attributes",
                                                   "last_offset"):
                bc[f][i] = getattr(b, f)
            elif f == "count":
                bc[f][i] = counts[i]
            elif f == "base_offset":
                bc[f][i] = legacy[i][0].offset if legacy[i] else b.offset
            elif f == "max_timestamp":
                bc[f][i] = b.timestamp
            else:
                bc[f][i] = -1
    batch_cols = BatchColumns(**bc)
    v2_idx = [i for i, (s, _, _) in enumerate(seg) if s >= 0]
    v2_counts = np.array([counts[i] for i in v2_idx], np.int64)
    bidx = np.repeat(np.array(v2_idx, np.int32), v2_counts)
    base = batch_cols.base_offset[bidx]
    offset = base + off_delta
    log_append = (batch_cols.attributes[bidx] & 0x08) != 0
    timestamp = np.where(log_append, batch_cols.max_timestamp[bidx],
                         batch_cols.first_timestamp[bidx] + ts_delta)
    size = bend - pstart
    cols = RecordColumns(data, offset, timestamp, kstart, klen.astype(np.int32), vstart,
                         vlen.astype(np.int32), hcount.astype(np.int32), size.astype(np.int32),
                         bidx, batch_cols, attrs, headers)
    if legacy:
        cols = _merge_legacy(cols, batches, legacy, counts)
    return cols


def _merge_legacy(cols: RecordColumns, batches, legacy: dict, counts: list) -> RecordColumns:
    """Rebuild the columns in batch order with the legacy messages' records spliced in."""
    extra = bytearray()
    base = len(cols.data)
    rows = []  # per record: tuple of column values
    v2_pos = 0
    for i in range(len(batches)):
        if i in legacy:
            for r in legacy[i]:
                ks = base + len(extra)
                extra += r.key or b""
                vs = base + len(extra)
                extra += r.value or b""
                rows.append((r.offset, r.timestamp, ks, -1 if r.key is None else len(r.key), vs,
                             -1 if r.value is None else len(r.value), 0, r.size_in_bytes, i,
                             r.attributes & 0xFF, ()))  # a signed byte in the message format
        else:
            for j in range(v2_pos, v2_pos + counts[i]):
                rows.append((cols.offset[j], cols.timestamp[j], cols.key_start[j],
                             cols.key_length[j], cols.value_start[j], cols.value_length[j],
                             cols.header_count[j], cols.size_in_bytes[j], i, cols.attributes[j],
                             cols.headers[j] if cols.headers else ()))
            v2_pos += counts[i]
    data = cols.data + bytes(extra) + _PAD
    c = list(zip(*rows)) if rows else [()] * 11
    hdrs = list(c[10]) if any(c[10]) else []
    return RecordColumns(data, np.array(c[0], np.int64), np.array(c[1], np.int64),
                         np.array(c[2], np.int64), np.array(c[3], np.int32),
                         np.array(c[4], np.int64), np.array(c[5], np.int32),
                         np.array(c[6], np.int32), np.array(c[7], np.int32),
                         np.array(c[8], np.int32), cols.batches, np.array(c[9], np.uint8), hdrs)


def _slices(data: bytes, start: np.ndarray, length: np.ndarray) -> list:
    """data[start:start+length] for each record, None where length is -1 (C-level loops)."""
    out: list[bytes | None]  # None for a null key or value
    out = [data[s:e] for s, e in zip(start.tolist(), (start + np.maximum(length, 0)).tolist())]
    if (length < 0).any():
        for i in np.flatnonzero(length < 0).tolist():
            out[i] = None
    return out


def record_values(cols: RecordColumns) -> tuple[list[int], list[int], list, list, Iterable]:
    """Offsets, timestamps, keys, values and headers of ``cols`` as Python objects, made with
    C-level loops: what per-record objects (:class:`Record`, a client's records) are built from."""
    return (cols.offset.tolist(), cols.timestamp.tolist(),
            _slices(cols.data, cols.key_start, cols.key_length),
            _slices(cols.data, cols.value_start, cols.value_length),
            cols.headers or repeat((), len(cols)))


_T = TypeVar("_T", bound=tuple)


def record_tuples(cols: RecordColumns, cls: type[_T], topic: str, partition: int,
                  first: int = 0) -> list[_T]:
    """``cls(topic, partition, offset, timestamp, key, value, headers)`` for the records
    ``first..`` of ``cols``: a client's record tuples (``cls`` a 7-field tuple subclass such as a
    NamedTuple), built in one C loop when the accelerator is there."""
    if _speedups is not None:
        return _speedups.record_tuples(cls, topic, partition, cols.data, cols.offset, cols.timestamp,
                                       cols.key_start, cols.key_length, cols.value_start,
                                       cols.value_length, cols.headers or None, first)
    offsets, stamps, keys, values, headers = record_values(cols)
    new = partial(tuple.__new__, cls)
    out = list(map(new, zip(repeat(topic), repeat(partition), offsets, stamps, keys, values, headers)))
    return out[first:] if first else out


_new_record = partial(tuple.__new__, Record)


def batch_records(batch: RecordBatch) -> list[Record]:
    """The records of one v2 batch as :class:`Record` objects, decoded through the columns."""
    if batch.count == 0:  # as Kafka: an empty batch's payload is never read
        return []
    c = decode_batches([batch])
    n = len(c)
    if batch.base_sequence >= 0:
        seq = c.sequence().tolist()
    else:
        seq = repeat(-1, n)
    return list(map(_new_record, zip(*record_values(c), seq, c.size_in_bytes.tolist(),
                                     c.attributes.tolist())))


def binary_view_array(cols: RecordColumns, which: str = "value"):
    """Keys or values as a ``pyarrow`` binary_view array sharing ``cols.data`` (zero-copy)."""
    import pyarrow as pa

    start = getattr(cols, which + "_start")
    length = getattr(cols, which + "_length")
    n = len(cols)
    if len(cols.data) >= 1 << 31:
        raise ValueError("data buffer too large for int32 binary_view offsets")
    # Every 12-byte window of the data as one element (stride 1): a row gather copies the
    # inline bytes or the 4-byte prefix of each value in one step. The data ends with 16 pad
    # bytes, so a window exists at any value start.
    windows = np.ndarray((len(cols.data) - 11,), "V12", buffer=cols.data, strides=(1,))
    # Arrow's view layout, 16 bytes per value: int32 length, then either the bytes inline
    # (<= 12, zero padded) or a 4-byte prefix, buffer index 0 and the int32 offset.
    valid = length >= 0
    lens = np.where(valid, length, 0).astype(np.int32)
    views = np.empty(n, np.dtype([("len", "<i4"), ("data", "V12")]))
    views["len"] = lens
    views["data"] = windows[start]
    lanes = views.view("<u4").reshape(n, 4)
    small = lens <= 12
    for k in range(3):  # zero the inline bytes past each short value's end
        keep = np.clip(lens - 4 * k, 0, 4).astype(np.uint64) * np.uint64(8)
        mask = ((np.uint64(1) << keep) - np.uint64(1)).astype(np.uint32)
        lanes[:, 1 + k] &= np.where(small, mask, np.uint32(0xFFFFFFFF))
    lanes[:, 2] = np.where(small, lanes[:, 2], 0)
    lanes[:, 3] = np.where(small, lanes[:, 3], start.astype(np.uint32))
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views),
                                                       pa.py_buffer(cols.data)])


def to_arrow(cols: RecordColumns):
    """A ``pyarrow.RecordBatch`` of the records: offset, timestamp, key, value (binary_view,
    sharing ``cols.data``), headers (list<struct<key: string, value: binary>>), plus the
    batch fields partition_leader_epoch, producer_id, producer_epoch, is_transactional,
    is_control and timestamp_type."""
    import pyarrow as pa

    attrs = cols.batch_field("attributes")
    magic = cols.batch_field("magic")
    ts_type = np.where(magic == 0, -1, (attrs & 0x08) >> 3)
    headers = headers_array(cols.headers, cols.header_count)
    return pa.RecordBatch.from_arrays([
        pa.array(cols.offset), pa.array(cols.timestamp),
        binary_view_array(cols, "key"), binary_view_array(cols, "value"),
        headers,
        pa.array(cols.batch_field("partition_leader_epoch").astype(np.int32)),
        pa.array(cols.batch_field("producer_id")),
        pa.array(cols.batch_field("producer_epoch").astype(np.int16)),
        pa.array((attrs & 0x10) != 0), pa.array((attrs & 0x20) != 0),
        pa.array(ts_type.astype(np.int8)),
    ], names=["offset", "timestamp", "key", "value", "headers", "partition_leader_epoch",
              "producer_id", "producer_epoch", "is_transactional", "is_control",
              "timestamp_type"])


def headers_array(headers: list, header_count: np.ndarray):
    """Per-record headers (``RecordColumns.headers``: [] when no record has any) as Arrow
    ``list<struct<key: string, value: binary>>``."""
    import pyarrow as pa

    flat = [h for hs in headers for h in hs]
    offsets = np.zeros(len(header_count) + 1, np.int32)
    if flat:
        offsets[1:] = np.cumsum(header_count)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(
        [pa.array([h[0] for h in flat], pa.string()), pa.array([h[1] for h in flat], pa.binary())],
        names=["key", "value"]))


@dataclass
class ArrowRecords:
    """Records of v2 batches with keys, values and headers already Arrow arrays: what
    :func:`decode_arrow` returns. Batch fields are left to the caller, who has the batches:
    ``np.repeat(per_batch_values, counts)`` spreads them over the records."""

    offset: np.ndarray  # int64
    timestamp: np.ndarray  # int64, ms (LogAppendTime batches: their max timestamp)
    key: object  # pyarrow binary array (null key: null)
    value: object  # pyarrow binary array
    headers: object  # pyarrow list<struct<key: string, value: binary>>
    counts: np.ndarray  # int64: records per batch, in batch order

    def __len__(self) -> int:
        return len(self.offset)


def _binary_array(lengths: np.ndarray, gather) -> object:
    """Classic Arrow binary from int64 lengths (-1: null) and ``gather(offsets, data)``, which
    fills the int32 offsets and the concatenated bytes."""
    import pyarrow as pa

    n = len(lengths)
    nulls = lengths < 0
    null_count = int(np.count_nonzero(nulls))
    total = int(lengths.sum()) + null_count  # nulls count as -1 in the sum
    if total > 0x7FFFFFFF:
        raise OverflowError("more than 2 GiB of keys or values in one Arrow array")
    offsets = np.empty(n + 1, np.int32)
    data = np.empty(total, np.uint8)
    gather(offsets, data)
    validity = None
    if null_count:
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)], null_count)


def decode_arrow(batches: Sequence[RecordBatch]) -> ArrowRecords:
    """Decode every record of the given v2 batches with keys and values as classic Arrow
    ``binary`` arrays (int32 offsets and one data buffer: what pandas, Spark and every Arrow
    kernel take), built directly rather than as views followed by a cast. With the C helper
    each batch's records section is scanned where it lies (decompressed, or mapped from a
    file) and the bytes are copied once; without it this goes through :func:`decode_batches`.
    Raises :class:`OverflowError` when keys or values exceed 2 GiB (decode fewer batches)."""
    if _speedups is None or any(isinstance(b, LegacyMessage) for b in batches):
        return _decode_arrow_columns(batches)
    parts = []
    counts = np.empty(len(batches), np.int64)
    for i, b in enumerate(batches):
        c = b.count
        d = b.records_data() if c else b""  # Kafka never reads an empty batch
        if c > len(d) // _MIN_RECORD:  # never allocate for records that cannot be there
            raise DecodeError(f"record count {c} cannot fit in {len(d)} bytes",
                              what="RecordBatch", offset=b.position + 57)
        parts.append(d)
        counts[i] = c
    n = int(counts.sum())
    out = [np.empty(n, np.int64) for _ in range(10)]
    attrs = np.empty(n, np.uint8)
    try:
        _speedups.scan_parts(parts, counts, *out, attrs)
    except ValueError as e:
        if len(e.args) != 3:  # not a record's damage: a misuse of scan_parts
            raise
        reason, offset, part = e.args
        # offsets into a decompressed section mean nothing in the file: name the batch
        raise DecodeError(f"{reason} (byte {offset} of the batch's records)",
                          what="RecordBatch record", offset=batches[part].position) from None
    ts_delta, off_delta, kstart, klen, vstart, vlen, hcount, hstart, _rs, rend = out
    headers: list = []
    if n and hcount.any():
        headers = [()] * n
        bidx = np.repeat(np.arange(len(batches)), counts).tolist()
        data: dict[int, bytes] = {}
        for i in np.flatnonzero(hcount).tolist():
            bi = bidx[i]
            if bi not in data:
                data[bi] = bytes(parts[bi])  # header values are bytes, not views into a file
            headers[i] = parse_headers(data[bi], int(hstart[i]), int(hcount[i]), int(rend[i]),
                                       "RecordBatch record")[0]
    key = _binary_array(klen, lambda o, d: _speedups.gather_binary(parts, counts, kstart, klen,
                                                                   o, d))
    value = _binary_array(vlen, lambda o, d: _speedups.gather_binary(parts, counts, vstart, vlen,
                                                                     o, d))
    base = np.repeat(np.fromiter((b.base_offset for b in batches), np.int64, len(batches)), counts)
    log_append = np.fromiter((b.attributes & 0x08 != 0 for b in batches), bool, len(batches))
    first_ts = np.fromiter((b.max_timestamp if b.attributes & 0x08 else b.first_timestamp
                            for b in batches), np.int64, len(batches))
    timestamp = np.repeat(first_ts, counts)
    if not log_append.all():
        timestamp += np.where(np.repeat(log_append, counts), 0, ts_delta)
    return ArrowRecords(base + off_delta, timestamp, key, value,
                        headers_array(headers, hcount), counts)


def _decode_arrow_columns(batches: Sequence[RecordBatch]) -> ArrowRecords:
    """:func:`decode_arrow` through :func:`decode_batches` (the numpy engine's way)."""
    cols = decode_batches(batches)
    return ArrowRecords(cols.offset, cols.timestamp, binary_array(cols, "key"),
                        binary_array(cols, "value"),
                        headers_array(cols.headers, cols.header_count),
                        np.bincount(cols.batch_index, minlength=len(batches)).astype(np.int64))


def binary_array(cols: RecordColumns, which: str = "value"):
    """Keys or values as a classic ``pyarrow`` binary array (int32 offsets, one data buffer:
    a copy). Raises :class:`OverflowError` past 2 GiB of bytes."""
    import pyarrow as pa

    start = getattr(cols, which + "_start")
    length = getattr(cols, which + "_length")
    n = len(cols)
    valid = length >= 0
    end = start + np.where(valid, length, 0)
    # The records lie in order in cols.data, so (start, end) pairs are ascending: as the
    # offsets of a 2n-element binary array over cols.data (wanted bytes, gaps between them)
    # every even element is one value, and Arrow's take copies them out in one pass.
    # Legacy records spliced in by _merge_legacy break the order: views and a cast then.
    pairs = np.empty(2 * n + 1, np.int64)
    pairs[0:2 * n:2] = start
    pairs[1:2 * n:2] = end
    pairs[2 * n] = end[-1] if n else 0
    if int((end - start).sum()) > 0x7FFFFFFF:
        raise OverflowError("more than 2 GiB of keys or values in one Arrow array")
    large = len(cols.data) > 0x7FFFFFFF
    if n and (pairs[1:] < pairs[:-1]).any():
        if large:
            raise OverflowError("more than 2 GiB of decoded records")
        out = binary_view_array(cols, which).cast(pa.binary())
    else:
        spread = pa.Array.from_buffers(
            pa.large_binary() if large else pa.binary(), 2 * n,
            [None, pa.py_buffer(pairs if large else pairs.astype(np.int32)),
             pa.py_buffer(cols.data)])
        out = spread.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
        if large:
            out = out.cast(pa.binary())
        if not valid.all():
            out = pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(np.packbits(
                valid, bitorder="little"))] + out.buffers()[1:])
    return out


# ------------------------------------------------------------ framed batches (C helper only)
#: Columns of the batch table ``_speedups.frame_v2`` fills: one int64 row per v2 batch.
FRAME_FIELDS = ("position", "size", "base_offset", "partition_leader_epoch", "attributes",
                "last_offset_delta", "first_timestamp", "max_timestamp", "producer_id",
                "producer_epoch", "base_sequence", "count", "crc", "crc_computed")
(F_POS, F_SIZE, F_BASE, F_EPOCH, F_ATTR, F_LOD, F_FTS, F_MTS, F_PID, F_PEPOCH, F_BSEQ, F_COUNT,
 F_CRC, F_CRC_COMPUTED) = range(len(FRAME_FIELDS))
_RECORDS_AT = 61  # a v2 batch's records section follows its header

#: Per-batch columns :func:`build_arrow` can spread over the records: (name, Arrow type,
#: numpy dtype of the values, table column); is_transactional and is_control are bits.
BATCH_COLUMNS = (("leader_epoch", "int32", np.int32, F_EPOCH),
                 ("producer_id", "int64", np.int64, F_PID),
                 ("producer_epoch", "int16", np.int16, F_PEPOCH),
                 ("base_sequence", "int32", np.int32, F_BSEQ),
                 ("is_transactional", "bool", None, 0x10),
                 ("is_control", "bool", None, 0x20),
                 ("position", "int64", np.int64, F_POS))


def batch_column(rows: np.ndarray, name: str) -> np.ndarray:
    """The values of one of :data:`BATCH_COLUMNS` for each framed batch in ``rows``."""
    for col_name, _kind, dtype, col in BATCH_COLUMNS:
        if col_name == name:
            return (rows[:, F_ATTR] & col) != 0 if dtype is None else rows[:, col].astype(dtype)
    raise KeyError(name)


def frame_table(rows: int) -> np.ndarray:
    """An empty batch table of ``rows`` rows for ``_speedups.frame_v2``."""
    return np.empty((rows, len(FRAME_FIELDS)), np.int64)


def _pool_buffer(nbytes: int):
    # Arrow's pool keeps freed memory for the next chunk; numpy's allocations go back to the
    # system and come back as fresh pages, whose faults cost more than filling them
    import pyarrow as pa
    return pa.allocate_buffer(nbytes)


@dataclass
class BuiltColumns:
    """What :func:`build_arrow` returns: ``offset`` and ``timestamp`` as numpy views of the
    Arrow buffers, and the Arrow arrays by column name (``offset``, ``timestamp`` as int64,
    ``timestamp_type``, ``key``, ``value``, ``headers``, and the asked :data:`BATCH_COLUMNS`)."""

    offset: np.ndarray
    timestamp: np.ndarray
    arrays: dict


def build_arrow(base, rows: np.ndarray, parts: Sequence, shift: int = 0,
                batch_columns: Iterable[str] = ()) -> BuiltColumns | None:
    """The records of the framed v2 batches ``rows`` (a :func:`frame_table` slice) as Arrow
    arrays, built in one pass of the C helper: keys, values and headers copied once into
    classic ``binary``/``string`` layouts, the batch fields in ``batch_columns`` spread over
    their records (``position``: the batch's plus ``shift``). An uncompressed batch is read
    in ``base`` at its position; ``parts`` holds the decompressed records sections of the
    compressed batches that have records, in order. None when the records are not as
    expected (malformed, header keys that are not UTF-8, more than 2 GiB): the caller
    decodes them the reference way, which reports what is wrong."""
    import pyarrow as pa

    sp = _speedups
    assert sp is not None and hasattr(sp, "build_columns")
    counts = rows[:, F_COUNT]
    has = counts > 0
    plain = has & ((rows[:, F_ATTR] & 7) == 0)
    sections = rows[:, F_SIZE] - _RECORDS_AT
    sections[has & ~plain] = [len(p) for p in parts] if len(parts) == int(
        np.count_nonzero(has & ~plain)) else -1
    # never allocate for records that cannot be there (each takes at least _MIN_RECORD bytes)
    if (counts[has] > sections[has] // _MIN_RECORD).any():
        return None
    n = int(counts.sum())
    room = int(sections[has].sum())
    if room > 0x7FFFFFFF:
        return None
    bits = (n + 7) // 8
    alloc = _pool_buffer
    offsets_size = 4 * (n + 1)
    key_data = pa.allocate_buffer(room, resizable=True)
    value_data = pa.allocate_buffer(room, resizable=True)
    outs = [alloc(8 * n), alloc(8 * n), alloc(n), alloc(offsets_size), alloc(bits), key_data,
            alloc(offsets_size), alloc(bits), value_data, alloc(offsets_size)]
    wanted = set(batch_columns)
    for name, _t, dtype, _c in BATCH_COLUMNS:
        outs.append(None if name not in wanted else
                    alloc(bits) if dtype is None else alloc(np.dtype(dtype).itemsize * n))
    table = np.ascontiguousarray(rows)
    try:
        (kbytes, vbytes, knulls, vnulls, nh, hkbytes, hvbytes, utf8) = sp.build_columns(
            base, parts, table, n, shift, outs)
    except ValueError:
        return None
    if nh and not utf8:
        return None  # Python's replacement of bad UTF-8 is the reference: leave it to it
    key_data.resize(kbytes, shrink_to_fit=True)
    value_data.resize(vbytes, shrink_to_fit=True)
    arrays = {
        "offset": pa.Array.from_buffers(pa.int64(), n, [None, outs[0]]),
        "timestamp": pa.Array.from_buffers(pa.int64(), n, [None, outs[1]]),
        "timestamp_type": pa.Array.from_buffers(pa.int8(), n, [None, outs[2]]),
        "key": pa.Array.from_buffers(pa.binary(), n, [outs[4] if knulls else None, outs[3],
                                                      key_data], knulls),
        "value": pa.Array.from_buffers(pa.binary(), n, [outs[7] if vnulls else None, outs[6],
                                                        value_data], vnulls),
    }
    if nh:
        hout = [alloc(4 * (nh + 1)), alloc(hkbytes), alloc(4 * (nh + 1)), alloc((nh + 7) // 8),
                alloc(hvbytes)]
        try:
            sp.build_headers(base, parts, table, n, (nh, hkbytes, hvbytes), hout)
        except ValueError:
            return None
        hv_valid = np.frombuffer(hout[3], np.uint8)
        hv_nulls = nh - int(np.unpackbits(hv_valid, count=nh, bitorder="little").sum())
        entries = pa.StructArray.from_arrays([
            pa.Array.from_buffers(pa.string(), nh, [None, hout[0], hout[1]]),
            pa.Array.from_buffers(pa.binary(), nh, [hout[3] if hv_nulls else None, hout[2],
                                                    hout[4]], hv_nulls)],
            names=["key", "value"])
        hoffsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, outs[9]])
    else:
        entries = pa.StructArray.from_arrays([pa.array([], pa.string()),
                                              pa.array([], pa.binary())], names=["key", "value"])
        hoffsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, outs[9]])
    arrays["headers"] = pa.ListArray.from_arrays(hoffsets, entries)
    for (name, kind, _d, _c), buf in zip(BATCH_COLUMNS, outs[10:]):
        if buf is not None:
            arrays[name] = pa.Array.from_buffers(getattr(pa, kind + "_")() if kind == "bool"
                                                 else getattr(pa, kind)(), n, [None, buf])
    return BuiltColumns(np.frombuffer(outs[0], np.int64, n), np.frombuffer(outs[1], np.int64, n),
                        arrays)
