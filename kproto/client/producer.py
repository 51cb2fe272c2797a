"""A minimal idempotent producer: partitioning, batching, compression, sequences, retries.

The bookkeeping is sans-I/O (:class:`RecordAccumulator` batches records per partition and
numbers them; :func:`build_produce_request` lays out the request); :class:`Producer` is the
asyncio layer that sends batches to partition leaders::

    async with Cluster("127.0.0.1:9092") as cluster:
        producer = await Producer(cluster, compression="zstd").start()
        fut = await producer.send("events", b"value", key=b"k")   # -> future of RecordMetadata
        await producer.flush()
        print(fut.result())                                        # partition, offset

Like Kafka's idempotent producer, each partition's batches carry the producer id, epoch and
consecutive base sequences, and a batch is retried with the same sequence after a retriable
error, so the broker drops duplicates. This producer keeps one batch in flight per partition
(Kafka allows five), which keeps the ordering argument trivial.

With a ``transactional_id`` it is a transactional producer (state in
:class:`~kproto.client.transactions.TransactionManager`)::

    producer = await Producer(cluster, transactional_id="orders-1").start()
    producer.begin_transaction()
    await producer.send("orders", b"...")
    await producer.send_offsets_to_transaction({("in", 0): 42}, "group")  # optional
    await producer.commit_transaction()      # or abort_transaction()
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from kproto.client.cluster import METADATA_REFRESH_ERRORS, Cluster
from kproto.client.connection import BrokerError, KafkaConnectionError, raise_for_error
from kproto.client.partitioner import StickyPartitioner, partition_for_key
from kproto.client.transactions import ADD_PARTITIONS_CLIENT_VERSIONS, Action, TransactionManager
from kproto.codecs import request as _request_codec
from kproto.codecs.compression import codec_id
from kproto.errors import KprotoError
from kproto.records import RecordBatchBuilder
from kproto.records.batch import increment_sequence

__all__ = ["RecordMetadata", "PendingBatch", "RecordAccumulator", "build_produce_request",
           "Producer"]

PRODUCE, INIT_PRODUCER_ID = 0, 22
LEADER_NOT_AVAILABLE, NETWORK_EXCEPTION, DUPLICATE_SEQUENCE_NUMBER = 5, 13, 46
#: Errors after which a batch is sent again unchanged (same sequence), after a metadata refresh.
RETRIABLE_PRODUCE_ERRORS = METADATA_REFRESH_ERRORS | {
    7,   # REQUEST_TIMED_OUT
    13,  # NETWORK_EXCEPTION
    19,  # NOT_ENOUGH_REPLICAS
    20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    56,  # KAFKA_STORAGE_ERROR
}
#: ``DefaultRecord`` overhead bound used to estimate a record's size before it is encoded.
_RECORD_OVERHEAD = 21

TopicPartition = tuple  # (topic, partition)


@dataclass(frozen=True)
class RecordMetadata:
    """Where a record landed (``offset`` -1 with acks=0)."""

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


class RecordAccumulator:
    """Sans-I/O batching: records per partition, partition choice, sequence numbers.

    ``partition()`` chooses like Kafka's built-in partitioner (murmur2 for keyed records,
    sticky for keyless ones); ``append()`` adds to the partition's open batch; ``drain()`` hands
    out every non-empty batch, numbered with the partition's next sequence when ``idempotent``;
    ``complete()`` advances the sequence once the broker accepted a batch.
    """

    def __init__(self, batch_size: int = 16384, idempotent: bool = True,
                 random: Callable[[], int] | None = None) -> None:
        self.batch_size = batch_size
        self.idempotent = idempotent
        self._random = random
        self._open: dict[TopicPartition, PendingBatch] = {}
        self._sticky: dict[str, StickyPartitioner] = {}
        self.next_sequence: dict[TopicPartition, int] = {}

    def partition(self, topic: str, key: Optional[bytes], num_partitions: int,
                  available: Sequence[int]) -> int:
        """Kafka's partition for a record of ``topic`` with ``key`` (None: sticky choice)."""
        if key is not None:
            return partition_for_key(key, num_partitions)
        sp = self._sticky.get(topic)
        if sp is None:
            sp = self._sticky[topic] = StickyPartitioner(self.batch_size, self._random)
        return sp.partition(available, num_partitions)

    def append(self, topic: str, partition: int, timestamp: int, key: Optional[bytes],
               value: Optional[bytes], headers: tuple, future: Any, *, num_partitions: int = 0,
               available: Sequence[int] = (), keyed: bool = True) -> bool:
        """Queue a record; returns True when its batch reached ``batch_size`` (send soon)."""
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = PendingBatch(topic, partition)
        size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0) + \
            sum(len(k) + len(v or b"") + 2 for k, v in headers)
        batch.records.append((timestamp, key, value, headers))
        batch.futures.append(future)
        batch.size += size
        full = batch.size >= self.batch_size
        if not keyed:
            sp = self._sticky.get(topic)
            if sp is not None:
                sp.on_append(size, available, num_partitions, enable_switch=full)
        return full

    def __len__(self) -> int:
        return sum(len(b.records) for b in self._open.values())

    def drain(self) -> list[PendingBatch]:
        """Take every open batch, numbering each (idempotence) with its partition's sequence."""
        batches = [b for b in self._open.values() if b.records]
        self._open = {}
        if self.idempotent:
            for b in batches:
                b.base_sequence = self.next_sequence.get((b.topic, b.partition), 0)
        return batches

    def complete(self, batch: PendingBatch) -> None:
        """The broker accepted ``batch``: the partition's next batch follows it."""
        if self.idempotent:
            self.next_sequence[(batch.topic, batch.partition)] = increment_sequence(
                batch.base_sequence, len(batch.records))

    def reset_sequences(self) -> None:
        """A new producer id/epoch starts every partition at sequence 0."""
        self.next_sequence.clear()


