"""A partition folder opened for reading: its segments with their indexes, and the batch-level
scan of a segment that finds damage, resynchronises through the offset index and seeks by
offset or timestamp.

Batches are framed and parsed by :mod:`kproto.records` (never here); this module decides where
to read and what a broken stretch of file means.
"""
from __future__ import annotations

import bisect
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator, Sequence, TypeVar

from kproto.records.compression import DecompressionBudget
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.problems import Problems
from kproto.records.reader import Batch, BatchReader
from kproto.storage import fs
from kproto.storage.checkpoints import LeaderEpochCheckpoint, OffsetCheckpoint, PartitionMetadata
from kproto.storage.indexes import (OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, AbortedTxn, IndexBuilder,
                                    OffsetIndex, TimeIndex, has_empty_slot, parse_txn_index,
                                    useful_index_bytes)
from kproto.storage.layout import (FILE_LIMITS, PartitionDir, SegmentFiles, check_size,
                                   read_bounded, scan_partition_dir)
from kproto.storage.snapshot import ProducerSnapshot, parse_snapshot

LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
T = TypeVar("T")

_read = fs.read_range  # local file or URI (a ranged read)

#: an index is read in pieces from this size up, each twice the last, until one holds an empty
#: slot: an active segment's preallocated index (10 MB, mostly zeros) costs about twice its
#: entries, not what its segment's size allows (a synced broker directory on object storage)
INDEX_PIECE = 64 * 1024


def read_index(path: str, useful: int, entry_size: int) -> bytes:
    """The first ``useful`` bytes of an index file, or fewer: up to the end of the piece
    holding its first empty slot (where its entries end)."""
    out = bytearray()
    piece = INDEX_PIECE - INDEX_PIECE % entry_size
    while len(out) < useful:
        data = _read(path, len(out), min(useful, len(out) + piece))
        out += data
        if not data or has_empty_slot(data, entry_size):
            break
        piece *= 2
    return bytes(out)


def read_file(path: str, parse, problems: Problems):
    """``parse`` of a small file's bytes (read by :func:`~kproto.storage.layout.read_bounded`),
    or None with why reported in ``problems`` (a ``file`` problem: contents that do not parse,
    a file larger than its kind can be, or a file that cannot be read)."""
    try:
        return parse(read_bounded(path))
    except DecodeError as exc:
        problems.report("file", exc.reason, source=path, position=exc.offset or 0)
    except OSError as exc:
        problems.report("file", f"cannot be read: {exc.strerror or exc}", source=path)
    return None


def read_batch_file(path: str, use: Callable[[bytes | memoryview], T], problems: Problems
                    ) -> T | None:
    """``use`` of a whole file of batches (a KRaft snapshot, ``bootstrap.checkpoint``): mapped
    when local, so that its pages are read as its batches are (a huge sparse file costs what
    its batches hold), read when remote; None with why reported as :func:`read_file` reports
    it (a file larger than Kafka opens among them)."""
    try:
        check_size(path, "log")
        if fs.is_remote(path):
            return use(_read(path))
        with fs.mapped_file(path) as view:
            return use(view)
    except DecodeError as exc:
        problems.report("file", exc.reason, source=path, position=exc.offset or 0)
    except OSError as exc:
        problems.report("file", f"cannot be read: {exc.strerror or exc}", source=path)
    return None


def read_log_start_offsets(log_dir: str, problems: Problems | None = None
                           ) -> dict[tuple[str, int], int]:
    """The log start offsets of ``log_dir``'s ``log-start-offset-checkpoint`` by (topic,
    partition): where DeleteRecords or retention moved a partition's start above its first
    segment (Kafka leaves the other partitions out, or writes their first offset). Empty when
    the file is missing or empty; a malformed one is reported in ``problems`` and ignored."""
    path = os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT)
    if not fs.isfile(path):
        return {}
    cp = read_file(path, lambda b: OffsetCheckpoint.parse(b, LOG_START_OFFSET_CHECKPOINT),
                   problems if problems is not None else Problems())
    return {(t, p): o for t, p, o in cp.entries} if cp is not None else {}


