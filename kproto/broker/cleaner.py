"""Log compaction: Kafka's ``LogCleaner``, ``Cleaner`` and ``LogCleanerManager`` as they behave.

Every ``log.cleaner.backoff.ms`` the broker's cleaner picks, among partitions whose
``cleanup.policy`` includes ``compact``, the dirtiest log: the one with the largest share of
bytes past its cleaner checkpoint (the *dirty* part, up to the first uncleanable offset: the
active segment, the last stable offset, segments younger than ``min.compaction.lag.ms``)
above ``min.cleanable.dirty.ratio``, or any log with dirty bytes older than
``max.compaction.lag.ms``. Cleaning it:

1. an offset map (key digest -> latest offset) is built over the dirty part, holding at most
   ``log.cleaner.dedupe.buffer.size / 24 * log.cleaner.io.buffer.load.factor`` keys; when it
   is full the cleaning stops where the map got (the next round goes on from there);
2. the segments below that point are grouped (a group stays within ``segment.bytes`` and
   ``segment.index.bytes``) and each group is rewritten into one ``<base>.log.cleaned`` with
   its indexes: a record is kept if it is the latest of its key (or past the map); a
   tombstone's batch gets a delete horizon (``delete.retention.ms`` after the cleaning) and
   the tombstone goes at the first cleaning after it; aborted transactions' batches go, a
   transaction marker goes once its transaction's batches are gone and its horizon passed;
   the last batch of each producer still known stays (empty if need be) for its sequence and
   epoch; ``.txnindex`` keeps the aborted transactions whose markers stay;
3. the swap, as Kafka's ``replaceSegments``: ``.cleaned`` -> ``.swap``, the old segments ->
   ``.deleted``, ``.swap`` -> final names, ``.deleted`` removed. A crash at any step is
   finished or undone at the next start (:func:`kproto.broker.log.finish_interrupted_swaps`);
4. ``cleaner-offset-checkpoint`` records where the clean part ends.

The reading and writing of a round runs in a worker thread (:class:`CleanJob.run` reads only
closed segments and writes only ``.cleaned`` files); the swap and the in-memory tables are
updated on the broker's own thread, after checking that the segments are still the ones read
(a retention deletion or a truncation in between drops the round). Up to
``log.cleaner.threads`` rounds run at once, each on another log and with its share of the
dedupe buffer; together they read and write at most ``log.cleaner.io.max.bytes.per.second``
(Kafka's ``Throttler``: every 300 ms a worker that went faster sleeps until the rate is met).
The ``log.cleaner.*`` settings Kafka reconfigures at run time are taken by
:meth:`LogCleaner.reconfigure`: the rate and the backoff at once, the others by the rounds
started after it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from kproto.broker.log import Log, _Seg, replace_file
from kproto.broker.timer import CallbackTask
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.records.control import decode_control
from kproto.records.record import Record
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.indexes import AbortedTxn, IndexBuilder, encode_txn_index, parse_txn_index
from kproto.storage.indexes import collect_aborted as index_collect_aborted
from kproto.storage.layout import offset_file_name

if TYPE_CHECKING:
    from kproto.broker.context import BrokerContext

__all__ = ["CleanerConfig", "Throttler", "OffsetMap", "LogToClean", "CleanJob", "LogCleaner",
           "CLEANER_CHECKPOINT", "clean_log", "grab_filthiest", "group_segments_by_size"]

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
#: SkimpyOffsetMap's slot: an MD5 digest of the key and an int64 offset
BYTES_PER_ENTRY = 24
_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
_INT32_MAX = 2**31 - 1

#: Tests set this to raise at a named step of a swap ("cleaned": the ``.cleaned`` files written;
#: "swap-log": the ``.log`` renamed ``.swap``, its indexes not yet; "swap": all renamed ``.swap``;
#: "deleted": the old segments renamed ``.deleted``; "renamed": the ``.swap`` suffixes gone) and
#: so stand for a crash there.
fault_hook: Optional[Callable[[str], None]] = None


def _fault(step: str) -> None:
    if fault_hook is not None:
        fault_hook(step)


@dataclass
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings (Kafka's defaults)."""

    enable: bool = True                        # log.cleaner.enable
    backoff_ms: int = 15_000                   # log.cleaner.backoff.ms
    dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
    io_buffer_size: int = 512 * 1024           # log.cleaner.io.buffer.size
    io_buffer_load_factor: float = 0.9         # log.cleaner.io.buffer.load.factor
    threads: int = 1                           # log.cleaner.threads
    max_io_bytes_per_second: float = 1.7976931348623157e308  # log.cleaner.io.max.bytes.per.second


