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

import math
import os
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from kproto.problems import Problems
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.indexes import AbortedTxn
from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import Partition, read_file, read_log_start_offsets, scan_batches
from kproto.storage.reader import ReadOptions, Split, first_unstable_offset, mapped_file, plan_splits
from kproto.storage.writer import ProducerStateTracker, rebuild_txn_index

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
def _local(path: str) -> str:
    if "://" in path:
        raise NotImplementedError(f"tailing reads local log directories only, not {path!r}")
    return os.path.normpath(path)


def _log_dirs(paths: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``(log dir, partition folders)`` of each path (a log dir, or one partition folder)."""
    out = []
    for path in map(_local, paths):
        if is_partition_dir(path):
            out.append((os.path.dirname(path), [path]))
        else:
            out.append((path, [p.path for p in scan_log_dir(path).partitions]))
    return out


def _open_partitions(paths: Iterable[str], topics: Iterable[str] | None,
                     partitions: Iterable[int] | None, problems: Problems
                     ) -> list[tuple[str, Partition]]:
    """``(log dir, partition)`` of every selected live partition folder under ``paths``, each
    with its log start checkpoint entry."""
    topics = set(topics) if topics is not None else None
    parts = set(partitions) if partitions is not None else None
    out = []
    for log_dir, folders in _log_dirs(paths):
        layouts = [scan_partition_dir(f) for f in folders]
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
           problems: Problems | None = None) -> dict[TopicPartition, tuple[str, int]]:
    """``(partition folder, log start offset)`` of every selected partition: a listing, no
    segment is read."""
    found = problems if problems is not None else Problems()
    return {(p.topic, p.partition): (p.path, _log_start(p, include_deleted))
            for _, p in _open_partitions(paths, topics, partitions, found)}


def read_high_watermarks(log_dir: str, problems: Problems | None = None
                         ) -> dict[TopicPartition, int] | None:
    """The high watermarks of ``log_dir``'s ``replication-offset-checkpoint`` by (topic,
    partition); None when there is no such file (a malformed one is reported and read as
    empty: nothing is known to be replicated)."""
    path = os.path.join(log_dir, HW_CHECKPOINT)
    if not os.path.isfile(path):
        return None
    cp = read_file(path, lambda b: OffsetCheckpoint.parse(b, HW_CHECKPOINT),
                   problems if problems is not None else Problems())
    return {(t, p): o for t, p, o in cp.entries} if cp is not None else {}


def log_end(part: Partition) -> tuple[int, int]:
    """``(log end offset, byte position after the last complete batch)`` of the partition's
    last segment: scanned from its last offset-index entry, a partial batch at the end being a
    write still in progress (not reported)."""
    if not part.segments:
        return (part.log_start_offset or 0), 0
    seg = part.segments[-1]
    idx = seg.offset_index
    pos = int(idx.positions[-1]) if len(idx) else 0
    end, end_pos = seg.base_offset, pos
    for batch in seg.scan(pos):
        end, end_pos = batch.last_offset + 1, batch.position + batch.size_in_bytes
    return max(end, seg.base_offset), end_pos


def tail_log_dirs(paths: Sequence[str], *, topics: Iterable[str] | None = None,
                  partitions: Iterable[int] | None = None, bound: str = "auto",
                  isolation: str = "read_uncommitted", include_deleted: bool = False,
                  caps: Mapping[TopicPartition, int] | None = None,
                  problems: Problems | None = None) -> dict[TopicPartition, PartitionTail]:
    """A snapshot of the selected partitions under ``paths`` (log dirs or partition folders):
    see :class:`PartitionTail` and the module's documentation for ``bound``. ``caps`` lowers
    a partition's readable offset (a rate limit) before read_committed stops it short of the
    transactions still open there."""
    found = problems if problems is not None else Problems()
    committed = ReadOptions(isolation=isolation).isolation == "read_committed"
    hws: dict[str, dict[TopicPartition, int] | None] = {}
    out: dict[TopicPartition, PartitionTail] = {}
    for log_dir, part in _open_partitions(paths, topics, partitions, found):
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
            lso = first_unstable_offset(part, readable)
            if lso is not None:
                readable = max(start, min(readable, lso))
        out[tp] = PartitionTail(part.topic, part.partition, part.path, start, end, hw, readable)
    return out


def active_aborted(part: Partition) -> list[AbortedTxn]:
    """Aborted transactions whose ABORT marker is in the partition's last (active) segment,
    rebuilt from its batches: a broker may write the active segment's ``.txnindex`` only when
    it rolls the segment (kproto's does)."""
    if not part.segments:
        return []
    seg = part.segments[-1]
    tracker = ProducerStateTracker()
    snap = part.snapshot(seg.base_offset) if seg.base_offset in part.snapshot_offsets else None
    if snap is not None and snap.crc_valid:
        tracker = ProducerStateTracker.from_snapshot(snap.entries)
    # from the bytes, not Segment.scan: that would rebuild a missing .index first
    return rebuild_txn_index(seg.read(), tracker)


def _end_position(data: memoryview, split: Split, end_offset: int) -> int:
    """Where the batches of ``split`` below ``end_offset`` end in ``data`` (the file)."""
    cut = split.start
    for batch in scan_batches(data, split.start, min(split.end, len(data)), resync=split.resync):
        if batch.base_offset >= end_offset:
            break
        cut = batch.position + batch.size_in_bytes
    return cut


def _cut(split: Split, end_offset: int) -> Split:
    """``split`` ending before the first batch at or past ``end_offset``, or after its last
    complete batch (bytes past that are a write in progress, not a torn tail)."""
    with mapped_file(split.path) as view:
        if not len(view):
            return replace(split, end=split.start)
        cut = _end_position(view, split, end_offset)
    if cut == split.end:
        return split
    return replace(split, end=cut, resync=tuple(p for p in split.resync if p < cut))


def plan_ranges(ranges: Mapping[TopicPartition, tuple[int, int]],
                folders: Mapping[TopicPartition, str], options: ReadOptions = ReadOptions(),
                problems: Problems | None = None) -> list[Split]:
    """Splits reading each partition's ``[from, to)`` of ``ranges`` with ``options``
    (:func:`~kproto.storage.reader.plan_splits` per partition folder, the last split cut at
    ``to``; with read_committed the active segment's aborted transactions are added). Read
    each with ``options`` bounded by its partition's range (:func:`split_options`)."""
    found = problems if problems is not None else Problems()
    out: list[Split] = []
    committed = options.isolation == "read_committed"
    for tp, (frm, to) in sorted(ranges.items()):
        folder = folders.get(tp)
        if folder is None or frm >= to:
            continue
        splits = plan_splits(folder, options=split_options(options, frm, to), problems=found)
        if not splits:
            continue
        splits[-1] = _cut(splits[-1], to)
        if committed:
            known = set(splits[0].aborted)
            extra = tuple(a for a in active_aborted(Partition.open(folder)) if a not in known)
            if extra:
                splits = [replace(s, aborted=s.aborted + extra) for s in splits]
        out += [s for s in splits if s.end > s.start]
    return out


def split_options(options: ReadOptions, frm: int, to: int) -> ReadOptions:
    """``options`` reading offsets ``[frm, to)`` only."""
    return replace(options, start_offset=frm, end_offset=to)


__all__ = ["BOUNDS", "HW_CHECKPOINT", "PartitionTail", "active_aborted", "advance",
           "locate", "log_end", "offsets_from_json", "offsets_to_json", "plan_ranges",
           "read_high_watermarks", "resolve_bound", "split_options", "stream_ranges",
           "tail_log_dirs"]
