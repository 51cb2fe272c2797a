"""Partition logs of the broker: append with validation, reads, recovery (sans-I/O core plus
plain file I/O; no sockets).

The files are laid out by :class:`kproto.storage.writer.PartitionLog` (segments, indexes,
producer snapshots, epochs): this module decides *what* to append and applies the file
operations it returns. Each append is validated as Kafka's ``LogValidator`` does for a v2
batch and patched in place (base offset, partition leader epoch, the max timestamp and
timestamp type where the topic's ``message.timestamp.type`` asks, then the CRC), never
re-encoded. Idempotent producers are checked as ``ProducerStateManager`` does (the last five
batches of each producer are remembered; a duplicate gets its original offsets back).

Reads find a batch through an in-memory table of every batch's last offset and position
(the broker is for tests and tools: one entry per batch is cheap) and return whole batches.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np
from crc32c import crc32c

from kproto.codecs.primitives import INT64_MAX, Uuid
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError
from kproto.records.batch import CRC_START, HEADER_SIZE, RecordBatch, header_problem
from kproto.records.columns import check_records, validate_and_assign_offsets
from kproto.records.control import decode_control
from kproto.records.reader import Batch, BatchReader
from kproto.records.record import ATTR_TIMESTAMP_TYPE, increment_sequence
from kproto.storage.checkpoints import (CleanShutdown, EpochEntry, LeaderEpochCheckpoint,
                                        MetaProperties, OffsetCheckpoint, PartitionMetadata)
from kproto.storage.indexes import IndexBuilder, encode_txn_index
from kproto.storage.layout import (offset_file_name, parse_offset_file_name, parse_partition_dir_name,
                                   partition_dir_name, scan_partition_dir)
from kproto.storage.writer import FileOp, PartitionLog, ProducerStateTracker, rebuild_txn_index

__all__ = ["BrokerError", "LogConfig", "AppendInfo", "Log", "LogManager", "Topic", "FileRegion",
           "topic_name_error", "replace_file", "finish_interrupted_swaps"]

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def replace_file(path: str, data: bytes) -> None:
    """Write ``path`` whole through a temporary file, synced before the rename, as Kafka writes
    its checkpoint files: a crash leaves the old file or the new one, never half of one."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def finish_interrupted_swaps(path: str) -> list[str]:
    """Finish or undo a segment swap a crash interrupted, as Kafka's ``LogLoader`` does before
    loading a partition: ``.deleted`` files are removed; ``.cleaned`` files too, with every
    ``.swap`` file at or above the lowest ``.cleaned`` offset (an unfinished swap: the old
    segments are still whole); the remaining ``.swap`` segments replace the files whose offsets
    fall in their range and lose their suffix. Returns what was done."""
    done: list[str] = []
    names = sorted(os.listdir(path))
    min_cleaned = None
    swaps = []
    for name in names:
        full = os.path.join(path, name)
        if name.endswith(".deleted"):
            os.unlink(full)
            done.append(f"{name}: removed")
        elif name.endswith(".cleaned"):
            off = _name_offset(name)
            if off is not None:
                min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
            os.unlink(full)
            done.append(f"{name}: removed")
        elif name.endswith(".swap"):
            swaps.append(name)
    valid = []
    for name in swaps:
        off = _name_offset(name)
        if off is None or (min_cleaned is not None and off >= min_cleaned):
            os.unlink(os.path.join(path, name))
            done.append(f"{name}: removed (an unfinished swap)")
        else:
            valid.append(name)
    lo, hi = None, None
    for name in valid:
        if not name.endswith(".log.swap"):
            continue
        base = _name_offset(name)
        assert base is not None
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        nxt = base
        try:
            for b in BatchReader(data):
                nxt = b.last_offset + 1
        except DecodeError:
            pass
        lo = base if lo is None else min(lo, base)
        hi = nxt if hi is None else max(hi, nxt)
    if lo is not None and hi is not None:
        for name in sorted(os.listdir(path)):
            off = _name_offset(name)
            if not name.endswith(".swap") and off is not None and lo <= off < hi:
                os.unlink(os.path.join(path, name))
                done.append(f"{name}: removed (replaced by a swap segment)")
    for name in valid:
        os.replace(os.path.join(path, name), os.path.join(path, name[:-len(".swap")]))
        done.append(f"{name}: renamed")
    return done


def _name_offset(name: str) -> Optional[int]:
    head = name.split(".", 1)[0]
    return int(head) if len(head) == 20 and head.isdigit() else None


