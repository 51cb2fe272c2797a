"""The KRaft replica of ``__cluster_metadata-0`` (KIP-595), sans-I/O.

One :class:`KRaftReplica` per node: a voter (a controller) takes part in elections, an observer
(a broker) only fetches. The states are Kafka's ``QuorumState`` ones: Unattached, Voted,
Candidate, Leader, Follower, Resigned, with the epoch, the vote and the known leader kept in
the partition folder's ``quorum-state`` file (Kafka 3.9's format, data_version 0) before any
answer depends on them. Time comes from a :class:`~kproto.broker.timer.SystemTimer`, requests
go out through a :class:`RaftTransport` and come in through :meth:`KRaftReplica.handle`;
nothing here blocks or touches a socket.

What the leader writes is a real Kafka log: a LeaderChangeMessage control batch opens every
epoch, data batches carry null keys, each batch's partition leader epoch is the leader's.
The leader's high watermark is the majority's end offset, and only once it passes the start of
its own epoch (Raft's rule that a leader commits nothing of older terms by counting replicas).

Snapshots (KIP-630) as Kafka's ``KafkaMetadataLog`` keeps them: once the state machine has
been handed ``metadata.log.max.record.bytes.between.snapshots`` bytes of batches (or
``metadata.log.max.snapshot.interval.ms`` passed with new ones), the replica writes the
listener's image as ``<end offset>-<epoch>.checkpoint`` (:mod:`~kproto.broker.cluster.snapshots`);
when the log and its snapshots outgrow ``metadata.max.retention.bytes`` (or snapshots are older
than ``metadata.max.retention.ms``) the log start offset moves up to a newer snapshot, older
snapshots and the segments wholly below it are deleted. A Fetch below the log start is answered
with the latest snapshot's id, the follower downloads it with FetchSnapshot, truncates its log
fully to start at the snapshot, and its listener loads the snapshot before the records after
it; a listener new to the replica (a restart) also starts from the latest snapshot.
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, Union

from kproto.broker.cluster.snapshots import SnapshotId, SnapshotStore, decode_snapshot, encode_snapshot
from kproto.broker.log import METADATA_TOPIC, Log, LogConfig, replace_file
from kproto.broker.retention import delete_oldest_segments
from kproto.broker.timer import CallbackTask, SystemTimer
from kproto.codecs import message
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.records.reader import BatchReader

__all__ = ["KRaftReplica", "RaftMetadataLog", "RaftConfig", "RaftTransport", "RaftListener", "NotLeaderError",
           "METADATA_TOPIC", "METADATA_TOPIC_ID", "METADATA_PARTITION", "open_metadata_log",
           "read_quorum_state", "encode_quorum_state",
           "FETCH", "VOTE", "BEGIN_QUORUM_EPOCH", "END_QUORUM_EPOCH", "DESCRIBE_QUORUM",
           "FETCH_SNAPSHOT"]

METADATA_PARTITION = 0
# Kafka's Uuid.METADATA_TOPIC_ID (the fixed topic id of __cluster_metadata)
METADATA_TOPIC_ID = Uuid("AAAAAAAAAAAAAAAAAAAAAQ")
QUORUM_STATE_FILE = "quorum-state"

FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 1, 52, 53, 54, 55, 59
# the newest versions a Kafka 3.9 controller speaks (its Vote, BeginQuorumEpoch and
# EndQuorumEpoch stop at v1; Vote v2 is 4.x's pre-vote)
SEND_VERSIONS = {FETCH: 17, VOTE: 1, BEGIN_QUORUM_EPOCH: 1, END_QUORUM_EPOCH: 1, FETCH_SNAPSHOT: 1}

_LEADER_CHANGE = 2            # ControlRecordType.LEADER_CHANGE
_RETRY_BACKOFF_BASE_MS = 100  # KafkaRaftClient's base of the election backoffs
_CHECK_QUORUM_FACTOR = 1.5    # LeaderState: check-quorum timeout = 1.5 x fetch timeout
_MAX_FETCH_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_FETCH_SIZE_BYTES

UNATTACHED, VOTED, CANDIDATE, LEADER, FOLLOWER, RESIGNED = (
    "Unattached", "Voted", "Candidate", "Leader", "Follower", "Resigned")


class NotLeaderError(Exception):
    """An append on a replica that is not the leader."""


@dataclass
class RaftConfig:
    """Timings of the quorum, Kafka's ``controller.quorum.*`` configs and defaults."""

    election_timeout_ms: int = 1000        # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000           # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000    # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000         # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20             # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500           # KafkaRaftClient's fetchMaxWaitMs (not a config)
    #: metadata.log.max.record.bytes.between.snapshots
    max_bytes_between_snapshots: int = 20 * 1024 * 1024
    #: metadata.log.max.snapshot.interval.ms (0: no snapshot for time alone)
    max_snapshot_interval_ms: int = 3_600_000
    #: metadata.max.retention.bytes (-1: no limit), log and snapshots together
    max_retention_bytes: int = 100 * 1024 * 1024
    #: metadata.max.retention.ms (-1: no limit), the age of a snapshot
    max_retention_ms: int = 604_800_000
    #: metadata.log.segment.bytes
    segment_bytes: int = 1024 * 1024 * 1024
    #: a FetchSnapshot's max_bytes (KafkaRaftClient.MAX_FETCH_SIZE_BYTES, not a config)
    fetch_snapshot_max_bytes: int = 8 * 1024 * 1024


class RaftTransport(Protocol):
    """Request/response to another node; ``on_response(None)`` when it failed or timed out."""

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Any | None], None], timeout_ms: int) -> None: ...


class RaftListener(Protocol):
    """What the state machine (the controller, a broker's metadata image) is told. A listener
    with snapshots also has ``snapshot_records() -> list[bytes]`` (its committed state as
    record values, asked right after a ``handle_commit``) and ``handle_load_snapshot(end_offset,
    values)`` (replace the state by a snapshot's, which holds every record below
    ``end_offset``)."""

    def handle_commit(self, records: list[tuple[int, bytes]]) -> None: ...

    def handle_leader_change(self, leader_id: Optional[int], epoch: int) -> None: ...


def open_metadata_log(log_dir: str, config: Union[LogConfig, RaftConfig, None] = None) -> Log:
    """The ``__cluster_metadata-0`` log under ``log_dir``, recovered when it exists (a
    :class:`RaftConfig` gives its segment size)."""
    path = os.path.join(log_dir, f"{METADATA_TOPIC}-{METADATA_PARTITION}")
    if isinstance(config, RaftConfig):
        config = LogConfig(segment_bytes=config.segment_bytes)
    return Log(path, METADATA_TOPIC, METADATA_PARTITION, METADATA_TOPIC_ID, config or LogConfig(),
               recover=os.path.isdir(path))


def encode_quorum_state(epoch: int, leader_id: Optional[int], voted_id: Optional[int],
                        voters: Sequence[int]) -> bytes:
    """``quorum-state`` as Kafka 3.9's ``FileQuorumStateStore`` writes it: QuorumStateData v0
    through its JSON converter (one line, fields in schema order) plus ``data_version``."""
    codec = message("QuorumStateData")
    cls = codec.cls
    data = cls(cluster_id="", leader_id=-1 if leader_id is None else leader_id,
               leader_epoch=epoch, voted_id=-1 if voted_id is None else voted_id,
               applied_offset=0,
               current_voters=[codec.classes["Voter"](voter_id=v) for v in sorted(voters)])
    doc = codec.to_json(data, 0)
    doc["data_version"] = 0
    return json.dumps(doc, separators=(",", ":")).encode()


