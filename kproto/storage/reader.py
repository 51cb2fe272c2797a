"""Every record of a log directory (or of one partition folder) as Arrow.

Reading is planned as :class:`Split` s (a byte range of one segment, cut at batch boundaries
the ``.index`` knows, so a huge segment spreads over many tasks) and each split is read into
``pyarrow.RecordBatch`` es by :func:`read_split`; :func:`iter_arrow` / :func:`read_arrow` do both
on one machine and a Spark source can ship the (picklable) splits to executors.

``isolation="read_committed"`` returns what a consumer with ``isolation.level=read_committed``
sees: no batch of an aborted transaction (``.txnindex``; a transactional batch of producer P is
aborted when an aborted transaction of P spans it, i.e. Kafka's fetch-side rule), nothing at or
past the last stable offset (the first offset of a transaction still open in the log), and no
control records unless ``include_control``.

Each partition is read from its log start offset: records below the log dir's
``log-start-offset-checkpoint`` entry (removed by DeleteRecords or retention, though their
segment is still on disk) are left out, as no consumer can fetch them, unless
``include_deleted``.
"""
from __future__ import annotations

import bisect
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from kproto.records.compression import (DEFAULT_BUDGET_FLOOR, DEFAULT_BUDGET_RATIO,
                                      DecompressionBudget, DecompressionLimitError)
from kproto.codecs.primitives import INT64_MAX
from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records.batch import RecordBatch
from kproto.records import columns
from kproto.records.batch import CRC_START, HEADER_SIZE, MAX_CODEC, header_problem
from kproto.records.control import check_control_keys
from kproto.records.columns import (F_ATTR, F_BASE, F_COUNT, F_CRC, F_CRC_COMPUTED, F_LOD,
                                    F_MTS, F_PID, F_POS, F_SIZE, BuiltColumns, decode_arrow)
from kproto.records.compression import DEFAULT_MAX_SIZE, NONE, ZSTD, decompress
from kproto.records.record import (ATTR_COMPRESSION, ATTR_CONTROL, ATTR_DELETE_HORIZON,
                                   ATTR_TRANSACTIONAL)
from kproto.records.reader import Batch
from kproto.records.transactions import AbortedTransactions
from kproto.storage import fs
from kproto.storage.fs import mapped_file
from kproto.storage.indexes import AbortedTxn
from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import Partition, Segment, read_log_start_offsets, scan_batches

ISOLATIONS = ("read_uncommitted", "read_committed")
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_CHUNK_BYTES = 4 * 1024 * 1024  # batch bytes decoded per Arrow batch
# bytes of a remote segment fetched per ranged read: large enough that a request's latency is
# small beside its transfer, small enough to bound what a task holds
REMOTE_READ_BYTES = 32 << 20

#: the C helper's one-pass read (False: always the reference path, as without the helper)
FAST_SCAN = True
#: whether the C helper computes the batches' CRC-32C in that path (None: where it has the
#: CPU's instruction; elsewhere the crc32c package, which may have it, does, batch by batch)
CRC_IN_C: bool | None = None
_FRAME_ROWS = 4096  # batches framed per call of the C helper (one table, reused)
_MIN_BATCH = HEADER_SIZE  # the smallest v2 batch: no more rows than this allows
_TIMESTAMP = pa.timestamp("ms", tz="UTC")
# batch fields the C builder spreads over the records unless they are the same for a whole
# chunk (position always differs; topic, partition, compression and segment are constants)
_SPREAD_COLUMNS = ("leader_epoch", "producer_id", "producer_epoch", "base_sequence",
                   "is_transactional", "is_control")
