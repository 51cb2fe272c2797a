"""The transaction coordinator (Kafka's ``TransactionCoordinator`` and ``TransactionMetadata``,
transaction versions 1 and 2), sans-I/O.

A transactional id maps to a producer id and epoch (InitProducerId bumps the epoch and so
fences older producers; an open transaction found there is aborted first). AddPartitionsToTxn
and AddOffsetsToTxn move it to Ongoing and start its timeout on the broker's timer; EndTxn
goes through PrepareCommit/PrepareAbort, writes a COMMIT or ABORT control batch to every
partition of the transaction (which moves their last stable offset; an ABORT also lands in the
aborted-transaction index) and completes. A transaction that outlives its timeout is aborted
with a bumped epoch (the producer is fenced), as Kafka's ``abortTimedOutTransactions`` does.

Transaction version 2 (KIP-890 part 2, the broker's finalized ``transaction.version`` >= 2): a
partition joins the transaction when its leader sees the producer's first batch (Produce v12)
and the group's offsets partition with TxnOffsetCommit v5+ (both through :meth:`verify_or_add`),
and EndTxn v5 bumps the producer epoch at every transaction end: the markers carry the bumped
epoch and the answer hands it to the producer (a new producer id once the epoch is exhausted).
Under either version a partition leader verifies a transactional write with the coordinator
(KIP-890 part 1) before appending it.

Every transition is written to ``__transaction_state`` (TransactionLogKey/Value v0, or v1 with
its tagged fields when transaction version 2 is finalized, as Kafka 4.x) and read back at
start; a transaction caught in PrepareCommit/PrepareAbort by a restart is completed then.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from kproto.broker.context import BrokerContext
from kproto.broker.log import BrokerError
from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for
from kproto.broker.timer import CallbackTask
from kproto.codecs import message
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode as E
from kproto.errors import DecodeError
from kproto.records.builder import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey

class TxnOffsets(Protocol):
    """What the transaction coordinator needs of the group coordinator (which imports this
    module: it verifies its transactional writes with it)."""

    @property
    def num_partitions(self) -> int: ...

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None: ...

    def ensure_topic(self) -> None: ...


__all__ = ["TransactionCoordinator", "TxnMetadata", "TXN_TOPIC", "append_txn_marker", "leader_verification_error"]

TXN_TOPIC = "__transaction_state"
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
               "Dead", "PrepareEpochFence"]
_I16 = struct.Struct(">h")
_SHORT_MAX = 32767
#: what a coordinator answers when its TransactionLog append failed (Kafka's
#: ``TransactionStateManager.appendTransactionToLog``)
_APPEND_ERRORS: dict[int, int] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR}
Respond = Callable[[Any], None]
TopicPartition = tuple[str, int]


def leader_verification_error(code: int, generic_errors: bool) -> int:
    """What a partition leader (or group coordinator) makes of the coordinator's answer to its
    verification, as Kafka's ``AddPartitionsToTxnManager``: a fenced producer is told
    INVALID_PRODUCER_EPOCH, and TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for requests
    too old to know it (``generic_errors`` False: Produce before v11, TxnOffsetCommit before v4)."""
    if code == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if code == E.TRANSACTION_ABORTABLE and not generic_errors:
        return E.INVALID_TXN_STATE
    return code


def append_txn_marker(log: Any, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, now_ms: int) -> int:
    """Write a transaction's COMMIT or ABORT control batch to a partition's log (its leader's
    part of Kafka's WriteTxnMarkers); the marker's offset. A marker from a coordinator older
    than the partition's last one for the producer raises BrokerError
    (TRANSACTION_COORDINATOR_FENCED), as does one of an older producer epoch."""
    log.check_txn_marker(producer_id, producer_epoch, coordinator_epoch)
    b = RecordBatchBuilder(base_offset=log.log_end_offset, producer_id=producer_id,
                           producer_epoch=producer_epoch, transactional=True, control=True)
    b.append_end_txn_marker(commit, coordinator_epoch, now_ms)
    return int(log.append_internal(b.build()).base_offset)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    timeout_task: Optional[CallbackTask] = None
    client_tv: int = 0              # the transaction version the producer last used (0/1: TV1, 2: TV2)
    last_producer_epoch: int = -1   # the epoch before the last TV2 bump (an EndTxn retry's)
    prev_producer_id: int = -1      # the producer id before the last rotation (exhausted epoch)
    next_producer_id: int = -1      # the id a prepared TV2 end rotates to (-1: none)
    #: the log and offset of its latest TransactionLog record (None: none written here)
    written: Optional[tuple[Any, int]] = None


class TransactionCoordinator:
    """Transactional ids of one broker (it leads every ``__transaction_state`` partition)."""

    def __init__(self, core: BrokerContext, groups: TxnOffsets) -> None:
        self.core = core
        self.groups = groups  # transactional offset commits complete with the markers
        self.config = core.config
        self.txns: dict[str, TxnMetadata] = {}
        # the leader epoch of each __transaction_state partition when it was loaded here
        # (Kafka's coordinator epoch: markers carry it, partitions fence older coordinators)
        self.coordinator_epochs: dict[int, int] = {}
        if TXN_TOPIC in core.logs.topics:
            self._load()

    @property
    def tv2(self) -> bool:
        """Whether transaction.version 2 is finalized: KIP-890 part 2 (EndTxn v5's epoch bump,
        implicit partition adds), the broker then advertising the TV2 request versions."""
        return self.core.transaction_version() >= 2

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of a transactional id."""
        n = self.core.known_topics().get(TXN_TOPIC, (None, self.config.transaction_state_num_partitions))[1]
        return partition_for(transactional_id, n)

    # -------------------------------------------------------------- plumbing
    def ensure_topic(self) -> None:
        if TXN_TOPIC not in self.core.logs.topics:
            self.core.logs.create_topic(TXN_TOPIC, self.config.transaction_state_num_partitions,
                                        {"cleanup.policy": "compact", "compression.type": "uncompressed",
                                         "segment.bytes": "104857600", "min.insync.replicas": "1"})

    def _write(self, txn: TxnMetadata) -> tuple[Any, int]:
        """One TransactionLog record for the txn's current state; its log and offset."""
        self.ensure_topic()
        topic = self.core.logs.topics[TXN_TOPIC]
        lg = topic.partitions[partition_for(txn.transactional_id, len(topic.partitions))]
        assert lg is not None, "only the coordinator (the partition's leader) writes"
        key = _I16.pack(0) + message("TransactionLogKey").encode(
            message("TransactionLogKey").cls(transactional_id=txn.transactional_id), 0)
        vcls = message("TransactionLogValue").cls
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(txn.partitions):
            by_topic.setdefault(t, []).append(p)
        ver = 1 if self.core.transaction_version() >= 1 else 0  # Kafka writes v1 from transaction.version 1
        value = vcls(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                     previous_producer_id=txn.prev_producer_id, next_producer_id=txn.next_producer_id,
                     client_transaction_version=txn.client_tv,
                     transaction_timeout_ms=txn.timeout_ms, transaction_status=txn.state,
                     transaction_partitions=None if txn.state == EMPTY else [
                         vcls.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
                     transaction_last_update_timestamp_ms=txn.update_ms,
                     transaction_start_timestamp_ms=txn.start_ms)
        data = _I16.pack(ver) + message("TransactionLogValue").encode(value, ver)
        b = RecordBatchBuilder(base_offset=lg.log_end_offset)
        b.append(self.core.wall_ms(), key, data)
        offset = lg.append_internal(b.build()).base_offset
        self.core.appended_internal(lg)
        txn.written = (lg, offset)
        return lg, offset

    def _when_durable(self, txn: Optional[TxnMetadata], then: Callable[[int], None]) -> None:
        """``then(code)`` once the transaction's latest record is committed (Kafka answers
        InitProducerId, AddPartitionsToTxn and AddOffsetsToTxn after appending with acks=all:
        what it answered survives the coordinator's failover); an append that failed answers
        as Kafka's ``appendTransactionToLog`` maps it."""
        if txn is None or txn.written is None:
            then(E.NONE)
            return
        lg, offset = txn.written
        self.core.when_replicated(lg, offset, lambda code: then(_APPEND_ERRORS.get(code, code)),
                                  self.config.offsets_commit_timeout_ms)

    def _codes_when_durable(self, tid: str, codes: dict[TopicPartition, int],
                            then: Callable[[dict[TopicPartition, int]], None]) -> None:
        """:meth:`_when_durable` for per-partition codes: those that say yes wait."""
        if all(codes.values()):
            then(codes)
            return
        self._when_durable(self.txns.get(tid), lambda err: then(
            {tp: code or err for tp, code in codes.items()}))

    def _transit(self, txn: TxnMetadata, state: int) -> tuple[Any, int]:
        txn.state = state
        txn.update_ms = self.core.wall_ms()
        return self._write(txn)

    # -------------------------------------------------------------- load
    def load_partitions(self, partitions: set[int]) -> None:
        """This broker became the coordinator of these ``__transaction_state`` partitions."""
        if partitions and TXN_TOPIC in self.core.logs.topics:
            self._load(partitions)

    def unload_partitions(self, partitions: set[int]) -> None:
        """Another broker coordinates these partitions now: their transactional ids go."""
        for tid in [t for t in self.txns if self.partition_of(t) in partitions]:
            txn = self.txns.pop(tid)
            if txn.timeout_task is not None:
                txn.timeout_task.cancel()

    def _load(self, partitions: Optional[set[int]] = None) -> None:
        before = set(self.txns)
        for lg in self.core.logs.topics[TXN_TOPIC].logs:
            if not self.core.leads(lg.topic, lg.partition) or \
                    (partitions is not None and lg.partition not in partitions):
                continue
            self.coordinator_epochs[lg.partition] = max(0, lg.leader_epoch)
            for batch in lg.batches():
                for r in batch.records():
                    try:
                        self._load_record(r.key, r.value)
                    except (DecodeError, struct.error):
                        continue
        now = self.core.wall_ms()
        for tid in set(self.txns) - before:
            txn = self.txns[tid]
            self.core.reserve_producer_id(txn.producer_id)
            if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                self._complete(txn, txn.state == PREPARE_COMMIT)
            elif txn.state == ONGOING:
                self._arm_timeout(txn, max(0, txn.start_ms + txn.timeout_ms - now))

    def _load_record(self, key: Optional[bytes], value: Optional[bytes]) -> None:
        if key is None:
            return
        k = message("TransactionLogKey").decode(memoryview(key)[2:], 0)
        if value is None:
            self.txns.pop(k.transactional_id, None)
            return
        ver = _I16.unpack_from(value, 0)[0]
        v = message("TransactionLogValue").decode(memoryview(value)[2:], ver)
        txn = TxnMetadata(
            k.transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms,
            v.transaction_status, {(t.topic, p) for t in v.transaction_partitions or () for p in t.partition_ids},
            v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)
        if ver >= 1:
            txn.client_tv, txn.prev_producer_id = v.client_transaction_version, v.previous_producer_id
            txn.next_producer_id = v.next_producer_id
        self.txns[k.transactional_id] = txn

    # -------------------------------------------------------------- markers and timeouts
    def _complete(self, txn: TxnMetadata, commit: bool) -> None:
        """Have the markers of a prepared transaction written to its partitions (at once on a
        single broker; through WriteTxnMarkers to their leaders in a cluster), then move it
        to Complete*. Until then it answers CONCURRENT_TRANSACTIONS. The markers carry the
        prepared epoch (TV2: the bumped one); a TV2 end that exhausted the epoch moves to its
        next producer id, at epoch 0, on completion."""
        prepared = (txn.producer_id, txn.producer_epoch, txn.state)

        def done() -> None:
            if self.txns.get(txn.transactional_id) is not txn or \
                    (txn.producer_id, txn.producer_epoch, txn.state) != prepared:
                return  # unloaded, or moved on meanwhile
            txn.partitions = set()
            if txn.next_producer_id >= 0:
                txn.prev_producer_id, txn.producer_id = txn.producer_id, txn.next_producer_id
                txn.producer_epoch, txn.next_producer_id = 0, -1
            self._transit(txn, COMPLETE_COMMIT if commit else COMPLETE_ABORT)

        self.core.write_txn_markers(txn.producer_id, txn.producer_epoch,
                                    self.coordinator_epochs.get(self.partition_of(txn.transactional_id), 0),
                                    commit, set(txn.partitions), done)

    def complete_markers_locally(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                 commit: bool, partitions: set[tuple[str, int]]) -> None:
        """Write the markers to partitions whose logs are here (a single broker's; a
        cluster broker's for the partitions it leads)."""
        now = self.core.wall_ms()
        for topic, p in sorted(partitions):
            lg = self.core.logs.get(topic, p)
            if lg is None:
                continue  # the topic went away meanwhile
            try:
                append_txn_marker(lg, producer_id, producer_epoch, coordinator_epoch, commit, now)
            except BrokerError:
                continue  # a newer coordinator (or producer epoch) wrote there: not ours to mark
            if topic == OFFSETS_TOPIC:
                self.groups.complete_txn(p, producer_id, commit)
            self.core.appended_internal(lg)

    def _end(self, txn: TxnMetadata, commit: bool, bump: bool = False) -> tuple[Any, int]:
        """PrepareCommit/PrepareAbort written, then the markers; the prepare record's place.
        ``bump`` (TV2's EndTxn): the epoch goes up by one first (Kafka's
        ``prepareAbortOrCommit``); the caller has set ``next_producer_id`` if it is exhausted."""
        if txn.timeout_task is not None:
            txn.timeout_task.cancel()
            txn.timeout_task = None
        if bump:
            txn.last_producer_epoch = txn.producer_epoch
            txn.producer_epoch += 1
        where = self._transit(txn, PREPARE_COMMIT if commit else PREPARE_ABORT)
        self._complete(txn, commit)
        return where

    def _arm_timeout(self, txn: TxnMetadata, delay_ms: int) -> None:
        epoch = txn.producer_epoch

        def expire() -> None:
            txn.timeout_task = None
            if txn.state == ONGOING and txn.producer_epoch == epoch:
                self._fence_and_abort(txn)

        txn.timeout_task = CallbackTask(delay_ms, expire)
        self.core.timer.add(txn.timeout_task)

    def _fence_and_abort(self, txn: TxnMetadata) -> None:
        """Abort an open transaction under a bumped epoch: its producer is fenced."""
        if txn.producer_epoch < _SHORT_MAX - 1:
            txn.producer_epoch += 1
        self._end(txn, False)

    # -------------------------------------------------------------- validation
    def _check(self, tid: str, pid: int, epoch: int) -> tuple[Optional[TxnMetadata], int]:
        txn = self.txns.get(tid)
        if txn is not None and txn.state in (PREPARE_COMMIT, PREPARE_ABORT) and pid == txn.next_producer_id:
            return txn, E.CONCURRENT_TRANSACTIONS  # the producer id a TV2 end is moving to
        if txn is None or txn.producer_id != pid:
            return txn, E.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return txn, E.PRODUCER_FENCED
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return txn, E.CONCURRENT_TRANSACTIONS
        return txn, E.NONE

    @staticmethod
    def _old_fenced(code: int, version: int, since: int) -> int:
        # KIP-588: requests older than ``since`` know PRODUCER_FENCED as INVALID_PRODUCER_EPOCH
        return E.INVALID_PRODUCER_EPOCH if code == E.PRODUCER_FENCED and version < since else code

    def verify_or_add(self, tid: str, pid: int, epoch: int, partitions: list[TopicPartition],
                      add: bool, then: Callable[[dict[TopicPartition, int]], None]) -> None:
        """A partition leader's (or group coordinator's) question about a transactional write,
        Kafka's inter-broker AddPartitionsToTxn v5: with ``add`` (a TV2 producer's Produce v12
        or TxnOffsetCommit v5+) the partitions join the transaction, otherwise (verify_only)
        whether they are in it; ``then(codes)`` once the answer is committed. The codes are
        the coordinator's (see :func:`leader_verification_error` for the leader's)."""
        codes = self._add_partitions(tid, pid, epoch, partitions, 5, verify_only=not add, client_tv=2 if add else 0)
        self._codes_when_durable(tid, codes, then)

    # -------------------------------------------------------------- InitProducerId
    def init_producer_id(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.INIT_PRODUCER_ID).cls

        def answer(code: int, pid: int = -1, epoch: int = -1) -> None:
            respond(cls(error_code=self._old_fenced(code, version, 4), producer_id=pid, producer_epoch=epoch))

        tid = body.transactional_id
        if tid == "":
            return answer(E.INVALID_REQUEST)
        if not 0 < body.transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return answer(E.INVALID_TRANSACTION_TIMEOUT)
        self.ensure_topic()
        txn = self.txns.get(tid)
        now = self.core.wall_ms()
        if txn is None:
            try:
                pid = self.core.allocate_producer_id()
            except BrokerError as exc:  # a cluster broker waiting for its block of ids
                return answer(exc.code)
            txn = TxnMetadata(tid, pid, 0, body.transaction_timeout_ms, EMPTY, set(), -1, now)
            self.txns[tid] = txn
            self._write(txn)
            ids = (txn.producer_id, txn.producer_epoch)
            return self._when_durable(txn, lambda code: answer(code) if code else answer(E.NONE, *ids))
        given_pid = body.producer_id if version >= 3 else -1
        if given_pid >= 0 and (given_pid != txn.producer_id or body.producer_epoch != txn.producer_epoch):
            return answer(E.INVALID_PRODUCER_ID_MAPPING if given_pid != txn.producer_id else E.PRODUCER_FENCED)
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return answer(E.CONCURRENT_TRANSACTIONS)
        if txn.state == ONGOING:
            # abort the open transaction under a new epoch; the client retries and gets
            # another bump (Kafka never returns the epoch used for the abort)
            self._fence_and_abort(txn)
            return answer(E.CONCURRENT_TRANSACTIONS)
        if txn.producer_epoch >= _SHORT_MAX - 1:
            txn.producer_id, txn.producer_epoch = self.core.allocate_producer_id(), 0
        else:
            txn.producer_epoch += 1
        txn.timeout_ms = body.transaction_timeout_ms
        txn.partitions, txn.start_ms = set(), -1
        self._transit(txn, EMPTY)
        ids = (txn.producer_id, txn.producer_epoch)
        self._when_durable(txn, lambda code: answer(code) if code else answer(E.NONE, *ids))

    # -------------------------------------------------------------- AddPartitionsToTxn
    def _add(self, txn: TxnMetadata, parts: set[tuple[str, int]]) -> None:
        if txn.state == ONGOING and parts <= txn.partitions:
            return
        if txn.state != ONGOING:
            txn.start_ms = self.core.wall_ms()
            self._arm_timeout(txn, txn.timeout_ms)
        txn.partitions |= parts
        self._transit(txn, ONGOING)

    def _add_partitions(self, tid: str, pid: int, epoch: int, wanted: list[TopicPartition],
                        version: int, verify_only: bool = False, client_tv: int = 0,
                        check_known: bool = True) -> dict[TopicPartition, int]:
        unknown = {tp for tp in wanted if check_known and not self.core.has_partition(*tp)}
        if unknown:
            return {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED
                    for tp in wanted}
        txn, err = self._check(tid, pid, epoch)
        if err:
            return {tp: self._old_fenced(err, version, 2) for tp in wanted}
        assert txn is not None
        if verify_only:
            # Kafka's handleVerifyPartitionsInTransaction; v4 knows no TRANSACTION_ABORTABLE
            missing = E.TRANSACTION_ABORTABLE if version >= 5 else E.INVALID_TXN_STATE
            return {tp: E.NONE if txn.state == ONGOING and tp in txn.partitions else missing
                    for tp in wanted}
        if txn.state not in (EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT):
            return {tp: E.INVALID_TXN_STATE for tp in wanted}
        if not (txn.state == ONGOING and set(wanted) <= txn.partitions):
            txn.client_tv = client_tv
        self._add(txn, set(wanted))
        return {tp: E.NONE for tp in wanted}

    def add_partitions(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.ADD_PARTITIONS_TO_TXN).cls

        def results(codes: dict[tuple[str, int], int]) -> list[Any]:
            by_topic: dict[str, list[Any]] = {}
            for (t, p), c in codes.items():
                by_topic.setdefault(t, []).append(cls.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=c))
            return [cls.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps)
                    for t, ps in by_topic.items()]

        if version < 4:
            tid = body.v3_and_below_transactional_id
            codes = self._add_partitions(tid, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                         [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions],
                                         version)
            return self._codes_when_durable(tid, codes, lambda c: respond(
                cls(throttle_time_ms=0, results_by_topic_v3_and_below=results(c))))
        out: list[Any] = [None] * len(body.transactions)
        left = [len(body.transactions)]

        def settled(i: int, tid: str) -> Callable[[dict[TopicPartition, int]], None]:
            def then(codes: dict[TopicPartition, int]) -> None:
                out[i] = cls.AddPartitionsToTxnResult(transactional_id=tid, topic_results=results(codes))
                left[0] -= 1
                if left[0] == 0:
                    respond(cls(throttle_time_ms=0, error_code=E.NONE, results_by_transaction=out))
            return then

        if not body.transactions:
            return respond(cls(throttle_time_ms=0, error_code=E.NONE, results_by_transaction=[]))
        for i, tx in enumerate(body.transactions):
            # v5 comes from a leader that knows transaction version 2 (Kafka's
            # transactionVersionForAddPartitionsToTxn)
            codes = self._add_partitions(tx.transactional_id, tx.producer_id, tx.producer_epoch,
                                         [(t.name, p) for t in tx.topics for p in t.partitions], version,
                                         tx.verify_only, 2 if version >= 5 else 0)
            self._codes_when_durable(tx.transactional_id, codes, settled(i, tx.transactional_id))
        return None

    # -------------------------------------------------------------- AddOffsetsToTxn
    def add_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.ADD_OFFSETS_TO_TXN).cls
        if not body.group_id:
            return respond(cls(throttle_time_ms=0, error_code=E.INVALID_GROUP_ID))
        self.groups.ensure_topic()
        tp = (OFFSETS_TOPIC, partition_for(body.group_id, self.groups.num_partitions))
        # as Kafka's handleAddOffsetsToTxnRequest: the group's partition is added whether or not
        # __consumer_offsets exists yet (in a cluster it is made at the group's FindCoordinator)
        codes = self._add_partitions(body.transactional_id, body.producer_id, body.producer_epoch, [tp], version,
                                     check_known=False)
        self._codes_when_durable(body.transactional_id, codes, lambda c: respond(
            cls(throttle_time_ms=0, error_code=self._old_fenced(c[tp], version, 2))))

    # -------------------------------------------------------------- EndTxn
    def end_txn(self, body: Any, version: int, respond: Respond) -> None:
        """EndTxn; v5 (transaction version 2) bumps the epoch at every end and answers the
        producer id and epoch to use next (Kafka's ``TransactionCoordinator.endTransaction``)."""
        cls = response_codec(ApiKey.END_TXN).cls
        tv2 = version >= 5
        commit = body.committed
        pid, epoch = body.producer_id, body.producer_epoch
        txn = self.txns.get(body.transactional_id)

        def answer(code: int, ids: Optional[tuple[int, int]] = None) -> None:
            # an error carries no producer id and epoch (-1, as Kafka); a retry the current ones
            if ids is None:
                ids = (txn.producer_id, txn.producer_epoch) if txn is not None and not code else (-1, -1)
            respond(cls(throttle_time_ms=0, error_code=self._old_fenced(code, version, 2),
                        producer_id=ids[0], producer_epoch=ids[1]))

        if txn is None:
            return answer(E.INVALID_PRODUCER_ID_MAPPING)
        # a TV2 retry names the epoch before the bump (or the id before a rotation)
        retry_overflow = tv2 and txn.prev_producer_id == pid and epoch == _SHORT_MAX - 1 and txn.producer_epoch == 0
        retry = tv2 and (retry_overflow or (txn.producer_id == pid and txn.producer_epoch == epoch + 1)) \
            and txn.state in (PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
        if txn.producer_id != pid and not retry_overflow:
            return answer(E.INVALID_PRODUCER_ID_MAPPING)
        if txn.producer_epoch != epoch and not retry:
            return answer(E.PRODUCER_FENCED)
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return answer(E.CONCURRENT_TRANSACTIONS if (txn.state == PREPARE_COMMIT) == commit
                          else E.INVALID_TXN_STATE)
        done_state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        if txn.state == done_state and (retry if tv2 else True):
            return answer(E.NONE)  # a retry of the EndTxn that completed it
        # TV2 may abort a transaction that has no partitions (the producer's first write failed)
        empty_abort = tv2 and not commit and txn.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
        if not (txn.state == ONGOING or empty_abort) or retry:
            return answer(E.INVALID_TXN_STATE)
        if tv2 and txn.producer_epoch >= _SHORT_MAX - 1:
            try:
                txn.next_producer_id = self.core.allocate_producer_id()
            except BrokerError as exc:  # a cluster broker waiting for its block of ids
                return answer(exc.code)
        if empty_abort:
            txn.start_ms = self.core.wall_ms()
        if tv2:
            txn.client_tv = 2
        # the producer's ids after this end (Kafka answers before the markers are written)
        ids = (txn.next_producer_id, 0) if txn.next_producer_id >= 0 else \
            (txn.producer_id, txn.producer_epoch + 1 if tv2 else txn.producer_epoch)
        # answered once the prepare record is committed (Kafka appends it with acks=all)
        lg, offset = self._end(txn, commit, bump=tv2)
        self.core.when_replicated(lg, offset, lambda code: answer(code, ids), self.config.offsets_commit_timeout_ms)
        return None

    # -------------------------------------------------------------- DescribeTransactions, ListTransactions
    def describe_transactions(self, body: Any, version: int, respond: Respond) -> None:
        """The state of each transactional id (``kafka-transactions.sh describe``)."""
        cls = response_codec(ApiKey.DESCRIBE_TRANSACTIONS).cls
        out = []
        for tid in body.transactional_ids:
            txn = self.txns.get(tid)
            if txn is None or txn.state == DEAD:
                # the other fields at the response's defaults (producer id and epoch 0), as
                # Kafka's TransactionCoordinator leaves them
                out.append(cls.TransactionState(error_code=E.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=tid,
                                                transaction_state="", producer_id=0, producer_epoch=0))
                continue
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(txn.partitions):
                by_topic.setdefault(t, []).append(p)
            out.append(cls.TransactionState(
                error_code=E.NONE, transactional_id=tid, transaction_state=STATE_NAMES[txn.state],
                transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                topics=[cls.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        respond(cls(throttle_time_ms=0, transaction_states=out))

    def list_transactions(self, body: Any, version: int, respond: Respond) -> None:
        """Transactional ids by state, producer id, age (v1) and id pattern (v2), as Kafka's
        ``TransactionStateManager.listTransactionStates`` filters them."""
        cls = response_codec(ApiKey.LIST_TRANSACTIONS).cls
        resp = cls(throttle_time_ms=0, error_code=E.NONE)
        states = set()
        for name in body.state_filters:
            if name in STATE_NAMES:
                states.add(STATE_NAMES.index(name))
            else:
                resp.unknown_state_filters.append(name)
        if body.state_filters and not states:
            return respond(resp)  # only states that do not exist were asked for
        pattern = None
        if version >= 2 and body.transactional_id_pattern:
            try:
                pattern = re.compile(body.transactional_id_pattern)
            except re.error:
                resp.error_code = E.INVALID_REGULAR_EXPRESSION
                return respond(resp)
        pids = set(body.producer_id_filters)
        now = self.core.wall_ms()
        for tid, txn in sorted(self.txns.items()):
            if (txn.state == DEAD or (pids and txn.producer_id not in pids)
                    or (states and txn.state not in states)
                    or (version >= 1 and body.duration_filter >= 0 and now - txn.start_ms <= body.duration_filter)
                    or (pattern is not None and pattern.fullmatch(tid) is None)):
                continue
            resp.transaction_states.append(cls.TransactionState(
                transactional_id=tid, producer_id=txn.producer_id, transaction_state=STATE_NAMES[txn.state]))
        respond(resp)

    def shutdown(self) -> None:
        for txn in self.txns.values():
            if txn.timeout_task is not None:
                txn.timeout_task.cancel()
