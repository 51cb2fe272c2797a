"""Share sessions and acknowledgements of KIP-932, sans-I/O.

A share consumer keeps one share session per broker it fetches from (Kafka's
``ShareSessionHandler``): the first ShareFetch (epoch 0) names every partition, later ones (epoch
1, 2, ...) only the partitions added (``Topics``) and removed (``ForgottenTopicsData``); every
ShareFetch and ShareAcknowledge moves the epoch on, and epoch -1 closes the session (the
broker releases what the member still holds there). A session error (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED) or a lost connection starts a new
session with epoch 0. Acknowledgements ride on the next ShareFetch to the broker that delivered
the records ("piggy-backed"), or go in a ShareAcknowledge of their own; a session is never
opened by acknowledgements (Kafka refuses them at epoch 0)::

    s = ShareSession(node=1)
    req = s.fetch_request(group, member_id, wanted=[(topic_id, 0)], acks={})   # epoch 0
    s.on_response(resp.error_code)                                             # epoch 1
    records, gaps = acquired_records("t", 0, pd.records, pd.acquired_records)

:class:`Acknowledgements` collects a partition's acknowledgements as runs of one type and
writes them as ``AcknowledgementBatch`` entries.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from kproto.client.consumer import parse_records
from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["AcknowledgeType", "ShareRecord", "Acknowledgements", "ShareSession", "acquired_records", "renews",
           "next_epoch", "INITIAL_EPOCH", "FINAL_EPOCH", "SESSION_ERRORS"]

#: ShareFetch/ShareAcknowledge session epochs (Kafka's ``ShareRequestMetadata``)
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Answers after which the session is gone: the next ShareFetch opens a new one
SESSION_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            ErrorCode.SHARE_SESSION_LIMIT_REACHED})
_INT32_MAX = 2**31 - 1

TopicIdPartition = tuple[Uuid, int]


class AcknowledgeType(IntEnum):
    """How a delivered record is acknowledged (the ``AcknowledgeTypes`` values). ``GAP`` marks
    an offset of an acquired range that holds no record (a control record, a compacted one);
    ``RENEW`` extends a record's lock (Kafka 4.4, ``IsRenewAck``)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ShareRecord(NamedTuple):
    """A record delivered to a share consumer; ``delivery_count`` is 1 at the first delivery
    and grows with each redelivery (after a RELEASE or an expired lock)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: tuple
    delivery_count: int


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``ShareRequestMetadata.nextEpoch``: the final epoch
    stays final, the largest int32 wraps to 1)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass
class Acknowledgements:
    """One partition's acknowledgements, as ``(first, last, type)`` runs of consecutive offsets
    of one type. A range is kept as a range (a gap of many offsets costs one run)."""

    runs: list[tuple[int, int, int]] = field(default_factory=list)

    def add(self, first: int, last: int, kind: int) -> None:
        """Acknowledge offsets ``first`` to ``last`` with ``kind`` (an :class:`AcknowledgeType`)."""
        kind = int(kind)
        if self.runs and self.runs[-1][1] + 1 == first and self.runs[-1][2] == kind:
            self.runs[-1] = (self.runs[-1][0], last, kind)
        else:
            self.runs.append((first, last, kind))

    def __bool__(self) -> bool:
        return bool(self.runs)

    def offsets(self) -> tuple[int, ...]:
        """The offsets of the records acknowledged (gaps left out), ascending."""
        return tuple(sorted(o for first, last, kind in self.runs if kind != AcknowledgeType.GAP
                            for o in range(first, last + 1)))

    def batches(self, cls: Any) -> list[Any]:
        """The ``AcknowledgementBatch`` entries (``cls`` is the request's batch class): runs in
        offset order, adjacent runs of one type merged, each batch with a single type."""
        out: list[tuple[int, int, int]] = []
        for first, last, kind in sorted(self.runs):
            if out and out[-1][1] + 1 == first and out[-1][2] == kind:
                out[-1] = (out[-1][0], last, kind)
            else:
                out.append((first, last, kind))
        return [cls(first_offset=f, last_offset=la, acknowledge_types=[k]) for f, la, k in out]


def renews(acks: Mapping[TopicIdPartition, Acknowledgements]) -> bool:
    """Whether ``acks`` hold a RENEW: the request carrying them says so (``IsRenewAck``, v2)
    and, a ShareFetch, asks for no records."""
    return any(kind == AcknowledgeType.RENEW for a in acks.values() for _, _, kind in a.runs)


def acquired_records(topic: str, partition: int, records: Any, acquired: Sequence[Any]
                     ) -> tuple[list[ShareRecord], list[tuple[int, int]]]:
    """The records of a ShareFetch partition that this member acquired, each with its delivery
    count, and the gaps: ``(first, last)`` ranges of acquired offsets without a record, which
    the consumer acknowledges as GAP (Kafka's ``ShareCompletedFetch``). ``acquired`` holds the
    response's ``AcquiredRecords`` (first offset, last offset, delivery count); records outside
    them are someone else's and skipped."""
    ranges = sorted((a.first_offset, a.last_offset, a.delivery_count) for a in acquired
                    if a.first_offset <= a.last_offset)
    if not ranges:
        return [], []
    got, _ = parse_records(topic, partition, records, ranges[0][0])
    starts = [r[0] for r in ranges]
    out: list[ShareRecord] = []
    seen: list[int] = []
    for r in got:
        i = bisect.bisect_right(starts, r.offset) - 1
        if i >= 0 and r.offset <= ranges[i][1]:
            out.append(ShareRecord(*r, ranges[i][2]))
            seen.append(r.offset)
    gaps: list[tuple[int, int]] = []
    j = 0
    for first, last, _ in ranges:
        nxt = first
        while j < len(seen) and seen[j] < first:
            j += 1
        while j < len(seen) and seen[j] <= last:
            if seen[j] > nxt:
                gaps.append((nxt, seen[j] - 1))
            nxt = seen[j] + 1
            j += 1
        if nxt <= last:
            gaps.append((nxt, last))
    return out, gaps


@dataclass
class ShareSession:
    """The client side of one broker's share session (Kafka's ``ShareSessionHandler``)."""

    node: int
    epoch: int = INITIAL_EPOCH
    #: the partitions the broker has in the session (as of the last request built)
    partitions: set[TopicIdPartition] = field(default_factory=set)

    @property
    def is_new(self) -> bool:
        """The next ShareFetch opens a session: it cannot carry acknowledgements."""
        return self.epoch == INITIAL_EPOCH

    def fetch_request(self, group_id: str, member_id: str, wanted: Iterable[TopicIdPartition],
                      acks: Mapping[TopicIdPartition, Acknowledgements], *, max_wait_ms: int = 500,
                      min_bytes: int = 1, max_bytes: int = 52428800, max_records: int = 500,
                      cls: Any = None) -> Any:
        """The next ShareFetchRequest for the ``wanted`` partitions, with ``acks`` piggy-backed
        (each of a wanted partition; none on a new session). A new session names every wanted
        partition; a running one the added ones and those with acknowledgements, and forgets
        the ones no longer wanted. With a RENEW among ``acks`` it is a renewal: it asks for no
        records (see :func:`renews`)."""
        if cls is None:
            cls = _request_codec(ApiKey.SHARE_FETCH).cls
        wanted = set(wanted)
        if acks and self.is_new:
            raise ValueError("a new share session cannot carry acknowledgements")
        if not set(acks) <= wanted:
            raise ValueError("acknowledgements of a partition not fetched go in a ShareAcknowledge")
        if self.is_new:
            send, forget = wanted, set()
        else:
            send, forget = (wanted - self.partitions) | set(acks), self.partitions - wanted
        self.partitions = wanted
        renew = renews(acks)
        if renew:  # a renewal fetches nothing (Kafka refuses one that asks for records)
            max_wait_ms = min_bytes = max_bytes = max_records = 0
        topics: dict[Uuid, list[Any]] = {}
        for tid, p in sorted(send, key=_key):
            batches = acks[(tid, p)].batches(cls.AcknowledgementBatch) if (tid, p) in acks else []
            topics.setdefault(tid, []).append(cls.FetchPartition(partition_index=p, acknowledgement_batches=batches))
        forgotten: dict[Uuid, list[int]] = {}
        for tid, p in sorted(forget, key=_key):
            forgotten.setdefault(tid, []).append(p)
        return cls(group_id=group_id, member_id=member_id, share_session_epoch=self.epoch,
                   max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                   max_records=max_records, batch_size=max_records, is_renew_ack=renew,
                   topics=[cls.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
                   forgotten_topics_data=[cls.ForgottenTopic(topic_id=t, partitions=ps)
                                          for t, ps in forgotten.items()])

    def acknowledge_request(self, group_id: str, member_id: str,
                            acks: Mapping[TopicIdPartition, Acknowledgements], *, final: bool = False,
                            cls: Any = None) -> Any:
        """A ShareAcknowledgeRequest with ``acks``; ``final`` closes the session (epoch -1).
        Only on a running session (ValueError on a new one)."""
        if self.is_new:
            raise ValueError("a share session cannot be opened by a ShareAcknowledge")
        if cls is None:
            cls = _request_codec(ApiKey.SHARE_ACKNOWLEDGE).cls
        topics: dict[Uuid, list[Any]] = {}
        for (tid, p), a in sorted(acks.items(), key=lambda kv: _key(kv[0])):
            topics.setdefault(tid, []).append(cls.AcknowledgePartition(
                partition_index=p, acknowledgement_batches=a.batches(cls.AcknowledgementBatch)))
        epoch = FINAL_EPOCH if final else self.epoch
        if final:
            self.epoch, self.partitions = INITIAL_EPOCH, set()
        return cls(group_id=group_id, member_id=member_id, share_session_epoch=epoch, is_renew_ack=renews(acks),
                   topics=[cls.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()])

    def on_response(self, error_code: int) -> bool:
        """Apply the top-level error of a ShareFetch or ShareAcknowledge answer: True when the
        session went on. A session error starts a new session; another error still moves the
        epoch on, as the broker did."""
        if error_code in SESSION_ERRORS:
            self.reset()
            return False
        self.epoch = next_epoch(self.epoch)
        return error_code == ErrorCode.NONE

    def reset(self) -> None:
        """No answer (connection lost) or a session error: the next ShareFetch opens a new session."""
        self.epoch, self.partitions = INITIAL_EPOCH, set()


def _key(tp: TopicIdPartition) -> tuple[str, int]:
    return str(tp[0]), tp[1]
