"""KRaft metadata snapshots (KIP-630): the ``<end offset>-<epoch>.checkpoint`` files of the
``__cluster_metadata-0`` folder.

A snapshot is a file of record batches as Kafka's ``RecordsSnapshotWriter`` writes it: a
control batch with the SnapshotHeader record at offset 0, the image's metadata records in
data batches from offset 1, a control batch with the SnapshotFooter record last; every batch
carries the snapshot's epoch as its partition leader epoch. Its id ``(end offset, epoch)``
says it holds the state after every record below ``end offset``, the last of them in
``epoch``. :func:`encode_snapshot` and :func:`decode_snapshot` are sans-I/O;
:class:`SnapshotStore` keeps the files of one partition folder (written as ``.part`` and
renamed when whole, as Kafka freezes a snapshot).
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional

from kproto.codecs import message
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.records.control import CONTROL_TYPE_IDS, decode_control
from kproto.records.reader import BatchReader
from kproto.storage.layout import parse_metadata_snapshot_name

__all__ = ["SnapshotId", "SnapshotStore", "encode_snapshot", "decode_snapshot",
           "snapshot_file_name", "MAX_BATCH_BYTES"]

#: KafkaRaftClient.MAX_BATCH_SIZE_BYTES: a data batch of a snapshot holds at most this much.
MAX_BATCH_BYTES = 8 * 1024 * 1024
_HEADER = CONTROL_TYPE_IDS["SNAPSHOT_HEADER"]
_FOOTER = CONTROL_TYPE_IDS["SNAPSHOT_FOOTER"]
_SUFFIX = ".checkpoint"
_PART = ".checkpoint.part"


class SnapshotId(NamedTuple):
    """Kafka's ``OffsetAndEpoch`` of a snapshot: every record below ``end_offset``, the last
    in ``epoch``."""

    end_offset: int
    epoch: int


def snapshot_file_name(sid: SnapshotId) -> str:
    """``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``, Kafka's ``Snapshots.filenameFromSnapshotId``."""
    return f"{sid.end_offset:020d}-{sid.epoch:010d}{_SUFFIX}"


def encode_snapshot(values: list[bytes], epoch: int, now_ms: int,
                    last_contained_timestamp: int) -> bytes:
    """The bytes of a snapshot of ``values`` (``__cluster_metadata`` record values)."""
    header = message("SnapshotHeaderRecord")
    footer = message("SnapshotFooterRecord")
    out: list[bytes] = []
    b = RecordBatchBuilder(base_offset=0, partition_leader_epoch=epoch, control=True)
    b.append_control(_HEADER, header.encode(header.cls(
        version=0, last_contained_log_timestamp=last_contained_timestamp), 0), now_ms)
    out.append(b.build())
    offset, size = 1, 0
    b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch)
    for v in values:
        if len(b) and size + len(v) > MAX_BATCH_BYTES:
            out.append(b.build())
            b, size = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch), 0
        b.append(now_ms, None, v)
        offset, size = offset + 1, size + len(v) + 16
    if len(b):
        out.append(b.build())
    b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=epoch, control=True)
    b.append_control(_FOOTER, footer.encode(footer.cls(version=0), 0), now_ms)
    out.append(b.build())
    return b"".join(out)


def decode_snapshot(data: bytes | memoryview) -> tuple[int, list[bytes]]:
    """``(last contained log timestamp, record values)`` of a snapshot's bytes, checked as
    Kafka's ``RecordsSnapshotReader`` reads one: SnapshotHeader first, SnapshotFooter last,
    whole batches with valid CRCs. :class:`DecodeError` otherwise."""
    header_ts: Optional[int] = None
    footer = False
    values: list[bytes] = []
    reader = BatchReader(data, verify_crc=True)
    for batch in reader:
        if not isinstance(batch, RecordBatch):
            raise DecodeError("a snapshot holds v2 record batches only", what="snapshot",
                              offset=reader.position)
        if footer:
            raise DecodeError("a batch after the SnapshotFooter", what="snapshot",
                              offset=batch.position)
        if batch.is_control:
            for r in batch.records():
                ctl = decode_control(r.key, r.value)
                if ctl.type_id == _HEADER and header_ts is None and not values:
                    header_ts = ctl.message.last_contained_log_timestamp
                elif ctl.type_id == _FOOTER and header_ts is not None:
                    footer = True
                elif ctl.type_id not in (CONTROL_TYPE_IDS["KRAFT_VERSION"],
                                         CONTROL_TYPE_IDS["KRAFT_VOTERS"]) or header_ts is None:
                    raise DecodeError(f"unexpected {ctl.type} control record in a snapshot",
                                      what="snapshot", offset=batch.position)
        else:
            if header_ts is None:
                raise DecodeError("a snapshot must start with a SnapshotHeader", what="snapshot",
                                  offset=batch.position)
            values.extend(bytes(r.value) for r in batch.records() if r.value is not None)
    if reader.trailing_bytes:
        raise DecodeError(f"{reader.trailing_bytes} bytes of a partial batch at the end",
                          what="snapshot", offset=reader.position)
    if header_ts is None or not footer:
        raise DecodeError("a snapshot must end with a SnapshotFooter" if header_ts is not None
                          else "a snapshot must start with a SnapshotHeader", what="snapshot",
                          offset=reader.position)
    return header_ts, values


