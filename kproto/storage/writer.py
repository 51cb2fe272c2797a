"""Lay out partition folders and log directories exactly as a broker does.

:class:`ProducerStateTracker` and :class:`PartitionLog` are the sans-I/O core (Kafka's
``ProducerStateManager`` and the ``UnifiedLog``/``LogSegment`` append, roll and close rules,
turning appends into file contents); :class:`PartitionWriter` and :class:`LogDirWriter` write
the files.

Appends carry batches whose offsets are already assigned (build them with
:class:`kproto.records.RecordBatchBuilder` at ``writer.next_offset``). Segments roll when the
next append would push the active segment past ``segment_bytes``; ``.index``/``.timeindex``
entries follow ``index.interval.bytes``; an ABORT marker adds a ``.txnindex`` entry to the
segment holding it; a producer snapshot is taken at every roll and at a clean close.

:meth:`PartitionLog.resume` (and :meth:`PartitionWriter.open`) continue an existing partition
folder in its last segment, as a restarted broker does; :func:`rebuild_txn_index` is the
``.txnindex`` half of a segment's recovery (:func:`kproto.storage.partition.rebuild_indexes`
is the other).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

from kproto.codecs.primitives import Uuid
from kproto.errors import DecodeError, EncodeError
from kproto.records.batch import RecordBatch
from kproto.records.control import decode_control
from kproto.records.reader import Batch, iter_batches
from kproto.storage.checkpoints import (CleanShutdown, EpochEntry, LeaderEpochCheckpoint,
                                        MetaProperties, OffsetCheckpoint, PartitionMetadata)
from kproto.storage.indexes import (INDEX_INTERVAL_BYTES, NO_TIMESTAMP, OFFSET_ENTRY_SIZE,
                                    SEGMENT_INDEX_BYTES, TIME_ENTRY_SIZE, AbortedTxn, IndexBuilder,
                                    OffsetIndex, TimeIndex, encode_txn_index, parse_txn_index,
                                    preallocated_size)
from kproto.storage.layout import offset_file_name, partition_dir_name, scan_partition_dir
from kproto.storage.partition import (LOG_START_OFFSET_CHECKPOINT, batch_max_timestamp,
                                      rebuild_indexes, scan_batches)
from kproto.storage.snapshot import (ProducerEntry, encode_snapshot, java_hashmap_order,
                                     parse_snapshot)

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
_INT32_MAX = 2**31 - 1


def txn_marker(batch: RecordBatch) -> tuple[int, int] | None:
    """``(type id, coordinator epoch)`` of the COMMIT (1) or ABORT (0) marker of a control batch;
    None for other control records. A marker without its coordinator epoch is refused: Kafka's
    ``EndTransactionMarker`` cannot be read without it."""
    recs = batch.record_list()
    ctrl = decode_control(recs[0].key, recs[0].value) if recs else None
    if ctrl is None or ctrl.type_id not in (0, 1):
        return None
    if ctrl.coordinator_epoch is None:
        raise EncodeError(f"{ctrl.type} marker at offset {batch.base_offset} has no "
                          "end-transaction value (version and coordinator epoch)")
    return ctrl.type_id, ctrl.coordinator_epoch


class ProducerStateTracker:
    """Kafka's ``ProducerStateManager`` as far as the files show it: the last batch of every
    producer, ongoing transactions, and the aborted transactions their markers complete."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    @classmethod
    def from_snapshot(cls, entries: Iterable[ProducerEntry]) -> ProducerStateTracker:
        """The state a producer snapshot holds (Kafka's ``loadFromSnapshot``)."""
        out = cls()
        for e in entries:
            out.producers[e.producer_id] = e
            if e.current_txn_first_offset >= 0:
                out.ongoing[e.producer_id] = e.current_txn_first_offset
        return out

    def append(self, batch: RecordBatch) -> AbortedTxn | None:
        """Apply one v2 batch; returns the aborted transaction an ABORT marker completes."""
        pid = batch.producer_id
        if pid < 0:
            return None
        prev = self.producers.get(pid)
        if batch.is_control:
            marker = txn_marker(batch)
            if marker is None:
                return None
            type_id, coordinator_epoch = marker
            first = self.ongoing.pop(pid, None)
            base = prev or ProducerEntry(pid, batch.producer_epoch, -1, -1, 0, -1)
            if base.producer_epoch != batch.producer_epoch:  # a new epoch forgets the batches
                base = replace(base, last_sequence=-1, last_offset=-1, offset_delta=0)
            self.producers[pid] = replace(base, producer_epoch=batch.producer_epoch,
                                          coordinator_epoch=coordinator_epoch,
                                          timestamp=batch.max_timestamp,
                                          current_txn_first_offset=-1)
            if type_id == 0 and first is not None:
                others = [o for p, o in self.ongoing.items() if p != pid]
                lso = min(others) if others else batch.last_offset + 1
                return AbortedTxn(pid, first, batch.last_offset, lso)
            return None
        if batch.is_transactional:
            self.ongoing.setdefault(pid, batch.base_offset)
        last = batch.last_offset
        self.producers[pid] = ProducerEntry(
            pid, batch.producer_epoch, batch.last_sequence, last, last - batch.base_offset,
            batch.max_timestamp, prev.coordinator_epoch if prev else -1, self.ongoing.get(pid, -1))
        return None

    def snapshot(self) -> bytes:
        """Snapshot file bytes, entries in the broker's (HashMap) order."""
        return encode_snapshot(self.producers[p] for p in java_hashmap_order(self.producers))


