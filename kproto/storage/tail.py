"""Tailing a live log directory: which offsets of each partition a stream reads next.

A stream keeps, per partition, the next offset to read (its *position*). Each step takes a
snapshot of the log directory (:func:`tail_log_dirs`: log start, log end, high watermark and
what may be read now), moves the positions to what may be read (:func:`advance`), and reads
the ranges between the old and the new positions (:func:`stream_ranges`, then
:func:`plan_ranges` into :class:`~kproto.storage.reader.Split` s that
:func:`~kproto.storage.reader.read_split` reads). Positions survive as JSON
(:func:`offsets_to_json` / :func:`offsets_from_json`, Spark's Kafka source's
``{"topic": {"0": 12}}`` form).

What may be read of a partition is bounded by ``bound``:

* ``end``: the log end offset, after the last complete batch (a partial batch at the end of
  the active segment is a write in progress, not damage);
* ``hw``: the high watermark the log dir's ``replication-offset-checkpoint`` holds (never past
  the log end): only records every in-sync replica has, as a consumer sees them. A partition
  without an entry has none readable yet (Kafka checkpoints every partition it hosts);
* ``auto`` (default): ``hw`` when that checkpoint file exists, else ``end``. Kafka and
  kproto's broker rewrite the file every ``replica.high.watermark.checkpoint.interval.ms``
  (5 s) while a watermark moves, so a stream lags up to that much behind them; ``end`` reads
  what a single-replica broker has (its high watermark is its log end) without the lag, or a
  log dir whose checkpoint is stale (a writer that does not maintain it).

With ``read_committed`` the bound is lowered to the last stable offset *as of the bound*: the
first offset of a transaction not ended below it. A step therefore never ends inside an open
transaction: its records wait until its marker is within the bound, and then the aborted ones
are dropped through the aborted-transaction list, which for the active segment (whose
``.txnindex`` a broker may not have written yet) is rebuilt from its batches
(:func:`active_aborted`).

Positions below a partition's log start offset (segments deleted by retention or
DeleteRecords before they were read) are reported as ``gap`` problems and reading resumes at
the log start offset.

:func:`advance`, :func:`stream_ranges`, :func:`resolve_bound` and the JSON helpers are pure;
:func:`tail_log_dirs`, :func:`locate` and :func:`plan_ranges` read the files.
"""
from __future__ import annotations

import bisect
import math
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

from kproto.problems import Problems
from kproto.records import RecordBatch
from kproto.records.reader import Batch
from kproto.storage import fs
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.indexes import AbortedTxn
from kproto.storage.layout import PartitionDir, is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import (Partition, Segment, read_file, read_log_start_offsets,
                                      scan_batches)
from kproto.storage.reader import ReadOptions, Split, plan_splits
from kproto.storage.writer import ProducerStateTracker

#: values of ``bound``: see the module's documentation
BOUNDS = ("auto", "hw", "end")
HW_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionTail:
    """One partition's snapshot: where its folder is, its log start and end offsets, the high
    watermark checkpointed for it (None: no entry), and ``readable``, the offset a stream may
    read up to now (the bound, lowered to the last stable offset for read_committed)."""

    topic: str
    partition: int
    path: str
    log_start: int
    log_end: int
    high_watermark: int | None
    readable: int


# ----------------------------------------------------------------------------- pure
def resolve_bound(bound: str, has_checkpoint: bool) -> str:
    """``hw`` or ``end`` for a ``bound`` option value (``auto``: ``hw`` when the log dir has a
    high-watermark checkpoint)."""
    bound = bound.lower()
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, not {bound!r}")
    if bound == "auto":
        return "hw" if has_checkpoint else "end"
    return bound


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{topic: {partition: offset}}``, topics and partitions sorted (Spark compares the
    JSON text of two offsets to see whether anything is new)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(value: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartition, int]:
    """The positions of :func:`offsets_to_json`'s form; ``ValueError`` when it is not that."""
    out: dict[TopicPartition, int] = {}
    if not value:
        return out
    if not isinstance(value, Mapping):
        raise ValueError(f"offsets must be a JSON object of topics: {value!r}")
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of {topic!r} must be an object of partitions: {parts!r}")
        for partition, offset in parts.items():
            try:
                out[(str(topic), int(partition))] = int(offset)
            except (TypeError, ValueError):
                raise ValueError(f"offset of {topic}-{partition} must be an integer: "
                                 f"{offset!r}") from None
    return out


