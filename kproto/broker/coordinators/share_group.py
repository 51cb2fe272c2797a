"""Share groups of KIP-932: membership and server-side assignment (Kafka's ``GroupMetadataManager``
for share groups and its ``SimpleAssignor``), sans-I/O.

A share group's members heartbeat with ShareGroupHeartbeat; the coordinator keeps Kafka's epochs:
the **group epoch** is bumped when a member joins, leaves or changes its subscription, and when
the state of newly subscribed partitions has been initialized; the **assignment epoch** is the
group epoch the assignor last ran at. Unlike consumer groups, a share group hands a partition to
several members at once (the share-partition arbitrates the records), so there is no revocation:
a member takes its target assignment, and the target epoch, at its next heartbeat.

Partitions are assigned only once their share-partition state is initialized: a member that
subscribes to a new topic first gets an assignment without it; the coordinator then initializes
the state of its partitions through the persister (at ``share.auto.offset.reset``, resolved at
the first fetch) and bumps the group epoch, so the next assignment includes them.

The assignor is Kafka 4.4's simple one (:mod:`~kproto.broker.coordinators.share_assignor`):
balanced, then sticky; a partition is shared by several members only when there are more
members than partitions. Membership is written to ``__consumer_offsets`` as Kafka 4.4 writes it (record
types 10-15: ShareGroupMemberMetadata, ShareGroupMetadata, ShareGroupTargetAssignmentMetadata/
Member, ShareGroupCurrentMemberAssignment, ShareGroupStatePartitionMetadata; tombstones for
departures and deletions) and read back at start, the members' session timeouts restarted.

The offset admin APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets) and the share-group side of ListGroups, DescribeGroups and DeleteGroups
are answered here from the persisted state.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

import logging
import struct

from kproto.broker.context import BrokerContext
from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for, record_key, record_value
from kproto.broker.coordinators.share_assignor import share_assign
from kproto.broker.coordinators.share_state import ShareStateCoordinator
from kproto.broker.timer import CallbackTask
from kproto.codecs import message
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.errors import DecodeError
from kproto.schemas.api_keys import ApiKey

__all__ = ["ShareGroupCoordinator", "ShareGroup", "ShareMember", "SHARE_GROUP_OPERATIONS",
           "RECORD_TYPES"]

log = logging.getLogger("kproto.broker.share")
#: __consumer_offsets record types of share groups (Kafka's CoordinatorRecordType)
(T_MEMBER, T_METADATA, T_TARGET_METADATA, T_TARGET_MEMBER, T_CURRENT,
 T_STATE_PARTITIONS) = 10, 11, 12, 13, 14, 15
RECORD_TYPES = frozenset(range(10, 16))
_NAMES = {T_MEMBER: "ShareGroupMemberMetadata", T_METADATA: "ShareGroupMetadata",
          T_TARGET_METADATA: "ShareGroupTargetAssignmentMetadata", T_TARGET_MEMBER: "ShareGroupTargetAssignmentMember",
          T_CURRENT: "ShareGroupCurrentMemberAssignment", T_STATE_PARTITIONS: "ShareGroupStatePartitionMetadata"}
_I16 = struct.Struct(">h")
Record = tuple[bytes, Optional[bytes]]

Assignment = dict[Uuid, set[int]]
Respond = Callable[[Any], None]
LEAVE_EPOCH = -1
EMPTY, STABLE = "Empty", "Stable"
#: The operations a share group allows without an authorizer (READ, DELETE, DESCRIBE,
#: DESCRIBE_CONFIGS, ALTER_CONFIGS), as ShareGroupDescribe reports them.
SHARE_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
_NO_OPERATIONS = -(1 << 31)


class _Error(Exception):
    def __init__(self, code: int, message: Optional[str]) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class ShareMember:
    """A share group member: its subscription and current assignment."""

    member_id: str
    rack_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


class ShareGroup:
    """Epochs, members, the target assignment and the partitions whose state is initialized."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignment_time_ms = -1
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Assignment] = {}
        #: partitions whose share-partition state was initialized: topic id -> partitions
        self.initialized: Assignment = {}

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    @property
    def type(self) -> str:
        return "share"


