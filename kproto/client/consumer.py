"""A minimal consumer: group membership, offsets, and fetching through KIP-227 fetch sessions.

Sans-I/O helpers do the protocol work (:func:`leader_assignments` runs an assignor over the
JoinGroup members, :func:`subscription_metadata` writes a member's subscription,
:func:`parse_records` turns a fetched partition into records); :class:`Consumer` drives them::

    async with Cluster("127.0.0.1:9092") as cluster:
        consumer = await Consumer(cluster, ["events"], group_id="g").start()
        records = await consumer.getmany(timeout=1.0)
        await consumer.commit()
        await consumer.close()

Group membership follows Kafka's classic protocol (FindCoordinator, JoinGroup with the
MEMBER_ID_REQUIRED round trip, SyncGroup, Heartbeat, OffsetCommit/OffsetFetch, LeaveGroup);
the rebalance is eager unless every assignor is ``cooperative-sticky``; then partitions kept
across the rebalance keep their positions and a revocation triggers the follow-up rebalance Kafka's
cooperative protocol needs. Fetches go to each partition leader through one
:class:`~kproto.fetch_session.FetchSessionHandler` per broker, which falls back to full
requests whenever the broker grants no session.

``group_protocol="consumer"`` (Kafka's ``group.protocol=consumer``) joins with the consumer group
protocol of KIP-848 instead: ConsumerGroupHeartbeat with the assignment computed by the broker,
driven through the sans-I/O :class:`~kproto.client.membership.ConsumerMembership` by a background
task of the consumer; a rebalance revokes (after committing their offsets) only what the broker
moves away and adds what it hands over, while fetching of the other partitions goes on.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from typing import Any, Awaitable, Callable, Iterable, NamedTuple, Optional, Sequence, TypeVar

import numpy as np

from kproto.client.admin import Admin
from kproto.client.assignors import Subscription, assign, encode_sticky_user_data
from kproto.client.cluster import EARLIEST, FETCH_PURPOSE, LATEST, METADATA_REFRESH_ERRORS, Cluster
from kproto.client.connection import Connection
from kproto.client.protocol import BrokerError, KafkaConnectionError, raise_for_error
from kproto.client.consumer_protocol import (Assignment, decode_assignment, decode_subscription,
                                             encode_assignment, encode_subscription)
from kproto.client.membership import ConsumerMembership, MemberState, Reconciliation
from kproto.codecs import request as _request_codec
from kproto.errors import KprotoError
from kproto.fetch_session import FetchSessionHandler, PartitionData, TopicPartition, response_data
from kproto.fetch_session.messages import build_fetch_request
from kproto.records import RecordBatch, iter_batches
from kproto.records.columns import decode_batches, record_tuples
from kproto.records.transactions import AbortedTransactions
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = ["ConsumerRecord", "Consumer", "parse_records", "subscription_metadata",
           "leader_assignments", "PROTOCOL_TYPE"]

PROTOCOL_TYPE = "consumer"
#: Group answers after which the member joins the group again (Kafka's ConsumerCoordinator
#: rejoins for these; none is a retriable code: the request is not sent again as it is)
_REJOIN_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                            ErrorCode.REBALANCE_IN_PROGRESS})
#: JoinGroup/SyncGroup answers after which Kafka's client looks the coordinator up again and
#: rejoins after its retry backoff: a broker still loading (or creating) __consumer_offsets
#: answers them for a while after it starts
_COORDINATOR_ERRORS = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                 ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
#: Kafka's retry.backoff.ms
_RETRY_BACKOFF = 0.1
#: Seconds a join waits for the group's coordinator at least (rebalance_timeout_ms when longer):
#: Kafka's consumer waits without end; a fresh broker creating __consumer_offsets (50 partitions)
#: on a busy machine takes several seconds
COORDINATOR_WAIT_S = 30.0
_I32 = struct.Struct(">i")
_log = logging.getLogger("kproto.client")
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
GROUP_PROTOCOLS = ("classic", "consumer")
#: Commit answers after which a consumer-protocol member commits again with its newer epoch
#: (the heartbeat moved the epoch on while the commit was on its way; Kafka's consumer retries)
_STALE_EPOCH = ErrorCode.STALE_MEMBER_EPOCH



async def run_membership(m: ConsumerMembership, wake: asyncio.Event, heartbeat_name: str,
                         reconcile: Callable[[], Awaitable[None]], heartbeat: Callable[[], Awaitable[None]],
                         fenced: Callable[[], None]) -> Optional[Exception]:
    """Drive a KIP-848 or share-group member ``m`` (sans-I/O): heartbeat when due, reconcile a
    new assignment, rejoin after fencing (``fenced`` first lets go of what the member had).
    ``wake`` cuts a wait short. Returns None once the member left, else the error that ended it
    (a fatal heartbeat error, named ``heartbeat_name``, or an unexpected exception)."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            if m.state is MemberState.FENCED:
                _log.info("member %s fenced (%s): rejoining (%s)", m.member_id, m.error, heartbeat_name)
                fenced()
                m.released()
            if m.state is MemberState.RECONCILING:
                await reconcile()
            if m.state is MemberState.FATAL:
                code, message = m.error or (ErrorCode.UNKNOWN_SERVER_ERROR, None)
                error = BrokerError(code, heartbeat_name, message)
                _log.error("group member failed: %s", error)
                return error
            if m.state is MemberState.UNSUBSCRIBED:
                return None
            delay = m.time_to_heartbeat(loop.time())
            if delay is None or delay > 0:
                # a reconciliation waiting for metadata retries every 0.1 s
                wait = 0.1 if delay is None or m.state is MemberState.RECONCILING else delay
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                continue
            await heartbeat()
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - the caller surfaces it to the application
        _log.exception("group membership task failed (%s)", heartbeat_name)
        return e


