"""read_committed: which transactional batches belong to aborted transactions.

One rule for both places Kafka applies it: a consumer knows each aborted transaction by its
producer id and first offset (the fetch response's list) and learns where it ends from the
producer's ABORT marker in the records; a broker's log knows both ends (the ``.txnindex``
entries). Either way a transactional data batch of that producer from the first offset up to
the marker is left out.
"""
from __future__ import annotations

import bisect
from typing import Iterable, Optional

from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.control import decode_control

__all__ = ["AbortedTransactions", "is_abort_marker"]

_OPEN = 1 << 63  # the end of a span whose ABORT marker has not been read yet


def is_abort_marker(batch: RecordBatch) -> bool:
    """True for a control batch whose record is an ABORT marker."""
    if not batch.is_control:
        return False
    try:
        recs = batch.record_list()
        return bool(recs) and decode_control(recs[0].key, recs[0].value).type_id == 0
    except DecodeError:
        return False


class AbortedTransactions:
    """Aborted transactions as ``(producer_id, first_offset, last_offset)`` spans, ``last_offset``
    being the ABORT marker's offset or None until :meth:`marker` reads it."""

    def __init__(self, spans: Iterable[tuple[int, int, Optional[int]]] = ()) -> None:
        self._by_pid: dict[int, list[list[int]]] = {}
        for pid, first, last in spans:
            self._by_pid.setdefault(pid, []).append([first, _OPEN if last is None else last])
        for v in self._by_pid.values():
            v.sort()

    @classmethod
    def from_fetch(cls, aborted: Iterable[tuple[int, int]]) -> AbortedTransactions:
        """From a fetch response's ``(producer_id, first_offset)`` list (ends read later)."""
        return cls((pid, first, None) for pid, first in aborted)

    def marker(self, batch: RecordBatch) -> None:
        """Read a control batch: an ABORT marker ends its producer's open span."""
        spans = self._by_pid.get(batch.producer_id)
        if spans and is_abort_marker(batch):
            for span in spans:
                if span[1] == _OPEN and span[0] <= batch.base_offset:
                    span[1] = batch.base_offset
                    break

    def is_aborted(self, batch: RecordBatch) -> bool:
        """Whether a transactional data batch belongs to an aborted transaction."""
        if not batch.is_transactional or batch.is_control:
            return False
        return self.is_aborted_at(batch.producer_id, batch.last_offset)

    def is_aborted_at(self, producer_id: int, last_offset: int) -> bool:
        """:meth:`is_aborted` for a transactional data batch known by its producer id and
        last offset."""
        spans = self._by_pid.get(producer_id)
        if not spans:
            return False
        # a producer's transactions do not overlap: only the last one starting at or before
        # the batch can hold it
        i = bisect.bisect_right(spans, [last_offset, 1 << 64]) - 1
        return i >= 0 and last_offset < spans[i][1]

    @property
    def producers(self) -> frozenset[int]:
        """The producer ids with aborted transactions."""
        return frozenset(self._by_pid)
