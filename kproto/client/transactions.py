"""Transactions for a producer: Kafka's ``TransactionManager`` as a sans-I/O state machine.

It makes the request bodies (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn), reads their responses and keeps the state; the caller sends them
to the transaction (or group) coordinator and acts on the returned :class:`Action`::

    tm = TransactionManager("my-txn")
    body = tm.init_producer_id_request()         # to the transaction coordinator
    tm.handle_init_producer_id(response)         # -> Action.DONE / RETRY / FIND_COORDINATOR
    tm.begin()
    ... tm.new_partitions(...), tm.add_partitions_request(...), produce ...
    body = tm.end_request(commit=True)           # None: nothing was added, nothing to send

Transaction version 2 (KIP-890 part 2, ``tv2``: the coordinator's broker finalizes
``transaction.version`` 2, as the Java 4.x client decides): partitions join the transaction with
their first Produce (v12) and the group's offsets with TxnOffsetCommit (v5), without
AddPartitionsToTxn or AddOffsetsToTxn, and each EndTxn (v5) answers the epoch (or producer id)
the next transaction uses, its sequences from 0.

Errors follow Kafka's client: a fenced producer or a refused transactional id is fatal
(:class:`TransactionFatalError`); a failure inside a transaction (a partition that cannot be
added, a failed produce) makes it abortable (:class:`TransactionAbortableError`): only
``abort`` is allowed then.
"""
from __future__ import annotations

import enum
from typing import Any, Iterable, Optional

from kproto.client.protocol import CLIENT_VERSIONS, BrokerError
from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.errors import KprotoError
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = ["TransactionManager", "TxnState", "Action", "TransactionFatalError",
           "TransactionAbortableError"]

#: The client side of AddPartitionsToTxn (v4+ batches transactions for brokers only), as
#: :data:`~kproto.client.protocol.CLIENT_VERSIONS` has it.
ADD_PARTITIONS_CLIENT_VERSIONS = CLIENT_VERSIONS[ApiKey.ADD_PARTITIONS_TO_TXN]
#: Versions within a transaction of version 1: above them is transaction version 2 (Kafka's
#: ``ProduceRequest.LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2`` and its EndTxn and
#: TxnOffsetCommit counterparts)
PRODUCE_TXN_V1_VERSIONS = range(0, 12)
END_TXN_V1_VERSIONS = range(0, 5)
TXN_OFFSET_COMMIT_V1_VERSIONS = range(0, 5)
#: TxnOffsetCommit in a transaction of version 2: v5 by topic name, v6 by topic id (sent when
#: the producer's metadata has the id of every topic committed, as Kafka 4.4's producer)
TXN_OFFSET_COMMIT_V2_VERSIONS = range(5, 6)
TXN_OFFSET_COMMIT_BY_ID_VERSIONS = range(5, 7)
#: the feature whose finalized level chooses the transaction protocol
TRANSACTION_VERSION_FEATURE = "transaction.version"

# What Kafka's TransactionManager does with each transactional answer, code by code (its
# handlers name them; the error table's ``retriable`` flag is not what decides here):
#: sent again as it is
_RETRY = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,    # metadata not propagated yet
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,       # the previous transaction is still completing
    ErrorCode.OPERATION_NOT_ATTEMPTED,       # another partition of the same request failed (not retriable)
})
#: sent again after looking the coordinator up again (retriable codes, but a retry as it is
#: would go to the same broker)
_COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
#: the producer cannot go on; every other code makes the transaction abortable
_FATAL = frozenset({
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.INVALID_TXN_STATE,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.PRODUCER_FENCED,
})


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


class Action(enum.Enum):
    """What the caller does after handing a response to the manager."""

    DONE = "done"
    RETRY = "retry"                         # send the same request again after a short pause
    FIND_COORDINATOR = "find_coordinator"   # look the coordinator up again, then retry


class TransactionFatalError(BrokerError):
    """The producer cannot go on (fenced, not authorised, ...): close it."""


class TransactionAbortableError(BrokerError):
    """The current transaction failed; ``abort`` it, then begin another."""