def rebuild_txn_index(batches: bytes | memoryview | Iterable[Batch],
                      producers: ProducerStateTracker | None = None) -> list[AbortedTxn]:
    """A segment's ``.txnindex`` entries rebuilt from its batches (a segment's bytes, or its
    batches), as Kafka's ``LogSegment.recover`` does: the producer state at the segment's
    base offset (``producers``, updated in place; None: no transaction open before it) takes
    every batch, and each ABORT marker that completes a transaction adds its entry. Encode
    them with :func:`~kproto.storage.indexes.encode_txn_index`."""
    tracker = producers if producers is not None else ProducerStateTracker()
    if isinstance(batches, (bytes, bytearray, memoryview)):
        batches = scan_batches(batches)
    out = []
    for b in batches:
        if isinstance(b, RecordBatch):
            aborted = tracker.append(b)
            if aborted is not None:
                out.append(aborted)
    return out


@dataclass
class _Segment:
    base_offset: int
    index: IndexBuilder
    size: int = 0
    aborted: list[AbortedTxn] = field(default_factory=list)
    log_name: str = ""  # its .log file's name (made once: every append names it)

    def __post_init__(self) -> None:
        self.log_name = offset_file_name(self.base_offset, ".log")


@dataclass
class FileOp:
    """A file the log wants written: ``mode`` ``"a"`` appends, ``"w"`` (re)writes; ``size``
    (``"w"`` only): the file's length, zeros after ``data`` (an active segment's preallocated
    index), left to the file system to make sparse as Java's ``RandomAccessFile.setLength``
    does, not written byte by byte."""

    name: str
    data: bytes | memoryview
    mode: str = "w"
    size: int | None = None

    def write_to(self, path: str) -> None:
        """Write a ``"w"`` op's file at ``path``."""
        with open(path, "wb") as f:
            f.write(self.data)
            if self.size is not None and self.size > len(self.data):
                f.truncate(self.size)


class AppendResult(list[FileOp]):
    """The file operations of one :meth:`PartitionLog.append` (a list, as before), and
    ``aborted``: the aborted transactions its ABORT markers completed (usually none or one)."""

    # a class default, so the usual append (no marker) makes no tuple of its own
    aborted: tuple[AbortedTxn, ...] = ()