def topic_name_error(name: str) -> Optional[str]:
    """Kafka's ``Topic.validate``: why ``name`` is not a legal topic name, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > 249:
        return f"Topic name is illegal, it can't be longer than 249 characters, topic name: {name}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                "alphanumerics, '.', '_' and '-'")
    return None

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
# byte positions in a v2 batch header
_PLE_AT, _CRC_AT, _ATTR_AT, _MAX_TS_AT = 12, 17, 21, 35
#: Kafka's ProducerStateManager.NUM_BATCHES_TO_RETAIN: duplicates are found among these.
NUM_BATCHES_TO_RETAIN = 5


#: KRaft's metadata topic: its partition folder belongs to the Raft replica, not to the logs.
METADATA_TOPIC = "__cluster_metadata"


class BrokerError(Exception):
    """A request-level failure with the Kafka error code to answer."""

    def __init__(self, code: int, message: Optional[str] = None,
                 record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = int(code)
        self.message = message
        #: (batch index, message) of each refused record (Produce v8+ answers them)
        self.record_errors = list(record_errors)


@dataclass
class LogConfig:
    """The topic configs the log obeys (Kafka's names in :data:`CONFIG_NAMES`)."""

    segment_bytes: int = 1024 * 1024 * 1024
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    message_timestamp_type: str = "CreateTime"
    timestamp_before_max_ms: int = INT64_MAX
    timestamp_after_max_ms: int = 3_600_000  # Kafka 4.0+ refuses stamps over an hour ahead
    max_message_bytes: int = 1048588
    compacted: bool = False  # cleanup.policy includes compact: every record needs a key

    def with_overrides(self, configs: Mapping[str, Optional[str]]) -> LogConfig:
        """A copy with topic configs applied; :class:`BrokerError` (INVALID_CONFIG) on a bad
        value. Unknown names are kept by the topic but change nothing here."""
        out = LogConfig(**self.__dict__)
        for name, value in configs.items():
            attr = CONFIG_NAMES.get(name)
            if attr is None or value is None:
                continue
            if attr == "compacted":
                out.compacted = "compact" in (p.strip() for p in value.split(","))
                continue
            if attr == "message_timestamp_type":
                if value not in ("CreateTime", "LogAppendTime"):
                    raise BrokerError(ErrorCode.INVALID_CONFIG,
                                      f"Invalid value {value} for configuration {name}")
                out.message_timestamp_type = value
                continue
            try:
                number = int(value)
            except ValueError:
                raise BrokerError(ErrorCode.INVALID_CONFIG,
                                  f"Invalid value {value} for configuration {name}: Not a number "
                                  "of type LONG") from None
            if number < 0 or (attr == "segment_bytes" and number < 14):
                raise BrokerError(ErrorCode.INVALID_CONFIG,
                                  f"Invalid value {value} for configuration {name}")
            setattr(out, attr, number)
        return out


CONFIG_NAMES = {
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "timestamp_after_max_ms",
    "max.message.bytes": "max_message_bytes",
    "cleanup.policy": "compacted",
}


@dataclass(frozen=True)
class AppendInfo:
    """What an append did: offsets assigned (or found, for a duplicate)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime (a duplicate: its batch's max timestamp)
    log_start_offset: int
    duplicate: bool = False


@dataclass
class _BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class _ProducerState:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1  # of the last transaction marker (fences older coordinators)


def _marker_coordinator_epoch(batch: RecordBatch) -> int:
    """The coordinator epoch in a control batch's end-transaction marker (-1 if none)."""
    recs = batch.record_list()
    try:
        ctrl = decode_control(recs[0].key, recs[0].value) if recs else None
    except DecodeError:
        return -1
    return -1 if ctrl is None or ctrl.coordinator_epoch is None else ctrl.coordinator_epoch


class FileRegion:
    """``count`` bytes of a segment file from ``offset``, not read: what a Fetch answer holds
    in place of the records when the connection sends them with ``sendfile`` (Kafka's
    ``FileRecords`` slice in its zero-copy ``Send``). It owns a duplicate of the segment's
    descriptor, so a segment deleted or replaced meanwhile (retention, compaction) still sends
    its bytes; the sender closes it. ``bytes(region)`` reads the bytes (an encoder that must copy)."""

    __slots__ = ("fd", "offset", "count")

    def __init__(self, fd: int, offset: int, count: int) -> None:
        self.fd: Optional[int] = fd
        self.offset = offset
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __bytes__(self) -> bytes:
        if self.fd is None:
            raise ValueError("the file region is closed")
        data = os.pread(self.fd, self.count, self.offset)
        if len(data) != self.count:  # the file shrank under it (truncated)
            raise OSError(f"file region of {self.count} bytes at {self.offset}: {len(data)} left")
        return data

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # an answer dropped unsent (its connection closed)
        try:
            self.close()
        except Exception:  # at interpreter exit
            pass

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, offset={self.offset}, count={self.count})"


def _global_start(seg: _Seg) -> int:
    return seg.global_start


@dataclass
class _Seg:
    base_offset: int
    path: str
    global_start: int  # byte position of the segment's start in the log's concatenation
    size: int = 0
    fd: Optional[int] = None

    def _open(self) -> int:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDONLY)
        return self.fd

    def pread(self, pos: int, n: int) -> bytes:
        return os.pread(self._open(), n, pos)

    def region(self, pos: int, n: int) -> FileRegion:
        return FileRegion(os.dup(self._open()), pos, n)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _checks_timestamps(config: LogConfig) -> bool:
    """Whether the topic bounds its records' create times (KIP-937's before/after limits)."""
    return config.message_timestamp_type == "CreateTime" and (
        config.timestamp_before_max_ms < INT64_MAX or config.timestamp_after_max_ms < INT64_MAX)


def _validate(batch: RecordBatch, config: LogConfig, now_ms: int, where: str = "") -> tuple[int, int]:
    """Kafka's ``LogValidator`` checks of a client's v2 batch; returns (max timestamp, offset
    delta of the record holding it). Records are decoded (decompressed) to be checked."""
    if batch.is_control:
        raise BrokerError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records")
    if batch.count != batch.last_offset_delta + 1 or batch.count <= 0:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"Record count {batch.count} does not match the last offset delta "
                          f"{batch.last_offset_delta}")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"Invalid sequence number {batch.base_sequence} in record batch "
                          f"with producerId {batch.producer_id}")
    check_ts = _checks_timestamps(config)
    # one pass that builds nothing (a fixed cost per produced batch); when a check fails, the
    # columns below find which and say so
    passed = check_records(batch, now_ms, config.timestamp_before_max_ms,
                           config.timestamp_after_max_ms, check_timestamps=check_ts,
                           need_keys=config.compacted)
    if passed is not None:
        return passed
    try:
        cols = batch.columns()  # bulk (columnar) decoding: no object per record
    except DecodeError as exc:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt: {exc}") from None
    n = len(cols)
    if n != batch.count:
        raise BrokerError(ErrorCode.CORRUPT_MESSAGE,
                          f"Record batch has {n} records, its header says {batch.count}")
    deltas = cols.offset - batch.base_offset
    if not np.array_equal(deltas, np.arange(n)):
        bad = int(np.flatnonzero(deltas != np.arange(n))[0])
        raise BrokerError(ErrorCode.INVALID_RECORD,
                          f"Record offset delta {int(deltas[bad])} should be {bad}")
    if config.compacted:
        keyless = np.flatnonzero(cols.key_length < 0)
        if len(keyless):
            errors = [(int(i), f"Compacted topic cannot accept message without key in topic partition {where}")
                      for i in keyless]
            raise BrokerError(ErrorCode.INVALID_RECORD,
                              f"One or more records have been rejected due to {len(errors)} record errors "
                              "in total, and only showing the first three errors at most: "
                              f"{[f'RecordError(batchIndex={i}, message={m})' for i, m in errors[:3]]}",
                              errors)
    # under LogAppendTime the decoded stamps are the batch's max: the producer's own are lost
    # to the broker as well, so the base timestamp stands for them
    ts = cols.timestamp if batch.timestamp_type == 0 else np.full(n, batch.first_timestamp)
    if check_ts:
        late = (now_ms - ts) > config.timestamp_before_max_ms
        early = (ts - now_ms) > config.timestamp_after_max_ms
        bad_ts = np.flatnonzero(late | early)
        if len(bad_ts):
            i = int(bad_ts[0])
            raise BrokerError(ErrorCode.INVALID_TIMESTAMP,
                              f"Timestamp {int(ts[i])} of message with offset {int(cols.offset[i])} "
                              "is out of range")
    max_delta = int(np.argmax(ts))
    max_ts = int(ts[max_delta])
    return max_ts, max_delta


