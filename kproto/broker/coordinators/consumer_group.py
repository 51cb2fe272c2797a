"""The consumer group protocol of KIP-848 (Kafka's ``GroupMetadataManager`` for consumer groups,
``CurrentAssignmentBuilder``, ``TargetAssignmentBuilder`` and the server-side assignors), sans-I/O.

The model is Kafka's three epochs: the **group epoch** is bumped whenever a member joins, leaves
or changes its subscription, or the subscribed topics' metadata changes (a new group's first
heartbeat bumps once more, as Kafka 4.4: its first subscribed member is at epoch 2); the **target
assignment epoch** is the group epoch the assignor last ran at (it runs at a heartbeat after a
bump: at once while the group's target assigns nothing, else once the last run is
``group.consumer.assignment.interval.ms`` old, KIP-1263's batching); each member's **member
epoch** reaches the target epoch once the member is reconciled.
Reconciliation (:func:`reconcile`) never hands a partition to a new owner before its previous
owner revoked it: the previous owner first gets an assignment without it (state
UNREVOKED_PARTITIONS, epoch unchanged) and acknowledges by no longer listing it in its
heartbeat's owned partitions; until then the new owner waits (UNRELEASED_PARTITIONS).

Timers run on the broker's timer: a session timeout per member (``group.consumer.session.
timeout.ms``, rescheduled by every heartbeat) and a rebalance timeout while the member holds
partitions it must revoke; either expiry fences the member (it is removed, the group epoch
bumped). State is written to ``__consumer_offsets`` as Kafka 3.9 writes it (record types 3-8:
ConsumerGroupMetadata, ConsumerGroupPartitionMetadata, ConsumerGroupMemberMetadata,
ConsumerGroupTargetAssignmentMetadata/Member, ConsumerGroupCurrentMemberAssignment, tombstones
for departures and deletions) and replayed at start. Committed offsets of a consumer group live
on its :class:`ConsumerGroup` (same records as the classic groups' offsets).

Subscriptions by regular expression (v1 ``SubscribedTopicRegex``) are RE2/J patterns in Kafka;
here they are matched with Python's :mod:`re` (``fullmatch``, as Kafka's ``matcher().matches()``),
which agrees on the common syntax (classes, alternation, quantifiers, anchors) but not on
every RE2 corner (e.g. Python accepts backreferences and look-arounds RE2 refuses). Kafka 4.x
resolves regexes asynchronously and records them (ConsumerGroupRegularExpression); here they
are resolved at each heartbeat and not recorded.
"""
from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Protocol

from kproto.broker.configs import BrokerConfig
from kproto.broker.context import BrokerContext
from kproto.broker.coordinators.offsets_topic import OffsetAndMetadata, record_key, record_value
from kproto.broker.timer import CallbackTask
from kproto.codecs import message
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey


__all__ = ["ClassicGroups", "ConsumerGroupCoordinator", "ConsumerGroup", "ConsumerMember", "Assignment",
           "reconcile", "uniform_assign", "range_assign", "ASSIGNORS", "RECORD_TYPES",
           "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"]

#: A member's or a target's partitions: topic id -> partition numbers.
Assignment = dict[Uuid, set[int]]
Respond = Callable[[Any], None]

# MemberState values as Kafka records them in ConsumerGroupCurrentMemberAssignmentValue.State
STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2
# group states as ConsumerGroup.ConsumerGroupState names them (ListGroups, describe)
G_EMPTY, G_ASSIGNING, G_RECONCILING, G_STABLE, G_DEAD = (
    "Empty", "Assigning", "Reconciling", "Stable", "Dead")
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
#: __consumer_offsets record types of consumer groups (Kafka's CoordinatorRecordType)
(T_METADATA, T_PARTITION_METADATA, T_MEMBER, T_TARGET_METADATA, T_TARGET_MEMBER,
 T_CURRENT) = 3, 4, 5, 6, 7, 8
RECORD_TYPES = frozenset(range(3, 9))
_MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1 MemberType: 0 classic, 1 consumer