class TransactionManager:
    """State of one transactional producer (``transactional_id``)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000) -> None:
        if not transactional_id:
            raise ValueError("a transactional producer needs a non-empty transactional_id")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        #: partitions the coordinator has added to the current transaction
        self.partitions: set[tuple[str, int]] = set()
        #: whether the coordinator knows of the transaction (partitions or offsets added): an
        #: empty transaction ends without an EndTxn, as Kafka's client does
        self.started = False
        self.last_error: Optional[KprotoError] = None
        #: transaction version 2 (set by the caller from the coordinator's finalized features)
        self.tv2 = False
        # topic -> id of the TxnOffsetCommit in flight (v6 answers by id)
        self._topic_ids: dict[str, Uuid] = {}

    # -- state ------------------------------------------------------------------------------
    def _expect(self, *states: TxnState, doing: str, hint: str = "") -> None:
        if self.state in states:
            return
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR) and self.last_error:
            failed = "transaction" if self.state is TxnState.ABORTABLE_ERROR else "producer"
            raise KprotoError(f"cannot {doing}: the {failed} failed earlier "
                              f"({self.last_error})") from self.last_error
        raise KprotoError(f"cannot {doing} in state {self.state.value}{hint}")

    def begin(self) -> None:
        """Start a transaction (local only; the coordinator learns of it with the first
        partition or offsets added)."""
        self._expect(TxnState.READY, doing="begin a transaction")
        self.state = TxnState.IN_TRANSACTION
        self.partitions.clear()
        self.started = False

    def check_can_send(self) -> None:
        """Records may be sent only inside a transaction."""
        self._expect(TxnState.IN_TRANSACTION, doing="send",
                     hint=": no transaction in progress (begin one first)")

    def check_can_commit(self) -> None:
        """A commit needs a transaction without errors (a retried commit is allowed)."""
        self._expect(TxnState.IN_TRANSACTION, TxnState.COMMITTING, doing="commit")

    def fail(self, error: KprotoError) -> None:
        """A produce of the transaction failed: only an abort is possible now."""
        if self.state is TxnState.IN_TRANSACTION:
            self.state = TxnState.ABORTABLE_ERROR
            self.last_error = error

    def _error(self, code: int, what: str, message: Optional[str] = None) -> Action:
        if code == ErrorCode.NONE:
            return Action.DONE
        if code in _RETRY:
            return Action.RETRY
        if code in _COORDINATOR_MOVED:
            return Action.FIND_COORDINATOR
        if code in _FATAL:
            err: BrokerError = TransactionFatalError(code, what, message)
            self.state = TxnState.FATAL_ERROR
        else:
            err = TransactionAbortableError(code, what, message)
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                self.state = TxnState.ABORTABLE_ERROR
        self.last_error = err
        raise err

    # -- InitProducerId ------------------------------------------------------------------------
    def init_producer_id_request(self) -> Any:
        self._expect(TxnState.UNINITIALIZED, TxnState.READY, doing="initialise transactions")
        return _request_codec(ApiKey.INIT_PRODUCER_ID).cls(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.transaction_timeout_ms)

    def handle_init_producer_id(self, resp: Any) -> Action:
        action = self._error(resp.error_code, "InitProducerId")
        if action is Action.DONE:
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            self.state = TxnState.READY
        return action

    # -- AddPartitionsToTxn -------------------------------------------------------------------
    def new_partitions(self, tps: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Those of ``tps`` not in the transaction yet, sorted."""
        self.check_can_send()
        return sorted(set(tps) - self.partitions)

    def added_by_produce(self, tps: Iterable[tuple[str, int]]) -> None:
        """Transaction version 2: the partitions join the transaction with their first
        Produce (the leader adds them), so the transaction has begun at the coordinator."""
        self.partitions.update(tps)
        self.started = True

    def add_partitions_request(self, tps: Iterable[tuple[str, int]]) -> Any:
        """The same body at every client version (v0-3, :data:`ADD_PARTITIONS_CLIENT_VERSIONS`)."""
        cls = _request_codec(ApiKey.ADD_PARTITIONS_TO_TXN).cls
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(tps):
            by_topic.setdefault(t, []).append(p)
        return cls(v3_and_below_transactional_id=self.transactional_id,
                   v3_and_below_producer_id=self.producer_id,
                   v3_and_below_producer_epoch=self.producer_epoch,
                   v3_and_below_topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                        for t, ps in by_topic.items()])

    def handle_add_partitions(self, resp: Any) -> Action:
        """Marks the partitions added; RETRY/FIND_COORDINATOR when some must be sent again
        (ask :meth:`new_partitions` which)."""
        worst = Action.DONE
        for topic in resp.results_by_topic_v3_and_below:
            for p in topic.results_by_partition:
                tp = (topic.name, p.partition_index)
                action = self._error(p.partition_error_code, f"AddPartitionsToTxn({tp[0]}-{tp[1]})")
                if action is Action.DONE:
                    self.partitions.add(tp)
                    self.started = True
                elif worst is Action.DONE or action is Action.FIND_COORDINATOR:
                    worst = action
        return worst

    # -- offsets in the transaction (consume-transform-produce) --------------------------------
    def add_offsets_request(self, group_id: str) -> Any:
        self.check_can_send()
        return _request_codec(ApiKey.ADD_OFFSETS_TO_TXN).cls(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, group_id=group_id)

    def handle_add_offsets(self, resp: Any) -> Action:
        action = self._error(resp.error_code, "AddOffsetsToTxn")
        if action is Action.DONE:
            self.started = True
        return action

    def txn_offset_commit_request(self, group_id: str, offsets: dict[tuple[str, int], int], *,
                                  generation_id: int = -1, member_id: str = "",
                                  group_instance_id: Optional[str] = None,
                                  topic_ids: Optional[dict[str, Uuid]] = None) -> Any:
        """To the group coordinator, after AddOffsetsToTxn: ``offsets`` are the next offsets
        to consume, committed with the transaction. ``topic_ids``: each topic's id, for v6
        (which names topics by id only)."""
        cls = _request_codec(ApiKey.TXN_OFFSET_COMMIT).cls
        self._topic_ids = dict(topic_ids or {})
        by_topic: dict[str, list[Any]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(cls.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=off))
        return cls(transactional_id=self.transactional_id, group_id=group_id,
                   producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                   generation_id_or_member_epoch=generation_id, member_id=member_id,
                   group_instance_id=group_instance_id,
                   topics=[cls.TxnOffsetCommitRequestTopic(name=t, topic_id=self._topic_ids.get(t, Uuid.ZERO),
                                                           partitions=ps)
                           for t, ps in by_topic.items()])

    def handle_txn_offset_commit(self, resp: Any) -> Action:
        if self.tv2:
            self.started = True  # (v5 added the group's offsets to the transaction)
        worst = Action.DONE
        names = {i: t for t, i in self._topic_ids.items()}
        for topic in resp.topics:
            name = topic.name or names.get(topic.topic_id, str(topic.topic_id))  # v6: by id
            for p in topic.partitions:
                action = self._error(p.error_code, f"TxnOffsetCommit({name}-{p.partition_index})")
                if action is not Action.DONE and (worst is Action.DONE or action is Action.FIND_COORDINATOR):
                    worst = action
        return worst

    # -- EndTxn --------------------------------------------------------------------------------
    def end_request(self, commit: bool) -> Optional[Any]:
        """The EndTxn body, or None when the coordinator never heard of the transaction (it
        is then complete already). A commit needs a transaction without errors."""
        if commit:
            self.check_can_commit()
            self.state = TxnState.COMMITTING
        else:
            self._expect(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING,
                         doing="abort")
            self.state = TxnState.ABORTING
        if not self.started:
            self._complete()
            return None
        return _request_codec(ApiKey.END_TXN).cls(
            transactional_id=self.transactional_id, producer_id=self.producer_id,
            producer_epoch=self.producer_epoch, committed=commit)

    def handle_end(self, resp: Any) -> Action:
        what = "EndTxn(commit)" if self.state is TxnState.COMMITTING else "EndTxn(abort)"
        action = self._error(resp.error_code, what)
        if action is Action.DONE:
            if self.tv2 and resp.producer_id >= 0 and resp.producer_epoch >= 0:
                # v5: the epoch was bumped (or a new producer id given) for the next transaction
                self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            self._complete()
        return action

    def _complete(self) -> None:
        self.state = TxnState.READY
        self.partitions.clear()
        self.started = False
        self.last_error = None

    def __repr__(self) -> str:
        return (f"TransactionManager({self.transactional_id!r}, {self.state.value}, "
                f"producer {self.producer_id}/{self.producer_epoch}, "
                f"{len(self.partitions)} partitions)")