class PartitionLog:
    """Sans-I/O partition log: :meth:`append` and :meth:`close` return the file operations
    that reproduce a broker's partition folder."""

    def __init__(self, *, base_offset: int = 0, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 index_interval: int = INDEX_INTERVAL_BYTES,
                 segment_index_bytes: int = SEGMENT_INDEX_BYTES) -> None:
        self.segment_bytes = segment_bytes
        self.index_interval = index_interval
        self.segment_index_bytes = segment_index_bytes
        self.producers = ProducerStateTracker()
        self.epochs: list[EpochEntry] = []
        self.start_offset = self.next_offset = base_offset
        self.segment = _Segment(base_offset, IndexBuilder(base_offset, index_interval))
        self.closed = False

    @classmethod
    def resume(cls, path: str, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
               index_interval: int = INDEX_INTERVAL_BYTES,
               segment_index_bytes: int = SEGMENT_INDEX_BYTES, start_offset: int | None = None,
               continuous: bool = False) -> PartitionLog:
        """Continue the partition folder ``path`` (a broker restart): the next append goes to
        its last segment, whose size, ``.index``/``.timeindex`` entries and ``.txnindex`` are
        taken from the files; the producer state is the latest usable snapshot at or below
        the log end plus the batches after it (all batches without one); leader epochs are
        ``leader-epoch-checkpoint``'s below the log end plus those the batches read start.

        As Kafka's ``LogSegment`` after a restart, the bytes since the last index entry count
        from zero and the largest timestamp so far is the last time-index entry (its final
        entry at a clean close included). ``continuous=True`` instead picks up exactly where
        an uninterrupted writer would be (the bytes since the last offset-index entry's append,
        the largest timestamp found by scanning the batches after it, the final time-index
        entry of a clean close dropped), so the files end up byte for byte those of one
        uninterrupted write.

        ``start_offset``: the log start offset (default: the folder's entry in the log dir's
        ``log-start-offset-checkpoint``, else its first segment's base offset). The last
        segment must end with a whole batch (recover a crashed folder first): DecodeError."""
        layout = scan_partition_dir(path)
        segs = [f for f in layout.segments if f.log]
        if start_offset is None:
            start_offset = _checkpoint_start(os.path.dirname(layout.path), layout.topic,
                                             layout.partition)
        first_base = segs[0].base_offset if segs else (start_offset or 0)
        base = segs[-1].base_offset if segs else first_base
        log = cls(base_offset=base, segment_bytes=segment_bytes, index_interval=index_interval,
                  segment_index_bytes=segment_index_bytes)
        log.start_offset = max(first_base, start_offset) if start_offset is not None else first_base
        if not segs:
            return log
        active = segs[-1]
        assert active.log is not None
        data = _read_file(active.log)
        try:
            batches = list(iter_batches(data))
        except DecodeError as exc:
            raise DecodeError(f"{exc.reason}: recover the folder before resuming it",
                              what=active.log, offset=exc.offset) from None
        size = sum(b.size_in_bytes for b in batches)
        if size != len(data):
            raise DecodeError(f"{len(data) - size} bytes after the last whole batch: recover the "
                              "folder before resuming it", what=active.log, offset=size)
        log.next_offset = batches[-1].last_offset + 1 if batches else base
        # producer state: the latest usable snapshot at or below the log end, then the batches
        snap_at = None
        for offset, snap_path in reversed(layout.snapshots):
            if offset > log.next_offset:
                continue
            try:
                snap = parse_snapshot(_read_file(snap_path))
            except (DecodeError, OSError):
                continue
            if snap.crc_valid:
                log.producers = ProducerStateTracker.from_snapshot(snap.entries)
                snap_at = offset
                break
        if layout.leader_epoch_checkpoint:
            try:
                entries = LeaderEpochCheckpoint.parse(
                    _read_file(layout.leader_epoch_checkpoint)).entries
                log.epochs = [e for e in entries if e.start_offset < log.next_offset]
            except (DecodeError, OSError):
                log.epochs = []
        for files in segs:
            if snap_at is not None and files is not active and files.log is not None \
                    and _next_base(segs, files) <= snap_at:
                continue  # wholly below the snapshot
            assert files.log is not None
            for b in (batches if files is active else iter_batches(_read_file(files.log))):
                if not isinstance(b, RecordBatch):
                    log.epochs = []
                    continue
                if b.partition_leader_epoch >= 0 and (
                        not log.epochs or b.partition_leader_epoch > log.epochs[-1].epoch):
                    log.epochs.append(EpochEntry(b.partition_leader_epoch, b.base_offset))
                if snap_at is None or b.base_offset >= snap_at:
                    log.producers.append(b)
        log.segment = _Segment(base, _resumed_index(active, data, batches, index_interval,
                                                    continuous), len(data))
        if active.txnindex:
            log.segment.aborted = parse_txn_index(_read_file(active.txnindex))
        return log

    def _index_files(self, seg: _Segment, active: bool) -> list[FileOp]:
        oi, ti = seg.index.offset_index(), seg.index.time_index()
        o_size = preallocated_size(OFFSET_ENTRY_SIZE, self.segment_index_bytes) if active else None
        t_size = preallocated_size(TIME_ENTRY_SIZE, self.segment_index_bytes) if active else None
        ops = [FileOp(offset_file_name(seg.base_offset, ".index"), _entries(oi, o_size), size=o_size),
               FileOp(offset_file_name(seg.base_offset, ".timeindex"), _entries(ti, t_size), size=t_size)]
        if seg.aborted:
            ops.append(FileOp(offset_file_name(seg.base_offset, ".txnindex"),
                              encode_txn_index(seg.aborted)))
        return ops

    def roll(self, new_base: int | None = None) -> list[FileOp]:
        """Close the active segment and start a new one at ``new_base`` (default: the log end),
        as Kafka's ``UnifiedLog.roll``: the closed segment's indexes trimmed with their final
        time-index entry, a producer snapshot at the new base, the new empty ``.log``. Nothing
        (an empty list) when the active segment is empty."""
        if self.closed:
            raise EncodeError("log is closed")
        new_base = self.next_offset if new_base is None else new_base
        if new_base < self.next_offset:
            raise EncodeError(f"a new segment at {new_base} would start below the log end "
                              f"{self.next_offset}")
        if self.segment.size == 0:
            return []
        return self._roll(new_base)

    def _roll(self, new_base: int) -> list[FileOp]:
        seg = self.segment
        seg.index.close()
        ops = self._index_files(seg, active=False)
        ops.append(FileOp(offset_file_name(new_base, ".snapshot"), self.producers.snapshot()))
        self.segment = _Segment(new_base, IndexBuilder(new_base, self.index_interval))
        ops.append(FileOp(offset_file_name(new_base, ".log"), b"", "a"))
        return ops

    def append(self, data: bytes | memoryview, batches: Sequence[Batch] | None = None) -> AppendResult:
        """Append whole batches (one broker append). Offsets must follow :attr:`next_offset`.
        Returns the file operations, with the aborted transactions the append's ABORT markers
        completed as ``.aborted``. ``batches``: ``data`` already parsed (the caller's read of
        exactly these bytes), so they are not read again."""
        if self.closed:
            raise EncodeError("log is closed")
        if batches is None:
            batches = list(iter_batches(data))
        size = len(data)
        used = 0
        for b in batches:
            used += b.size_in_bytes
        if not batches or used != size:
            raise EncodeError("an append must hold whole batches only")
        for b in batches:  # refuse before any state changes
            if isinstance(b, RecordBatch) and b.is_control and b.producer_id >= 0:
                txn_marker(b)
        if batches[0].base_offset < self.next_offset:
            raise EncodeError(f"offset {batches[0].base_offset} is below the log end "
                              f"{self.next_offset}")
        ops = AppendResult()
        seg = self.segment
        last = batches[-1].last_offset
        # LogSegment.shouldRoll: size, a full index, or offsets too far for relative int32s
        if seg.size > 0 and (
                seg.size > self.segment_bytes - size
                or len(seg.index.offset_entries) >= self.segment_index_bytes // OFFSET_ENTRY_SIZE
                or len(seg.index.time_entries) >= self.segment_index_bytes // TIME_ENTRY_SIZE
                or last - seg.base_offset > _INT32_MAX):
            ops += self._roll(batches[0].base_offset)
            seg = self.segment
        elif seg.size == 0:
            ops.append(FileOp(seg.log_name, b"", "a"))
        if last - seg.base_offset > _INT32_MAX:
            raise EncodeError("an append spans more than 2^31 offsets")
        stamps = []
        for b in batches:
            stamps.append((batch_max_timestamp(b), b.last_offset))
            if isinstance(b, RecordBatch):
                if b.partition_leader_epoch >= 0 and (
                        not self.epochs or b.partition_leader_epoch > self.epochs[-1].epoch):
                    self.epochs.append(EpochEntry(b.partition_leader_epoch, b.base_offset))
                aborted = self.producers.append(b)
                if aborted is not None:
                    seg.aborted.append(aborted)
                    ops.aborted += (aborted,)
            else:
                self.epochs = []  # Kafka clears the epoch cache on a pre-v2 append
        seg.index.append(seg.size, size, last, stamps)
        ops.append(FileOp(seg.log_name, data, "a"))
        if ops.aborted:
            # Kafka appends the entries once the ABORT markers are in the log, so a reader of a
            # live directory sees the active segment's aborted transactions too
            ops.append(FileOp(offset_file_name(seg.base_offset, ".txnindex"),
                              encode_txn_index(ops.aborted), "a"))
        seg.size += size
        self.next_offset = last + 1
        return ops

    def leader_epoch_checkpoint(self) -> bytes:
        """``leader-epoch-checkpoint`` bytes for the epochs seen so far."""
        return LeaderEpochCheckpoint(list(self.epochs)).encode()

    def close(self, clean: bool = True) -> list[FileOp]:
        """Final files. ``clean=False`` leaves them as a crash would: active indexes still
        preallocated, no snapshot at the log end."""
        self.closed = True
        seg = self.segment
        if clean:
            seg.index.close()
        ops = self._index_files(seg, active=not clean)
        if seg.size == 0:
            ops.append(FileOp(offset_file_name(seg.base_offset, ".log"), b"", "a"))
        if clean:
            ops.append(FileOp(offset_file_name(self.next_offset, ".snapshot"),
                              self.producers.snapshot()))
        ops.append(FileOp("leader-epoch-checkpoint", self.leader_epoch_checkpoint()))
        return ops