class HeartbeatError(Exception):
    """An error answer (Kafka's ApiException thrown from the heartbeat path)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _copy(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items() if ps}


@dataclass
class ConsumerMember:
    """``ConsumerGroupMember``: subscription (hard state) and current assignment."""

    member_id: str
    instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: Optional[str] = None
    rebalance_timeout_ms: int = -1
    server_assignor: Optional[str] = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def subscription(self) -> tuple[Any, ...]:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                sorted(self.subscribed_topic_names), self.subscribed_topic_regex,
                self.rebalance_timeout_ms, self.server_assignor)

    def assignment_state(self) -> tuple[Any, ...]:
        return (self.member_epoch, self.previous_member_epoch, self.state,
                _copy(self.assigned), _copy(self.pending_revocation))

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


class ConsumerGroup:
    """``ConsumerGroup``: epochs, members, target assignment, partition owners, offsets."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        #: when the target assignment was last computed (wall clock, ms; 0: never)
        self.assignment_time_ms = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        # (topic id, partition) -> epoch of the member that holds it (assigned or revoking);
        # a partition absent here is free to be given to its next owner
        self.partition_epochs: dict[tuple[Uuid, int], int] = {}
        # subscribed topic name -> (topic id, partitions) as last recorded
        self.subscription_metadata: dict[str, tuple[Uuid, int]] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.deleted = False

    @property
    def type(self) -> str:
        return "consumer"

    @property
    def state(self) -> str:
        if self.deleted:
            return G_DEAD
        if not self.members:
            return G_EMPTY
        if self.group_epoch > self.assignment_epoch:
            return G_ASSIGNING
        if all(m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return G_STABLE
        return G_RECONCILING

    def static_member(self, instance_id: str) -> Optional[ConsumerMember]:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def update_member(self, new: ConsumerMember, old: Optional[ConsumerMember]) -> None:
        """Replace ``old`` by ``new`` and keep the partition owners' epochs in step."""
        if old is not None:
            self._remove_epochs(old)
        self.members[new.member_id] = new
        for a in (new.assigned, new.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = new.member_epoch

    def remove_member(self, member_id: str) -> Optional[ConsumerMember]:
        m = self.members.pop(member_id, None)
        if m is not None:
            self._remove_epochs(m)
        self.target.pop(member_id, None)
        return m

    def _remove_epochs(self, m: ConsumerMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, ps in a.items():
                for p in ps:
                    if self.partition_epochs.get((t, p)) == m.member_epoch:
                        del self.partition_epochs[(t, p)]

    def epoch_of(self, topic_id: Uuid, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's computePreferredServerAssignor)."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        return max(sorted(counts), key=lambda n: counts[n]) if counts else default


# ---------------------------------------------------------------------------- reconciliation
def _owns_any(owned: Optional[list[tuple[Uuid, list[int]]]], revoking: Assignment) -> bool:
    """``ownsRevokedPartitions``: unknown ownership (None) counts as still owning."""
    if owned is None:
        return True
    return any(p in revoking.get(t, ()) for t, ps in owned for p in ps)


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              epoch_of: Callable[[Uuid, int], int],
              owned: Optional[list[tuple[Uuid, list[int]]]]) -> ConsumerMember:
    """Kafka's ``CurrentAssignmentBuilder.build``: the member's next assignment state towards
    ``target`` (a new object, or ``member`` itself when nothing moves)."""
    if member.state == STABLE:
        if member.member_epoch == target_epoch:
            return member
    elif member.state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still holds what it must give up
    return _next_assignment(member, member.member_epoch, target_epoch, target, epoch_of, owned)


def _next_assignment(member: ConsumerMember, member_epoch: int, target_epoch: int,
                     target: Assignment, epoch_of: Callable[[Uuid, int], int],
                     owned: Optional[list[tuple[Uuid, list[int]]]]) -> ConsumerMember:
    assigned: Assignment = {}
    revoking: Assignment = {}
    to_assign: Assignment = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, set())
        have = member.assigned.get(t, set())
        keep = have & want
        gone = have - keep
        new = want - keep
        free = {p for p in new if epoch_of(t, p) == -1}
        unreleased = unreleased or free != new
        if keep:
            assigned[t] = keep
        if gone:
            revoking[t] = gone
        if free:
            to_assign[t] = free
    m = ConsumerMember(**{**member.__dict__, "assigned": assigned, "pending_revocation": {}})
    if revoking and _owns_any(owned, revoking):
        # revoke first, in the current epoch; the next epoch once the client let go
        m.state, m.pending_revocation = UNREVOKED_PARTITIONS, revoking
        m.previous_member_epoch, m.member_epoch = member.member_epoch, member_epoch
        return m
    for t, ps in to_assign.items():
        assigned.setdefault(t, set()).update(ps)
    m.state = UNRELEASED_PARTITIONS if unreleased else STABLE
    m.previous_member_epoch, m.member_epoch = member.member_epoch, target_epoch
    return m


# ---------------------------------------------------------------------------- assignors
Subscriptions = dict[str, set[str]]          # member id -> subscribed topic names (existing)
TopicsMeta = dict[str, tuple[Uuid, int]]     # topic name -> (topic id, partitions)


def uniform_assign(subs: Subscriptions, topics: TopicsMeta,
                   current: dict[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``UniformAssignor`` in spirit: every partition of a subscribed topic to one
    subscribed member, counts balanced (within one for homogeneous subscriptions), and each
    member keeping as much of its current target as balance allows (sticky). Kafka's exact
    choice among equally balanced answers is not reproduced."""
    eligible: dict[tuple[Uuid, int], list[str]] = {}
    members = sorted(subs)
    for name in sorted({n for s in subs.values() for n in s}):
        if name not in topics:
            continue
        tid, n = topics[name]
        who = [m for m in members if name in subs[m]]
        for p in range(n):
            eligible[(tid, p)] = who
    owner: dict[tuple[Uuid, int], str] = {}
    count = {m: 0 for m in members}
    # fair share per member: partitions it could take divided among their candidates
    for m in members:
        for t, ps in sorted(current.get(m, {}).items()):
            for p in sorted(ps):
                if m in eligible.get((t, p), ()) and (t, p) not in owner:
                    owner[(t, p)] = m
                    count[m] += 1
    for tp in sorted(eligible):
        if tp not in owner:
            m = min(eligible[tp], key=lambda x: (count[x], x))
            owner[tp] = m
            count[m] += 1
    # move partitions from the fullest to members at least two below, until none can move
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda x: (-count[owner[x]], x)):
            src = owner[tp]
            dst = min(eligible[tp], key=lambda x: (count[x], x))
            if count[dst] + 1 < count[src]:
                owner[tp], count[src], count[dst] = dst, count[src] - 1, count[dst] + 1
                moved = True
                break
    out: dict[str, Assignment] = {m: {} for m in members}
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return out


def range_assign(subs: Subscriptions, topics: TopicsMeta,
                 current: dict[str, Assignment]) -> dict[str, Assignment]:
    """Kafka's ``RangeAssignor``: per topic, the subscribed members in member id order take
    contiguous ranges, the first ``partitions % members`` one more (so topics with equal
    partition counts are co-partitioned). Not sticky across rebalances."""
    out: dict[str, Assignment] = {m: {} for m in subs}
    for name, (tid, n) in sorted(topics.items()):
        who = sorted(m for m, s in subs.items() if name in s)
        if not who:
            continue
        quota, extra = divmod(n, len(who))
        start = 0
        for i, m in enumerate(who):
            size = quota + (1 if i < extra else 0)
            if size:
                out[m][tid] = set(range(start, start + size))
            start += size
    return out


ASSIGNORS: dict[str, Callable[[Subscriptions, TopicsMeta, dict[str, Assignment]], dict[str, Assignment]]] = {
    "uniform": uniform_assign, "range": range_assign}
# Kafka also accepts the assignors' class names in group.consumer.assignors
_ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
                     "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
                     "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range"}


def _new_member_id() -> str:
    """A Kafka ``Uuid.randomUuid().toString()``: 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()


def _empty(s: Optional[str]) -> bool:
    return s is not None and not s.strip()


# ---------------------------------------------------------------------------- coordinator
class ClassicGroups(Protocol):
    """What consumer groups use of the classic coordinator (:mod:`kproto.broker.coordinators.group`): it owns
    ``__consumer_offsets`` and the other half of the group ids (an id names a classic group or a
    consumer group, not both), and takes an empty consumer group over when a classic member
    joins it. Its groups are read for their ``offsets``, ``pending_txn_offsets``, ``members``,
    ``state``, ``generation_id`` and ``protocol_type``."""

    core: BrokerContext
    config: BrokerConfig
    groups: dict[str, Any]

    def ensure_topic(self) -> None: ...

    def is_share_group(self, group_id: str) -> bool:
        """Whether a share group (KIP-932) has that id."""
        ...

    def append_records(self, group_id: str, records: list[tuple[bytes, Optional[bytes]]],
                       producer_id: int = -1, producer_epoch: int = -1) -> int: ...

    def offset_record(self, group_id: str, tp: tuple[str, int],
                      om: Optional[OffsetAndMetadata]) -> tuple[bytes, Optional[bytes]]: ...

    def group_record(self, group: Any, deleted: bool = False) -> tuple[bytes, Optional[bytes]]: ...

    def get_or_create_group(self, group_id: str) -> Any: ...


class ConsumerGroupCoordinator:
    """Consumer groups (KIP-848) beside the classic ones of :class:`ClassicGroups`, which
    owns ``__consumer_offsets`` and delegates here for groups of type consumer."""

    def __init__(self, classic: ClassicGroups) -> None:
        self.classic = classic
        self.core = classic.core
        self.config = classic.config
        self.groups: dict[str, ConsumerGroup] = {}
        self._timers: dict[tuple[str, str, str], CallbackTask] = {}
        names = getattr(self.config, "group_consumer_assignors", ("uniform", "range"))
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        self.assignors = [_ASSIGNOR_CLASSES.get(n, n) for n in names]
        unknown = [n for n in self.assignors if n not in ASSIGNORS]
        if unknown or not self.assignors:
            raise ValueError(f"group.consumer.assignors: unknown assignor(s) {unknown}")

    # ------------------------------------------------------------------ settings
    @property
    def session_timeout_ms(self) -> int:
        return int(getattr(self.config, "group_consumer_session_timeout_ms", 45000))

    @property
    def heartbeat_interval_ms(self) -> int:
        return int(getattr(self.config, "group_consumer_heartbeat_interval_ms", 5000))

    @property
    def assignment_interval_ms(self) -> int:
        """KIP-1263: a group's target assignment is computed again at most this often (0: at
        every bump); a bump within the interval waits for a heartbeat after it."""
        return int(getattr(self.config, "group_consumer_assignment_interval_ms", 1000))

    # ------------------------------------------------------------------ records
    def _rec(self, rtype: int, key_name: str, key: dict[str, Any], value: Optional[Any]) -> tuple[bytes, Optional[bytes]]:
        k = record_key(rtype, message(key_name).cls(**key))
        return k, None if value is None else record_value(0, value)

    @staticmethod
    def _tps(cls: Any, a: Assignment) -> list[Any]:
        return [cls(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.items()) if ps]

    def _member_record(self, gid: str, m: ConsumerMember, tomb: bool = False) -> tuple[bytes, Optional[bytes]]:
        v = None if tomb else message("ConsumerGroupMemberMetadataValue").cls(
            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor)
        return self._rec(T_MEMBER, "ConsumerGroupMemberMetadataKey",
                         {"group_id": gid, "member_id": m.member_id}, v)

    def _current_record(self, gid: str, m: ConsumerMember, tomb: bool = False) -> tuple[bytes, Optional[bytes]]:
        cls = message("ConsumerGroupCurrentMemberAssignmentValue").cls
        v = None if tomb else cls(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
            assigned_partitions=self._tps(cls.TopicPartitions, m.assigned),
            partitions_pending_revocation=self._tps(cls.TopicPartitions, m.pending_revocation))
        return self._rec(T_CURRENT, "ConsumerGroupCurrentMemberAssignmentKey",
                         {"group_id": gid, "member_id": m.member_id}, v)

    def _target_record(self, gid: str, mid: str, a: Optional[Assignment]) -> tuple[bytes, Optional[bytes]]:
        cls = message("ConsumerGroupTargetAssignmentMemberValue").cls
        v = None if a is None else cls(topic_partitions=self._tps(cls.TopicPartition, a))
        return self._rec(T_TARGET_MEMBER, "ConsumerGroupTargetAssignmentMemberKey",
                         {"group_id": gid, "member_id": mid}, v)

    def _epoch_record(self, gid: str, epoch: Optional[int]) -> tuple[bytes, Optional[bytes]]:
        v = None if epoch is None else message("ConsumerGroupMetadataValue").cls(epoch=epoch)
        return self._rec(T_METADATA, "ConsumerGroupMetadataKey", {"group_id": gid}, v)

    def _target_epoch_record(self, gid: str, epoch: Optional[int], at_ms: int = -1) -> tuple[bytes, Optional[bytes]]:
        v = None if epoch is None else message("ConsumerGroupTargetAssignmentMetadataValue").cls(
            assignment_epoch=epoch, assignment_timestamp=self.core.wall_ms() if at_ms < 0 else at_ms)
        return self._rec(T_TARGET_METADATA, "ConsumerGroupTargetAssignmentMetadataKey", {"group_id": gid}, v)

    def _partition_metadata_record(self, gid: str, meta: Optional[TopicsMeta]) -> tuple[bytes, Optional[bytes]]:
        cls = message("ConsumerGroupPartitionMetadataValue").cls
        v = None if meta is None else cls(topics=[
            cls.TopicMetadata(topic_id=tid, topic_name=name, num_partitions=n, partition_metadata=[])
            for name, (tid, n) in sorted(meta.items())])
        return self._rec(T_PARTITION_METADATA, "ConsumerGroupPartitionMetadataKey", {"group_id": gid}, v)

    def _write(self, gid: str, records: list[tuple[bytes, Optional[bytes]]]) -> None:
        if records:
            self.classic.append_records(gid, records)

    # ------------------------------------------------------------------ replay (load)
    def replay(self, rtype: int, key: memoryview, value: Optional[memoryview]) -> None:
        """Apply one record of types 3-8 read back from ``__consumer_offsets``."""
        names = {T_METADATA: "ConsumerGroupMetadata", T_PARTITION_METADATA: "ConsumerGroupPartitionMetadata",
                 T_MEMBER: "ConsumerGroupMemberMetadata", T_TARGET_METADATA: "ConsumerGroupTargetAssignmentMetadata",
                 T_TARGET_MEMBER: "ConsumerGroupTargetAssignmentMember",
                 T_CURRENT: "ConsumerGroupCurrentMemberAssignment"}
        k = message(names[rtype] + "Key").decode(key, 0)
        v = None if value is None else message(names[rtype] + "Value").decode(
            value[2:], int.from_bytes(value[:2], "big", signed=True))
        gid = k.group_id
        group = self.groups.get(gid)
        if group is None:
            if v is None:
                return
            group = self.groups[gid] = ConsumerGroup(gid)
        if rtype == T_METADATA:
            if v is None:
                del self.groups[gid]
            else:
                group.group_epoch = v.epoch
        elif rtype == T_PARTITION_METADATA:
            group.subscription_metadata = {} if v is None else {
                t.topic_name: (Uuid(t.topic_id), t.num_partitions) for t in v.topics}
        elif rtype == T_TARGET_METADATA:
            group.assignment_epoch = 0 if v is None else v.assignment_epoch
            group.assignment_time_ms = 0 if v is None else v.assignment_timestamp
        elif rtype == T_TARGET_MEMBER:
            if v is None:
                group.target.pop(k.member_id, None)
            else:
                group.target[k.member_id] = {Uuid(t.topic_id): set(t.partitions) for t in v.topic_partitions}
        elif rtype == T_MEMBER:
            if v is None:
                group.remove_member(k.member_id)
                return
            m = group.members.get(k.member_id) or ConsumerMember(k.member_id)
            m.instance_id, m.rack_id, m.client_id, m.client_host = v.instance_id, v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = list(v.subscribed_topic_names)
            m.subscribed_topic_regex, m.rebalance_timeout_ms = v.subscribed_topic_regex, v.rebalance_timeout_ms
            m.server_assignor = v.server_assignor
            group.members[m.member_id] = m
        elif rtype == T_CURRENT:
            cur = group.members.get(k.member_id)
            if cur is None:
                if v is None:
                    return
                cur = group.members[k.member_id] = ConsumerMember(k.member_id)
            if v is None:
                cur.member_epoch, cur.assigned, cur.pending_revocation = LEAVE_EPOCH, {}, {}
                return
            m = cur
            m.member_epoch, m.previous_member_epoch, m.state = v.member_epoch, v.previous_member_epoch, v.state
            m.assigned = {Uuid(t.topic_id): set(t.partitions) for t in v.assigned_partitions}
            m.pending_revocation = {Uuid(t.topic_id): set(t.partitions) for t in v.partitions_pending_revocation}

    def after_load(self, loaded: Optional[Iterable[str]] = None) -> None:
        """Owners' epochs rebuilt, offsets moved over from the classic side (offset records do
        not say the group's type), and every member's session started afresh as Kafka does
        when a coordinator loads its partition (``loaded``: only these groups)."""
        wanted = None if loaded is None else set(loaded)
        for gid, group in self.groups.items():
            if wanted is not None and gid not in wanted:
                continue
            group.partition_epochs.clear()
            for m in list(group.members.values()):
                group.update_member(m, None)
                self._schedule_session(gid, m.member_id)
                if m.state == UNREVOKED_PARTITIONS:
                    self._schedule_rebalance(gid, m)
            self._adopt_classic(group)

    def _adopt_classic(self, group: ConsumerGroup) -> None:
        old = self.classic.groups.pop(group.group_id, None)
        if old is not None:
            group.offsets.update(old.offsets)
            for pid, items in old.pending_txn_offsets.items():
                group.pending_txn_offsets.setdefault(pid, {}).update(items)

    # ------------------------------------------------------------------ timers
    def _schedule(self, kind: str, gid: str, mid: str, delay: int, fn: Callable[[], None]) -> None:
        self._cancel(kind, gid, mid)
        task = CallbackTask(delay, fn)
        self._timers[(kind, gid, mid)] = task
        self.core.timer.add(task)

    def _cancel(self, kind: str, gid: str, mid: str) -> None:
        task = self._timers.pop((kind, gid, mid), None)
        if task is not None:
            task.cancel()

    def _schedule_session(self, gid: str, mid: str) -> None:
        def expire() -> None:
            self._timers.pop(("session", gid, mid), None)
            group = self.groups.get(gid)
            if group is not None and mid in group.members:
                self._fence(group, group.members[mid])  # session expired
        self._schedule("session", gid, mid, self.session_timeout_ms, expire)

    def _schedule_rebalance(self, gid: str, m: ConsumerMember) -> None:
        mid, epoch = m.member_id, m.member_epoch

        def expire() -> None:
            self._timers.pop(("rebalance", gid, mid), None)
            group = self.groups.get(gid)
            member = group.members.get(mid) if group is not None else None
            if group is not None and member is not None and member.member_epoch == epoch:
                self._fence(group, member)  # did not revoke within its rebalance timeout
        self._schedule("rebalance", gid, mid, max(m.rebalance_timeout_ms, 0), expire)

    def _cancel_timers(self, gid: str, mid: str) -> None:
        self._cancel("session", gid, mid)
        self._cancel("rebalance", gid, mid)

    # ------------------------------------------------------------------ membership changes
    def _remove_records(self, gid: str, m: ConsumerMember) -> list[tuple[bytes, Optional[bytes]]]:
        # the order Kafka writes them in (its replay checks it)
        return [self._current_record(gid, m, tomb=True), self._target_record(gid, m.member_id, None),
                self._member_record(gid, m, tomb=True)]

    def _fence(self, group: ConsumerGroup, m: ConsumerMember) -> None:
        """``consumerGroupFenceMember``: the member is removed and the group epoch bumped."""
        gid = group.group_id
        records = self._remove_records(gid, m)
        group.remove_member(m.member_id)
        meta = self._subscription_metadata(group)
        if meta != group.subscription_metadata:
            group.subscription_metadata = meta
            records.append(self._partition_metadata_record(gid, meta))
        group.group_epoch += 1
        records.append(self._epoch_record(gid, group.group_epoch))
        if not group.members:
            # nothing left to assign: the (empty) target assignment is at the new epoch at
            # once, as Kafka's coordinator answers for a group its last member left
            group.assignment_epoch = group.group_epoch
            records.append(self._target_epoch_record(gid, group.assignment_epoch, group.assignment_time_ms))
        self._cancel_timers(gid, m.member_id)
        self._write(gid, records)

    def _subscribed_names(self, m: ConsumerMember) -> set[str]:
        names = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            try:
                pat = re.compile(m.subscribed_topic_regex)
            except re.error:
                return names
            names.update(n for n, (_, _, internal) in self.core.known_topics().items()
                         if not internal and pat.fullmatch(n))
        return names

    def _subscription_metadata(self, group: ConsumerGroup) -> TopicsMeta:
        out: TopicsMeta = {}
        topics = self.core.known_topics()
        for m in group.members.values():
            for name in self._subscribed_names(m):
                t = topics.get(name)
                if t is not None and name not in out:
                    out[name] = (t[0], t[1])
        return out

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat
    def heartbeat(self, body: Any, version: int, client_id: str, client_host: str,
                  respond: Respond) -> None:
        cls = response_codec(ApiKey.CONSUMER_GROUP_HEARTBEAT).cls
        try:
            self._validate(body, version)
            if body.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                respond(self._leave(body))
            else:
                respond(self._heartbeat(body, version, client_id, client_host))
        except HeartbeatError as exc:
            respond(cls(error_code=exc.code, error_message=exc.message))

    def _validate(self, body: Any, version: int) -> None:
        """``throwIfConsumerGroupHeartbeatRequestIsInvalid``."""
        def bad(msg: str) -> HeartbeatError:
            return HeartbeatError(E.INVALID_REQUEST, msg)
        if not body.group_id or not body.group_id.strip():
            raise bad("GroupId can't be empty.")
        if _empty(body.instance_id):
            raise bad("InstanceId can't be empty.")
        if _empty(body.rack_id):
            raise bad("RackId can't be empty.")
        regex = body.subscribed_topic_regex if version >= 1 else None
        if version >= 1 and not body.member_id.strip():
            raise bad("MemberId can't be empty.")  # v1: the client makes its id (KIP-1082)
        epoch = body.member_epoch
        if epoch > 0 or epoch == LEAVE_EPOCH:
            if not body.member_id.strip():
                raise bad("MemberId can't be empty.")
        elif epoch == 0:
            if body.rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if body.topic_partitions is None or body.topic_partitions:
                raise bad("TopicPartitions must be empty when (re-)joining.")
            if body.subscribed_topic_names is None and regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if not body.member_id.strip():
                raise bad("MemberId can't be empty.")
            if body.instance_id is None:
                raise bad("InstanceId can't be null.")
        else:
            raise bad("MemberEpoch is invalid.")
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                raise HeartbeatError(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a "
                                     f"valid regular expression: {exc}.")
        if body.server_assignor is not None and body.server_assignor not in self.assignors:
            raise HeartbeatError(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {body.server_assignor} is not "
                                 f"supported. Supported assignors: {', '.join(self.assignors)}.")

    def _group_for_heartbeat(self, gid: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(gid)
        if group is not None:
            return group
        if self.classic.is_share_group(gid):
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
        classic = self.classic.groups.get(gid)
        if classic is not None and (classic.members or classic.state != "Empty"):
            # no online migration between protocols here (Kafka's policy "disabled")
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
        if not create:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        self.classic.ensure_topic()
        group = self.groups[gid] = ConsumerGroup(gid)
        if classic is not None:
            # an empty classic group (offsets only) becomes a consumer group, offsets kept
            self._adopt_classic(group)
            if classic.generation_id > 0 or classic.protocol_type is not None:
                self._write(gid, [self.classic.group_record(classic, deleted=True)])
        return group

    @staticmethod
    def _check_epoch(m: ConsumerMember, received: int, owned: Optional[list[tuple[Uuid, list[int]]]]) -> None:
        """``throwIfMemberEpochIsInvalid``."""
        if received > m.member_epoch:
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member "
                                 f"epoch ({received}) than the one known by the group coordinator "
                                 f"({m.member_epoch}). The member must abandon all its partitions and rejoin.")
        if received < m.member_epoch:
            # the answer that bumped the epoch may have been lost: the previous epoch is
            # accepted while the member owns a subset of what it is assigned now
            subset = owned is not None and all(p in m.assigned.get(t, ()) for t, ps in owned for p in ps)
            if received != m.previous_member_epoch or not subset:
                raise HeartbeatError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member "
                                     f"epoch ({received}) than the one known by the group coordinator "
                                     f"({m.member_epoch}). The member must abandon all its partitions and rejoin.")

    def _heartbeat(self, body: Any, version: int, client_id: str, client_host: str) -> Any:
        cls = response_codec(ApiKey.CONSUMER_GROUP_HEARTBEAT).cls
        gid, epoch = body.group_id, body.member_epoch
        owned = None if body.topic_partitions is None else [
            (Uuid(t.topic_id), list(t.partitions)) for t in body.topic_partitions]
        group = self._group_for_heartbeat(gid, create=epoch == 0)
        member_id = body.member_id or _new_member_id()
        records: list[tuple[bytes, Optional[bytes]]] = []
        replaced: Optional[ConsumerMember] = None
        instance = body.instance_id
        old: Optional[ConsumerMember]
        if instance is None:
            old = group.members.get(member_id)
            if old is None:
                if epoch != 0:
                    raise HeartbeatError(E.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {gid}.")
                member = ConsumerMember(member_id)
            elif epoch == 0:
                # a known member rejoining (after being fenced, KIP-1082 keeps its id): it
                # gave up its partitions, so it starts over from epoch 0 with none
                member = ConsumerMember(**{**old.__dict__, "member_epoch": 0, "previous_member_epoch": 0,
                                           "state": STABLE, "assigned": {}, "pending_revocation": {}})
            else:
                self._check_epoch(old, epoch, owned)
                member = ConsumerMember(**old.__dict__)
        else:
            static = group.static_member(instance)
            if epoch == 0:
                if static is None or static.member_id == member_id:
                    old = group.members.get(member_id)
                    member = ConsumerMember(member_id) if old is None else ConsumerMember(
                        **{**old.__dict__, "member_epoch": 0, "previous_member_epoch": 0, "state": STABLE,
                           "assigned": {}, "pending_revocation": {}})
                else:
                    if static.member_epoch != STATIC_LEAVE_EPOCH:
                        raise HeartbeatError(E.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with "
                                             f"instance id {instance} cannot join the group because the instance "
                                             f"id is owned by {static.member_id} member.")
                    # the instance comes back under a new member id: it takes over the old
                    # member's assignment and target
                    replaced, old = static, static
                    member = ConsumerMember(member_id, assigned=_copy(static.assigned),
                                            subscribed_topic_names=list(static.subscribed_topic_names),
                                            subscribed_topic_regex=static.subscribed_topic_regex,
                                            server_assignor=static.server_assignor)
            else:
                if static is None:
                    raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance} is unknown.")
                if static.member_id != member_id:
                    raise HeartbeatError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                         f"{instance} was fenced by member {static.member_id}.")
                self._check_epoch(static, epoch, owned)
                old = static
                member = ConsumerMember(**static.__dict__)
        if replaced is not None:
            target = group.target.pop(replaced.member_id, None)
            records += self._remove_records(gid, replaced)
            group.remove_member(replaced.member_id)
            self._cancel_timers(gid, replaced.member_id)
            if target is not None:
                group.target[member_id] = target
                records.append(self._target_record(gid, member_id, target))
            old = None

        # 1. the member's subscription (hard state); a change bumps the group epoch
        if instance is not None:
            member.instance_id = instance
        if body.rack_id is not None:
            member.rack_id = body.rack_id
        if body.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = body.rebalance_timeout_ms
        if body.server_assignor is not None:
            member.server_assignor = body.server_assignor
        if body.subscribed_topic_names is not None:
            member.subscribed_topic_names = list(body.subscribed_topic_names)
        if version >= 1 and body.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = body.subscribed_topic_regex or None
        member.client_id, member.client_host = client_id, client_host
        bump = False
        # a returning instance keeps its place; a new member is compared with an empty
        # subscription (joining with none changes nothing, as in Kafka)
        compare = (old if replaced is None else replaced) or ConsumerMember(member_id)
        if old is None or member.subscription() != old.subscription():
            records.append(self._member_record(gid, member))
            if sorted(member.subscribed_topic_names) != sorted(compare.subscribed_topic_names):
                bump = True
            new_regex, old_regex = member.subscribed_topic_regex, compare.subscribed_topic_regex
            if new_regex != old_regex:
                # Kafka bumps for a regex another member already has (resolved), for one
                # dropped, and for a new one once its (asynchronous) resolution matched a
                # topic: here it is resolved at once
                if not new_regex:
                    bump = True
                elif any(m.subscribed_topic_regex == new_regex for k, m in group.members.items()
                         if k != member_id) or self._subscribed_names(
                             ConsumerMember(member_id, subscribed_topic_regex=new_regex)):
                    bump = True
        if old is None or old.assignment_state() != member.assignment_state():
            group.update_member(member, old)
        else:
            group.members[member_id] = member
        # subscribed topics' metadata (created, deleted, more partitions), checked at every
        # heartbeat where Kafka refreshes it on a deadline or a metadata image change
        meta = self._subscription_metadata(group)
        if meta != group.subscription_metadata:
            group.subscription_metadata = meta
            records.append(self._partition_metadata_record(gid, meta))
            bump = True
        # a new group first moves away from epoch 0 (Kafka 4.4: a bump of its own, so a first
        # member subscribing to topics gets epoch 2, one with no subscription epoch 1)
        bumps = (1 if group.group_epoch == 0 else 0) + (1 if bump else 0)
        if bumps:
            group.group_epoch += bumps
            records.append(self._epoch_record(gid, group.group_epoch))

        # 2. a new target assignment when the group epoch moved past it: at once while the
        # current one assigns nothing, else once the last one is group.consumer.assignment.
        # interval.ms old (KIP-1263's batching; as Kafka 4.4 answers, measured)
        now = self.core.wall_ms()
        if group.group_epoch > group.assignment_epoch and (
                not any(group.target.values()) or now - group.assignment_time_ms >= self.assignment_interval_ms):
            records += self._compute_target(group, now)

        # 3. the member reconciled towards its target
        before = member
        updated = reconcile(member, group.assignment_epoch, group.target.get(member_id, {}),
                            group.epoch_of, owned)
        changed_assignment = old is None or old.assigned != updated.assigned
        if updated is not member or old is None or old.assignment_state() != updated.assignment_state():
            if updated is not before:
                group.update_member(updated, before)
            if old is None or old.assignment_state() != updated.assignment_state():
                records.append(self._current_record(gid, updated))
                if updated.state == UNREVOKED_PARTITIONS:
                    self._schedule_rebalance(gid, updated)
                else:
                    self._cancel("rebalance", gid, member_id)
        self._schedule_session(gid, member_id)
        self._write(gid, records)
        resp = cls(error_code=E.NONE, member_id=updated.member_id, member_epoch=updated.member_epoch,
                   heartbeat_interval_ms=self.heartbeat_interval_ms)
        # Kafka's isFullRequest: a rebalance timeout, a subscription and the owned partitions
        full = body.rebalance_timeout_ms != -1 and owned is not None and (
            body.subscribed_topic_names is not None or (version >= 1 and body.subscribed_topic_regex is not None))
        if full or epoch == 0 or changed_assignment:
            resp.assignment = cls.Assignment(topic_partitions=[
                cls.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in sorted(updated.assigned.items()) if ps])
        return resp

    def _compute_target(self, group: ConsumerGroup, now_ms: int) -> list[tuple[bytes, Optional[bytes]]]:
        """``TargetAssignmentBuilder``: run the preferred assignor over every member; records
        for the members whose target changed, then the new assignment epoch."""
        name = group.preferred_assignor(self.assignors[0])
        subs = {mid: {n for n in self._subscribed_names(m) if n in group.subscription_metadata}
                for mid, m in group.members.items()}
        new = ASSIGNORS[name](subs, dict(group.subscription_metadata), group.target)
        records = []
        for mid in group.members:
            a = _copy(new.get(mid, {}))
            if _copy(group.target.get(mid, {})) != a or mid not in group.target:
                records.append(self._target_record(group.group_id, mid, a))
            group.target[mid] = a
        group.assignment_epoch, group.assignment_time_ms = group.group_epoch, now_ms
        records.append(self._target_epoch_record(group.group_id, group.assignment_epoch, now_ms))
        return records

    def _leave(self, body: Any) -> Any:
        """``consumerGroupLeave``: -1 removes the member; -2 (static) keeps its place and
        assignment until its session expires, for the instance to come back."""
        cls = response_codec(ApiKey.CONSUMER_GROUP_HEARTBEAT).cls
        gid, mid, instance = body.group_id, body.member_id, body.instance_id
        group = self.groups.get(gid)
        if group is None:
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        if instance is None:
            m = group.members.get(mid)
            if m is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            self._fence(group, m)
        else:
            m = group.static_member(instance)
            if m is None:
                raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance} is unknown.")
            if m.member_id != mid:
                raise HeartbeatError(E.FENCED_INSTANCE_ID, f"Static member {mid} with instance id "
                                     f"{instance} was fenced by member {m.member_id}.")
            if body.member_epoch == STATIC_LEAVE_EPOCH:
                left = ConsumerMember(**{**m.__dict__, "member_epoch": STATIC_LEAVE_EPOCH,
                                         "pending_revocation": {}})
                group.update_member(left, m)
                self._cancel("rebalance", gid, mid)
                self._write(gid, [self._current_record(gid, left)])
            else:
                self._fence(group, m)
        return cls(error_code=E.NONE, member_id=mid, member_epoch=body.member_epoch)

    # ------------------------------------------------------------------ ConsumerGroupDescribe
    def describe(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.CONSUMER_GROUP_DESCRIBE).cls
        names = {tid: n for n, (tid, _, _) in self.core.known_topics().items()}

        def assignment(a: Assignment) -> Any:
            return cls.Assignment(topic_partitions=[
                cls.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
                for t, ps in sorted(a.items()) if ps])

        out = []
        for gid in body.group_ids:
            group = self.groups.get(gid)
            if not gid:
                out.append(cls.DescribedGroup(error_code=E.INVALID_GROUP_ID, group_id=gid, group_state="",
                                              assignor_name=""))
            elif group is None:
                other = gid in self.classic.groups or self.classic.is_share_group(gid)
                msg = f"Group {gid} is not a consumer group." if other else f"Group {gid} not found."
                # Kafka: no state ('') for a group that is not a consumer group
                out.append(cls.DescribedGroup(error_code=E.GROUP_ID_NOT_FOUND, error_message=msg,
                                              group_id=gid, group_state="", assignor_name=""))
            else:
                out.append(cls.DescribedGroup(
                    error_code=E.NONE, group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name=group.preferred_assignor(self.assignors[0]),
                    members=[cls.Member(
                        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                        member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                        subscribed_topic_names=sorted(m.subscribed_topic_names),
                        subscribed_topic_regex=m.subscribed_topic_regex or "",  # Kafka: '' for none
                        assignment=assignment(m.assigned),
                        target_assignment=assignment(group.target.get(m.member_id, {})),
                        member_type=_MEMBER_TYPE_CONSUMER) for m in group.members.values()]))
        respond(cls(throttle_time_ms=0, groups=out))

    # ------------------------------------------------------------------ offsets
    def offset_commit_error(self, group: ConsumerGroup, member_id: str, epoch: int,
                            version: int, transactional: bool = False) -> int:
        """``ConsumerGroup.validateOffsetCommit``: a commit without a member (epoch < 0) only
        into an empty group; a member commits at its current epoch (STALE_MEMBER_EPOCH) and
        with OffsetCommit v9+ (older versions cannot carry a member epoch)."""
        if epoch < 0 and not group.members:
            return E.NONE
        m = group.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if not transactional and version < 9:
            return E.UNSUPPORTED_VERSION
        return E.NONE if epoch == m.member_epoch else E.STALE_MEMBER_EPOCH

    def offset_fetch_error(self, group_id: str, member_id: Optional[str], epoch: int) -> int:
        """``validateOffsetFetch`` (v9+): epoch -1 is the admin client, else the member's epoch."""
        group = self.groups.get(group_id)
        if group is None or epoch < 0:
            return E.NONE
        m = group.members.get(member_id or "")
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if epoch == m.member_epoch else E.STALE_MEMBER_EPOCH

    def subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        return set(group.subscription_metadata)

    def delete_group_records(self, group: ConsumerGroup) -> list[tuple[bytes, Optional[bytes]]]:
        """Tombstones of an empty group being deleted (Kafka's createGroupTombstoneRecords)."""
        gid = group.group_id
        return [self._target_epoch_record(gid, None), self._partition_metadata_record(gid, None),
                self._epoch_record(gid, None)]

    def delete_group(self, group: ConsumerGroup) -> int:
        """DeleteGroups of a consumer group: NON_EMPTY_GROUP while it has members, else its
        offsets and records are tombstoned."""
        if group.members:
            return E.NON_EMPTY_GROUP
        gid = group.group_id
        records = [self.classic.offset_record(gid, tp, None) for tp in group.offsets]
        self._write(gid, records + self.delete_group_records(group))
        group.deleted = True
        del self.groups[gid]
        return E.NONE

    def classic_join(self, group_id: str) -> int:
        """A classic JoinGroup for a consumer group: refused while it has members (no online
        migration: INCONSISTENT_GROUP_PROTOCOL); an empty one becomes a classic group, with
        its offsets (Kafka converts empty groups between the protocols)."""
        group = self.groups[group_id]
        if group.members:
            return E.INCONSISTENT_GROUP_PROTOCOL
        self._write(group_id, self.delete_group_records(group))
        del self.groups[group_id]
        classic = self.classic.get_or_create_group(group_id)
        classic.offsets.update(group.offsets)
        for pid, items in group.pending_txn_offsets.items():
            classic.pending_txn_offsets.setdefault(pid, {}).update(items)
        return E.NONE

    def unload(self, group_ids: Iterable[str]) -> None:
        """Forget these groups (their partition is led elsewhere now): timers cancelled;
        members find the new coordinator with their next heartbeat's NOT_COORDINATOR."""
        gone = set(group_ids)
        for key in [k for k in self._timers if k[1] in gone]:
            self._timers.pop(key).cancel()
        for gid in gone:
            self.groups.pop(gid, None)

    def shutdown(self) -> None:
        for task in self._timers.values():
            task.cancel()
        self._timers.clear()
