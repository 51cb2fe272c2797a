"""A minimal idempotent producer: partitioning, batching, compression, sequences, retries.

The bookkeeping is sans-I/O, in :mod:`kproto.client.accumulator` (``RecordAccumulator`` batches
records per partition and numbers them; ``build_produce_request`` lays out the request);
:class:`Producer` is the asyncio layer that sends batches to partition leaders::

    async with Cluster("127.0.0.1:9092") as cluster:
        producer = await Producer(cluster, compression="zstd").start()
        fut = await producer.send("events", b"value", key=b"k")   # -> future of RecordMetadata
        await producer.flush()
        print(fut.result())                                        # partition, offset

Like Kafka's idempotent producer, each partition's batches carry the producer id, epoch and
consecutive base sequences, and a batch is retried with the same sequence after a retriable
error, so the broker drops duplicates. A sender task keeps up to ``max_in_flight`` (5) Produce
requests in flight per broker, each with at most one batch per partition; when a batch fails,
the later batches of its partition (answered OUT_OF_ORDER_SEQUENCE_NUMBER) are sent again after
it, in order, and renumbered when one failed for good, as Kafka's sender does.

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
import logging
import time
from typing import Any, Callable, Optional, Sequence

from kproto.client.accumulator import (PendingBatch, RecordAccumulator, RecordMetadata,
                                      build_produce_request, encode_batch)
from kproto.client.cluster import METADATA_REFRESH_ERRORS, Cluster
from kproto.client.protocol import (BrokerError, KafkaConnectionError, UnsupportedVersionError,
                                    raise_for_error)
from kproto.client.transactions import (ADD_PARTITIONS_CLIENT_VERSIONS, END_TXN_V1_VERSIONS,
                                       PRODUCE_TXN_V1_VERSIONS, TRANSACTION_VERSION_FEATURE,
                                       TXN_OFFSET_COMMIT_BY_ID_VERSIONS, TXN_OFFSET_COMMIT_V1_VERSIONS,
                                       TXN_OFFSET_COMMIT_V2_VERSIONS, Action, TransactionManager)
from kproto.accelerators import load
from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.records.compression import codec_id
from kproto.errors import EncodeError, KprotoError
from kproto.topic_partition import TopicPartitionKey
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode, is_retriable

__all__ = ["Producer", "RecordMetadata"]

# optional C accelerator (kproto.accelerators): resolve sets an acknowledged batch's futures
# with what _resolve's Python loop sets them, the results untracked by the garbage collector
_speedups = load("kproto.records._speedups")

#: Produce v13 names topics by id (KIP-516); below it, by name
_PRODUCE_TOPIC_IDS = 13


_log = logging.getLogger("kproto.client")


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
                 transactional_id: Optional[str] = None, transaction_timeout_ms: int = 60000,
                 max_in_flight: int = 5, buffer_memory: int = 32 << 20) -> None:
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=-1 (all)")
        if idempotent and not 1 <= max_in_flight <= 5:
            raise ValueError("an idempotent producer keeps 1 to 5 requests in flight (the broker "
                             "remembers the last 5 batches of a producer)")
        self.cluster = cluster
        self.idempotent = idempotent
        self.acks = acks
        self.compression = codec_id(compression)
        self.linger = linger_ms / 1000.0
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.producer_id, self.producer_epoch = -1, -1
        self.max_in_flight = max_in_flight
        self.buffer_memory = buffer_memory
        self.accumulator = RecordAccumulator(batch_size, idempotent)
        # sender state: batches sent and not answered, batches waiting to be sent again (both
        # per partition, in drain order), requests in flight per broker
        self._inflight: dict[TopicPartitionKey, list[PendingBatch]] = {}
        self._retry: dict[TopicPartitionKey, list[PendingBatch]] = {}
        self._retry_at: dict[TopicPartitionKey, float] = {}
        self._requests: dict[int, int] = {}
        self._refresh: set[str] = set()          # topics whose leaders must be looked up again
        self._refresh_after = 0.0
        self._flushing = 0
        self._linger_deadline: Optional[float] = None
        self._wakeup = asyncio.Event()
        self._changed: Optional[asyncio.Future] = None
        self._sender_task: Optional[asyncio.Task] = None
        self._answers: set[asyncio.Task] = set()
        self._txn_lock = asyncio.Lock()
        #: partition -> drain number of a batch that failed for good (later ones were not written)
        self._failed_before: dict[TopicPartitionKey, int] = {}
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
            # as the Java 4.x client: transaction version 2 where the coordinator's broker
            # finalizes transaction.version >= 2 (and speaks EndTxn v5)
            conn = await self.cluster.coordinator(tm.transactional_id, 1)
            tm.tv2 = conn.versions.finalized.get(TRANSACTION_VERSION_FEATURE, 0) >= 2 and \
                5 in conn.versions.supported(ApiKey.END_TXN)
        else:
            # Kafka's client retries a retriable answer after its backoff (any broker will do):
            # a broker creating __transaction_state answers COORDINATOR_LOAD_IN_PROGRESS at first
            codec = _request_codec(ApiKey.INIT_PRODUCER_ID)
            deadline = time.monotonic() + self.request_timeout_ms / 1000.0
            while True:
                conn = await self.cluster.bootstrap_connection()
                resp = await conn.request(codec.cls(transactional_id=None, transaction_timeout_ms=60000))
                if not is_retriable(resp.error_code) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
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
        async with self._txn_lock:  # one coordinator request at a time, as Kafka's sender
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
        """AddPartitionsToTxn for the partitions the transaction does not hold yet (with
        transaction version 2 their Produce adds them)."""
        tm = self._tm()
        while True:
            new = tm.new_partitions((b.topic, b.partition) for b in batches)
            if not new:
                return
            if tm.tv2:
                tm.added_by_produce(new)
                return
            await self._txn_call(tm.add_partitions_request(new), tm.handle_add_partitions,
                                 version=ADD_PARTITIONS_CLIENT_VERSIONS)

    async def send_offsets_to_transaction(self, offsets: dict[tuple[str, int], int], group_id: str, *,
                                          generation_id: int = -1, member_id: str = "",
                                          group_instance_id: Optional[str] = None) -> None:
        """Commit a consumer group's ``offsets`` (next offsets to read) with the transaction
        (AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator; with transaction
        version 2 TxnOffsetCommit v5 alone)."""
        tm = self._tm()
        if not tm.tv2:
            await self._txn_call(tm.add_offsets_request(group_id), tm.handle_add_offsets)
        # v6 (topics by id) where every topic's id is known, as Kafka 4.4's producer
        ids = {t: self.cluster.metadata.topic_id(t) for t, _ in offsets} if tm.tv2 else {}
        by_id = bool(ids) and all(i != Uuid.ZERO for i in ids.values())
        await self._txn_call(tm.txn_offset_commit_request(
            group_id, offsets, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, topic_ids=ids if by_id else None),
            tm.handle_txn_offset_commit, group=group_id,
            version=(TXN_OFFSET_COMMIT_BY_ID_VERSIONS if by_id else TXN_OFFSET_COMMIT_V2_VERSIONS)
            if tm.tv2 else TXN_OFFSET_COMMIT_V1_VERSIONS)

    async def _end_transaction(self, body: Any) -> None:
        """EndTxn; transaction version 2 moves the producer to the epoch (or id) it answers,
        its sequences from 0."""
        tm = self._tm()
        await self._txn_call(body, tm.handle_end, version=None if tm.tv2 else END_TXN_V1_VERSIONS)
        if (tm.producer_id, tm.producer_epoch) != (self.producer_id, self.producer_epoch):
            self.producer_id, self.producer_epoch = tm.producer_id, tm.producer_epoch
            self.accumulator.reset_sequences()

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit (EndTxn). Raises if the transaction failed: abort it."""
        tm = self._tm()
        tm.check_can_commit()
        await self.flush()
        body = tm.end_request(commit=True)
        if body is not None:
            await self._end_transaction(body)

    async def abort_transaction(self) -> None:
        """Drop what is still queued (its futures fail), wait for what is in flight, and abort
        (EndTxn)."""
        tm = self._tm()
        dropped = self.accumulator.take_all() + [b for bs in self._retry.values() for b in bs]
        self._retry.clear()
        self._fail(dropped, KprotoError("the transaction was aborted before this record was sent"))
        await self._wait(lambda: not any(self._inflight.values()))
        body = tm.end_request(commit=False)
        if body is not None:
            await self._end_transaction(body)

    async def send(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None, *,
                   partition: Optional[int] = None, headers: Sequence[tuple[str, Optional[bytes]]] = (),
                   timestamp_ms: Optional[int] = None) -> "asyncio.Future[RecordMetadata]":
        """Queue a record; returns a future resolved when the broker acknowledged it. Waits
        while more than ``buffer_memory`` bytes are queued; yields to the event loop once when
        the record fills its batch, so that the sender writes the batch while the caller goes on."""
        if self.transactions is not None:
            self.transactions.check_can_send()
        hdrs: tuple = ()
        if headers:
            hdrs = tuple(headers)
            if any(k is None for k, _ in hdrs):
                raise EncodeError("header keys cannot be null")
        acc = self.accumulator
        if acc.queued_bytes >= self.buffer_memory:
            await self._wait(lambda: self.accumulator.queued_bytes < self.buffer_memory)
        # like Kafka's waitOnMetadata: the topic's metadata first (a broker may create it)
        info = self.cluster.metadata.topics.get(topic)
        if info is None or not info.partitions:
            await self.cluster.wait_for_leaders([topic], allow_auto_create=True)
            info = self.cluster.metadata.topics[topic]
        n = len(info.partitions)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = asyncio.Future(loop=loop)  # loop.create_future() without its frame
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        if partition is None and key is None:  # the built-in partitioner's own (sticky) choice
            available = self.cluster.metadata.available_partitions(topic)
            partition = acc.partition(topic, None, n, available)
            full = acc.append(topic, partition, ts, key, value, hdrs, fut,
                              num_partitions=n, available=available, keyed=False)
        else:
            if partition is None:
                partition = acc.partition(topic, key, n, ())
            elif not 0 <= partition < n:
                raise KprotoError(f"partition {partition} is not in the range [0...{n}) of {topic}")
            full = acc.append(topic, partition, ts, key, value, hdrs, fut)
        if self._linger_deadline is None:  # the sender sleeps until then (or a full batch)
            self._linger_deadline = loop.time() + self.linger
            self._wake()
        elif full:
            self._wake()
            # let the sender write the full batch now, while the caller goes on appending, as
            # Kafka's sender thread does (a caller that never waits would queue everything first)
            await asyncio.sleep(0)
        return fut

    async def flush(self) -> None:
        """Send everything queued and wait for the answers."""
        self._flushing += 1
        self._wake()
        try:
            await self._wait(lambda: not self.accumulator and not self._retry
                             and not any(self._inflight.values()))
        finally:
            self._flushing -= 1

    # -- the sender: a task that drains the accumulator into Produce requests -----------------
    def _wake(self) -> None:
        self._wakeup.set()
        if self._sender_task is None or self._sender_task.done():
            self._sender_task = asyncio.get_running_loop().create_task(self._sender())

    def _notify(self) -> None:
        """Wake whoever waits in :meth:`_wait` (and the sender)."""
        self._wakeup.set()
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    async def _wait(self, done: Callable[[], bool]) -> None:
        while not done():
            if self._changed is None:
                self._changed = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._changed)

    async def _sender(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wakeup.clear()
            now = loop.time()
            try:
                if self._refresh and now >= self._refresh_after:
                    self._refresh_after = now + 0.1  # Kafka's retry.backoff.ms
                    topics, self._refresh = sorted(self._refresh), set()
                    try:
                        await self.cluster.refresh_metadata(topics)
                    except KafkaConnectionError:
                        self._refresh.update(topics)
                        await asyncio.sleep(0.1)
                        continue
                now = loop.time()
                lingered = self._linger_deadline is not None and now >= self._linger_deadline
                by_node = self._ready(now, everything=lingered or self._flushing > 0)
                if not self.accumulator:
                    self._linger_deadline = None
                if by_node:
                    await self._dispatch(by_node)
                    self._notify()
                    continue
            except Exception as e:  # never leave flush() waiting on a dead sender
                _log.exception("producer sender failed")
                self._fail(self.accumulator.take_all() + [b for bs in self._retry.values() for b in bs],
                           e if isinstance(e, KprotoError) else KprotoError(f"producer sender failed: {e!r}"))
                self._retry.clear()
                self._notify()
            waits = [t for t in self._retry_at.values() if t > now]
            if self._refresh:
                waits.append(max(self._refresh_after, now + 0.001))
            if self._linger_deadline is not None and self._linger_deadline > now:
                waits.append(self._linger_deadline)
            try:
                await asyncio.wait_for(self._wakeup.wait(), min(waits) - now if waits else None)
            except asyncio.TimeoutError:
                pass

    def _ready(self, now: float, everything: bool) -> dict[int, list[PendingBatch]]:
        """One request's worth per broker with room: at most one batch per partition, failed
        batches (once nothing of their partition is in flight) before new ones, new ones only
        when full unless ``everything``."""
        md = self.cluster.metadata
        by_node: dict[int, list[PendingBatch]] = {}
        chosen: set[TopicPartitionKey] = set()

        def room(tp: TopicPartitionKey, leader: Optional[int]) -> bool:
            if leader is None:
                self._refresh.add(tp[0])
                return False
            return self._requests.get(leader, 0) + (leader in by_node) < self.max_in_flight

        for tp in list(self._retry):
            batches = self._retry[tp]
            leader = md.leader(*tp)
            if self._inflight.get(tp) or self._retry_at.get(tp, 0) > now or not room(tp, leader):
                continue
            if self.idempotent:  # every unacknowledged batch of tp is here: number them again
                self.accumulator.renumber(batches)
                self._failed_before.pop(tp, None)
            by_node.setdefault(leader, []).append(batches.pop(0))  # type: ignore[arg-type]
            chosen.add(tp)
            if not batches:
                del self._retry[tp]

        def limit(tp: TopicPartitionKey) -> int:  # one batch per partition and request
            if tp in self._retry or tp in chosen or len(self._inflight.get(tp, ())) >= self.max_in_flight:
                return 0
            return int(room(tp, md.leader(*tp)))

        for b in self.accumulator.drain(limit, full_only=not everything):
            by_node.setdefault(md.leader(b.topic, b.partition), []).append(b)  # type: ignore[arg-type]
        return by_node

    async def _dispatch(self, by_node: dict[int, list[PendingBatch]]) -> None:
        batches = [b for bs in by_node.values() for b in bs]
        for b in batches:  # in flight from here: flush() and commit wait for them
            self._inflight.setdefault((b.topic, b.partition), []).append(b)
        if self.transactions is not None:
            try:  # the coordinator must hold every partition before its records are sent
                await self._add_partitions(batches)
            except KprotoError as e:
                for b in batches:
                    self._inflight[(b.topic, b.partition)].remove(b)
                self._fail(batches, e)
                return
        tm = self.transactions
        for node, bs in by_node.items():
            try:
                conn = await self.cluster.connection(node)
            except KafkaConnectionError as e:
                self._settle_all(bs, ErrorCode.NETWORK_EXCEPTION, str(e))
                continue
            payloads = {}
            for b in list(bs):
                try:
                    payloads[(b.topic, b.partition)] = encode_batch(
                        b, self.compression, self.producer_id, self.producer_epoch, tm is not None)
                except Exception as e:  # a record the codec cannot take: that batch fails alone
                    bs.remove(b)
                    self._settle(b, ErrorCode.UNKNOWN_SERVER_ERROR, -1, f"cannot encode the batch: {e}")
            if not bs:
                continue
            try:
                version, ids = self._produce_version(conn, bs)
            except UnsupportedVersionError as e:  # nothing to send this broker: fail, not retry
                for b in bs:
                    self._settle(b, ErrorCode.UNKNOWN_SERVER_ERROR, -1, str(e), e)
                continue
            req = build_produce_request(payloads, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                        transactional_id=tm.transactional_id if tm else None,
                                        topic_ids=ids if version >= _PRODUCE_TOPIC_IDS else None)
            try:  # sent here, in the sender, so that requests leave in drain order
                fut = conn.send(req, version, expect_response=self.acks != 0)
            except KafkaConnectionError as e:
                self._settle_all(bs, ErrorCode.NETWORK_EXCEPTION, str(e))
                continue
            if self.acks == 0:
                for b in bs:
                    self._settle(b, ErrorCode.NONE, -1, None)
                continue
            self._requests[node] = self._requests.get(node, 0) + 1
            names = {tid: t for t, tid in ids.items()} if version >= _PRODUCE_TOPIC_IDS else None
            task = asyncio.get_running_loop().create_task(self._answer(node, conn, fut, bs, names))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)

    def _produce_version(self, conn: Any, batches: list[PendingBatch]) -> tuple[int, dict[str, Uuid]]:
        """The Produce version for a request of ``batches`` to ``conn``, and their topics' ids.
        As Kafka's Sender: v13 (topics by id) only when every topic has an id from Metadata,
        else 12 at most; a transactional producer of transaction version 1 11 at most (and one
        of version 2 12 at least: its partitions are added by the Produce)."""
        md = self.cluster.metadata
        ids = {b.topic: md.topic_id(b.topic) for b in batches}
        no_ids = any(tid == Uuid.ZERO for tid in ids.values())
        if self.transactions is not None and not self.transactions.tv2:
            wanted: range | None = PRODUCE_TXN_V1_VERSIONS
        elif self.transactions is not None:
            wanted = range(12, _PRODUCE_TOPIC_IDS) if no_ids else range(12, _PRODUCE_TOPIC_IDS + 1)
        elif no_ids:
            wanted = range(0, _PRODUCE_TOPIC_IDS)
        else:
            wanted = None
        return conn.version(ApiKey.PRODUCE, wanted), ids

    async def _answer(self, node: int, conn: Any, fut: "asyncio.Future[Any]", batches: list[PendingBatch],
                      names: Optional[dict[Uuid, str]] = None) -> None:
        """Settle ``batches`` with the answer behind ``fut``; ``names`` (topic id -> name) reads
        a v13 answer, whose topics are named by id."""
        try:
            resp = await conn.response(fut, "ProduceRequest")
        except KafkaConnectionError as e:
            self._settle_all(batches, ErrorCode.NETWORK_EXCEPTION, str(e))
        except Exception as e:  # an answer that cannot be read: the batches fail, flush() returns
            # (settled as UNKNOWN_SERVER_ERROR, like a batch without answer or one that cannot
            # be encoded: each fails with its message, as a KprotoError)
            self._settle_all(batches, ErrorCode.UNKNOWN_SERVER_ERROR,
                             f"the Produce response could not be read: {e}")
        else:
            if names is None:
                answers = {(t.name, p.index): p for t in resp.responses for p in t.partition_responses}
            else:  # an id the request did not carry answers nothing: "no answer" below
                answers = {(names.get(t.topic_id), p.index): p for t in resp.responses
                           for p in t.partition_responses}
            for b in batches:
                p = answers.get((b.topic, b.partition))
                if p is None:
                    self._settle(b, ErrorCode.UNKNOWN_SERVER_ERROR, -1,
                                 f"the Produce response has no answer for {b.topic}-{b.partition}")
                else:
                    self._settle(b, p.error_code, p.base_offset, p.error_message)
        finally:
            self._requests[node] -= 1
            self._notify()

    def _settle_all(self, batches: list[PendingBatch], code: int, message: str) -> None:
        for b in batches:
            self._settle(b, code, -1, message)

    def _settle(self, b: PendingBatch, code: int, base_offset: int, message: Optional[str],
                exc: Optional[KprotoError] = None) -> None:
        """Act on a batch's answer: done, send again later, or failed (with ``exc`` when the
        producer itself failed it)."""
        tp = (b.topic, b.partition)
        inflight = self._inflight.get(tp, [])
        if b in inflight:
            inflight.remove(b)
        if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            # A duplicate means an earlier attempt of this very batch was written (Kafka's
            # Sender counts it as written too, although the code is not a retriable one).
            self.accumulator.complete(b)
            self._resolve(b, base_offset)
            return
        # A batch goes again unchanged (same sequence) after an error Kafka's clients retry (the
        # error table's flag: Kafka's Sender asks the same of the exception), and, as Kafka's
        # TransactionManager.canRetry does, after OUT_OF_ORDER_SEQUENCE_NUMBER (not retriable)
        # when an earlier batch of the partition was not written (failed or being retried).
        retriable = is_retriable(code) or (
            code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._gap(tp, b))
        b.attempts += 1
        if code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER or not b.last_error:
            b.last_error = code
        if code == ErrorCode.UNKNOWN_SERVER_ERROR:  # also the producer's own failures, see _answer
            self._fail([b], exc or KprotoError(message or "no answer"))
        elif not retriable:
            self._fail([b], BrokerError(code, f"produce to {b.topic}-{b.partition}", message))
        elif b.attempts > self.retries:
            self._fail([b], BrokerError(b.last_error, f"produce to {b.topic}-{b.partition}",
                                        f"gave up after {b.attempts} attempts"))
        else:
            queue = self._retry.setdefault(tp, [])
            queue.append(b)
            queue.sort(key=lambda x: x.number)
            self._retry_at[tp] = asyncio.get_running_loop().time() + 0.1
            if code in METADATA_REFRESH_ERRORS or code == ErrorCode.NETWORK_EXCEPTION:
                self._refresh.add(b.topic)
            return
        if not self.idempotent:
            return
        if inflight or self._retry.get(tp):
            # the later batches of tp in flight come back OUT_OF_ORDER_SEQUENCE_NUMBER and
            # are numbered again without this one
            self._failed_before.setdefault(tp, b.number)
        else:  # nothing after it left yet: the next batch takes its sequence
            self.accumulator.next_sequence[tp] = self.accumulator.acked_sequence.get(tp, 0)

    def _gap(self, tp: TopicPartitionKey, b: PendingBatch) -> bool:
        """Whether an earlier batch of ``tp`` than ``b`` failed or waits to be sent again."""
        if any(r.number < b.number for r in self._retry.get(tp, ())):
            return True
        failed = self._failed_before.get(tp)
        return failed is not None and failed < b.number

    @staticmethod
    def _resolve(batch: PendingBatch, base_offset: int) -> None:
        if _speedups is not None and base_offset < 1 << 62:
            _speedups.resolve(batch.futures, RecordMetadata, batch.topic, batch.partition,
                              base_offset, batch.records)
            return
        topic, partition, records = batch.topic, batch.partition, batch.records
        make = tuple.__new__  # RecordMetadata(...) without its Python-level __new__
        for i, fut in enumerate(batch.futures):
            if not fut.done():
                off = base_offset + i if base_offset >= 0 else -1
                fut.set_result(make(RecordMetadata, (topic, partition, off, records[i][0])))

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
        if self._sender_task is not None:
            self._sender_task.cancel()
            try:
                await self._sender_task
            except asyncio.CancelledError:
                pass
            self._sender_task = None

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