def advance(start: Mapping[TopicPartition, int],
            tails: Mapping[TopicPartition, PartitionTail]) -> dict[TopicPartition, int]:
    """The positions after a step from ``start``: each partition's ``readable`` offset, never
    moving back (a bound that went down, e.g. an older checkpoint, reads nothing new) unless
    the position is past the log end (the log was truncated, or deleted and created again:
    :func:`stream_ranges` reports it); partitions no longer there keep their position."""
    end = dict(start)
    for tp, t in tails.items():
        pos = start.get(tp, t.log_start)
        end[tp] = t.readable if pos > t.log_end else max(t.readable, pos)
    return end


def rate_limit(start: Mapping[TopicPartition, int], tails: Mapping[TopicPartition, PartitionTail],
               max_offsets: int) -> dict[TopicPartition, int]:
    """Per partition, the offset a micro-batch of at most ``max_offsets`` offsets may read up
    to: the limit shared in proportion to what each partition has new (Spark's Kafka source's
    ``maxOffsetsPerTrigger`` rule: a share below one offset rounds up, others down)."""
    avail = {tp: max(0, t.readable - start.get(tp, t.log_start)) for tp, t in tails.items()}
    total = sum(avail.values())
    caps: dict[TopicPartition, int] = {}
    for tp, t in tails.items():
        pos = start.get(tp, t.log_start)
        if total <= max_offsets or not avail[tp]:
            caps[tp] = t.readable
            continue
        share = max_offsets * avail[tp] / total
        caps[tp] = pos + min(avail[tp], math.ceil(share) if share < 1 else math.floor(share))
    return caps


def stream_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                  log_starts: Mapping[TopicPartition, int],
                  problems: Problems | None = None) -> dict[TopicPartition, tuple[int, int]]:
    """The offset ranges ``[from, to)`` of a step from ``start`` to ``end``: a partition
    without a start position (new, or the stream's first step) starts at its log start
    offset; a position below the log start offset is reported as a ``gap`` (the records in
    between were deleted before they were read) and moved up to it; one past ``end`` (a log
    truncated or created again) is reported and nothing is read (as Spark's Kafka source, the
    stream goes on from ``end``). Partitions missing from ``log_starts`` (deleted) are left
    out, reported when they had records to read."""
    found = problems if problems is not None else Problems()
    out: dict[TopicPartition, tuple[int, int]] = {}
    for tp, to in sorted(end.items()):
        first = log_starts.get(tp)
        frm = start.get(tp)
        if first is None:
            if frm is None or frm < to:
                found.report("gap", f"the partition is gone: offsets [{frm}, {to}) not read",
                             topic=tp[0], partition=tp[1])
            continue
        if frm is None:
            frm = first
        elif frm > to:
            found.report("gap", f"offset {frm} is past the log end: the log was truncated or "
                         f"created again; the stream goes on from offset {to}",
                         topic=tp[0], partition=tp[1])
            continue
        elif frm < first:
            found.report("gap", f"offsets [{frm}, {first}) were deleted (retention or "
                         f"DeleteRecords) before they were read; reading resumes at the log "
                         f"start offset {first}", topic=tp[0], partition=tp[1])
            frm = first
        if frm < to:
            out[tp] = (frm, to)
    return out


