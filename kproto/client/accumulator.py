"""The producer's bookkeeping, sans-I/O: records batched per partition, numbered with the
idempotent producer's sequences, encoded into batches and laid out as a ProduceRequest. The
asyncio :class:`~kproto.client.producer.Producer` drives it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

from kproto.client.partitioner import StickyPartitioner, murmur2
from kproto.codecs import request as _request_codec
from kproto.records import RecordBatchBuilder
from kproto.records.record import increment_sequence
from kproto.topic_partition import TopicPartitionKey
from kproto.schemas.api_keys import ApiKey

__all__ = ["RecordMetadata", "PendingBatch", "RecordAccumulator", "encode_batch",
           "build_produce_request"]

#: ``DefaultRecord`` overhead bound used to estimate a record's size before it is encoded.
_RECORD_OVERHEAD = 21


class RecordMetadata(NamedTuple):
    """Where a record landed (``offset`` -1 with acks=0). A named tuple: the producer makes one
    per record, and a tuple is the cheapest immutable object to make."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass
class PendingBatch:
    """Records waiting to be sent to one partition, with the futures of their senders."""

    topic: str
    partition: int
    records: list[tuple[int, Optional[bytes], Optional[bytes], tuple]] = field(default_factory=list)
    futures: list[Any] = field(default_factory=list)
    size: int = 0
    base_sequence: int = -1
    attempts: int = 0
    #: error code of the last failed attempt (reported when retries run out)
    last_error: int = 0
    #: drain order (batches of a partition are sent, and sent again, in this order)
    number: int = 0


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b`` (sequences wrap at 2^31)."""
    return 0 < (a - b) % (1 << 31) < (1 << 30)


class RecordAccumulator:
    """Sans-I/O batching: records per partition, partition choice, sequence numbers.

    ``partition()`` chooses like Kafka's built-in partitioner (murmur2 for keyed records,
    sticky for keyless ones); ``append()`` adds to the partition's last batch, opening a new one
    when it holds ``batch_size`` bytes; ``drain()`` hands out batches front first, numbered
    (when ``idempotent``) with consecutive sequences as they leave, so that several batches of a
    partition can be in flight; ``complete()`` records what the broker acknowledged and
    ``renumber()`` numbers again, from there, the batches to be sent once more after a failure.
    """

    def __init__(self, batch_size: int = 16384, idempotent: bool = True,
                 random: Callable[[], int] | None = None) -> None:
        self.batch_size = batch_size
        self.idempotent = idempotent
        self._random = random
        self._open: dict[TopicPartitionKey, deque[PendingBatch]] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        #: partition -> sequence of the next batch to leave
        self.next_sequence: dict[TopicPartitionKey, int] = {}
        #: partition -> sequence after the last batch the broker acknowledged
        self.acked_sequence: dict[TopicPartitionKey, int] = {}
        #: estimated bytes of the records not drained yet
        self.queued_bytes = 0
        self._drained = 0

    def partition(self, topic: str, key: Optional[bytes], num_partitions: int,
                  available: Sequence[int]) -> int:
        """Kafka's partition for a record of ``topic`` with ``key`` (None: sticky choice)."""
        if key is not None:  # partition_for_key, inlined: this runs for every keyed record
            if num_partitions < 1:
                raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
            return (murmur2(key) & 0x7FFFFFFF) % num_partitions
        sp = self._sticky.get(topic)
        if sp is None:
            sp = self._sticky[topic] = StickyPartitioner(self.batch_size, self._random)
        return sp.partition(available, num_partitions)

    def append(self, topic: str, partition: int, timestamp: int, key: Optional[bytes],
               value: Optional[bytes], headers: tuple, future: Any, *, num_partitions: int = 0,
               available: Sequence[int] = (), keyed: bool = True) -> bool:
        """Queue a record; returns True when its batch reached ``batch_size`` (send soon)."""
        tp = (topic, partition)
        queue = self._open.get(tp)
        if queue and queue[-1].size < self.batch_size:
            batch = queue[-1]
        else:
            if queue is None:
                queue = self._open[tp] = deque()
            batch = PendingBatch(topic, partition)
            queue.append(batch)
        size = _RECORD_OVERHEAD
        if key:
            size += len(key)
        if value:
            size += len(value)
        if headers:
            size += sum(len(k) + len(v or b"") + 2 for k, v in headers)
        batch.records.append((timestamp, key, value, headers))
        batch.futures.append(future)
        batch.size += size
        self.queued_bytes += size
        full = batch.size >= self.batch_size
        if not keyed:
            sp = self._sticky.get(topic)
            if sp is not None:
                sp.on_append(size, available, num_partitions, enable_switch=full)
        return full

    def __len__(self) -> int:
        return sum(len(b.records) for q in self._open.values() for b in q)

    def __bool__(self) -> bool:  # whether anything is queued, without counting it
        return bool(self._open)

    def drain(self, limit: Callable[[TopicPartitionKey], int] | None = None, *,
              full_only: bool = False) -> list[PendingBatch]:
        """Take batches front first: at most ``limit(partition)`` per partition (default all),
        only full ones with ``full_only``; each is numbered with its partition's next sequence."""
        out = []
        for tp, queue in list(self._open.items()):
            room = len(queue) if limit is None else limit(tp)
            while queue and room > 0 and (not full_only or queue[0].size >= self.batch_size):
                b = queue.popleft()
                room -= 1
                self.queued_bytes -= b.size
                self._drained += 1
                b.number = self._drained
                if self.idempotent:
                    seq = self.next_sequence.get(tp, 0)
                    b.base_sequence = seq
                    self.next_sequence[tp] = increment_sequence(seq, len(b.records))
                out.append(b)
            if not queue:
                del self._open[tp]
        return out

    def complete(self, batch: PendingBatch) -> None:
        """The broker accepted ``batch``."""
        if self.idempotent:
            tp = (batch.topic, batch.partition)
            end = increment_sequence(batch.base_sequence, len(batch.records))
            if tp not in self.acked_sequence or _seq_after(end, self.acked_sequence[tp]):
                self.acked_sequence[tp] = end

    def renumber(self, batches: Sequence[PendingBatch]) -> None:
        """Number ``batches`` (the unacknowledged ones of one partition, in order, none in
        flight) consecutively from the partition's last acknowledged sequence: a batch that
        failed for good must not leave a gap the broker would wait for."""
        if not self.idempotent or not batches:
            return
        tp = (batches[0].topic, batches[0].partition)
        seq = self.acked_sequence.get(tp, 0)
        for b in batches:
            b.base_sequence = seq
            seq = increment_sequence(seq, len(b.records))
        self.next_sequence[tp] = seq

    def take_all(self) -> list[PendingBatch]:
        """Remove every queued batch without numbering it (they will not be sent)."""
        out = [b for q in self._open.values() for b in q]
        self._open = {}
        self.queued_bytes = 0
        return out

    def reset_sequences(self) -> None:
        """A new producer id/epoch starts every partition at sequence 0."""
        self.next_sequence.clear()
        self.acked_sequence.clear()


