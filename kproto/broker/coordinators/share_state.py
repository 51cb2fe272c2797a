"""The share-group state persister (KIP-932's share coordinator, Kafka's ``ShareCoordinatorShard``),
writing ``__share_group_state``.

Each share-partition's durable state (state epoch, leader epoch, start offset, the count of done
records and the state batches of :mod:`kproto.broker.share_partition`) is kept here and written as
Kafka writes it: a ShareSnapshot record (type 0) when the state is initialized, and ShareUpdate
records (type 1) for each later write, folded into a new ShareSnapshot every
``share.coordinator.snapshot.update.records.per.snapshot`` updates; deleting the state writes
tombstones for both keys. The records are replayed at start. A share-partition's records live in
the partition of ``__share_group_state`` its key ``group:topicId:partition`` hashes to.

The state RPCs (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState, ReadShareGroupStateSummary) are answered from the same state.
"""
from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from kproto.broker.context import BrokerContext
from kproto.broker.coordinators.offsets_topic import partition_for, record_key, record_value
from kproto.broker.log import Log
from kproto.codecs import message
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.errors import DecodeError
from kproto.records import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey

__all__ = ["SHARE_STATE_TOPIC", "ShareState", "ShareStateCoordinator", "share_key", "merge_batches",
           "share_state_topic_configs"]

log = logging.getLogger("kproto.broker.share")

SHARE_STATE_TOPIC = "__share_group_state"
_SNAPSHOT, _UPDATE = 0, 1
_I16 = struct.Struct(">h")
Respond = Callable[[Any], None]
Key = tuple[str, Uuid, int]


def share_key(group_id: str, topic_id: Uuid, partition: int) -> str:
    """The coordinator key of a share-partition (FindCoordinator key type 2)."""
    return f"{group_id}:{topic_id}:{partition}"


def share_state_topic_configs(replicas: int) -> dict[str, str]:
    """``__share_group_state``'s configs as Kafka's share coordinator creates it
    (``share.coordinator.state.topic.min.isr`` 2 where it has the replicas for it)."""
    return {"cleanup.policy": "delete", "compression.type": "producer", "segment.bytes": "104857600",
            "retention.ms": "-1", "min.insync.replicas": str(min(2, replicas))}


@dataclass
class ShareState:
    """One share-partition's persisted state."""

    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = 0
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)
    snapshot_epoch: int = 0
    create_ms: int = 0
    write_ms: int = 0
    updates: int = 0  # ShareUpdate records since the last snapshot


def merge_batches(old: list[tuple[int, int, int, int]], new: list[tuple[int, int, int, int]],
                  start: int) -> list[tuple[int, int, int, int]]:
    """The batches of ``old`` overwritten by ``new`` where they overlap, below ``start`` dropped
    (how Kafka folds an update into the snapshot)."""
    per: dict[int, tuple[int, int]] = {}
    for first, last, state, count in old + new:
        for off in range(max(first, start), last + 1):
            per[off] = (state, count)
    out: list[tuple[int, int, int, int]] = []
    for off in sorted(per):
        state, count = per[off]
        if out and out[-1][1] == off - 1 and out[-1][2:] == (state, count):
            out[-1] = (out[-1][0], off, state, count)
        else:
            out.append((off, off, state, count))
    return out


