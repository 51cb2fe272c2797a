"""Partition replication of one broker (Kafka's ``ReplicaManager``, ``Partition`` and
``ReplicaFetcherThread``), sans-I/O.

Metadata tells each broker, per partition, the replicas, the in-sync replicas (ISR), the
leader and its epoch (:meth:`ReplicaManager.apply`). A leader appends (the core's Produce)
and answers its followers' fetches (:meth:`ReplicaManager.handle_replica_fetch`), which tell
it each follower's log end: the high watermark is the smallest log end in the ISR, and only
records below it are committed (acks=all answers then; consumers read up to it). A follower
that keeps up within ``replica.lag.time.max.ms`` joins the ISR, one that falls behind is
dropped from it, each through an AlterPartition request to the controller, during which the
high watermark counts the larger of the two sets (Kafka's "maximal ISR").

Followers fetch from their leaders (:class:`ReplicaFetcher`, one per leader): whole batches,
appended as written. Where a follower's log diverged from the leader's (a former leader's
uncommitted tail), the leader answers with the epoch and end offset they last agree on
(KIP-595's ``DivergingEpoch``, from the leader-epoch cache of KIP-101) and the follower
truncates there. ``truncation="high_watermark"`` instead applies the pre-KIP-101 rule (a
follower truncates to its own high watermark when it starts following), which can lose
acknowledged records; it exists to show that.

Requests to other brokers and to the controller leave through a :class:`Transport`; time is
the broker's timer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol

from kproto.broker.log import BrokerError, Log
from kproto.broker.timer import CallbackTask, Clock, SystemTimer
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey

__all__ = ["ReplicaConfig", "Transport", "PartitionAssignment", "Partition", "ReplicaManager",
           "ReplicaFetcher", "FETCH_VERSION", "ALTER_PARTITION_VERSION"]

#: what followers send (Kafka 3.9's inter-broker versions: replica_state, topic ids, epochs)
FETCH_VERSION = 16
ALTER_PARTITION_VERSION = 3
NO_CONTROLLER = -1


@dataclass
class ReplicaConfig:
    """Replication settings, Kafka's names and defaults."""
    replica_lag_time_max_ms: int = 30_000           # replica.lag.time.max.ms
    replica_fetch_wait_max_ms: int = 500            # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int = 1                # replica.fetch.min.bytes
    replica_fetch_max_bytes: int = 1024 * 1024      # replica.fetch.max.bytes
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    replica_fetch_backoff_ms: int = 1000            # replica.fetch.backoff.ms
    request_timeout_ms: int = 30_000                # replica.socket.timeout.ms / request.timeout.ms
    #: "leader_epoch" (KIP-101/595: truncate where the leader's epoch cache says the logs
    #: diverge) or "high_watermark" (the old rule: truncate to one's own high watermark)
    truncation: str = "leader_epoch"


class Transport(Protocol):
    """How requests reach other nodes (the cluster layer: Kafka-protocol connections with
    fault injection; tests: in memory). ``on_response`` gets None on failure or timeout."""

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Optional[Any]], None], timeout_ms: int) -> None: ...


@dataclass
class PartitionAssignment:
    """A partition's replication state as metadata gives it (duck-typed: the metadata
    image's partition records carry the same fields)."""
    topic: str
    partition: int
    topic_id: Uuid
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0


@dataclass
class _Follower:
    """The leader's view of one follower (Kafka's ``ReplicaState``)."""
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1


