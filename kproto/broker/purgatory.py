"""Delayed operations and their purgatory (Kafka's ``DelayedOperation`` and
``DelayedOperationPurgatory``), sans-I/O, single-threaded.

An operation waits for a condition (enough bytes to fetch, the high watermark to pass an
offset) under one or more *watch keys*; whoever changes the state behind a key calls
:meth:`DelayedOperationPurgatory.check_and_complete` with it, and the operations watching it
try to complete. Each operation also sits in the :class:`~kproto.broker.timer.SystemTimer`;
whichever comes first, completion or expiry, wins: :meth:`DelayedOperation.force_complete`
runs :meth:`~DelayedOperation.on_complete` exactly once.

Completed operations stay in the watch lists of their other keys until those are checked;
when the estimated number of operations exceeds the delayed ones by ``purge_interval``
(Kafka's ``purgeInterval``, 1000 for fetch and produce), :meth:`advance_clock` sweeps them out.
"""
from __future__ import annotations

from typing import Any, Generic, Hashable, Iterable, Optional, TypeVar

from kproto.broker.timer import SystemTimer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask):
    """An operation that completes when :meth:`try_complete` says so, or expires after
    ``delay_ms``. Subclasses implement :meth:`try_complete` (call :meth:`force_complete` when
    the condition holds and return its result), :meth:`on_complete` (build and send the
    answer: called exactly once) and :meth:`on_expiration` (bookkeeping after a timeout, after
    :meth:`on_complete`)."""

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.completed = False

    @property
    def is_completed(self) -> bool:
        return self.completed

    def force_complete(self) -> bool:
        """Complete now if nobody did: True for the single caller that completes it."""
        if self.completed:
            return False
        self.completed = True
        self.cancel()  # leave the timer: it must not expire after completing
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        raise NotImplementedError

    def on_complete(self) -> None:
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after :meth:`on_complete` when the operation timed out."""

    def run(self) -> None:
        # the timer's call: expiry completes the operation unless something else did
        if self.force_complete():
            self.on_expiration()


T = TypeVar("T", bound=DelayedOperation)


class _Watchers(Generic[T]):
    def __init__(self) -> None:
        # a dict keeps insertion order and removes in O(1) (Kafka: ConcurrentLinkedQueue)
        self.ops: dict[int, T] = {}

    def watch(self, op: T) -> None:
        self.ops[id(op)] = op

    def try_complete_watched(self) -> int:
        completed = 0
        for key, op in list(self.ops.items()):
            # (pop: an operation's completion may check this key again and remove it first)
            if op.is_completed:
                self.ops.pop(key, None)  # completed through another key
            elif op.try_complete():
                self.ops.pop(key, None)
                completed += 1
        return completed

    def cancel(self) -> list[T]:
        out = []
        for op in self.ops.values():
            op.cancel()
            out.append(op)
        self.ops.clear()
        return out

    def purge_completed(self) -> int:
        done = [k for k, op in self.ops.items() if op.is_completed]
        for k in done:
            del self.ops[k]
        return len(done)


class DelayedOperationPurgatory(Generic[T]):
    """Operations waiting under watch keys, expired through a timer."""

    def __init__(self, name: str, timer: Optional[SystemTimer] = None, *, purge_interval: int = 1000,
                 timer_enabled: bool = True) -> None:
        self.name = name
        self.timer = timer if timer is not None else SystemTimer()
        self.purge_interval = purge_interval
        self.timer_enabled = timer_enabled
        self.watchers: dict[Hashable, _Watchers[T]] = {}
        # Kafka's estimatedTotalOperations: counts watched operations, reset at each purge
        self.estimated_total = 0

    def try_complete_else_watch(self, op: T, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if it can; else watch it under every key and start its timer.
        True when it completed here."""
        keys = list(keys)
        if op.try_complete():
            return True
        for k in keys:
            self._watch(k, op)
        if keys:
            self.estimated_total += 1
        if self.timer_enabled:
            self.timer.add(op)
            if op.is_completed:
                op.cancel()
        return False

    def _watch(self, key: Hashable, op: T) -> None:
        w = self.watchers.get(key)
        if w is None:
            w = self.watchers[key] = _Watchers()
        w.watch(op)

    def check_and_complete(self, key: Hashable) -> int:
        """Something changed behind ``key``: try the operations watching it. Returns how many
        completed."""
        w = self.watchers.get(key)
        if w is None:
            return 0
        n = w.try_complete_watched()
        if not w.ops:
            self.watchers.pop(key, None)
        return n

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching ``key``; its operations are cancelled (removed from the timer) and
        returned, not completed."""
        w = self.watchers.pop(key, None)
        return w.cancel() if w is not None else []

    def watched(self) -> int:
        """Entries in all watch lists (an operation counts once per key)."""
        return sum(len(w.ops) for w in self.watchers.values())

    @property
    def num_delayed(self) -> int:
        """Operations waiting in the timer."""
        return self.timer.size

    def advance_clock(self, now_ms: Optional[int] = None) -> int:
        """Expire what is due and, past the purge threshold, sweep completed operations out of
        the watch lists (Kafka's expiration reaper). Returns how many were purged."""
        self.timer.advance_clock(now_ms)
        if self.estimated_total - self.num_delayed > self.purge_interval:
            return self.purge()
        return 0

    def purge(self) -> int:
        self.estimated_total = self.num_delayed
        purged = 0
        for key in list(self.watchers):
            w = self.watchers[key]
            purged += w.purge_completed()
            if not w.ops:
                del self.watchers[key]
        return purged

    def shutdown(self) -> list[T]:
        """Cancel everything (nothing completes); returns the cancelled operations."""
        out: list[Any] = []
        for key in list(self.watchers):
            out += self.cancel_for_key(key)
        return out