# ----------------------------------------------------------------------------- I/O
def _log_dirs(paths: Iterable[str]) -> list[tuple[str, list[PartitionDir]]]:
    """``(log dir, partition folders)`` of each path (a log dir, or one partition folder; local
    or a URI, see :mod:`kproto.storage.fs`): one listing per folder."""
    out = []
    for path in map(fs.normpath, paths):
        if is_partition_dir(path):
            out.append((os.path.dirname(path), [scan_partition_dir(path)]))
        else:
            out.append((path, scan_log_dir(path).partitions))
    return out


def _open_partitions(paths: Iterable[str], topics: Iterable[str] | None,
                     partitions: Iterable[int] | None, problems: Problems,
                     storage_options: Mapping[str, Any] | None = None
                     ) -> list[tuple[str, Partition]]:
    """``(log dir, partition)`` of every selected live partition folder under ``paths``, each
    with its log start checkpoint entry."""
    topics = set(topics) if topics is not None else None
    parts = set(partitions) if partitions is not None else None
    out = []
    for path in paths:
        fs.configure(path, storage_options)
    for log_dir, layouts in _log_dirs(paths):
        layouts = [p for p in layouts if (topics is None or p.topic in topics)
                   and (parts is None or p.partition in parts)]
        if not layouts:
            continue
        starts = read_log_start_offsets(log_dir, problems)
        out += [(log_dir, Partition.open(p, log_start_offset=starts.get((p.topic, p.partition))))
                for p in layouts]
    return out


def _log_start(part: Partition, include_deleted: bool) -> int:
    first = part.segments[0].base_offset if part.segments else 0
    if include_deleted:
        return first
    start = part.log_start_offset
    return first if start is None else start


def locate(paths: Sequence[str], *, topics: Iterable[str] | None = None,
           partitions: Iterable[int] | None = None, include_deleted: bool = False,
           problems: Problems | None = None,
           storage_options: Mapping[str, Any] | None = None
           ) -> dict[TopicPartition, tuple[str, int]]:
    """``(partition folder, log start offset)`` of every selected partition: a listing, no
    segment is read."""
    found = problems if problems is not None else Problems()
    return {(p.topic, p.partition): (p.path, _log_start(p, include_deleted))
            for _, p in _open_partitions(paths, topics, partitions, found, storage_options)}


def read_high_watermarks(log_dir: str, problems: Problems | None = None
                         ) -> dict[TopicPartition, int] | None:
    """The high watermarks of ``log_dir``'s ``replication-offset-checkpoint`` by (topic,
    partition); None when there is no such file (a malformed one is reported and read as
    empty: nothing is known to be replicated)."""
    path = fs.join(log_dir, HW_CHECKPOINT)
    if not fs.isfile(path):
        return None
    cp = read_file(path, lambda b: OffsetCheckpoint.parse(b, HW_CHECKPOINT),
                   problems if problems is not None else Problems())
    return {(t, p): o for t, p, o in cp.entries} if cp is not None else {}


@dataclass
class _Seen:
    """What earlier steps scanned of one segment's ``.log`` (which only grows while it is the
    active one): the batch boundaries met (base offset, position), in order, and where the
    last complete batch ended."""

    offsets: list[int]
    positions: list[int]
    end: int
    end_offset: int


#: .log path -> what this process's stream steps saw of it (the active segments they tail);
#: the next step reads only what was appended since, and needs no index for it
_seen: OrderedDict[str, _Seen] = OrderedDict()
_SEEN_SEGMENTS = 4096  # segments remembered (least recently tailed dropped first)
_SEEN_BATCHES = 1 << 16  # boundaries remembered per segment (the oldest dropped first)


def _known(seg: Segment) -> _Seen | None:
    """What was seen of ``seg`` while it is the active segment, unless its file is now shorter
    (truncated, or created again); forgotten once it is not (rolled)."""
    seen = _seen.get(seg.files.log or "")
    if seen is not None and (seen.end > seg.log_size or seg.next_base is not None):
        del _seen[seg.files.log or ""]
        return None
    return seen