_MAX_CONSTS = 64  # constant columns a split keeps for its next chunks

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_schema(binary_view: bool = False) -> pa.Schema:
    """The columns of :func:`read_arrow`. ``timestamp_type``: 0 CreateTime, 1 LogAppendTime,
    -1 none (magic 0); ``position``: byte position of the record's batch in ``segment``."""
    binary = pa.binary_view() if binary_view else pa.binary()
    # Only keys and values can be null. Saying so is more than documentation: Spark's
    # generated row copy skips the null checks of non-nullable columns (~15% of its work).
    return pa.schema([pa.field(name, kind, nullable=name in ("key", "value")) for name, kind in (
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")), ("timestamp_type", pa.int8()),
        ("key", binary), ("value", binary), ("headers", HEADER_TYPE),
        ("leader_epoch", pa.int32()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
        ("base_sequence", pa.int32()), ("is_transactional", pa.bool_()),
        ("is_control", pa.bool_()), ("compression", pa.string()), ("segment", pa.string()),
        ("position", pa.int64()),
    )])


@dataclass(frozen=True)
class ReadOptions:
    """What to read. Offset and timestamp ranges are half-open ``[start, end)``."""

    start_offset: int | None = None
    end_offset: int | None = None
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    isolation: str = "read_uncommitted"
    include_control: bool = False
    # records below a partition's log start offset (log-start-offset-checkpoint) too
    include_deleted: bool = False
    verify_crc: bool = False
    binary_view: bool = False  # keys/values as binary_view instead of binary
    # what one split may decompress: floor + ratio x its compressed bytes (DecompressionBudget)
    budget_floor: int = DEFAULT_BUDGET_FLOOR
    budget_ratio: int = DEFAULT_BUDGET_RATIO

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, not {self.isolation!r}")


@dataclass(frozen=True)
class Split:
    """A byte range ``[start, end)`` of one segment, at batch boundaries, plus what reading it
    needs from the rest of the partition (aborted transactions, last stable offset)."""

    path: str  # the .log file
    topic: str
    partition: int
    base_offset: int
    start: int
    end: int
    resync: tuple[int, ...] = ()  # batch boundaries inside the range (offset-index positions)
    aborted: tuple[AbortedTxn, ...] = ()
    last_stable_offset: int | None = None
    next_base_offset: int | None = None  # the next segment's: no batch here may reach it
    # the partition's log start offset when it falls inside this segment (records below it
    # are deleted: skipped unless ReadOptions.include_deleted)
    log_start_offset: int | None = None

    @property
    def size(self) -> int:
        """Bytes in the split."""
        return self.end - self.start


# -------------------------------------------------------------------------------- planning
def _partitions(path: str, topics: Iterable[str] | None = None,
                partitions: Iterable[int] | None = None,
                problems: Problems | None = None) -> list[Partition]:
    """The selected partitions, each with its entry of the log dir's
    ``log-start-offset-checkpoint`` (for a partition folder: that of the folder it is in)."""
    path = fs.normpath(path)
    single = is_partition_dir(path)
    layouts = [scan_partition_dir(path)] if single else scan_log_dir(path).partitions
    topics = set(topics) if topics is not None else None
    parts = set(partitions) if partitions is not None else None
    layouts = [p for p in layouts
               if (topics is None or p.topic in topics) and (parts is None or p.partition in parts)]
    starts = read_log_start_offsets(os.path.dirname(path) if single else path, problems) \
        if layouts else {}
    return [Partition.open(p, log_start_offset=starts.get((p.topic, p.partition)))
            for p in layouts]


def first_unstable_offset(part: Partition, end_offset: int | None = None) -> int | None:
    """First offset of the earliest transaction still open at the end of the log (None if
    none): the producer state of the latest usable snapshot, brought up to date by scanning the
    batches after it, as a broker's recovery does. ``end_offset``: as of that offset instead,
    as if nothing at or past it were written (a transaction whose marker is there is open)."""
    ongoing: dict[int, int] = {}
    start = None
    for offset in sorted(part.snapshot_offsets, reverse=True):
        if end_offset is not None and offset > end_offset:
            continue
        snap = part.snapshot(offset)
        if snap is not None and snap.crc_valid:
            ongoing = {e.producer_id: e.current_txn_first_offset for e in snap.entries
                       if e.current_txn_first_offset >= 0}
            start = offset
            break
    for _seg, batch in part.batches(start_offset=start):
        if end_offset is not None and batch.base_offset >= end_offset:
            break
        if not isinstance(batch, RecordBatch) or not batch.is_transactional:
            continue
        if start is not None and batch.base_offset < start:
            continue
        if batch.is_control:
            ongoing.pop(batch.producer_id, None)
        else:
            ongoing.setdefault(batch.producer_id, batch.base_offset)
    return min(ongoing.values()) if ongoing else None


def _segment_range(seg: Segment, is_last: bool, opts: ReadOptions) -> tuple[int, int] | None:
    """Byte range of ``seg`` worth reading for ``opts`` (None: nothing in it)."""
    start = 0
    if opts.start_offset is not None and opts.start_offset > seg.base_offset:
        start = seg.position_of(opts.start_offset)
    if opts.start_timestamp is not None:
        tidx = seg.time_index
        if not is_last and not tidx.preallocated and len(tidx) \
                and int(tidx.timestamps[-1]) < opts.start_timestamp:
            return None  # a closed segment's last time-index entry is its max timestamp
        start = max(start, seg.position_of_timestamp(opts.start_timestamp))
    end = seg.log_size
    if opts.end_offset is not None:
        idx = seg.offset_index
        # entry j maps the last offset of an append; everything after that append (from the
        # next entry's position on) is past it, so cut there once it reaches end_offset - 1
        j = int(np.searchsorted(idx.offsets, opts.end_offset - 1, side="left"))
        if j + 1 < len(idx):
            end = int(idx.positions[j + 1])
    return (start, end) if start < end else None


def plan_splits(path: str, *, topics: Iterable[str] | None = None,
                partitions: Iterable[int] | None = None, options: ReadOptions = ReadOptions(),
                split_bytes: int | None = None,
                problems: Problems | None = None,
                storage_options: Mapping[str, Any] | None = None) -> list[Split]:
    """Splits covering what ``options`` asks for: one per segment (the range of it worth
    reading), or, with ``split_bytes``, pieces of about that size cut by :func:`balance` at
    offset-index positions (so never inside a batch). What is wrong with the partitions'
    index and metadata files is reported in ``problems``. ``path`` may be a URI
    (``s3://``...; see :mod:`kproto.storage.fs`, ``storage_options`` for its filesystem):
    planning lists folders and reads index files, never segment bodies (unless an index
    is missing, or ``read_committed`` scans for open transactions)."""
    fs.configure(path, storage_options)
    out: list[Split] = []
    for part in _partitions(path, topics, partitions, problems):
        aborted = tuple(part.aborted)
        lso = first_unstable_offset(part) if options.isolation == "read_committed" else None
        # the log start offset narrows the read like a start offset (segments below it are
        # skipped, the one holding it is entered through its index)
        log_start = None if options.include_deleted else part.checkpoint_start_offset
        opts = options
        if log_start is not None and (opts.start_offset is None or opts.start_offset < log_start):
            opts = replace(opts, start_offset=log_start)
        else:
            log_start = None
        segs = part.segments
        if opts.start_offset is not None:
            segs = segs[part.segment_for(opts.start_offset):]
        for k, seg in enumerate(segs):
            if opts.end_offset is not None and seg.base_offset >= opts.end_offset:
                break
            if lso is not None and seg.base_offset >= lso:
                break
            rng = _segment_range(seg, k == len(segs) - 1, opts)
            if rng is None:
                seg.offset_index  # noqa: B018 - reads the indexes, reporting what they say is lost
                continue
            assert seg.files.log is not None  # Partition.open keeps only segments with a .log
            lo, hi = rng
            # a missing index is rebuilt (a scan of the whole segment) only to cut it; a read
            # scans the batches anyway
            cuts = tuple(int(p) for p in seg.offset_index.positions if lo < p < hi) \
                if seg.files.index or split_bytes is not None else ()
            out.append(Split(seg.files.log, part.topic, part.partition, seg.base_offset, lo, hi,
                             cuts, aborted, lso, seg.next_base,
                             log_start if log_start is not None and log_start > seg.base_offset
                             else None))
        if problems is not None:
            problems.extend(part.problems)
            for seg in part.segments:
                problems.extend(seg.problems)
    if split_bytes is not None:
        out = [piece for group in balance(out, split_bytes) for piece in group]
    return out


def balance(splits: Sequence[Split], target: int) -> list[tuple[Split, ...]]:
    """Tasks of about ``target`` bytes each over ``splits`` (in order): the splits are laid
    end to end and cut every ``target`` bytes, at the batch boundary (``Split.resync``, from
    the ``.index``) nearest each cut. Small segments share a task, as Spark's file sources
    share one between small files: a task costs more than opening one more file."""
    groups: list[tuple[Split, ...]] = []
    group: list[Split] = []
    done, boundary = 0, target  # bytes laid so far; where the current task should end
    for s in splits:
        start = s.start
        while done + s.end - start > boundary:
            # cut near the boundary itself, so that cut errors do not add up over many tasks
            cut = _nearest(s.resync, start, s.end, start + boundary - done)
            if cut is None:
                break
            group.append(_piece(s, start, cut))
            groups.append(tuple(group))
            done += cut - start
            group, start = [], cut
            boundary = max(boundary + target, done + 1)
        group.append(_piece(s, start, s.end))
        done += s.end - start
        if done >= boundary:
            groups.append(tuple(group))
            group = []
            boundary = max(boundary + target, done + 1)
    if group:
        groups.append(tuple(group))
    return groups


def _nearest(positions: Sequence[int], lo: int, hi: int, want: int) -> int | None:
    """The position strictly inside ``(lo, hi)`` nearest ``want`` (None if there is none)."""
    i = bisect.bisect_left(positions, want)
    near = [p for p in positions[max(0, i - 1):i + 1] if lo < p < hi]
    if not near:  # the neighbours of `want` lie outside: take the closest inside, if any
        inside = [p for p in positions if lo < p < hi]
        near = inside[:1] + inside[-1:]
    return min(near, key=lambda p: abs(p - want)) if near else None


def _piece(s: Split, start: int, end: int) -> Split:
    if (start, end) == (s.start, s.end):
        return s
    return replace(s, start=start, end=end, resync=tuple(p for p in s.resync if start < p < end))


# --------------------------------------------------------------------------------- reading
def _keep_batch(batch: Batch, opts: ReadOptions, aborted: AbortedTransactions | None,
                lso: int | None) -> bool:
    if batch.last_offset < (opts.start_offset or 0):
        return False
    if opts.end_offset is not None and batch.base_offset >= opts.end_offset:
        return False
    if lso is not None and batch.base_offset >= lso:
        return False
    if isinstance(batch, RecordBatch):
        if opts.start_timestamp is not None and batch.max_timestamp < opts.start_timestamp \
                and not batch.has_delete_horizon:
            return False
        if batch.is_control and not opts.include_control:
            # skipped as Kafka's consumer skips it, once its records are control records
            check_control_keys([r.key for r in batch.record_list()])
            return False
        if aborted is not None:
            if batch.is_transactional and not batch.is_control and aborted.is_aborted(batch):
                return False
    return True


def _const_string(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = pa.allocate_buffer(4 * (n + 1))  # Arrow's pool: memory it already has
    np.multiply(np.arange(n + 1, dtype=np.int32), len(raw),
                out=np.frombuffer(offsets, np.int32))
    data = pa.allocate_buffer(len(raw) * n)
    if raw:
        np.frombuffer(data, f"S{len(raw)}")[:] = raw
    return pa.Array.from_buffers(pa.string(), n, [None, offsets, data])


def _const_array(kind: pa.DataType, value, n: int) -> pa.Array:
    """n times ``value`` as an array of ``kind`` (a fixed-width type or bool)."""
    if kind == pa.bool_():
        return pa.array(np.full(n, bool(value)))
    width = kind.bit_width // 8
    buf = pa.allocate_buffer(width * n)
    np.frombuffer(buf, f"<i{width}").fill(value)
    return pa.Array.from_buffers(kind, n, [None, buf])


_COMPRESSION_NAMES = COMPRESSION_NAMES + ("unknown",) * 3
_COMPRESSION = pa.array(_COMPRESSION_NAMES)


def _to_arrow(batches: list[Batch], split: Split, segment: str, opts: ReadOptions,
              schema: pa.Schema) -> pa.RecordBatch | None:
    """The records of ``batches`` (v2 or legacy) as the reader's Arrow batch, in one assembly:
    record columns from :func:`~kproto.records.columns.decode_arrow`, batch fields spread over
    their records (a legacy entry has no leader epoch, producer or sequence: -1)."""
    recs = decode_arrow(batches)
    n = len(recs)
    if n == 0:
        return None
    key: pa.Array
    value: pa.Array
    key, value = recs.key, recs.value
    if opts.binary_view:  # views of the binary arrays' data: cheaper than views of the records
        key, value = key.cast(pa.binary_view()), value.cast(pa.binary_view())
    counts = recs.counts
    nb = len(batches)

    def per_batch(values, dtype) -> pa.Array:
        return pa.array(np.repeat(np.fromiter(values, dtype, nb), counts))

    attrs = np.fromiter((b.attributes for b in batches), np.int64, nb)
    magic = np.fromiter((b.magic for b in batches), np.int64, nb)
    codecs = attrs & 0x07
    if (codecs == codecs[0]).all():  # the usual case: one codec for the whole chunk
        compression = _const_string(_COMPRESSION_NAMES[int(codecs[0])], n)
    else:
        compression = _COMPRESSION.take(pa.array(np.repeat(codecs.astype(np.int8), counts)))
    rec_attrs = np.repeat(attrs, counts)
    ts_type = np.repeat(np.where(magic == 0, -1, (attrs & 0x08) >> 3), counts)  # magic 0: none
    arrays = [
        _const_string(split.topic, n),
        pa.array(np.full(n, split.partition, np.int32)),
        pa.array(recs.offset),
        pa.array(recs.timestamp).view(pa.timestamp("ms", tz="UTC")),
        pa.array(ts_type.astype(np.int8)),
        key, value, recs.headers,
        per_batch((getattr(b, "partition_leader_epoch", -1) for b in batches), np.int32),
        per_batch((getattr(b, "producer_id", -1) for b in batches), np.int64),
        per_batch((getattr(b, "producer_epoch", -1) for b in batches), np.int16),
        per_batch((getattr(b, "base_sequence", -1) for b in batches), np.int32),
        pa.array((rec_attrs & 0x10) != 0), pa.array((rec_attrs & 0x20) != 0),
        compression,
        _const_string(segment, n),
        per_batch((b.position + split.start for b in batches), np.int64),
    ]
    out = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return _trim(out, recs.offset, recs.timestamp, split, opts)


def _trim(out: pa.RecordBatch, offset: np.ndarray, timestamp: np.ndarray, split: Split,
          opts: ReadOptions) -> pa.RecordBatch | None:
    """Drop the records of edge batches outside the ranges (batches were chosen whole)."""
    keep = None
    for bound, arr, lower in ((opts.start_offset, offset, True),
                              (opts.end_offset, offset, False),
                              (opts.start_timestamp, timestamp, True),
                              (opts.end_timestamp, timestamp, False)):
        if bound is not None:
            k = (arr >= bound) if lower else (arr < bound)
            keep = k if keep is None else keep & k
    if split.last_stable_offset is not None and opts.isolation == "read_committed":
        k = offset < split.last_stable_offset
        keep = k if keep is None else keep & k
    if keep is not None and not keep.all():
        out = out.filter(pa.array(keep))
    return out if out.num_rows else None


def read_split(split: Split, options: ReadOptions = ReadOptions(), *,
               problems: Problems | None = None, chunk_bytes: int = _CHUNK_BYTES,
               storage_options: Mapping[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one split as Arrow record batches (of about ``chunk_bytes`` of log);
    damage met is reported in ``problems`` (with the split's file, topic and partition).
    A remote split is fetched in ranged reads of about :data:`REMOTE_READ_BYTES`, cut at
    its batch boundaries."""
    if split.end <= split.start:
        return
    if fs.is_remote(split.path):
        fs.configure(split.path, storage_options)
        pieces = [p for group in balance([split], REMOTE_READ_BYTES) for p in group]
        # the next piece downloads while this one decodes (pyarrow reads without the GIL)
        with fs.open_input(split.path) as f, ThreadPoolExecutor(1) as pool:
            fetch = [pool.submit(f.read_at, p.size, p.start) for p in pieces[:1]]
            for i, piece in enumerate(pieces):
                data = fetch.pop().result()
                if i + 1 < len(pieces):
                    fetch.append(pool.submit(f.read_at, pieces[i + 1].size, pieces[i + 1].start))
                yield from read_buffer(data, piece, options, problems=problems,
                                       chunk_bytes=chunk_bytes)
        return
    # mapped, not read: the decoder copies the records once anyway
    with mapped_file(split.path) as whole:
        view = whole[split.start:split.end]
        try:
            yield from read_buffer(view, split, options, problems=problems, chunk_bytes=chunk_bytes)
        finally:
            view.release()


def read_buffer(data: bytes | memoryview, split: Split, options: ReadOptions = ReadOptions(), *,
                problems: Problems | None = None,
                chunk_bytes: int = _CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """Sans-I/O core of :func:`read_split`: ``data`` holds the split's bytes."""
    if split.log_start_offset is not None and not options.include_deleted and (
            options.start_offset is None or options.start_offset < split.log_start_offset):
        # once per split: records below the log start are cut as by a start offset
        options = replace(options, start_offset=split.log_start_offset)
    read = _SplitRead(data, split, options, problems, chunk_bytes)
    if read.fast_ok():
        return read.fast()
    return read.slow(0, None, [], 0)


def _constant(values: np.ndarray) -> bool:
    return len(values) == 0 or bool((values == values[0]).all())


def _fits_int64(*values: int | None) -> bool:
    return all(v is None or -(1 << 63) <= v < (1 << 63) for v in values)


class _SplitRead:
    """One read of a split's bytes, two ways that give the same batches and the same reports.

    :meth:`slow` is the reference: batch objects from
    :func:`~kproto.storage.partition.scan_batches`, filtered one by one, decoded in chunks by
    :func:`~kproto.records.columns.decode_arrow`. :meth:`fast` (with the C helper) frames the
    batches into a table (CRC-32C included), checks and filters them with numpy and builds a
    chunk's columns in one C pass; at anything it does not expect it hands over to the
    reference: framing it does not handle (torn tail, legacy or damaged batches) to
    :meth:`slow` for the rest of the split, records that do not decode to :func:`_decode` for
    the chunk, which reports them."""

    def __init__(self, data: bytes | memoryview, split: Split, opts: ReadOptions,
                 problems: Problems | None, chunk_bytes: int) -> None:
        self.data = data if isinstance(data, memoryview) else memoryview(data)
        self.split, self.opts, self.chunk_bytes = split, opts, chunk_bytes
        self.schema = arrow_schema(opts.binary_view)
        self.segment = os.path.basename(split.path)
        committed = opts.isolation == "read_committed"
        self.aborted = AbortedTransactions((a.producer_id, a.first_offset, a.last_offset)
                                           for a in split.aborted) if committed else None
        self.lso = split.last_stable_offset if committed else None
        self.found = (problems if problems is not None else Problems()).scope(
            source=split.path, topic=split.topic, partition=split.partition)
        self.resync = [p - split.start for p in split.resync]
        self.budget = DecompressionBudget(opts.budget_floor, opts.budget_ratio)
        self.consts: dict[tuple, pa.Array] = {}  # constant columns, sliced for each chunk
        self.deferred: list[tuple[int, str, str, int, int]] = []  # see _defer

    # ---------------------------------------------------------------------- the reference
    def slow(self, start: int, low: int | None, pending: list[Batch], size: int
             ) -> Iterator[pa.RecordBatch]:
        """Batches from ``start`` on (``low``: the next offset a batch may start at, None
        before the split's first batch; ``pending``: batches of the current chunk, ``size``
        their bytes)."""
        split, opts = self.split, self.opts
        for batch in scan_batches(self.data, start, resync=self.resync,
                                  verify_crc=opts.verify_crc, problems=self.found,
                                  shift=split.start, offsets=(split.base_offset, split.next_base_offset),
                                  after=low, budget=self.budget):
            try:
                keep = _keep_batch(batch, opts, self.aborted, self.lso)
            except DecodeError as exc:
                # a legacy wrapper knows its first offset only from its (damaged) inner messages
                kind = "limit" if isinstance(exc, DecompressionLimitError) else "corrupt"
                self.found.report(kind, f"records do not decode: {exc}",
                                  position=split.start + batch.position,
                                  bytes_skipped=batch.size_in_bytes)
                continue
            if not keep:
                continue
            pending.append(batch)
            size += batch.size_in_bytes
            if size >= self.chunk_bytes:
                yield from self._decode(pending)
                pending, size = [], 0
        if pending:
            yield from self._decode(pending)

    def _decode(self, batches: list[Batch]) -> Iterator[pa.RecordBatch]:
        return _decode(batches, self.split, self.segment, self.opts, self.schema, self.found)

    # ----------------------------------------------------------------------- the fast path
    def fast_ok(self) -> bool:
        """Whether :meth:`fast` can read this split (the C helper is there, and every bound
        is an int64 as the batch table's columns are)."""
        sp = columns._speedups
        o, s = self.opts, self.split
        return FAST_SCAN and sp is not None and hasattr(sp, "frame_v2") and _fits_int64(
            o.start_offset, o.end_offset, o.start_timestamp, s.base_offset, s.next_base_offset,
            self.lso, s.start)

    def fast(self) -> Iterator[pa.RecordBatch]:
        sp = columns._speedups
        assert sp is not None
        data, end = self.data, len(self.data)
        table = columns.frame_table(max(1, min(_FRAME_ROWS, end // _MIN_BATCH + 1)))
        pos = 0
        low: int | None = None
        pending: list[np.ndarray] = []
        size = 0
        crc_in_c = bool(sp.CRC_HARDWARE) if CRC_IN_C is None else CRC_IN_C
        while True:
            # a window ends with the batch that fills the chunk: the reference decodes there
            k, nxt, stop = sp.frame_v2(data, pos, end, max(1, self.chunk_bytes - size), table,
                                       crc_in_c)
            if k:
                rows = table[:k]
                if not crc_in_c:
                    rows[:, F_CRC_COMPUTED] = [crc32c(data[p + CRC_START:p + n])
                                               for p, n in rows[:, :2].tolist()]
                placed, low = self._place(rows, low)
                keep = placed & self._keep(rows)
                if not self.opts.include_control:
                    self._check_control(rows, keep)
                if self.deferred:
                    self._flush()
                kept = rows[keep]  # a copy: the table is reused
                if len(kept):
                    pending.append(kept)
                    size += int(kept[:, F_SIZE].sum())
            if stop == 2:  # what the reference must read (and report) from here on
                batches: list[Batch] = [self._batch(r) for rows in pending for r in rows]
                yield from self.slow(nxt, low, batches, size)
                return
            if pending and (size >= self.chunk_bytes or stop == 0):
                yield from self._decode_rows(pending[0] if len(pending) == 1
                                             else np.concatenate(pending))
                pending, size = [], 0
            if stop == 0:
                return
            pos = nxt

    def _batch(self, row: np.ndarray) -> RecordBatch:
        return RecordBatch(self.data, int(row[F_POS]), budget=self.budget)

    def _place(self, rows: np.ndarray, low: int | None) -> tuple[np.ndarray, int | None]:
        """Which framed batches :func:`~kproto.storage.partition.scan_batches` would yield
        (CRC and offset checks, reported as it reports them), and the next ``low``."""
        first = rows[:, F_BASE]
        last = first + rows[:, F_LOD]  # wraps as RecordBatch.last_offset does
        crc_bad = rows[:, F_CRC] != rows[:, F_CRC_COMPUTED]
        attrs_bad = ((rows[:, F_ATTR] & ATTR_COMPRESSION) > MAX_CODEC) | (
            (rows[:, F_COUNT] == 0) & (rows[:, F_SIZE] > HEADER_SIZE))  # header_problem's
        high = self.split.next_base_offset
        base = self.split.base_offset
        if _fits_int64(base if low is None else low) and not crc_bad.any() and not attrs_bad.any():
            prev = np.empty_like(first)
            # the split's first batch may start below the segment's base but not end below it
            prev[0] = first[0] if low is None else low
            prev[1:] = last[:-1] + 1
            bad = (first < prev) | (last < first)
            if low is None:
                bad[0] |= last[0] < base
            bad[1:] |= last[:-1] == INT64_MAX  # the next low is past int64: nothing fits
            if high is not None:
                bad |= last >= high
            if not bad.any():
                return np.ones(len(rows), bool), int(last[-1]) + 1
        # some batch is out of place: the reference's rules, batch by batch
        placed = np.zeros(len(rows), bool)
        shift, verify = self.split.start, self.opts.verify_crc
        for i in range(len(rows)):
            at, size = int(rows[i, F_POS]) + shift, int(rows[i, F_SIZE])
            if attrs_bad[i]:  # as BatchReader frames it: damage before anything else
                self._defer(i, "corrupt", header_problem(int(rows[i, F_ATTR]),
                                                         int(rows[i, F_COUNT]),
                                                         int(rows[i, F_SIZE])) or "", at, size)
                continue
            if crc_bad[i]:
                self._defer(i, "crc", f"CRC mismatch: stored {int(rows[i, F_CRC])}, computed "
                            f"{int(rows[i, F_CRC_COMPUTED])}", at, size if verify else 0)
                if verify:
                    continue
            f, la = int(first[i]), int(last[i])
            if (la < base if low is None else f < low) or la < f or (high is not None and la >= high):
                lo = base if low is None else low
                where = f"[{lo}, {high})" if high is not None else f"from {lo}"
                self._defer(i, "corrupt", f"batch offsets {f}..{la} out of place: "
                            f"expected offsets {where}", at, size)
                continue
            low = la + 1
            placed[i] = True
        return placed, low

    def _keep(self, rows: np.ndarray) -> np.ndarray:
        """:func:`_keep_batch` of every framed batch."""
        o = self.opts
        first, attrs = rows[:, F_BASE], rows[:, F_ATTR]
        last = first + rows[:, F_LOD]
        keep = last >= (o.start_offset or 0)
        if o.end_offset is not None:
            keep &= first < o.end_offset
        if self.lso is not None:
            keep &= first < self.lso
        if o.start_timestamp is not None:
            keep &= (rows[:, F_MTS] >= o.start_timestamp) | ((attrs & ATTR_DELETE_HORIZON) != 0)
        aborted = self.aborted
        if aborted is not None and aborted.producers:
            data_txn = (attrs & (ATTR_TRANSACTIONAL | ATTR_CONTROL)) == ATTR_TRANSACTIONAL
            for i in np.flatnonzero(keep & data_txn).tolist():
                if aborted.is_aborted_at(int(rows[i, F_PID]), int(last[i])):
                    keep[i] = False
        return keep

    def _check_control(self, rows: np.ndarray, keep: np.ndarray) -> None:
        """Take the control batches out of ``keep``, each checked (and its damage reported)
        as :func:`_keep_batch` checks it: rare batches, decoded one by one."""
        for i in np.flatnonzero(keep & ((rows[:, F_ATTR] & ATTR_CONTROL) != 0)).tolist():
            keep[i] = False
            batch = self._batch(rows[i])
            try:
                check_control_keys([r.key for r in batch.record_list()])
            except DecodeError as exc:
                kind = "limit" if isinstance(exc, DecompressionLimitError) else "corrupt"
                self._defer(i, kind, f"records do not decode: {exc}",
                            self.split.start + batch.position, batch.size_in_bytes)

    def _defer(self, row: int, kind: str, reason: str, position: int, skipped: int) -> None:
        """A problem of the window's ``row``, reported by :meth:`_flush` in batch order (as
        the reference meets them: placement, then the control check, batch by batch)."""
        self.deferred.append((row, kind, reason, position, skipped))

    def _flush(self) -> None:
        for _row, kind, reason, position, skipped in sorted(self.deferred, key=lambda d: d[0]):
            self.found.report(kind, reason, position=position, bytes_skipped=skipped)
        self.deferred.clear()

    def _decode_rows(self, rows: np.ndarray) -> Iterator[pa.RecordBatch]:
        """A chunk of framed batches as one Arrow batch (C column builder); the reference
        decodes it when its records are not as expected."""
        counts, codecs = rows[:, F_COUNT], rows[:, F_ATTR] & ATTR_COMPRESSION
        has = counts > 0
        built = None
        saved = (self.budget.compressed, self.budget.decompressed)
        if not (codecs[has] > ZSTD).any():
            parts: list[bytes] = []
            try:
                for i in np.flatnonzero(has & (codecs != NONE)).tolist():
                    at, size = int(rows[i, F_POS]), int(rows[i, F_SIZE])
                    # as RecordBatch.records_data does it
                    parts.append(decompress(int(codecs[i]), self.data[at + HEADER_SIZE:at + size],
                                            max_size=DEFAULT_MAX_SIZE, budget=self.budget))
            except DecodeError:
                pass  # the reference decompresses it again and reports it
            else:
                # a batch field with one value for the whole chunk is a shared constant column
                live = rows[has]
                spread = [name for name in _SPREAD_COLUMNS
                          if not _constant(columns.batch_column(live, name))]
                built = columns.build_arrow(self.data, rows, parts, self.split.start,
                                            spread + ["position"])
        if built is None:
            # the reference decodes (and reports) from the same budget as if first
            self.budget.compressed, self.budget.decompressed = saved
            yield from self._decode([self._batch(r) for r in rows])
            return
        rb = self._assemble(rows, built)
        if rb is not None:
            yield rb

    def _const(self, key: tuple, make, n: int) -> pa.Array:
        """A column of one value for n records: one array per split, sliced."""
        arr = self.consts.get(key)
        if arr is None or len(arr) < n:
            if len(self.consts) >= _MAX_CONSTS:  # many producers: keep a few
                self.consts.clear()
            arr = self.consts[key] = make(n)
        return arr if len(arr) == n else arr.slice(0, n)

    def _batch_field(self, built: BuiltColumns, rows: np.ndarray, name: str, n: int) -> pa.Array:
        """A batch field's column: built, or the constant all batches with records share."""
        arr = built.arrays.get(name)
        if arr is not None:
            return arr
        value = columns.batch_column(rows[rows[:, F_COUNT] > 0], name)[0].item()
        kind = self.schema.field(name).type
        return self._const((name, value), partial(_const_array, kind, value), n)

    def _assemble(self, rows: np.ndarray, built: BuiltColumns) -> pa.RecordBatch | None:
        """:func:`_to_arrow`'s batch from the built columns."""
        n = len(built.offset)
        if n == 0:
            return None
        split, a = self.split, built.arrays
        key, value = a["key"], a["value"]
        if self.opts.binary_view:
            key, value = key.cast(pa.binary_view()), value.cast(pa.binary_view())
        codecs = rows[:, F_ATTR] & ATTR_COMPRESSION
        if (codecs == codecs[0]).all():
            name = _COMPRESSION_NAMES[int(codecs[0])]
            compression = self._const(("compression", name), partial(_const_string, name), n)
        else:
            compression = _COMPRESSION.take(pa.array(np.repeat(codecs.astype(np.int8),
                                                               rows[:, F_COUNT])))
        arrays = [
            self._const(("topic",), partial(_const_string, split.topic), n),
            self._const(("partition",), lambda m: pa.array(np.full(m, split.partition, np.int32)),
                        n),
            a["offset"], a["timestamp"].view(_TIMESTAMP), a["timestamp_type"], key, value,
            a["headers"], *(self._batch_field(built, rows, name, n) for name in _SPREAD_COLUMNS),
            compression,
            self._const(("segment",), partial(_const_string, self.segment), n),
            a["position"],
        ]
        out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        return _trim(out, built.offset, built.timestamp, split, self.opts)


def _decode(batches: list[Batch], split: Split, segment: str, opts: ReadOptions,
            schema: pa.Schema, problems: Problems) -> Iterator[pa.RecordBatch]:
    try:
        rb = _to_arrow(batches, split, segment, opts, schema)
    except OverflowError:
        if len(batches) == 1:
            raise
        # over 2 GiB of keys or values (very compressible batches): decode in halves
        half = len(batches) // 2
        yield from _decode(batches[:half], split, segment, opts, schema, problems)
        yield from _decode(batches[half:], split, segment, opts, schema, problems)
        return
    except DecodeError:
        # some batch's records do not decode: go batch by batch, reporting the bad ones
        for b in batches:
            try:
                rb = _to_arrow([b], split, segment, opts, schema)
            except DecodeError as exc:
                kind = "limit" if isinstance(exc, DecompressionLimitError) else "corrupt"
                problems.report(kind, f"records do not decode: {exc}",
                                position=split.start + b.position, bytes_skipped=b.size_in_bytes)
                continue
            if rb is not None:
                yield rb
        return
    if rb is not None:
        yield rb


def iter_arrow(path: str | os.PathLike[str], *, topics: Iterable[str] | None = None,
               partitions: Iterable[int] | None = None, problems: Problems | None = None,
               storage_options: Mapping[str, Any] | None = None,
               **options) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of every record under ``path`` (a log dir or a partition folder,
    local or a URI; ``storage_options``: see :func:`plan_splits`), partition by partition in
    offset order. ``options``: the fields of :class:`ReadOptions`. Damage found is reported
    in ``problems`` when given."""
    return _iter_arrow(os.fspath(path), topics, partitions, problems, ReadOptions(**options),
                       storage_options)


def _iter_arrow(path: str, topics: Iterable[str] | None, partitions: Iterable[int] | None,
                problems: Problems | None, opts: ReadOptions,
                storage_options: Mapping[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    for split in plan_splits(path, topics=topics, partitions=partitions, options=opts,
                             problems=problems, storage_options=storage_options):
        yield from read_split(split, opts, problems=problems)


def read_arrow(path: str | os.PathLike[str], *, topics: Iterable[str] | None = None,
               partitions: Iterable[int] | None = None, problems: Problems | None = None,
               storage_options: Mapping[str, Any] | None = None, **options) -> pa.Table:
    """Every record under ``path`` as one ``pyarrow.Table`` (see :func:`iter_arrow`);
    ``read_arrow(path).to_pandas()`` for pandas."""
    opts = ReadOptions(**options)
    batches = list(_iter_arrow(os.fspath(path), topics, partitions, problems, opts, storage_options))
    return pa.Table.from_batches(batches, schema=arrow_schema(opts.binary_view))