@dataclass
class Partition:
    """One replica of a partition on this broker: its log and the metadata it follows."""
    node_id: int
    log: Log
    topic_id: Uuid
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    followers: dict[int, _Follower] = field(default_factory=dict)
    #: the ISR an AlterPartition in flight asks for (None: none in flight)
    pending_isr: Optional[list[int]] = None
    #: where this leader's epoch began in its log: a follower below it cannot join the ISR
    epoch_start_offset: int = 0

    @property
    def topic(self) -> str:
        return self.log.topic

    @property
    def partition(self) -> int:
        return self.log.partition

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark counts: while a change is in flight, the larger of the
        committed and the asked-for set (a shrink counts the leaving replica until it is
        committed, an expansion the joining one at once)."""
        if self.pending_isr is None:
            return self.isr
        return sorted(set(self.isr) | set(self.pending_isr))

    def follower_end(self, replica: int) -> int:
        st = self.followers.get(replica)
        return -1 if st is None else st.log_end_offset


class ReplicaManager:
    """This broker's replicas: leader and follower duties for every partition it hosts."""

    def __init__(self, node_id: int, timer: SystemTimer, transport: Transport, *,
                 config: Optional[ReplicaConfig] = None,
                 controller: Callable[[], int] = lambda: NO_CONTROLLER,
                 broker_epoch: Callable[[], int] = lambda: -1,
                 isr_eligible: Callable[[int], bool] = lambda broker: True,
                 broker_epoch_of: Callable[[int], int] = lambda broker: -1,
                 on_high_watermark: Callable[[Partition], None] = lambda p: None,
                 on_append: Callable[[Partition], None] = lambda p: None) -> None:
        self.node_id = node_id
        self.timer = timer
        self.clock: Clock = timer.clock
        self.transport = transport
        self.config = config or ReplicaConfig()
        self.controller = controller
        self.broker_epoch = broker_epoch
        self.isr_eligible = isr_eligible
        self.broker_epoch_of = broker_epoch_of
        self.on_high_watermark = on_high_watermark
        self.on_append = on_append
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.isr_changes_sent = 0
        self._stopped = False
        self._shrink_task: Optional[CallbackTask] = None
        self._shrink_due = 0
        self._schedule_shrink()

    # ------------------------------------------------------------------ roles
    def apply(self, assignment: PartitionAssignment, log: Log,
              high_watermark: Optional[int] = None) -> Partition:
        """Take on what metadata says of a partition this broker is a replica of: become its
        leader (a new epoch: followers start unknown, the log stamps the epoch on appends) or
        a follower of its leader (fetching from it), or only adopt a new ISR.
        ``high_watermark``: where a replica new to this manager starts (Kafka reads it from
        ``replication-offset-checkpoint``; 0 when there is none)."""
        key = (assignment.topic, assignment.partition)
        part = self.partitions.get(key)
        if part is None:
            log.set_high_watermark(max(0, high_watermark or 0, log.log_start_offset))
        new_epoch = part is None or assignment.leader_epoch > part.leader_epoch
        if part is not None and not new_epoch and assignment.partition_epoch < part.partition_epoch:
            return part  # stale metadata
        if part is None:
            part = Partition(self.node_id, log, assignment.topic_id, list(assignment.replicas),
                             list(assignment.isr), assignment.leader, assignment.leader_epoch,
                             assignment.partition_epoch)
            self.partitions[key] = part
        was_leader = part.is_leader and not new_epoch
        part.replicas, part.isr = list(assignment.replicas), list(assignment.isr)
        part.leader, part.leader_epoch = assignment.leader, assignment.leader_epoch
        part.partition_epoch = assignment.partition_epoch
        if part.pending_isr is not None and (new_epoch or part.pending_isr == part.isr):
            part.pending_isr = None
        if part.is_leader:
            if not was_leader:
                self._become_leader(part)
            else:
                # the replica set changed under the same leader (a reassignment adds its
                # replicas without a new leader epoch): followers new to it are tracked from
                # now on, so they can join the ISR (Kafka's updateAssignmentAndIsr)
                part.followers = {r: part.followers.get(r) or _Follower()
                                  for r in part.replicas if r != self.node_id}
                self._maybe_increment_hw(part)
        else:
            self._become_follower(part, new_epoch)
        return part

    def remove(self, topic: str, partition: int) -> Optional[Partition]:
        """Stop replicating a partition (deleted, or moved off this broker)."""
        part = self.partitions.pop((topic, partition), None)
        if part is not None:
            for f in self.fetchers.values():
                f.remove(part)
        return part

    def _become_leader(self, part: Partition) -> None:
        for f in self.fetchers.values():
            f.remove(part)
        log = part.log
        log.leader_epoch = part.leader_epoch
        part.epoch_start_offset = log.log_end_offset
        # the high watermark it had as a follower stands until the ISR catches up (Kafka
        # keeps it; it can only go up from here)
        log.set_high_watermark(log.high_watermark)
        now = self.clock.now_ms()
        part.followers = {r: _Follower(last_caught_up_ms=now if r in part.isr else 0)
                          for r in part.replicas if r != self.node_id}
        part.pending_isr = None
        self._maybe_increment_hw(part)

    def _become_follower(self, part: Partition, new_epoch: bool) -> None:
        log = part.log
        part.followers = {}
        part.pending_isr = None
        if new_epoch:
            log.set_high_watermark(min(log.high_watermark, log.log_end_offset))
            if self.config.truncation == "high_watermark":
                # the pre-KIP-101 rule: what is above one's own high watermark may not be on
                # the leader, so it goes (and with it, records the leader had acknowledged)
                log.truncate_to(log.high_watermark)
        for leader_id, f in list(self.fetchers.items()):
            if leader_id != part.leader:
                f.remove(part)
        if part.leader >= 0 and self.node_id in part.replicas:
            fetcher = self.fetchers.get(part.leader)
            if fetcher is None:
                fetcher = self.fetchers[part.leader] = ReplicaFetcher(self, part.leader)
            fetcher.add(part)

    # ------------------------------------------------------------------ leader side
    def leader_for(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it at ``current_leader_epoch`` (-1: any), else
        :class:`BrokerError` as Kafka answers (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH for
        an older epoch, UNKNOWN_LEADER_EPOCH for a newer one)."""
        part = self.partitions.get((topic, partition))
        if part is None:
            raise BrokerError(E.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} is not hosted here")
        if current_leader_epoch >= 0 and current_leader_epoch < part.leader_epoch:
            raise BrokerError(E.FENCED_LEADER_EPOCH, f"epoch {current_leader_epoch} is older than "
                                                    f"{part.leader_epoch}")
        if current_leader_epoch > part.leader_epoch:
            raise BrokerError(E.UNKNOWN_LEADER_EPOCH, f"epoch {current_leader_epoch} is newer than "
                                                     f"{part.leader_epoch}")
        if not part.is_leader:
            raise BrokerError(E.NOT_LEADER_OR_FOLLOWER, f"leader of {topic}-{partition} is {part.leader}")
        return part

    def check_produce(self, part: Partition, acks: int, min_insync: int) -> None:
        """Kafka's check before an acks=all append: enough replicas in sync."""
        if acks == -1 and len(part.isr) < min_insync:
            raise BrokerError(E.NOT_ENOUGH_REPLICAS,
                              f"The size of the current ISR {set(part.isr)} is insufficient to "
                              f"satisfy the min.isr requirement of {min_insync} for partition "
                              f"{part.topic}-{part.partition}")

    def appended(self, part: Partition) -> None:
        """The leader appended: the high watermark may move (a single-replica ISR) and
        waiting follower fetches may complete."""
        self._maybe_increment_hw(part)
        self.on_append(part)

    def diverging_epoch(self, part: Partition, fetch_offset: int, last_fetched_epoch: int
                        ) -> Optional[tuple[int, int]]:
        """(epoch, end offset) where a follower's log left the leader's, or None (KIP-595's
        fetch validation over the KIP-101 epoch cache)."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = part.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or epoch != last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def update_follower(self, part: Partition, replica: int, fetch_offset: int, now: int) -> None:
        """A follower fetched at ``fetch_offset``: its log ends there (Kafka's
        ``updateFollowerFetchState``), then the ISR may grow and the high watermark move."""
        st = part.followers.get(replica)
        if st is None:
            return  # not a replica of this partition (a reassignment in flight)
        leader_end = part.log.log_end_offset
        if fetch_offset >= leader_end:
            st.last_caught_up_ms = max(st.last_caught_up_ms, now)
        elif fetch_offset >= st.last_fetch_leader_end:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.last_fetch_leader_end, st.last_fetch_ms, st.log_end_offset = leader_end, now, fetch_offset
        self._maybe_expand_isr(part, replica)
        self._maybe_increment_hw(part)

    def _maybe_increment_hw(self, part: Partition) -> bool:
        log = part.log
        ends = [log.log_end_offset]
        ends += [part.follower_end(r) for r in part.maximal_isr if r != self.node_id]
        new_hw = min(ends)
        if new_hw > log.high_watermark and new_hw >= 0:
            log.set_high_watermark(new_hw)
            self.on_high_watermark(part)
            return True
        return False

    def _maybe_expand_isr(self, part: Partition, replica: int) -> None:
        if part.pending_isr is not None or replica in part.isr or not self.isr_eligible(replica):
            return
        end = part.follower_end(replica)
        if end >= part.log.high_watermark and end >= part.epoch_start_offset:
            self._alter_isr(part, sorted(part.isr + [replica]))

    def _schedule_shrink(self) -> None:
        # Kafka checks every half of replica.lag.time.max.ms
        self._schedule_shrink_in(max(1, self.config.replica_lag_time_max_ms // 2))

    def _schedule_shrink_in(self, delay_ms: int) -> None:
        self._shrink_due = self.clock.now_ms() + delay_ms
        self._shrink_task = CallbackTask(delay_ms, self._shrink_all)
        self.timer.add(self._shrink_task)

    def _shrink_all(self) -> None:
        if self._stopped:
            return
        now = self.clock.now_ms()
        lag = self.config.replica_lag_time_max_ms
        if now - self._shrink_due > lag // 10:
            # The check runs late: this broker's loop was held up (a loaded machine), so the
            # followers' fetches sent meanwhile still wait in its sockets; judge their lag once
            # those are read, not by a silence that was the leader's own.
            self._schedule_shrink_in(max(1, lag // 4))
            return
        try:
            for part in list(self.partitions.values()):
                self.maybe_shrink_isr(part, now)
        finally:
            self._schedule_shrink()

    def maybe_shrink_isr(self, part: Partition, now: int) -> bool:
        """Drop from the ISR the followers not caught up for ``replica.lag.time.max.ms``."""
        if not part.is_leader or part.pending_isr is not None:
            return False
        lag = self.config.replica_lag_time_max_ms
        out = [r for r in part.isr if r != self.node_id
               and now - part.followers.get(r, _Follower()).last_caught_up_ms > lag]
        if not out:
            return False
        self._alter_isr(part, [r for r in part.isr if r not in out])
        return True

    def _alter_isr(self, part: Partition, new_isr: list[int]) -> None:
        """Ask the controller for a new ISR (AlterPartition); the answer, or newer metadata,
        settles it."""
        controller = self.controller()
        if controller < 0:
            return  # asked again at the next fetch or check
        part.pending_isr = new_isr
        self.isr_changes_sent += 1
        cls = request_codec(ApiKey.ALTER_PARTITION).cls
        # v3 names each member's broker epoch: the controller refuses a restarted member
        body = cls(broker_id=self.node_id, broker_epoch=self.broker_epoch(), topics=[cls.TopicData(
            topic_id=part.topic_id, partitions=[cls.PartitionData(
                partition_index=part.partition, leader_epoch=part.leader_epoch,
                new_isr_with_epochs=[cls.BrokerState(broker_id=b, broker_epoch=self.broker_epoch_of(b))
                                     for b in new_isr],
                leader_recovery_state=0, partition_epoch=part.partition_epoch)])])
        asked_epoch, asked_partition_epoch = part.leader_epoch, part.partition_epoch

        def answered(resp: Optional[Any]) -> None:
            if part.pending_isr != new_isr or part.leader_epoch != asked_epoch:
                return  # overtaken by metadata
            if resp is None or resp.error_code:
                part.pending_isr = None  # retried by the next fetch or check
                return
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        part.pending_isr = None
                        return
                    if p.partition_epoch > part.partition_epoch or part.partition_epoch == asked_partition_epoch:
                        part.isr, part.partition_epoch = list(p.isr), p.partition_epoch
                        part.pending_isr = None
                        self._maybe_increment_hw(part)
                        return

        self.transport.send(controller, ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, body,
                            answered, self.config.request_timeout_ms)

    def handle_replica_fetch(self, body: Any, version: int, replica_id: int) -> Any:
        """Answer a follower's fetch at once (the core holds it in its fetch purgatory while
        nothing is new): batches up to the log end, the high watermark, and where the
        follower's log diverged."""
        cls = response_codec(ApiKey.FETCH).cls
        now = self.clock.now_ms()
        budget = min(body.max_bytes, self.config.replica_fetch_response_max_bytes) if version >= 3 else 1 << 30
        out = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                pd = cls.PartitionData(partition_index=p.partition, error_code=0, high_watermark=-1,
                                       last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                       preferred_read_replica=-1, records=b"")
                parts.append(pd)
                name = t.topic if version < 13 else self._topic_name(t.topic_id)
                try:
                    part = self.leader_for(name or "", p.partition, p.current_leader_epoch if version >= 9 else -1)
                except BrokerError as exc:
                    pd.error_code = exc.code
                    known = self.partitions.get((name or "", p.partition))
                    if known is not None and version >= 12:
                        pd.current_leader = cls.LeaderIdAndEpoch(leader_id=known.leader, leader_epoch=known.leader_epoch)
                    continue
                log = part.log
                diverged = self.diverging_epoch(part, p.fetch_offset, p.last_fetched_epoch) if version >= 12 else None
                if diverged is not None:
                    pd.diverging_epoch = cls.EpochEndOffset(epoch=diverged[0], end_offset=diverged[1])
                else:
                    self.update_follower(part, replica_id, p.fetch_offset, now)
                    try:
                        pd.records = log.read(p.fetch_offset, min(p.partition_max_bytes, budget),
                                              min_one_batch=not any(x.records for x in parts[:-1]))
                    except BrokerError as exc:
                        pd.error_code = exc.code
                    budget -= len(pd.records or b"")
                pd.high_watermark, pd.log_start_offset = log.high_watermark, log.log_start_offset
                pd.last_stable_offset = log.last_stable_offset
            out.append(cls.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts))
        return cls(throttle_time_ms=0, error_code=0, session_id=0, responses=out)

    def _topic_name(self, topic_id: Uuid) -> Optional[str]:
        for part in self.partitions.values():
            if part.topic_id == topic_id:
                return part.topic
        return None

    def offsets_for_leader_epoch(self, topic: str, partition: int, current_leader_epoch: int,
                                 leader_epoch: int) -> tuple[int, int, int]:
        """OffsetsForLeaderEpoch on the leader: (error, epoch, end offset)."""
        try:
            part = self.leader_for(topic, partition, current_leader_epoch)
        except BrokerError as exc:
            return exc.code, -1, -1
        epoch, end = part.log.end_offset_for_epoch(leader_epoch)
        return E.NONE, epoch, end

    def shutdown(self) -> None:
        self._stopped = True
        if self._shrink_task is not None:
            self._shrink_task.cancel()
        for f in self.fetchers.values():
            f.stop()