class Throttler:
    """Kafka's ``Throttler`` as its cleaner uses it: the bytes every worker reads and writes
    are counted together; once ``check_interval_ms`` passed since the period began, a worker
    that finds the period's rate above :attr:`rate` sleeps until it is met, and a new period
    begins. :attr:`rate` may change at any time (dynamic config)."""

    def __init__(self, rate: float, check_interval_ms: int = 300,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.check_interval = check_interval_ms / 1000
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self._start = clock()
        self._observed = 0.0
        #: seconds slept in all
        self.slept = 0.0

    def maybe_throttle(self, observed: float) -> None:
        """Count ``observed`` bytes; sleep (holding the others back too) when above the rate."""
        if self.rate >= 1.7976931348623157e308:
            return  # Kafka's default: no limit
        with self._lock:
            self._observed += observed
            elapsed = self.clock() - self._start
            if elapsed > self.check_interval and self._observed > 0:
                if self._observed / elapsed > self.rate:
                    nap = self._observed / self.rate - elapsed
                    if nap > 0:
                        self.sleep(nap)
                        self.slept += nap
                self._start = self.clock()
                self._observed = 0.0


@dataclass(frozen=True)
class CompactionSettings:
    """A topic's compaction configs (topic-level or broker defaults)."""

    min_cleanable_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = 86_400_000
    # None: the log's own (segment.bytes, segment.index.bytes, index.interval.bytes)
    segment_bytes: Optional[int] = None
    segment_index_bytes: Optional[int] = None
    index_interval_bytes: Optional[int] = None


class OffsetMap:
    """Kafka's ``SkimpyOffsetMap``: key digest -> the latest offset of the key, with as many
    slots as ``memory`` holds 24-byte entries; :attr:`max_desired` of them are filled at most."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, memory // BYTES_PER_ENTRY)
        self.max_desired = int(self.slots * load_factor)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def put(self, key: bytes, offset: int) -> None:
        self._map[hashlib.md5(key).digest()] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The key's latest offset, -1 when absent (Kafka's answer)."""
        return self._map.get(hashlib.md5(key).digest(), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots


# ---------------------------------------------------------------------------- segments of a log
@dataclass
class SegInfo:
    """A segment as the cleaner sees it."""

    seg: _Seg
    base_offset: int
    size: int
    next_offset: int        # Kafka's readNextOffset: after its last batch (its base when empty)
    largest_timestamp: int
    first_batch_timestamp: int
    index_bytes: int
    timeindex_bytes: int
    aborted: list[AbortedTxn] = field(default_factory=list)  # its .txnindex


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def segment_infos(lg: Log) -> list[SegInfo]:
    """Every segment of ``lg`` with its size, offsets, timestamps and index sizes."""
    out = []
    starts = [s.global_start for s in lg.segments]
    for i, seg in enumerate(lg.segments):
        lo = bisect_left(lg.positions, starts[i])
        hi = bisect_left(lg.positions, starts[i] + seg.size) if i + 1 < len(starts) else len(lg.positions)
        stamps = lg.max_timestamps[lo:hi]
        nxt = lg.last_offsets[hi - 1] + 1 if hi > lo else seg.base_offset
        active = i == len(lg.segments) - 1
        base = os.path.join(lg.path, offset_file_name(seg.base_offset, ""))
        aborted: list[AbortedTxn] = []
        txn = base + ".txnindex"
        if os.path.exists(txn):
            with open(txn, "rb") as f:
                data = f.read()
            try:
                aborted = parse_txn_index(data[:len(data) - len(data) % 34])
            except DecodeError:
                aborted = []
        out.append(SegInfo(seg, seg.base_offset, seg.size, nxt, max(stamps, default=-1),
                           stamps[0] if stamps else -1,
                           0 if active else _file_size(base + ".index"),
                           0 if active else _file_size(base + ".timeindex"), aborted))
    return out


def _floor_index(segs: list[SegInfo], offset: int) -> Optional[int]:
    i = bisect_right([s.base_offset for s in segs], offset) - 1
    return i if i >= 0 else None


def log_segments(segs: list[SegInfo], start: int, end: int) -> list[SegInfo]:
    """Kafka's ``logSegments(from, to)``: the segments overlapping [start, end) (none when
    start == end)."""
    if start >= end:
        return []
    f = _floor_index(segs, start)
    lo = f if f is not None else 0
    return [s for s in segs[lo:] if s.base_offset < end]


def non_active_from(segs: list[SegInfo], offset: int) -> list[SegInfo]:
    """Kafka's ``nonActiveLogSegmentsFrom``."""
    return log_segments(segs[:-1], offset, segs[-1].base_offset) if segs else []


def collect_aborted(segs: list[SegInfo], start: int, upper: int) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions``: from the segment holding ``start`` on, the
    ``.txnindex`` entries with last offset >= ``start`` and first offset < ``upper``, until an
    entry whose last stable offset reaches ``upper``."""
    f = _floor_index(segs, start)
    out: list[AbortedTxn] = []
    for s in segs[f if f is not None else 0:]:
        out += index_collect_aborted(s.aborted, start, upper)
        if any(a.last_stable_offset >= upper for a in s.aborted):
            return out
    return out


@dataclass
class LogToClean:
    """A compacted log's cleaning figures (Kafka's ``LogToClean``)."""

    log: Log
    segs: list[SegInfo]
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    force_checkpoint: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def to_clean(lg: Log, checkpoint: Optional[int], now: int, st: CompactionSettings) -> LogToClean:
    """Kafka's ``cleanableOffsets``, ``maxCompactionDelay`` and ``LogToClean`` of ``lg``."""
    segs = segment_infos(lg)
    start, end = lg.log_start_offset, lg.log_end_offset
    dirty = start if checkpoint is None else checkpoint
    force = False
    if dirty < start or dirty > end:
        dirty, force = start, True
    active_base = segs[-1].base_offset if segs else end
    bounds = [lg.last_stable_offset, active_base]
    lag = max(st.min_compaction_lag_ms, 0)
    if lag > 0:
        young = [s for s in non_active_from(segs, dirty) if s.largest_timestamp > now - lag]
        if young:
            bounds.append(young[0].base_offset)
    uncleanable = max(dirty, min(bounds))
    # calculateCleanableBytes: the uncleanable point moves down to its segment's base
    later = non_active_from(segs, uncleanable)
    first_uncleanable = later[0].base_offset if later else active_base
    cleanable = sum(s.size for s in log_segments(segs, min(dirty, first_uncleanable), first_uncleanable))
    clean = sum(s.size for s in log_segments(segs, -1, dirty))
    firsts = [s.first_batch_timestamp for s in non_active_from(segs, dirty) if s.first_batch_timestamp > 0]
    until = now - max(st.max_compaction_lag_ms, 0)
    delay = until - min(firsts) if firsts and min(firsts) < until else 0
    return LogToClean(lg, segs, dirty, first_uncleanable, clean, cleanable, delay > 0, force)


def grab_filthiest(candidates: list[tuple[Log, Optional[int], CompactionSettings]],
                   now: int) -> tuple[Optional[LogToClean], list[LogToClean]]:
    """Kafka's ``grabFilthiestCompactedLog``: the log with the highest dirty ratio among those
    above their ``min.cleanable.dirty.ratio`` or past ``max.compaction.lag.ms`` (None if none),
    and every log whose checkpoint was reset (to write)."""
    ltcs = []
    forced = []
    for lg, ckpt, st in candidates:
        if not lg.segments:
            continue
        ltc = to_clean(lg, ckpt, now, st)
        if ltc.force_checkpoint:
            forced.append(ltc)
        if ltc.total_bytes > 0:
            ltcs.append((ltc, st))
    ok = [ltc for ltc, st in ltcs if (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
          or ltc.cleanable_ratio > st.min_cleanable_ratio]
    if not ok:
        return None, forced
    best = ok[0]
    for ltc in ok[1:]:
        if ltc.cleanable_ratio > best.cleanable_ratio:
            best = ltc
    return best, forced


def group_segments_by_size(segs: list[SegInfo], max_size: int, max_index_size: int,
                           first_uncleanable: int) -> list[list[SegInfo]]:
    """Kafka's ``groupSegmentsBySize``: consecutive segments whose log, offset index and time
    index together stay within the limits and whose offsets fit relative int32 offsets."""
    groups: list[list[SegInfo]] = []
    i = 0
    while i < len(segs):
        group = [segs[i]]
        log_size, index_size, time_size = segs[i].size, segs[i].index_bytes, segs[i].timeindex_bytes
        i += 1
        while i < len(segs):
            s = segs[i]
            if not (log_size + s.size <= max_size and index_size + s.index_bytes <= max_index_size
                    and time_size + s.timeindex_bytes <= max_index_size):
                break
            if s.size != 0:
                # lastOffsetForFirstSegment: the offset before the next segment (or before the
                # uncleanable point), relative to the group's first segment
                last = (segs[i + 1].base_offset if i + 1 < len(segs) else first_uncleanable) - 1
                if last - group[0].base_offset > _INT32_MAX:
                    break
            group.append(s)
            log_size += s.size
            index_size += s.index_bytes
            time_size += s.timeindex_bytes
            i += 1
        groups.append(group)
    return groups


# ---------------------------------------------------------------------------- batches of a segment
def iter_segment_batches(path: str, size: int, buffer_size: int) -> Iterator[RecordBatch]:
    """The batches of the first ``size`` bytes of a segment file, read ``buffer_size`` bytes at
    a time (the buffer grows to hold a larger batch, as Kafka's cleaner grows its own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while pos < size:
            chunk = os.pread(fd, min(max(buffer_size, 61), size - pos), pos)
            if len(chunk) < 12:
                raise DecodeError("segment ends inside a batch header", what=path, offset=pos)
            at = 0
            while at + 12 <= len(chunk):
                n = 12 + int.from_bytes(chunk[at + 8:at + 12], "big", signed=True)
                if n < 61:
                    raise DecodeError(f"batch size {n}", what=path, offset=pos + at)
                if at + n > len(chunk):
                    break
                yield RecordBatch(chunk, at)
                at += n
            if at == 0:  # one batch larger than the buffer
                n = 12 + int.from_bytes(chunk[8:12], "big", signed=True)
                if pos + n > size:
                    raise DecodeError("segment ends inside a batch", what=path, offset=pos)
                buffer_size = n
                continue
            pos += at
    finally:
        os.close(fd)


class CleaningAborted(Exception):
    """A round stopped before its end (the broker is shutting down)."""


class CleanedTransactions:
    """Kafka's ``CleanedTransactionMetadata``: which transactions a cleaning pass is inside."""

    def __init__(self) -> None:
        self.queue: list[AbortedTxn] = []           # by first offset
        self._queued: set[tuple[int, int]] = set()
        self.ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, last observed batch or None]
        self.ongoing_committed: set[int] = set()
        self.cleaned_index: Optional[list[AbortedTxn]] = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for a in txns:
            if (a.producer_id, a.first_offset) not in self._queued:
                self._queued.add((a.producer_id, a.first_offset))
                self.queue.append(a)
        self.queue.sort(key=lambda a: a.first_offset)

    def _consume_up_to(self, offset: int) -> None:
        while self.queue and self.queue[0].first_offset <= offset:
            a = self.queue.pop(0)
            self.ongoing_aborted.setdefault(a.producer_id, [a, None])

    def on_control_batch_read(self, b: RecordBatch) -> bool:
        """Whether the marker may go (its transaction's batches are all gone)."""
        self._consume_up_to(b.last_offset)
        recs = b.record_list()
        if not recs:
            return True  # an empty control batch was cleaned already
        ctrl = decode_control(recs[0].key, recs[0].value)
        pid = b.producer_id
        if ctrl is not None and ctrl.type_id == 0:  # ABORT
            meta = self.ongoing_aborted.pop(pid, None)
            if meta is not None and meta[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta[0])
                return False
            return True
        if ctrl is not None and ctrl.type_id == 1:  # COMMIT
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, b: RecordBatch) -> bool:
        """Whether the data batch belongs to an aborted transaction."""
        self._consume_up_to(b.last_offset)
        if not b.is_transactional:
            return False
        meta = self.ongoing_aborted.get(b.producer_id)
        if meta is not None:
            meta[1] = b.last_offset
            return True
        self.ongoing_committed.add(b.producer_id)
        return False