def _entries(index: Any, file_size: int | None) -> bytes:
    """An index's entry bytes, checked to fit the preallocated ``file_size``."""
    body = index.encode(None)
    if file_size is not None and len(body) > file_size:
        raise EncodeError(f"{len(body)} bytes of index entries do not fit in {file_size}")
    return body


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _next_base(segs: list, files) -> int:
    i = segs.index(files)
    return segs[i + 1].base_offset if i + 1 < len(segs) else 2**63 - 1


def _checkpoint_start(log_dir: str, topic: str, partition: int) -> int | None:
    path = os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
    try:
        entries = OffsetCheckpoint.parse(_read_file(path)).entries
    except (OSError, DecodeError):
        return None
    return next((o for t, p, o in entries if (t, p) == (topic, partition)), None)


def _resumed_index(files, data: bytes, batches: list[Batch], interval: int,
                   continuous: bool) -> IndexBuilder:
    """The index builder of a resumed active segment (see :meth:`PartitionLog.resume`)."""
    base = files.base_offset
    oi = ti = None
    try:
        if files.index:
            oi = OffsetIndex.parse(_read_file(files.index), base)
        if files.timeindex:
            ti = TimeIndex.parse(_read_file(files.timeindex), base)
    except (DecodeError, OSError):
        oi = ti = None
    if oi is None or ti is None or oi.problems(len(data)) or ti.problems():
        oi, ti = rebuild_indexes(data, base, active=True, interval=interval)
    b = IndexBuilder(base, interval)
    b.offset_entries = [(int(o), int(p)) for o, p in zip(oi.offsets, oi.positions)]
    b.time_entries = [(int(t), int(o)) for t, o in zip(ti.timestamps, ti.offsets)]
    if not continuous:
        # Kafka's LogSegment as loaded: bytesSinceLastIndexEntry = 0, the max timestamp so far
        # is the time index's last entry ((-1, base offset) when it has none)
        b.max_timestamp, b.offset_of_max_timestamp = b.time_entries[-1] if b.time_entries \
            else (NO_TIMESTAMP, base)
        return b
    last_off, last_pos = b.offset_entries[-1] if b.offset_entries else (None, 0)
    # a time entry past the last offset-index entry's append was added by a clean close
    if b.time_entries and (last_off is None or b.time_entries[-1][1] > last_off):
        b.time_entries.pop()
    if b.time_entries:
        b.max_timestamp, b.offset_of_max_timestamp = b.time_entries[-1]
    for batch in batches:
        if batch.position >= last_pos and batch_max_timestamp(batch) > b.max_timestamp:
            b.max_timestamp, b.offset_of_max_timestamp = batch_max_timestamp(batch), batch.last_offset
    b._bytes_since_entry = len(data) - last_pos
    return b