def read_quorum_state(path: str) -> Optional[tuple[int, Optional[int], Optional[int]]]:
    """(epoch, leader id, voted id) from a ``quorum-state`` file (data_version 0 or 1), or
    None when there is none."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    leader, voted = doc.get("leaderId", -1), doc.get("votedId", -1)
    return (doc.get("leaderEpoch", -1), None if leader < 0 else leader,
            None if voted < 0 else voted)


@dataclass
class _ReplicaState:
    """What the leader knows of one replica (Kafka's ``LeaderState.ReplicaState``)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1

    def update_fetch(self, now_ms: int, leader_end: int) -> None:
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        if self.end_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif 0 < self.last_fetch_leader_end <= self.end_offset:
            # caught up with where the leader was at the previous fetch
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end = leader_end


class KRaftReplica:
    """One node's replica of the metadata partition (Kafka's ``KafkaRaftClient``).

    A voter when ``node_id`` is in ``voters``, else an observer. The listener hears
    ``handle_commit`` with every data record (offset, value) once, in order, as the high
    watermark passes it (from the log start again after a restart), and
    ``handle_leader_change(leader_id, epoch)``: on a follower or observer when the epoch or
    leader changes (None while unknown); on the leader only once its high watermark is past
    its epoch's LeaderChange record, i.e. after every earlier record was committed and
    applied; on resignation ``(None, epoch)`` at once.
    """

    def __init__(self, node_id: int, voters: Sequence[int], log: Log, *, cluster_id: str,
                 transport: RaftTransport, timer: SystemTimer, config: Optional[RaftConfig] = None,
                 rng: Optional[random.Random] = None, listener: Optional[RaftListener] = None,
                 wall_ms: Optional[Callable[[], int]] = None) -> None:
        self.node_id = node_id
        self.voters = sorted(set(voters))
        self.is_voter = node_id in self.voters
        self.log = log
        self.cluster_id = cluster_id
        self.transport = transport
        self.timer = timer
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.listener = listener
        self.wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.state = UNATTACHED
        self._epoch = 0
        self._leader: Optional[int] = None
        self._voted: Optional[int] = None
        self._persisted: Optional[tuple[int, Optional[int], Optional[int]]] = None
        self._gen = 0              # bumped on every transition: late callbacks are dropped
        self._tasks: dict[str, CallbackTask] = {}
        self._closed = False
        # committed state: the high watermark never goes back; records below it were given
        # to the listener exactly once, in order
        self._hw = 0
        self._applied = log.log_start_offset
        log.set_high_watermark(0)
        # snapshots: the files, the one being downloaded (its bytes in its .part file), the
        # bytes handed to the listener since the last snapshot, the epoch and timestamp of the
        # last batch handed
        self.snapshots = SnapshotStore(log.path)
        self._download: Optional[SnapshotId] = None
        self._fresh_listener = True
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.timer.clock.now_ms()
        self._applied_epoch = 0
        self._applied_ts = -1
        self._recover_snapshots()
        self._notified: Optional[tuple[Optional[int], int]] = None
        # candidate
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._retries = 0
        self._backing_off = False
        # leader
        self._replicas: dict[int, _ReplicaState] = {}
        self._epoch_start = 0
        self._hw_known = False
        self._fetched_voters: set[int] = set()
        self._unacked: set[int] = set()
        self._parked: list[tuple[int, Any, Callable[[Any], None], CallbackTask]] = []
        self._fetching = False
        self._resign_successors: list[int] = []
        self._prev_state: Optional[str] = None
        self._election_deadline: Optional[int] = None
        self._last_fetch_ok_ms: Optional[int] = None
        # the only voter stands and wins at once (Kafka's KafkaRaftClient.initialize); with no
        # other voter to vote twice or lead, only the state it ends in needs to be on disk
        # (one synced write of quorum-state at start, not three)
        self._persist_deferred = self.voters == [node_id]
        self._initialize()
        if self.voters == [node_id] and self.state not in (CANDIDATE, LEADER):
            self._become_candidate()
        if self._persist_deferred:
            self._persist_deferred = False
            self._persist()

    # ------------------------------------------------------------------ client API
    def register(self, listener: RaftListener) -> None:
        """Attach the state machine after construction (Kafka's ``RaftClient.register``), for
        a listener that needs the replica first: it is told the committed records and the
        current leader at once, as a listener given to the constructor was."""
        self.listener = listener
        if self._closed:
            return
        self._notified = None
        # a new state machine starts from the top: the latest snapshot, else the log start
        self._applied = self.log.log_start_offset
        self._fresh_listener = True
        self._deliver()
        if self.state == LEADER:
            if self._hw_known:
                self._maybe_notify(self.node_id)
        elif self.state != RESIGNED:
            self._maybe_notify(self._leader)

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> Optional[int]:
        return self._leader

    @property
    def is_leader(self) -> bool:
        return self.state == LEADER

    @property
    def high_watermark(self) -> int:
        return self._hw

    def append(self, values: list[bytes]) -> int:
        """Write one batch of ``values`` (null keys) at the log end in the leader's epoch;
        returns its last offset. :class:`NotLeaderError` unless leader."""
        if self.state != LEADER or self._closed:
            raise NotLeaderError(f"node {self.node_id} is not the leader (leader {self._leader}, "
                                 f"epoch {self._epoch})")
        if not values:
            raise ValueError("an append needs at least one record")
        b = RecordBatchBuilder(base_offset=self.log.log_end_offset,
                               partition_leader_epoch=self._epoch)
        now = self.wall_ms()
        for v in values:
            b.append(now, None, v)
        info = self.log.append_internal(b.build())
        self._leader_appended()
        return info.last_offset

    def resign(self) -> None:
        """Give up leadership gracefully: Resigned, EndQuorumEpoch to the other voters with
        the most caught-up ones preferred."""
        if self.state == LEADER:
            self._become_resigned(self._preferred_successors())

    def shutdown(self, graceful: bool = True) -> None:
        """Stop: a leader resigns first when ``graceful`` (best effort), then every timer is
        cancelled and later requests and responses are ignored."""
        if graceful:
            self.resign()
        self._closed = True
        self._cancel_tasks()
        for _, _, _, task in self._parked:
            task.cancel()
        self._parked.clear()

    # ------------------------------------------------------------------ state, persistence
    def _initialize(self) -> None:
        stored = read_quorum_state(os.path.join(self.log.path, QUORUM_STATE_FILE))
        self._persisted = stored
        log_epoch = self._end()[0]   # a log that starts at a snapshot: the snapshot's epoch
        if stored is None or stored[0] < log_epoch:
            # no file, or the log is ahead of it (Kafka's QuorumState.initialize)
            self._transition(UNATTACHED, max(log_epoch, stored[0] if stored else 0))
            return
        epoch, leader, voted = stored
        if leader == self.node_id:
            if self.is_voter:
                self._transition(RESIGNED, epoch, leader=leader)
            else:
                self._transition(UNATTACHED, epoch)
        elif leader is not None:
            self._transition(FOLLOWER, epoch, leader=leader)
        elif voted == self.node_id and self.is_voter:
            self._transition(CANDIDATE, epoch, voted=voted)
        elif voted is not None and self.is_voter:
            self._transition(VOTED, epoch, voted=voted)
        else:
            self._transition(UNATTACHED, epoch)

    def _persist(self) -> None:
        key = (self._epoch, self._leader, self._voted)
        if key != self._persisted and not self._persist_deferred:
            replace_file(os.path.join(self.log.path, QUORUM_STATE_FILE),
                         encode_quorum_state(self._epoch, self._leader, self._voted, self.voters))
            self._persisted = key

    def _transition(self, state: str, epoch: int, *, leader: Optional[int] = None,
                    voted: Optional[int] = None) -> None:
        was_leader = self.state == LEADER
        self._prev_state = self.state
        self.state, self._epoch, self._leader, self._voted = state, epoch, leader, voted
        self._gen += 1
        self._cancel_tasks()
        self._fetching = False
        if self._download is not None:
            # a snapshot download belongs to the follower state it began in (Kafka's)
            self.snapshots.abandon(self._download)
            self._download = None
        if state != RESIGNED:
            self._persist()  # Resigned keeps the Leader's record (Kafka: memory-only)
        if was_leader:
            self._flush_parked()   # parked fetches now get the new leader and epoch
            self._replicas, self._fetched_voters, self._unacked = {}, set(), set()
        self._hw_known = False
        if state != LEADER:
            # a resigned leader tells its state machine at once that it leads no more
            self._maybe_notify(None if state == RESIGNED else leader)
        getattr(self, "_enter_" + state.lower())()

    def _maybe_notify(self, leader: Optional[int]) -> None:
        key = (leader, self._epoch)
        if key != self._notified and self.listener is not None and not self._closed:
            self._notified = key
            self.listener.handle_leader_change(leader, self._epoch)

    @property
    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    def _end(self) -> tuple[int, int]:
        """(last fetched epoch, log end offset), as Kafka's ``KafkaMetadataLog``: an empty log
        starting at the latest snapshot has the snapshot's epoch, another empty log epoch 0."""
        epoch, end = self.log.latest_epoch, self.log.log_end_offset
        if epoch < 0:
            latest = self.snapshots.latest
            epoch = latest.epoch if latest is not None and latest.end_offset == end else 0
        return epoch, end

    def _election_timeout(self) -> int:
        """A fresh randomized election timeout, remembered as the state's deadline."""
        t = self.config.election_timeout_ms
        delay = t + self.rng.randrange(t)
        self._election_deadline = self.timer.clock.now_ms() + delay
        return delay

    # ------------------------------------------------------------------ timers
    def _schedule(self, name: str, delay_ms: int, fn: Callable[[], None]) -> None:
        old = self._tasks.pop(name, None)
        if old is not None:
            old.cancel()
        gen = self._gen

        def run() -> None:
            if self._tasks.get(name) is task:
                del self._tasks[name]
            if not self._closed and gen == self._gen:
                fn()
        task = CallbackTask(max(1, delay_ms), run)
        self._tasks[name] = task
        self.timer.add(task)

    def _cancel_tasks(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def _send(self, dst: int, api_key: int, body: Any, on_response: Callable[[Any], None],
              timeout_ms: Optional[int] = None) -> None:
        gen = self._gen

        def done(resp: Any) -> None:
            # a response to an earlier state (or after shutdown) is of no use to this one
            if not self._closed and gen == self._gen:
                on_response(resp)
        self.transport.send(dst, api_key, SEND_VERSIONS[api_key], body, done,
                            timeout_ms or self.config.request_timeout_ms)

    # ------------------------------------------------------------------ states
    def _enter_unattached(self) -> None:
        if self.is_voter:
            if self._prev_state in (UNATTACHED, VOTED, CANDIDATE) and self._election_deadline is not None:
                # Kafka keeps the election time left: a candidate that cannot win (a stale
                # log) bumping the epoch again and again must not hold the others back
                delay = self._election_deadline - self.timer.clock.now_ms()
            else:
                delay = self._election_timeout()
            self._schedule("election", delay, self._become_candidate)
        else:
            # an observer finds the leader by fetching from any voter
            self._schedule("fetch", self.config.retry_backoff_ms, self._send_fetch)

    def _enter_voted(self) -> None:
        self._schedule("election", self._election_timeout(), self._become_candidate)

    def _enter_follower(self) -> None:
        self._schedule("fetch-timeout", self.config.fetch_timeout_ms, self._fetch_timed_out)
        self._schedule("fetch", 1, self._send_fetch)

    def _fetch_timed_out(self) -> None:
        if self.is_voter:
            self._become_candidate()
        else:
            self._transition(UNATTACHED, self._epoch)

    def _become_candidate(self) -> None:
        if not self.is_voter:
            return
        self._retries = self._retries + 1 if self.state == CANDIDATE else 1
        self._transition(CANDIDATE, self._epoch + 1, voted=self.node_id)

    def _enter_candidate(self) -> None:
        self._granted, self._rejected = {self.node_id}, set()
        self._backing_off = False
        self._retries = max(self._retries, 1)
        if len(self._granted) >= self._majority:
            self._become_leader()
            return
        self._schedule("election", self._election_timeout(), self._election_lost)
        for v in self.voters:
            if v != self.node_id:
                self._send_vote(v)

    def _election_lost(self) -> None:
        """Timed out or rejected: back off (binary exponential with jitter, Kafka's
        ``binaryExponentialElectionBackoffMs``), then a new election one epoch up."""
        if self._backing_off:
            return
        self._backing_off = True
        bound = 2 << (self._retries - 1)
        backoff = min(_RETRY_BACKOFF_BASE_MS * self.rng.randrange(bound),
                      self.config.election_backoff_max_ms)
        self._schedule("election", backoff, self._become_candidate)

    def _send_vote(self, dst: int) -> None:
        cls = request_codec(VOTE).cls
        last_epoch, end = self._end()
        body = cls(cluster_id=self.cluster_id, voter_id=dst, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                partition_index=METADATA_PARTITION, replica_epoch=self._epoch,
                replica_id=self.node_id, last_offset_epoch=last_epoch, last_offset=end)])])
        self._send(dst, VOTE, body, lambda resp: self._on_vote_response(dst, resp))

    def _on_vote_response(self, src: int, resp: Any) -> None:
        if self.state != CANDIDATE:
            return
        part = _single_partition(resp)
        if part is None:
            if not self._backing_off:
                self._schedule(f"vote-{src}", self.config.retry_backoff_ms,
                               lambda: self._send_vote(src))
            return
        if self._handle_common(part.error_code, part.leader_id, part.leader_epoch):
            return
        if part.error_code != ErrorCode.NONE:
            self._schedule(f"vote-{src}", self.config.retry_backoff_ms, lambda: self._send_vote(src))
            return
        (self._granted if part.vote_granted else self._rejected).add(src)
        if len(self._granted) >= self._majority:
            self._become_leader()
        elif len(self._rejected) > len(self.voters) - self._majority:
            self._election_lost()

    def _become_leader(self) -> None:
        granted = sorted(self._granted)
        self._transition(LEADER, self._epoch, leader=self.node_id)
        codec = message("LeaderChangeMessage")
        voter_cls = codec.classes["Voter"]
        value = codec.encode(codec.cls(version=0, leader_id=self.node_id,
                                       voters=[voter_cls(voter_id=v) for v in self.voters],
                                       granting_voters=[voter_cls(voter_id=v) for v in granted]), 0)
        self.log.leader_epoch = self._epoch
        self._epoch_start = self.log.log_end_offset
        b = RecordBatchBuilder(base_offset=self._epoch_start, partition_leader_epoch=self._epoch,
                               control=True)
        b.append_control(_LEADER_CHANGE, value, self.wall_ms())
        self.log.append_internal(b.build())
        self._leader_appended()

    def _enter_leader(self) -> None:
        self._replicas = {v: _ReplicaState() for v in self.voters if v != self.node_id}
        self._fetched_voters = set()
        self._unacked = {v for v in self.voters if v != self.node_id}
        self._reset_check_quorum()
        for v in sorted(self._unacked):
            self._send_begin_epoch(v)

    def _reset_check_quorum(self) -> None:
        if len(self.voters) > 1:
            self._schedule("check-quorum",
                           int(self.config.fetch_timeout_ms * _CHECK_QUORUM_FACTOR),
                           lambda: self._become_resigned([]))

    def _send_begin_epoch(self, dst: int) -> None:
        cls = request_codec(BEGIN_QUORUM_EPOCH).cls
        body = cls(cluster_id=self.cluster_id, voter_id=dst, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                partition_index=METADATA_PARTITION, leader_id=self.node_id,
                leader_epoch=self._epoch)])])

        def on_response(resp: Any) -> None:
            part = _single_partition(resp)
            if part is not None and self._handle_common(part.error_code, part.leader_id,
                                                        part.leader_epoch):
                return
            if part is not None and part.error_code == ErrorCode.NONE:
                self._unacked.discard(dst)
            elif dst in self._unacked:
                self._schedule(f"begin-{dst}", self.config.retry_backoff_ms,
                               lambda: self._send_begin_epoch(dst))
        self._send(dst, BEGIN_QUORUM_EPOCH, body, on_response)

    def _preferred_successors(self) -> list[int]:
        """Other voters, the most caught-up first (Kafka's ``LeaderState.nonLeaderVotersByDescendingFetchOffset``)."""
        others = [v for v in self.voters if v != self.node_id]
        return sorted(others, key=lambda v: -self._replicas.get(v, _ReplicaState()).end_offset)

    def _become_resigned(self, successors: list[int]) -> None:
        self._resign_successors = successors
        self._transition(RESIGNED, self._epoch, leader=self.node_id)

    def _enter_resigned(self) -> None:
        self._schedule("election", self._election_timeout(), self._become_candidate)
        for v in self.voters:
            if v != self.node_id:
                self._send_end_epoch(v, self._resign_successors)

    def _send_end_epoch(self, dst: int, successors: list[int]) -> None:
        cls = request_codec(END_QUORUM_EPOCH).cls
        body = cls(cluster_id=self.cluster_id, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                partition_index=METADATA_PARTITION, leader_id=self.node_id,
                leader_epoch=self._epoch, preferred_successors=list(successors),
                preferred_candidates=[cls.ReplicaInfo(candidate_id=s) for s in successors])])])

        def on_response(resp: Any) -> None:
            part = _single_partition(resp)
            if part is None and not self._closed:
                self._schedule(f"end-{dst}", self.config.retry_backoff_ms,
                               lambda: self._send_end_epoch(dst, successors))
        self._send(dst, END_QUORUM_EPOCH, body, on_response)

    # ------------------------------------------------------------------ responses, common
    def _handle_common(self, error: int, leader_id: int, epoch: int) -> bool:
        """Kafka's ``maybeHandleCommonResponse``: True when the response only told of a newer
        epoch or leader (and the replica moved there) or is stale."""
        leader = None if leader_id is None or leader_id < 0 else leader_id
        if epoch < self._epoch or error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            return True
        if epoch > self._epoch or error in (ErrorCode.FENCED_LEADER_EPOCH,
                                            ErrorCode.NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(leader, epoch)
            return True
        if epoch == self._epoch and leader is not None and self._leader is None:
            self._transition(FOLLOWER, epoch, leader=leader)
            return error != ErrorCode.NONE
        return False

    def _maybe_transition(self, leader: Optional[int], epoch: int) -> None:
        if epoch > self._epoch:
            if leader is not None and leader != self.node_id:
                self._transition(FOLLOWER, epoch, leader=leader)
            else:
                self._transition(UNATTACHED, epoch)
        elif epoch == self._epoch and leader is not None and self._leader is None \
                and leader != self.node_id:
            self._transition(FOLLOWER, epoch, leader=leader)

    # ------------------------------------------------------------------ fetching (follower)
    def _send_fetch(self) -> None:
        if self._fetching or self.state in (LEADER, RESIGNED, CANDIDATE, VOTED):
            return
        dst: Optional[int] = None
        if self.state == FOLLOWER:
            dst = self._leader
        elif self.state == UNATTACHED and not self.is_voter:
            dst = self.rng.choice(self.voters)
        if dst is None:
            return
        if self._download is not None:
            self._send_fetch_snapshot(dst, self._download)
            return
        cls = request_codec(FETCH).cls
        last_epoch, end = self._end()
        body = cls(cluster_id=self.cluster_id, replica_id=-1,
                   replica_state=cls.ReplicaState(replica_id=self.node_id, replica_epoch=-1),
                   max_wait_ms=self.config.fetch_max_wait_ms, min_bytes=0,
                   max_bytes=_MAX_FETCH_BYTES, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=[cls.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID,
                                          partitions=[cls.FetchPartition(
                                              partition=METADATA_PARTITION,
                                              current_leader_epoch=self._epoch,
                                              fetch_offset=end, last_fetched_epoch=last_epoch)])],
                   forgotten_topics_data=[], rack_id="")
        self._fetching = True
        self._send(dst, FETCH, body, self._on_fetch_response)

    def _retry_fetch(self) -> None:
        self._schedule("fetch", self.config.retry_backoff_ms, self._send_fetch)

    def _on_fetch_response(self, resp: Any) -> None:
        self._fetching = False
        part = None
        if resp is not None and resp.error_code == ErrorCode.NONE and resp.responses \
                and resp.responses[0].partitions:
            part = resp.responses[0].partitions[0]
        if part is None:
            self._retry_fetch()
            return
        cur = part.current_leader
        gen = self._gen
        if self._handle_common(part.error_code, cur.leader_id, cur.leader_epoch):
            if gen == self._gen:  # a transition schedules its own fetches
                self._retry_fetch()
            return
        if part.error_code != ErrorCode.NONE or self.state != FOLLOWER:
            self._retry_fetch()
            return
        self._schedule("fetch-timeout", self.config.fetch_timeout_ms, self._fetch_timed_out)
        self._last_fetch_ok_ms = self.timer.clock.now_ms()
        snap = part.snapshot_id
        div = part.diverging_epoch
        if snap is not None and (snap.end_offset >= 0 or snap.epoch >= 0):
            if snap.end_offset < 0 or snap.epoch < 0:
                self._retry_fetch()  # Kafka logs the bad id and fetches again
                return
            # the leader's log starts past ours: download its snapshot first (not checked
            # against the local log: it is past its end)
            self._download = SnapshotId(snap.end_offset, snap.epoch)
            self.snapshots.begin(self._download)
        elif div is not None and div.epoch >= 0:
            self._truncate_diverging(div.epoch, div.end_offset)
        elif part.records:
            self.log.append_as_follower(part.records)
        if part.high_watermark >= 0:
            self._set_hw(min(part.high_watermark, self.log.log_end_offset))
        self._schedule("fetch", 1, self._send_fetch)

    def _truncate_diverging(self, epoch: int, end_offset: int) -> None:
        """Kafka's ``truncateToEndOffset``: cut at the smaller of the leader's end of
        ``epoch`` and this log's own end of it."""
        own_epoch, own_end = _end_offset_for_epoch(self.log, epoch)
        target = min(end_offset, own_end) if own_epoch == epoch else end_offset
        if target < self._hw:
            raise AssertionError(f"node {self.node_id}: truncation to {target} below the high "
                                 f"watermark {self._hw}")
        self.log.truncate_to(target)

    # ------------------------------------------------------------------ commits
    def _set_hw(self, offset: int) -> None:
        if offset <= self._hw:
            return
        self._hw = offset
        self.log.set_high_watermark(offset)
        self._deliver()

    def _deliver(self) -> None:
        latest = self.snapshots.latest
        if self._applied < self._hw:
            # Kafka's updateListenersProgress: a new listener starts from the latest snapshot,
            # one behind the log start needs it
            if latest is not None and (self._fresh_listener
                                       or self._applied < self.log.log_start_offset):
                self._load_snapshot(latest)
            self._fresh_listener = False
        records: list[tuple[int, bytes]] = []
        while self._applied < self._hw:
            data = self.log.read(self._applied, 1 << 20, True, max_offset=None)
            if not data:
                break
            nxt = self._applied
            for b in BatchReader(data):
                if not isinstance(b, RecordBatch) or b.base_offset >= self._hw:
                    break
                if not b.is_control:
                    for r in b.records():
                        if self._applied <= r.offset < self._hw and r.value is not None:
                            records.append((r.offset, bytes(r.value)))
                nxt = min(b.last_offset + 1, self._hw)
                if nxt > b.base_offset and b.last_offset >= self._applied:
                    self._bytes_since_snapshot += b.size_in_bytes
                    self._applied_epoch = b.partition_leader_epoch
                    self._applied_ts = b.max_timestamp
            if nxt == self._applied:
                break
            self._applied = nxt
        if records and self.listener is not None:
            self.listener.handle_commit(records)
        self._maybe_snapshot()

    # ------------------------------------------------------------------ snapshots
    def _recover_snapshots(self) -> None:
        """At start, as Kafka's ``KafkaMetadataLog.apply``: snapshots below the log start go,
        and a log behind the latest snapshot (a follower stopped between downloading one and
        truncating) is truncated to start at it."""
        for sid in [s for s in self.snapshots.ids if s.end_offset < self.log.log_start_offset]:
            self.snapshots.delete(sid)
        self._truncate_to_latest_snapshot()

    def _truncate_to_latest_snapshot(self) -> bool:
        """Kafka's ``truncateToLatestSnapshot``: start the log at the latest snapshot when that
        is newer than the log's end; older snapshots are forgotten."""
        latest = self.snapshots.latest
        log_epoch = max(self.log.latest_epoch, 0)
        if latest is None or not (latest.epoch > log_epoch or (
                latest.epoch == log_epoch and latest.end_offset > self.log.log_end_offset)):
            return False
        self.log.truncate_fully_and_start_at(latest.end_offset)
        self.snapshots.delete_before(latest)
        return True

    def _load_snapshot(self, sid: SnapshotId) -> None:
        """Hand the listener the snapshot ``sid``; the records after it follow."""
        timestamp, values = decode_snapshot(self.snapshots.read(sid))
        if self.listener is not None:
            load = getattr(self.listener, "handle_load_snapshot", None)
            if load is None:
                raise NotImplementedError(f"{type(self.listener).__name__} cannot load a "
                                          "metadata snapshot")
            load(sid.end_offset, values)
        self._applied, self._applied_epoch, self._applied_ts = sid.end_offset, sid.epoch, timestamp
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.timer.clock.now_ms()

    def _maybe_snapshot(self) -> None:
        """Kafka's ``SnapshotGenerator``: snapshot the listener's state at ``_applied`` once
        enough bytes (or time, with new bytes) went by since the last one."""
        make = getattr(self.listener, "snapshot_records", None)
        if make is None or self._closed or self._bytes_since_snapshot == 0:
            return
        cfg = self.config
        now = self.timer.clock.now_ms()
        if self._bytes_since_snapshot < cfg.max_bytes_between_snapshots and not (
                cfg.max_snapshot_interval_ms > 0
                and now - self._last_snapshot_ms >= cfg.max_snapshot_interval_ms):
            return
        latest = self.snapshots.latest
        if latest is not None and latest.end_offset >= self._applied:
            return
        self.create_snapshot(make())

    def create_snapshot(self, values: list[bytes]) -> SnapshotId:
        """Write ``values`` (the listener's state after every record handed to it) as the
        snapshot at the committed offset reached, then clean the log as Kafka's
        ``KafkaMetadataLog.maybeClean`` does; the snapshot's id."""
        sid = SnapshotId(self._applied, self._applied_epoch)
        if sid not in self.snapshots.ids:
            self.snapshots.write(sid, encode_snapshot(values, sid.epoch, self.wall_ms(),
                                                      self._applied_ts))
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.timer.clock.now_ms()
        self.clean()
        return sid

    def clean(self) -> bool:
        """Kafka's ``maybeClean``: while the log and snapshots together exceed the retention
        bytes, or the oldest snapshot is older than the retention time, the log start moves to
        the next snapshot (older snapshots and whole segments below it deleted); the latest
        snapshot always stays. Whether anything was deleted."""
        cfg = self.config
        did = False
        if cfg.max_retention_bytes >= 0:
            snap_total = self.snapshots.total_size()

            def over(sid: SnapshotId) -> bool:
                nonlocal snap_total
                if sum(seg.size for seg in self.log.segments) + snap_total > cfg.max_retention_bytes:
                    snap_total -= self.snapshots.size(sid)
                    return True
                return False
            did |= self._clean_snapshots(over)
        if cfg.max_retention_ms >= 0:
            now = self.wall_ms()
            did |= self._clean_snapshots(
                lambda sid: now - self.snapshots.mtime_ms(sid) > cfg.max_retention_ms)
        return did

    def _clean_snapshots(self, predicate: Callable[[SnapshotId], bool]) -> bool:
        did = False
        ids = list(self.snapshots.ids)
        for sid, nxt in zip(ids, ids[1:]):
            if predicate(sid) and self._delete_before_snapshot(nxt):
                did = True
            else:
                break
        return did

    def _delete_before_snapshot(self, sid: SnapshotId) -> bool:
        """Kafka's ``deleteBeforeSnapshot``: the log start offset up to ``sid`` (never past the
        high watermark), the segments wholly below it and the older snapshots deleted."""
        log = self.log
        latest = self.snapshots.latest
        if latest is None or sid not in self.snapshots.ids \
                or not log.log_start_offset < sid.end_offset <= latest.end_offset \
                or sid.end_offset > min(self._hw, log.log_end_offset):
            return False
        segs = log.segments
        doomed = sum(1 for i in range(len(segs) - 1) if segs[i + 1].base_offset <= sid.end_offset)
        delete_oldest_segments(log, doomed)
        log.plog.start_offset = max(log.plog.start_offset, sid.end_offset)
        self.snapshots.delete_before(sid)
        return True

    def _send_fetch_snapshot(self, dst: int, sid: SnapshotId) -> None:
        cls = request_codec(FETCH_SNAPSHOT).cls
        body = cls(cluster_id=self.cluster_id, replica_id=self.node_id,
                   max_bytes=self.config.fetch_snapshot_max_bytes,
                   topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[cls.PartitionSnapshot(
                       partition=METADATA_PARTITION, current_leader_epoch=self._epoch,
                       snapshot_id=cls.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch),
                       position=self.snapshots.part_size(sid))])])
        self._fetching = True
        self._send(dst, FETCH_SNAPSHOT, body, self._on_fetch_snapshot_response)

    def _on_fetch_snapshot_response(self, resp: Any) -> None:
        """Kafka's ``handleFetchSnapshotResponse``: append the chunk at its position; the last
        one freezes the snapshot, the log restarts at it and the listener loads it."""
        self._fetching = False
        sid = self._download
        part = _single_partition(resp)
        if part is None or sid is None:
            self._retry_fetch()
            return
        cur = part.current_leader
        gen = self._gen
        if self._handle_common(part.error_code, cur.leader_id, cur.leader_epoch):
            if gen == self._gen:
                self._retry_fetch()
            return
        if self.state != FOLLOWER:
            self._retry_fetch()
            return
        got = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        if part.error_code != ErrorCode.NONE or got != sid \
                or part.position != self.snapshots.part_size(sid):
            # gone on the leader (SNAPSHOT_NOT_FOUND: a newer one replaced it) or not what was
            # asked: start over with a Fetch, which names the leader's latest snapshot
            self.snapshots.abandon(sid)
            self._download = None
            self._retry_fetch()
            return
        self._schedule("fetch-timeout", self.config.fetch_timeout_ms, self._fetch_timed_out)
        self._last_fetch_ok_ms = self.timer.clock.now_ms()
        size = self.snapshots.append_part(sid, bytes(part.unaligned_records or b""))
        if size >= part.size:
            try:
                decode_snapshot(self.snapshots.read_part(sid))
            except DecodeError:
                # damaged on the way or on the leader's disk: not kept, fetched again
                self.snapshots.abandon(sid)
                self._download = None
                self._retry_fetch()
                return
            self.snapshots.freeze(sid)
            self._download = None
            if not self._truncate_to_latest_snapshot():
                raise AssertionError(f"node {self.node_id}: the snapshot {sid} fetched is not "
                                     f"past the log end {self.log.log_end_offset}")
            # the log's high watermark is the snapshot's end now (Kafka's
            # updateFollowerHighWatermark after truncateToLatestSnapshot)
            self._set_hw(sid.end_offset)
            self._deliver()
        self._schedule("fetch", 1, self._send_fetch)

    def _leader_appended(self) -> None:
        self._maybe_advance_leader_hw()
        self._flush_parked(only_data=True)

    def _maybe_advance_leader_hw(self) -> None:
        """Kafka's ``LeaderState.maybeUpdateHighWatermark``: the end offset a majority of
        voters reached, once it is past this epoch's first record."""
        ends = sorted((self.log.log_end_offset if v == self.node_id
                       else self._replicas[v].end_offset for v in self.voters), reverse=True)
        hw = ends[len(self.voters) // 2]
        if hw > self._epoch_start and (not self._hw_known or hw > self._hw):
            first = not self._hw_known
            self._hw_known = True
            self._set_hw(hw)
            self._flush_parked()
            if first:
                # the controller learns it leads only once it has applied every earlier record
                self._maybe_notify(self.node_id)

    # ------------------------------------------------------------------ requests
    def handle(self, api_key: int, version: int, body: Any, respond: Callable[[Any], None]) -> None:
        """Answer one request from another node (``respond`` may be called later: a Fetch
        waits up to its max_wait for data)."""
        if api_key == VOTE:
            respond(self._handle_vote(version, body))
        elif api_key == BEGIN_QUORUM_EPOCH:
            respond(self._handle_begin_epoch(version, body))
        elif api_key == END_QUORUM_EPOCH:
            respond(self._handle_end_epoch(body))
        elif api_key == FETCH:
            self._handle_fetch(version, body, respond)
        elif api_key == DESCRIBE_QUORUM:
            respond(self._handle_describe(version, body))
        elif api_key == FETCH_SNAPSHOT:
            respond(self._handle_fetch_snapshot(body))
        else:
            raise ValueError(f"api key {api_key} is not a KRaft request")

    def _cluster_ok(self, cluster_id: Optional[str]) -> bool:
        # requests of versions without a cluster id are let through, as Kafka does
        return cluster_id is None or cluster_id == self.cluster_id

    def _leader_or_minus(self) -> int:
        return -1 if self._leader is None else self._leader

    def _voter_key_ok(self, version: int, body: Any) -> bool:
        # v1+ names the voter the request is for: a request meant for another replica
        # (a stale address) is refused, as Kafka's isValidVoterKey does
        return version < 1 or body.voter_id < 0 or body.voter_id == self.node_id

    def _prologue(self, api_key: int, body: Any) -> tuple[Any, Any, Any]:
        """(response class, the partition asked about, None), or a top-level error response
        last: another cluster, or not ``__cluster_metadata-0`` alone (one Raft partition
        only: anything else is an invalid request, as in Kafka)."""
        cls = response_codec(api_key).cls
        if not self._cluster_ok(body.cluster_id):
            return cls, None, cls(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        req = _our_partition(body)
        if req is None:
            return cls, None, cls(error_code=ErrorCode.INVALID_REQUEST)
        return cls, req, None

    def _handle_vote(self, version: int, body: Any) -> Any:
        cls, req, early = self._prologue(VOTE, body)
        if early is not None:
            return early
        error, granted = ErrorCode.NONE, False
        if not self._voter_key_ok(version, body):
            error = ErrorCode.INVALID_VOTER_KEY
        elif req.replica_id < 0:
            error = ErrorCode.INVALID_REQUEST
        elif req.replica_epoch < self._epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif not self._closed and version >= 2 and req.pre_vote:
            granted = self._grant_pre_vote(req)
        elif not self._closed:
            if req.replica_epoch > self._epoch:
                self._transition(UNATTACHED, req.replica_epoch)
            last_epoch, end = self._end()
            up_to_date = (req.last_offset_epoch, req.last_offset) >= (last_epoch, end)
            if not self.is_voter:
                granted = False
            elif self.state == UNATTACHED:
                granted = up_to_date
                if granted:
                    # persisted (in _transition) before the answer leaves
                    self._transition(VOTED, self._epoch, voted=req.replica_id)
            elif self.state == VOTED:
                granted = self._voted == req.replica_id
        return cls(error_code=ErrorCode.NONE, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                partition_index=METADATA_PARTITION, error_code=error,
                leader_id=self._leader_or_minus(), leader_epoch=self._epoch,
                vote_granted=granted)])])

    def _grant_pre_vote(self, req: Any) -> bool:
        """A 4.x controller's pre-vote (KIP-996, Vote v2): answered without any change of
        state or vote; yes when the log is up to date and no leader is heard from."""
        if not self.is_voter or self.state == LEADER:
            return False
        if self.state == FOLLOWER and self._last_fetch_ok_ms is not None and \
                self.timer.clock.now_ms() - self._last_fetch_ok_ms < self.config.fetch_timeout_ms:
            return False
        return (req.last_offset_epoch, req.last_offset) >= self._end()

    def _handle_begin_epoch(self, version: int, body: Any) -> Any:
        cls, req, early = self._prologue(BEGIN_QUORUM_EPOCH, body)
        if early is not None:
            return early
        error = ErrorCode.NONE
        if not self._voter_key_ok(version, body):
            error = ErrorCode.INVALID_VOTER_KEY
        elif req.leader_id < 0:
            error = ErrorCode.INVALID_REQUEST
        elif req.leader_epoch < self._epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif not self._closed:
            self._maybe_transition(req.leader_id, req.leader_epoch)
        return self._partition_response(cls, error)

    def _handle_end_epoch(self, body: Any) -> Any:
        cls, req, early = self._prologue(END_QUORUM_EPOCH, body)
        if early is not None:
            return early
        error = ErrorCode.NONE
        if req.leader_epoch < self._epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        elif not self._closed:
            self._maybe_transition(req.leader_id, req.leader_epoch)
            if self.state == FOLLOWER and self._leader == req.leader_id and self.is_voter:
                successors = [c.candidate_id for c in req.preferred_candidates] \
                    or list(req.preferred_successors or [])
                self._schedule("fetch-timeout", self._end_epoch_backoff(successors),
                               self._fetch_timed_out)
        return self._partition_response(cls, error)

    def _end_epoch_backoff(self, successors: list[int]) -> int:
        """How soon to stand after the leader resigned: at once for its first choice (or when
        it named none), strictly exponential further down its list."""
        if self.node_id not in successors:
            return 0 if not successors else self.config.election_backoff_max_ms
        pos = successors.index(self.node_id)
        if pos == 0:
            return 0
        return min(_RETRY_BACKOFF_BASE_MS << (pos - 1), self.config.election_backoff_max_ms)

    def _partition_response(self, cls: Any, error: int) -> Any:
        return cls(error_code=ErrorCode.NONE, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                partition_index=METADATA_PARTITION, error_code=error,
                leader_id=self._leader_or_minus(), leader_epoch=self._epoch)])])

    # Fetch, the leader's side
    def _leader_error(self, current_leader_epoch: int) -> int:
        """Why this replica cannot answer a Fetch or FetchSnapshot sent to the leader of
        ``current_leader_epoch`` (Kafka's order of checks), or NONE."""
        if current_leader_epoch < self._epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self._epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.state != LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._closed:
            return ErrorCode.BROKER_NOT_AVAILABLE
        return ErrorCode.NONE

    def _handle_fetch(self, version: int, body: Any, respond: Callable[[Any], None]) -> None:
        cls = response_codec(FETCH).cls
        if not self._cluster_ok(getattr(body, "cluster_id", None)):
            respond(cls(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        topic = body.topics[0] if len(body.topics) == 1 else None
        # the metadata partition by its topic id (Kafka's hasValidTopicPartition): a version
        # before 13 names none and is refused (before v7 the answer has no error field: empty)
        ours = topic is not None and len(topic.partitions) == 1 \
            and topic.partitions[0].partition == METADATA_PARTITION and topic.topic_id == METADATA_TOPIC_ID
        if not ours:
            respond(cls(error_code=ErrorCode.INVALID_REQUEST if version >= 7 else 0, responses=[]))
            return
        replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id
        self._answer_fetch(replica_id, body, respond, may_park=True)

    def _answer_fetch(self, replica_id: int, body: Any, respond: Callable[[Any], None],
                      may_park: bool) -> None:
        cls = response_codec(FETCH).cls
        topic = body.topics[0]
        req = topic.partitions[0]
        part = cls.PartitionData(partition_index=METADATA_PARTITION,
                                 current_leader=cls.LeaderIdAndEpoch(
                                     leader_id=self._leader_or_minus(), leader_epoch=self._epoch),
                                 high_watermark=self._hw if self._hw_known else -1,
                                 log_start_offset=self.log.log_start_offset, records=b"")
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0 \
                or req.last_fetched_epoch > req.current_leader_epoch:
            part.error_code = ErrorCode.INVALID_REQUEST
        elif (refused := self._leader_error(req.current_leader_epoch)) != ErrorCode.NONE:
            part.error_code = refused
        else:
            epoch, end = _end_offset_for_epoch(self.log, req.last_fetched_epoch)
            snap = self._snapshot_for_fetch(req.fetch_offset, req.last_fetched_epoch)
            if snap is not None:
                part.snapshot_id = cls.SnapshotId(end_offset=snap.end_offset, epoch=snap.epoch)
            elif epoch != req.last_fetched_epoch or end < req.fetch_offset:
                part.diverging_epoch = cls.EpochEndOffset(epoch=epoch, end_offset=end)
            else:
                if may_park:
                    self._replica_fetched(replica_id, req.fetch_offset)
                    part.high_watermark = self._hw if self._hw_known else -1
                if req.fetch_offset < self.log.log_end_offset:
                    part.records = self.log.read(req.fetch_offset, _MAX_FETCH_BYTES, True)
                elif may_park and body.max_wait_ms > 0:
                    self._park(replica_id, body, respond)
                    return
        respond(cls(error_code=ErrorCode.NONE, responses=[cls.FetchableTopicResponse(
            topic=topic.topic, topic_id=topic.topic_id, partitions=[part])]))

    def _snapshot_for_fetch(self, offset: int, epoch: int) -> Optional[SnapshotId]:
        """The snapshot a fetch at ``offset`` with last fetched ``epoch`` must load first
        (Kafka's ``validateOffsetAndEpoch``): when the log does not start at 0 and the fetch is
        below its start, at it with another epoch than the earliest snapshot's, or behind
        that snapshot's epoch: the latest snapshot."""
        start = self.log.log_start_offset
        earliest = self.snapshots.earliest
        if (start == 0 and offset == 0) or earliest is None:
            return None
        if offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch:
            return self.snapshots.latest
        return None

    def _handle_fetch_snapshot(self, body: Any) -> Any:
        """FetchSnapshot as Kafka's ``handleFetchSnapshotRequest`` answers it: the leader
        only, a slice of up to max_bytes of the snapshot from the position asked."""
        cls = response_codec(FETCH_SNAPSHOT).cls
        if not self._cluster_ok(body.cluster_id):
            return cls(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return cls(error_code=ErrorCode.INVALID_REQUEST)
        topic, req = body.topics[0], body.topics[0].partitions[0]
        part = cls.PartitionSnapshot(index=req.partition, current_leader=cls.LeaderIdAndEpoch(
            leader_id=self._leader_or_minus(), leader_epoch=self._epoch))

        def answer() -> Any:
            return cls(error_code=ErrorCode.NONE, topics=[cls.TopicSnapshot(
                name=topic.name, partitions=[part])])
        if topic.name != METADATA_TOPIC or req.partition != METADATA_PARTITION:
            part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            part.current_leader = cls.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
            return answer()
        part.error_code = self._leader_error(req.current_leader_epoch)
        if part.error_code != ErrorCode.NONE:
            return answer()
        sid = SnapshotId(req.snapshot_id.end_offset, req.snapshot_id.epoch)
        if sid not in self.snapshots.ids:
            part.error_code = ErrorCode.SNAPSHOT_NOT_FOUND
            return answer()
        size = self.snapshots.size(sid)
        if not 0 <= req.position < size:
            part.error_code = ErrorCode.POSITION_OUT_OF_RANGE
            return answer()
        if body.replica_id in self.voters:
            self._note_voter_fetch(body.replica_id)
        part.snapshot_id = cls.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch)
        part.size, part.position = size, req.position
        part.unaligned_records = self.snapshots.read(sid, req.position, max(0, min(body.max_bytes, size)))
        return answer()

    def _replica_fetched(self, replica_id: int, fetch_offset: int) -> None:
        now = self.wall_ms()
        st = self._replicas.get(replica_id)
        if st is None:
            if replica_id < 0 or replica_id == self.node_id:
                return  # consumers of the metadata log are not tracked
            st = self._replicas[replica_id] = _ReplicaState()
        st.end_offset = fetch_offset
        st.update_fetch(now, self.log.log_end_offset)
        if replica_id in self.voters:
            self._unacked.discard(replica_id)
            self._note_voter_fetch(replica_id)
            self._maybe_advance_leader_hw()

    def _note_voter_fetch(self, replica_id: int) -> None:
        self._fetched_voters.add(replica_id)
        # Kafka's check quorum: a majority (the leader included) fetched since the last reset
        if len(self._fetched_voters) + 1 >= self._majority:
            self._fetched_voters = set()
            self._reset_check_quorum()

    def _park(self, replica_id: int, body: Any, respond: Callable[[Any], None]) -> None:
        entry: list = []

        def expire() -> None:
            if entry and entry[0] in self._parked:
                self._parked.remove(entry[0])
                self._answer_fetch(replica_id, body, respond, may_park=False)
        task = CallbackTask(max(1, body.max_wait_ms), expire)
        entry.append((replica_id, body, respond, task))
        self._parked.append(entry[0])
        self.timer.add(task)

    def _flush_parked(self, only_data: bool = False) -> None:
        """Answer parked fetches (all of them, or those with data to read now)."""
        # taken whole first: answering may commit, and a listener may append (re-entering here)
        items, self._parked = self._parked, []
        for item in items:
            replica_id, body, respond, task = item
            if only_data and body.topics[0].partitions[0].fetch_offset >= self.log.log_end_offset:
                self._parked.append(item)
                continue
            task.cancel()
            self._answer_fetch(replica_id, body, respond, may_park=False)

    def _handle_describe(self, version: int, body: Any) -> Any:
        cls = response_codec(DESCRIBE_QUORUM).cls
        if _our_partition(body) is None:
            # Kafka answers every partition asked for with UNKNOWN_TOPIC_OR_PARTITION (and the
            # other fields at their defaults, 0)
            text = "This server does not host this topic-partition." if version >= 2 else None
            return cls(error_code=ErrorCode.NONE, topics=[cls.TopicData(
                topic_name=t.topic_name, partitions=[cls.PartitionData(
                    partition_index=p.partition_index, leader_id=0, leader_epoch=0,
                    high_watermark=0, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=text) for p in t.partitions]) for t in body.topics])
        part = cls.PartitionData(partition_index=METADATA_PARTITION,
                                 leader_id=self._leader_or_minus(), leader_epoch=self._epoch,
                                 high_watermark=self._hw if self._hw_known else -1)
        if self.state != LEADER:
            part.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            now = self.wall_ms()

            def rs(rid: int, st: _ReplicaState) -> Any:
                return cls.ReplicaState(replica_id=rid, log_end_offset=st.end_offset,
                                        last_fetch_timestamp=st.last_fetch_ms,
                                        last_caught_up_timestamp=st.last_caught_up_ms)
            me = _ReplicaState(self.log.log_end_offset, now, now)
            part.current_voters = [rs(v, me if v == self.node_id else self._replicas[v])
                                   for v in self.voters]
            part.observers = [rs(r, st) for r, st in sorted(self._replicas.items())
                              if r not in self.voters]
        return cls(error_code=ErrorCode.NONE, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[part])])

    # ------------------------------------------------------------------ introspection
    def describe(self) -> dict[str, Any]:
        """The replica's state for logs and tests."""
        return {"node_id": self.node_id, "state": self.state, "epoch": self._epoch,
                "leader_id": self._leader, "voted_id": self._voted,
                "log_end_offset": self.log.log_end_offset, "high_watermark": self._hw,
                "log_start_offset": self.log.log_start_offset,
                "snapshots": [list(s) for s in self.snapshots.ids]}


