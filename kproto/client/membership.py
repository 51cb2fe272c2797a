"""The member side of Kafka's consumer group protocol (KIP-848), sans-I/O.

:class:`ConsumerMembership` is the state machine of Kafka's ``ConsumerMembershipManager`` and
the request building of its ``ConsumerHeartbeatRequestManager``: it writes each
ConsumerGroupHeartbeat, reads the answers, and says what the consumer must do between them. The
asyncio :class:`~kproto.client.consumer.Consumer` (``group_protocol="consumer"``) drives it;
the tests drive it with plain objects and a clock of their own::

    m = ConsumerMembership("g", topics=["events"])
    m.join()
    req = m.heartbeat_request(now)                   # epoch 0, subscription, owned = []
    m.on_heartbeat_response(resp, now)               # epoch, interval, target assignment
    plan = m.reconcile(topic_names)                  # owned vs target: revoke first, then assign
    ...commit the offsets of plan.revoked, stop fetching them...
    m.reconciled(plan)                               # the next heartbeat acknowledges it

States are Kafka's ``MemberState``: ``UNSUBSCRIBED``, ``JOINING`` (epoch 0 sent, waiting for
an epoch), ``RECONCILING`` (a target assignment differs from what is owned), ``ACKNOWLEDGING``
(reconciled; the next heartbeat carries the owned partitions at once), ``STABLE``, ``FENCED``
(FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: every partition is released as lost, without a
commit, then the member joins again with epoch 0 and the same member id), ``PREPARE_LEAVING``
(the consumer commits and revokes everything), ``LEAVING`` (the heartbeat with epoch -1, or -2
for a static member, is due) and ``FATAL``.

The broker computes the assignment (server-side assignors); a rebalance moves only the
partitions that change owner: a member keeps fetching what it keeps while it gives up (revokes,
after committing their offsets) what the broker takes away, and gets new partitions only when
their previous owners released them; nothing stops the whole group.
"""
from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping, Optional, Sequence

from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["MemberState", "ConsumerMembership", "Reconciliation", "TopicIdPartition",
           "LEAVE_GROUP_MEMBER_EPOCH", "LEAVE_GROUP_STATIC_MEMBER_EPOCH", "JOIN_GROUP_MEMBER_EPOCH",
           "FATAL_ERRORS", "RETRIABLE_ERRORS", "new_member_id"]

#: Kafka's ConsumerGroupHeartbeatRequest constants
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: Heartbeat answers after which the member cannot go on (Kafka's heartbeat manager turns these
#: into a fatal error event; retrying would only repeat them).
FATAL_ERRORS = frozenset({
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST, ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNRELEASED_INSTANCE_ID,
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INVALID_REGULAR_EXPRESSION, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
})
#: Answers meaning "the coordinator is busy or elsewhere": heartbeat again after a backoff
#: (the three coordinator errors also make the consumer look the coordinator up again).
RETRIABLE_ERRORS = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT,
})
_FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})

#: A partition as the broker names it in the heartbeat: (topic id, partition)
TopicIdPartition = tuple[Uuid, int]
TopicPartitionKey = tuple[str, int]


class MemberState(Enum):
    """Kafka's ``MemberState`` (without STALE, which needs a poll timer kproto does not have)."""

    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    FATAL = "FATAL"