class ReplicaFetcher:
    """Fetches the partitions one leader leads for this broker (Kafka's
    ``ReplicaFetcherThread``): one request at a time, the next as soon as the answer is in
    (the leader long-polls), a back-off after errors."""

    def __init__(self, manager: ReplicaManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.in_flight = False
        self.stopped = False
        self.fetches = 0
        self.truncations: list[tuple[str, int, int]] = []  # (topic, partition, new log end)
        self._wake: Optional[CallbackTask] = None

    def add(self, part: Partition) -> None:
        self.partitions[(part.topic, part.partition)] = part
        self._kick(0)

    def remove(self, part: Partition) -> None:
        self.partitions.pop((part.topic, part.partition), None)

    def stop(self) -> None:
        self.stopped = True
        if self._wake is not None:
            self._wake.cancel()

    def _kick(self, delay_ms: int) -> None:
        if self.in_flight or self.stopped or not self.partitions:
            return
        if delay_ms <= 0:
            self._fetch()
            return
        if self._wake is not None:
            self._wake.cancel()
        self._wake = CallbackTask(delay_ms, lambda: self._kick(0))
        self.manager.timer.add(self._wake)

    def build_request(self) -> tuple[Any, list[Partition]]:
        m = self.manager
        cls = request_codec(ApiKey.FETCH).cls
        by_topic: dict[Uuid, list[Partition]] = {}
        for part in self.partitions.values():
            by_topic.setdefault(part.topic_id, []).append(part)
        body = cls(replica_id=-1, replica_state=cls.ReplicaState(replica_id=m.node_id, replica_epoch=m.broker_epoch()),
                   max_wait_ms=m.config.replica_fetch_wait_max_ms, min_bytes=m.config.replica_fetch_min_bytes,
                   max_bytes=m.config.replica_fetch_response_max_bytes, isolation_level=0, session_id=0,
                   session_epoch=-1, topics=[cls.FetchTopic(topic=parts[0].topic, topic_id=tid, partitions=[
                       cls.FetchPartition(partition=p.partition, current_leader_epoch=p.leader_epoch,
                                          fetch_offset=p.log.log_end_offset, last_fetched_epoch=p.log.latest_epoch,
                                          log_start_offset=p.log.log_start_offset,
                                          partition_max_bytes=m.config.replica_fetch_max_bytes)
                       for p in parts]) for tid, parts in by_topic.items()],
                   forgotten_topics_data=[], rack_id="")
        return body, [p for parts in by_topic.values() for p in parts]

    def _fetch(self) -> None:
        body, parts = self.build_request()
        self.in_flight = True
        self.fetches += 1
        m = self.manager
        m.transport.send(self.leader, ApiKey.FETCH, FETCH_VERSION, body, self._answered,
                         m.config.replica_fetch_wait_max_ms + m.config.request_timeout_ms)

    def _answered(self, resp: Optional[Any]) -> None:
        self.in_flight = False
        if self.stopped:
            return
        backoff = self.manager.config.replica_fetch_backoff_ms
        if resp is None or resp.error_code:
            self._kick(backoff)
            return
        trouble = False
        for t in resp.responses:
            for pd in t.partitions:
                part = next((p for p in self.partitions.values()
                             if p.topic_id == t.topic_id and p.partition == pd.partition_index), None)
                if part is None:
                    continue  # removed meanwhile
                trouble |= not self._process(part, pd)
        self._kick(backoff if trouble else 0)

    def _process(self, part: Partition, pd: Any) -> bool:
        """Apply one partition's answer; False when it calls for a back-off."""
        log = part.log
        if pd.error_code:
            return False  # not leader / fenced: new metadata will say where to fetch
        diverging = pd.diverging_epoch
        if diverging is not None and diverging.epoch >= -1 and diverging.end_offset >= 0:
            # truncate to where both logs agree: the leader's end of that epoch, or ours
            # if we ended that epoch earlier (KIP-595's truncation on fetch)
            mine_epoch, mine_end = log.end_offset_for_epoch(diverging.epoch)
            target = diverging.end_offset if mine_epoch != diverging.epoch else min(diverging.end_offset, mine_end)
            end = log.truncate_to(min(target, log.log_end_offset))
            log.set_high_watermark(min(log.high_watermark, end))
            self.truncations.append((part.topic, part.partition, end))
            return True
        if pd.records:
            try:
                log.append_as_follower(pd.records)
            except BrokerError:
                return False
            self.manager.on_append(part)
        if log.set_high_watermark(min(pd.high_watermark, log.log_end_offset)):
            self.manager.on_high_watermark(part)
        return True