class RaftMetadataLog:
    """The :class:`~kproto.broker.cluster.controller.MetadataLog` the controller writes through: the
    node's Raft replica (``end_offset`` is the log end offset, the next append's offset)."""

    def __init__(self, replica: KRaftReplica) -> None:
        self.replica = replica

    @property
    def is_leader(self) -> bool:
        return self.replica.is_leader

    @property
    def epoch(self) -> int:
        return self.replica.epoch

    @property
    def high_watermark(self) -> int:
        return self.replica.high_watermark

    @property
    def end_offset(self) -> int:
        return self.replica.log.log_end_offset

    def append(self, values: list[bytes]) -> int:
        return self.replica.append(values)


def _single_partition(body: Any) -> Any:
    """The only partition of a KRaft request or response (None if it has not exactly one)."""
    if body is None or getattr(body, "error_code", 0) != ErrorCode.NONE:
        return None
    topics = body.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    return topics[0].partitions[0]


def _our_partition(body: Any) -> Any:
    """The partition of a KRaft request if it names ``__cluster_metadata-0`` alone, else None."""
    part = _single_partition(body)
    if part is None or body.topics[0].topic_name != METADATA_TOPIC \
            or part.partition_index != METADATA_PARTITION:
        return None
    return part


def _end_offset_for_epoch(log: Log, epoch: int) -> tuple[int, int]:
    """(epoch, end offset) as Kafka's ``KafkaMetadataLog.endOffsetForEpoch`` answers: an epoch
    below the first known one ends where the first begins (``Log.end_offset_for_epoch`` says
    unknown there), an empty log ends at its end in epoch 0."""
    epochs = log.plog.epochs
    if not epochs:
        return 0, log.log_end_offset
    if epoch < epochs[0].epoch:
        return epoch, epochs[0].start_offset
    return log.end_offset_for_epoch(epoch)
