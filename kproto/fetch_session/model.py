"""Value types shared by the client and broker halves of KIP-227 fetch sessions.

They mirror the Java classes ``TopicPartition``, ``TopicIdPartition``,
``FetchRequest.PartitionData`` and ``FetchMetadata``. Topic ids are the codec's
:class:`~kproto.codecs.primitives.Uuid`; :data:`ZERO_UUID` means "no id" (``Uuid.ZERO_UUID``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from kproto.codecs.primitives import Uuid
from kproto.topic_partition import TopicIdPartition, TopicPartition

ZERO_UUID: Uuid = Uuid.ZERO

# Session metadata constants (org.apache.kafka.common.requests.FetchMetadata).
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1


class PartitionData(NamedTuple):
    """What a fetcher asks of one partition (Kafka's ``FetchRequest.PartitionData``).

    Epochs are None when absent (``Optional.empty()``, -1 on the wire). Equality over all
    fields is what decides whether an incremental request must resend a partition.
    """

    topic_id: Uuid
    fetch_offset: int
    log_start_offset: int = -1
    max_bytes: int = 1048576
    current_leader_epoch: Optional[int] = None
    last_fetched_epoch: Optional[int] = None


def next_epoch(prev_epoch: int) -> int:
    """``FetchMetadata.nextEpoch``: FINAL stays FINAL, and the epoch wraps from 2^31-1 to 1."""
    if prev_epoch < 0:
        return FINAL_EPOCH
    if prev_epoch == _INT32_MAX:
        return 1
    return prev_epoch + 1


class FetchMetadata(NamedTuple):
    """The session id and epoch a fetch request carries (Kafka's ``FetchMetadata``)."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full request lists every partition: epoch INITIAL (0) or FINAL (-1)."""
        return self.epoch == INITIAL_EPOCH or self.epoch == FINAL_EPOCH

    def next_close_existing(self) -> "FetchMetadata":
        """Close this session with the next request and do not open another."""
        return FetchMetadata(self.session_id, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> "FetchMetadata":
        """Close this session with the next request and ask for a new one."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> "FetchMetadata":
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> "FetchMetadata":
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))


FetchMetadata.INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)  # type: ignore[attr-defined]
FetchMetadata.LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)  # type: ignore[attr-defined]