class SnapshotStore:
    """The snapshots of one ``__cluster_metadata-0`` folder, oldest first. Opening drops
    unfinished ``.part`` files (a download or a write cut short), as Kafka does at start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ids: list[SnapshotId] = []
        for name in os.listdir(path) if os.path.isdir(path) else ():
            if name.endswith(_PART):
                os.unlink(os.path.join(path, name))
                continue
            sid = parse_metadata_snapshot_name(name)
            if sid is not None:
                self.ids.append(SnapshotId(*sid))
        self.ids.sort()

    @property
    def latest(self) -> Optional[SnapshotId]:
        return self.ids[-1] if self.ids else None

    @property
    def earliest(self) -> Optional[SnapshotId]:
        return self.ids[0] if self.ids else None

    def file(self, sid: SnapshotId) -> str:
        return os.path.join(self.path, snapshot_file_name(sid))

    def size(self, sid: SnapshotId) -> int:
        return os.path.getsize(self.file(sid))

    def total_size(self) -> int:
        return sum(self.size(s) for s in self.ids)

    def read(self, sid: SnapshotId, position: int = 0, max_bytes: int = -1) -> bytes:
        """``max_bytes`` bytes of the snapshot from ``position`` (all of it for -1)."""
        with open(self.file(sid), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def begin(self, sid: SnapshotId) -> str:
        """Start writing ``sid``: the path of its (emptied) ``.part`` file."""
        part = self._part(sid)
        with open(part, "wb"):
            pass
        return part

    def freeze(self, sid: SnapshotId) -> None:
        """The ``.part`` file of ``sid`` is whole: synced and renamed into place."""
        part = self._part(sid)
        with open(part, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(part, self.file(sid))
        if sid not in self.ids:
            self.ids.append(sid)
            self.ids.sort()

    def _part(self, sid: SnapshotId) -> str:
        return self.file(sid)[:-len(_SUFFIX)] + _PART

    def part_size(self, sid: SnapshotId) -> int:
        """The bytes of ``sid`` downloaded so far."""
        try:
            return os.path.getsize(self._part(sid))
        except FileNotFoundError:
            return 0

    def append_part(self, sid: SnapshotId, data: bytes) -> int:
        """Add a downloaded chunk to the ``.part`` file of ``sid``; its size now."""
        with open(self._part(sid), "ab") as f:
            f.write(data)
            return f.tell()

    def read_part(self, sid: SnapshotId) -> bytes:
        with open(self._part(sid), "rb") as f:
            return f.read()

    def delete(self, sid: SnapshotId) -> None:
        """Delete the snapshot ``sid``."""
        try:
            os.unlink(self.file(sid))
        except FileNotFoundError:
            pass
        if sid in self.ids:
            self.ids.remove(sid)

    def abandon(self, sid: SnapshotId) -> None:
        """Drop the ``.part`` file of an unfinished ``sid``."""
        try:
            os.unlink(self._part(sid))
        except FileNotFoundError:
            pass

    def write(self, sid: SnapshotId, data: bytes) -> None:
        """Write a whole snapshot (through its ``.part`` file)."""
        with open(self.begin(sid), "wb") as f:
            f.write(data)
        self.freeze(sid)

    def delete_before(self, sid: SnapshotId) -> list[SnapshotId]:
        """Delete the snapshots older than ``sid``; the ids deleted."""
        doomed = [s for s in self.ids if s < sid]
        for s in doomed:
            self.delete(s)
        return doomed

    def mtime_ms(self, sid: SnapshotId) -> int:
        return int(os.path.getmtime(self.file(sid)) * 1000)