class ShareStateCoordinator:
    """Every share-partition state of the broker, written to ``__share_group_state``."""

    def __init__(self, core: BrokerContext) -> None:
        self.core = core
        self.states: dict[Key, ShareState] = {}
        if SHARE_STATE_TOPIC in core.logs.topics:
            self._load()

    # ------------------------------------------------------------------ topic
    @property
    def num_partitions(self) -> int:
        known = self.core.known_topics().get(SHARE_STATE_TOPIC)
        if known is not None:
            return known[1]
        return int(getattr(self.core.config, "share_coordinator_state_topic_num_partitions", 50))

    @property
    def snapshot_every(self) -> int:
        return int(getattr(self.core.config, "share_coordinator_snapshot_update_records_per_snapshot", 500))

    def ensure_topic(self) -> None:
        """Create ``__share_group_state`` with the configs Kafka's share coordinator gives it."""
        if SHARE_STATE_TOPIC not in self.core.logs.topics:
            self.core.logs.create_topic(SHARE_STATE_TOPIC, self.num_partitions, share_state_topic_configs(1))

    def _log(self, key: Key) -> Log:
        self.ensure_topic()
        lg = self.core.logs.get(SHARE_STATE_TOPIC, partition_for(share_key(*key), self.num_partitions))
        assert lg is not None
        return lg

    def _append(self, key: Key, records: list[tuple[bytes, Optional[bytes]]]) -> None:
        lg = self._log(key)
        b = RecordBatchBuilder(base_offset=lg.log_end_offset)
        now = self.core.wall_ms()
        for k, v in records:
            b.append(now, k, v)
        lg.append_internal(b.build())
        self.core.appended_internal(lg)

    @staticmethod
    def _key_bytes(rtype: int, key: Key) -> bytes:
        name = "ShareSnapshotKey" if rtype == _SNAPSHOT else "ShareUpdateKey"
        return record_key(rtype, message(name).cls(group_id=key[0], topic_id=key[1], partition=key[2]))

    def _snapshot_record(self, key: Key, s: ShareState) -> tuple[bytes, Optional[bytes]]:
        cls = message("ShareSnapshotValue").cls
        return self._key_bytes(_SNAPSHOT, key), record_value(0, cls(
            snapshot_epoch=s.snapshot_epoch, state_epoch=s.state_epoch, leader_epoch=s.leader_epoch,
            start_offset=s.start_offset, delivery_complete_count=s.delivery_complete_count,
            create_timestamp=s.create_ms, write_timestamp=s.write_ms,
            state_batches=[cls.StateBatch(first_offset=a, last_offset=b, delivery_state=st, delivery_count=c)
                           for a, b, st, c in s.batches]))

    def _update_record(self, key: Key, s: ShareState,
                       batches: list[tuple[int, int, int, int]]) -> tuple[bytes, Optional[bytes]]:
        cls = message("ShareUpdateValue").cls
        return self._key_bytes(_UPDATE, key), record_value(0, cls(
            snapshot_epoch=s.snapshot_epoch, leader_epoch=s.leader_epoch, start_offset=s.start_offset,
            delivery_complete_count=s.delivery_complete_count,
            state_batches=[cls.StateBatch(first_offset=a, last_offset=b, delivery_state=st, delivery_count=c)
                           for a, b, st, c in batches]))

    # ------------------------------------------------------------------ load
    def _load(self, partitions: Optional[set[int]] = None) -> None:
        for lg in self.core.logs.topics[SHARE_STATE_TOPIC].logs:
            if lg is None or not self.core.leads(lg.topic, lg.partition):
                continue
            if partitions is not None and lg.partition not in partitions:
                continue
            for batch in lg.batches():
                if batch.is_control:
                    continue
                for r in batch.records():
                    try:
                        self._replay(r.key, r.value)
                    except (DecodeError, struct.error, KeyError, IndexError):
                        log.warning("unreadable %s record at offset %d", SHARE_STATE_TOPIC, r.offset)

    def load_partitions(self, partitions: set[int]) -> None:
        """This broker became the leader of these ``__share_group_state`` partitions (a
        cluster's share coordinator): their states are replayed from the log."""
        if partitions and SHARE_STATE_TOPIC in self.core.logs.topics:
            self._load(partitions)

    def unload_partitions(self, partitions: set[int]) -> None:
        """This broker stopped leading these partitions: their states go."""
        n = self.num_partitions
        for key in [k for k in self.states if partition_for(share_key(*k), n) in partitions]:
            del self.states[key]

    def _replay(self, key: Optional[bytes], value: Optional[bytes]) -> None:
        if key is None:
            return
        rtype = _I16.unpack_from(key, 0)[0]
        if rtype not in (_SNAPSHOT, _UPDATE):
            return
        name = "ShareSnapshot" if rtype == _SNAPSHOT else "ShareUpdate"
        k, _ = message(name + "Key").decode_from(memoryview(key), 2, 0)
        ident = (k.group_id, k.topic_id, k.partition)
        if value is None:
            self.states.pop(ident, None)
            return
        v, _ = message(name + "Value").decode_from(memoryview(value), 2, _I16.unpack_from(value, 0)[0])
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in v.state_batches]
        if rtype == _SNAPSHOT:
            self.states[ident] = ShareState(v.state_epoch, v.leader_epoch, v.start_offset,
                                            v.delivery_complete_count, batches, v.snapshot_epoch,
                                            v.create_timestamp, v.write_timestamp)
            return
        s = self.states.get(ident)
        if s is None:
            return
        s.leader_epoch = v.leader_epoch
        s.start_offset = v.start_offset if v.start_offset >= 0 else s.start_offset
        s.delivery_complete_count = v.delivery_complete_count
        s.batches = merge_batches(s.batches, batches, s.start_offset)
        s.updates += 1

    # ------------------------------------------------------------------ the persister's operations
    def read(self, key: Key) -> Optional[ShareState]:
        return self.states.get(key)

    def initialize(self, key: Key, state_epoch: int, start_offset: int) -> None:
        """A new state (or a reset one: a new state epoch) as one ShareSnapshot."""
        now = self.core.wall_ms()
        old = self.states.get(key)
        s = ShareState(state_epoch=state_epoch, leader_epoch=0, start_offset=start_offset,
                       snapshot_epoch=(old.snapshot_epoch + 1) if old else 0, create_ms=now, write_ms=now)
        self.states[key] = s
        self._append(key, [self._snapshot_record(key, s)])

    def write(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[tuple[int, int, int, int]]) -> tuple[int, Optional[str]]:
        """WriteShareGroupState's checks and write: a ShareUpdate, or a ShareSnapshot every
        ``snapshot_every`` updates. Returns (error code, message)."""
        s = self.states.get(key)
        if s is None:
            return E.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed."
        if state_epoch < s.state_epoch:
            return E.FENCED_STATE_EPOCH, "Write operation on share partition with stale state epoch."
        if leader_epoch < s.leader_epoch and leader_epoch != -1:
            return E.FENCED_LEADER_EPOCH, "Write operation on share partition with stale leader epoch."
        if leader_epoch != -1:
            s.leader_epoch = leader_epoch
        if start_offset >= 0:
            s.start_offset = start_offset
        s.delivery_complete_count = delivery_complete_count
        s.batches = merge_batches(s.batches, batches, s.start_offset)
        s.write_ms = self.core.wall_ms()
        if s.updates + 1 >= self.snapshot_every:
            s.snapshot_epoch += 1
            s.updates = 0
            self._append(key, [self._snapshot_record(key, s)])
        else:
            s.updates += 1
            self._append(key, [self._update_record(key, s, batches)])
        return E.NONE, None

    def delete(self, key: Key) -> None:
        """Tombstones for both record keys of a share-partition."""
        if self.states.pop(key, None) is not None:
            self._append(key, [(self._key_bytes(_SNAPSHOT, key), None), (self._key_bytes(_UPDATE, key), None)])

    # ------------------------------------------------------------------ RPCs (from brokers)
    def initialize_rpc(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.INITIALIZE_SHARE_GROUP_STATE).cls
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                key = (body.group_id, t.topic_id, p.partition)
                old = self.states.get(key)
                if old is not None and p.state_epoch < old.state_epoch:
                    parts.append(cls.PartitionResult(partition=p.partition, error_code=E.FENCED_STATE_EPOCH,
                                                     error_message="Initialize operation on share partition "
                                                                   "with stale state epoch."))
                    continue
                self.initialize(key, p.state_epoch, p.start_offset)
                parts.append(cls.PartitionResult(partition=p.partition, error_code=0, error_message=None))
            results.append(cls.InitializeStateResult(topic_id=t.topic_id, partitions=parts))
        respond(cls(results=results))

    def read_rpc(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.READ_SHARE_GROUP_STATE).cls
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                s = self.states.get((body.group_id, t.topic_id, p.partition))
                if s is None:
                    parts.append(cls.PartitionResult(
                        partition=p.partition, error_code=E.INVALID_REQUEST, state_epoch=0, start_offset=0,
                        error_message="Read operation on uninitialized share partition not allowed.",
                        state_batches=[]))
                    continue
                if p.leader_epoch != -1 and p.leader_epoch > s.leader_epoch:
                    s.leader_epoch = p.leader_epoch
                parts.append(cls.PartitionResult(
                    partition=p.partition, error_code=0, error_message=None, state_epoch=s.state_epoch,
                    start_offset=s.start_offset, state_batches=[
                        cls.StateBatch(first_offset=a, last_offset=b, delivery_state=st, delivery_count=c)
                        for a, b, st, c in s.batches]))
            results.append(cls.ReadStateResult(topic_id=t.topic_id, partitions=parts))
        respond(cls(results=results))

    def write_rpc(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.WRITE_SHARE_GROUP_STATE).cls
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                key = (body.group_id, t.topic_id, p.partition)
                s = self.states.get(key)
                dcc = p.delivery_complete_count if version >= 1 else (s.delivery_complete_count if s else 0)
                code, msg = self.write(key, p.state_epoch, p.leader_epoch, p.start_offset, dcc,
                                       [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                        for b in p.state_batches])
                parts.append(cls.PartitionResult(partition=p.partition, error_code=code, error_message=msg))
            results.append(cls.WriteStateResult(topic_id=t.topic_id, partitions=parts))
        respond(cls(results=results))

    def delete_rpc(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DELETE_SHARE_GROUP_STATE).cls
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                self.delete((body.group_id, t.topic_id, p.partition))
                parts.append(cls.PartitionResult(partition=p.partition, error_code=0, error_message=None))
            results.append(cls.DeleteStateResult(topic_id=t.topic_id, partitions=parts))
        respond(cls(results=results))

    def summary_rpc(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY).cls
        results = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                s = self.states.get((body.group_id, t.topic_id, p.partition))
                parts.append(cls.PartitionResult(
                    partition=p.partition, error_code=0, error_message=None,
                    state_epoch=s.state_epoch if s else 0, leader_epoch=s.leader_epoch if s else -1,
                    start_offset=s.start_offset if s else -1,
                    delivery_complete_count=s.delivery_complete_count if s else 0))
            results.append(cls.ReadStateSummaryResult(topic_id=t.topic_id, partitions=parts))
        respond(cls(results=results))