def new_member_id() -> str:
    """A member id as Kafka's consumer makes one for ConsumerGroupHeartbeat v1+ (KIP-1082: the
    client generates it, a random UUID in Kafka's URL-safe base64 form)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class Reconciliation:
    """One step from the owned partitions to the target assignment: ``revoked`` are given up
    first (their offsets committed), then ``added`` are taken; ``assigned`` is the whole new
    assignment (by name; ``assigned_ids`` by topic id, what the acknowledging heartbeat sends).
    ``epoch`` is the member epoch the target came with: a plan finished after the epoch moved
    on (a new target, fencing) is stale and dropped by :meth:`ConsumerMembership.reconciled`."""

    revoked: frozenset[TopicPartitionKey]
    added: frozenset[TopicPartitionKey]
    assigned: frozenset[TopicPartitionKey]
    assigned_ids: frozenset[TopicIdPartition]
    epoch: int


@dataclass
class _Sent:
    """What the last heartbeat told the broker (Kafka's ``HeartbeatState.SentFields``): fields
    that did not change since are sent as null, which the broker reads as "unchanged"."""

    rebalance_timeout_ms: int = -1
    subscription: Optional[tuple[tuple[str, ...], Optional[str]]] = None
    server_assignor: Optional[str] = None
    owned: Optional[frozenset[TopicIdPartition]] = None


@dataclass
class ConsumerMembership:
    """A consumer group member of the consumer protocol (KIP-848), sans-I/O.

    ``topics`` subscribes to a list of topics, ``pattern`` to every topic matching a regular
    expression, resolved by the broker (``SubscribedTopicRegex``, ConsumerGroupHeartbeat v1; the
    syntax is the broker's, RE2/J). ``instance_id`` makes the member static (it leaves with
    epoch -2, so the broker keeps its assignment for a restart). Times are in seconds of any
    monotonic clock the caller uses."""

    group_id: str
    topics: Sequence[str] = ()
    pattern: Optional[str] = None
    instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    rebalance_timeout_ms: int = 300000
    server_assignor: Optional[str] = None
    member_id: str = field(default_factory=new_member_id)
    #: backoff after a failed or retriable heartbeat (Kafka's retry.backoff.ms)
    retry_backoff: float = 0.1

    member_epoch: int = 0
    state: MemberState = MemberState.UNSUBSCRIBED
    #: the interval the broker asks for (ConsumerGroupHeartbeatResponse.HeartbeatIntervalMs)
    heartbeat_interval: float = 0.0
    #: owned partitions, by name and by topic id (what the consumer fetches)
    owned: frozenset[TopicPartitionKey] = frozenset()
    owned_ids: frozenset[TopicIdPartition] = frozenset()
    #: the latest target assignment from the broker and the epoch it came with
    target: Optional[frozenset[TopicIdPartition]] = None
    target_epoch: int = -1
    #: the last error a heartbeat answered with, kept after later successes (the cause in FATAL)
    error: Optional[tuple[int, Optional[str]]] = None
    in_flight: bool = False
    _next_heartbeat: float = 0.0
    _sent: _Sent = field(default_factory=_Sent)
    _sending: _Sent = field(default_factory=_Sent)
    _reconciling: Optional[Reconciliation] = None
    _leave_in_flight: bool = False

    def __post_init__(self) -> None:
        self.topics = tuple(self.topics)
        if self.topics and self.pattern is not None:
            raise ValueError("subscribe to topics or to a pattern, not both")

    # -- subscription and lifecycle ---------------------------------------------------------
    @property
    def is_static(self) -> bool:
        return self.instance_id is not None

    def subscribe(self, topics: Iterable[str] = (), pattern: Optional[str] = None) -> None:
        """Change the subscription; the next heartbeat sends it (and joins when unsubscribed)."""
        topics = tuple(topics)
        if topics and pattern is not None:
            raise ValueError("subscribe to topics or to a pattern, not both")
        self.topics, self.pattern = topics, pattern
        self._next_heartbeat = 0.0
        if self.state is MemberState.UNSUBSCRIBED:
            self.join()

    def join(self) -> None:
        """Join (again) with epoch 0: every field of the heartbeat is sent (Kafka's
        ``transitionToJoining``); the member id stays the one of this member's life."""
        if self.state is MemberState.FATAL:
            raise RuntimeError("the member hit a fatal error and cannot join again")
        self.member_epoch = JOIN_GROUP_MEMBER_EPOCH
        self.target, self.target_epoch = None, -1
        self._reconciling = None
        self._sent = _Sent()
        self.state = MemberState.JOINING
        self._next_heartbeat = 0.0

    def leave(self) -> frozenset[TopicPartitionKey]:
        """Start leaving: returns the owned partitions, which the consumer commits and revokes
        before :meth:`left_prepared` (Kafka's PREPARE_LEAVING); then the leave heartbeat is due."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return frozenset()
        self.state = MemberState.PREPARE_LEAVING
        self._reconciling = None
        return self.owned

    def left_prepared(self) -> None:
        """The partitions were revoked: the leave heartbeat (epoch -1, or -2 when static) is due."""
        self.owned, self.owned_ids = frozenset(), frozenset()
        self.state = MemberState.LEAVING
        self._next_heartbeat = 0.0

    # -- heartbeats -------------------------------------------------------------------------
    @property
    def wants_heartbeat(self) -> bool:
        """Whether this state heartbeats at all (not while unsubscribed, fenced, preparing to
        leave or failed)."""
        return self.state in (MemberState.JOINING, MemberState.RECONCILING, MemberState.ACKNOWLEDGING,
                              MemberState.STABLE, MemberState.LEAVING)

    def time_to_heartbeat(self, now: float) -> Optional[float]:
        """Seconds until the next heartbeat is due (0: now), None when none is wanted or one is
        in flight. Joining, acknowledging and leaving go at once, as Kafka's
        ``shouldHeartbeatNow``; otherwise the broker's interval after the last answer."""
        if not self.wants_heartbeat or self.in_flight:
            return None
        if self.state in (MemberState.JOINING, MemberState.ACKNOWLEDGING, MemberState.LEAVING) \
                and self._next_heartbeat <= 0.0:
            return 0.0
        return max(0.0, self._next_heartbeat - now)

    def heartbeat_request(self, now: float, cls: Any = None) -> Any:
        """The next ConsumerGroupHeartbeatRequest (v1 fields; v0 drops the regex), marked in
        flight. Fields unchanged since the last sent heartbeat are null, as Kafka's
        ``HeartbeatState`` writes them; joining sends them all."""
        if cls is None:
            cls = _request_codec(ApiKey.CONSUMER_GROUP_HEARTBEAT).cls
        self.in_flight = True
        self._leave_in_flight = self.state is MemberState.LEAVING
        if self.state is MemberState.LEAVING:
            epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.is_static else LEAVE_GROUP_MEMBER_EPOCH
            return cls(group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                       instance_id=self.instance_id)
        joining = self.state is MemberState.JOINING
        req = cls(group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
                  instance_id=self.instance_id)
        if joining:
            req.rack_id = self.rack_id
        if joining or self._sent.rebalance_timeout_ms != self.rebalance_timeout_ms:
            req.rebalance_timeout_ms = self.rebalance_timeout_ms
        subscription = (tuple(self.topics), self.pattern)
        if joining or self._sent.subscription != subscription:
            # Kafka's broker reads either field; both are sent (the unused one empty) as
            # librdkafka does: Kafka treats an empty regex as none, and librdkafka's mock
            # cluster accepts nothing else (it asserts that both or neither are set).
            req.subscribed_topic_names = list(self.topics)
            req.subscribed_topic_regex = self.pattern if self.pattern is not None else ""
        if joining or self._sent.server_assignor != self.server_assignor:
            req.server_assignor = self.server_assignor
        if joining or self._sent.owned != self.owned_ids:
            req.topic_partitions = _by_topic_id(cls, self.owned_ids)
        self._sending = _Sent(self.rebalance_timeout_ms, subscription, self.server_assignor, self.owned_ids)
        return req

    def on_heartbeat_response(self, resp: Any, now: float) -> None:
        """Apply a heartbeat answer: member id and epoch, the interval, a new target assignment
        (RECONCILING when it differs from what is owned), or an error (fencing: FENCED and the
        partitions must be released; fatal: FATAL; retriable: heartbeat again after a backoff)."""
        self.in_flight = False
        code = resp.error_code
        if self._leave_in_flight:
            # the answer to the leave heartbeat: whatever it says, the member is gone
            self._leave_in_flight = False
            self.state, self.member_epoch = MemberState.UNSUBSCRIBED, JOIN_GROUP_MEMBER_EPOCH
            return
        if not self.wants_heartbeat or self.state is MemberState.LEAVING:
            return  # answers to a heartbeat sent before the member was fenced or began leaving
        if code != ErrorCode.NONE:
            self.error = (code, getattr(resp, "error_message", None))
            if code in _FENCED:
                self.fence()
            elif code in FATAL_ERRORS:
                self.state = MemberState.FATAL
            else:  # retriable or unknown: Kafka's heartbeat manager retries after a backoff
                self._sent = _Sent()  # the broker may have missed the last one: send all again
                self._next_heartbeat = now + self.retry_backoff
            return
        self._sent = self._sending
        if resp.member_id:
            self.member_id = resp.member_id
        self.member_epoch = resp.member_epoch
        self.heartbeat_interval = max(resp.heartbeat_interval_ms, 0) / 1000.0
        self._next_heartbeat = now + self.heartbeat_interval
        if resp.assignment is not None:
            self.target = frozenset((tp.topic_id, p) for tp in resp.assignment.topic_partitions
                                    for p in tp.partitions)
            self.target_epoch = self.member_epoch
        if self.target is None:
            return  # joining, and the broker has no assignment for us yet: ask again later
        if self.target != self.owned_ids:
            self.state = MemberState.RECONCILING
        elif self._reconciling is None:
            self.state = MemberState.STABLE  # acknowledged (or nothing to reconcile)

    def on_heartbeat_failure(self, now: float) -> None:
        """The heartbeat got no answer (connection lost, timeout): try again after a backoff
        with every field, since the broker may not have seen it."""
        self.in_flight = False
        self._sent = _Sent()
        self._next_heartbeat = now + self.retry_backoff
        if self._leave_in_flight:
            self._leave_in_flight = False
            # Kafka's consumer does not wait for the leave: the session timeout removes it
            self.state = MemberState.UNSUBSCRIBED

    def fence(self) -> frozenset[TopicPartitionKey]:
        """FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the member lost its partitions (another member
        may own them already, so their offsets are not committed); :meth:`released` rejoins."""
        self.state = MemberState.FENCED
        self._reconciling = None
        self.target, self.target_epoch = None, -1
        return self.owned

    def released(self) -> None:
        """The consumer dropped the lost partitions after fencing: join again with epoch 0."""
        self.owned, self.owned_ids = frozenset(), frozenset()
        if self.state is MemberState.FENCED:
            self.join()

    # -- reconciliation ---------------------------------------------------------------------
    def reconcile(self, topic_names: Mapping[Uuid, str]) -> Optional[Reconciliation]:
        """The next reconciliation step, or None (nothing to do, one is already running, or a
        topic id of the target is not in ``topic_names`` yet: the consumer refreshes its
        metadata and calls again, as Kafka keeps unresolved ids for later). Revocation comes
        before assignment: ``revoked`` are to be committed and dropped, then ``added`` fetched."""
        if self.state is not MemberState.RECONCILING or self._reconciling is not None or self.target is None:
            return None
        named = {}
        for tid, p in self.target:
            name = topic_names.get(tid)
            if name is None:
                return None
            named[(tid, p)] = (name, p)
        assigned = frozenset(named.values())
        plan = Reconciliation(revoked=self.owned - assigned, added=assigned - self.owned, assigned=assigned,
                              assigned_ids=self.target, epoch=self.target_epoch)
        self._reconciling = plan
        return plan

    def unresolved(self, topic_names: Mapping[Uuid, str]) -> set[Uuid]:
        """Topic ids of the target assignment that ``topic_names`` does not name."""
        return {tid for tid, _ in self.target or () if tid not in topic_names}

    def reconciled(self, plan: Reconciliation) -> bool:
        """The consumer revoked and assigned what ``plan`` said: it owns ``plan.assigned`` now and
        the next heartbeat acknowledges it (at once). False when the plan went stale meanwhile
        (fenced or leaving: the consumer releases everything anyway). A newer target that came
        while the plan was applied is reconciled next, from what the plan left owned."""
        if self._reconciling is not plan:
            return False
        self._reconciling = None
        self.owned, self.owned_ids = plan.assigned, plan.assigned_ids
        if self.state is not MemberState.RECONCILING:
            return False
        if self.target != plan.assigned_ids:
            return True  # a newer target arrived while this one was applied: reconcile again
        self.state = MemberState.ACKNOWLEDGING
        self._next_heartbeat = 0.0
        return True

    def reconciliation_failed(self, plan: Reconciliation) -> None:
        """Applying ``plan`` failed (e.g. the commit of the revoked offsets): try again later."""
        if self._reconciling is plan:
            self._reconciling = None


def _by_topic_id(cls: Any, parts: Iterable[TopicIdPartition]) -> list[Any]:
    grouped: dict[Uuid, list[int]] = {}
    for tid, p in parts:
        grouped.setdefault(tid, []).append(p)
    return [cls.TopicPartitions(topic_id=tid, partitions=sorted(ps)) for tid, ps in sorted(grouped.items(), key=lambda kv: str(kv[0]))]


def names_of(topic_names: Mapping[Uuid, str], parts: Iterable[TopicIdPartition]) -> list[TopicPartitionKey]:
    """``(topic id, partition)`` -> ``(name, partition)`` for the ids ``topic_names`` knows."""
    return sorted((topic_names[t], p) for t, p in parts if t in topic_names)

