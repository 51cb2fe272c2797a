"""The in-flight records of one share-partition (KIP-932, Kafka's ``SharePartition``), sans-I/O.

A share group consumes a partition cooperatively: records between the share-partition start
offset (SPSO) and the next offset never fetched (``end_offset``) are *in flight*, each in one of
Kafka's delivery states: AVAILABLE (may be handed out), ACQUIRED (locked by one member for
``group.share.record.lock.duration.ms``), ACKNOWLEDGED or ARCHIVED (done). A ShareFetch acquires
available records (their delivery count goes up by one); the member's acknowledgement moves each
to ACKNOWLEDGED (ACCEPT), ARCHIVED (REJECT; a GAP in the log) or back to AVAILABLE (RELEASE, also
the fate of a record whose lock expires or whose member leaves). A record released after its
``group.share.delivery.count.limit``-th delivery is ARCHIVED instead. The SPSO moves past the
done records at its front, so ``end_offset - start_offset`` records are at most in flight;
no new record is acquired while ``group.share.partition.max.record.locks`` are.
The SPSO is persisted as Kafka persists it: the state after a change is written with the start
offset from before it, and the start offset moves once written.

Locks run on the broker's timer; every change of the durable state (SPSO, the done records and
the delivery counts) is handed to ``on_change``, which writes it through the persister.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from kproto.broker.timer import CallbackTask, SystemTimer
from kproto.error_codes import ErrorCode as E

__all__ = ["SharePartition", "ShareLimits", "InFlight", "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED",
           "ARCHIVED", "GAP", "ACCEPT", "RELEASE", "REJECT", "RENEW", "AcknowledgeError",
           "state_batches", "REJECTED", "DELIVERY_LIMIT", "Dead"]

#: Delivery states (Kafka's ``RecordState`` ids, as the persister stores them).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
#: Acknowledge types of ShareFetch/ShareAcknowledge (RENEW: v2, extends the lock).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
#: Why a record was archived, as Kafka tells its dead-letter queue (``__dlq.errors.message``).
REJECTED = "Offset rejected by client."
DELIVERY_LIMIT = "Offset delivery count exceeded the threshold."
#: A record archived for the dead-letter queue: (offset, delivery count, why).
Dead = tuple[int, int, str]


@dataclass
class ShareLimits:
    """The group's settings a share-partition applies."""

    lock_duration_ms: int = 30000       # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5       # group.share.delivery.count.limit
    max_record_locks: int = 2000        # group.share.partition.max.record.locks


@dataclass
class InFlight:
    """One in-flight record: its state, delivery count, and while acquired, its owner and lock."""

    state: int = AVAILABLE
    delivery_count: int = 0
    member_id: Optional[str] = None
    lock: int = 0  # the acquisition it belongs to (0: none)


class AcknowledgeError(Exception):
    """An acknowledgement the share-partition refuses (nothing of the request is applied)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def state_batches(records: dict[int, InFlight], start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(first, last, state, delivery count) runs of the records in [start, end) worth keeping:
    done ones and those delivered before (an acquired record is stored as AVAILABLE: a lock
    does not survive the broker)."""
    out: list[tuple[int, int, int, int]] = []
    for off in range(start, end):
        r = records.get(off)
        if r is None:
            continue
        state = AVAILABLE if r.state == ACQUIRED else r.state
        if state == AVAILABLE and r.delivery_count == 0:
            continue
        if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == r.delivery_count:
            out[-1] = (out[-1][0], off, state, r.delivery_count)
        else:
            out.append((off, off, state, r.delivery_count))
    return out


def _cuts(batches: Sequence[tuple[int, int, bool]], first: int, last: int,
          batch_size: int) -> list[tuple[int, int]]:
    """How Kafka's ``SharePartition`` cuts records acquired for the first time, ``first`` to
    ``last``, into acquired ranges along the log's batches (ShareFetch's ``BatchSize``): a
    range closes before a batch that starts ``batch_size`` or more records after the range's
    first offset. Whole batches stay whole, however large; a ``batch_size`` of 0 or less makes
    Kafka send an empty range (first offset one above the last) before the first batch."""
    out: list[tuple[int, int]] = []
    start = first
    for base, end, _ in batches:
        if end < first or base > last:
            continue
        if base - start >= batch_size:
            out.append((start, base - 1))
            start = base
    out.append((start, last))
    return out


