"""Producer-state ``.snapshot`` files (Kafka's ``ProducerStateManager`` snapshot, version 1).

Layout: ``int16 version, uint32 crc, int32 count`` then ``count`` 46-byte producer entries; the
CRC-32C covers every byte after the crc field. The file name's offset is the log end offset when
the snapshot was taken.
"""
from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Iterable

import construct as cs
import crc32c

from kproto.errors import DecodeError, EncodeError
from kproto.javahash import java_hash_order, java_long_hash

SNAPSHOT_VERSION = 1
_HEADER_SIZE = 10  # version + crc + count
_CRC_END = 6  # the crc covers bytes from here on

_ENTRY = cs.Struct(
    "producer_id" / cs.Int64sb,
    "producer_epoch" / cs.Int16sb,
    "last_sequence" / cs.Int32sb,
    "last_offset" / cs.Int64sb,
    "offset_delta" / cs.Int32sb,
    "timestamp" / cs.Int64sb,
    "coordinator_epoch" / cs.Int32sb,
    "current_txn_first_offset" / cs.Int64sb,
)
ENTRY_SIZE = _ENTRY.sizeof()
_HEADER = cs.Struct("version" / cs.Int16sb, "crc" / cs.Int32ub, "count" / cs.Int32sb)


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """The state of one producer at snapshot time (-1 = none for the optional fields)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return {"type": "producer", "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "last_sequence": self.last_sequence,
                "last_offset": self.last_offset, "offset_delta": self.offset_delta,
                "timestamp": self.timestamp, "coordinator_epoch": self.coordinator_epoch,
                "current_txn_first_offset": self.current_txn_first_offset}


@dataclass(frozen=True)
class ProducerSnapshot:
    """A parsed snapshot; ``crc_valid`` tells whether the stored CRC matched (Kafka refuses a
    snapshot whose CRC does not)."""

    entries: list[ProducerEntry] = field(default_factory=list)
    version: int = SNAPSHOT_VERSION
    crc: int = 0
    crc_valid: bool = True
    file_size: int = 0

    def header_json(self, offset: int) -> dict:
        """The ``snapshot_file`` line of the fixtures' JSON form."""
        return {"type": "snapshot_file", "offset": offset, "file_size": self.file_size,
                "version": self.version, "crc": self.crc, "entries": len(self.entries)}


def parse_snapshot(data: bytes | memoryview) -> ProducerSnapshot:
    """Parse snapshot bytes. Raises DecodeError on a wrong version, a bad count or trailing
    bytes; a CRC mismatch is reported through ``crc_valid``."""
    data = bytes(data)
    if len(data) < _HEADER_SIZE:
        raise DecodeError(f"{len(data)} bytes, shorter than the {_HEADER_SIZE}-byte header",
                          what=".snapshot", offset=0)
    head = _HEADER.parse(data)
    if head.version != SNAPSHOT_VERSION:
        raise DecodeError(f"unsupported snapshot version {head.version}", what=".snapshot",
                          path="version", offset=0)
    body = len(data) - _HEADER_SIZE
    if head.count < 0 or head.count * ENTRY_SIZE != body:
        raise DecodeError(f"count {head.count} does not match {body} bytes of entries",
                          what=".snapshot", path="count", offset=6)
    entries = [ProducerEntry(**{k: v for k, v in e.items() if not k.startswith("_")})
               for e in cs.Array(head.count, _ENTRY).parse(data[_HEADER_SIZE:])]
    crc = crc32c.crc32c(data[_CRC_END:])
    return ProducerSnapshot(entries, head.version, head.crc, crc == head.crc, len(data))


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Snapshot bytes for ``entries`` in the given order (see :func:`java_hashmap_order` for the
    order a broker writes them in)."""
    entries = list(entries)
    try:
        body = cs.Int32sb.build(len(entries)) + b"".join(
            _ENTRY.build(dict(zip(_ENTRY_FIELDS, astuple(e)))) for e in entries)
    except (cs.ConstructError, OverflowError) as exc:
        raise EncodeError(f"producer entry out of range: {exc}") from None
    return cs.Int16sb.build(SNAPSHOT_VERSION) + cs.Int32ub.build(crc32c.crc32c(body)) + body


_ENTRY_FIELDS = [sc.name for sc in _ENTRY.subcons]


def java_hashmap_order(keys: Iterable[int]) -> list[int]:
    """Iteration order of a ``java.util.HashMap<Long, _>`` filled with ``keys`` in that order.

    The broker writes snapshot entries in the order of its producer map; reproducing it makes
    our snapshots byte-identical to a broker's. (Buckets beyond 8 entries turn into trees in
    Java; with distinct producer ids that needs pathological ids, so it is not modelled.)
    """
    return java_hash_order(dict.fromkeys(keys), java_long_hash)
