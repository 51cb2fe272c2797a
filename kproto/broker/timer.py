"""A hierarchical timing wheel (Kafka's ``TimingWheel``/``SystemTimer``), sans-I/O.

A wheel has ``wheel_size`` buckets of ``tick_ms`` each and covers ``tick_ms * wheel_size``;
a task due later goes to an overflow wheel whose tick is the whole span of the wheel below,
created on first need. Insert and cancel are O(1): a task's entry is linked into its bucket's
doubly linked list and unlinks itself. Buckets (not tasks) wait in a delay queue ordered by
expiration; :meth:`SystemTimer.advance_clock` takes every bucket that is due, moves the wheels'
clocks to it and re-inserts its entries, which either land in a finer bucket or run.

Time comes from an injectable :class:`Clock` so tests drive it with :class:`FakeClock`; the
asyncio layer asks :meth:`SystemTimer.next_expiration_ms` when to wake up next. Tasks run
synchronously inside :meth:`~SystemTimer.advance_clock` (Kafka hands them to an executor;
here the caller's thread is the executor).
"""
from __future__ import annotations

import heapq
import time
from typing import Callable, Optional, Protocol

__all__ = ["Clock", "SystemClock", "FakeClock", "TimerTask", "TimerTaskEntry", "TimerTaskList",
           "TimingWheel", "SystemTimer"]


class Clock(Protocol):
    """Milliseconds from an arbitrary origin, never going backwards."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The monotonic clock (Kafka's ``Time.SYSTEM.hiResClockMs``)."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told (``advance``)."""

    def __init__(self, start_ms: int = 0) -> None:
        self.time_ms = start_ms

    def now_ms(self) -> int:
        return self.time_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self.time_ms += ms
        return self.time_ms


class TimerTask:
    """Something to run after ``delay_ms``. Subclasses override :meth:`run`."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._entry: Optional[TimerTaskEntry] = None

    def run(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        """Unlink from the wheel (O(1)); a cancelled task never runs."""
        entry = self._entry
        if entry is not None:
            entry.remove()
        self._entry = None

    @property
    def is_cancelled(self) -> bool:
        return self._entry is None

    def _set_entry(self, entry: TimerTaskEntry) -> None:
        # a task re-added gets a new entry: the old one must leave its bucket
        if self._entry is not None and self._entry is not entry:
            self._entry.remove()
        self._entry = entry


class CallbackTask(TimerTask):
    """A :class:`TimerTask` that calls a function."""

    def __init__(self, delay_ms: int, fn: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self.fn = fn

    def run(self) -> None:
        self.fn()


class TimerTaskEntry:
    """A task's node in a bucket's list."""

    __slots__ = ("task", "expiration_ms", "list", "next", "prev")

    def __init__(self, task: Optional[TimerTask], expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.list: Optional[TimerTaskList] = None
        self.next: TimerTaskEntry = self
        self.prev: TimerTaskEntry = self
        if task is not None:
            task._set_entry(self)

    @property
    def cancelled(self) -> bool:
        return self.task is None or self.task._entry is not self

    def remove(self) -> None:
        if self.list is not None:
            self.list.remove(self)


class TimerTaskList:
    """A bucket: a circular doubly linked list of entries with one expiration time."""

    def __init__(self, counter: list[int]) -> None:
        self._root = TimerTaskEntry(None, -1)
        self._counter = counter  # shared task count of the whole timer
        self.expiration_ms = -1
        self.size = 0

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the bucket's expiration; True when it changed (the bucket must be queued)."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        entry.remove()
        if entry.cancelled:
            return
        root = self._root
        tail = root.prev
        entry.next, entry.prev = root, tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self.size += 1
        self._counter[0] += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        if entry.list is not self:
            return
        entry.next.prev = entry.prev
        entry.prev.next = entry.next
        entry.next = entry.prev = entry
        entry.list = None
        self.size -= 1
        self._counter[0] -= 1

    def flush(self, reinsert: Callable[[TimerTaskEntry], None]) -> None:
        """Remove every entry and hand each to ``reinsert``; the bucket becomes unused."""
        root = self._root
        head = root.next
        while head is not root:
            self.remove(head)
            reinsert(head)
            head = root.next
        self.expiration_ms = -1

    def entries(self) -> list[TimerTaskEntry]:
        out = []
        e = self._root.next
        while e is not self._root:
            out.append(e)
            e = e.next
        return out


class _DelayQueue:
    """Buckets ordered by expiration (Java's ``DelayQueue``). A bucket re-armed with another
    expiration leaves a stale heap item behind, skipped when it surfaces."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._seq = 0

    def offer(self, bucket: TimerTaskList) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (bucket.expiration_ms, self._seq, bucket))

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and heap[0][2].expiration_ms != heap[0][0]:
            heapq.heappop(heap)

    def peek_expiration(self) -> Optional[int]:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def poll(self, now_ms: int) -> Optional[TimerTaskList]:
        """The earliest bucket due at ``now_ms``, or None."""
        self._drop_stale()
        if self._heap and self._heap[0][0] <= now_ms:
            return heapq.heappop(self._heap)[2]
        return None


class TimingWheel:
    """One level of the hierarchy (Kafka's ``TimingWheel``)."""

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: list[int],
                 queue: _DelayQueue) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.counter = counter
        self.queue = queue
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        # rounded down to a multiple of the tick: a bucket covers [t, t + tick)
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.overflow: Optional[TimingWheel] = None

    def _overflow_wheel(self) -> TimingWheel:
        if self.overflow is None:
            self.overflow = TimingWheel(self.interval, self.wheel_size, self.current_time_ms,
                                        self.counter, self.queue)
        return self.overflow

    def add(self, entry: TimerTaskEntry) -> bool:
        """Place the entry; False when it is cancelled or already due (the caller runs it)."""
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        if expiration < self.current_time_ms + self.tick_ms:
            return False
        if expiration < self.current_time_ms + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                # a bucket is reused once its previous round was flushed: queue it again
                self.queue.offer(bucket)
            return True
        return self._overflow_wheel().add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time_ms)

    @property
    def levels(self) -> int:
        """How many wheels exist from this one up."""
        return 1 + (self.overflow.levels if self.overflow is not None else 0)


class SystemTimer:
    """Kafka's ``SystemTimer``: ``add`` tasks, ``advance_clock`` to run the due ones.

    Defaults are Kafka's (1 ms tick, 20 buckets per wheel).
    """

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, clock: Optional[Clock] = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._counter = [0]
        self._queue = _DelayQueue()
        self.wheel = TimingWheel(tick_ms, wheel_size, self.clock.now_ms(), self._counter, self._queue)

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` at now + ``task.delay_ms``; a task already due runs at once."""
        self._add_entry(TimerTaskEntry(task, task.delay_ms + self.clock.now_ms()))

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self.wheel.add(entry) and not entry.cancelled:
            task = entry.task
            assert task is not None
            task._entry = None  # done: a later cancel() is a no-op
            task.run()

    def advance_clock(self, now_ms: Optional[int] = None) -> int:
        """Run every task due at ``now_ms`` (default: the clock's now); returns how many
        buckets were flushed."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        flushed = 0
        bucket = self._queue.poll(now)
        while bucket is not None:
            self.wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(self._add_entry)
            flushed += 1
            bucket = self._queue.poll(now)
        return flushed

    def next_expiration_ms(self) -> Optional[int]:
        """When the earliest non-empty bucket is due (clock time), or None when idle."""
        return self._queue.peek_expiration()

    @property
    def size(self) -> int:
        """Tasks waiting (cancelled ones leave at once)."""
        return self._counter[0]