class Segment:
    """One segment: ``<base>.log`` and its ``.index``/``.timeindex``/``.txnindex``, of the
    partition ``topic``-``partition`` when known. ``problems``: what is wrong with its index
    files (the log's own damage is reported by each :meth:`scan`)."""

    def __init__(self, files: SegmentFiles, topic: str | None = None,
                 partition: int | None = None) -> None:
        self.files = files
        self.topic = topic
        self.partition = partition
        self.base_offset = files.base_offset
        self.name = os.path.basename(files.log) if files.log else f"{files.base_offset:020d}.log"
        self.problems = Problems(topic=topic, partition=partition)
        self.log_size = self._readable_size()
        self.indexes_rebuilt = False
        # the next segment's base offset: no batch of this one may reach it (Partition.open)
        self.next_base: int | None = None

    def __repr__(self) -> str:
        return f"Segment({self.name}, {self.log_size} bytes)"

    def read(self, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the ``.log`` file."""
        return _read(self.files.log, start, end) if self.files.log else b""

    def _readable_size(self) -> int:
        """The ``.log``'s size, cut to the most Kafka's ``FileRecords`` opens: the bytes past
        it (a runaway or sparse file) are reported as damage and not read, the rest is."""
        if not self.files.log:
            return 0
        size = fs.getsize(self.files.log)
        limit = FILE_LIMITS["log"]
        if size > limit:
            self.problems.report("file", f"implausible size {size}: larger than any log file "
                                 f"Kafka writes; the {size - limit} bytes past {limit} are not read",
                                 source=self.files.log, position=limit, bytes_skipped=size - limit)
            return limit
        return size

    @contextmanager
    def _whole(self) -> Iterator[bytes | memoryview]:
        """The ``.log`` up to :attr:`log_size`: a local file mapped (pages read as batches are,
        so a huge sparse file costs what its batches hold), a remote one read."""
        if self.files.log and not fs.is_remote(self.files.log):
            with fs.mapped_file(self.files.log) as view:
                if len(view) > self.log_size:
                    part = view[:self.log_size]
                    try:
                        yield part
                    finally:
                        part.release()
                else:
                    yield view
        else:
            yield self.read(0, self.log_size)

    def _index(self, path: str, cls, entry_size: int):
        """An index file read within what it can usefully hold; None (reported) if unusable."""
        try:
            size = fs.getsize(path)
            idx = cls.parse(read_index(path, useful_index_bytes(size, entry_size, self.log_size), entry_size),
                            self.base_offset, size)
            bad = idx.problems(self.log_size) if cls is OffsetIndex else idx.problems()
            if len(idx) and self.log_size == 0 and not any(d.kind == "gap" for d in self.problems):
                self.problems.report(
                    "gap", f"the segment is empty but its {os.path.basename(path)} has entries: "
                    f"its records (from offset {self.base_offset} on) are lost",
                    source=self.files.log or self.name)
        except DecodeError as exc:
            bad = [exc.reason]
        except OSError as exc:
            bad = [f"cannot be read: {exc.strerror or exc}"]
        if bad:
            self.problems.report("index", "; ".join(bad) + "; rebuilt by scanning", source=path)
            return None
        return idx

    @cached_property
    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        oi = ti = None
        if self.files.index:
            oi = self._index(self.files.index, OffsetIndex, OFFSET_ENTRY_SIZE)
        if self.files.timeindex:
            ti = self._index(self.files.timeindex, TimeIndex, TIME_ENTRY_SIZE)
        if oi is None or ti is None:
            # missing or unusable: rebuild both by scanning, as Kafka's recovery does (in memory
            # only; the files are never written)
            self.indexes_rebuilt = True
            with self._whole() as whole:
                roi, rti = rebuild_indexes(whole, self.base_offset)
            oi, ti = oi or roi, ti or rti
        return oi, ti

    @property
    def offset_index(self) -> OffsetIndex:
        """The ``.index``; rebuilt by scanning the segment when missing or unusable."""
        return self._indexes[0]

    @property
    def time_index(self) -> TimeIndex:
        """The ``.timeindex``; rebuilt by scanning the segment when missing or unusable."""
        return self._indexes[1]

    @cached_property
    def aborted(self) -> list[AbortedTxn]:
        """Aborted transactions whose ABORT marker is in this segment."""
        if not self.files.txnindex:
            return []
        try:
            return parse_txn_index(read_bounded(self.files.txnindex))
        except DecodeError as exc:
            self.problems.report("index", exc.reason, source=self.files.txnindex,
                                 position=exc.offset or 0)
            return []

    def position_of(self, offset: int) -> int:
        """A batch boundary at or before the batch holding ``offset`` (via the offset index)."""
        return self.offset_index.lookup(offset)[1]

    def position_of_timestamp(self, timestamp: int) -> int:
        """Where to start scanning for the first record with timestamp >= ``timestamp``
        (Kafka's ``LogSegment.findOffsetByTimestamp``: time index, then offset index)."""
        return self.position_of(self.time_index.lookup(timestamp)[1])

    def scan(self, start: int = 0, end: int | None = None, *, verify_crc: bool = False,
             problems: Problems | None = None, data: bytes | memoryview | None = None
             ) -> Iterator[Batch]:
        """Batches of the segment from byte ``start`` (a batch boundary) to ``end``; see
        :func:`scan_batches` (``problems`` gets the segment's file, topic and partition).
        ``data``: the whole file, if already read."""
        if data is None and self.files.log and not fs.is_remote(self.files.log):
            with self._whole() as whole:
                yield from self.scan(start, end, verify_crc=verify_crc, problems=problems,
                                     data=whole)
            return
        if data is None:
            data = self.read(start, end)
            offset = start
        else:
            offset = 0
        resync = [int(p) - offset for p in self.offset_index.positions]
        for batch in scan_batches(data, start - offset, None if end is None else end - offset,
                                  resync=resync, verify_crc=verify_crc,
                                  problems=None if problems is None else problems.scope(
                                      source=self.files.log or self.name, topic=self.topic,
                                      partition=self.partition),
                                  shift=offset, offsets=(self.base_offset, self.next_base)):
            yield batch


def scan_batches(buf: bytes | memoryview, start: int = 0, end: int | None = None, *,
                 resync: Sequence[int] = (), verify_crc: bool = False,
                 problems: Problems | None = None, shift: int = 0,
                 offsets: tuple[int, int | None] | None = None, after: int | None = None,
                 budget: DecompressionBudget | None = None) -> Iterator[Batch]:
    """Batches of ``buf[start:end]`` (sans-I/O). Damage is reported in ``problems`` (scope it
    with the file) at file positions (buffer position + ``shift``):

    * a CRC mismatch is always reported; the batch is still yielded unless ``verify_crc``;
    * unparseable bytes stop :class:`~kproto.records.reader.BatchReader`; reading resumes at the
      next known batch boundary in ``resync`` (offset-index positions), the bytes in between
      reported as skipped;
    * a partial batch at the end is reported as ``torn-tail``;
    * with ``offsets`` = (the segment's base offset, the next segment's or None), a batch whose
      last offset falls outside that range, or whose offsets go back below the previous
      batch's, is ``corrupt`` (its base offset is not covered by the CRC) and skipped. A batch
      that starts below the segment's base offset but ends in it is read, as Kafka's segment
      recovery reads it (only the last offset must fit the segment's relative offsets).
      ``after``: the next offset of the batch before ``buf[start]`` when it is known (a read
      going on where it stopped), which the first batch must not go below.

    ``budget``: what the batches may decompress in all (one fresh budget by default).
    """
    end = len(buf) if end is None else min(end, len(buf))
    problems = problems if problems is not None else Problems()
    budget = budget if budget is not None else DecompressionBudget()
    pos = start
    base, high = offsets if offsets is not None else (None, None)
    low = after  # the previous batch's next offset
    while pos < end:
        stopped = Problems()
        reader = BatchReader(buf, pos, end, verify_crc=False, problems=stopped, budget=budget)
        seen = 0  # the reader's reports passed on so far
        for batch in reader:
            if reader.skipped != seen:  # a batch the reader stepped over (see BatchReader)
                seen = _forward(stopped, seen, problems, shift)
            if not batch.is_valid():
                problems.report("crc", f"CRC mismatch: stored {batch.crc}, computed "
                                f"{batch.compute_crc()}", position=batch.position + shift,
                                bytes_skipped=batch.size_in_bytes if verify_crc else 0)
                if verify_crc:
                    continue
            if base is not None:
                # a legacy wrapper's first offset needs decompressing: its last one is outside
                first = batch.base_offset if isinstance(batch, RecordBatch) else batch.last_offset
                last = batch.last_offset
                if last < base or last < first or (low is not None and first < low) or \
                        (high is not None and last >= high):
                    where = f"[{low if low is not None else base}, {high})" if high is not None \
                        else f"from {low if low is not None else base}"
                    problems.report("corrupt", f"batch offsets {first}..{last} out of place: "
                                    f"expected offsets {where}", position=batch.position + shift,
                                    bytes_skipped=batch.size_in_bytes)
                    continue
                low = last + 1
            yield batch
        if reader.skipped != seen:
            _forward(stopped, seen, problems, shift)
        pos = reader.position
        if reader.stopped_by is None:
            if reader.trailing_bytes:
                problems.report("torn-tail", f"partial batch: {reader.trailing_bytes} bytes",
                                position=pos + shift, bytes_skipped=reader.trailing_bytes)
            return
        nxt = next((p for p in resync if p > pos), end)
        problems.report("corrupt", reader.stopped_by, position=pos + shift,
                        bytes_skipped=nxt - pos)
        pos = nxt


def _forward(found: Problems, seen: int, problems: Problems, shift: int) -> int:
    """Report the batches a reader stepped over (its non-fatal problems in ``found``, past the
    first ``seen``) at file positions; returns how many it has reported in all."""
    skipped = [p for p in found if not p.fatal]
    for p in skipped[seen:]:
        problems.report(p.kind, p.reason, position=p.position + shift,
                        bytes_skipped=p.bytes_skipped)
    return len(skipped)


@dataclass
class Partition:
    """A partition folder: segments (sorted by base offset) and the partition's metadata.
    ``problems``: what is wrong with the partition's own files (each segment has its own)."""

    path: str
    topic: str
    partition: int
    segments: list[Segment]
    layout: PartitionDir
    problems: Problems = field(default_factory=Problems)
    #: the log start offset of the log dir's ``log-start-offset-checkpoint`` (None: no entry);
    #: records below it are deleted (DeleteRecords, retention) though still on disk
    checkpoint_start_offset: int | None = None

    @classmethod
    def open(cls, path_or_layout: str | PartitionDir, *,
             log_start_offset: int | None = None) -> Partition:
        """Open a partition folder (path or an already scanned layout). ``log_start_offset``:
        its entry in the log dir's ``log-start-offset-checkpoint``, if any (see
        :func:`read_log_start_offsets`)."""
        layout = (path_or_layout if isinstance(path_or_layout, PartitionDir)
                  else scan_partition_dir(path_or_layout))
        segs = [Segment(f, layout.topic, layout.partition) for f in layout.segments if f.log]
        for seg, nxt in zip(segs, segs[1:]):
            seg.next_base = nxt.base_offset
        part = cls(layout.path, layout.topic, layout.partition, segs, layout,
                   Problems(topic=layout.topic, partition=layout.partition), log_start_offset)
        for f in layout.segments:
            if not f.log:
                part.problems.report("file", "index files without a .log",
                                     source=f.index or f.timeindex or f.txnindex or "")
        return part

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {len(self.segments)} segments)"

    def _parse(self, path: str | None, parse):
        return read_file(path, parse, self.problems) if path else None

    @cached_property
    def metadata(self) -> PartitionMetadata | None:
        """``partition.metadata``, or None when missing or malformed (reported in problems)."""
        return self._parse(self.layout.partition_metadata, PartitionMetadata.parse)

    @property
    def topic_id(self) -> str | None:
        """The topic id from ``partition.metadata`` (base64url), or None."""
        return self.metadata.topic_id if self.metadata else None

    @cached_property
    def leader_epochs(self) -> LeaderEpochCheckpoint | None:
        """``leader-epoch-checkpoint``, or None when missing or malformed."""
        return self._parse(self.layout.leader_epoch_checkpoint, LeaderEpochCheckpoint.parse)

    def snapshot(self, offset: int) -> ProducerSnapshot | None:
        """The producer snapshot taken at ``offset``, or None."""
        path = dict(self.layout.snapshots).get(offset)
        return self._parse(path, parse_snapshot)

    @property
    def snapshot_offsets(self) -> list[int]:
        """Offsets of the producer snapshots, ascending."""
        return [o for o, _ in self.layout.snapshots]

    @property
    def log_start_offset(self) -> int | None:
        """Kafka's log start offset: the checkpoint's entry when it is above the first segment's
        base offset, else that base offset (None: no segment and no entry)."""
        first = self.segments[0].base_offset if self.segments else None
        if self.checkpoint_start_offset is None:
            return first
        return self.checkpoint_start_offset if first is None \
            else max(first, self.checkpoint_start_offset)

    @property
    def aborted(self) -> list[AbortedTxn]:
        """Every aborted transaction of the partition, in ABORT-marker order."""
        return [a for s in self.segments for a in s.aborted]

    def segment_for(self, offset: int) -> int:
        """Index of the segment that would hold ``offset`` (the last with base <= offset)."""
        bases = [s.base_offset for s in self.segments]
        return max(0, bisect.bisect_right(bases, offset) - 1)

    def offset_for_timestamp(self, timestamp: int,
                             start_offset: int | None = None) -> tuple[int, int] | None:
        """Kafka's ``ListOffsets`` by timestamp (``UnifiedLog.fetchOffsetByTimestamp``): the
        first record with timestamp >= ``timestamp`` (at or after ``start_offset``, as Kafka
        searches from the log start offset) as ``(offset, timestamp)``, or None.
        Closed segments whose largest timestamp is smaller are skipped; inside a segment the
        time index, then the offset index, give where to start scanning."""
        first = 0 if start_offset is None else self.segment_for(start_offset)
        for i, seg in enumerate(self.segments[first:], first):
            tidx = seg.time_index
            closed = i < len(self.segments) - 1 and not tidx.preallocated
            if closed and len(tidx) and int(tidx.timestamps[-1]) < timestamp:
                continue
            pos = seg.position_of_timestamp(timestamp)
            if start_offset is not None and i == first:
                pos = max(pos, seg.position_of(start_offset))
            for batch in seg.scan(pos):
                if batch_max_timestamp(batch) < timestamp:
                    continue
                for r in batch.records():
                    if r.timestamp >= timestamp and (start_offset is None
                                                     or r.offset >= start_offset):
                        return r.offset, r.timestamp
        return None

    def batches(self, *, start_offset: int | None = None, verify_crc: bool = False,
                problems: Problems | None = None) -> Iterator[tuple[Segment, Batch]]:
        """Every batch from the one holding ``start_offset`` (index-aware seek) to the end."""
        first = self.segment_for(start_offset) if start_offset is not None else 0
        for i, seg in enumerate(self.segments[first:]):
            pos = seg.position_of(start_offset) if (start_offset is not None and i == 0) else 0
            for batch in seg.scan(pos, verify_crc=verify_crc, problems=problems):
                if start_offset is not None and batch.last_offset < start_offset:
                    continue
                yield seg, batch


def batch_max_timestamp(batch: Batch) -> int:
    """Kafka's ``RecordBatch.maxTimestamp``: the v2 header field; for a legacy entry its own
    timestamp (a wrapper carries its inner messages' max), -1 for magic 0."""
    return batch.max_timestamp if isinstance(batch, RecordBatch) else batch.timestamp


def rebuild_indexes(buf: bytes | memoryview, base_offset: int, *, active: bool = False,
                    interval: int | None = None) -> tuple[OffsetIndex, TimeIndex]:
    """Rebuild a segment's ``.index`` and ``.timeindex`` by scanning its batches, as Kafka's
    ``LogSegment.recover`` does (one append per batch; the final time-index entry of a closed
    segment is added unless ``active``)."""
    b = IndexBuilder(base_offset) if interval is None else IndexBuilder(base_offset, interval)
    for batch in scan_batches(buf):
        b.append(batch.position, batch.size_in_bytes, batch.last_offset,
                 [(batch_max_timestamp(batch), batch.last_offset)])
    if not active:
        b.close()
    return b.offset_index(), b.time_index()