def encode_batch(batch: PendingBatch, compression: int, producer_id: int, producer_epoch: int,
                 transactional: bool = False) -> bytes:
    """The magic v2 record batch of ``batch``."""
    b = RecordBatchBuilder(compression=compression, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=batch.base_sequence,
                           transactional=transactional)
    b.extend(batch.records)
    return b.build()


def build_produce_request(payloads: dict[TopicPartitionKey, bytes], *, acks: int = -1,
                          timeout_ms: int = 30000, transactional_id: Optional[str] = None,
                          topic_ids: Optional[Mapping[str, Any]] = None) -> Any:
    """A ProduceRequest carrying one records blob per partition (topics in first-seen order).
    With ``topic_ids`` (topic -> id) each topic is also named by its id, which is how v13 names
    it (KIP-516; below v13 the ids are not written); every topic then needs an id."""
    cls = _request_codec(ApiKey.PRODUCE).cls
    topics: dict[str, Any] = {}
    for (topic, partition), records in payloads.items():
        td = topics.get(topic)
        if td is None:
            if topic_ids is None:
                td = cls.TopicProduceData(name=topic, partition_data=[])
            else:
                td = cls.TopicProduceData(name=topic, topic_id=topic_ids[topic], partition_data=[])
            topics[topic] = td
        td.partition_data.append(cls.PartitionProduceData(index=partition, records=records))
    return cls(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
               topic_data=list(topics.values()))