class SharePartition:
    """One share group's view of one topic partition."""

    def __init__(self, group_id: str, topic: str, partition: int, start_offset: int,
                 timer: SystemTimer, limits: Callable[[], ShareLimits],
                 on_change: Callable[["SharePartition"], None],
                 batches: Iterable[tuple[int, int, int, int]] = (), topic_id: Any = None,
                 on_dead: Optional[Callable[["SharePartition", list[Dead]], None]] = None) -> None:
        self.group_id, self.topic, self.partition = group_id, topic, partition
        self.topic_id = topic_id
        self.timer, self.limits, self.on_change = timer, limits, on_change
        #: told of the records a member rejected or that reached the delivery count limit
        #: (the dead-letter queue's), after each change
        self.on_dead = on_dead
        self._dead: list[Dead] = []
        self.start_offset = start_offset
        self.records: dict[int, InFlight] = {}
        self.end_offset = start_offset
        for first, last, state, count in batches:  # the persisted state
            for off in range(max(first, start_offset), last + 1):
                self.records[off] = InFlight(state if state != ACQUIRED else AVAILABLE, count)
            self.end_offset = max(self.end_offset, last + 1)
        self._locks: dict[int, CallbackTask] = {}
        self._next_lock = 1
        self._advance_start()

    # ------------------------------------------------------------------ reading
    def next_fetch_offset(self) -> int:
        """Where the next read of the log starts: the first available in-flight record, else
        the end of the in-flight window."""
        for off in range(self.start_offset, self.end_offset):
            r = self.records.get(off)
            if r is not None and r.state == AVAILABLE:
                return off
        return self.end_offset

    def can_acquire(self, log_end: int) -> bool:
        """Whether a fetch could acquire something now (records available in flight, or new
        ones below ``log_end`` with room for their locks)."""
        if self.next_fetch_offset() < self.end_offset:
            return True
        return self.end_offset < log_end and self._room() > 0

    def _room(self) -> int:
        return self.limits().max_record_locks - (self.end_offset - self.start_offset)

    @property
    def delivery_complete_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state in (ACKNOWLEDGED, ARCHIVED))

    # ------------------------------------------------------------------ acquire
    def acquire(self, member_id: str, batches: Sequence[tuple[int, int, bool]],
                max_records: int, record_limit: bool = False,
                batch_size: Optional[int] = None) -> list[tuple[int, int, int]]:
        """Acquire for ``member_id`` what it may have of the log batches read (base offset,
        last offset, and whether its records are never delivered: a control batch, or an aborted
        transaction's under read_committed): up to ``max_records`` records, but whole batches (Kafka's
        batch-optimized mode) unless ``record_limit`` (ShareFetch v2's record-limit mode).
        Returns (first, last, delivery count) ranges; in the batch-optimized mode the records
        acquired for the first time are cut into ranges of about ``batch_size`` records (see
        :func:`_cuts`)."""
        got: list[int] = []
        old_end = self.end_offset
        room = self._room()
        for base, last, control in batches:
            if len(got) >= max_records:
                break
            if last < self.start_offset:
                continue
            for off in range(max(base, self.start_offset), last + 1):
                if record_limit and len(got) >= max_records:
                    break
                if off >= self.end_offset:
                    if control:  # a transaction marker (or an aborted record) is never delivered
                        self.records[off] = InFlight(ARCHIVED)
                        self.end_offset = off + 1
                        continue
                    if room <= 0:
                        break
                    self.records[off] = InFlight()
                    self.end_offset = off + 1
                    room -= 1
                r = self.records.get(off)
                if r is None or r.state != AVAILABLE:
                    continue
                got.append(off)
        if not got:
            self._advance_start()
            return []
        lock = self._next_lock
        self._next_lock += 1
        for off in got:
            r = self.records[off]
            r.state, r.member_id, r.lock = ACQUIRED, member_id, lock
            r.delivery_count += 1
        self._schedule_lock(lock)
        new = [off for off in got if off >= old_end]
        cuts = _cuts(batches, new[0], new[-1], batch_size) if new and batch_size is not None and not record_limit \
            else []
        starts = {a for a, _ in cuts}
        out: list[tuple[int, int, int]] = []
        for off in got:
            while cuts and cuts[0][1] < cuts[0][0] and cuts[0][0] <= off:  # an empty range, as Kafka sends it
                out.append((cuts[0][0], cuts[0][1], 1))
                cuts.pop(0)
            count = self.records[off].delivery_count
            if out and out[-1][1] == off - 1 and out[-1][2] == count and off not in starts:
                out[-1] = (out[-1][0], off, count)
            else:
                out.append((off, off, count))
        self._advance_start()
        return out

    def _schedule_lock(self, lock: int) -> None:
        task = CallbackTask(self.limits().lock_duration_ms, lambda: self._lock_expired(lock))
        self._locks[lock] = task
        self.timer.add(task)

    def _lock_expired(self, lock: int) -> None:
        self._locks.pop(lock, None)
        changed = False
        for off, r in self.records.items():
            if r.state == ACQUIRED and r.lock == lock:
                self._release(off, r)
                changed = True
        if changed:
            self._changed()

    # ------------------------------------------------------------------ acknowledge
    def acknowledge(self, member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]]) -> None:
        """Apply a member's acknowledgements, all or none (:class:`AcknowledgeError`)."""
        plan: list[tuple[int, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AcknowledgeError(E.INVALID_REQUEST, "Invalid acknowledgement batch.")
            if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
                raise AcknowledgeError(E.INVALID_REQUEST, "Invalid acknowledge type.")
            if first >= self.end_offset:
                raise AcknowledgeError(E.INVALID_REQUEST, "Batch record not found. The first offset "
                                                          "in request is past acquired records.")
            if last >= self.end_offset:
                raise AcknowledgeError(E.INVALID_REQUEST, "Batch record not found. The last offset "
                                                          "in request is past acquired records.")
            for i, off in enumerate(range(first, last + 1)):
                if off < self.start_offset:
                    continue  # done already: the start offset moved past it
                t = types[0] if len(types) == 1 else types[i]
                r = self.records.get(off)
                if r is None and t == GAP:
                    continue  # an offset the log does not have
                if r is None or r.state != ACQUIRED:
                    raise AcknowledgeError(E.INVALID_RECORD_STATE,
                                           "The record state is invalid. The acknowledgement of "
                                           "delivery could not be completed.")
                if r.member_id != member_id:
                    raise AcknowledgeError(E.INVALID_RECORD_STATE,
                                           "Member is not the owner of batch record")
                plan.append((off, t))
        renewed: set[int] = set()
        for off, t in plan:
            r = self.records[off]
            if t == RENEW:
                renewed.add(r.lock)
                continue
            if t == ACCEPT:
                self._finish(r, ACKNOWLEDGED)
            elif t == RELEASE:
                self._release(off, r)
            else:  # REJECT, GAP
                if t == REJECT:
                    self._dead.append((off, r.delivery_count, REJECTED))
                self._finish(r, ARCHIVED)
        for lock in renewed:
            old = self._locks.pop(lock, None)
            if old is not None:
                old.cancel()
            self._schedule_lock(lock)
        if len(renewed) < len(plan):
            self._changed()

    def _finish(self, r: InFlight, state: int) -> None:
        r.state, r.member_id, r.lock = state, None, 0

    def _release(self, off: int, r: InFlight) -> None:
        """Back to AVAILABLE, or ARCHIVED once it was delivered as often as the limit allows."""
        done = r.delivery_count >= self.limits().delivery_count_limit
        if done:
            self._dead.append((off, r.delivery_count, DELIVERY_LIMIT))
        self._finish(r, ARCHIVED if done else AVAILABLE)

    def release_member(self, member_id: str) -> None:
        """Release everything ``member_id`` holds (its share session ended or it left)."""
        changed = False
        for off, r in self.records.items():
            if r.state == ACQUIRED and r.member_id == member_id:
                self._release(off, r)
                changed = True
        if changed:
            self._changed()

    def _changed(self) -> None:
        # the state is written as it is, the start offset moved after (Kafka moves its cached
        # start offset once the write completed): what is persisted lags by one write
        self.on_change(self)
        dead, self._dead = self._dead, []
        if dead and self.on_dead is not None:
            self.on_dead(self, dead)
        self._advance_start()

    def _advance_start(self) -> None:
        """Move the SPSO past the done records at the front of the window."""
        while self.start_offset < self.end_offset:
            r = self.records.get(self.start_offset)
            if r is not None and r.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            self.records.pop(self.start_offset, None)
            self.start_offset += 1
        live = {r.lock for r in self.records.values() if r.state == ACQUIRED}
        for lock in [k for k in self._locks if k not in live]:  # nothing left under these locks
            self._locks.pop(lock).cancel()

    def skip_to(self, offset: int) -> None:
        """The log starts at ``offset`` now (retention, DeleteRecords): what was before it is
        gone, acquired or not."""
        if offset <= self.start_offset:
            return
        for off in [o for o in self.records if o < offset]:
            del self.records[off]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance_start()

    def batches(self) -> list[tuple[int, int, int, int]]:
        """The durable state batches (see :func:`state_batches`)."""
        return state_batches(self.records, self.start_offset, self.end_offset)

    def close(self) -> None:
        """Cancel every lock (the partition is unloaded or its group deleted)."""
        for task in self._locks.values():
            task.cancel()
        self._locks.clear()