def _boundary(seg: Segment, offset: int) -> int:
    """A batch boundary at or before the batch holding ``offset``: from what earlier steps
    saw of the segment when they saw that far back, else through its offset index."""
    seen = _known(seg)
    if seen is not None and seen.offsets and seen.offsets[0] <= offset:
        return seen.positions[bisect.bisect_right(seen.offsets, offset) - 1]
    return seg.position_of(offset)


def _bytes_from(seg: Segment, pos: int) -> bytes:
    """``seg``'s bytes from ``pos`` to the size the listing gave, in one ranged read."""
    return fs.read_range(seg.files.log or "", pos, seg.log_size) if seg.files.log else b""


def _batches(seg: Segment, pos: int, resync: Sequence[int],
             data: bytes | None = None) -> Iterator[tuple[int, Batch]]:
    """``(file position, batch)`` of the complete batches of ``seg`` from boundary ``pos`` to
    the size the listing gave (``data``, when already read), in one ranged read (not
    :meth:`Segment.scan`, which asks for the offset index: one a broker has not written would
    be rebuilt from the whole file)."""
    data = _bytes_from(seg, pos) if data is None else data
    for batch in scan_batches(data, resync=[p - pos for p in resync if p > pos], shift=pos,
                              offsets=(seg.base_offset, seg.next_base)):
        yield pos + batch.position, batch


def _continues(data: bytes, end_offset: int) -> bool:
    """Whether ``data``, read from where an earlier step's last batch ended, starts with the
    header of a batch at or past ``end_offset`` (or is too short to tell): else the file was
    written again below that point since (truncated, then grown past it)."""
    return len(data) < _HEADER_PREFIX or (
        data[_MAGIC_AT] <= 2 and int.from_bytes(data[:8], "big", signed=True) >= end_offset)


#: a batch's (or legacy message set entry's) first bytes: offset (8), length (4), then the
#: partition leader epoch or the CRC (4), then the magic byte, at the same place in all three
_MAGIC_AT = 16
_HEADER_PREFIX = _MAGIC_AT + 1


def _tail_start(seg: Segment) -> int:
    """A batch boundary near the end of ``seg`` known without earlier steps: its last offset
    index entry (the segment start without one, or when the entry is past the file)."""
    if seg.files.index:
        idx = seg.offset_index
        if len(idx) and int(idx.positions[-1]) <= seg.log_size:
            return int(idx.positions[-1])
    return 0