# ---------------------------------------------------------------------------- one round
@dataclass
class GroupResult:
    """A group rewritten into ``.cleaned`` files, waiting for its swap."""

    olds: list[SegInfo]
    base_offset: int
    size: int
    entries: list[tuple[int, int, int]]  # (last offset, position, max timestamp) per batch
    aborted: list[AbortedTxn]
    has_txnindex: bool
    mtime: float


@dataclass
class CleanStats:
    """What a round did."""

    bytes_read: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    batches_written: int = 0
    records_read: int = 0
    records_written: int = 0
    map_entries: int = 0
    map_utilization: float = 0.0


def _retained_batch(b: RecordBatch, records: list[Record], horizon: Optional[int]) -> bytes:
    """Kafka's ``buildRetainedRecordsInto``: the batch's kept records, its header fields and
    last offset preserved, the base timestamp set to the delete horizon when there is one."""
    log_append = b.timestamp_type == 1
    bb = RecordBatchBuilder(compression=b.compression, base_offset=b.base_offset,
                            timestamp_type=b.timestamp_type,
                            log_append_time=b.max_timestamp if log_append else None,
                            partition_leader_epoch=b.partition_leader_epoch,
                            producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                            base_sequence=b.base_sequence, transactional=b.is_transactional,
                            control=b.is_control, delete_horizon_ms=horizon)
    for r in records:
        bb.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
    bb.last_offset = b.last_offset
    return bb.build()


