"""Segment index files: ``.index`` (offset -> position), ``.timeindex`` (timestamp -> offset) and
``.txnindex`` (aborted transactions), parsed from and encoded to bytes (sans-I/O).

Live and crashed brokers leave the active segment's ``.index``/``.timeindex`` preallocated and
zero-filled past the last entry; the valid entries are the prefix before the first all-zero slot
(a real entry never has relative offset 0 together with position / timestamp 0).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np

from kproto.errors import DecodeError, EncodeError

if TYPE_CHECKING:
    from kproto.messages import AbortedTxn as AbortedTxnMessage

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
TXN_ENTRY_SIZE = 34
#: Kafka's ``index.interval.bytes`` default.
INDEX_INTERVAL_BYTES = 4096
#: Kafka's ``segment.index.bytes`` default (preallocation size of an active segment's indexes).
SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
#: RecordBatch.NO_TIMESTAMP
NO_TIMESTAMP = -1

_OFFSET_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_TIME_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


@lru_cache(maxsize=None)
def _txn_entry() -> tuple[struct.Struct, range]:
    """A ``.txnindex`` entry's layout from Kafka's ``AbortedTxn`` spec: an int16 version, then the
    spec's fixed-width body (one ``struct`` for the whole entry: entries are read in bulk). Made on
    first use: the codecs are not imported with the storage package."""
    from kproto.codecs import message
    codec = message("AbortedTxn")
    widths = {"int16": "h", "int32": "i", "int64": "q"}
    version = codec.valid_versions[-1]
    fields = [f for f in codec.schema.fields if version in f.version_range]
    assert not codec.flexible_versions and all(f.type in widths for f in fields), "AbortedTxn is not fixed-width"
    assert [f.attr for f in fields] == ["producer_id", "first_offset", "last_offset", "last_stable_offset"]
    entry = struct.Struct(">h" + "".join(widths[f.type] for f in fields))
    assert entry.size == TXN_ENTRY_SIZE
    return entry, codec.valid_versions
_INT32_MAX = 2**31 - 1


def _valid_prefix(table: np.ndarray, a: str, b: str) -> int:
    """Number of slots before the first all-zero slot (the preallocated tail)."""
    zero = (table[a] == 0) & (table[b] == 0)
    hit = np.flatnonzero(zero)
    return int(hit[0]) if hit.size else int(table.shape[0])


#: ``segment.index.bytes`` is an int: no index Kafka writes is larger.
MAX_INDEX_FILE = 2**31 - 1
#: The smallest batch on disk (a magic 0 message with empty key and value): an index never has
#: more entries than its segment has batches, so more slots than that are preallocation.
MIN_BATCH_BYTES = 26


def has_empty_slot(data: bytes | memoryview, entry_size: int) -> bool:
    """``data`` (whole slots of an index) holds an all-zero slot: where its entries end."""
    slots = len(data) // entry_size
    table = np.frombuffer(data, dtype=np.uint8, count=slots * entry_size).reshape(slots, entry_size)
    return bool(slots) and not bool(table.any(axis=1).all())


def useful_index_bytes(file_size: int, entry_size: int, log_size: int | None) -> int:
    """How much of an index file can hold entries: all of it, or (given its segment's size)
    one entry per smallest possible batch. Raises DecodeError for a size no broker writes."""
    if file_size > MAX_INDEX_FILE:
        raise DecodeError(f"implausible size {file_size}: larger than any index Kafka writes",
                          what="index")
    if log_size is None:
        return file_size
    return min(file_size, entry_size * (log_size // MIN_BATCH_BYTES + 1))


def preallocated_size(entry_size: int, max_index_size: int = SEGMENT_INDEX_BYTES) -> int:
    """File size of an active segment's index: ``segment.index.bytes`` rounded down to whole entries."""
    return max_index_size - max_index_size % entry_size


def kafka_sanity_check(first_slot: bytes, last_slot: bytes, file_size: int, base_offset: int,
                       kind: str, path: str) -> str | None:
    """Kafka's ``OffsetIndex.sanityCheck`` / ``TimeIndex.sanityCheck`` (what decides whether a
    broker rebuilds an index at start, and what ``kafka-dump-log.sh --index-sanity-check``
    runs) on an ``index`` or ``timeindex`` file of ``file_size`` bytes: Kafka's
    ``CorruptIndexException`` message (naming ``path``), or None when the file passes.

    Kafka opens the file as it is: every whole slot counts as an entry, preallocated zeros too,
    so only the first and the last whole slot matter (``first_slot``/``last_slot``: their
    bytes, empty when the file has no whole slot). A time index whose last slot is still zeros
    after entries were written fails (its last timestamp 0 is below the first), as the active
    segment's index of a broker killed after it wrote entries does."""
    size = OFFSET_ENTRY_SIZE if kind == "index" else TIME_ENTRY_SIZE
    if kind not in ("index", "timeindex"):
        raise ValueError(f"not an index kind: {kind!r}")
    entries = file_size // size
    if entries and (len(first_slot) != size or len(last_slot) != size):
        raise ValueError(f"the first and last slots are {size} bytes each")
    if kind == "index":
        if entries:
            last = base_offset + struct.unpack(">i", last_slot[:4])[0]
            if last < base_offset:
                return (f"Corrupt index found, index file {path} has non-zero size but the last "
                        f"offset is {last} which is less than the base offset {base_offset}")
        if file_size % size:
            return (f"Index file {path} is corrupt, found {file_size} bytes which is neither "
                    f"positive nor a multiple of {size}")
        return None
    if entries:
        first_ts = struct.unpack(">q", first_slot[:8])[0]
        last_ts, last_rel = struct.unpack(">qi", last_slot)
        if last_ts < first_ts:
            return (f"Corrupt time index found, time index file ({path}) has non-zero size but "
                    f"the last timestamp is {last_ts} which is less than the first timestamp "
                    f"{first_ts}")
        if base_offset + last_rel < base_offset:
            return (f"Corrupt time index found, time index file ({path}) has non-zero size but "
                    f"the last offset is {base_offset + last_rel} which is less than the first "
                    f"offset {base_offset}")
    if file_size % size:
        return (f"Time index file {path} is corrupt, found {file_size} bytes which is neither "
                f"positive nor a multiple of {size}")
    return None


@dataclass(frozen=True)
class OffsetIndex:
    """An ``.index`` file: entries map an absolute offset to the byte position of the batch (or of
    the first batch of the append) that holds it; lookups seek there and scan forward."""

    base_offset: int
    relative_offsets: np.ndarray  # int64, valid entries only
    positions: np.ndarray  # int64
    file_size: int = 0

    @classmethod
    def parse(cls, data: bytes | memoryview, base_offset: int,
              file_size: int | None = None) -> OffsetIndex:
        """Parse index bytes; a partial trailing slot is ignored, as Kafka rounds the size down.
        ``file_size``: the file's size when ``data`` is only its beginning (the rest of a
        preallocated index is zeros and need not be read)."""
        slots = len(data) // OFFSET_ENTRY_SIZE
        table = np.frombuffer(data, dtype=_OFFSET_DTYPE, count=slots)
        n = _valid_prefix(table, "relative_offset", "position")
        return cls(base_offset, table["relative_offset"][:n].astype(np.int64),
                   table["position"][:n].astype(np.int64),
                   len(data) if file_size is None else file_size)

    @classmethod
    def from_entries(cls, base_offset: int, entries: Iterable[tuple[int, int]]) -> OffsetIndex:
        """Build from ``(absolute offset, position)`` pairs."""
        arr = np.array(list(entries), dtype=np.int64).reshape(-1, 2)
        return cls(base_offset, arr[:, 0] - base_offset, arr[:, 1].copy(),
                   arr.shape[0] * OFFSET_ENTRY_SIZE)

    def __len__(self) -> int:
        return int(self.relative_offsets.shape[0])

    @property
    def slots(self) -> int:
        """Number of entry-sized slots in the file."""
        return self.file_size // OFFSET_ENTRY_SIZE

    @property
    def preallocated(self) -> bool:
        """True when the file is longer than its entries (an active segment's index)."""
        return self.file_size > len(self) * OFFSET_ENTRY_SIZE

    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        return self.relative_offsets + self.base_offset

    def lookup(self, offset: int) -> tuple[int, int]:
        """Kafka's ``OffsetIndex.lookup``: the last entry whose offset is <= ``offset`` as
        ``(offset, position)``, or ``(base_offset, 0)`` when there is none. Scan forward from
        the position: the batch found there may start below the entry's offset."""
        i = int(np.searchsorted(self.relative_offsets, offset - self.base_offset, side="right")) - 1
        if i < 0:
            return self.base_offset, 0
        return int(self.relative_offsets[i]) + self.base_offset, int(self.positions[i])

    def problems(self, log_size: int | None = None) -> list[str]:
        """Sanity problems Kafka's ``OffsetIndex.sanityCheck`` / recovery would reject."""
        out = []
        if self.file_size % OFFSET_ENTRY_SIZE:
            out.append(f"size {self.file_size} is not a multiple of {OFFSET_ENTRY_SIZE}")
        if len(self) > 1 and not (np.all(np.diff(self.relative_offsets) > 0)
                                  and np.all(np.diff(self.positions) >= 0)):
            out.append("entries are not increasing")
        if len(self) and (self.relative_offsets[0] < 0 or self.positions[0] < 0):
            out.append("negative entry")
        if log_size is not None and len(self) and int(self.positions[-1]) >= log_size:
            out.append(f"position {int(self.positions[-1])} beyond log size {log_size}")
        return out

    def encode(self, file_size: int | None = None) -> bytes:
        """Entry bytes, zero-padded to ``file_size`` (preallocation) when given."""
        if len(self) and (self.relative_offsets.min() < 0 or self.relative_offsets.max() > _INT32_MAX
                          or self.positions.min() < 0 or self.positions.max() > _INT32_MAX):
            raise EncodeError("offset index entry does not fit in int32")
        table = np.empty(len(self), dtype=_OFFSET_DTYPE)
        table["relative_offset"] = self.relative_offsets
        table["position"] = self.positions
        return _pad(table.tobytes(), file_size)


@dataclass(frozen=True)
class TimeIndex:
    """A ``.timeindex`` file: entries map a timestamp to the last offset of the batch that carried
    the largest timestamp so far; timestamps grow strictly from entry to entry."""

    base_offset: int
    timestamps: np.ndarray  # int64
    relative_offsets: np.ndarray  # int64
    file_size: int = 0

    @classmethod
    def parse(cls, data: bytes | memoryview, base_offset: int,
              file_size: int | None = None) -> TimeIndex:
        """Parse time-index bytes; a partial trailing slot is ignored. ``file_size``: as for
        :meth:`OffsetIndex.parse`."""
        slots = len(data) // TIME_ENTRY_SIZE
        table = np.frombuffer(data, dtype=_TIME_DTYPE, count=slots)
        n = _valid_prefix(table, "timestamp", "relative_offset")
        return cls(base_offset, table["timestamp"][:n].astype(np.int64),
                   table["relative_offset"][:n].astype(np.int64),
                   len(data) if file_size is None else file_size)

    @classmethod
    def from_entries(cls, base_offset: int, entries: Iterable[tuple[int, int]]) -> TimeIndex:
        """Build from ``(timestamp, absolute offset)`` pairs."""
        arr = np.array(list(entries), dtype=np.int64).reshape(-1, 2)
        return cls(base_offset, arr[:, 0].copy(), arr[:, 1] - base_offset,
                   arr.shape[0] * TIME_ENTRY_SIZE)

    def __len__(self) -> int:
        return int(self.timestamps.shape[0])

    @property
    def slots(self) -> int:
        """Number of entry-sized slots in the file."""
        return self.file_size // TIME_ENTRY_SIZE

    @property
    def preallocated(self) -> bool:
        """True when the file is longer than its entries (an active segment's index)."""
        return self.file_size > len(self) * TIME_ENTRY_SIZE

    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (int64)."""
        return self.relative_offsets + self.base_offset

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Kafka's ``TimeIndex.lookup``: the last entry with timestamp <= ``timestamp`` as
        ``(timestamp, offset)``, or ``(-1, base_offset)`` when there is none."""
        i = int(np.searchsorted(self.timestamps, timestamp, side="right")) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return int(self.timestamps[i]), int(self.relative_offsets[i]) + self.base_offset

    def problems(self) -> list[str]:
        """Sanity problems that make the index unusable (non-increasing entries, bad size)."""
        out = []
        if self.file_size % TIME_ENTRY_SIZE:
            out.append(f"size {self.file_size} is not a multiple of {TIME_ENTRY_SIZE}")
        if len(self) > 1 and not (np.all(np.diff(self.timestamps) > 0)
                                  and np.all(np.diff(self.relative_offsets) >= 0)):
            out.append("entries are not increasing")
        return out

    def encode(self, file_size: int | None = None) -> bytes:
        """The file's bytes, as the broker writes them."""
        if len(self) and (self.relative_offsets.min() < 0 or self.relative_offsets.max() > _INT32_MAX):
            raise EncodeError("time index relative offset does not fit in int32")
        table = np.empty(len(self), dtype=_TIME_DTYPE)
        table["timestamp"] = self.timestamps
        table["relative_offset"] = self.relative_offsets
        return _pad(table.tobytes(), file_size)


def _pad(body: bytes, file_size: int | None) -> bytes:
    if file_size is None or file_size == len(body):
        return body
    if file_size < len(body):
        raise EncodeError(f"{len(body)} bytes of entries do not fit in {file_size}")
    return body + bytes(file_size - len(body))


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry: an aborted transaction of ``producer_id`` spanning
    ``first_offset..last_offset`` (the ABORT marker's offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = 0

    @classmethod
    def from_message(cls, msg: AbortedTxnMessage, version: int = 0) -> AbortedTxn:
        """From a message object of Kafka's ``AbortedTxn`` spec (``kproto.messages.AbortedTxn``)."""
        return cls(msg.producer_id, msg.first_offset, msg.last_offset, msg.last_stable_offset, version)

    def to_message(self) -> AbortedTxnMessage:
        """As a message object of Kafka's ``AbortedTxn`` spec (the entry's body)."""
        from kproto.messages import AbortedTxn as AbortedTxnMessage
        return AbortedTxnMessage(producer_id=self.producer_id, first_offset=self.first_offset,
                                 last_offset=self.last_offset, last_stable_offset=self.last_stable_offset)

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return {"version": self.version, "producer_id": self.producer_id,
                "first_offset": self.first_offset, "last_offset": self.last_offset,
                "last_stable_offset": self.last_stable_offset}


def parse_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    """Parse a ``.txnindex`` file: entries of an int16 version and an ``AbortedTxn`` body.
    Raises DecodeError on a partial entry or a version the spec does not define (as Kafka's
    ``TransactionIndex`` refuses one)."""
    if len(data) % TXN_ENTRY_SIZE:
        raise DecodeError(f"{len(data) % TXN_ENTRY_SIZE} trailing bytes", what=".txnindex",
                          offset=len(data) - len(data) % TXN_ENTRY_SIZE)
    entry, versions = _txn_entry()
    out = []
    for i, (version, pid, first, last, lso) in enumerate(entry.iter_unpack(data)):
        if version not in versions:
            raise DecodeError(f"unknown aborted transaction version {version}",
                              what=".txnindex", offset=i * TXN_ENTRY_SIZE)
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """Bytes of a ``.txnindex`` file."""
    try:
        entry = _txn_entry()[0]
        return b"".join(entry.pack(e.version, e.producer_id, e.first_offset, e.last_offset,
                                  e.last_stable_offset) for e in entries)
    except struct.error as exc:
        raise EncodeError(f"aborted transaction entry out of range: {exc}") from None


def collect_aborted(entries: Iterable[AbortedTxn], start_offset: int,
                    end_offset: int | None = None) -> Iterator[AbortedTxn]:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: entries overlapping
    ``[start_offset, end_offset)`` (``end_offset`` None = no upper bound)."""
    for e in entries:
        if e.last_offset >= start_offset and (end_offset is None or e.first_offset < end_offset):
            yield e


class IndexBuilder:
    """Kafka's index rules for one segment (``LogSegment.append``/``onBecomeInactiveSegment``),
    fed one append (one or more batches written at once) at a time.

    An offset-index entry is added when more than ``interval`` bytes were appended since the
    previous entry; it maps the append's last offset to the append's first position. The time
    index gets an entry at the same moments (and once more on close) if the largest timestamp so
    far grew.
    """

    def __init__(self, base_offset: int, interval: int = INDEX_INTERVAL_BYTES) -> None:
        self.base_offset = base_offset
        self.interval = interval
        self.offset_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self._bytes_since_entry = 0

    def append(self, position: int, size: int, last_offset: int,
               batches: Iterable[tuple[int, int]]) -> None:
        """Record an append of ``size`` bytes at ``position`` whose last offset is
        ``last_offset``; ``batches`` gives each batch's ``(max_timestamp, last_offset)``."""
        if size <= 0:
            return
        for ts, off in batches:
            if ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = ts, off
        if self._bytes_since_entry > self.interval:
            if not self.offset_entries or last_offset > self.offset_entries[-1][0]:
                self.offset_entries.append((last_offset, position))
            self._maybe_time_entry()
            self._bytes_since_entry = 0
        self._bytes_since_entry += size

    def _maybe_time_entry(self) -> None:
        last_ts = self.time_entries[-1][0] if self.time_entries else NO_TIMESTAMP
        if self.max_timestamp > last_ts:
            self.time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))

    def close(self) -> None:
        """The segment is rolled or the log closed: add the final time-index entry if new."""
        self._maybe_time_entry()

    def offset_index(self) -> OffsetIndex:
        """The offset index of the entries so far."""
        return OffsetIndex.from_entries(self.base_offset, self.offset_entries)

    def time_index(self) -> TimeIndex:
        """The time index of the entries so far."""
        return TimeIndex.from_entries(self.base_offset, self.time_entries)