def _one_batch(records: bytes | memoryview) -> Optional[RecordBatch]:
    """The v2 batch that is all of ``records``, when it reads as :class:`BatchReader` would
    read it without complaint (one batch, nothing after it); None otherwise. A produce
    request's records usually are exactly that: read once, without the reader's loop."""
    n = len(records)
    if n < HEADER_SIZE or records[16] != 2 or _I32.unpack_from(records, 8)[0] + 12 != n:
        return None
    try:
        batch = RecordBatch(records)
    except DecodeError:
        return None
    return None if header_problem(batch.attributes, batch.count, n) else batch


def patch_batch(buf: bytearray, base_offset: int, leader_epoch: int,
                timestamp: Optional[tuple[int, int]]) -> None:
    """Kafka's in-place offset assignment: base offset and partition leader epoch (outside the
    CRC), then, when ``timestamp`` = (type, max timestamp) differs from the header, the
    attributes and max timestamp, and the CRC over attributes..end recomputed."""
    _I64.pack_into(buf, 0, base_offset)
    _I32.pack_into(buf, _PLE_AT, leader_epoch)
    if timestamp is None:
        return
    ts_type, max_ts = timestamp
    attrs = _I16.unpack_from(buf, _ATTR_AT)[0]
    new_attrs = (attrs | ATTR_TIMESTAMP_TYPE) if ts_type == 1 else (attrs & ~ATTR_TIMESTAMP_TYPE)
    if new_attrs == attrs and _I64.unpack_from(buf, _MAX_TS_AT)[0] == max_ts:
        return
    _I16.pack_into(buf, _ATTR_AT, new_attrs)
    _I64.pack_into(buf, _MAX_TS_AT, max_ts)
    _U32.pack_into(buf, _CRC_AT, crc32c(memoryview(buf)[CRC_START:]))


