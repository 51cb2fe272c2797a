"""Retention, the log start offset and time-based rolling (Kafka's ``UnifiedLog.deleteOldSegments``
and ``LogSegment.shouldRoll``), sans-I/O on the broker's timer plus plain file removal.

Every ``log.retention.check.interval.ms`` (first after ``min(30 s, interval)``, Kafka's initial
task delay) each partition of a topic whose ``cleanup.policy`` includes ``delete`` loses, oldest
first, the segments whose largest timestamp is older than ``retention.ms`` and those that take
it over ``retention.bytes``; every topic loses the segments wholly below its log start offset
(DeleteRecords). A segment is deleted only if all later ones are kept, as Kafka's
``deletableSegments`` walk stops at the first it keeps; deleting the active segment rolls a new
empty one first. Files are removed at once (Kafka renames them ``.deleted`` and removes them
``file.delete.delay.ms`` later; nothing here reads them in between). The log start offset moves
to the first remaining segment, and ``log-start-offset-checkpoint`` is rewritten whenever a
log start offset moves, so that a crash keeps it (Kafka writes it on a schedule).
"""
from __future__ import annotations

import os
import struct
from bisect import bisect_left
from typing import Callable, Optional

from kproto.broker.context import BrokerContext
from kproto.broker.log import BrokerError, Log, Topic, replace_file
from kproto.broker.timer import CallbackTask
from kproto.error_codes import ErrorCode
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.layout import offset_file_name

_INT32, _INT64 = struct.Struct(">i"), struct.Struct(">q")


__all__ = ["RetentionManager", "segment_stats", "delete_oldest_segments", "roll"]

_INITIAL_DELAY_MS = 30_000  # Kafka's LogManager.InitialTaskDelayMs


def segment_stats(lg: Log) -> list[tuple[int, int, int]]:
    """(base offset, size in bytes, largest timestamp) of each segment, oldest first; the
    largest timestamp of an empty segment is -1."""
    out = []
    starts = [s.global_start for s in lg.segments]
    for i, seg in enumerate(lg.segments):
        lo = bisect_left(lg.positions, starts[i])
        hi = bisect_left(lg.positions, starts[i + 1]) if i + 1 < len(starts) else len(lg.positions)
        out.append((seg.base_offset, seg.size, max(lg.max_timestamps[lo:hi], default=-1)))
    return out


def roll(lg: Log) -> None:
    """Start a new active segment at the log end (Kafka's ``roll``), if the active one has data;
    the storage log's file operations are applied as every append's are."""
    lg._apply(lg.plog.roll(lg.log_end_offset))


def _first_batch_timestamp(lg: Log) -> Optional[int]:
    """The max timestamp of the active segment's first batch (Kafka's rollingBasedTimestamp)."""
    if not lg.segments:
        return None
    i = bisect_left(lg.positions, lg.segments[-1].global_start)
    return lg.max_timestamps[i] if i < len(lg.max_timestamps) else None


def incoming_max_timestamp(records: bytes) -> Optional[int]:
    """The largest ``maxTimestamp`` of the v2 batch headers in ``records``, None when there is
    none to read (the append's validation reports what is wrong with them)."""
    best: Optional[int] = None
    pos, end = 0, len(records)
    while pos + 43 <= end:
        length, = _INT32.unpack_from(records, pos + 8)
        if records[pos + 16] != 2 or length < 31:
            return best
        ts, = _INT64.unpack_from(records, pos + 35)
        best = ts if best is None else max(best, ts)
        pos += 12 + length
    return best


def maybe_roll_by_time(lg: Log, now_ms: int, segment_ms: int, jitter_ms: int = 0,
                       incoming_ms: Optional[int] = None) -> bool:
    """Roll before an append when ``segment.ms`` has passed since the active segment's first
    batch, as Kafka's ``LogSegment.shouldRoll`` measures it: from that batch's max timestamp to
    the incoming batches' max timestamp (``incoming_ms``; the append time, ``now_ms``, when the
    topic uses LogAppendTime or it is not known), not to the wall clock."""
    if lg.plog.segment.size == 0:
        return False
    first = _first_batch_timestamp(lg)
    at = now_ms if incoming_ms is None else incoming_ms
    if first is None or first < 0 or at - first <= segment_ms - jitter_ms:
        return False
    roll(lg)
    return True


def delete_oldest_segments(lg: Log, count: int) -> list[str]:
    """Delete the ``count`` oldest segments (rolling first when that includes the active one)
    and move the log start offset to the first one left. Returns the files removed."""
    if count <= 0:
        return []
    if count >= len(lg.segments):
        roll(lg)
        count = min(count, len(lg.segments) - 1)
    removed: list[str] = []
    doomed, lg.segments = lg.segments[:count], lg.segments[count:]
    for seg in doomed:
        seg.close()
        for ext in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
            path = os.path.join(lg.path, offset_file_name(seg.base_offset, ext))
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    # the batches of the deleted segments leave the in-memory table (positions are global
    # byte positions, so the remaining entries stay valid)
    first_kept = bisect_left(lg.positions, lg.segments[0].global_start)
    del lg.last_offsets[:first_kept], lg.positions[:first_kept], lg.max_timestamps[:first_kept]
    new_start = lg.segments[0].base_offset
    if new_start > lg.plog.start_offset:
        lg.plog.start_offset = new_start
    lg.aborted = [a for a in lg.aborted if a[2] >= lg.plog.start_offset]
    return removed