class OffsetsTopic(Protocol):
    """What the share coordinator uses of the classic one: writing to ``__consumer_offsets``."""

    def append_records(self, group_id: str, records: list[tuple[bytes, Optional[bytes]]],
                       producer_id: int = -1, producer_epoch: int = -1) -> int: ...


class ShareEvents(Protocol):
    """What the share-partition manager hears from the coordinator."""

    def member_left(self, group_id: str, member_id: str) -> None: ...

    def group_deleted(self, group_id: str) -> None: ...

    def reset_partition(self, group_id: str, topic_id: Uuid, partition: int) -> None: ...


class ShareGroupCoordinator:
    """Every share group of the broker."""

    def __init__(self, core: BrokerContext, persister: ShareStateCoordinator,
                 is_other_group: Callable[[str], Optional[str]], offsets: Optional[OffsetsTopic] = None) -> None:
        self.core, self.persister = core, persister
        #: the type of a classic or consumer group of that id (None: no such group)
        self.is_other_group = is_other_group
        #: where the groups' records go (None: kept in memory only)
        self.offsets = offsets
        self.groups: dict[str, ShareGroup] = {}
        self.events: Optional[ShareEvents] = None
        self._timers: dict[tuple[str, str], CallbackTask] = {}
        # groups whose state is known from __share_group_state come back (empty unless their
        # records in __consumer_offsets say otherwise)
        for gid, tid, p in persister.states:
            self.groups.setdefault(gid, ShareGroup(gid)).initialized.setdefault(tid, set()).add(p)
        if offsets is not None and OFFSETS_TOPIC in core.logs.topics:
            self._load()

    # ------------------------------------------------------------------ records
    @staticmethod
    def _rec(rtype: int, key: dict[str, Any], value: Any) -> Record:
        k = record_key(rtype, message(_NAMES[rtype] + "Key").cls(**key))
        return k, None if value is None else record_value(0, value)

    @staticmethod
    def _tps(cls: Any, a: Assignment) -> list[Any]:
        return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.items()) if ps]

    def _member_records(self, gid: str, m: ShareMember, tomb: bool = False) -> list[Record]:
        """The member's metadata and current assignment (tombstones when it leaves), and
        its target assignment's tombstone then."""
        key = {"group_id": gid, "member_id": m.member_id}
        cur = message("ShareGroupCurrentMemberAssignmentValue").cls
        if tomb:
            return [self._rec(T_CURRENT, key, None), self._rec(T_TARGET_MEMBER, key, None),
                    self._rec(T_MEMBER, key, None)]
        return [self._rec(T_MEMBER, key, message("ShareGroupMemberMetadataValue").cls(
                    rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names))),
                self._rec(T_CURRENT, key, cur(member_epoch=m.member_epoch, previous_member_epoch=m.member_epoch,
                                              state=0, assigned_partitions=self._tps(cur.TopicPartitions, m.assigned)))]

    def _epoch_record(self, group: ShareGroup, tomb: bool = False) -> Record:
        return self._rec(T_METADATA, {"group_id": group.group_id}, None if tomb else
                         message("ShareGroupMetadataValue").cls(epoch=group.group_epoch, metadata_hash=0))

    def _target_records(self, group: ShareGroup) -> list[Record]:
        cls = message("ShareGroupTargetAssignmentMemberValue").cls
        out = [self._rec(T_TARGET_MEMBER, {"group_id": group.group_id, "member_id": mid},
                         cls(topic_partitions=self._tps(cls.TopicPartition, a))) for mid, a in group.target.items()]
        out.append(self._rec(T_TARGET_METADATA, {"group_id": group.group_id},
                             message("ShareGroupTargetAssignmentMetadataValue").cls(
                                 assignment_epoch=group.assignment_epoch, assignment_timestamp=self.core.wall_ms())))
        return out

    def _initialized_record(self, group: ShareGroup, tomb: bool = False) -> Record:
        cls = message("ShareGroupStatePartitionMetadataValue").cls
        names = {tid: n for n, (tid, _, _) in self.core.known_topics().items()}
        return self._rec(T_STATE_PARTITIONS, {"group_id": group.group_id}, None if tomb else cls(
            initializing_topics=[], deleting_topics=[], initialized_topics=[
                cls.TopicPartitionsInfo(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
                for t, ps in sorted(group.initialized.items()) if ps]))

    def _write(self, gid: str, records: list[Record]) -> None:
        if records and self.offsets is not None:
            self.offsets.append_records(gid, records)

    def load_partitions(self, partitions: set[int]) -> None:
        """This broker became the leader of these ``__consumer_offsets`` partitions (a
        cluster's group coordinator): their share groups are read back."""
        if partitions and self.offsets is not None and OFFSETS_TOPIC in self.core.logs.topics:
            self._load(partitions)

    def unload_partitions(self, partitions: set[int]) -> None:
        """This broker stopped leading these partitions: their share groups go."""
        n = len(self.core.logs.topics[OFFSETS_TOPIC].partitions) if OFFSETS_TOPIC in self.core.logs.topics else 0
        for gid in [g for g in self.groups if n and partition_for(g, n) in partitions]:
            del self.groups[gid]
            for key in [k for k in self._timers if k[0] == gid]:
                self._timers.pop(key).cancel()

    def _load(self, partitions: Optional[set[int]] = None) -> None:
        """Read the share groups back from ``__consumer_offsets`` (record types 10-15)."""
        for lg in self.core.logs.topics[OFFSETS_TOPIC].logs:
            if lg is None or not self.core.leads(lg.topic, lg.partition):
                continue
            if partitions is not None and lg.partition not in partitions:
                continue
            for batch in lg.batches():
                if batch.is_control:
                    continue
                for r in batch.records():
                    if r.key is None or len(r.key) < 2 or _I16.unpack_from(r.key, 0)[0] not in RECORD_TYPES:
                        continue
                    try:
                        self._replay(r.key, r.value)
                    except (DecodeError, struct.error, KeyError):
                        log.warning("unreadable share group record at offset %d", r.offset)
        for group in self.groups.values():
            for mid in group.members:
                self._schedule_session(group.group_id, mid)

    def _replay(self, key: bytes, value: Optional[bytes]) -> None:
        rtype = _I16.unpack_from(key, 0)[0]
        k = message(_NAMES[rtype] + "Key").decode(memoryview(key)[2:], 0)
        gid = k.group_id
        if value is None:
            group = self.groups.get(gid)
            if group is None:
                return
            if rtype == T_MEMBER:
                group.members.pop(k.member_id, None)
            elif rtype == T_TARGET_MEMBER:
                group.target.pop(k.member_id, None)
            elif rtype == T_METADATA:  # the group was deleted
                del self.groups[gid]
            elif rtype == T_STATE_PARTITIONS:
                group.initialized.clear()
            return
        v = message(_NAMES[rtype] + "Value").decode(memoryview(value)[2:], _I16.unpack_from(value, 0)[0])
        group = self.groups.setdefault(gid, ShareGroup(gid))
        if rtype == T_MEMBER:
            m = group.members.setdefault(k.member_id, ShareMember(k.member_id))
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = list(v.subscribed_topic_names)
        elif rtype == T_CURRENT:
            m = group.members.setdefault(k.member_id, ShareMember(k.member_id))
            m.member_epoch = v.member_epoch
            m.assigned = {tp.topic_id: set(tp.partitions) for tp in v.assigned_partitions}
        elif rtype == T_METADATA:
            group.group_epoch = v.epoch
        elif rtype == T_TARGET_MEMBER:
            group.target[k.member_id] = {tp.topic_id: set(tp.partitions) for tp in v.topic_partitions}
        elif rtype == T_TARGET_METADATA:
            group.assignment_epoch = v.assignment_epoch
        elif rtype == T_STATE_PARTITIONS:
            group.initialized = {t.topic_id: set(t.partitions) for t in v.initialized_topics}

    # ------------------------------------------------------------------ settings
    def _cfg(self, group_id: str, name: str) -> int:
        """A share setting of the group (its group config, else the broker's)."""
        return int(self.core.group_configs.value(group_id, name))

    # ------------------------------------------------------------------ ShareGroupHeartbeat
    def heartbeat(self, body: Any, version: int, client_id: str, client_host: str, respond: Respond) -> None:
        cls = response_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
        try:
            self._validate(body)
            if body.member_epoch == LEAVE_EPOCH:
                respond(self._leave(body))
            else:
                resp, init = self._heartbeat(body, client_id, client_host)
                respond(resp)
                if init:
                    self._initialize(body.group_id)
        except _Error as exc:
            respond(cls(error_code=exc.code, error_message=exc.message))

    @staticmethod
    def _validate(body: Any) -> None:
        if not body.group_id or not body.group_id.strip():
            raise _Error(E.INVALID_REQUEST, "GroupId can't be empty.")
        if not body.member_id or not body.member_id.strip():
            raise _Error(E.INVALID_REQUEST, None)
        if body.rack_id is not None and not body.rack_id.strip():
            raise _Error(E.INVALID_REQUEST, "RackId can't be empty.")
        if body.member_epoch == 0 and not body.subscribed_topic_names:
            raise _Error(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        if body.member_epoch < LEAVE_EPOCH:
            raise _Error(E.INVALID_REQUEST, "MemberEpoch is invalid.")

    def _group(self, gid: str, create: bool, epoch: int) -> ShareGroup:
        group = self.groups.get(gid)
        if group is not None:
            return group
        other = self.is_other_group(gid)
        if other is not None:
            raise _Error(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        if not create:
            what = "Group" if epoch == LEAVE_EPOCH else "Share group"
            raise _Error(E.GROUP_ID_NOT_FOUND, f"{what} {gid} not found.")
        group = self.groups[gid] = ShareGroup(gid)
        group.group_epoch = 1  # a new group's first heartbeat bumps twice (Kafka 4.4)
        return group

    def _heartbeat(self, body: Any, client_id: str, client_host: str) -> tuple[Any, bool]:
        cls = response_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
        gid, mid, epoch = body.group_id, body.member_id, body.member_epoch
        group = self._group(gid, create=epoch == 0, epoch=epoch)
        old = group.members.get(mid)
        if old is None:
            if epoch != 0:
                raise _Error(E.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            member = ShareMember(mid)
        else:
            if epoch > old.member_epoch:
                raise _Error(E.FENCED_MEMBER_EPOCH, f"The share group member has a greater member epoch "
                             f"({epoch}) than the one known by the group coordinator ({old.member_epoch}). "
                             "The member must abandon all its partitions and rejoin.")
            if 0 < epoch < old.member_epoch:
                raise _Error(E.FENCED_MEMBER_EPOCH, f"The share group member has a smaller member epoch "
                             f"({epoch}) than the one known by the group coordinator ({old.member_epoch}). "
                             "The member must abandon all its partitions and rejoin.")
            member = old
        before = (member.rack_id, member.subscribed_topic_names)
        member.client_id, member.client_host = client_id, client_host
        if body.rack_id is not None:
            member.rack_id = body.rack_id
        if body.subscribed_topic_names is not None:
            member.subscribed_topic_names = sorted(set(body.subscribed_topic_names))
        records: list[Record] = []
        if old is None or before != (member.rack_id, member.subscribed_topic_names):
            group.members[mid] = member
            group.group_epoch += 1
            records.append(self._epoch_record(group))
        now = self.core.clock.now_ms()
        interval = self._cfg(gid, "share.assignment.interval.ms")
        if group.group_epoch > group.assignment_epoch and (
                group.assignment_time_ms < 0 or now - group.assignment_time_ms >= interval):
            self._compute_target(group, now)
            records += self._target_records(group)
        previous = (member.member_epoch, {t: set(ps) for t, ps in member.assigned.items()})
        member.member_epoch = group.assignment_epoch
        member.assigned = {t: set(ps) for t, ps in group.target.get(mid, {}).items() if ps}
        self._schedule_session(gid, mid)
        changed = epoch == 0 or previous != (member.member_epoch, member.assigned)
        if changed or records:
            records += self._member_records(gid, member)
        self._write(gid, records)
        assignment = cls.Assignment(topic_partitions=[
            cls.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(member.assigned.items())
        ]) if changed else None
        resp = cls(error_code=E.NONE, member_id=mid, member_epoch=member.member_epoch,
                   heartbeat_interval_ms=self._cfg(gid, "share.heartbeat.interval.ms"), assignment=assignment)
        return resp, bool(self._uninitialized(group))

    def _subscribed(self, group: ShareGroup) -> list[tuple[str, Uuid, int]]:
        """(name, id, partition count) of the existing topics the members subscribe to."""
        topics = self.core.known_topics()
        names = sorted({n for m in group.members.values() for n in m.subscribed_topic_names})
        return [(n, topics[n][0], topics[n][1]) for n in names if n in topics and not topics[n][2]]

    def _uninitialized(self, group: ShareGroup) -> list[tuple[Uuid, int]]:
        return [(tid, p) for _, tid, n in self._subscribed(group) for p in range(n)
                if p not in group.initialized.get(tid, ())]

    def _compute_target(self, group: ShareGroup, now: int) -> None:
        """Kafka's share assignor (:func:`share_assign`) from the target so far."""
        subscribed = self._subscribed(group)
        ids = {n: tid for n, tid, _ in subscribed}
        assignable = {tid: [p for p in range(n) if p in group.initialized.get(tid, ())] for _, tid, n in subscribed}
        members = {m.member_id: [ids[n] for n in m.subscribed_topic_names if n in ids] for m in group.members.values()}
        names = [set(m.subscribed_topic_names) for m in group.members.values()]
        group.target = share_assign(members, assignable, group.target,
                                    homogeneous=all(n == names[0] for n in names))
        group.assignment_epoch = group.group_epoch
        group.assignment_time_ms = now

    def _initialize(self, gid: str) -> None:
        """Initialize the share-partition state of the group's newly subscribed partitions
        (start offset -1: resolved by ``share.auto.offset.reset`` at the first fetch), then bump
        the group epoch so that the next assignment includes them."""
        group = self.groups.get(gid)
        if group is None:
            return
        todo = self._uninitialized(group)
        for tid, p in todo:
            if self.persister.read((gid, tid, p)) is None:
                self.persister.initialize((gid, tid, p), 0, -1)
            group.initialized.setdefault(tid, set()).add(p)
        if todo:
            group.group_epoch += 1
            self._write(gid, [self._initialized_record(group), self._epoch_record(group)])

    def _leave(self, body: Any) -> Any:
        cls = response_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
        gid, mid = body.group_id, body.member_id
        group = self._group(gid, create=False, epoch=LEAVE_EPOCH)
        if mid not in group.members:
            raise _Error(E.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
        self._remove(group, mid)
        return cls(error_code=E.NONE, member_id=mid, member_epoch=LEAVE_EPOCH, heartbeat_interval_ms=0)

    def _remove(self, group: ShareGroup, mid: str) -> None:
        m = group.members.pop(mid, None)
        group.target.pop(mid, None)
        group.group_epoch += 1
        if m is not None:
            self._write(group.group_id, self._member_records(group.group_id, m, tomb=True)
                        + [self._epoch_record(group)])
        task = self._timers.pop((group.group_id, mid), None)
        if task is not None:
            task.cancel()
        if self.events is not None:
            self.events.member_left(group.group_id, mid)

    def _schedule_session(self, gid: str, mid: str) -> None:
        old = self._timers.pop((gid, mid), None)
        if old is not None:
            old.cancel()

        def expire() -> None:
            self._timers.pop((gid, mid), None)
            group = self.groups.get(gid)
            if group is not None and mid in group.members:
                self._remove(group, mid)  # its session timed out
        task = self._timers[(gid, mid)] = CallbackTask(self._cfg(gid, "share.session.timeout.ms"), expire)
        self.core.timer.add(task)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    # ------------------------------------------------------------------ ShareGroupDescribe
    def describe(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.SHARE_GROUP_DESCRIBE).cls
        names = {tid: n for n, (tid, _, _) in self.core.known_topics().items()}
        ops = SHARE_GROUP_OPERATIONS if body.include_authorized_operations else _NO_OPERATIONS
        out = []
        for gid in body.group_ids:
            group = self.groups.get(gid)
            if not gid:
                out.append(cls.DescribedGroup(error_code=E.INVALID_GROUP_ID, group_id=gid, group_state="",
                                              assignor_name=""))
            elif group is None:
                msg = (f"Group {gid} is not a share group." if self.is_other_group(gid)
                       else f"Group {gid} not found.")
                out.append(cls.DescribedGroup(error_code=E.GROUP_ID_NOT_FOUND, error_message=msg,
                                              group_id=gid, group_state="", assignor_name=""))
            else:
                out.append(cls.DescribedGroup(
                    error_code=E.NONE, group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch, assignor_name="simple",
                    authorized_operations=ops,
                    members=[cls.Member(
                        member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                        client_id=m.client_id, client_host=m.client_host,
                        subscribed_topic_names=list(m.subscribed_topic_names),
                        assignment=cls.Assignment(topic_partitions=[
                            cls.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
                            for t, ps in sorted(m.assigned.items()) if ps]))
                        for m in group.members.values()]))
        respond(cls(throttle_time_ms=0, groups=out))

    # ------------------------------------------------------------------ the classic APIs' view
    def listed(self, states: set[str]) -> list[tuple[str, str]]:
        """(group id, state) of the share groups ListGroups shows (``states``: lower-case filter)."""
        return [(g.group_id, g.state) for g in self.groups.values()
                if not states or g.state.lower() in states]

    def delete_group(self, gid: str) -> int:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members, else its
        share-partition states are deleted."""
        group = self.groups[gid]
        if group.members:
            return E.NON_EMPTY_GROUP
        for tid, ps in group.initialized.items():
            for p in ps:
                self.persister.delete((gid, tid, p))
        if self.events is not None:
            self.events.group_deleted(gid)
        self._write(gid, [self._initialized_record(group, tomb=True),
                          self._rec(T_TARGET_METADATA, {"group_id": gid}, None), self._epoch_record(group, tomb=True)])
        del self.groups[gid]
        return E.NONE

    # ------------------------------------------------------------------ offsets admin
    def _topic_ids(self) -> dict[str, tuple[Uuid, int]]:
        return {n: (tid, parts) for n, (tid, parts, _) in self.core.known_topics().items()}

    def describe_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS).cls
        topics = self._topic_ids()
        out = []
        for g in body.groups:
            gid = g.group_id
            group = self.groups.get(gid)
            # an unknown group is described as one without any state (Kafka 4.4)
            initialized = group.initialized if group is not None else {}
            if g.topics is None:  # every topic with a state
                ids = {tid: n for n, (tid, _) in topics.items()}
                wanted = [(ids[tid], sorted(ps)) for tid, ps in sorted(initialized.items(),
                                                                       key=lambda kv: ids.get(kv[0], ""))
                          if tid in ids]
            else:
                wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
            ts = []
            for name, parts in wanted:
                tid = topics[name][0] if name in topics else Uuid.ZERO
                ps = []
                for p in parts:
                    s = self.persister.read((gid, tid, p)) if name in topics else None
                    start = s.start_offset if s is not None else -1
                    lag = -1
                    if s is not None and start >= 0:
                        lg = self.core.logs.get(name, p)
                        if lg is not None:
                            lag = max(0, lg.high_watermark - start - s.delivery_complete_count)
                    ps.append(cls.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=start,
                        leader_epoch=s.leader_epoch if s is not None else -1,
                        lag=lag, error_code=0, error_message=None))
                ts.append(cls.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid, partitions=ps))
            out.append(cls.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=ts, error_code=0,
                                                                  error_message=None))
        respond(cls(throttle_time_ms=0, groups=out))

    def alter_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.ALTER_SHARE_GROUP_OFFSETS).cls
        gid = body.group_id
        if self.is_other_group(gid) is not None:
            respond(cls(error_code=E.GROUP_ID_NOT_FOUND, error_message=f"Group {gid} is not a share group.",
                        responses=[]))
            return
        group = self.groups.get(gid)
        if group is None:  # Kafka creates the (empty) share group
            group = self.groups[gid] = ShareGroup(gid)
        if group.members:
            respond(cls(error_code=E.NON_EMPTY_GROUP, error_message="The group is not empty.", responses=[]))
            return
        topics = self._topic_ids()
        out = []
        for t in body.topics:
            if t.topic_name not in topics:
                out.append(cls.AlterShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=Uuid.ZERO, partitions=[
                        cls.AlterShareGroupOffsetsResponsePartition(
                            partition_index=p.partition_index, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                            error_message="This server does not host this topic-partition.")
                        for p in t.partitions]))
                continue
            tid, count = topics[t.topic_name]
            ps = []
            for p in t.partitions:
                if not 0 <= p.partition_index < count:
                    ps.append(cls.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message="This server does not host this topic-partition."))
                    continue
                key = (gid, tid, p.partition_index)
                old = self.persister.read(key)
                self.persister.initialize(key, (old.state_epoch + 1) if old else 0, p.start_offset)
                group.initialized.setdefault(tid, set()).add(p.partition_index)
                if self.events is not None:
                    self.events.reset_partition(gid, tid, p.partition_index)
                ps.append(cls.AlterShareGroupOffsetsResponsePartition(
                    partition_index=p.partition_index, error_code=0, error_message=None))
            out.append(cls.AlterShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=tid, partitions=ps))
        self._write(gid, [self._epoch_record(group), self._initialized_record(group)])
        respond(cls(error_code=0, error_message=None, responses=out))

    def delete_offsets(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DELETE_SHARE_GROUP_OFFSETS).cls
        gid = body.group_id
        group = self.groups.get(gid)
        if group is None:
            respond(cls(error_code=E.GROUP_ID_NOT_FOUND, error_message=f"Group {gid} not found.", responses=[]))
            return
        if group.members:
            respond(cls(error_code=E.NON_EMPTY_GROUP, error_message="The group is not empty.", responses=[]))
            return
        topics = self._topic_ids()
        out = []
        for t in body.topics:
            if t.topic_name not in topics:
                out.append(cls.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=t.topic_name, topic_id=Uuid.ZERO, error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message="This server does not host this topic-partition."))
                continue
            tid = topics[t.topic_name][0]
            for p in sorted(group.initialized.pop(tid, set())):
                self.persister.delete((gid, tid, p))
                if self.events is not None:
                    self.events.reset_partition(gid, tid, p)
            out.append(cls.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=tid,
                                                                error_code=0, error_message=None))
        self._write(gid, [self._initialized_record(group)])
        respond(cls(error_code=0, error_message=None, responses=out))

    def shutdown(self) -> None:
        for task in self._timers.values():
            task.cancel()
        self._timers.clear()