_R = TypeVar("_R")
_consumer_ids = itertools.count()


async def gather_fetches(fetches: Iterable[Awaitable[tuple[list[_R], bool]]]) -> tuple[list[_R], bool]:
    """Run one fetch per node at once and merge their ``(records, needs metadata refresh)``
    results: a lost connection asks for a refresh too, any other exception is raised."""
    results = await asyncio.gather(*fetches, return_exceptions=True)
    records: list[_R] = []
    refresh = False
    for res in results:
        if isinstance(res, KafkaConnectionError):
            refresh = True
        elif isinstance(res, BaseException):
            raise res
        else:
            records.extend(res[0])
            refresh |= res[1]
    return records, refresh


class ConsumerRecord(NamedTuple):
    """One consumed record; ``headers`` holds ``(key, value)`` pairs."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: tuple = ()


# ---- sans-I/O helpers ---------------------------------------------------------------------

def parse_records(topic: str, partition: int, records: Any, position: int,
                  aborted_transactions: Optional[Sequence[tuple[int, int]]] = None
                  ) -> tuple[list[ConsumerRecord], int]:
    """Records of a fetched partition at or after ``position`` (a compressed batch may start
    earlier), skipping control batches; returns them and the next position.

    ``aborted_transactions``: ``(producer_id, first_offset)`` pairs of the fetch response, for
    ``read_committed``; the batches of those transactions are left out as Kafka's consumer
    does it (``CompletedFetch``): a producer counts as aborted from the first offset of an
    aborted transaction up to its ABORT marker. None reads uncommitted."""
    if not records:
        return [], position
    start = position
    aborted = (AbortedTransactions.from_fetch(aborted_transactions)
               if aborted_transactions is not None else None)
    kept: list[Any] = []
    for batch in iter_batches(records):
        nxt = batch.next_offset
        if aborted is not None and isinstance(batch, RecordBatch) and batch.producer_id >= 0:
            if batch.is_control:
                aborted.marker(batch)
            elif aborted.is_aborted(batch):
                position = max(position, nxt)
                continue
        if not (getattr(batch, "is_control", False) or nxt <= position):
            kept.append(batch)
        position = max(position, nxt)
    if not kept:
        return [], position
    # one bulk decode for the whole fetch; offsets ascend, so what lies before the fetch
    # position (the start of a compressed batch) is a prefix
    cols = decode_batches(kept)
    skip = int(np.searchsorted(cols.offset, start))
    return record_tuples(cols, ConsumerRecord, topic, partition, skip), position


def subscription_metadata(assignor: str, topics: Sequence[str], assigned: Sequence[tuple],
                          generation: int, *, cooperative: bool = False, version: int = 3,
                          rack: str | None = None) -> bytes:
    """A member's subscription bytes for ``assignor``, as Kafka's consumer writes them.

    ``assigned`` is the member's assignment before this rebalance. An eager member has revoked
    it before joining, so its owned-partitions field is empty (Kafka clears the assignment in
    ``onJoinPrepare``); a cooperative member still owns it. The sticky assignor carries the
    previous assignment and generation in its user data, the cooperative one its generation.
    """
    gen = generation if generation >= 0 else None
    if assignor == "sticky":
        user_data: bytes | None = encode_sticky_user_data(assigned, gen)
    elif assignor == "cooperative-sticky":
        user_data = _I32.pack(generation)
    else:
        user_data = None
    owned = list(assigned) if cooperative else []
    return encode_subscription(Subscription(list(topics), user_data, owned, gen, rack), version)


def leader_assignments(assignor: str, members: Sequence[tuple[str, Optional[str], bytes]],
                       partition_counts: dict[str, int]) -> dict[str, bytes]:
    """The group leader's work: decode each ``(member_id, group_instance_id, metadata)`` of the
    JoinGroup response, run ``assignor`` and encode each member's assignment."""
    subs = {}
    for member_id, instance_id, metadata in members:
        sub, _ = decode_subscription(metadata)
        sub.group_instance_id = instance_id
        subs[member_id] = sub
    wanted = {t for s in subs.values() for t in s.topics}
    cluster = {t: n for t, n in partition_counts.items() if t in wanted}
    result = assign(assignor, cluster, subs)
    return {m: encode_assignment(Assignment(list(tps))) for m, tps in result.items()}


# ---- the consumer ---------------------------------------------------------------------------

