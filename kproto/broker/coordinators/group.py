"""The classic group coordinator (Kafka's ``GroupCoordinator`` and ``GroupMetadata``), sans-I/O.

A group moves through Kafka's states: Empty -> PreparingRebalance (members (re)join; a
:class:`DelayedJoin` in the rebalance purgatory completes when every known member has rejoined
or at the rebalance timeout; an empty group waits ``group.initial.rebalance.delay.ms`` first,
:class:`InitialDelayedJoin`) -> CompletingRebalance (the leader's SyncGroup brings the
assignment) -> Stable; Dead once deleted. Each member's session is a :class:`DelayedHeartbeat`
in the heartbeat purgatory: a heartbeat completes it and schedules the next, its expiry removes
the member and rebalances the group.

State lives in ``__consumer_offsets`` in Kafka's record format (GroupMetadataKey/Value v3 for
a generation's members and assignment, OffsetCommitKey/Value v3 for offsets, tombstones for
deletions; transactional offset commits as transactional batches completed by the markers)
and is read back from it at start. Requests arrive decoded; answers leave through a callback
with the response object, so a JoinGroup may be answered long after it arrived.
"""
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from kproto.broker.coordinators.consumer_group import RECORD_TYPES as CONSUMER_RECORD_TYPES
from kproto.broker.coordinators.consumer_group import ConsumerGroup, ConsumerGroupCoordinator
from kproto.broker.context import BrokerContext
from kproto.broker.log import Log
from kproto.broker.coordinators.txn import leader_verification_error
from kproto.broker.coordinators.offsets_topic import (OFFSETS_TOPIC, OffsetAndMetadata, partition_for, record_key,
                                         record_value)
from kproto.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kproto.codecs import message
from kproto.codecs.primitives import Uuid
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode as E
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey


__all__ = ["GroupCoordinator", "Group", "Member", "OffsetAndMetadata", "partition_for",
           "EMPTY", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD"]

EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
#: Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member's first join may wait this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# record versions Kafka 3.9/4.x write (GroupCoordinatorRecordHelpers): OffsetCommitValue v3
# unless an expire timestamp is set (v1), GroupMetadataValue v3
OFFSET_VALUE_VERSION, GROUP_VALUE_VERSION = 3, 3
_I16 = struct.Struct(">h")

Respond = Callable[[Any], None]


@dataclass
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader_id: str = ""
    members: list[tuple[str, Optional[str], bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: int
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    assignment: bytes = b""


class Member:
    """``MemberMetadata``: one member of a classic group."""

    def __init__(self, member_id: str, group_instance_id: Optional[str], client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        self.member_id, self.group_instance_id = member_id, group_instance_id
        self.client_id, self.client_host = client_id, client_host
        self.rebalance_timeout_ms, self.session_timeout_ms = rebalance_timeout_ms, session_timeout_ms
        self.protocol_type, self.protocols = protocol_type, protocols
        self.assignment = b""
        self.awaiting_join: Optional[Callable[[JoinResult], None]] = None
        self.awaiting_sync: Optional[Callable[[SyncResult], None]] = None
        self.is_new = False
        self.heartbeat_satisfied = False

    def metadata(self, protocol: Optional[str]) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    @property
    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return self.heartbeat_satisfied
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return True  # a member waiting on a rebalance needs no heartbeat
        return self.heartbeat_satisfied


class Group:
    """``GroupMetadata``: members, generation, protocol, committed offsets."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation_id = 0
        self.protocol_type: Optional[str] = None
        self.protocol_name: Optional[str] = None
        self.leader_id: Optional[str] = None
        self.members: dict[str, Member] = {}
        self.pending_members: set[str] = set()
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.new_member_added = False
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.state_timestamp = now_ms

    # -------------------------------------------------------------- membership
    def add(self, member: Member, callback: Optional[Callable[[JoinResult], None]]) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = callback
        self.pending_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        names = {n for n, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins (ties: the
        first in the leader's... Kafka's maxBy over the vote map)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            pick = next(n for n, _ in m.protocols if n in candidates)
            votes[pick] = votes.get(pick, 0) + 1
        return max(votes, key=lambda n: votes[n])

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for mid, m in self.members.items():
            if m.awaiting_join is not None:
                self.leader_id = mid
                return True
        return False

    def transition(self, state: str, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    def current_member_metadata(self) -> list[tuple[str, Optional[str], bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    def subscribed_topics(self) -> Optional[set[str]]:
        """Topics the consumer-protocol members subscribe to (None: not known)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        codec = message("ConsumerProtocolSubscription")
        topics: set[str] = set()
        for m in self.members.values():
            data = m.metadata(self.protocol_name)
            try:
                ver = min(_I16.unpack_from(data, 0)[0], codec.valid_versions[-1])
                topics.update(codec.decode(memoryview(data)[2:], ver).topics)
            except (DecodeError, struct.error, ValueError):
                return None
        return topics


class DelayedJoin(DelayedOperation):
    """Completes when every known member has rejoined, or at the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator, self.group = coordinator, group

    def try_complete(self) -> bool:
        if self.group.has_all_members_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` and
    again for as long as new members keep arriving, up to the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: Group, delay_ms: int,
                 remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group, co = self.group, self.coordinator
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(co.config.group_initial_rebalance_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - delay, 0)
            co.rebalance_purgatory.try_complete_else_watch(
                InitialDelayedJoin(co, group, delay, remaining), [("join", group.group_id)])
        else:
            co.on_complete_join(group)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: completed by its next heartbeat, or expired (the member leaves)."""

    def __init__(self, coordinator: GroupCoordinator, group: Group, member_id: str,
                 pending: bool, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator, self.group, self.member_id, self.pending = coordinator, group, member_id, pending

    def try_complete(self) -> bool:
        group = self.group
        if group.state == DEAD:
            return self.force_complete()
        if self.pending:
            return self.force_complete() if self.member_id in group.members else False
        member = group.members.get(self.member_id)
        if member is None or member.has_satisfied_heartbeat:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.pending)


class GroupCoordinator:
    """Classic groups and committed offsets of one broker (it leads every partition of
    ``__consumer_offsets``)."""

    def __init__(self, core: BrokerContext) -> None:
        self.core = core
        self.config = core.config
        self.groups: dict[str, Group] = {}
        self.rebalance_purgatory: DelayedOperationPurgatory[DelayedJoin] = \
            DelayedOperationPurgatory("Rebalance", core.timer)
        self.heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] = \
            DelayedOperationPurgatory("Heartbeat", core.timer)
        # KIP-848 consumer groups: their own state machine, sharing __consumer_offsets
        self.consumer = ConsumerGroupCoordinator(self)
        #: KIP-932 share groups (set by the broker): ListGroups, DescribeGroups and DeleteGroups
        #: answer for them too
        self.share: Optional[Any] = None
        if OFFSETS_TOPIC in core.logs.topics:
            self._load()

    # -------------------------------------------------------------- plumbing
    def group_type(self, group_id: str) -> Optional[str]:
        """'classic' or 'consumer' for a group of that id here (None: there is none)."""
        if group_id in self.consumer.groups:
            return "consumer"
        g = self.groups.get(group_id)
        return "classic" if g is not None and g.state != DEAD else None

    def is_share_group(self, group_id: str) -> bool:
        return self.share is not None and group_id in self.share.groups

    def now(self) -> int:
        return self.core.clock.now_ms()

    @property
    def num_partitions(self) -> int:
        topic = self.core.logs.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic is not None else self.config.offsets_topic_num_partitions

    def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` (Kafka does at the first FindCoordinator)."""
        if OFFSETS_TOPIC not in self.core.logs.topics:
            self.core.logs.create_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions,
                                        {"cleanup.policy": "compact", "compression.type": "producer",
                                         "segment.bytes": "104857600"})

    def partition_log(self, group_id: str) -> Log:
        self.ensure_topic()
        lg = self.core.logs.get(OFFSETS_TOPIC, partition_for(group_id, self.num_partitions))
        assert lg is not None
        return lg

    def append_records(self, group_id: str, records: list[tuple[bytes, Optional[bytes]]],
                producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Write records for ``group_id``; returns the offset of the first."""
        lg = self.partition_log(group_id)
        b = RecordBatchBuilder(base_offset=lg.log_end_offset, producer_id=producer_id,
                               producer_epoch=producer_epoch,
                               base_sequence=0 if producer_id >= 0 else -1,
                               transactional=producer_id >= 0)
        now = self.core.wall_ms()
        for k, v in records:
            b.append(now, k, v)
        info = lg.append_internal(b.build())
        self.core.appended_internal(lg)
        return info.base_offset

    def offset_record(self, group_id: str, tp: tuple[str, int],
                       om: Optional[OffsetAndMetadata]) -> tuple[bytes, Optional[bytes]]:
        key = record_key(1, message("OffsetCommitKey").cls(group=group_id, topic=tp[0], partition=tp[1]))
        if om is None:
            return key, None
        return key, record_value(OFFSET_VALUE_VERSION, message("OffsetCommitValue").cls(
            offset=om.offset, leader_epoch=om.leader_epoch, metadata=om.metadata,
            commit_timestamp=om.commit_timestamp))

    def group_record(self, group: Group, deleted: bool = False) -> tuple[bytes, Optional[bytes]]:
        key = record_key(2, message("GroupMetadataKey").cls(group=group.group_id))
        if deleted:
            return key, None
        cls = message("GroupMetadataValue").cls
        return key, record_value(GROUP_VALUE_VERSION, cls(
            protocol_type=group.protocol_type or "", generation=group.generation_id,
            protocol=group.protocol_name, leader=group.leader_id,
            current_state_timestamp=self.core.wall_ms(),
            members=[cls.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
                assignment=m.assignment) for m in group.members.values()]))

    def store_group(self, group: Group) -> None:
        self.append_records(group.group_id, [self.group_record(group)])

    # -------------------------------------------------------------- load
    def _load(self, partitions: Optional[set[int]] = None) -> None:
        """Rebuild groups and offsets from ``__consumer_offsets`` (Kafka's
        ``loadGroupsAndOffsets``): every partition this broker leads, or only ``partitions``."""
        topic = self.core.logs.topics[OFFSETS_TOPIC]
        loaded: set[str] = set()
        for lg in topic.logs:
            if not self.core.leads(lg.topic, lg.partition) or \
                    (partitions is not None and lg.partition not in partitions):
                continue  # a cluster broker coordinates the groups of the partitions it leads
            before = set(self.groups) | set(self.consumer.groups)
            pending: dict[int, list[tuple[str, tuple[str, int], Optional[OffsetAndMetadata]]]] = {}
            for batch in lg.batches():
                if batch.is_control:
                    recs = batch.record_list()
                    commit = bool(recs) and recs[0].key is not None and _I16.unpack_from(recs[0].key, 2)[0] == 1
                    for gid, tp, om in pending.pop(batch.producer_id, []):
                        if commit and om is not None:
                            self.get_or_create_group(gid).offsets[tp] = om
                    continue
                for r in batch.records():
                    try:
                        self._load_record(r.key, r.value, r.offset, batch, pending)
                    except (DecodeError, struct.error, KeyError):
                        continue  # a record this broker cannot read: Kafka would fail the load
            for pid, items in pending.items():  # open transactions: offsets still pending
                for gid, tp, om in items:
                    if om is not None:
                        self.get_or_create_group(gid).pending_txn_offsets.setdefault(pid, {})[tp] = om
            loaded |= (set(self.groups) | set(self.consumer.groups)) - before
        for gid in loaded:
            group = self.groups.get(gid)
            if group is None:
                continue
            if group.state == DEAD:
                del self.groups[gid]
                continue
            for member in group.members.values():
                self.complete_and_schedule_heartbeat(group, member)
        self.consumer.after_load(loaded)

    def load_partitions(self, partitions: set[int]) -> None:
        """This broker became the leader of these ``__consumer_offsets`` partitions (Kafka's
        ``onElection``): their groups are read back from the log."""
        if partitions and OFFSETS_TOPIC in self.core.logs.topics:
            self._load(partitions)

    def unload_partitions(self, partitions: set[int]) -> None:
        """This broker stopped leading these partitions (``onResignation``): their groups go,
        members waiting on a rebalance are answered NOT_COORDINATOR, as Kafka's
        ``onGroupUnloaded`` does, and look for the new coordinator."""
        n = self.num_partitions
        for gid, group in list(self.groups.items()):
            if partition_for(gid, n) not in partitions:
                continue
            group.state = DEAD
            del self.groups[gid]
            for member in group.members.values():
                join, member.awaiting_join = member.awaiting_join, None
                if join is not None:
                    join(JoinResult(E.NOT_COORDINATOR, member.member_id))
                sync, member.awaiting_sync = member.awaiting_sync, None
                if sync is not None:
                    sync(SyncResult(E.NOT_COORDINATOR))
                self.remove_heartbeat(group, member)
            self.rebalance_purgatory.check_and_complete(("join", gid))
        self.consumer.unload([gid for gid in self.consumer.groups if partition_for(gid, n) in partitions])

    def get_or_create_group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id, self.now())
        return g

    def _load_record(self, key: Optional[bytes], value: Optional[bytes], offset: int,
                     batch: RecordBatch, pending: dict) -> None:
        if key is None or len(key) < 2:
            return
        rtype = _I16.unpack_from(key, 0)[0]
        if rtype in (0, 1):
            k = message("OffsetCommitKey").decode(memoryview(key)[2:], 0)
            om = None
            if value is not None:
                ver = _I16.unpack_from(value, 0)[0]
                v = message("OffsetCommitValue").decode(memoryview(value)[2:], ver)
                om = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata or "", v.commit_timestamp, offset)
            tp = (k.topic, k.partition)
            if batch.is_transactional:
                pending.setdefault(batch.producer_id, []).append((k.group, tp, om))
                return
            group = self.get_or_create_group(k.group)
            if om is None:
                group.offsets.pop(tp, None)
                # a tombstone also ends the group's pending transactional offsets of the
                # partition (Kafka's replay): a later COMMIT marker must not bring them back
                for items in pending.values():
                    items[:] = [i for i in items if (i[0], i[1]) != (k.group, tp)]
            else:
                group.offsets[tp] = om
        elif rtype == 2:
            k = message("GroupMetadataKey").decode(memoryview(key)[2:], 0)
            if value is None:
                g = self.groups.get(k.group)
                if g is not None:
                    g.state = DEAD
                    if not g.offsets:
                        del self.groups[k.group]
                return
            ver = _I16.unpack_from(value, 0)[0]
            v = message("GroupMetadataValue").decode(memoryview(value)[2:], ver)
            group = self.get_or_create_group(k.group)
            group.members.clear()
            group.static_members.clear()
            group.generation_id, group.protocol_type = v.generation, v.protocol_type or None
            group.protocol_name, group.leader_id = v.protocol, v.leader
            for mm in v.members:
                m = Member(mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                           mm.rebalance_timeout, mm.session_timeout, v.protocol_type,
                           [(v.protocol or "", bytes(mm.subscription))])
                m.assignment = bytes(mm.assignment)
                group.members[m.member_id] = m
                if m.group_instance_id is not None:
                    group.static_members[m.group_instance_id] = m.member_id
            group.state = STABLE if group.members else EMPTY
        elif rtype in CONSUMER_RECORD_TYPES:
            self.consumer.replay(rtype, memoryview(key)[2:], None if value is None else memoryview(value))

    # -------------------------------------------------------------- heartbeats
    def complete_and_schedule_heartbeat(self, group: Group, member: Member,
                                        timeout_ms: Optional[int] = None) -> None:
        key = ("member", group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        op = DelayedHeartbeat(self, group, member.member_id, False,
                              member.session_timeout_ms if timeout_ms is None else timeout_ms)
        self.heartbeat_purgatory.try_complete_else_watch(op, [key])

    def remove_heartbeat(self, group: Group, member: Member) -> None:
        member.heartbeat_satisfied = True  # the next check completes it, quietly
        self.heartbeat_purgatory.check_and_complete(("member", group.group_id, member.member_id))

    def on_expire_heartbeat(self, group: Group, member_id: str, pending: bool) -> None:
        if group.state == DEAD:
            return
        if pending:
            if member_id in group.pending_members:
                self.remove_pending_member(group, member_id)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat:
            self.remove_member_and_update(group, member)

    def remove_pending_member(self, group: Group, member_id: str) -> None:
        group.pending_members.discard(member_id)
        if group.state == PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(("join", group.group_id))

    def remove_member_and_update(self, group: Group, member: Member) -> None:
        if member.awaiting_join is not None:
            cb, member.awaiting_join = member.awaiting_join, None
            cb(JoinResult(E.UNKNOWN_MEMBER_ID, member.member_id))
        if member.awaiting_sync is not None:
            scb, member.awaiting_sync = member.awaiting_sync, None
            scb(SyncResult(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(group)
        elif group.state == PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(("join", group.group_id))

    # -------------------------------------------------------------- rebalance
    def prepare_rebalance(self, group: Group) -> None:
        if group.state == COMPLETING_REBALANCE:
            self.propagate_assignment(group, E.REBALANCE_IN_PROGRESS, reset=True)
        cfg = self.config
        op: DelayedJoin
        if group.state == EMPTY:
            op = InitialDelayedJoin(self, group, cfg.group_initial_rebalance_delay_ms,
                                    max(group.rebalance_timeout_ms - cfg.group_initial_rebalance_delay_ms, 0))
        else:
            op = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition(PREPARING_REBALANCE, self.now())
        self.rebalance_purgatory.try_complete_else_watch(op, [("join", group.group_id)])

    def maybe_prepare_rebalance(self, group: Group) -> None:
        if group.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self.prepare_rebalance(group)

    def on_complete_join(self, group: Group) -> None:
        # dynamic members that did not rejoin within the rebalance timeout are out
        for m in group.not_yet_rejoined():
            if m.group_instance_id is None:
                group.remove(m.member_id)
                self.remove_heartbeat(group, m)
        if group.state == DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # nobody rejoined but static members remain: wait for them another round
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms), [("join", group.group_id)])
            return
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition(COMPLETING_REBALANCE, self.now())
        else:
            group.protocol_name = None
            group.leader_id = None
            group.transition(EMPTY, self.now())
            self.store_group(group)
            return
        for m in list(group.members.values()):
            leader = m.member_id == group.leader_id
            result = JoinResult(E.NONE, m.member_id, group.generation_id, group.protocol_type,
                                group.protocol_name, group.leader_id or "",
                                group.current_member_metadata() if leader else [])
            if m.awaiting_join is not None:
                cb, m.awaiting_join = m.awaiting_join, None
                cb(result)
            self.complete_and_schedule_heartbeat(group, m)
            m.is_new = False

    def propagate_assignment(self, group: Group, error: int, reset: bool = False) -> None:
        for m in group.members.values():
            if reset:
                m.assignment = b""
            if m.awaiting_sync is not None:
                cb, m.awaiting_sync = m.awaiting_sync, None
                cb(SyncResult(error, group.protocol_type, group.protocol_name, m.assignment))
            # sessions restart after the assignment: expiries while waiting were ignored
            self.complete_and_schedule_heartbeat(group, m)

    # -------------------------------------------------------------- validation
    def _validate_member(self, group: Group, member_id: str, instance_id: Optional[str]) -> int:
        """``validateCurrentMember``: NONE, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID."""
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                return E.FENCED_INSTANCE_ID
            if known is None and member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    # -------------------------------------------------------------- JoinGroup
    def join_group(self, body: Any, version: int, client_id: str, client_host: str,
                   respond: Respond) -> None:
        cls = response_codec(ApiKey.JOIN_GROUP).cls
        member_id = body.member_id
        instance_id = body.group_instance_id if version >= 5 else None
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        rebalance_timeout = body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms

        def answer(r: JoinResult) -> None:
            respond(cls(error_code=r.error, generation_id=r.generation_id,
                        protocol_type=r.protocol_type, protocol_name=r.protocol_name
                        if r.protocol_name is not None or version >= 7 else "",
                        leader=r.leader_id, skip_assignment=r.skip_assignment, member_id=r.member_id,
                        members=[cls.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=md)
                                 for mid, iid, md in r.members]))

        cfg = self.config
        if not body.group_id:
            return answer(JoinResult(E.INVALID_GROUP_ID, member_id))
        if not cfg.group_min_session_timeout_ms <= body.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return answer(JoinResult(E.INVALID_SESSION_TIMEOUT, member_id))
        self.ensure_topic()
        if self.is_share_group(body.group_id):  # a share group's id (Kafka: no protocol in common)
            return answer(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        if body.group_id in self.consumer.groups:
            err = self.consumer.classic_join(body.group_id)
            if err:
                return answer(JoinResult(err, member_id))
        group = self.groups.get(body.group_id)
        if group is None:
            if member_id:
                return answer(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
            group = self.get_or_create_group(body.group_id)
        if group.state == DEAD:
            return answer(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports_protocols(body.protocol_type, protocols):
            return answer(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
        host = client_host
        if not member_id:
            new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                self._static_join(group, new_id, instance_id, client_id, host, rebalance_timeout,
                                  body.session_timeout_ms, body.protocol_type, protocols, answer)
            elif version >= 4:
                # KIP-394: the member id comes back first, the member joins with it
                group.pending_members.add(new_id)
                op = DelayedHeartbeat(self, group, new_id, True, body.session_timeout_ms)
                self.heartbeat_purgatory.try_complete_else_watch(op, [("member", group.group_id, new_id)])
                answer(JoinResult(E.MEMBER_ID_REQUIRED, new_id))
            else:
                self._add_member_and_rebalance(group, new_id, None, client_id, host, rebalance_timeout,
                                               body.session_timeout_ms, body.protocol_type, protocols, answer)
        elif member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, instance_id, client_id, host, rebalance_timeout,
                                           body.session_timeout_ms, body.protocol_type, protocols, answer)
        else:
            err = self._validate_member(group, member_id, instance_id)
            if err:
                return answer(JoinResult(err, member_id))
            member = group.members[member_id]
            if group.state == PREPARING_REBALANCE:
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                  body.session_timeout_ms, answer)
            elif group.state == COMPLETING_REBALANCE:
                if member.matches(protocols):
                    leader = member_id == group.leader_id
                    answer(JoinResult(E.NONE, member_id, group.generation_id, group.protocol_type,
                                      group.protocol_name, group.leader_id or "",
                                      group.current_member_metadata() if leader else []))
                else:
                    self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                      body.session_timeout_ms, answer)
            elif group.state == STABLE:
                if member_id == group.leader_id or not member.matches(protocols):
                    self._update_member_and_rebalance(group, member, protocols, rebalance_timeout,
                                                      body.session_timeout_ms, answer)
                else:
                    answer(JoinResult(E.NONE, member_id, group.generation_id, group.protocol_type,
                                      group.protocol_name, group.leader_id or ""))
            else:
                answer(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
        if group.state == PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(("join", group.group_id))

    def _add_member_and_rebalance(self, group: Group, member_id: str, instance_id: Optional[str],
                                  client_id: str, host: str, rebalance_timeout: int, session_timeout: int,
                                  protocol_type: str, protocols: list[tuple[str, bytes]],
                                  answer: Callable[[JoinResult], None]) -> None:
        member = Member(member_id, instance_id, client_id, host, rebalance_timeout, session_timeout,
                        protocol_type, protocols)
        member.is_new = True
        if group.state == PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, answer)
        self.complete_and_schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self.maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
                                     rebalance_timeout: int, session_timeout: int,
                                     answer: Callable[[JoinResult], None]) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_timeout, session_timeout
        member.awaiting_join = answer
        self.maybe_prepare_rebalance(group)

    def _static_join(self, group: Group, new_id: str, instance_id: str, client_id: str, host: str,
                     rebalance_timeout: int, session_timeout: int, protocol_type: str,
                     protocols: list[tuple[str, bytes]], answer: Callable[[JoinResult], None]) -> None:
        old_id = group.static_members.get(instance_id)
        if old_id is None or old_id not in group.members:
            self._add_member_and_rebalance(group, new_id, instance_id, client_id, host, rebalance_timeout,
                                           session_timeout, protocol_type, protocols, answer)
            return
        # a known static member with a new member id: it replaces the old one (the old one,
        # if still running, is fenced from now on)
        old = group.members.pop(old_id)
        self.remove_heartbeat(group, old)
        if old.awaiting_join is not None:
            cb, old.awaiting_join = old.awaiting_join, None
            cb(JoinResult(E.FENCED_INSTANCE_ID, old_id))
        if old.awaiting_sync is not None:
            scb, old.awaiting_sync = old.awaiting_sync, None
            scb(SyncResult(E.FENCED_INSTANCE_ID))
        old.member_id, old.client_id, old.client_host = new_id, client_id, host
        group.members[new_id] = old
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.state == STABLE:
            # as Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: the member's protocols
            # are replaced, and only a change of the group's selected protocol rebalances; its
            # metadata (a fresh consumer's owned partitions and generation) may differ
            old.protocols = protocols
        if group.state == STABLE and group.select_protocol() == group.protocol_name:
            # no rebalance: the member gets the current assignment
            old.rebalance_timeout_ms, old.session_timeout_ms = rebalance_timeout, session_timeout
            self.store_group(group)
            leader = new_id == group.leader_id
            self.complete_and_schedule_heartbeat(group, old)
            answer(JoinResult(E.NONE, new_id, group.generation_id, group.protocol_type,
                              group.protocol_name, group.leader_id or "",
                              group.current_member_metadata() if leader else [], skip_assignment=leader))
        elif group.state in (STABLE, COMPLETING_REBALANCE, PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, old, protocols, rebalance_timeout, session_timeout, answer)
        else:
            answer(JoinResult(E.UNKNOWN_MEMBER_ID, new_id))

    # -------------------------------------------------------------- SyncGroup
    def sync_group(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.SYNC_GROUP).cls

        def answer(r: SyncResult) -> None:
            respond(cls(error_code=r.error, protocol_type=r.protocol_type,
                        protocol_name=r.protocol_name, assignment=r.assignment))

        group = self.groups.get(body.group_id)
        instance_id = body.group_instance_id if version >= 3 else None
        if not body.group_id:
            return answer(SyncResult(E.INVALID_GROUP_ID))
        if group is None:
            return answer(SyncResult(E.UNKNOWN_MEMBER_ID))
        if group.state == DEAD:
            return answer(SyncResult(E.COORDINATOR_NOT_AVAILABLE))
        err = self._validate_member(group, body.member_id, instance_id)
        if err:
            return answer(SyncResult(err))
        if body.generation_id != group.generation_id:
            return answer(SyncResult(E.ILLEGAL_GENERATION))
        if version >= 5 and ((body.protocol_type is not None and body.protocol_type != group.protocol_type)
                             or (body.protocol_name is not None and body.protocol_name != group.protocol_name)):
            return answer(SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[body.member_id]
        if group.state == PREPARING_REBALANCE:
            return answer(SyncResult(E.REBALANCE_IN_PROGRESS))
        if group.state == STABLE:
            self.complete_and_schedule_heartbeat(group, member)
            return answer(SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment))
        if group.state != COMPLETING_REBALANCE:
            return answer(SyncResult(E.UNKNOWN_MEMBER_ID))
        member.awaiting_sync = answer
        if body.member_id == group.leader_id:
            given = {a.member_id: bytes(a.assignment) for a in body.assignments}
            for mid, m in group.members.items():
                m.assignment = given.get(mid, b"")
            self.store_group(group)
            self.propagate_assignment(group, E.NONE)
            group.transition(STABLE, self.now())

    # -------------------------------------------------------------- Heartbeat
    def heartbeat(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.HEARTBEAT).cls
        group = self.groups.get(body.group_id)
        instance_id = body.group_instance_id if version >= 3 else None
        if group is None:
            return respond(cls(error_code=E.UNKNOWN_MEMBER_ID))
        if group.state == DEAD:
            return respond(cls(error_code=E.COORDINATOR_NOT_AVAILABLE))
        err = self._validate_member(group, body.member_id, instance_id)
        if err:
            return respond(cls(error_code=err))
        if body.generation_id != group.generation_id:
            return respond(cls(error_code=E.ILLEGAL_GENERATION))
        if group.state == EMPTY:
            return respond(cls(error_code=E.UNKNOWN_MEMBER_ID))
        self.complete_and_schedule_heartbeat(group, group.members[body.member_id])
        respond(cls(error_code=E.REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else E.NONE))

    # -------------------------------------------------------------- LeaveGroup
    def leave_group(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.LEAVE_GROUP).cls
        leaving = ([(m.member_id, m.group_instance_id) for m in body.members] if version >= 3
                   else [(body.member_id, None)])
        group = self.groups.get(body.group_id)
        results: list[tuple[str, Optional[str], int]] = []
        for member_id, instance_id in leaving:
            if group is None or group.state == DEAD:
                code = E.UNKNOWN_MEMBER_ID if group is None else E.COORDINATOR_NOT_AVAILABLE
                results.append((member_id, instance_id, code))
                continue
            if instance_id is not None and not member_id:
                member_id = group.static_members.get(instance_id, "")
                if not member_id:
                    results.append(("", instance_id, E.UNKNOWN_MEMBER_ID))
                    continue
            if member_id in group.pending_members:
                self.remove_pending_member(group, member_id)
                results.append((member_id, instance_id, E.NONE))
                continue
            err = self._validate_member(group, member_id, instance_id)
            if err:
                results.append((member_id, instance_id, err))
                continue
            member = group.members[member_id]
            self.remove_heartbeat(group, member)
            self.remove_member_and_update(group, member)
            results.append((member_id, instance_id, E.NONE))
        if version >= 3:
            respond(cls(error_code=E.NONE, members=[cls.MemberResponse(
                member_id=m, group_instance_id=i, error_code=c) for m, i, c in results]))
        else:
            respond(cls(error_code=results[0][2]))

    # -------------------------------------------------------------- offsets
    def commit_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.OFFSET_COMMIT).cls
        generation = body.generation_id_or_member_epoch if version >= 1 else -1
        member_id = body.member_id if version >= 1 else ""
        instance_id = body.group_instance_id if version >= 7 else None
        now = self.core.wall_ms()

        layout = self._offsets_response_layout_by_id(body.topics)

        def missing(name: str) -> int:
            # v10 names topics by id: the broker filled in the names, "" where the id is unknown
            return E.UNKNOWN_TOPIC_ID if version >= 10 and not name else E.UNKNOWN_TOPIC_OR_PARTITION

        def result(code_for: Callable[[str, Any], int]) -> Any:
            return cls(topics=[cls.OffsetCommitResponseTopic(
                name=name, topic_id=tid, partitions=[cls.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code_for(name, p) if known else missing(name))
                    for p, known in parts]) for name, tid, parts in layout])

        if not body.group_id:
            return respond(result(lambda t, p: E.INVALID_GROUP_ID))
        self.ensure_topic()
        if self.is_share_group(body.group_id):  # a share group has no committed offsets
            return respond(result(lambda t, p: E.GROUP_ID_NOT_FOUND))
        cg = self.consumer.groups.get(body.group_id)
        if cg is not None:
            cerr = self.consumer.offset_commit_error(cg, member_id, generation, version)
            if cerr:
                return respond(result(lambda t, p: cerr))
            codes, last = self._store_offsets(cg, body.topics, version >= 6, now)
            return self._answer_when_stored(body.group_id, codes, last, result, respond)
        group = self.groups.get(body.group_id)
        err: int = E.NONE
        if group is None:
            if generation >= 0:
                err = E.ILLEGAL_GENERATION
            else:
                group = self.get_or_create_group(body.group_id)
        if group is not None and not err:
            if group.state == DEAD:
                err = E.COORDINATOR_NOT_AVAILABLE
            elif generation < 0 and group.state == EMPTY:
                pass  # the group only stores offsets in Kafka
            elif group.state == COMPLETING_REBALANCE:
                err = E.REBALANCE_IN_PROGRESS
            else:
                err = self._validate_member(group, member_id, instance_id)
                if not err and generation != group.generation_id:
                    err = E.ILLEGAL_GENERATION
                if not err:
                    self.complete_and_schedule_heartbeat(group, group.members[member_id])
        if err or group is None:
            return respond(result(lambda t, p: err))
        codes, last = self._store_offsets(group, body.topics, version >= 6, now)
        self._answer_when_stored(body.group_id, codes, last, result, respond)

    def _offsets_response_layout(self, topics: Any) -> list[tuple[str, list[tuple[Any, bool]]]]:
        """:meth:`_offsets_response_layout_by_id` without the ids."""
        return [(name, parts) for name, _, parts in self._offsets_response_layout_by_id(topics)]

    def _offsets_response_layout_by_id(self, topics: Any) -> list[tuple[str, Uuid, list[tuple[Any, bool]]]]:
        """The order Kafka answers an offset commit's partitions in: the broker first answers
        the partitions it does not have (UNKNOWN_TOPIC_OR_PARTITION, in request order), then
        the coordinator's results are merged in (appended to a topic already answered, or as
        topics of their own after them). Each partition comes with whether it exists. Topics
        are told apart by name and id: OffsetCommit v10's unknown ids all have the name ""."""
        out: dict[tuple[str, Uuid], list[tuple[Any, bool]]] = {}
        valid: list[tuple[tuple[str, Uuid], Any]] = []
        for t in topics:
            key = (t.name, getattr(t, "topic_id", Uuid.ZERO))
            for p in t.partitions:
                if self.core.has_partition(t.name, p.partition_index):
                    valid.append((key, p))
                else:
                    out.setdefault(key, []).append((p, False))
        for key, p in valid:
            out.setdefault(key, []).append((p, True))
        return [(name, tid, parts) for (name, tid), parts in out.items()]

    def _answer_when_stored(self, group_id: str, codes: dict[tuple[str, int], int], last: int,
                            result: Callable[[Callable[[str, Any], int]], Any], respond: Respond) -> None:
        """Answer an OffsetCommit once its records (up to offset ``last``, -1: none written)
        are committed in ``__consumer_offsets``, as Kafka appends them with acks=all: a commit
        answered is not lost with its coordinator. One that does not commit fails the stored
        partitions (NOT_COORDINATOR once leadership moved, else REQUEST_TIMED_OUT)."""
        def then(err: int) -> None:
            respond(result(lambda t, p: codes.get((t, p.partition_index), err)))

        if last < 0:
            then(E.NONE)
            return
        self.core.when_replicated(self.partition_log(group_id), last, then,
                                  self.config.offsets_commit_timeout_ms)

    def _store_offsets(self, group: Union[Group, ConsumerGroup], topics: Any, with_epoch: bool,
                       now: int) -> tuple[dict[tuple[str, int], int], int]:
        """Write an OffsetCommit's offsets for a validated group; the per-partition errors and
        the offset of the last record written (-1: none)."""
        codes: dict[tuple[str, int], int] = {}
        records, oms = [], {}
        for t in topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not self.core.has_partition(t.name, p.partition_index):
                    codes[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                elif p.committed_metadata is not None and \
                        len(p.committed_metadata.encode()) > self.config.offset_metadata_max_bytes:
                    codes[tp] = E.OFFSET_METADATA_TOO_LARGE
                else:
                    om = OffsetAndMetadata(p.committed_offset, p.committed_leader_epoch if with_epoch else -1,
                                           p.committed_metadata or "", now)
                    oms[tp] = om
                    records.append(self.offset_record(group.group_id, tp, om))
        if not records:
            return codes, -1
        base = self.append_records(group.group_id, records)
        for i, (tp, om) in enumerate(oms.items()):
            om.record_offset = base + i
            group.offsets[tp] = om
        return codes, base + len(records) - 1

    def fetch_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.OFFSET_FETCH).cls
        if version < 8:
            wanted = [(body.group_id, None if body.topics is None else
                       [(t.name, list(t.partition_indexes), Uuid.ZERO) for t in body.topics], None, -1)]
        else:
            # v10 names topics by id: the broker filled in the names, "" where the id is unknown
            wanted = [(g.group_id, None if g.topics is None else
                       [(t.name, list(t.partition_indexes), t.topic_id if version >= 10 else Uuid.ZERO)
                        for t in g.topics],
                       g.member_id if version >= 9 else None, g.member_epoch if version >= 9 else -1)
                      for g in body.groups]
        stable = version >= 7 and body.require_stable
        out: list[Any] = []
        errors: dict[str, int] = {}
        for group_id, topics, fetch_member, fetch_epoch in wanted:
            # a consumer group's member fetches at its current epoch (KIP-848)
            gerr = self.consumer.offset_fetch_error(group_id, fetch_member, fetch_epoch)
            if gerr:
                errors[group_id] = gerr
                out.append((group_id, []))
                continue
            group: Union[Group, ConsumerGroup, None] = \
                self.consumer.groups.get(group_id) or self.groups.get(group_id)
            offsets = group.offsets if group is not None else {}
            pending: set[tuple[str, int]] = set()
            if group is not None:
                for items in group.pending_txn_offsets.values():
                    pending.update(items)
            if topics is None:
                by_topic: dict[str, list[int]] = {}
                for t, p in sorted(offsets):
                    by_topic.setdefault(t, []).append(p)
                ids = {n: tid for n, (tid, _, _) in self.core.known_topics().items()} if version >= 10 else {}
                topics = [(n, ps, ids.get(n, Uuid.ZERO)) for n, ps in by_topic.items()]
            rows = []
            for name, parts, tid in topics:
                if version >= 10 and not name:
                    continue  # an unknown id: answered by the broker, after the coordinator's topics
                prow = []
                for p in parts:
                    om = offsets.get((name, p))
                    code = E.UNSTABLE_OFFSET_COMMIT if stable and (name, p) in pending else E.NONE
                    if om is None or code:
                        prow.append((p, -1, -1, "", code))
                    else:
                        prow.append((p, om.offset, om.leader_epoch, om.metadata, code))
                rows.append((name, tid, prow))
            rows.extend((name, tid, [(p, -1, -1, "", E.UNKNOWN_TOPIC_ID) for p in parts])
                        for name, parts, tid in topics if version >= 10 and not name)
            out.append((group_id, rows))
        if version < 8:
            rows = out[0][1]
            respond(cls(error_code=E.NONE, topics=[cls.OffsetFetchResponseTopic(name=n, partitions=[
                cls.OffsetFetchResponsePartition(partition_index=p, committed_offset=o,
                                                 committed_leader_epoch=e, metadata=m, error_code=c)
                for p, o, e, m, c in ps]) for n, _, ps in rows]))
            return
        respond(cls(groups=[cls.OffsetFetchResponseGroup(group_id=g, error_code=errors.get(g, E.NONE), topics=[
            cls.OffsetFetchResponseTopics(name=n, topic_id=tid, partitions=[
                cls.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                  committed_leader_epoch=e, metadata=m, error_code=c)
                for p, o, e, m, c in ps]) for n, tid, ps in rows]) for g, rows in out]))

    def delete_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.OFFSET_DELETE).cls
        group = self.groups.get(body.group_id)

        def answer(top: int, codes: dict[tuple[str, int], int]) -> None:
            respond(cls(error_code=top, topics=[] if top else [cls.OffsetDeleteResponseTopic(
                name=name, partitions=[cls.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=codes.get((name, p.partition_index), 0))
                    for p, _ in parts]) for name, parts in self._offsets_response_layout(body.topics)]))

        if not body.group_id:
            return answer(E.INVALID_GROUP_ID, {})
        cg = self.consumer.groups.get(body.group_id)
        holder: Union[Group, ConsumerGroup]
        subscribed: Optional[set[str]]
        if cg is not None:
            holder, subscribed = cg, self.consumer.subscribed_topics(cg)
        else:
            if group is None or group.state == DEAD:
                return answer(E.GROUP_ID_NOT_FOUND, {})
            subscribed = group.subscribed_topics() if group.state != EMPTY else set()
            if group.state != EMPTY and subscribed is None:
                return answer(E.NON_EMPTY_GROUP, {})
            holder = group
        codes: dict[tuple[str, int], int] = {}
        records = []
        for t in body.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not self.core.has_partition(*tp):
                    codes[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed and t.name in subscribed:
                    codes[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                elif holder.offsets.pop(tp, None) is not None:
                    records.append(self.offset_record(holder.group_id, tp, None))
        if records:
            self.append_records(holder.group_id, records)
        answer(E.NONE, codes)

    # -------------------------------------------------------------- admin
    def describe_groups(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_GROUPS).cls
        out = []
        for gid in body.groups:
            group = self.groups.get(gid)
            # the empty group id is described as any unknown group is (Kafka keeps that for
            # backward compatibility)
            if group is None or group.state == DEAD:
                code = E.GROUP_ID_NOT_FOUND if version >= 6 else E.NONE
                what = ("is not a classic group" if gid in self.consumer.groups or self.is_share_group(gid)
                        else "not found")
                out.append(cls.DescribedGroup(
                    error_code=code, error_message=f"Group {gid} {what}." if code else None,
                    group_id=gid, group_state=DEAD, protocol_type="", protocol_data="", members=[]))
            else:
                stable = group.state == STABLE
                out.append(cls.DescribedGroup(
                    error_code=E.NONE, group_id=gid, group_state=group.state,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=[cls.DescribedGroupMember(
                        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata(group.protocol_name) if stable else b"",
                        member_assignment=m.assignment if stable else b"")
                        for m in group.members.values()]))
        respond(cls(groups=out))

    def list_groups(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.LIST_GROUPS).cls
        states = {s.lower() for s in body.states_filter} if version >= 4 else set()
        types = {t.lower() for t in body.types_filter} if version >= 5 else set()
        out = []
        for group in self.groups.values():
            if group.state == DEAD or (states and group.state.lower() not in states) or \
                    (types and "classic" not in types):
                continue
            out.append(cls.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type or "",
                                       group_state=group.state, group_type="classic"))
        for cg in self.consumer.groups.values():
            if (states and cg.state.lower() not in states) or (types and "consumer" not in types):
                continue
            out.append(cls.ListedGroup(group_id=cg.group_id, protocol_type="consumer",
                                       group_state=cg.state, group_type="consumer"))
        if self.share is not None and (not types or "share" in types):
            for gid, state in self.share.listed(states):
                out.append(cls.ListedGroup(group_id=gid, protocol_type="share", group_state=state,
                                           group_type="share"))
        respond(cls(error_code=E.NONE, groups=out))

    def delete_groups(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DELETE_GROUPS).cls
        results = []
        for gid in body.groups_names:
            group = self.groups.get(gid)
            cg = self.consumer.groups.get(gid)
            code: int
            # v3 carries a message only for an unknown group (GroupIdNotFoundException's own);
            # a non-empty group has none in Kafka 4.4
            message: Optional[str] = None
            if cg is not None:  # (the empty group id is an unknown group, as in Kafka)
                code = self.consumer.delete_group(cg)
            elif self.is_share_group(gid):
                assert self.share is not None
                code = self.share.delete_group(gid)
            elif group is None or group.state == DEAD:
                code, message = E.GROUP_ID_NOT_FOUND, f"Group {gid} not found."
            elif group.state != EMPTY:
                code = E.NON_EMPTY_GROUP
            else:
                records = [self.offset_record(gid, tp, None) for tp in group.offsets]
                records.append(self.group_record(group, deleted=True))
                self.append_records(gid, records)
                group.transition(DEAD, self.now())
                del self.groups[gid]
                code = E.NONE
            results.append(cls.DeletableGroupResult(group_id=gid, error_code=code,
                                                    error_message=message if version >= 3 else None))
        respond(cls(throttle_time_ms=0, results=results))

    # -------------------------------------------------------------- transactional offsets
    def txn_commit_offsets(self, body: Any, version: int, respond: Respond) -> None:
        """TxnOffsetCommit: offsets written in the producer's transaction, visible once the
        COMMIT marker lands on the group's partition (:meth:`complete_txn`). As Kafka's
        coordinator, the write is verified with the transaction coordinator first (KIP-890:
        the group's offsets partition must be in the transaction; v5+ from a TV2 producer
        puts it there, in place of AddOffsetsToTxn). v6 names topics by id."""
        ids: dict[str, Any] = {}
        if version >= 6:
            names = {tid: n for n, (tid, _, _) in self.core.known_topics().items()}
            for t in body.topics:
                # an unknown id gets a name no topic has: its partitions are answered unknown
                t.name = names.get(t.topic_id) or f"\0{t.topic_id}"
                ids[t.name] = t.topic_id
        self.ensure_topic()  # (AddOffsetsToTxn, which v5+ replaces, has it created)
        partition = partition_for(body.group_id, self.num_partitions)
        lg = self.core.logs.get(OFFSETS_TOPIC, partition)
        if not self.config.transaction_partition_verification_enable or \
                (lg is not None and lg.has_ongoing_transaction(body.producer_id, body.producer_epoch)):
            return self._txn_commit_offsets(body, version, respond, E.NONE, ids)
        add = version >= 5 and self.core.transaction_version() >= 2

        def verified(codes: dict[tuple[str, int], int]) -> None:
            code = leader_verification_error(codes[(OFFSETS_TOPIC, partition)], generic_errors=version >= 4)
            # Kafka's normalizeException: a timed-out or failed write is COORDINATOR_NOT_AVAILABLE
            if code in (E.NETWORK_EXCEPTION, E.REQUEST_TIMED_OUT, E.NOT_ENOUGH_REPLICAS):
                code = E.COORDINATOR_NOT_AVAILABLE
            if not code and not self.core.leads(OFFSETS_TOPIC, partition):
                code = E.NOT_COORDINATOR  # the group moved while the coordinator was asked
            self._txn_commit_offsets(body, version, respond, code, ids)

        self.core.verify_txn_partitions(body.transactional_id, body.producer_id, body.producer_epoch,
                                        [(OFFSETS_TOPIC, partition)], add, verified)
        return None

    def _txn_commit_offsets(self, body: Any, version: int, respond: Respond, err: int,
                            ids: dict[str, Any]) -> None:
        cls = response_codec(ApiKey.TXN_OFFSET_COMMIT).cls
        group = self.groups.get(body.group_id)
        cg = self.consumer.groups.get(body.group_id)
        # v3+: the member's generation (classic) or epoch (consumer group); -1 without group metadata
        generation = body.generation_id_or_member_epoch if version >= 3 else -1
        if err:
            pass
        elif cg is not None:
            # a transactional producer without group metadata (epoch -1) commits as Kafka's
            # old sendOffsetsToTransaction(offsets, groupId) did
            if generation >= 0:
                err = self.consumer.offset_commit_error(cg, body.member_id, generation, version,
                                                        transactional=True)
        elif group is not None and generation >= 0:
            if group.state == DEAD:
                err = E.COORDINATOR_NOT_AVAILABLE
            else:
                err = self._validate_member(group, body.member_id, body.group_instance_id)
                if not err and generation != group.generation_id:
                    err = E.ILLEGAL_GENERATION
        elif group is None and generation >= 0:
            err = E.ILLEGAL_GENERATION
        now = self.core.wall_ms()
        codes: dict[tuple[str, int], int] = {}
        records, oms = [], {}
        if not err:
            holder: Union[Group, ConsumerGroup] = cg if cg is not None else self.get_or_create_group(body.group_id)
            for t in body.topics:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if not self.core.has_partition(*tp):
                        codes[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                    elif p.committed_metadata is not None and \
                            len(p.committed_metadata.encode()) > self.config.offset_metadata_max_bytes:
                        codes[tp] = E.OFFSET_METADATA_TOO_LARGE
                    else:
                        om = OffsetAndMetadata(p.committed_offset, p.committed_leader_epoch if version >= 2 else -1,
                                               p.committed_metadata or "", now)
                        oms[tp] = om
                        records.append(self.offset_record(body.group_id, tp, om))
            if records:
                base = self.append_records(body.group_id, records, body.producer_id, body.producer_epoch)
                pend = holder.pending_txn_offsets.setdefault(body.producer_id, {})
                for i, (tp, om) in enumerate(oms.items()):
                    om.record_offset = base + i
                    pend[tp] = om
        respond(cls(topics=[cls.TxnOffsetCommitResponseTopic(name=name, topic_id=ids.get(name, Uuid.ZERO), partitions=[
            cls.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=(err or codes.get((name, p.partition_index), 0)) if known
                else E.UNKNOWN_TOPIC_ID if name.startswith("\0") else E.UNKNOWN_TOPIC_OR_PARTITION)
            for p, known in parts]) for name, parts in self._offsets_response_layout(body.topics)]))

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker landed on ``__consumer_offsets`` ``partition``: the producer's
        pending offsets of the groups there become committed, or are dropped."""
        n = self.num_partitions
        holders: list[Union[Group, ConsumerGroup]] = [*self.groups.values(), *self.consumer.groups.values()]
        for group in holders:
            if partition_for(group.group_id, n) != partition:
                continue
            pend = group.pending_txn_offsets.pop(producer_id, None)
            if not pend or not commit:
                continue
            for tp, om in pend.items():
                old = group.offsets.get(tp)
                if old is None or old.record_offset < om.record_offset:
                    group.offsets[tp] = om

    # -------------------------------------------------------------- deleted topics
    def on_partitions_deleted(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions were deleted with their topic: the offsets groups committed for them go,
        as Kafka's ``OffsetMetadataManager.onPartitionsDeleted`` does (a tombstone for each
        committed or pending transactional offset), so a topic created again under the name is
        read from where the group's reset policy says, not from the old topic's offsets."""
        gone = set(partitions)
        holders: list[Union[Group, ConsumerGroup]] = [*self.groups.values(), *self.consumer.groups.values()]
        for group in holders:
            if not self.core.leads(OFFSETS_TOPIC, partition_for(group.group_id, self.num_partitions)):
                continue  # only the coordinator writes (a follower's copy is replicated)
            tps = {tp for tp in group.offsets if tp in gone}
            for pend in group.pending_txn_offsets.values():
                tps.update(tp for tp in pend if tp in gone)
            if not tps:
                continue
            for tp in tps:
                group.offsets.pop(tp, None)
                for pend in group.pending_txn_offsets.values():
                    pend.pop(tp, None)
            self.append_records(group.group_id, [self.offset_record(group.group_id, tp, None)
                                                 for tp in sorted(tps)])

    def shutdown(self) -> None:
        self.rebalance_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        self.consumer.shutdown()