def _scan(seg: Segment, pos: int) -> Iterator[Batch]:
    """The complete batches of ``seg`` from boundary ``pos`` (see :func:`_batches`), the
    active segment's remembered for the next step."""
    path = seg.files.log or ""
    seen = _known(seg)
    if seen is None or not (seen.offsets and seen.positions[0] <= pos <= seen.end):
        seen = _Seen([], [], pos, seg.base_offset)
    if pos == seen.end:  # what was seen reaches this far: read on from its end
        data = _bytes_from(seg, pos)
        if seen.offsets and not _continues(data, seen.end_offset):  # written again: afresh
            _seen.pop(path, None)
            yield from _scan(seg, _tail_start(seg))
            return
        for at, batch in _batches(seg, pos, (), data):
            seen.offsets.append(batch.base_offset)
            seen.positions.append(at)
            seen.end, seen.end_offset = at + batch.size_in_bytes, batch.last_offset + 1
            yield batch
    else:
        yield from (batch for _, batch in _batches(seg, pos, seen.positions))
    if seg.next_base is not None:
        return  # a closed segment: not tailed, its offset index says where its batches are
    if len(seen.offsets) > _SEEN_BATCHES:
        del seen.offsets[:-_SEEN_BATCHES // 2], seen.positions[:-_SEEN_BATCHES // 2]
    _seen[path] = seen
    _seen.move_to_end(path)
    while len(_seen) > _SEEN_SEGMENTS:
        _seen.popitem(last=False)


def log_end(part: Partition) -> tuple[int, int]:
    """``(log end offset, byte position after the last complete batch)`` of the partition's
    last segment: scanned from where the previous step's scan ended (the bytes appended
    since, one ranged read), or at first from its last offset-index entry to the size the
    listing gave (a segment without an ``.index``, as a broker's active one may be, is
    scanned whole once); a partial batch at the end is a write still in progress (not
    reported)."""
    if not part.segments:
        return (part.log_start_offset or 0), 0
    seg = part.segments[-1]
    seen = _known(seg)
    pos = seen.end if seen is not None else _tail_start(seg)
    for _ in _scan(seg, pos):
        pass
    seen = _seen[seg.files.log or ""]
    return max(seen.end_offset, seg.base_offset), seen.end


def _scan_producers(part: Partition, start: int, tracker: ProducerStateTracker,
                    to: int | None, skip_below: bool) -> list[AbortedTxn]:
    """Feed ``tracker`` the batches from the one holding ``start`` up to ``to`` (None: the
    log end; ``skip_below``: leave out the batches below ``start``), each segment read in one
    ranged read from a batch boundary before ``start`` (:func:`_boundary`) to the size the
    listing gave; the aborted transactions the ABORT markers met complete."""
    aborted: list[AbortedTxn] = []
    first = part.segment_for(start)
    for i, seg in enumerate(part.segments[first:]):
        for batch in _scan(seg, _boundary(seg, start) if i == 0 else 0):
            if to is not None and batch.base_offset >= to:
                return aborted
            if not isinstance(batch, RecordBatch) or (skip_below and batch.base_offset < start):
                continue
            done = tracker.append(batch)
            if done is not None:
                aborted.append(done)
    return aborted


def _snapshot_state(part: Partition, offset: int) -> ProducerStateTracker | None:
    snap = part.snapshot(offset) if offset in part.snapshot_offsets else None
    if snap is None or not snap.crc_valid:
        return None
    return ProducerStateTracker.from_snapshot(snap.entries)


def last_stable_offset(part: Partition, position: int | None, bound: int) -> int | None:
    """First offset of the earliest transaction still open as of ``bound`` (None if none),
    for a stream whose partition position is ``position``. The producer state of the latest
    producer snapshot at or below ``bound`` is brought up to ``bound`` by the batches after it
    (as :func:`~kproto.storage.reader.first_unstable_offset`), unless the position is past
    that snapshot: then the batches from the position on are scanned alone, since a stream's
    steps end before every transaction open at their bound, so every transaction begun below
    its position has ended below the bound. Each step reads the new bytes of the log, not its
    active segment."""
    snapshots = [o for o in part.snapshot_offsets if o <= bound]
    for offset in reversed(snapshots):
        if position is not None and offset <= position:
            break
        state = _snapshot_state(part, offset)
        if state is not None:
            _scan_producers(part, offset, state, bound, skip_below=True)
            return min(state.ongoing.values()) if state.ongoing else None
    start = position if position is not None else (
        part.segments[0].base_offset if part.segments else 0)
    state = ProducerStateTracker()
    _scan_producers(part, start, state, bound, skip_below=False)
    return min(state.ongoing.values()) if state.ongoing else None


def tail_log_dirs(paths: Sequence[str], *, topics: Iterable[str] | None = None,
                  partitions: Iterable[int] | None = None, bound: str = "auto",
                  isolation: str = "read_uncommitted", include_deleted: bool = False,
                  caps: Mapping[TopicPartition, int] | None = None,
                  positions: Mapping[TopicPartition, int] | None = None,
                  problems: Problems | None = None,
                  storage_options: Mapping[str, Any] | None = None
                  ) -> dict[TopicPartition, PartitionTail]:
    """A snapshot of the selected partitions under ``paths`` (log dirs or partition folders,
    local or URIs; ``storage_options`` for their filesystem): see :class:`PartitionTail` and
    the module's documentation for ``bound``. ``caps`` lowers a partition's readable offset (a
    rate limit) before read_committed stops it short of the transactions still open there;
    ``positions``: the stream's (read_committed scans from there, see
    :func:`last_stable_offset`)."""
    found = problems if problems is not None else Problems()
    committed = ReadOptions(isolation=isolation).isolation == "read_committed"
    hws: dict[str, dict[TopicPartition, int] | None] = {}
    out: dict[TopicPartition, PartitionTail] = {}
    for log_dir, part in _open_partitions(paths, topics, partitions, found, storage_options):
        if log_dir not in hws:
            hws[log_dir] = read_high_watermarks(log_dir, found)
        marks = hws[log_dir]
        tp = (part.topic, part.partition)
        start = _log_start(part, include_deleted)
        end, _ = log_end(part)
        hw = marks.get(tp) if marks is not None else None
        how = resolve_bound(bound, marks is not None)
        readable = end if how == "end" else min(end, start if hw is None else max(hw, start))
        if caps is not None and tp in caps:
            readable = max(start, min(readable, caps[tp]))
        if committed and readable > start:
            pos = positions.get(tp) if positions is not None else None
            lso = last_stable_offset(part, pos if pos is not None and start <= pos <= readable
                                     else None, readable)
            if lso is not None:
                readable = max(start, min(readable, lso))
        out[tp] = PartitionTail(part.topic, part.partition, part.path, start, end, hw, readable)
    return out


def offsets_for_times(paths: Sequence[str], times: int | Mapping[TopicPartition, int], *,
                      topics: Iterable[str] | None = None,
                      partitions: Iterable[int] | None = None, include_deleted: bool = False,
                      problems: Problems | None = None,
                      storage_options: Mapping[str, Any] | None = None
                      ) -> dict[TopicPartition, int | None]:
    """Kafka's ``ListOffsets`` by timestamp for the selected partitions: the first offset
    at or after the log start offset whose record has a timestamp at or after ``times`` (one
    timestamp for every partition, or one per partition: the others are left out); None when
    no record has one (:meth:`~kproto.storage.partition.Partition.offset_for_timestamp`: the
    time index, then the offset index, then a scan from there)."""
    found = problems if problems is not None else Problems()
    out: dict[TopicPartition, int | None] = {}
    for _, part in _open_partitions(paths, topics, partitions, found, storage_options):
        tp = (part.topic, part.partition)
        t = times if isinstance(times, int) else times.get(tp)
        if t is None:
            continue
        hit = part.offset_for_timestamp(t, _log_start(part, include_deleted))
        out[tp] = None if hit is None else hit[0]
    return out


def active_aborted(part: Partition, position: int | None = None) -> list[AbortedTxn]:
    """Aborted transactions whose ABORT marker is in the partition's last (active) segment,
    from ``position`` on when it is inside it, rebuilt from its batches: a broker may write
    the active segment's ``.txnindex`` only when it rolls the segment (kproto's does). Read
    from ``position``, a transaction begun before it gets its first offset at or after it,
    which is all a read from ``position`` needs."""
    if not part.segments:
        return []
    seg = part.segments[-1]
    if position is not None and position > seg.base_offset:
        return _scan_producers(part, position, ProducerStateTracker(), None, skip_below=False)
    tracker = _snapshot_state(part, seg.base_offset) or ProducerStateTracker()
    return _scan_producers(part, seg.base_offset, tracker, None, skip_below=False)


def _cut(split: Split, end_offset: int) -> Split:
    """``split`` ending before the first batch at or past ``end_offset``, or after its last
    complete batch (bytes past that are a write in progress, not a torn tail): scanned from
    its last batch boundary the offset index knows (a small ranged read of a remote file)."""
    begin = max((p for p in split.resync if p < split.end), default=split.start)
    data = fs.read_range(split.path, begin, split.end)
    cut = begin
    for batch in scan_batches(data):
        if batch.base_offset >= end_offset:
            break
        cut = begin + batch.position + batch.size_in_bytes
    if cut == split.end:
        return split
    return replace(split, end=cut, resync=tuple(p for p in split.resync if p < cut))


def _tailed_split(part: Partition, frm: int, to: int) -> Split | None:
    """The split of offsets ``[frm, to)`` when they are all in the active segment and earlier
    steps saw its batches that far (:func:`_scan`): cut at those batch boundaries, without
    reading its index (a broker may not have written one yet: it would be rebuilt by
    scanning the whole segment) nor its bytes. None otherwise (planned as a batch read)."""
    if not part.segments:
        return None
    seg = part.segments[-1]
    seen = _known(seg)
    if seen is None or not seen.offsets or frm < max(seg.base_offset, seen.offsets[0]) \
            or to > seen.end_offset:
        return None
    i = bisect.bisect_right(seen.offsets, frm) - 1
    j = bisect.bisect_left(seen.offsets, to)
    end = seen.positions[j] if j < len(seen.offsets) else seen.end
    assert seg.files.log is not None  # Partition.open keeps only segments with a .log
    return Split(seg.files.log, part.topic, part.partition, seg.base_offset, seen.positions[i],
                 end, tuple(seen.positions[i + 1:j]), tuple(part.aborted))


def plan_ranges(ranges: Mapping[TopicPartition, tuple[int, int]],
                folders: Mapping[TopicPartition, str], options: ReadOptions = ReadOptions(),
                problems: Problems | None = None,
                storage_options: Mapping[str, Any] | None = None) -> list[Split]:
    """Splits reading each partition's ``[from, to)`` of ``ranges`` with ``options``
    (:func:`~kproto.storage.reader.plan_splits` per partition folder, the last split cut at
    ``to``; offsets all in the active segment, which the stream's steps tail, are cut at the
    batch boundaries they saw; with read_committed the aborted transactions of the active segment from ``from``
    on are added, and no last stable offset is needed: ``to`` is below it). Read each with
    ``options`` bounded by its partition's range (:func:`split_options`)."""
    found = problems if problems is not None else Problems()
    out: list[Split] = []
    committed = options.isolation == "read_committed"
    # the stream's bound already stops before open transactions: no scan for them here
    planning = replace(options, isolation="read_uncommitted")
    for tp, (frm, to) in sorted(ranges.items()):
        folder = folders.get(tp)
        if folder is None or frm >= to:
            continue
        fs.configure(folder, storage_options)
        part = Partition.open(folder)
        tailed = _tailed_split(part, frm, to)
        if tailed is not None:
            splits = [tailed]
        else:
            splits = plan_splits(folder, options=split_options(planning, frm, to),
                                 problems=found, storage_options=storage_options)
            if not splits:
                continue
            splits[-1] = _cut(splits[-1], to)
        if committed:
            known = set(splits[0].aborted)
            extra = tuple(a for a in active_aborted(part, frm) if a not in known)
            if extra:
                splits = [replace(s, aborted=s.aborted + extra) for s in splits]
        out += [s for s in splits if s.end > s.start]
    return out


def split_options(options: ReadOptions, frm: int, to: int) -> ReadOptions:
    """``options`` reading offsets ``[frm, to)`` only."""
    return replace(options, start_offset=frm, end_offset=to)


__all__ = ["BOUNDS", "HW_CHECKPOINT", "PartitionTail", "active_aborted", "advance",
           "last_stable_offset", "locate", "log_end", "offsets_for_times", "offsets_from_json", "offsets_to_json", "plan_ranges",
           "read_high_watermarks", "resolve_bound", "split_options", "stream_ranges",
           "tail_log_dirs"]