class Consumer:
    """Asyncio consumer. With ``group_id`` it joins the group and consumes what the group
    assigns it; without, it reads every partition of ``topics`` itself."""

    def __init__(self, cluster: Cluster, topics: Sequence[str], *, group_id: Optional[str] = None,
                 assignors: Sequence[str] = ("range",), auto_offset_reset: str = "earliest",
                 session_timeout_ms: int = 10000, rebalance_timeout_ms: int = 10000,
                 heartbeat_interval_ms: int = 1000, fetch_max_wait_ms: int = 500,
                 fetch_min_bytes: int = 1, max_partition_fetch_bytes: int = 1048576,
                 fetch_max_bytes: int = 52428800, rack: Optional[str] = None,
                 isolation_level: str = "read_uncommitted", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, group_protocol: str = "classic",
                 pattern: Optional[str] = None, group_instance_id: Optional[str] = None,
                 server_assignor: Optional[str] = None) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'earliest' or 'latest'")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError("isolation_level must be 'read_uncommitted' or 'read_committed'")
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError("group_protocol must be 'classic' or 'consumer'")
        if pattern is not None and (group_protocol != "consumer" or group_id is None or topics):
            # the broker resolves the pattern (SubscribedTopicRegex); there is no client-side
            # matching for the classic protocol here
            raise ValueError("pattern= needs group_protocol='consumer', a group_id and no topics")
        #: 1 (read_committed): fetches stop at the last stable offset and leave out aborted
        #: transactions; ``latest`` is the last stable offset.
        self.isolation_level = ISOLATION_LEVELS[isolation_level]
        #: Kafka's auto-commit (group members only): the positions of what :meth:`getmany`
        #: returned are committed every ``auto_commit_interval_ms``, before a rebalance and on close
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval = auto_commit_interval_ms / 1000.0
        self._next_auto_commit = 0.0
        self.cluster = cluster
        self.topics = list(topics)
        self.group_id = group_id
        self.assignors = list(assignors)
        #: Kafka's rebalance protocol: COOPERATIVE only when every assignor supports it.
        self.cooperative = set(self.assignors) == {"cooperative-sticky"}
        self.reset_to = EARLIEST if auto_offset_reset == "earliest" else LATEST
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000.0
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.rack = rack
        #: a static member (KIP-345): rejoins under the same id keep its partitions, and the
        #: classic protocol's close sends no LeaveGroup (the session timeout ends it), as Kafka's
        self.group_instance_id = group_instance_id
        self.member_id = ""
        self.generation = -1
        self.protocol: Optional[str] = None
        self.leader_id: Optional[str] = None
        self.assignment: list[tuple[str, int]] = []
        #: (topic, partition) -> next offset to fetch
        self.positions: dict[tuple[str, int], int] = {}
        self.sessions: dict[int, FetchSessionHandler] = {}
        self._needs_join = group_id is not None
        self._admin = Admin(cluster)
        self._heartbeat_task: Optional[asyncio.Task] = None
        #: the classic protocol's rejoin under way (getmany waits for it until its timeout)
        self._join_task: Optional[asyncio.Task] = None
        self._reset: set[tuple[str, int]] = set()
        self._paused: set[tuple[str, int]] = set()
        #: the KIP-848 member (``group_protocol="consumer"``); None for the classic protocol
        self.group_protocol = group_protocol
        self.pattern = pattern
        self.membership: Optional[ConsumerMembership] = None
        if group_protocol == "consumer" and group_id is not None:
            self.membership = ConsumerMembership(
                group_id, topics=self.topics, pattern=pattern, instance_id=group_instance_id, rack_id=rack,
                rebalance_timeout_ms=rebalance_timeout_ms, server_assignor=server_assignor)
            self.member_id = self.membership.member_id
            self._needs_join = False  # the membership task joins; ensure_group is the classic path
        self._member_task: Optional[asyncio.Task] = None
        #: node -> the fetch in flight to it (one at most: its fetch session's order)
        self._fetches: dict[int, asyncio.Task] = {}
        #: the fetches' own connections (a fetch waiting in the broker holds its connection)
        self._fetch_purpose = f"{FETCH_PURPOSE}-{next(_consumer_ids)}"
        self._wake = asyncio.Event()
        self._member_error: Optional[BaseException] = None
        #: loop time of each finished reconciliation (tests and measurements)
        self.reconciled_at: list[float] = []

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> "Consumer":
        """Load the topics' metadata; without a group, assign every partition to this consumer."""
        if self.pattern is not None:
            await self.cluster.refresh_metadata(None)  # topic ids of whatever the pattern matches
        else:
            await self.cluster.wait_for_leaders(self.topics, allow_auto_create=True)
        self._next_auto_commit = asyncio.get_running_loop().time() + self.auto_commit_interval
        if self.group_id is None:
            self.assignment = [(t, p) for t in self.topics for p in self.cluster.metadata.partitions(t)]
        if self.membership is not None and (self._member_task is None or self._member_task.done()):
            self.membership.join()
            self._member_task = asyncio.get_running_loop().create_task(self._membership_loop())
        return self

    async def close(self) -> None:
        """Commit (with auto-commit) and leave the group (the cluster stays open)."""
        await self._cancel_fetches()
        if self.membership is not None:
            await self._leave_consumer_group()
            return
        if self._join_task is not None:
            self._join_task.cancel()
            self._join_task = None
        await self._auto_commit(force=True)
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None
        if self.group_id is not None and self.member_id and self.group_instance_id is None:
            try:
                await self._leave_group()
            except (BrokerError, KafkaConnectionError):
                pass  # the session timeout removes us anyway
        self.member_id, self.generation = "", -1

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- group membership ----------------------------------------------------------------------
    @property
    def _group(self) -> str:
        if self.group_id is None:
            raise ValueError("this consumer has no group_id")
        return self.group_id

    async def _group_request(self, body: Any) -> Any:
        return await self.cluster.coordinator_request(self._group, body,
                                                      timeout=self.rebalance_timeout_ms / 1000.0 + 30)

    async def ensure_group(self) -> None:
        """(Re)join the group when needed: JoinGroup, SyncGroup, then fetch committed offsets."""
        if self.membership is not None:
            return  # the consumer protocol has no join round: the membership task heartbeats
        if self._needs_join:
            await self._auto_commit(force=True)  # Kafka's onJoinPrepare, before partitions move
        wait = max(self.rebalance_timeout_ms / 1000.0, COORDINATOR_WAIT_S)
        deadline = time.monotonic() + wait
        while self._needs_join:
            code = await self._join_and_sync()
            if code in _COORDINATOR_ERRORS:
                if time.monotonic() > deadline:
                    raise_for_error(code, f"JoinGroup({self.group_id}): no coordinator within {wait:g} s")
                self.cluster.forget_coordinator(self._group)
                await asyncio.sleep(_RETRY_BACKOFF)
            elif code == ErrorCode.INVALID_REQUEST:
                # librdkafka's mock refuses a follower's SyncGroup that arrives after the
                # leader's has completed the round; librdkafka rejoins on any SyncGroup error.
                # Kafka never answers a well-formed SyncGroup so: rejoin until the deadline.
                if time.monotonic() > deadline:
                    raise_for_error(code, f"SyncGroup({self.group_id})")
                _log.warning("SyncGroup(%s) refused with INVALID_REQUEST: joining again", self.group_id)
                await asyncio.sleep(_RETRY_BACKOFF)

    async def _joined_within(self, timeout: float) -> bool:
        """Rejoin when needed, waiting ``timeout`` at most; False when the rejoin goes on.

        As Kafka's poll(timeout), a JoinGroup the coordinator holds until the other members
        join (up to their rebalance timeout) does not hold the caller: the round goes on in
        a task that the next call waits for again. A caller that polls several consumers in
        turn thus gets each into the round in time."""
        if self._join_task is None:
            if not self._needs_join:
                return True
            self._join_task = asyncio.get_running_loop().create_task(self.ensure_group())
        done, _ = await asyncio.wait([self._join_task], timeout=timeout)
        if not done:
            return False
        task, self._join_task = self._join_task, None
        task.result()  # its error, if it failed
        return True

    async def _auto_commit(self, force: bool = False) -> None:
        """Commit the positions when auto-commit is on and the interval passed (or ``force``).
        Like Kafka's client, a failed auto-commit is logged, not raised."""
        now = asyncio.get_running_loop().time()
        if not self.enable_auto_commit or not self.member_id or not self.positions \
                or (not force and now < self._next_auto_commit):
            return
        self._next_auto_commit = now + self.auto_commit_interval
        try:
            await self.commit()
        except (BrokerError, KafkaConnectionError) as e:
            _log.warning("auto-commit of group %s failed: %s", self.group_id, e)

    async def _join_and_sync(self) -> int:
        """One JoinGroup and SyncGroup round; the coordinator error that cut it short, else 0."""
        jg = _request_codec(ApiKey.JOIN_GROUP)
        protocols = [jg.cls.JoinGroupRequestProtocol(name=a, metadata=subscription_metadata(
            a, self.topics, self.assignment, self.generation, cooperative=self.cooperative, rack=self.rack))
            for a in self.assignors]
        req = jg.cls(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                     rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                     group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                     protocols=protocols)
        resp = await self._group_request(req)
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: rejoin with the id we were given
            self.member_id = resp.member_id
            return 0
        if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return 0
        if resp.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, *_COORDINATOR_ERRORS):
            return int(resp.error_code)
        raise_for_error(resp.error_code, f"JoinGroup({self.group_id})")
        self.member_id, self.generation = resp.member_id, resp.generation_id
        self.protocol, self.leader_id = resp.protocol_name, resp.leader
        assignments: dict[str, bytes] = {}
        if resp.leader == resp.member_id and not getattr(resp, "skip_assignment", False):
            members = [(m.member_id, m.group_instance_id, bytes(m.metadata)) for m in resp.members]
            subscribed = sorted({t for _, _, md in members for t in decode_subscription(md)[0].topics})
            await self.cluster.refresh_metadata(subscribed)
            assignments = leader_assignments(self.protocol, members,
                                             self.cluster.metadata.partition_counts())
        sg = _request_codec(ApiKey.SYNC_GROUP)
        sync = await self._group_request(sg.cls(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE, protocol_name=self.protocol,
            assignments=[sg.cls.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in assignments.items()]))
        if sync.error_code in _REJOIN_ERRORS or sync.error_code in _COORDINATOR_ERRORS \
                or sync.error_code == ErrorCode.INVALID_REQUEST:
            if sync.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            return int(sync.error_code)
        raise_for_error(sync.error_code, f"SyncGroup({self.group_id})")
        new = decode_assignment(sync.assignment)[0].partitions if len(sync.assignment) else []
        self._apply_assignment([tuple(tp) for tp in new], self.cooperative)
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        return 0

    def _apply_assignment(self, new: list[tuple[str, int]], cooperative: bool) -> None:
        kept = set(new)
        revoked = [tp for tp in self.assignment if tp not in kept]
        self.assignment = new
        self._paused &= kept  # pausing a partition lasts while it stays assigned
        if cooperative:
            for tp in revoked:
                self.positions.pop(tp, None)
            # Kafka's cooperative protocol: a member that gave partitions up rejoins so that the
            # leader can hand them out in a second rebalance.
            self._needs_join = bool(revoked)
        else:
            self.positions = {}
            self._needs_join = False

    async def _heartbeat_loop(self) -> None:
        hb = _request_codec(ApiKey.HEARTBEAT)
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if self._needs_join or not self.member_id:
                continue
            try:
                resp = await self._group_request(hb.cls(
                    group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                    group_instance_id=self.group_instance_id))
            except (BrokerError, KafkaConnectionError):
                continue
            if resp.error_code in _REJOIN_ERRORS or resp.error_code == ErrorCode.FENCED_INSTANCE_ID:
                if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self._needs_join = True

    async def _leave_group(self) -> None:
        lg = _request_codec(ApiKey.LEAVE_GROUP)
        conn = await self.cluster.coordinator(self._group)
        version = conn.version(ApiKey.LEAVE_GROUP)
        if version >= 3:
            req = lg.cls(group_id=self.group_id, members=[lg.cls.MemberIdentity(member_id=self.member_id)])
        else:
            req = lg.cls(group_id=self.group_id, member_id=self.member_id)
        resp = await conn.request(req, version)
        raise_for_error(resp.error_code, f"LeaveGroup({self.group_id})")

    # -- the consumer group protocol (KIP-848) -----------------------------------------------------
    async def _membership_loop(self) -> None:
        """Drive :attr:`membership` (:func:`run_membership`) until the member left or failed."""
        m = self.membership
        assert m is not None

        def fenced() -> None:
            # the partitions are lost: another member may own them already, so their
            # positions are dropped without a commit (Kafka's onPartitionsLost)
            self._drop(set(m.owned) | set(self.assignment))
            self.assignment = []

        error = await run_membership(m, self._wake, f"ConsumerGroupHeartbeat({self.group_id})",
                                     lambda: self._reconcile(m), lambda: self._heartbeat_once(m), fenced)
        if error is not None:
            self._member_error = error  # surfaced to the application by getmany

    async def _heartbeat_once(self, m: ConsumerMembership) -> None:
        loop = asyncio.get_running_loop()
        group = self._group
        try:
            conn = await self.cluster.coordinator(group)
            # a pattern needs v1 (SubscribedTopicRegex); the member id is the client's from v1
            version = conn.version(ApiKey.CONSUMER_GROUP_HEARTBEAT, range(1, 2) if m.pattern is not None else None)
            req = m.heartbeat_request(loop.time())
            resp = await conn.request(req, version, timeout=conn.request_timeout)
        except (KafkaConnectionError, BrokerError) as e:  # no answer, or no coordinator found
            _log.info("heartbeat of group %s failed: %s", group, e)
            self.cluster.forget_coordinator(group)
            m.on_heartbeat_failure(loop.time())
            return
        if resp.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.cluster.forget_coordinator(group)
        m.on_heartbeat_response(resp, loop.time())
        self.member_id, self.generation = m.member_id, m.member_epoch

    async def _reconcile(self, m: ConsumerMembership) -> None:
        """One reconciliation step as Kafka's ConsumerMembershipManager takes it: topic ids named
        from metadata (refreshed when one is unknown), then the revoked partitions' positions
        committed (auto-commit) and dropped, then the new assignment taken; the next heartbeat
        acknowledges it."""
        names = self.cluster.metadata.topic_names()
        if m.unresolved(names):
            try:
                await self.cluster.refresh_metadata(None)
            except (BrokerError, KafkaConnectionError) as e:
                _log.info("metadata refresh for group %s failed: %s", self.group_id, e)
                return
            names = self.cluster.metadata.topic_names()
        plan = m.reconcile(names)
        if plan is None:
            return
        await self._apply_reconciliation(m, plan)

    async def _apply_reconciliation(self, m: ConsumerMembership, plan: Reconciliation) -> None:
        revoked = set(plan.revoked)
        if revoked:
            # revoke first: stop fetching them, then commit where they got to (Kafka commits
            # before onPartitionsRevoked and goes on with the revocation if the commit fails)
            self.assignment = [tp for tp in self.assignment if tp not in revoked]
            done = {tp: self.positions[tp] for tp in revoked if tp in self.positions}
            if self.enable_auto_commit and done:
                try:
                    await self._commit_as_member(done)
                except (BrokerError, KafkaConnectionError) as e:
                    _log.warning("commit of revoked partitions of group %s failed: %s", self.group_id, e)
            self._drop(revoked)
        self.assignment = sorted(plan.assigned)
        self._paused &= set(plan.assigned)
        if m.reconciled(plan):
            self.reconciled_at.append(asyncio.get_running_loop().time())
            _log.info("group %s member %s epoch %d: revoked %s, added %s", self.group_id, m.member_id,
                      plan.epoch, sorted(plan.revoked), sorted(plan.added))

    def _drop(self, partitions: set[tuple[str, int]]) -> None:
        for tp in partitions:
            self.positions.pop(tp, None)
            self._reset.discard(tp)
        self._paused -= partitions

    async def _leave_consumer_group(self) -> None:
        """Kafka's close for the consumer protocol: commit (auto-commit), revoke everything, then
        the leave heartbeat (epoch -1; -2 for a static member, whose assignment the broker keeps
        for its return), waiting for it at most the request timeout."""
        m = self.membership
        assert m is not None
        try:
            if m.state not in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.FENCED) \
                    and self._member_task is not None and not self._member_task.done():
                owned = m.leave()
                done = {tp: off for tp, off in self.positions.items() if tp in owned}
                if self.enable_auto_commit and done:
                    try:
                        await self._commit_as_member(done)
                    except (BrokerError, KafkaConnectionError) as e:
                        _log.warning("commit on close of group %s failed: %s", self.group_id, e)
                self._drop(set(self.assignment))
                self.assignment = []
                m.left_prepared()
                self._wake.set()
                try:
                    await asyncio.wait_for(asyncio.shield(self._member_task), self.cluster.request_timeout)
                except asyncio.TimeoutError:
                    pass
        finally:
            if self._member_task is not None:
                self._member_task.cancel()
                self._member_task = None

    async def wait_for_assignment(self, timeout: float = 30.0) -> list[tuple[str, int]]:
        """Consumer protocol: wait until the member is STABLE (its assignment reconciled and
        acknowledged); returns the assignment."""
        m = self.membership
        if m is None:
            raise KprotoError("wait_for_assignment is for group_protocol='consumer'")
        deadline = asyncio.get_running_loop().time() + timeout
        while m.state is not MemberState.STABLE:
            if self._member_error is not None:
                raise self._member_error
            if asyncio.get_running_loop().time() > deadline:
                raise asyncio.TimeoutError(f"member of {self.group_id} not stable after {timeout} s ({m.state.name})")
            await asyncio.sleep(0.02)
        return list(self.assignment)

    @property
    def rebalance_needed(self) -> bool:
        """True when the next :meth:`getmany` will rejoin the group first."""
        return self._needs_join

    # -- offsets ------------------------------------------------------------------------------
    async def committed(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Committed offsets of ``partitions`` for the group (-1 when none)."""
        if self.membership is not None:
            return await self._admin.list_group_offsets(self._group, partitions, member_id=self.membership.member_id,
                                                        member_epoch=self.membership.member_epoch)
        return await self._admin.list_group_offsets(self._group, partitions)

    async def commit(self, offsets: Optional[dict[tuple[str, int], int]] = None) -> None:
        """Commit ``offsets`` (default: the current positions) for the group."""
        group = self._group
        offsets = dict(self.positions) if offsets is None else offsets
        if self.membership is not None:
            await self._commit_as_member(offsets)
            return
        try:
            await self._admin.alter_group_offsets(group, offsets, generation=self.generation,
                                                  member_id=self.member_id)
        except BrokerError as e:
            if e.code in _REJOIN_ERRORS:
                self._needs_join = True
            raise

    async def _commit_as_member(self, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit v9+ with the member epoch as generation (KIP-848). STALE_MEMBER_EPOCH
        (a heartbeat moved the epoch on meanwhile) is retried with the newer epoch."""
        m = self.membership
        assert m is not None
        for attempt in range(5):
            epoch = m.member_epoch
            try:
                await self._admin.alter_group_offsets(self._group, offsets, generation=epoch,
                                                      member_id=m.member_id, member_epoch=True)
                return
            except BrokerError as e:
                if e.code != _STALE_EPOCH or attempt == 4:
                    raise
                for _ in range(20):  # until the heartbeat brings the newer epoch (or 1 s)
                    if m.member_epoch != epoch:
                        break
                    await asyncio.sleep(0.05)

    async def list_offsets(self, partitions: Sequence[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets (``EARLIEST``/``LATEST`` or a timestamp) at this consumer's isolation level."""
        return await self.cluster.list_offsets(partitions, timestamp, isolation_level=self.isolation_level)

    async def _init_positions(self) -> None:
        missing = [tp for tp in self.assignment if tp not in self.positions]
        if not missing:
            return
        lookup = [tp for tp in missing if tp not in self._reset]
        committed = await self.committed(lookup) if self.group_id is not None and lookup else {}
        self._reset.difference_update(missing)
        # a consumer-protocol member may have given a partition up while these awaits ran:
        # a position only for what is still assigned
        for tp in missing:
            if committed.get(tp, -1) >= 0 and tp in self.assignment:
                self.positions[tp] = committed[tp]
        reset = [tp for tp in missing if tp not in self.positions and tp in self.assignment]
        if reset:
            found = await self.list_offsets(reset, self.reset_to)
            self.positions.update({tp: off for tp, off in found.items() if tp in self.assignment})

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Fetch ``topic``-``partition`` from ``offset`` next."""
        self.positions[(topic, partition)] = offset

    async def seek_to_beginning(self, partitions: Optional[Sequence[tuple[str, int]]] = None) -> None:
        """Fetch ``partitions`` (default: every assigned one) from their first offset next."""
        self.positions.update(await self.list_offsets(self._assigned(partitions), EARLIEST))

    async def seek_to_end(self, partitions: Optional[Sequence[tuple[str, int]]] = None) -> None:
        """Fetch ``partitions`` (default: every assigned one) from their end next (the last
        stable offset with read_committed): only records written from now on."""
        self.positions.update(await self.list_offsets(self._assigned(partitions), LATEST))

    def position(self, topic: str, partition: int) -> Optional[int]:
        """The offset of the next record to fetch (None before the first fetch decides it)."""
        return self.positions.get((topic, partition))

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching ``partitions`` (they stay assigned) until :meth:`resume`."""
        self._paused.update(self._assigned(partitions))

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Fetch paused ``partitions`` again."""
        self._paused.difference_update(partitions)

    def paused(self) -> set[tuple[str, int]]:
        """The partitions paused now."""
        return set(self._paused)

    def _assigned(self, partitions: Optional[Sequence[tuple[str, int]]]) -> list[tuple[str, int]]:
        if partitions is None:
            return list(self.assignment)
        unknown = [tp for tp in partitions if tp not in self.assignment]
        if unknown:
            raise KprotoError(f"not assigned to this consumer: {unknown}")
        return list(partitions)

    # -- fetching -----------------------------------------------------------------------------
    async def getmany(self, timeout: float = 1.0) -> list[ConsumerRecord]:
        """Rejoin if needed, then one fetch round to every leader; returns the new records and
        advances the positions. A rejoin that outlasts ``timeout`` goes on while this call
        returns no records (as Kafka's poll); the next call waits for it again.

        Fetches are pipelined as in Kafka's Fetcher: once a leader's answer is read, the next
        fetch goes to it before the records are returned, so the broker reads on while the
        application handles them. At most one fetch per broker is in flight (its fetch
        session's order), so at most one answer per broker waits. What an answer holds for a
        partition that was seeked, paused or revoked since its fetch went out is dropped;
        a round that held nothing else is followed by another while ``timeout`` lasts. A fetch
        an earlier call sent is waited for until ``timeout`` at most, then left in flight."""
        if self._member_error is not None:
            raise self._member_error
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.group_id is not None:
            if not await self._joined_within(timeout):
                return []
            await self._auto_commit()
        await self._init_positions()
        while True:
            fresh = self._send_fetches(timeout)
            if not self._fetches:
                await asyncio.sleep(min(timeout, 0.1))
                return []
            nodes = list(self._fetches)
            # a fetch sent by an earlier call may wait longer in the broker than this call's
            # timeout: it is waited for until the deadline, then left in flight
            wait = None if fresh.issuperset(nodes) else max(0.0, deadline - loop.time())
            await asyncio.wait([self._fetches[n] for n in nodes], timeout=wait)
            records: list[ConsumerRecord] = []
            refresh = stale = False
            error: Optional[BaseException] = None
            for node in nodes:
                if not self._fetches[node].done():
                    continue
                task = self._fetches.pop(node)
                try:
                    answer = task.result()
                except KafkaConnectionError:
                    refresh = True
                    continue
                except Exception as e:  # noqa: BLE001 - raised once every answer is read
                    error = error or e
                    continue
                data, asked, r = answer
                refresh |= r
                if data:
                    recs, r, s = self._complete_fetch(data, asked)
                    records += recs
                    refresh |= r
                    stale |= s
            if error is not None:
                raise error
            if refresh:
                await self.cluster.refresh_metadata(sorted(set(self.topics) | {t for t, _ in self.assignment}))
                return records
            self._send_fetches(timeout)  # the next round is under way while these are handled
            if records or not stale or loop.time() >= deadline:
                return records

    def _send_fetches(self, timeout: float) -> set[int]:
        """A fetch to every leader of a fetchable partition that has none in flight (over an
        open connection the request leaves now, not when the caller next yields); returns
        the nodes fetched from."""
        md = self.cluster.metadata
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.assignment:
            leader = md.leader(*tp)
            if leader is not None and tp not in self._paused and tp in self.positions:
                by_leader.setdefault(leader, []).append(tp)
        loop = asyncio.get_running_loop()
        fresh: set[int] = set()
        for node, tps in by_leader.items():
            if node in self._fetches:
                continue
            conn = self.cluster.open_connection(node, self._fetch_purpose)
            sent: Optional[_SentFetch | KafkaConnectionError] = None
            if conn is not None:
                try:
                    sent = self._send_fetch(conn, node, tps, timeout)
                except KafkaConnectionError as e:
                    sent = e
            task = loop.create_task(self._fetch(node, tps, timeout, sent))
            task.add_done_callback(_retrieved)
            self._fetches[node] = task
            fresh.add(node)
        return fresh

    async def _cancel_fetches(self) -> None:
        """Cancel the fetches in flight; their fetch sessions go with them (the broker answered,
        or will, a request whose answer is never read: the next fetch opens a new session), and
        the fetches' connections."""
        tasks = list(self._fetches.values())
        for node in self._fetches:
            self.sessions.pop(node, None)
        self._fetches.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self.cluster.close_connections(self._fetch_purpose)

    def _send_fetch(self, conn: Connection, node: int, tps: list[tuple[str, int]], timeout: float
                    ) -> "_SentFetch":
        """Write one FetchRequest for ``tps`` to ``node`` from their positions."""
        handler = self.sessions.get(node)
        if handler is None:
            handler = self.sessions[node] = FetchSessionHandler(node)
        md = self.cluster.metadata
        builder = handler.new_builder()
        asked = {}
        for t, p in tps:
            epoch = md.topics[t].partitions[p].leader_epoch if t in md.topics else -1
            asked[(t, p)] = offset = self.positions[(t, p)]
            builder.add(TopicPartition(t, p), PartitionData(
                md.topic_id(t), offset, -1, self.max_partition_fetch_bytes, epoch if epoch >= 0 else None))
        built = builder.build()
        # v13+ name topics by id: only when every partition's topic has one (Kafka's Fetcher)
        version = conn.version(ApiKey.FETCH, None if built.can_use_topic_ids else range(0, 13))
        max_wait = min(self.fetch_max_wait_ms, int(timeout * 1000))
        req = build_fetch_request(built, version, max_wait_ms=max_wait, min_bytes=self.fetch_min_bytes,
                                  max_bytes=self.fetch_max_bytes, isolation_level=self.isolation_level,
                                  rack_id=self.rack or "")
        try:
            fut = conn.send(req, version)
        except KafkaConnectionError as e:
            handler.handle_error(e)
            raise
        return _SentFetch(conn, fut, handler, version, asked, max_wait / 1000.0)

    async def _fetch(self, node: int, tps: list[tuple[str, int]], timeout: float,
                     sent: Optional[_SentFetch | KafkaConnectionError] = None
                     ) -> tuple[Optional[dict], dict[tuple[str, int], int], bool]:
        """One fetch from ``node`` (``sent``: its request, already written): its partitions'
        data (None when the fetch session handler refused the answer), the offsets it asked
        for, and whether a top-level error asks for a metadata refresh."""
        if isinstance(sent, KafkaConnectionError):
            raise sent
        if sent is None:
            conn = await self.cluster.connection(node, self._fetch_purpose)
            sent = self._send_fetch(conn, node, tps, timeout)
        conn, handler, version = sent.conn, sent.handler, sent.version
        try:
            resp = await conn.response(sent.answer, "FetchRequest", timeout=sent.max_wait + conn.request_timeout)
        except KafkaConnectionError as e:
            handler.handle_error(e)
            raise
        if not handler.handle_response(resp, version):
            return None, sent.asked, resp.error_code != ErrorCode.NONE
        return response_data(resp, version, handler.session_topic_names), sent.asked, False

    def _complete_fetch(self, data: dict, asked: dict[tuple[str, int], int]
                        ) -> tuple[list[ConsumerRecord], bool, bool]:
        """The records of one answer and whether it asks for a metadata refresh or held data
        that was stale: for a partition revoked, paused or moved (seek) since the fetch left,
        as Kafka's Fetcher drops it."""
        records: list[ConsumerRecord] = []
        refresh = stale = False
        for (name, p), pd in data.items():
            t = name or ""  # response_data keeps named topics only
            tp = (t, p)
            position = self.positions.get(tp)
            if position is None or position != asked.get(tp) or tp in self._paused:
                stale = True
                continue
            if pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                del self.positions[tp]
                self._reset.add(tp)  # auto_offset_reset, not the committed offset again
                continue
            if pd.error_code in METADATA_REFRESH_ERRORS:
                refresh = True
                continue
            raise_for_error(pd.error_code, f"Fetch({t}-{p})")
            aborted = None
            if self.isolation_level:
                aborted = [(a.producer_id, a.first_offset) for a in pd.aborted_transactions or ()]
            recs, self.positions[tp] = parse_records(t, p, pd.records, position, aborted)
            records += recs
        return records, refresh, stale


class _SentFetch(NamedTuple):
    """A FetchRequest written to ``conn``: ``answer`` is its response's future."""

    conn: Connection
    answer: "asyncio.Future[Any]"
    handler: FetchSessionHandler
    version: int
    asked: dict[tuple[str, int], int]
    max_wait: float


def _retrieved(task: asyncio.Task) -> None:
    """A fetch's exception is read in getmany, or by no one when the consumer closed first."""
    if not task.cancelled():
        task.exception()