class RetentionManager:
    """The broker's retention task and log start offset bookkeeping."""

    def __init__(self, core: BrokerContext) -> None:
        self.core = core
        self.interval_ms = core.config.log_retention_check_interval_ms
        self.checks = 0
        self.deleted_segments = 0
        self._task: Optional[CallbackTask] = None
        self._schedule(min(_INITIAL_DELAY_MS, self.interval_ms))

    def _schedule(self, delay_ms: int) -> None:
        self._task = CallbackTask(max(1, delay_ms), self._run)
        self.core.timer.add(self._task)

    def _run(self) -> None:
        try:
            self.check()
        finally:
            self._schedule(self.interval_ms)

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # ------------------------------------------------------------------ retention
    def check(self, now_ms: Optional[int] = None) -> int:
        """One retention pass over every partition (Kafka's ``cleanupLogs``); returns the
        number of segments deleted."""
        now = self.core.wall_ms() if now_ms is None else now_ms
        self.checks += 1
        total = 0
        for topic in list(self.core.logs.topics.values()):
            st = self.core.configs.settings(topic)
            for lg in topic.logs:
                total += self._clean(lg, now, st.retention_ms if st.deletes else -1,
                                     st.retention_bytes if st.deletes else -1)
        if total:
            self.deleted_segments += total
            self.write_checkpoint()
        return total

    def _clean(self, lg: Log, now: int, retention_ms: int, retention_bytes: int) -> int:
        stats = segment_stats(lg)
        start = lg.log_start_offset
        end = lg.log_end_offset
        size = sum(s for _, s, _ in stats)

        def deletable(pred: Callable[[int], bool]) -> int:
            """How many segments from the oldest satisfy ``pred`` without a gap; the last,
            active segment only if it is not empty (Kafka's ``deletableSegments``)."""
            n = 0
            for i in range(len(stats)):
                last_and_empty = i == len(stats) - 1 and stats[i][1] == 0
                if last_and_empty or not pred(i):
                    break
                n += 1
            return n

        def next_base(i: int) -> int:
            return stats[i + 1][0] if i + 1 < len(stats) else end

        # below the log start offset (DeleteRecords), then time, then size (Kafka's order)
        n = deletable(lambda i: i + 1 < len(stats) and next_base(i) <= start)
        if retention_ms >= 0:
            n = max(n, deletable(lambda i: now - stats[i][2] > retention_ms))
        if retention_bytes >= 0:
            excess = size - retention_bytes
            k = 0
            for _, s, _ in stats[:-1] if stats and stats[-1][1] == 0 else stats:
                if excess - s < 0:
                    break
                excess -= s
                k += 1
            n = max(n, k)
        if n:
            delete_oldest_segments(lg, n)
        return n

    # ------------------------------------------------------------------ log start offset
    def delete_records(self, topic: Topic, lg: Log, offset: int) -> int:
        """Move ``lg``'s log start offset to ``offset`` (-1: the high watermark), as
        DeleteRecords does; returns the new low watermark. Segments wholly below it go at the
        next retention check."""
        if topic.is_internal:
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"Cannot delete records of internal topic {topic.name}")
        if not self.core.configs.settings(topic).deletes:
            raise BrokerError(ErrorCode.POLICY_VIOLATION,
                              f"Records of partition {lg.topic}-{lg.partition} can not be deleted "
                              "due to the configured policy")
        target = lg.high_watermark if offset == -1 else offset
        if target < 0 or target > lg.high_watermark:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"Cannot increment the log start offset to {target} of partition "
                              f"{lg.topic}-{lg.partition} since it is larger than the high "
                              f"watermark {lg.high_watermark}")
        if target > lg.plog.start_offset:
            lg.plog.start_offset = target
            lg.aborted = [a for a in lg.aborted if a[2] >= target]
            self.write_checkpoint()
        return lg.plog.start_offset

    def write_checkpoint(self) -> None:
        """``log-start-offset-checkpoint`` of every partition whose start is above its first
        segment (Kafka leaves the others out), written through a temporary file."""
        entries = sorted((t.name, lg.partition, lg.log_start_offset)
                         for t in self.core.logs.topics.values() for lg in t.logs
                         if lg.segments and lg.log_start_offset > lg.segments[0].base_offset)
        path = os.path.join(self.core.logs.data_dir, "log-start-offset-checkpoint")
        replace_file(path, OffsetCheckpoint(entries).encode())
