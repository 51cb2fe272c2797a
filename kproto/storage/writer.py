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
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Iterable

from kproto.codecs.primitives import Uuid
from kproto.errors import EncodeError
from kproto.records.batch import RecordBatch
from kproto.records.control import decode_control
from kproto.records.reader import iter_batches
from kproto.storage.checkpoints import (CleanShutdown, EpochEntry, LeaderEpochCheckpoint,
                                        MetaProperties, OffsetCheckpoint, PartitionMetadata)
from kproto.storage.indexes import (INDEX_INTERVAL_BYTES, OFFSET_ENTRY_SIZE, SEGMENT_INDEX_BYTES,
                                    TIME_ENTRY_SIZE, AbortedTxn, IndexBuilder, encode_txn_index,
                                    preallocated_size)
from kproto.storage.layout import offset_file_name, partition_dir_name
from kproto.storage.partition import batch_max_timestamp
from kproto.storage.snapshot import ProducerEntry, encode_snapshot, java_hashmap_order

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
        self.producers[pid] = ProducerEntry(
            pid, batch.producer_epoch, batch.last_sequence, batch.last_offset,
            batch.last_offset - batch.base_offset, batch.max_timestamp,
            prev.coordinator_epoch if prev else -1, self.ongoing.get(pid, -1))
        return None

    def snapshot(self) -> bytes:
        """Snapshot file bytes, entries in the broker's (HashMap) order."""
        return encode_snapshot(self.producers[p] for p in java_hashmap_order(self.producers))


@dataclass
class _Segment:
    base_offset: int
    index: IndexBuilder
    size: int = 0
    aborted: list[AbortedTxn] = field(default_factory=list)


@dataclass
class FileOp:
    """A file the log wants written: ``mode`` ``"a"`` appends, ``"w"`` (re)writes."""

    name: str
    data: bytes
    mode: str = "w"


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

    def _index_files(self, seg: _Segment, active: bool) -> list[FileOp]:
        oi, ti = seg.index.offset_index(), seg.index.time_index()
        o_size = preallocated_size(OFFSET_ENTRY_SIZE, self.segment_index_bytes) if active else None
        t_size = preallocated_size(TIME_ENTRY_SIZE, self.segment_index_bytes) if active else None
        ops = [FileOp(offset_file_name(seg.base_offset, ".index"), oi.encode(o_size)),
               FileOp(offset_file_name(seg.base_offset, ".timeindex"), ti.encode(t_size))]
        if seg.aborted:
            ops.append(FileOp(offset_file_name(seg.base_offset, ".txnindex"),
                              encode_txn_index(seg.aborted)))
        return ops

    def _roll(self, new_base: int) -> list[FileOp]:
        seg = self.segment
        seg.index.close()
        ops = self._index_files(seg, active=False)
        ops.append(FileOp(offset_file_name(new_base, ".snapshot"), self.producers.snapshot()))
        self.segment = _Segment(new_base, IndexBuilder(new_base, self.index_interval))
        ops.append(FileOp(offset_file_name(new_base, ".log"), b"", "a"))
        return ops

    def append(self, data: bytes) -> list[FileOp]:
        """Append whole batches (one broker append). Offsets must follow :attr:`next_offset`."""
        if self.closed:
            raise EncodeError("log is closed")
        batches = list(iter_batches(data))
        used = sum(b.size_in_bytes for b in batches)
        if not batches or used != len(data):
            raise EncodeError("an append must hold whole batches only")
        for b in batches:  # refuse before any state changes
            if isinstance(b, RecordBatch) and b.is_control and b.producer_id >= 0:
                txn_marker(b)
        if batches[0].base_offset < self.next_offset:
            raise EncodeError(f"offset {batches[0].base_offset} is below the log end "
                              f"{self.next_offset}")
        ops: list[FileOp] = []
        seg = self.segment
        last = batches[-1].last_offset
        # LogSegment.shouldRoll: size, a full index, or offsets too far for relative int32s
        if seg.size > 0 and (
                seg.size > self.segment_bytes - len(data)
                or len(seg.index.offset_entries) >= self.segment_index_bytes // OFFSET_ENTRY_SIZE
                or len(seg.index.time_entries) >= self.segment_index_bytes // TIME_ENTRY_SIZE
                or last - seg.base_offset > _INT32_MAX):
            ops += self._roll(batches[0].base_offset)
            seg = self.segment
        elif seg.size == 0:
            ops.append(FileOp(offset_file_name(seg.base_offset, ".log"), b"", "a"))
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
            else:
                self.epochs = []  # Kafka clears the epoch cache on a pre-v2 append
        seg.index.append(seg.size, len(data), last, stamps)
        ops.append(FileOp(offset_file_name(seg.base_offset, ".log"), data, "a"))
        seg.size += len(data)
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

    @property
    def next_offset(self) -> int:
        """The offset the next appended batch must start at (the log end offset)."""
        return self.log.next_offset

    def _apply(self, ops: Iterable[FileOp]) -> None:
        for op in ops:
            with open(os.path.join(self.path, op.name), "ab" if op.mode == "a" else "wb") as f:
                f.write(op.data)

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