def encode_batch(batch: PendingBatch, compression: int, producer_id: int, producer_epoch: int,
                 transactional: bool = False) -> bytes:
    """The magic v2 record batch of ``batch``."""
    b = RecordBatchBuilder(compression=compression, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=batch.base_sequence,
                           transactional=transactional)
    for ts, key, value, headers in batch.records:
        b.append(ts, key, value, headers)
    return b.build()


def build_produce_request(payloads: dict[TopicPartition, bytes], *, acks: int = -1,
                          timeout_ms: int = 30000, transactional_id: Optional[str] = None) -> Any:
    """A ProduceRequest carrying one records blob per partition (topics in first-seen order)."""
    cls = _request_codec(PRODUCE).cls
    topics: dict[str, Any] = {}
    for (topic, partition), records in payloads.items():
        td = topics.get(topic)
        if td is None:
            td = topics[topic] = cls.TopicProduceData(name=topic, partition_data=[])
        td.partition_data.append(cls.PartitionProduceData(index=partition, records=records))
    return cls(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
               topic_data=list(topics.values()))


class Producer:
    """Asyncio producer over a :class:`~kproto.client.cluster.Cluster`.

    ``idempotent`` (default) gets a producer id with InitProducerId and forces ``acks=-1``;
    ``compression`` is a codec name or id; records wait at most ``linger_ms`` (or until a batch
    holds ``batch_size`` bytes) before being sent; retriable errors are retried ``retries`` times.
    ``transactional_id`` makes it transactional (idempotent too): records are sent only between
    :meth:`begin_transaction` and :meth:`commit_transaction` / :meth:`abort_transaction`.
    """

    def __init__(self, cluster: Cluster, *, idempotent: bool = True, acks: int = -1,
                 compression: int | str = "none", linger_ms: float = 5.0, batch_size: int = 16384,
                 retries: int = 10, request_timeout_ms: int = 30000,
                 transactional_id: Optional[str] = None,
                 transaction_timeout_ms: int = 60000) -> None:
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=-1 (all)")
        self.cluster = cluster
        self.idempotent = idempotent
        self.acks = acks
        self.compression = codec_id(compression)
        self.linger = linger_ms / 1000.0
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.producer_id, self.producer_epoch = -1, -1
        self.accumulator = RecordAccumulator(batch_size, idempotent)
        self._flush_lock = asyncio.Lock()
        self._linger_task: Optional[asyncio.Task] = None
        #: the transaction state of a transactional producer (None otherwise)
        self.transactions = (TransactionManager(transactional_id, transaction_timeout_ms)
                             if transactional_id is not None else None)

    async def start(self) -> "Producer":
        """Get a producer id when idempotent (from the transaction coordinator when
        transactional, which also ends what an earlier producer of the id left open)."""
        if self.idempotent:
            await self.init_producer_id()
        return self

    async def init_producer_id(self) -> None:
        """InitProducerId: a new producer id and epoch; sequences restart at 0."""
        if self.transactions is not None:
            tm = self.transactions
            await self._txn_call(tm.init_producer_id_request(), tm.handle_init_producer_id)
            self.producer_id, self.producer_epoch = tm.producer_id, tm.producer_epoch
        else:
            codec = _request_codec(INIT_PRODUCER_ID)
            conn = await self.cluster.bootstrap_connection()
            resp = await conn.request(codec.cls(transactional_id=None, transaction_timeout_ms=60000))
            raise_for_error(resp.error_code, "InitProducerId")
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.accumulator.reset_sequences()

    # -- transactions ----------------------------------------------------------------------------
    def _tm(self) -> TransactionManager:
        if self.transactions is None:
            raise KprotoError("not a transactional producer (no transactional_id)")
        return self.transactions

    async def _txn_call(self, body: Any, handle: Callable[[Any], Action], *,
                        version: range | None = None, group: Optional[str] = None) -> None:
        """Send ``body`` to the transaction coordinator (or ``group``'s coordinator) until the
        manager is done with the answers; Kafka's client backs off 20-100 ms between tries."""
        delay, last = 0.02, None
        for _attempt in range(self.retries * 5 + 1):
            key, key_type = (group, 0) if group is not None else (self._tm().transactional_id, 1)
            conn = await self.cluster.coordinator(key, key_type)
            try:
                resp = await conn.request(body, conn.version(body.API_KEY, version))
            except KafkaConnectionError as e:
                action, last = Action.FIND_COORDINATOR, e
            else:
                action = handle(resp)
            if action is Action.DONE:
                return
            if action is Action.FIND_COORDINATOR:
                self.cluster.forget_coordinator(key, key_type)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        raise KprotoError(f"{type(body).__name__}: no answer to act on after {self.retries * 5 + 1} "
                          f"tries (last: {last or 'the coordinator asked to retry'})")

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._tm().begin()

    async def _add_partitions(self, batches: list[PendingBatch]) -> None:
        """AddPartitionsToTxn for the partitions the transaction does not hold yet."""
        tm = self._tm()
        while True:
            new = tm.new_partitions((b.topic, b.partition) for b in batches)
            if not new:
                return
            await self._txn_call(tm.add_partitions_request(new), tm.handle_add_partitions,
                                 version=ADD_PARTITIONS_CLIENT_VERSIONS)

    async def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], int], group_id: str, *,
                                          generation_id: int = -1, member_id: str = "",
                                          group_instance_id: Optional[str] = None) -> None:
        """Commit a consumer group's ``offsets`` (next offsets to read) with the transaction
        (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator)."""
        tm = self._tm()
        await self._txn_call(tm.add_offsets_request(group_id), tm.handle_add_offsets)
        await self._txn_call(tm.txn_offset_commit_request(
            group_id, offsets, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id), tm.handle_txn_offset_commit, group=group_id)

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit (EndTxn). Raises if the transaction failed: abort it."""
        tm = self._tm()
        tm.check_can_commit()
        await self.flush()
        body = tm.end_request(commit=True)
        if body is not None:
            await self._txn_call(body, tm.handle_end)

    async def abort_transaction(self) -> None:
        """Drop what is still queued (its futures fail) and abort (EndTxn)."""
        tm = self._tm()
        async with self._flush_lock:
            dropped = self.accumulator.drain()
        self._fail(dropped, KprotoError("the transaction was aborted before this record was sent"))
        body = tm.end_request(commit=False)
        if body is not None:
            await self._txn_call(body, tm.handle_end)

    async def send(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None, *,
                   partition: Optional[int] = None, headers: Sequence[tuple[str, Optional[bytes]]] = (),
                   timestamp_ms: Optional[int] = None) -> "asyncio.Future[RecordMetadata]":
        """Queue a record; returns a future resolved when the broker acknowledged it."""
        if self.transactions is not None:
            self.transactions.check_can_send()
        available: Sequence[int] = ()
        # like Kafka's waitOnMetadata: the topic's metadata first (a broker may create it)
        info = self.cluster.metadata.topics.get(topic)
        if info is None or not info.partitions:
            await self.cluster.wait_for_leaders([topic], allow_auto_create=True)
            info = self.cluster.metadata.topics[topic]
        n = len(info.partitions)
        sticky = partition is None and key is None  # the built-in partitioner's own choice
        if partition is None:
            if key is None:  # only the sticky choice needs the partitions that have leaders
                available = self.cluster.metadata.available_partitions(topic)
            partition = self.accumulator.partition(topic, key, n, available)
        elif not 0 <= partition < n:
            raise KprotoError(f"partition {partition} is not in the range [0...{n}) of {topic}")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        full = self.accumulator.append(topic, partition, ts, key, value, tuple(headers), fut,
                                       num_partitions=n, available=available, keyed=not sticky)
        if full:
            await self.flush()
        elif self._linger_task is None or self._linger_task.done():
            self._linger_task = asyncio.get_running_loop().create_task(self._linger_flush())
        return fut

    async def _linger_flush(self) -> None:
        await asyncio.sleep(self.linger)
        try:
            await self.flush()
        except Exception:
            pass  # reported through the records' futures

    async def flush(self) -> None:
        """Send everything queued and wait for the answers."""
        async with self._flush_lock:
            batches = self.accumulator.drain()
            while batches:
                batches = await self._send_round(batches)

    async def _send_round(self, batches: list[PendingBatch]) -> list[PendingBatch]:
        """Send batches grouped by leader; return those to retry."""
        if self.transactions is not None:
            try:  # the coordinator must hold every partition before its records are sent
                await self._add_partitions(batches)
            except KprotoError as e:
                self._fail(batches, e)
                return []
        md = self.cluster.metadata
        by_leader: dict[int, list[PendingBatch]] = {}
        retry: list[PendingBatch] = []
        for b in batches:
            leader = md.leader(b.topic, b.partition)
            if leader is None:
                b.last_error = LEADER_NOT_AVAILABLE
                retry.append(b)
            else:
                by_leader.setdefault(leader, []).append(b)
        results = await asyncio.gather(*(self._send_to(node, bs) for node, bs in by_leader.items()),
                                       return_exceptions=True)
        for (node, bs), res in zip(by_leader.items(), results):
            if isinstance(res, KafkaConnectionError):
                for b in bs:
                    b.last_error = NETWORK_EXCEPTION
                retry.extend(bs)
            elif isinstance(res, BaseException):
                self._fail(bs, res)
            else:
                retry.extend(res)
        if retry:
            still = []
            for b in retry:
                b.attempts += 1
                if b.attempts > self.retries:
                    self._fail([b], BrokerError(b.last_error, f"produce to {b.topic}-{b.partition}",
                                                f"gave up after {b.attempts} attempts"))
                else:
                    still.append(b)
            retry = still
            if retry:
                await asyncio.sleep(0.1)
                await self.cluster.refresh_metadata(sorted({b.topic for b in retry}))
        return retry

    async def _send_to(self, node: int, batches: list[PendingBatch]) -> list[PendingBatch]:
        tm = self.transactions
        conn = await self.cluster.connection(node)
        payloads = {(b.topic, b.partition): encode_batch(b, self.compression, self.producer_id,
                                                         self.producer_epoch, tm is not None)
                    for b in batches}
        req = build_produce_request(payloads, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                    transactional_id=tm.transactional_id if tm else None)
        if self.acks == 0:
            conn.send(req, expect_response=False)
            for b in batches:
                self._resolve(b, -1)
            return []
        resp = await conn.request(req)
        answers = {(t.name, p.index): p for t in resp.responses for p in t.partition_responses}
        retry = []
        for b in batches:
            p = answers.get((b.topic, b.partition))
            if p is None:
                self._fail([b], KprotoError(f"the Produce response has no answer for {b.topic}-{b.partition}"))
            elif p.error_code == 0 or p.error_code == DUPLICATE_SEQUENCE_NUMBER:
                # A duplicate means an earlier attempt of this very batch was written.
                self.accumulator.complete(b)
                self._resolve(b, p.base_offset)
            elif p.error_code in RETRIABLE_PRODUCE_ERRORS:
                b.last_error = p.error_code
                retry.append(b)
            else:
                self._fail([b], BrokerError(p.error_code, f"produce to {b.topic}-{b.partition}",
                                            p.error_message))
        return retry

    @staticmethod
    def _resolve(batch: PendingBatch, base_offset: int) -> None:
        for i, (fut, rec) in enumerate(zip(batch.futures, batch.records)):
            if not fut.done():
                off = base_offset + i if base_offset >= 0 else -1
                fut.set_result(RecordMetadata(batch.topic, batch.partition, off, rec[0]))

    def _fail(self, batches: list[PendingBatch], exc: BaseException) -> None:
        if self.transactions is not None and batches and isinstance(exc, KprotoError):
            self.transactions.fail(exc)
        for b in batches:
            for fut in b.futures:
                if not fut.done():
                    fut.set_exception(exc)

    async def close(self) -> None:
        """Flush and stop (the cluster stays open)."""
        await self.flush()
        if self._linger_task is not None:
            self._linger_task.cancel()

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