class PartitionWriter:
    """Writes one partition folder ``<log dir>/<topic>-<partition>``."""

    def __init__(self, log_dir: str, topic: str, partition: int, *, topic_id: str | bytes | None = None,
                 **log_options) -> None:
        self.topic, self.partition = topic, partition
        self.path = os.path.join(log_dir, partition_dir_name(topic, partition))
        os.makedirs(self.path, exist_ok=True)
        self.log = PartitionLog(**log_options)
        if topic_id is None:
            topic_id = os.urandom(16)
        self.topic_id = str(Uuid(topic_id))  # Kafka's base64url form
        self._apply([FileOp("partition.metadata", PartitionMetadata(self.topic_id).encode())])

    @classmethod
    def open(cls, log_dir: str, topic: str, partition: int, **resume_options) -> PartitionWriter:
        """Continue an existing partition folder (see :meth:`PartitionLog.resume`, which takes
        ``resume_options``); its ``partition.metadata`` is kept."""
        self = cls.__new__(cls)
        self.topic, self.partition = topic, partition
        self.path = os.path.join(log_dir, partition_dir_name(topic, partition))
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"{self.path}: no such partition folder")
        self.log = PartitionLog.resume(self.path, **resume_options)
        try:
            self.topic_id = PartitionMetadata.parse(
                _read_file(os.path.join(self.path, "partition.metadata"))).topic_id
        except OSError:
            self.topic_id = str(Uuid(os.urandom(16)))
            self._apply([FileOp("partition.metadata", PartitionMetadata(self.topic_id).encode())])
        return self

    @property
    def next_offset(self) -> int:
        """The offset the next appended batch must start at (the log end offset)."""
        return self.log.next_offset

    def _apply(self, ops: Iterable[FileOp]) -> None:
        for op in ops:
            if op.mode == "a":
                with open(os.path.join(self.path, op.name), "ab") as f:
                    f.write(op.data)
            else:
                op.write_to(os.path.join(self.path, op.name))

    def append(self, data: bytes) -> None:
        """Append whole batches (see :meth:`PartitionLog.append`)."""
        self._apply(self.log.append(data))

    def close(self, clean: bool = True) -> None:
        """Finish the files (``clean=False``: leave them as a crashed broker would)."""
        self._apply(self.log.close(clean))