def _empty_batch(b: RecordBatch) -> bytes:
    """Kafka's ``writeEmptyHeader``: a batch header without records (a producer's last batch
    kept for its sequence and epoch)."""
    bb = RecordBatchBuilder(base_offset=b.base_offset, timestamp_type=b.timestamp_type,
                            partition_leader_epoch=b.partition_leader_epoch,
                            producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                            base_sequence=b.base_sequence, transactional=b.is_transactional,
                            control=b.is_control)
    bb.last_offset = b.last_offset
    bb.first_timestamp = bb.max_timestamp = b.max_timestamp
    return bb.build()


class CleanJob:
    """One cleaning round of one log: :meth:`run` (any thread) builds the offset map and writes
    the ``.cleaned`` files; :meth:`commit` (the log's thread) swaps them in."""

    def __init__(self, ltc: LogToClean, st: CompactionSettings, config: CleanerConfig,
                 now: int, throttler: Optional[Throttler] = None) -> None:
        lg = ltc.log
        self.throttler = throttler
        self.st = replace(st, segment_bytes=st.segment_bytes or lg.config.segment_bytes,
                          segment_index_bytes=st.segment_index_bytes or lg.config.segment_index_bytes,
                          index_interval_bytes=st.index_interval_bytes or lg.config.index_interval_bytes)
        self.ltc, self.config, self.now = ltc, config, now
        self.path = lg.path
        # Kafka's lastRecordsOfActiveProducers: pid -> (last data offset or None, epoch)
        self.last_records = {
            pid: (e.last_offset if e.last_offset >= 0 else None, e.producer_epoch)
            for pid, e in lg.plog.producers.producers.items()}
        self.map = OffsetMap(config.dedupe_buffer_size // max(1, config.threads),
                             config.io_buffer_load_factor)
        self.results: list[GroupResult] = []
        self.end_offset: Optional[int] = None
        self.stats = CleanStats()
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        self.cancelled = threading.Event()

    # -- the work (reads closed segments, writes .cleaned files)
    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - the round is dropped, the log untouched
            self.error = exc
            self.discard()
        finally:
            self.done.set()

    def _batches(self, s: SegInfo) -> Iterator[RecordBatch]:
        for b in iter_segment_batches(s.seg.path, s.size, self.config.io_buffer_size // 2):
            if self.cancelled.is_set():  # the broker is stopping: Kafka's checkDone
                raise CleaningAborted(s.seg.path)
            if self.throttler is not None:
                self.throttler.maybe_throttle(b.size_in_bytes)
            yield b

    def _run(self) -> None:
        ltc, segs = self.ltc, self.ltc.segs
        upper = ltc.first_uncleanable
        self._build_offset_map(segs, ltc.first_dirty, upper)
        self.end_offset = self.map.latest_offset + 1
        self.stats.map_entries = len(self.map)
        self.stats.map_utilization = self.map.utilization
        txns = CleanedTransactions()
        assert self.st.segment_bytes and self.st.segment_index_bytes
        groups = group_segments_by_size(log_segments(segs, 0, self.end_offset), self.st.segment_bytes,
                                        self.st.segment_index_bytes, upper)
        for group in groups:
            self.results.append(self._clean_group(group, segs, txns))

    def _build_offset_map(self, segs: list[SegInfo], start: int, end: int) -> None:
        m = self.map
        m.clear()
        txns = CleanedTransactions()
        txns.add_aborted(collect_aborted(segs, start, end))
        for s in log_segments(segs, start, end):
            for b in self._batches(s):
                if b.is_control:
                    txns.on_control_batch_read(b)
                elif not txns.on_batch_read(b):
                    for r in b.records():
                        if r.key is not None and r.offset >= start:
                            if len(m) >= m.max_desired:
                                return  # full: the round ends where the map got
                            m.put(r.key, r.offset)
                if b.last_offset >= start:
                    m.latest_offset = b.last_offset

    def _keep_record(self, b: RecordBatch, r: Record) -> bool:
        """Kafka's ``shouldRetainRecord``."""
        if r.offset > self.map.latest_offset:
            return True
        if r.key is None:
            return False
        latest = r.offset >= self.map.get(r.key)
        horizon = b.delete_horizon_ms
        keep_deletes = horizon is None or self.now < horizon
        return latest and (r.value is not None or keep_deletes)

    def _clean_group(self, group: list[SegInfo], segs: list[SegInfo],
                     txns: CleanedTransactions) -> GroupResult:
        base = group[0].base_offset
        prefix = os.path.join(self.path, offset_file_name(base, ""))
        for ext in _SUFFIXES:  # createNewCleanedSegment starts from nothing
            try:
                os.unlink(prefix + ext + ".cleaned")
            except FileNotFoundError:
                pass
        aborted: list[AbortedTxn] = []
        txns.cleaned_index = aborted
        index = IndexBuilder(base, self.st.index_interval_bytes or 4096)
        entries: list[tuple[int, int, int]] = []
        pos = 0
        now, horizon_ms = self.now, self.now + self.st.delete_retention_ms
        with open(prefix + ".log.cleaned", "wb") as out:
            for k, s in enumerate(group):
                nxt = group[k + 1].base_offset if k + 1 < len(group) else None
                if nxt is None:
                    later = [x for x in segs if x.base_offset > s.base_offset]
                    nxt = later[0].base_offset if later else s.next_offset
                txns.add_aborted(collect_aborted(segs, s.base_offset, nxt))
                for b in self._batches(s):
                    self.stats.bytes_read += b.size_in_bytes
                    self.stats.batches_read += 1
                    data = self._filter(b, txns, now, horizon_ms)
                    if data is None:
                        continue
                    kept = RecordBatch(data)
                    out.write(data)
                    if self.throttler is not None:
                        self.throttler.maybe_throttle(len(data))
                    index.append(pos, len(data), kept.last_offset, [(kept.max_timestamp, kept.last_offset)])
                    entries.append((kept.last_offset, pos, kept.max_timestamp))
                    pos += len(data)
                    self.stats.batches_written += 1
            out.flush()
            os.fsync(out.fileno())
        self.stats.bytes_written += pos
        index.close()  # onBecomeInactiveSegment
        replace_index = [(".index", index.offset_index().encode()), (".timeindex", index.time_index().encode())]
        if aborted:
            replace_index.append((".txnindex", encode_txn_index(aborted)))
        for ext, data in replace_index:
            with open(prefix + ext + ".cleaned", "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        mtime = os.path.getmtime(group[-1].seg.path)
        os.utime(prefix + ".log.cleaned", (mtime, mtime))
        return GroupResult(group, base, pos, entries, aborted, bool(aborted), mtime)

    def _filter(self, b: RecordBatch, txns: CleanedTransactions, now: int,
                horizon_ms: int) -> Optional[bytes]:
        """One batch through Kafka's cleaner filter (``checkBatchRetention``,
        ``shouldRetainRecord``, ``MemoryRecords.filterTo``): its bytes as kept, or None."""
        if b.is_control:
            can_discard = txns.on_control_batch_read(b)
            horizon = b.delete_horizon_ms
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            can_discard = discard_records = txns.on_batch_read(b)
        last_of_producer = False
        if b.producer_id >= 0 and b.producer_id in self.last_records:
            last_data, epoch = self.last_records[b.producer_id]
            last_of_producer = (b.last_offset == last_data) if last_data is not None else \
                (b.is_control and b.producer_epoch == epoch)
        if not last_of_producer and discard_records:
            return None  # BatchRetention.DELETE
        retained: list[Record] = []
        all_kept = True
        tombstones = False
        for r in b.records():
            self.stats.records_read += 1
            keep = False if discard_records else (True if b.is_control else self._keep_record(b, r))
            if keep:
                retained.append(r)
                tombstones = tombstones or r.value is None
            else:
                all_kept = False
        if retained:
            self.stats.records_written += len(retained)
            marker_for_empty_txn = can_discard and b.is_control
            set_horizon = (tombstones or marker_for_empty_txn) and b.delete_horizon_ms is None
            if all_kept and not set_horizon:
                return bytes(b.buffer)
            return _retained_batch(b, retained, horizon_ms if set_horizon else b.delete_horizon_ms)
        if last_of_producer:  # BatchRetention.RETAIN_EMPTY
            return _empty_batch(b)
        return None  # DELETE_EMPTY

    def discard(self) -> None:
        """Remove the ``.cleaned`` files of a dropped round."""
        for r in self.results:
            prefix = os.path.join(self.path, offset_file_name(r.base_offset, ""))
            for ext in _SUFFIXES:
                try:
                    os.unlink(prefix + ext + ".cleaned")
                except OSError:
                    pass
        self.results = []

    # -- the swap (the log's thread)
    def still_valid(self) -> bool:
        """The log still has the segments this round read (no retention deletion, truncation
        or deletion since)."""
        lg = self.ltc.log
        live = {id(s) for s in lg.segments}
        return all(id(o.seg) in live and o.seg.size == o.size for r in self.results for o in r.olds)

    def commit(self) -> bool:
        """Swap the cleaned segments in (Kafka's ``replaceSegments``) and update the log's
        tables; False (files dropped) when the log changed under the round or it failed."""
        if self.error is not None or self.end_offset is None:
            self.discard()
            return False
        if not self.still_valid():
            self.discard()
            return False
        lg = self.ltc.log
        if not self.results:
            return True  # nothing below where the map got
        _fault("cleaned")
        for r in self.results:
            _swap_group(lg.path, r)
        _fsync_dir(lg.path)
        _splice(lg, self.results)
        return True


def _rename(src: str, dst: str) -> None:
    if os.path.exists(src):
        os.replace(src, dst)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_group(path: str, r: GroupResult) -> None:
    """``.cleaned`` -> ``.swap``; old segments -> ``.deleted``; ``.swap`` -> final; the
    ``.deleted`` files removed (Kafka removes them ``file.delete.delay.ms`` later: nothing here
    reads them)."""
    new = os.path.join(path, offset_file_name(r.base_offset, ""))
    for ext in _SUFFIXES:
        _rename(new + ext + ".cleaned", new + ext + ".swap")
        if ext == ".log":
            _fault("swap-log")
    _fault("swap")
    deleted = []
    for o in r.olds:
        o.seg.close()
        prefix = os.path.join(path, offset_file_name(o.base_offset, ""))
        for ext in _SUFFIXES:
            if os.path.exists(prefix + ext):
                os.replace(prefix + ext, prefix + ext + ".deleted")
                deleted.append(prefix + ext + ".deleted")
    _fault("deleted")
    for ext in _SUFFIXES:
        _rename(new + ext + ".swap", new + ext)
    _fault("renamed")
    for d in deleted:
        try:
            os.unlink(d)
        except FileNotFoundError:
            pass


def _splice(lg: Log, results: list[GroupResult]) -> None:
    """The log's segment list and batch tables after the swap: cleaned groups replace their
    segments, later segments move to their new byte positions."""
    first = {id(r.olds[0].seg): r for r in results}
    gone = {id(o.seg) for r in results for o in r.olds[1:]}
    segments: list[_Seg] = []
    lasts: list[int] = []
    positions: list[int] = []
    stamps: list[int] = []
    g = lg.segments[0].global_start if lg.segments else 0
    old = lg.segments
    for i, s in enumerate(old):
        if id(s) in gone:
            continue
        r = first.get(id(s))
        if r is not None:
            path = os.path.join(lg.path, offset_file_name(r.base_offset, ".log"))
            segments.append(_Seg(r.base_offset, path, g, r.size))
            for last, pos, ts in r.entries:
                lasts.append(last)
                positions.append(g + pos)
                stamps.append(ts)
            g += r.size
            continue
        lo = bisect_left(lg.positions, s.global_start)
        hi = bisect_left(lg.positions, old[i + 1].global_start) if i + 1 < len(old) else len(lg.positions)
        shift = g - s.global_start
        lasts.extend(lg.last_offsets[lo:hi])
        positions.extend(p + shift for p in lg.positions[lo:hi])
        stamps.extend(lg.max_timestamps[lo:hi])
        s.global_start = g
        segments.append(s)
        g += s.size
    lg.segments, lg.last_offsets, lg.positions, lg.max_timestamps = segments, lasts, positions, stamps
    lg.total_bytes = g
    # aborted transactions of the cleaned range: those the cleaned .txnindex files keep
    lo_off = results[0].base_offset
    hi_off = max(o.next_offset for r in results for o in r.olds)
    kept = [(a.producer_id, a.first_offset, a.last_offset) for r in results for a in r.aborted]
    lg.aborted = sorted([a for a in lg.aborted if not lo_off <= a[2] < hi_off] + kept, key=lambda a: a[2])


def compaction_settings(values: Callable[[str], Optional[str]]) -> CompactionSettings:
    """A topic's compaction settings from its effective configs (``values(name)``; None: the
    default); segment sizes are left to each log's own."""
    def num(name: str, default: float) -> float:
        v = values(name)
        return float(v) if v is not None else default
    d = CompactionSettings()
    return CompactionSettings(
        min_cleanable_ratio=num("min.cleanable.dirty.ratio", d.min_cleanable_ratio),
        min_compaction_lag_ms=int(num("min.compaction.lag.ms", d.min_compaction_lag_ms)),
        max_compaction_lag_ms=int(num("max.compaction.lag.ms", d.max_compaction_lag_ms)),
        delete_retention_ms=int(num("delete.retention.ms", d.delete_retention_ms)))


def clean_log(lg: Log, now: int, settings: Optional[CompactionSettings] = None,
              config: Optional[CleanerConfig] = None, checkpoint: Optional[int] = None,
              force: bool = False) -> Optional[CleanJob]:
    """Clean ``lg`` once, in this thread, if it is cleanable (or ``force``: whatever its
    ratio); the round (with ``end_offset``, the new checkpoint, and its stats), or None."""
    st = settings or compaction_settings(lambda _n: None)
    if force:
        ltc: Optional[LogToClean] = to_clean(lg, checkpoint, now, st) if lg.segments else None
        if ltc is not None and ltc.cleanable_bytes == 0:
            ltc = None
    else:
        ltc, _ = grab_filthiest([(lg, checkpoint, st)], now)
    if ltc is None:
        return None
    job = CleanJob(ltc, st, config or CleanerConfig(), now)
    job.run()
    if job.error is not None:
        raise job.error
    job.commit()
    return job


# ---------------------------------------------------------------------------- the broker's cleaner
class LogCleaner:
    """The broker's cleaner: a timer task on the broker's thread choosing the logs to clean and
    swapping their rounds in, each round's work in a worker thread (up to
    ``log.cleaner.threads`` at once, on different logs, sharing one :class:`Throttler`)."""

    def __init__(self, core: BrokerContext, config: CleanerConfig) -> None:
        self.core, self.config = core, config
        self.path = os.path.join(core.logs.data_dir, CLEANER_CHECKPOINT)
        self.checkpoints: dict[tuple[str, int], int] = {}
        try:
            with open(self.path, "rb") as f:
                self.checkpoints = {(t, p): o for t, p, o in OffsetCheckpoint.parse(f.read()).entries}
        except (OSError, DecodeError):
            self.checkpoints = {}
        self.rounds = 0
        self._seen: dict[tuple[str, int], Log] = {}  # the log each checkpoint entry is of
        #: the rounds running, by partition
        self.jobs: dict[tuple[str, int], CleanJob] = {}
        self.throttler = Throttler(config.max_io_bytes_per_second)
        self._task: Optional[CallbackTask] = None
        self.last_stats: Optional[CleanStats] = None
        if config.enable:
            self._schedule(config.backoff_ms)

    def reconfigure(self, config: CleanerConfig) -> None:
        """New ``log.cleaner.*`` settings (Kafka's ``LogCleaner.reconfigure``): the I/O rate holds
        at once, also for the rounds running; a new backoff from now; the other settings for the
        rounds started from now on."""
        old, self.config = self.config, config
        self.throttler.rate = config.max_io_bytes_per_second
        if config.enable and config.backoff_ms != old.backoff_ms and self._task is not None:
            self._task.cancel()
            self._schedule(config.backoff_ms)

    def _schedule(self, delay_ms: int) -> None:
        self._task = CallbackTask(max(1, delay_ms), self._tick)
        self.core.timer.add(self._task)

    def _tick(self) -> None:
        delay = self.config.backoff_ms
        try:
            for job in [j for j in self.jobs.values() if j.done.is_set()]:
                self._finish(job)
            # a round done: the next log at once (Kafka backs off only when none is due)
            while self.start_round():
                pass
            if self.jobs:
                delay = min(delay, 20)  # poll for the workers' end
        finally:
            self._schedule(delay)

    def _candidates(self) -> list[tuple[Log, Optional[int], CompactionSettings]]:
        out = []
        for topic in list(self.core.logs.topics.values()):
            if not self.core.configs.settings(topic).compacts:
                continue
            st = compaction_settings(functools.partial(self.core.configs.topic_value, topic))
            for lg in topic.logs:
                key = (lg.topic, lg.partition)
                if self._seen.setdefault(key, lg) is not lg:
                    # a new log under the same name (deleted and made again, a replica back):
                    # the entry was of the old one
                    self._seen[key] = lg
                    self.checkpoints.pop(key, None)
                if key in self.jobs:
                    continue  # being cleaned (Kafka's inProgress)
                out.append((lg, self.checkpoints.get(key), st))
        return out

    def start_round(self, now: Optional[int] = None, threaded: bool = True) -> bool:
        """Pick the dirtiest log not being cleaned and start cleaning it; False when none is
        cleanable or ``log.cleaner.threads`` rounds are running."""
        if len(self.jobs) >= self.config.threads:
            return False
        now = self.core.wall_ms() if now is None else now
        cands = self._candidates()
        ltc, forced = grab_filthiest(cands, now)
        if forced:
            for f in forced:
                self.checkpoints[(f.log.topic, f.log.partition)] = f.first_dirty
            self.write_checkpoint()
        if ltc is None:
            return False
        st = next(st for lg, _, st in cands if lg is ltc.log)
        job = CleanJob(ltc, st, self.config, now, self.throttler)
        self.jobs[(ltc.log.topic, ltc.log.partition)] = job
        if threaded:
            threading.Thread(target=job.run, name="kproto-log-cleaner", daemon=True).start()
        else:
            job.run()
        return True

    def _finish(self, job: CleanJob) -> None:
        lg = job.ltc.log
        self.jobs.pop((lg.topic, lg.partition), None)
        if self.core.logs.get(lg.topic, lg.partition) is not lg:
            job.discard()  # deleted or reopened meanwhile
            return
        if job.commit():
            self.rounds += 1
            self.last_stats = job.stats
            assert job.end_offset is not None
            self.checkpoints[(lg.topic, lg.partition)] = job.end_offset
            self.write_checkpoint()

    def clean_now(self, now: Optional[int] = None) -> bool:
        """One whole round in this thread (tests, tools): whether a log was cleaned."""
        self.wait()
        if not self.start_round(now, threaded=False):
            return False
        for job in list(self.jobs.values()):
            self._finish(job)
        return True

    def wait(self) -> None:
        """Let the running rounds end and swap them in."""
        for job in list(self.jobs.values()):
            job.done.wait()
            self._finish(job)

    def forget(self, topic: str) -> None:
        """A topic was deleted: its entries leave ``cleaner-offset-checkpoint`` (a running round
        of it is dropped when it ends)."""
        if any(t == topic for t, _ in self.checkpoints):
            self.checkpoints = {k: v for k, v in self.checkpoints.items() if k[0] != topic}
            self.write_checkpoint()
        self._seen = {k: v for k, v in self._seen.items() if k[0] != topic}

    def write_checkpoint(self) -> None:
        """``cleaner-offset-checkpoint``: the clean end of every compacted partition here."""
        live = {(t.name, lg.partition) for t in self.core.logs.topics.values() for lg in t.logs}
        self.checkpoints = {k: v for k, v in self.checkpoints.items() if k in live}
        entries = sorted((t, p, o) for (t, p), o in self.checkpoints.items())
        replace_file(self.path, OffsetCheckpoint(entries).encode())

    def shutdown(self) -> None:
        """Stop: running rounds are let finish and dropped (their ``.cleaned`` files removed)."""
        if self._task is not None:
            self._task.cancel()
        jobs, self.jobs = list(self.jobs.values()), {}
        for job in jobs:
            job.cancelled.set()
        for job in jobs:
            job.done.wait()
            job.discard()