class Log:
    """One partition: its folder, the storage ``PartitionLog`` writing it, and what reads
    need in memory. Single replica: the high watermark is the log end offset."""

    def __init__(self, path: str, topic: str, partition: int, topic_id: Uuid, config: LogConfig,
                 *, recover: bool = False, start_offset: Optional[int] = None) -> None:
        self.path, self.topic, self.partition = path, topic, partition
        self.topic_id = topic_id
        self.config = config
        self.leader_epoch = 0
        self.segments: list[_Seg] = []
        self.last_offsets: list[int] = []     # per batch, ascending
        self.positions: list[int] = []        # per batch: global byte position
        self.max_timestamps: list[int] = []   # per batch
        self.total_bytes = 0
        self.max_timestamp = (-1, -1)          # (timestamp, offset) of the largest so far
        self.producers: dict[int, _ProducerState] = {}
        # aborted transactions (producer id, first offset, last offset = the ABORT marker's),
        # in marker order: what read_committed fetches list (Kafka reads them from .txnindex)
        self.aborted: list[tuple[int, int, int]] = []
        self.recovery: list[str] = []  # what recovery truncated or deleted
        self._append_fds: dict[str, int] = {}
        # None: a single replica, whose high watermark is its log end; a replicated partition
        # has it set by its leader's rule (kproto.broker.cluster.replica)
        self._high_watermark: Optional[int] = None
        self._open(recover, start_offset)

    def _open(self, recover: bool, start_offset: Optional[int], base_offset: int = 0) -> None:
        path, config = self.path, self.config
        self.segments = []
        self.last_offsets, self.positions, self.max_timestamps = [], [], []
        self.total_bytes = 0
        self.max_timestamp = (-1, -1)
        self.producers = {}
        self.aborted = []
        os.makedirs(path, exist_ok=True)
        next_offset = base_offset
        epochs: list = []
        if recover:
            next_offset, epochs = self._recover()
            # appends go on in the last (recovered) segment, as Kafka's do after a restart
            self.plog = PartitionLog.resume(
                path, start_offset=start_offset, segment_bytes=config.segment_bytes,
                index_interval=config.index_interval_bytes,
                segment_index_bytes=config.segment_index_bytes)
            self._replay_producer_state()
            self.plog.epochs = epochs
        else:
            self.plog = PartitionLog(base_offset=next_offset, segment_bytes=config.segment_bytes,
                                     index_interval=config.index_interval_bytes,
                                     segment_index_bytes=config.segment_index_bytes)
        self.plog.start_offset = self.segments[0].base_offset if self.segments else next_offset
        if start_offset is not None and start_offset > self.plog.start_offset:
            self.plog.start_offset = min(start_offset, next_offset)
        if not recover or not os.path.exists(os.path.join(path, "partition.metadata")):
            self._apply([FileOp("partition.metadata", PartitionMetadata(str(self.topic_id)).encode())])

    # ------------------------------------------------------------------------ offsets
    @property
    def log_end_offset(self) -> int:
        return self.plog.next_offset

    @property
    def high_watermark(self) -> int:
        """What consumers may read up to: the log end of a single replica, else what the
        replication rule set (never above the log end)."""
        hw = self._high_watermark
        return self.plog.next_offset if hw is None else min(hw, self.plog.next_offset)

    def set_high_watermark(self, offset: Optional[int]) -> bool:
        """Set by replication (None: follow the log end again); returns whether it moved."""
        before = self.high_watermark
        self._high_watermark = offset
        return self.high_watermark != before

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark."""
        ongoing = self.plog.producers.ongoing
        hw = self.high_watermark
        return min(min(ongoing.values()), hw) if ongoing else hw

    # ------------------------------------------------------------------------ leader epochs
    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the newest batch (-1 for none): the epoch cache's last entry."""
        return self.plog.epochs[-1].epoch if self.plog.epochs else -1

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's ``LeaderEpochFileCache.endOffsetFor`` answers
        OffsetsForLeaderEpoch: the start of the first epoch above ``epoch`` (the log end for
        the latest), with the largest epoch at or below it; (-1, -1) when unknown."""
        epochs = self.plog.epochs
        if not epochs or epoch < epochs[0].epoch:
            return -1, -1
        if epoch == epochs[-1].epoch:
            return epoch, self.log_end_offset
        for i, e in enumerate(epochs):
            if e.epoch > epoch:
                return epochs[i - 1].epoch, e.start_offset
        return epochs[-1].epoch, self.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.plog.start_offset

    # ------------------------------------------------------------------------ files
    def _apply(self, ops: Iterable[FileOp]) -> None:
        for op in ops:
            if op.mode == "a":
                fd = self._append_fds.get(op.name)
                if fd is None:
                    full = os.path.join(self.path, op.name)
                    fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    self._append_fds[op.name] = fd
                    if op.name.endswith(".log") and not any(
                            os.path.normpath(s.path) == os.path.normpath(full) for s in self.segments):
                        self.segments.append(_Seg(self.plog.segment.base_offset, full, self.total_bytes))
                if op.data:
                    os.write(fd, op.data)
            else:
                # an index or snapshot written whole: the previous active .log is done with
                op.write_to(os.path.join(self.path, op.name))
        # keep only the active segment's append descriptor open
        if len(self._append_fds) > 1:
            active = self.plog.segment.log_name
            for name in [n for n in self._append_fds if n != active]:
                os.close(self._append_fds.pop(name))

    def _recover(self) -> tuple[int, list[EpochEntry]]:
        """Read the folder as a restarted broker does: every batch is scanned (framing, CRC,
        offsets in order); the first bad one truncates its segment there and the segments
        after it are deleted (Kafka's recovery); indexes of the last segment are rebuilt.
        Returns (log end offset, leader epoch entries)."""
        self.recovery += finish_interrupted_swaps(self.path)
        layout = scan_partition_dir(self.path)
        epochs: list[EpochEntry] = []
        if layout.leader_epoch_checkpoint:
            try:
                with open(layout.leader_epoch_checkpoint, "rb") as f:
                    epochs = list(LeaderEpochCheckpoint.parse(f.read()).entries)
            except DecodeError:
                epochs = []
        segs = [f for f in layout.segments if f.log]
        next_offset = segs[0].base_offset if segs else 0
        keep: list[RecordBatch] = []
        for i, files in enumerate(segs):
            assert files.log is not None
            with open(files.log, "rb") as f:
                data = f.read()
            reader = BatchReader(data)
            first_here = len(keep)
            builder = IndexBuilder(files.base_offset, self.config.index_interval_bytes)
            valid, why = 0, None
            try:
                for b in reader:
                    if not isinstance(b, RecordBatch) or not b.is_valid() or b.base_offset < next_offset:
                        why = "CRC mismatch, legacy batch or offsets out of order"
                        break
                    builder.append(b.position, b.size_in_bytes, b.last_offset,
                                   [(b.max_timestamp, b.last_offset)])
                    valid = b.position + b.size_in_bytes
                    next_offset = b.last_offset + 1
                    keep.append(b)
            except DecodeError as exc:
                why = exc.reason
            if why is None and valid < len(data):
                why = f"partial batch: {len(data) - valid} bytes"
            s = _Seg(files.base_offset, files.log, self.total_bytes, valid)
            self.segments.append(s)
            for b in keep[len(self.last_offsets):]:
                self.last_offsets.append(b.last_offset)
                self.positions.append(s.global_start + b.position)
                self.max_timestamps.append(b.max_timestamp)
                if b.max_timestamp > self.max_timestamp[0]:
                    self.max_timestamp = (b.max_timestamp, b.last_offset)
            self.total_bytes += valid
            if why is not None:
                self.recovery.append(f"{files.log}: truncated at {valid} ({why})")
                with open(files.log, "r+b") as out:
                    out.truncate(valid)
            if why is not None or i == len(segs) - 1:
                # the active segment of a crashed broker has stale, preallocated indexes
                builder.close()
                # and its .txnindex: the ABORT markers of its batches, over the producer
                # state of the batches before it (Kafka's LogSegment.recover)
                before = ProducerStateTracker()
                for b in keep[:first_here]:
                    before.append(b)
                aborted = rebuild_txn_index(keep[first_here:], before)
                rebuilt = [(".index", builder.offset_index().encode()),
                           (".timeindex", builder.time_index().encode())]
                if aborted or files.txnindex:
                    rebuilt.append((".txnindex", encode_txn_index(aborted)))
                for name, data_ in rebuilt:
                    with open(os.path.join(self.path, offset_file_name(files.base_offset, name)),
                              "wb") as out:
                        out.write(data_)
            if why is not None:
                for later in segs[i + 1:]:
                    for p in (later.log, later.index, later.timeindex, later.txnindex):
                        if p:
                            os.unlink(p)
                    self.recovery.append(f"{later.log}: deleted after the truncation")
                break
        self._recovered_batches = keep
        return next_offset, [e for e in epochs if e.start_offset < next_offset]

    def _replay_producer_state(self) -> None:
        # the storage log resumed its producer state from the folder; this replay finds the
        # aborted transactions and the broker's own duplicate-check state
        tracker = ProducerStateTracker()
        for b in self._recovered_batches:
            if isinstance(b, RecordBatch):
                aborted = tracker.append(b)
                if aborted is not None:
                    self.aborted.append((b.producer_id, aborted.first_offset, b.last_offset))
                self._track_producer(b, b.base_offset, b.last_offset, b.max_timestamp)
        del self._recovered_batches

    def _track_producer(self, b: RecordBatch, base: int, last: int, max_ts: int) -> None:
        """Remember a producer's batch for duplicate and sequence checks; a marker of a newer
        epoch (a fenced transaction's abort) resets the producer to that epoch."""
        if b.producer_id < 0:
            return
        st = self.producers.get(b.producer_id)
        if b.is_control:
            if st is None or st.epoch != b.producer_epoch:
                st = self.producers[b.producer_id] = _ProducerState(b.producer_epoch)
            st.coordinator_epoch = max(st.coordinator_epoch, _marker_coordinator_epoch(b))
            return
        if st is None or st.epoch != b.producer_epoch:
            st = self.producers[b.producer_id] = _ProducerState(b.producer_epoch)
        st.batches.append(_BatchMeta(b.base_sequence, b.last_sequence, base, last, max_ts))

    def check_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's ``ProducerAppendInfo.appendEndTxnMarker`` checks: a marker of an older
        producer epoch, or from a coordinator older than the last marker's, is refused."""
        st = self.producers.get(producer_id)
        if st is None:
            return
        if producer_epoch < st.epoch:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                              f"Epoch of producer {producer_id} is {producer_epoch}, which is smaller than "
                              f"the last seen epoch {st.epoch}")
        if st.coordinator_epoch > coordinator_epoch:
            raise BrokerError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                              f"Invalid coordinator epoch for producerId {producer_id}: {coordinator_epoch} "
                              f"(zombie), {st.coordinator_epoch} (current)")

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer's transaction is open here at this epoch (Kafka's
        ``UnifiedLog.hasOngoingTransaction``: a write then needs no verification)."""
        st = self.producers.get(producer_id)
        return producer_id in self.plog.producers.ongoing and st is not None and st.epoch == producer_epoch

    def producer_states(self) -> list[tuple[int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp, open transaction's first offset)
        of each producer this partition keeps state for; -1 where there is none."""
        ongoing = self.plog.producers.ongoing
        out = []
        for pid, st in sorted(self.producers.items()):
            last = st.batches[-1] if st.batches else None
            out.append((pid, st.epoch, last.last_seq if last else -1, last.timestamp if last else -1,
                        ongoing.get(pid, -1)))
        return out

    # ------------------------------------------------------------------------ append
    def _check_producer(self, batch: RecordBatch) -> Optional[_BatchMeta]:
        """Kafka's ``ProducerAppendInfo`` checks; returns the original batch of a duplicate."""
        pid, epoch, seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        st = self.producers.get(pid)
        if st is None:
            # no state (never seen, or its batches were all removed): any sequence is accepted,
            # as Kafka's ProducerAppendInfo.checkSequence
            return None
        if epoch < st.epoch:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                              f"Epoch of producer {pid} is {epoch}, which is smaller than the "
                              f"last seen epoch {st.epoch}")
        if epoch > st.epoch:
            if seq != 0:
                raise BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                  f"Invalid sequence number for new epoch of producer {pid} at "
                                  f"offset {self.log_end_offset}: {epoch} (request epoch), {seq} "
                                  "(seq. number), 0 (expected)")
            return None
        for meta in st.batches:
            if meta.first_seq == seq and meta.last_seq == batch.last_sequence:
                return meta
        last = st.batches[-1].last_seq if st.batches else -1
        # no batch at this epoch yet (a TV2 marker moved the producer to it): sequence 0
        if seq != (0 if last < 0 else increment_sequence(last, 1)):
            raise BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"Out of order sequence number for producer {pid} at offset "
                              f"{self.log_end_offset}: {seq} (incoming seq. number), {last} "
                              "(current end sequence number)")
        return None

    def append_as_leader(self, records: bytes | memoryview, now_ms: int) -> AppendInfo:
        """Validate and append one produce request's records for this partition."""
        if len(records) > self.config.max_message_bytes + 12:
            raise BrokerError(ErrorCode.MESSAGE_TOO_LARGE,
                              f"The request included a message larger than the max message "
                              f"size the server will accept ({self.config.max_message_bytes})")
        cfg = self.config
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        base = self.log_end_offset
        # the usual produce (one uncompressed batch that passes): checked and assigned in one pass
        one_pass = validate_and_assign_offsets(
            records, now_ms, cfg.timestamp_before_max_ms, cfg.timestamp_after_max_ms,
            check_timestamps=_checks_timestamps(cfg), need_keys=cfg.compacted,
            log_append_time=log_append, base_offset=base, leader_epoch=self.leader_epoch)
        # anything else, or something wrong: found and reported by the general path
        data, max_ts, max_delta = (one_pass if one_pass is not None
                                   else self._validate_and_assign(records, now_ms, log_append, base))
        batch = RecordBatch(data)
        if batch.producer_id >= 0:
            dup = self._check_producer(batch)
            if dup is not None:
                # Kafka's UnifiedLog answers a duplicate with its original batch's max
                # timestamp as the log append time, whatever the topic's timestamp type
                return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, self.log_start_offset, True)
        last = self._write(batch, max_ts, max_delta)
        return AppendInfo(base, last, now_ms if log_append else -1, self.log_start_offset)

    def _validate_and_assign(self, records: bytes | memoryview, now_ms: int, log_append: bool,
                             base: int) -> tuple[bytes | memoryview, int, int]:
        """The general path of :meth:`append_as_leader`: the records read as a log is read,
        each of Kafka's checks in its order with its error, then a patched copy."""
        batch: Optional[Batch] = _one_batch(records)
        if batch is None:  # anything else: read as a log is read, for its error
            reader = BatchReader(records)
            try:
                batches = list(reader)
            except DecodeError as exc:
                raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt: {exc}") from None
            if reader.trailing_bytes or not batches:
                raise BrokerError(ErrorCode.CORRUPT_MESSAGE, "Record batch is partial or missing")
            if len(batches) != 1:
                raise BrokerError(ErrorCode.INVALID_RECORD,
                                  "Produce requests with version 3 and later are only allowed to "
                                  "contain exactly one record batch")
            batch = batches[0]
        if not isinstance(batch, RecordBatch):
            raise BrokerError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                              "Only magic v2 record batches are accepted")
        if not batch.is_valid():
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE,
                              f"Record is corrupt (stored crc = {batch.crc}, computed crc = "
                              f"{batch.compute_crc()})")
        if batch.is_transactional and batch.producer_id < 0:
            raise BrokerError(ErrorCode.INVALID_RECORD,
                              "A transactional batch must carry a producer id")
        max_ts, max_delta = _validate(batch, self.config, now_ms, f"{self.topic}-{self.partition}")
        buf = bytearray(batch.buffer)
        if log_append:
            max_ts, max_delta = now_ms, 0
        patch_batch(buf, base, self.leader_epoch, (1 if log_append else 0, max_ts))
        return memoryview(buf), max_ts, max_delta

    def append_internal(self, data: bytes) -> AppendInfo:
        """Append one batch the broker built itself (coordinator records, transaction
        markers: Kafka's ``AppendOrigin.COORDINATOR``), its offsets already starting at the log
        end: no client validation, no sequence checks."""
        batch = RecordBatch(data)
        if batch.base_offset != self.log_end_offset:
            raise ValueError(f"internal batch at {batch.base_offset}, log end {self.log_end_offset}")
        buf = bytearray(data)
        patch_batch(buf, batch.base_offset, self.leader_epoch, None)
        last = self._write(RecordBatch(bytes(buf)), batch.max_timestamp, 0)
        return AppendInfo(batch.base_offset, last, -1, self.log_start_offset)

    def append_as_follower(self, records: bytes | memoryview) -> int:
        """Append what a leader's fetch returned: whole batches, offsets and leader epochs as
        the leader wrote them (a partial batch at the end is left for the next fetch, as
        Kafka's follower does); CRCs checked, no producer checks. Returns the log end."""
        try:
            for b in BatchReader(records):
                if not isinstance(b, RecordBatch) or not b.is_valid():
                    raise BrokerError(ErrorCode.CORRUPT_MESSAGE, "a corrupt batch from the leader")
                if b.base_offset < self.log_end_offset:
                    if b.last_offset < self.log_end_offset:
                        continue  # already here (a retried fetch)
                    raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                      f"batch at {b.base_offset} overlaps the log end {self.log_end_offset}")
                # a v2 batch's time-index entry names its last offset (Kafka's
                # shallowOffsetOfMaxTimestamp)
                self._write(b, b.max_timestamp, b.last_offset_delta)
        except DecodeError as exc:
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt: {exc}") from None
        return self.log_end_offset

    def truncate_to(self, offset: int) -> int:
        """Remove the batches at and above ``offset`` (a batch holding it goes whole), as
        Kafka's ``UnifiedLog.truncateTo`` does for a follower whose log diverged from its
        leader's: segment files cut or deleted, producer snapshots past the end dropped,
        leader epochs from the end on forgotten, then the partition reopened. Returns the
        new log end."""
        if offset >= self.log_end_offset:
            return self.log_end_offset
        k = bisect_left(self.last_offsets, offset)
        cut = self.positions[k] if k < len(self.positions) else self.total_bytes
        if k:
            new_end = self.last_offsets[k - 1] + 1
        else:
            new_end = self.segments[0].base_offset if self.segments else self.log_end_offset
        epochs = [e for e in self.plog.epochs if e.start_offset < new_end]
        start = self.log_start_offset
        self.close(clean=False)
        for seg in self.segments:
            if seg.global_start >= cut and seg.global_start > 0:
                for ext in (".log", ".index", ".timeindex", ".txnindex"):
                    try:
                        os.unlink(os.path.join(self.path, offset_file_name(seg.base_offset, ext)))
                    except FileNotFoundError:
                        pass
            elif seg.global_start <= cut < seg.global_start + max(seg.size, 1):
                with open(seg.path, "r+b") as f:
                    f.truncate(cut - seg.global_start)
        for snap in scan_partition_dir(self.path).snapshots:
            if snap[0] > new_end:
                os.unlink(snap[1])
        replace_file(os.path.join(self.path, "leader-epoch-checkpoint"),
                     LeaderEpochCheckpoint(epochs).encode())
        self._open(True, start)
        self.recovery.append(f"truncated to {new_end} (asked {offset})")
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch and start the log empty at ``offset`` (Kafka's
        ``UnifiedLog.truncateFullyAndStartAt``: a KRaft replica that fetched a snapshot past
        its log end): segment files, producer snapshots and leader epochs gone."""
        self.close(clean=False)
        for name in os.listdir(self.path):
            if parse_offset_file_name(name) is not None or name == "leader-epoch-checkpoint":
                os.unlink(os.path.join(self.path, name))
        self._open(False, None, base_offset=offset)
        self.recovery.append(f"truncated fully, starting at {offset}")

    def _write(self, batch: RecordBatch, max_ts: int, max_delta: int) -> int:
        """Hand a batch as it is to be written (offsets and leader epoch assigned) to the
        storage log and index it in memory; returns its last offset."""
        data, base = batch.buffer, batch.base_offset
        last = base + batch.last_offset_delta
        epochs_before = len(self.plog.epochs)
        ops = self.plog.append(data, [batch])
        if len(self.plog.epochs) != epochs_before:
            # Kafka flushes the epoch cache as soon as an epoch is assigned: a follower
            # truncating after a crash relies on it
            ops.append(FileOp("leader-epoch-checkpoint", self.plog.leader_epoch_checkpoint()))
        self._apply(ops)
        for a in ops.aborted:   # the transaction an ABORT marker completed
            self.aborted.append((a.producer_id, a.first_offset, a.last_offset))
        seg = self.segments[-1]
        pos_in_seg = self.plog.segment.size - len(data)
        seg.size = self.plog.segment.size
        self.last_offsets.append(last)
        self.positions.append(seg.global_start + pos_in_seg)
        self.max_timestamps.append(max_ts)
        self.total_bytes = seg.global_start + seg.size
        if max_ts > self.max_timestamp[0]:
            self.max_timestamp = (max_ts, base + max_delta)
        self._track_producer(batch, base, last, max_ts)
        return last

    # ------------------------------------------------------------------------ reads
    def _end_position(self, max_offset: Optional[int]) -> int:
        """Byte position where batches at or past ``max_offset`` begin (None: the log end)."""
        if max_offset is None:
            return self.total_bytes
        k = bisect_left(self.last_offsets, max_offset)
        return self.positions[k] if k < len(self.positions) else self.total_bytes

    def bytes_available(self, offset: int, max_offset: Optional[int] = None) -> int:
        """Bytes of whole batches from the one holding ``offset`` to the log end (or to the
        batches below ``max_offset``, the last stable offset of a read_committed fetch)."""
        i = bisect_left(self.last_offsets, offset)
        return 0 if i >= len(self.positions) else max(0, self._end_position(max_offset) - self.positions[i])

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [start, end)
        (Kafka's ``collectAbortedTransactions``)."""
        return [(pid, first) for pid, first, last in self.aborted if last >= start and first < end]

    def batches(self) -> Iterator[RecordBatch]:
        """Every v2 batch of the partition, from its start (coordinators replay their topics
        with it)."""
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            data = self.read(offset, 1 << 20, True)
            if not data:
                return
            last = offset
            for b in BatchReader(data):
                if isinstance(b, RecordBatch):
                    yield b
                    last = b.last_offset
            offset = last + 1

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True,
             max_offset: Optional[int] = None) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (but at least
        one batch with ``min_one_batch``, KIP-74), within one segment as Kafka reads, and
        only batches below ``max_offset`` when given (read_committed: the LSO).
        :class:`BrokerError` OFFSET_OUT_OF_RANGE outside [log start, log end]."""
        span = self._span(offset, max_bytes, min_one_batch, max_offset)
        return b"" if span is None else span[0].pread(span[1], span[2])

    def read_region(self, offset: int, max_bytes: int, min_one_batch: bool = True,
                    max_offset: Optional[int] = None, min_region: int = 0) -> bytes | FileRegion:
        """:meth:`read`'s batches as a :class:`FileRegion` of their segment file (to send
        with ``sendfile``), or as bytes when fewer than ``min_region`` (cheaper copied)."""
        span = self._span(offset, max_bytes, min_one_batch, max_offset)
        if span is None:
            return b""
        seg, pos, n = span
        return seg.region(pos, n) if n >= min_region else seg.pread(pos, n)

    def _span(self, offset: int, max_bytes: int, min_one_batch: bool,
              max_offset: Optional[int]) -> Optional[tuple[_Seg, int, int]]:
        """(segment, position in it, length) of :meth:`read`'s batches; None: nothing."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"Offset {offset} is out of range [{self.log_start_offset}, "
                              f"{self.log_end_offset}] of {self.topic}-{self.partition}")
        i = bisect_left(self.last_offsets, offset)
        positions = self.positions
        if i >= len(positions):
            return None
        start = positions[i]
        limit = self._end_position(max_offset)
        if start >= limit:
            return None
        seg = self.segments[bisect_right(self.segments, start, key=_global_start) - 1]
        cap = min(start + max(max_bytes, 0), seg.global_start + seg.size, limit)

        def end_of(k: int) -> int:  # batches are contiguous, also across segments
            return positions[k + 1] if k + 1 < len(positions) else self.total_bytes

        j = bisect_right(positions, cap) - 1  # the last batch starting within the cap
        end = end_of(j) if end_of(j) <= cap else positions[j]
        if end <= start:
            if not min_one_batch or end_of(i) > limit:
                return None
            end = end_of(i)
        return seg, start - seg.global_start, end - start

    def offset_for_timestamp(self, timestamp: int) -> Optional[tuple[int, int]]:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``."""
        for i, mts in enumerate(self.max_timestamps):
            if mts >= timestamp and self.last_offsets[i] >= self.log_start_offset:
                start = self.last_offsets[i - 1] + 1 if i else self.log_start_offset
                data = self.read(max(start, self.log_start_offset), 1, True)
                for b in BatchReader(data):
                    for r in b.records():
                        if r.timestamp >= timestamp and r.offset >= self.log_start_offset:
                            return r.offset, r.timestamp
        return None

    # ------------------------------------------------------------------------ lifecycle
    def close(self, clean: bool = True) -> None:
        self._apply(self.plog.close(clean))
        for fd in self._append_fds.values():
            os.close(fd)
        self._append_fds.clear()
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        for fd in self._append_fds.values():
            os.close(fd)
        self._append_fds.clear()
        for seg in self.segments:
            seg.close()
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass
class Topic:
    """A topic's partitions on this broker: a single broker holds every one; a broker of a
    cluster only the replicas assigned to it, the others None."""
    name: str
    topic_id: Uuid
    partitions: list[Optional[Log]]
    configs: dict[str, str]
    is_internal: bool = False

    @property
    def logs(self) -> list[Log]:
        """The partitions held here."""
        return [lg for lg in self.partitions if lg is not None]


class LogManager:
    """The broker's log directory: ``meta.properties``, topics and their partition logs, root
    checkpoints and ``.kafka_cleanshutdown`` at a clean close. A directory left by an earlier
    run is recovered (partition folders, topic ids from ``partition.metadata``)."""

    def __init__(self, data_dir: str, *, node_id: int = 1, cluster_id: Optional[str] = None,
                 defaults: Optional[LogConfig] = None, sparse: bool = False) -> None:
        self.data_dir = data_dir
        #: a broker of a cluster: topics hold only the partitions assigned here
        self.sparse = sparse
        self.defaults = defaults or LogConfig()
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[Uuid, Topic] = {}
        os.makedirs(data_dir, exist_ok=True)
        meta_path = os.path.join(data_dir, "meta.properties")
        self.clean_start = os.path.exists(os.path.join(data_dir, ".kafka_cleanshutdown"))
        #: the directory was formatted now (no meta.properties before)
        self.formatted = not os.path.exists(meta_path)
        if not self.formatted:
            with open(meta_path, "rb") as f:
                meta = MetaProperties.parse(f.read())
            if meta.node_id is not None and meta.node_id != node_id:
                raise ValueError(f"Stale node.id: {data_dir} belongs to node {meta.node_id}, "
                                 f"not {node_id}")
            if cluster_id is not None and meta.cluster_id not in (None, cluster_id):
                raise ValueError(f"Invalid cluster.id in {meta_path}: expected {cluster_id}, "
                                 f"found {meta.cluster_id}")
            self.cluster_id = meta.cluster_id or cluster_id or str(Uuid(os.urandom(16)))
            directory = meta.properties.get("directory.id")
            #: meta.properties' directory.id (a broker registers its log dir by it)
            self.directory_id = Uuid(directory) if directory else Uuid.ZERO
        else:
            self.cluster_id = cluster_id or str(Uuid(os.urandom(16)))
            self.directory_id = Uuid(os.urandom(16))
            props = {"version": "1", "cluster.id": self.cluster_id, "node.id": str(node_id),
                     "directory.id": str(self.directory_id)}
            with open(meta_path, "wb") as f:
                f.write(MetaProperties(props).encode())
        self.node_id = node_id
        self._last_high_watermarks: Optional[list[tuple[str, int, int]]] = None
        #: told the name of a topic created, deleted or given more partitions (the single
        #: broker records it in its metadata log)
        self.on_topic_changed: Optional[Callable[[str], None]] = None
        self._load()
        # Kafka removes the marker at start: a crash from here on is an unclean shutdown
        try:
            os.unlink(os.path.join(data_dir, ".kafka_cleanshutdown"))
        except FileNotFoundError:
            pass

    def _load(self) -> None:
        starts: dict[tuple[str, int], int] = {}
        ckpt = os.path.join(self.data_dir, "log-start-offset-checkpoint")
        if os.path.exists(ckpt):
            with open(ckpt, "rb") as f:
                try:
                    starts = {(t, p): o for t, p, o in OffsetCheckpoint.parse(f.read()).entries}
                except DecodeError:
                    starts = {}
        found: dict[str, dict[int, str]] = {}
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path):
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is None or parsed[2] != "live" or parsed[0] == METADATA_TOPIC:
                continue  # the KRaft metadata log is the Raft replica's (kproto.broker.cluster.raft)
            topic, partition = parsed[0], parsed[1]
            found.setdefault(topic, {})[partition] = path
        for topic, parts in found.items():
            if not self.sparse and sorted(parts) != list(range(len(parts))):
                continue  # not a whole topic: leave it alone
            topic_id: Optional[Uuid] = None
            for path in parts.values():
                try:
                    with open(os.path.join(path, "partition.metadata"), "rb") as f:
                        topic_id = Uuid(PartitionMetadata.parse(f.read()).topic_id)
                    break
                except (OSError, DecodeError, ValueError):
                    continue
            topic_id = topic_id or Uuid(os.urandom(16))
            logs: list[Optional[Log]] = [None] * (max(parts) + 1)
            for p in sorted(parts):
                logs[p] = Log(parts[p], topic, p, topic_id, self.defaults, recover=True,
                              start_offset=starts.get((topic, p)))
            self._register(Topic(topic, topic_id, logs, {}, topic.startswith("__")))

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic

    def get(self, topic: str, partition: int) -> Optional[Log]:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def config_for(self, configs: Mapping[str, Optional[str]]) -> LogConfig:
        return self.defaults.with_overrides(configs)

    def create_topic(self, name: str, partitions: int, configs: Optional[Mapping[str, str]] = None,
                     topic_id: Optional[Uuid] = None) -> Topic:
        configs = dict(configs or {})
        config = self.config_for(configs)
        tid = topic_id or Uuid(os.urandom(16))
        logs: list[Optional[Log]] = [
            Log(os.path.join(self.data_dir, partition_dir_name(name, p)), name, p, tid, config)
            for p in range(partitions)]
        topic = Topic(name, tid, logs, configs, name.startswith("__"))
        self._register(topic)
        self.topic_changed(name)
        return topic

    def topic_changed(self, name: str) -> None:
        """Tell :attr:`on_topic_changed` that topic ``name`` was created, deleted or grew."""
        if self.on_topic_changed is not None:
            self.on_topic_changed(name)

    def open_partition(self, name: str, partition: int, topic_id: Uuid,
                       configs: Optional[Mapping[str, str]] = None) -> Log:
        """The replica of ``name``-``partition`` on this broker of a cluster, created empty
        when it is new (a topic id that changed means the topic was deleted and made again:
        the old one goes first)."""
        topic = self.topics.get(name)
        if topic is not None and topic.topic_id != topic_id:
            self.delete_topic(name)
            topic = None
        if topic is None:
            configs = dict(configs or {})
            topic = Topic(name, topic_id, [], configs, name.startswith("__"))
            self._register(topic)
        while len(topic.partitions) <= partition:
            topic.partitions.append(None)
        log = topic.partitions[partition]
        if log is None:
            log = topic.partitions[partition] = Log(
                os.path.join(self.data_dir, partition_dir_name(name, partition)), name, partition,
                topic_id, self.config_for(topic.configs))
        return log

    def remove_partition(self, name: str, partition: int) -> None:
        """Delete this broker's replica (moved away, or its topic deleted)."""
        topic = self.topics.get(name)
        if topic is None or partition >= len(topic.partitions) or topic.partitions[partition] is None:
            return
        log = topic.partitions[partition]
        topic.partitions[partition] = None
        assert log is not None
        log.delete()
        if not topic.logs:
            self.topics.pop(name, None)
            self.topics_by_id.pop(topic.topic_id, None)

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.pop(name)
        self.topics_by_id.pop(topic.topic_id, None)
        for log in topic.logs:
            log.delete()
        self.topic_changed(name)
        return topic

    def close(self, clean: bool = True, broker_epoch: int = 1) -> None:
        """Finish every partition's files; a clean close writes the root checkpoints and the
        clean-shutdown marker, as Kafka's ``LogManager.shutdown``."""
        logs = sorted(((t.name, log.partition, log) for t in self.topics.values()
                       for log in t.logs), key=lambda x: (x[0], x[1]))
        for _, _, log in logs:
            log.close(clean)
        if not clean:
            return
        ends = [(t, p, log.log_end_offset) for t, p, log in logs]
        files = {"recovery-point-offset-checkpoint": ends,
                 "replication-offset-checkpoint": [(t, p, log.high_watermark) for t, p, log in logs],
                 "log-start-offset-checkpoint": [(t, p, log.log_start_offset) for t, p, log in logs]}
        for fname, entries in files.items():
            replace_file(os.path.join(self.data_dir, fname), OffsetCheckpoint(entries).encode())
        replace_file(os.path.join(self.data_dir, ".kafka_cleanshutdown"), CleanShutdown(broker_epoch).encode())

    def write_high_watermarks(self) -> bool:
        """``replication-offset-checkpoint``: every partition's high watermark, as Kafka's
        ReplicaManager writes it every ``replica.high.watermark.checkpoint.interval.ms``, so
        that readers of a live directory know how far records are committed. Written only
        when a watermark moved; returns whether it was."""
        entries = sorted((t.name, lg.partition, lg.high_watermark)
                         for t in self.topics.values() for lg in t.logs)
        if entries == self._last_high_watermarks:
            return False
        replace_file(os.path.join(self.data_dir, "replication-offset-checkpoint"),
                     OffsetCheckpoint(entries).encode())
        self._last_high_watermarks = entries
        return True