class LogDirWriter:
    """Writes a log directory: ``meta.properties``, partitions, and at a clean close the
    root checkpoints and ``.kafka_cleanshutdown``."""

    def __init__(self, path: str, *, cluster_id: str, node_id: int = 1,
                 directory_id: str | None = None, created: float | None = None,
                 **log_options) -> None:
        """``created``: the time written in ``meta.properties``' date comment (default now)."""
        self.path = path
        self.log_options = log_options
        self.partitions: dict[tuple[str, int], PartitionWriter] = {}
        os.makedirs(path, exist_ok=True)
        props = {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id),
                 "directory.id": directory_id or str(Uuid(os.urandom(16)))}
        with open(os.path.join(path, "meta.properties"), "wb") as f:
            f.write(MetaProperties(props).encode(created))

    def partition(self, topic: str, partition: int, **kw) -> PartitionWriter:
        """The writer of a partition, created on first use."""
        key = (topic, partition)
        if key not in self.partitions:
            self.partitions[key] = PartitionWriter(self.path, topic, partition,
                                                   **{**self.log_options, **kw})
        return self.partitions[key]

    def close(self, clean: bool = True, broker_epoch: int = 1) -> None:
        """Finish the files (``clean=False``: leave them as a crashed broker would)."""
        for w in self.partitions.values():
            w.close(clean)
        if not clean:
            return
        keys = sorted(self.partitions)
        ends = [(t, p, self.partitions[(t, p)].next_offset) for t, p in keys]
        files = {"recovery-point-offset-checkpoint": ends, "replication-offset-checkpoint": ends,
                 "log-start-offset-checkpoint": [(t, p, self.partitions[(t, p)].log.start_offset)
                                                 for t, p in keys]}
        for name, entries in files.items():
            with open(os.path.join(self.path, name), "wb") as f:
                f.write(OffsetCheckpoint(entries).encode())
        with open(os.path.join(self.path, ".kafka_cleanshutdown"), "wb") as f:
            f.write(CleanShutdown(broker_epoch).encode())
