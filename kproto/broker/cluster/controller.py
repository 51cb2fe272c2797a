"""The KRaft quorum controller's logic (Kafka's ``QuorumController``), sans-I/O.

The controller owns the cluster metadata: it answers the brokers' and admins' controller
requests by writing ``__cluster_metadata`` records through a :class:`MetadataLog` (the Raft
replica) and replaying them into its :class:`~kproto.storage.metadata_image.MetadataImage` at once, as
Kafka applies them to its in-memory timeline; the answer waits in a purgatory keyed by offset
until the log's high watermark passes the operation's last record.

What it does, after Kafka's controller managers:

* brokers (``ClusterControlManager``, ``BrokerHeartbeatManager``): registration (the broker
  epoch is the offset of the RegisterBrokerRecord), heartbeats, unfencing once the broker has
  caught up with its registration, fencing when no heartbeat came within the session timeout,
  controlled shutdown (leadership moved away first), unregistration;
* partitions (``ReplicationControlManager``, ``PartitionChangeBuilder``): topic creation with
  ``StripedReplicaPlacer``'s rack-aware placement, deletion, partition creation, ISR changes
  from partition leaders (AlterPartition), leader elections (from the ISR, unclean only where
  enabled, preferred), reassignments, periodic preferred-leader rebalancing;
* configs (``ConfigurationControlManager``: IncrementalAlterConfigs and the legacy
  AlterConfigs), producer id blocks (``ProducerIdControlManager``), ACLs
  (``AclControlManager``: CreateAcls, DeleteAcls) and SCRAM credentials
  (``ScramControlManager``: AlterUserScramCredentials). Client quotas are not kept (the
  brokers enforce none).

The Raft side calls :meth:`QuorumController.handle_commit` with committed records and
:meth:`QuorumController.handle_leader_change` on elections; time comes from a
:class:`~kproto.broker.timer.SystemTimer`.
"""
from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import astuple, dataclass
from typing import Any, Callable, Iterable, Optional, Protocol

from kproto.broker import features as feat
from kproto.broker.configs import LIST, TOPIC_CONFIGS, ConfigLevels, check_broker_configs, formatted_cluster_defaults
from kproto.broker.admin import ELECTION_NOT_NEEDED_MESSAGE, elect_leaders_error, validate_manual_assignment
from kproto.broker.log import BrokerError, topic_name_error
from kproto.broker.group_configs import GROUP_RESOURCE, GroupConfigs
from kproto.broker.security.acl import AclBinding, acl_creations, acl_deletions, acl_error_response
from kproto.broker.security.auth import image_credentials, scram_alterations, scram_records
from kproto.broker.security.tokens import DelegationTokens, TokenRequest
from kproto.broker.quotas import (ControllerMutationQuotaManager, MutationQuota, QuotaStore, alter_client_quotas,
                                  alter_error, quota_record)
from kproto.storage.metadata_image import (BROKER_RESOURCE, NO_LEADER, NO_LEADER_CHANGE, RECOVERED,
                                    RECOVERING, TOPIC_RESOURCE, BrokerInfo, MetadataImage,
                                    PartitionInfo, RecordType, encode_metadata_record,
                                    record_type_of)
from kproto.broker.cluster.raft import NotLeaderError  # one class for the Raft replica and us
from kproto.broker.timer import CallbackTask, SystemTimer
from kproto.codecs import metadata_record
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode, error_message
from kproto.errors import DecodeError
from kproto.framing import ResponseHeader, encode_response, peek_request_header
from kproto.schemas.api_keys import ApiKey

__all__ = ["NotLeaderError", "MetadataLog", "ControllerConfig", "QuorumController",
           "StripedReplicaPlacer", "InvalidReplicationFactor", "PRODUCER_ID_BLOCK_SIZE",
           "partition_record"]

Respond = Callable[[Any], None]

#: Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE = 1000
#: metadata.version 3.9-IV0, the level Kafka 3.9 bootstraps a new cluster at.
METADATA_VERSION_3_9 = feat.METADATA_VERSION_3_9
#: metadata.version 3.7-IV0, from which controllers register (ControllerRegistration).
METADATA_VERSION_3_7 = 15
#: Kafka's DirectoryId.UNASSIGNED and MIGRATING.
_UNASSIGNED = Uuid(b"\0" * 16)
_MIGRATING = Uuid(b"\0" * 15 + b"\1")
# record versions as Kafka 3.9's controller writes them at metadata.version 21: its
# BrokerRegistrationChangeRecords are v0 for (un)fencing, v1 for controlled shutdown and v2 for
# offline log dirs, whatever the highest version is
_V_REGISTER, _V_PARTITION, _V_PARTITION_CHANGE = 3, 2, 2
_V_FENCING, _V_SHUTDOWN, _V_DIRS = 0, 1, 2
# BrokerRegistrationChangeRecord.Fenced values
_FENCE, _UNFENCE = 1, -1
# ElectionType
_PREFERRED, _UNCLEAN = 0, 1
# Election kinds of the partition change builder
_ELECT_ONLINE, _ELECT_PREFERRED, _ELECT_UNCLEAN = "online", "preferred", "unclean"


def partition_record(topic_id: Uuid, index: int, replicas: list[int], isr: list[int],
                     directories: list[Uuid]) -> tuple[Any, int]:
    """A new partition's PartitionRecord (and its version) as Kafka's controller writes it:
    led by the first in-sync replica, epochs 0, each replica's log directory."""
    rec = metadata_record(3)(partition_id=index, topic_id=topic_id, replicas=replicas, isr=isr,
                             removing_replicas=[], adding_replicas=[], leader=isr[0],
                             leader_recovery_state=RECOVERED, leader_epoch=0, partition_epoch=0,
                             directories=directories)
    return rec, _V_PARTITION


class MetadataLog(Protocol):
    """What the controller needs of the Raft replica of ``__cluster_metadata``.

    Offsets below ``high_watermark`` are committed; ``end_offset`` is the offset the next
    append gets (Kafka's ``RaftClient.logEndOffset``: the controller stamps it into records,
    a broker's epoch is the offset of its RegisterBrokerRecord). The Raft side calls
    :meth:`QuorumController.handle_commit` with the committed data records in offset order,
    and :meth:`QuorumController.handle_leader_change` on each new epoch; for this node's own
    leadership only once every record committed before its epoch was handed over
    (KafkaRaftClient's rule, which :class:`~kproto.broker.cluster.raft.KRaftReplica` keeps)."""

    # read-only: an adapter over the Raft replica has them as properties
    @property
    def is_leader(self) -> bool: ...

    @property
    def epoch(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    def append(self, values: list[bytes]) -> int:
        """Append record values as one batch in the current epoch; the last offset. Raises
        :class:`NotLeaderError` when this node is not the leader."""
        ...


@dataclass
class ControllerConfig:
    """Controller settings; defaults are Kafka's."""

    cluster_id: str = ""
    node_id: int = 1
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    #: the metadata.version a new cluster is bootstrapped at
    metadata_version: int = METADATA_VERSION_3_9
    #: the transaction.version a new cluster is bootstrapped at
    transaction_version: int = feat.TRANSACTION_VERSION_LEVEL
    #: the controller quorum's voter ids (UpdateFeatures waits for each to have registered)
    voters: tuple[int, ...] = ()
    delete_topic_enable: bool = True
    #: delegation tokens (a cluster's brokers forward their changes in EnvelopeRequests): on
    #: only with the secret key; the active controller sweeps the expired ones
    delegation_token_secret_key: Optional[str] = None
    delegation_token_max_lifetime_ms: int = 7 * 24 * 3600 * 1000
    delegation_token_expiry_time_ms: int = 24 * 3600 * 1000
    delegation_token_expiry_check_interval_ms: int = 3600 * 1000


class InvalidReplicationFactor(Exception):
    """Kafka's InvalidReplicationFactorException from the replica placer."""


class StripedReplicaPlacer:
    """Kafka's ``StripedReplicaPlacer``: replicas striped over racks, then over the brokers of
    each rack, the first replica of every partition on an unfenced broker, rotating offsets so
    leaders spread; lists are reshuffled each time as many partitions as unfenced brokers were
    placed. ``brokers`` are ``(id, rack, fenced)`` of the usable brokers."""

    def __init__(self, rng: random.Random, brokers: Iterable[tuple[int, Optional[str], bool]]) -> None:
        self.rng = rng
        self.racks: dict[Optional[str], tuple[_BrokerList, _BrokerList]] = {}  # unfenced, fenced
        self.names: list[Optional[str]] = []
        self.total = self.unfenced = 0
        for bid, rack, fenced in sorted(brokers):
            lists = self.racks.get(rack)
            if lists is None:
                self.names.append(rack)
                lists = self.racks[rack] = (_BrokerList(), _BrokerList())
            lists[1 if fenced else 0].brokers.append(bid)
            self.total += 1
            self.unfenced += not fenced
        self.epoch = 0
        self._shuffle()

    def _shuffle(self) -> None:
        self.rng.shuffle(self.names)
        for unfenced, fenced in self.racks.values():
            unfenced.shuffle(self.rng)
            fenced.shuffle(self.rng)
        self.offset = self.rng.randrange(len(self.names)) if self.names else 0

    def place(self, replication_factor: int) -> list[int]:
        """The replicas of one partition."""
        if replication_factor <= 0:
            raise InvalidReplicationFactor(f"Invalid replication factor {replication_factor}: "
                                           "the replication factor must be positive.")
        if replication_factor > self.total:
            raise InvalidReplicationFactor(
                f"The target replication factor of {replication_factor} cannot be reached because "
                f"only {self.total} broker(s) are registered.")
        if self.unfenced == 0:
            raise InvalidReplicationFactor("All brokers are currently fenced.")
        if self.epoch == self.unfenced and self.unfenced > 1:
            self._shuffle()
            self.epoch = 0
        if self.offset == len(self.names):
            self.offset = 0
        n = len(self.names)
        out: list[int] = []
        first = self.offset
        while True:  # the leader: an unfenced broker, from the first rack that has one left
            b = self.racks[self.names[first]][0].next(self.epoch)
            if b >= 0:
                out.append(b)
                break
            first = (first + 1) % n
        index = (first + 1) % n
        while len(out) < replication_factor:
            unfenced, fenced = self.racks[self.names[index]]
            b = unfenced.next(self.epoch)
            if b < 0:
                b = fenced.next(self.epoch)
            if b >= 0:
                out.append(b)
            index = (index + 1) % n
        self.epoch += 1
        self.offset += 1
        return out


class _BrokerList:
    """The brokers of one rack (fenced or not) with a rotating start per placement round."""

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.epoch = 0
        self.index = 0
        self.offset = 0

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)
        self.offset = rng.randrange(len(self.brokers)) if self.brokers else 0

    def next(self, epoch: int) -> int:
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        b = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return b


def _topic_config(name: str) -> Any:
    """The definition of a topic config, or INVALID_CONFIG as Kafka's validator words it."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise BrokerError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    return d


def _copy_without(xs: Iterable[int], drop: int) -> list[int]:
    return [x for x in xs if x != drop]


class _ChangeBuilder:
    """Kafka's ``PartitionChangeBuilder``: the PartitionChangeRecord (or None) taking a
    partition to a target ISR/replica set, electing a leader as the election kind allows."""

    def __init__(self, p: PartitionInfo, acceptable: Callable[[int], bool]) -> None:
        self.p = p
        self.acceptable = acceptable
        self.election = _ELECT_ONLINE
        self.isr = list(p.isr)
        self.replicas = list(p.replicas)
        self.removing = list(p.removing_replicas)
        self.adding = list(p.adding_replicas)
        self.recovery = p.leader_recovery_state
        self.directories: Optional[Callable[[int], Uuid]] = None

    def _valid(self, r: int) -> bool:
        return r in self.isr and self.acceptable(r)

    def _elect(self) -> tuple[int, bool]:
        p = self.p
        if self.election == _ELECT_PREFERRED:
            if self.replicas and self._valid(self.replicas[0]):
                return self.replicas[0], False
            if self._valid(p.leader):
                return p.leader, False
            for r in self.replicas[1:]:
                if self._valid(r):
                    return r, False
            return NO_LEADER, False
        if self._valid(p.leader):
            return p.leader, False
        for r in self.replicas:
            if self._valid(r):
                return r, False
        if self.election == _ELECT_UNCLEAN:
            for r in self.replicas:
                if self.acceptable(r):
                    return r, True
        return NO_LEADER, False

    def _complete_reassignment(self) -> None:
        if not self.removing and not self.adding:
            return
        if any(r not in self.isr for r in self.adding):
            return
        isr = [r for r in self.isr if r not in self.removing]
        if not isr:
            return
        self.isr = isr
        self.replicas = [r for r in self.replicas if r not in self.removing]
        self.removing, self.adding = [], []

    def build(self) -> Optional[Any]:
        p = self.p
        rec = metadata_record(5)(partition_id=p.partition, topic_id=p.topic_id)
        self._complete_reassignment()
        leader, unclean = self._elect()
        if leader != p.leader:
            rec.leader = leader
            if unclean:
                # the new leader's log is the truth now: the ISR is just the leader
                rec.isr = [leader]
                if p.leader_recovery_state != RECOVERING:
                    rec.leader_recovery_state = RECOVERING
        if rec.leader == NO_LEADER_CHANGE and not set(self.replicas) >= set(p.replicas):
            rec.leader = p.leader  # replicas removed: bump the leader epoch to fence them
        # an empty ISR is never written: the last member stays, it has the latest data
        if rec.isr is None and self.isr and self.isr != list(p.isr):
            rec.isr = self.isr
        if self.replicas:
            if self.directories is not None:
                # replicas keep their directory; new ones get their broker's default
                known = dict(zip(p.replicas, p.directories))
                dirs = [known.get(r) or self.directories(r) for r in self.replicas]
                if dirs != list(p.directories):
                    rec.directories = dirs
            if self.replicas != list(p.replicas):
                rec.replicas = self.replicas
        if self.removing != list(p.removing_replicas):
            rec.removing_replicas = self.removing
        if self.adding != list(p.adding_replicas):
            rec.adding_replicas = self.adding
        if rec.leader_recovery_state == -1 and self.recovery != p.leader_recovery_state:
            rec.leader_recovery_state = self.recovery
        if (rec.leader == NO_LEADER_CHANGE and rec.isr is None and rec.replicas is None
                and rec.removing_replicas is None and rec.adding_replicas is None
                and rec.leader_recovery_state == -1 and rec.directories is None):
            return None
        return rec


@dataclass
class _Heartbeat:
    """A broker's session as the active controller sees it (not in the log)."""

    last_contact_ms: int
    metadata_offset: int = -1
    shutdown_offset: int = -1  # last offset of the controlled shutdown records, -1: none


@dataclass
class _Pending:
    offset: int
    respond: Respond
    response: Any
    api_key: int
    version: int
    body: Any


class QuorumController:
    """One controller node's logic: active when its Raft replica leads, standby otherwise
    (replaying committed records only)."""

    def __init__(self, node_id: int, log: MetadataLog, timer: SystemTimer,
                 config: Optional[ControllerConfig] = None, *,
                 rng: Optional[random.Random] = None) -> None:
        self.node_id = node_id
        self.log = log
        self.timer = timer
        self.config = config if config is not None else ControllerConfig(node_id=node_id)
        self.rng = rng if rng is not None else random.Random()
        #: the committed state, replayed from handle_commit
        self.committed = MetadataImage(self.config.cluster_id or None)
        #: committed state plus this controller's uncommitted writes while active
        self.image = self.committed
        self.committed_end = 0  # offsets below were handed to handle_commit
        self.leader_id: Optional[int] = None
        self.epoch = -1
        self.active = False
        self._want_active = False
        self._pending: deque[_Pending] = deque()  # in offset order
        self._last_written = -1
        self._heartbeats: dict[int, _Heartbeat] = {}
        self._session_task: Optional[CallbackTask] = None
        self._session_due = 0
        self._judge_after = 0  # no session judged before (after a late check, see _check_sessions)
        self._rebalance_task: Optional[CallbackTask] = None
        # controller_mutation_rate (KIP-599), counted here as in Kafka's ControllerApis: the
        # quotas of the image, the (user, client id) of the request being handled
        self._quota_store = QuotaStore()
        self._mutation_quotas = ControllerMutationQuotaManager(self._quota_store)
        self._identity: tuple[str, str] = ("ANONYMOUS", "")
        # the requester of a forwarded token change (its envelope's principal and address)
        self._token_requester: Optional[TokenRequest] = None
        self._token_task: Optional[CallbackTask] = None
        # wall-clock ms: tokens' timestamps are epoch times. Token requests come forwarded by
        # a broker, which checked the requester's rights (CREATE_TOKENS) against its ACLs
        self.tokens = DelegationTokens(self.config, None, lambda: int(time.time() * 1000))
        self._handlers: dict[int, Callable[[int, Any, Respond], None]] = {
            ApiKey.BROKER_REGISTRATION: self._broker_registration,
            ApiKey.BROKER_HEARTBEAT: self._broker_heartbeat,
            ApiKey.UNREGISTER_BROKER: self._unregister_broker,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.ALTER_PARTITION: self._alter_partition,
            ApiKey.ELECT_LEADERS: self._elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_reassignments,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.CREATE_ACLS: self._create_acls,
            ApiKey.DELETE_ACLS: self._delete_acls,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_scram,
            ApiKey.ALTER_CLIENT_QUOTAS: self._alter_client_quotas,
            ApiKey.ALLOCATE_PRODUCER_IDS: self._allocate_producer_ids,
            ApiKey.UPDATE_FEATURES: self._update_features,
            ApiKey.CONTROLLER_REGISTRATION: self._controller_registration,
            ApiKey.UNREGISTER_CONTROLLER: self._unregister_controller,
            ApiKey.CREATE_DELEGATION_TOKEN: lambda v, b, r: self._token_change(
                self.tokens.create, ApiKey.CREATE_DELEGATION_TOKEN, v, b, r),
            ApiKey.RENEW_DELEGATION_TOKEN: lambda v, b, r: self._token_change(
                self.tokens.renew, ApiKey.RENEW_DELEGATION_TOKEN, v, b, r),
            ApiKey.EXPIRE_DELEGATION_TOKEN: lambda v, b, r: self._token_change(
                self.tokens.expire, ApiKey.EXPIRE_DELEGATION_TOKEN, v, b, r),
        }

    # ================================================================== Raft side
    def handle_commit(self, records: list[tuple[int, bytes]]) -> None:
        """Committed records in offset order: replayed into the committed image (the live one
        when standby); answers waiting for them go out."""
        for offset, value in records:
            self.committed.replay_value(value, offset)
            self.committed_end = offset + 1
        self._maybe_activate()
        self._complete_pending()

    def handle_load_snapshot(self, end_offset: int, values: list[bytes]) -> None:
        """A metadata snapshot (every record below ``end_offset``) replaces the committed
        image, as Kafka's controller loads one at start or when it fell behind the log start."""
        image = MetadataImage(self.config.cluster_id or None)
        for value in values:
            image.replay_value(value, end_offset - 1)
        image.offset = end_offset - 1
        image.take_changes()
        self.committed = image
        self.committed_end = end_offset
        if not self.active:
            self.image = self.committed
        self._complete_pending()

    def snapshot_records(self) -> list[bytes]:
        """The committed image as a snapshot's record values."""
        return [encode_metadata_record(obj, v) for obj, v in self.committed.records()]

    def handle_leader_change(self, leader_id: Optional[int], epoch: int) -> None:
        """A new Raft epoch: become active when this node leads, resign otherwise. The Raft
        side tells a new leader only once it handed over every earlier committed record, so
        the image is never stale when writes start (Kafka's rule)."""
        if self.active and (leader_id != self.node_id or epoch != self.epoch):
            self._resign()
        self.leader_id, self.epoch = leader_id, epoch
        self._want_active = leader_id == self.node_id
        self._maybe_activate()

    @property
    def is_active(self) -> bool:
        return self.active

    def _maybe_activate(self) -> None:
        if not self._want_active or self.active or not self.log.is_leader:
            return
        self.active = True
        self.image = self.committed.copy()
        self._last_written = self.committed_end - 1
        now = self._now()
        self._heartbeats = {b: _Heartbeat(now) for b in self.image.brokers}
        if "metadata.version" not in self.image.features:
            # a new cluster: bootstrap the metadata version and the other features' levels as
            # Kafka's activation records do, and the cluster-wide dynamic defaults Kafka 4.x's
            # storage tool formats it with
            levels = {**feat.default_levels(), feat.METADATA_VERSION: self.config.metadata_version,
                      feat.TRANSACTION_VERSION: self.config.transaction_version}
            if not levels[feat.TRANSACTION_VERSION]:
                del levels[feat.TRANSACTION_VERSION]
            self._write([(metadata_record(12)(name=name, feature_level=level), 0)
                         for name, level in sorted(levels.items(), key=lambda x: x[0] != feat.METADATA_VERSION)] + [
                (metadata_record(4)(resource_type=BROKER_RESOURCE, resource_name="", name=k, value=v), 0)
                for k, v in formatted_cluster_defaults(self.config.min_insync_replicas).items()])
        self._schedule_session_check()
        if self.config.auto_leader_rebalance_enable:
            self._schedule_rebalance()
        if self.tokens.enabled:
            self._schedule_token_sweep()

    def _resign(self) -> None:
        self.active = False
        self._want_active = False
        self.image = self.committed
        for task in (self._session_task, self._rebalance_task, self._token_task):
            if task is not None:
                task.cancel()
        self._session_task = self._rebalance_task = self._token_task = None
        pending, self._pending = self._pending, deque()
        for p in pending:
            p.respond(self._error_response(p.api_key, p.version, p.body, ErrorCode.NOT_CONTROLLER))

    # ================================================================== writes
    def _now(self) -> int:
        return self.timer.clock.now_ms()

    def _write(self, records: list[tuple[Any, int]], respond: Optional[Respond] = None,
               response: Any = None, request: tuple[int, int, Any] = (-1, 0, None)) -> int:
        """Append ``records`` atomically, replay them, and answer once they commit; with no
        records the answer still waits for this controller's earlier writes. Returns the last
        offset of the write (or of the earlier ones)."""
        if records:
            values = [encode_metadata_record(obj, v) for obj, v in records]
            first = self.log.end_offset
            try:
                last = self.log.append(values)
            except NotLeaderError:
                if respond is not None:
                    respond(self._error_response(*request, ErrorCode.NOT_CONTROLLER))
                self._resign()
                return -1
            if last != first + len(values) - 1:
                raise RuntimeError(f"metadata log appended at {last - len(values) + 1}, "
                                   f"expected {first}")
            for i, (obj, v) in enumerate(records):
                self.image.replay(record_type_of(obj), v, obj, first + i)
            self._last_written = last
        if respond is not None:
            self._pending.append(_Pending(self._last_written, respond, response, *request))
            self._complete_pending()
        return self._last_written

    def write_records(self, records: list[tuple[Any, int]], on_commit: Callable[[bool], None]) -> None:
        """Write ``records`` that no request asked for (state kept elsewhere before, migrated
        into the log): ``on_commit(True)`` once they are committed, ``on_commit(False)`` if
        this controller resigned first; NotLeaderError at once when it is not active."""
        if not self.active:
            raise NotLeaderError(f"controller {self.node_id} is not active")
        self._write(records, lambda response: on_commit(response is not None), True)

    def _complete_pending(self) -> None:
        done_below = min(self.log.high_watermark, self.committed_end)
        while self._pending and self._pending[0].offset < done_below:
            p = self._pending.popleft()
            p.respond(p.response)

    # ================================================================== requests
    def handle(self, api_key: int, version: int, body: Any, respond: Respond,
               identity: tuple[str, str] = ("ANONYMOUS", ""), token_requester: Optional[TokenRequest] = None) -> None:
        """Serve one controller request; ``respond`` gets the response object once the
        records it wrote are committed (NOT_CONTROLLER at once when standby). ``identity``:
        the (user, client id) it came from (a forwarded one's, from its envelope), what
        the controller mutation quota is counted under."""
        handler = self._handlers.get(api_key)
        if handler is None:
            raise NotImplementedError(f"controller API {api_key}")
        if not self.active:
            respond(self._error_response(api_key, version, body, ErrorCode.NOT_CONTROLLER))
            return
        self._identity, self._token_requester = identity, token_requester
        try:
            handler(version, body, respond)
        finally:
            self._identity, self._token_requester = ("ANONYMOUS", ""), None

    def _mutation_quota(self, api_key: int, version: int) -> MutationQuota:
        """The controller mutation quota of the request being handled (the image's quotas)."""
        if self._quota_store.entries != self.image.client_quotas:
            self._quota_store.replace(self.image.client_quotas)
        return self._mutation_quotas.quota_for(*self._identity, api_key, version, self.timer.clock.now_ms)

    def _error_response(self, api_key: int, version: int, body: Any, code: int) -> Any:
        """``code`` over every item of a request (NOT_CONTROLLER and the like)."""
        if api_key < 0:
            return None  # write_records: no request to answer
        cls = response_codec(api_key).cls
        msg = error_message(code)
        if api_key in (ApiKey.BROKER_REGISTRATION, ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.ENVELOPE):
            return cls(error_code=code)
        if api_key in (ApiKey.UPDATE_FEATURES, ApiKey.CONTROLLER_REGISTRATION, ApiKey.UNREGISTER_CONTROLLER):
            return cls(error_code=code, error_message=msg)
        if api_key == ApiKey.BROKER_HEARTBEAT:
            return cls(error_code=code, is_caught_up=False, is_fenced=True, should_shut_down=False)
        if api_key in (ApiKey.UNREGISTER_BROKER, ApiKey.ALTER_PARTITION,
                       ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS):
            out = cls(error_code=code)
            if hasattr(out, "error_message") and api_key != ApiKey.ALTER_PARTITION:
                out.error_message = msg
            return out
        if api_key == ApiKey.CREATE_TOPICS:
            return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=code, error_message=msg)
                               for t in body.topics])
        if api_key == ApiKey.DELETE_TOPICS:
            if version >= 6:
                return cls(responses=[cls.DeletableTopicResult(name=t.name, topic_id=t.topic_id,
                                                               error_code=code, error_message=msg)
                                      for t in body.topics])
            return cls(responses=[cls.DeletableTopicResult(name=n, error_code=code, error_message=msg)
                                  for n in body.topic_names])
        if api_key == ApiKey.CREATE_PARTITIONS:
            return cls(results=[cls.CreatePartitionsTopicResult(name=t.name, error_code=code,
                                                                error_message=msg)
                                for t in body.topics])
        if api_key == ApiKey.ELECT_LEADERS:
            return cls(error_code=code, replica_election_results=[])
        if api_key in (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS):
            return acl_error_response(api_key, body, code, msg)
        if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
            return alter_error(body, code, msg)
        if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
            return cls(results=[cls.AlterUserScramCredentialsResult(user=n, error_code=code,
                                                                    error_message=msg)
                                for n in dict.fromkeys(names)])
        if api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
            return cls(responses=[cls.AlterConfigsResourceResponse(
                error_code=code, error_message=msg, resource_type=r.resource_type,
                resource_name=r.resource_name) for r in body.resources])
        raise NotImplementedError(f"controller API {api_key}")

    # ------------------------------------------------------------------ liveness helpers
    def _is_active_broker(self, broker_id: int) -> bool:
        """Kafka's ``ClusterControlManager.isActive``: registered, unfenced, not shutting down."""
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _check_broker_epoch(self, broker_id: int, epoch: int) -> Optional[BrokerInfo]:
        b = self.image.brokers.get(broker_id)
        return b if b is not None and b.epoch == epoch else None

    def _unclean_enabled(self, topic: str) -> bool:
        v = self.image.configs.get((TOPIC_RESOURCE, topic), {}).get("unclean.leader.election.enable")
        if v is None:
            v = self.image.configs.get((BROKER_RESOURCE, ""), {}).get("unclean.leader.election.enable")
        if v is None:
            return self.config.unclean_leader_election_enable
        return v.lower() == "true"

    def _default_dir(self, broker_id: int) -> Uuid:
        b = self.image.brokers.get(broker_id)
        if b is None:
            return _UNASSIGNED
        if not b.log_dirs:
            return _MIGRATING
        return b.log_dirs[0] if len(b.log_dirs) == 1 else _UNASSIGNED

    def _builder(self, p: PartitionInfo, acceptable: Optional[Callable[[int], bool]] = None
                 ) -> _ChangeBuilder:
        b = _ChangeBuilder(p, acceptable or self._is_active_broker)
        b.directories = self._default_dir
        return b

    def _leader_isr_updates(self, parts: Iterable[PartitionInfo], remove: int = NO_LEADER,
                            add: int = NO_LEADER) -> list[tuple[Any, int]]:
        """Kafka's ``generateLeaderAndIsrUpdates``: ``remove`` leaves the ISR and leadership,
        ``add`` (being unfenced) may lead."""
        def acceptable(r: int) -> bool:
            return r != remove and (r == add or self._is_active_broker(r))

        out = []
        for p in parts:
            b = self._builder(p, acceptable)
            if self._unclean_enabled(p.topic):
                b.election = _ELECT_UNCLEAN
            b.isr = _copy_without(p.isr, remove)
            rec = b.build()
            if rec is not None:
                out.append((rec, _V_PARTITION_CHANGE))
        return out

    def _partitions_with_in_isr(self, broker_id: int) -> list[PartitionInfo]:
        return [p for p in self.image.all_partitions() if broker_id in p.isr]

    def _fence_records(self, b: BrokerInfo) -> list[tuple[Any, int]]:
        recs = self._leader_isr_updates(self._partitions_with_in_isr(b.id), remove=b.id)
        recs.append((metadata_record(17)(broker_id=b.id, broker_epoch=b.epoch, fenced=_FENCE),
                     _V_FENCING))
        return recs

    # ------------------------------------------------------------------ sessions
    def _schedule_session_check(self) -> None:
        if not self.active:
            return
        timeout = self.config.broker_session_timeout_ms
        dues = [hb.last_contact_ms + timeout + 1 for bid, hb in self._heartbeats.items()
                if bid in self.image.brokers and not self.image.brokers[bid].fenced]
        if not dues:
            return
        due = max(min(dues), self._judge_after)
        if self._session_task is not None and not self._session_task.is_cancelled:
            if self._session_due <= due:
                return  # fires earlier and reschedules itself
            self._session_task.cancel()
        self._session_due = due = max(due, self._now())  # the check is late only after this
        self._session_task = CallbackTask(max(1, due - self._now()), self._check_sessions)
        self.timer.add(self._session_task)

    def _check_sessions(self) -> None:
        """Fence every unfenced broker whose session expired (Kafka's
        ``maybeFenceOneStaleBroker``, all of them here, one write each)."""
        self._session_task = None
        if not self.active:
            return
        now = self._now()
        timeout = self.config.broker_session_timeout_ms
        if now - self._session_due > timeout // 10:
            # The check runs late: this controller's loop was held up, so heartbeats sent
            # meanwhile still wait in its sockets. Judge the sessions once they are read (as
            # Kafka records a heartbeat's contact time even while its controller is backlogged),
            # not by a silence that was the controller's own.
            self._judge_after = now + max(1, timeout // 4)
            self._schedule_session_check()
            return
        for bid, b in sorted(self.image.brokers.items()):
            hb = self._heartbeats.setdefault(bid, _Heartbeat(now))
            if not b.fenced and hb.last_contact_ms + timeout < now:
                self._write(self._fence_records(b))
                if not self.active:
                    return
        self._schedule_session_check()

    # ------------------------------------------------------------------ rebalance
    def _schedule_rebalance(self) -> None:
        self._rebalance_task = CallbackTask(max(1, self.config.leader_imbalance_check_interval_ms),
                                            self._rebalance)
        self.timer.add(self._rebalance_task)

    def _rebalance(self) -> None:
        self._rebalance_task = None
        if not self.active:
            return
        self.rebalance_leaders()
        if self.active:
            self._schedule_rebalance()

    def rebalance_leaders(self) -> int:
        """Move leadership back to preferred replicas that are in the ISR and active (Kafka's
        ``maybeBalancePartitionLeaders``); the number of partitions moved."""
        recs = []
        for p in self.image.all_partitions():
            if p.replicas and p.leader != p.replicas[0]:
                b = self._builder(p)
                b.election = _ELECT_PREFERRED
                rec = b.build()
                if rec is not None and rec.leader == p.replicas[0]:
                    recs.append((rec, _V_PARTITION_CHANGE))
        if recs:
            self._write(recs)
        return len(recs)

    # ================================================================== brokers
    def _broker_registration(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.BROKER_REGISTRATION).cls
        req = (ApiKey.BROKER_REGISTRATION, version, body)
        cluster_id = self.image.cluster_id or self.config.cluster_id
        if cluster_id and body.cluster_id != cluster_id:
            self._write([], respond, cls(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID), req)
            return
        features = {f.name: (f.min_supported_version, f.max_supported_version) for f in body.features}
        # a broker that names no metadata.version supports only the first KRaft one (3.0-IV1)
        features.setdefault("metadata.version", (1, 1))
        finalized = dict(self.image.features)
        finalized.setdefault("metadata.version", self.config.metadata_version)
        for name, (lo, hi) in features.items():
            level = finalized.get(name)
            if level is not None and not lo <= level <= hi:
                self._write([], respond, cls(error_code=ErrorCode.UNSUPPORTED_VERSION), req)
                return
        now = self._now()
        existing = self.image.brokers.get(body.broker_id)
        records: list[tuple[Any, int]] = []
        if existing is not None:
            hb = self._heartbeats.get(existing.id)
            alive = (not existing.fenced and hb is not None
                     and hb.last_contact_ms + self.config.broker_session_timeout_ms >= now)
            if alive and existing.incarnation_id != body.incarnation_id:
                self._write([], respond, cls(error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION), req)
                return
            if not existing.fenced and existing.incarnation_id != body.incarnation_id:
                # the old incarnation died unseen: its leaderships and ISR places go first
                # (Kafka relies on the session check having fenced it already)
                records += self._fence_records(existing)[:-1]
        epoch = self.log.end_offset + len(records)
        R = metadata_record(0)
        rec = R(broker_id=body.broker_id, is_migrating_zk_broker=bool(getattr(body, "is_migrating_zk_broker", False)),
                incarnation_id=body.incarnation_id, broker_epoch=epoch,
                end_points=[R.cls.BrokerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                                 security_protocol=lst.security_protocol)
                            for lst in body.listeners],
                features=[R.cls.BrokerFeature(name=n, min_supported_version=a, max_supported_version=b)
                          for n, (a, b) in features.items()],
                rack=body.rack, fenced=True, in_controlled_shutdown=False,
                log_dirs=list(getattr(body, "log_dirs", None) or []))
        records.append((rec, _V_REGISTER))
        self._heartbeats[body.broker_id] = _Heartbeat(now)
        self._write(records, respond, cls(error_code=0, broker_epoch=epoch), req)

    def _broker_heartbeat(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.BROKER_HEARTBEAT).cls
        req = (ApiKey.BROKER_HEARTBEAT, version, body)
        b = self._check_broker_epoch(body.broker_id, body.broker_epoch)
        if b is None:
            self._write([], respond, cls(error_code=ErrorCode.STALE_BROKER_EPOCH, is_caught_up=False,
                                         is_fenced=True, should_shut_down=False), req)
            return
        now = self._now()
        hb = self._heartbeats.setdefault(b.id, _Heartbeat(now))
        hb.last_contact_ms = now
        hb.metadata_offset = body.current_metadata_offset
        caught_up = body.current_metadata_offset >= b.epoch
        records: list[tuple[Any, int]] = []
        leads = any(p.leader == b.id for p in self.image.all_partitions())
        if b.fenced:
            state = "shutdown" if body.want_shut_down else (
                "fenced" if body.want_fence or not caught_up else "unfenced")
        elif b.in_controlled_shutdown:
            state = "controlled" if leads or hb.shutdown_offset > self._lowest_active_offset() else "shutdown"
        elif body.want_fence:
            state = "shutdown" if body.want_shut_down else "fenced"
        elif body.want_shut_down:
            state = "controlled" if leads else "shutdown"
        else:
            state = "unfenced"
        if b.fenced and state == "unfenced":
            records.append((metadata_record(17)(broker_id=b.id, broker_epoch=b.epoch, fenced=_UNFENCE),
                            _V_FENCING))
            leaderless = [p for p in self.image.all_partitions() if p.leader == NO_LEADER]
            records += self._leader_isr_updates(leaderless, add=b.id)
        elif not b.fenced and state in ("fenced", "shutdown"):
            records += self._fence_records(b)
        elif state == "controlled" and not b.in_controlled_shutdown:
            records.append((metadata_record(17)(broker_id=b.id, broker_epoch=b.epoch,
                                                in_controlled_shutdown=1), _V_SHUTDOWN))
            records += self._leader_isr_updates(self._partitions_with_in_isr(b.id), remove=b.id)
        if version >= 1 and body.offline_log_dirs:
            records += self._offline_dirs(b, list(body.offline_log_dirs))
        response = cls(error_code=0, is_caught_up=caught_up,
                       is_fenced=state in ("fenced", "shutdown"), should_shut_down=state == "shutdown")
        last = self._write(records, respond, response, req)
        if state == "controlled" and records:
            hb.shutdown_offset = last
        self._schedule_session_check()

    def _offline_dirs(self, b: BrokerInfo, offline: list[Uuid]) -> list[tuple[Any, int]]:
        """Kafka's ``handleDirectoriesOffline``: the broker leaves the ISR and leadership of
        the partitions in log dirs newly offline; its registration keeps the others."""
        gone = [d for d in b.log_dirs if d in offline]
        if not gone:
            return []
        parts = [p for p in self.image.all_partitions() if b.id in p.replicas and p.directories
                 and p.directories[p.replicas.index(b.id)] in gone]
        recs = self._leader_isr_updates(parts, remove=b.id)
        recs.append((metadata_record(17)(broker_id=b.id, broker_epoch=b.epoch,
                                         log_dirs=[d for d in b.log_dirs if d not in gone]), _V_DIRS))
        return recs

    def _lowest_active_offset(self) -> float:
        offsets = [hb.metadata_offset for bid, hb in self._heartbeats.items()
                   if self._is_active_broker(bid)]
        return min(offsets) if offsets else float("inf")

    def _unregister_broker(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.UNREGISTER_BROKER).cls
        req = (ApiKey.UNREGISTER_BROKER, version, body)
        b = self.image.brokers.get(body.broker_id)
        if b is None:
            self._write([], respond, cls(error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                                         error_message=f"Broker ID {body.broker_id} is not "
                                                       "currently registered"), req)
            return
        records = self._leader_isr_updates(self._partitions_with_in_isr(b.id), remove=b.id)
        records.append((metadata_record(1)(broker_id=b.id, broker_epoch=b.epoch), 0))
        self._heartbeats.pop(b.id, None)
        self._write(records, respond, cls(error_code=0, error_message=None), req)

    def _allocate_producer_ids(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.ALLOCATE_PRODUCER_IDS).cls
        req = (ApiKey.ALLOCATE_PRODUCER_IDS, version, body)
        if self._check_broker_epoch(body.broker_id, body.broker_epoch) is None:
            self._write([], respond, cls(error_code=ErrorCode.STALE_BROKER_EPOCH), req)
            return
        start = self.image.next_producer_id
        if start > 2**63 - 1 - PRODUCER_ID_BLOCK_SIZE:
            self._write([], respond, cls(error_code=ErrorCode.UNKNOWN_SERVER_ERROR), req)
            return
        rec = metadata_record(15)(broker_id=body.broker_id, broker_epoch=body.broker_epoch,
                                  next_producer_id=start + PRODUCER_ID_BLOCK_SIZE)
        self._write([(rec, 0)], respond, cls(error_code=0, producer_id_start=start,
                                             producer_id_len=PRODUCER_ID_BLOCK_SIZE), req)

    # ================================================================== features
    def _update_features(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's FeatureControlManager: the checks of kproto.broker.features against this
        controller's and every registered broker's supported ranges, then one
        FeatureLevelRecord per update (none when validating only or on any error)."""
        updates = feat.requested_updates(version, body)
        outcome = feat.update_features(
            updates, self.image.features, node_id=self.node_id,
            validate_only=version >= 1 and body.validate_only,
            brokers={b.id: b.features for b in self.image.brokers.values()},
            controllers={c.id: c.features for c in self.image.controllers.values()},
            quorum=self.config.voters)
        records = [(metadata_record(12)(name=name, feature_level=level), 0)
                   for name, level in outcome.levels.items()]
        self._write(records, respond, feat.update_features_response(version, updates, outcome),
                    (ApiKey.UPDATE_FEATURES, version, body))

    # ================================================================== controllers
    def _metadata_version(self) -> int:
        return self.image.features.get(feat.METADATA_VERSION, self.config.metadata_version)

    def _controller_registration(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's ClusterControlManager.registerController: a RegisterControllerRecord with
        the controller's listeners and supported features (from metadata.version 3.7-IV0)."""
        cls = response_codec(ApiKey.CONTROLLER_REGISTRATION).cls
        req = (ApiKey.CONTROLLER_REGISTRATION, version, body)
        if self._metadata_version() < METADATA_VERSION_3_7:
            self._write([], respond, cls(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=
                                         "The current MetadataVersion is too old to support controller "
                                         "registrations."), req)
            return
        R = metadata_record(27)
        rec = R(controller_id=body.controller_id, incarnation_id=body.incarnation_id,
                zk_migration_ready=body.zk_migration_ready,
                end_points=[R.cls.ControllerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                                     security_protocol=lst.security_protocol)
                            for lst in body.listeners],
                features=[R.cls.ControllerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                                  max_supported_version=f.max_supported_version)
                          for f in body.features])
        self._write([(rec, 0)], respond, cls(error_code=0, error_message=None), req)

    def _unregister_controller(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka 4.4's unregisterController: not the active controller itself; from
        metadata.version 4.4-IV2 on, a registered controller is removed with an
        UnregisterControllerRecord."""
        cls = response_codec(ApiKey.UNREGISTER_CONTROLLER).cls
        req = (ApiKey.UNREGISTER_CONTROLLER, version, body)
        if body.controller_id == self.node_id:
            self._write([], respond, cls(error_code=ErrorCode.INVALID_REQUEST, error_message=
                                         "Controller cannot unregister itself while it is active."), req)
            return
        if self._metadata_version() < feat.METADATA_VERSION_4_4_IV2:
            self._write([], respond, cls(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=
                                         "The current MetadataVersion is too old to support controller "
                                         "unregistration."), req)
            return
        if body.controller_id not in self.image.controllers:
            self._write([], respond, cls(error_code=ErrorCode.CONTROLLER_ID_NOT_REGISTERED, error_message=
                                         f"Controller ID {body.controller_id} is not currently registered."), req)
            return
        self._write([(metadata_record(29)(controller_id=body.controller_id), 0)], respond,
                    cls(error_code=0, error_message=None), req)

    # ================================================================== topics
    def _placer(self) -> StripedReplicaPlacer:
        return StripedReplicaPlacer(self.rng, [(b.id, b.rack, b.fenced)
                                               for b in self.image.brokers.values()
                                               if not b.in_controlled_shutdown])

    def _new_topic_id(self) -> Uuid:
        while True:
            u = Uuid(self.rng.getrandbits(128).to_bytes(16, "big"))
            if u not in (_UNASSIGNED, _MIGRATING) and not str(u).startswith("-"):
                return u

    def _partition_record(self, topic_id: Uuid, index: int, replicas: list[int],
                          isr: list[int]) -> tuple[Any, int]:
        return partition_record(topic_id, index, replicas, isr, [self._default_dir(r) for r in replicas])

    def _check_manual(self, index: int, replicas: list[int]) -> list[int]:
        """A manual assignment's ISR, or BrokerError as Kafka words it."""
        if not replicas:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              "The manual partition assignment includes an empty replica list.")
        if len(set(replicas)) != len(replicas):
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"The manual partition assignment includes the broker {replicas} "
                              "more than once.")
        for r in replicas:
            if r not in self.image.brokers:
                raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"The manual partition assignment includes broker {r}, but no "
                                  "such broker is registered.")
        isr = [r for r in replicas if self._is_active_broker(r)]
        if not isr:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"All brokers specified in the manual partition assignment for "
                              f"partition {index} are fenced or in controlled shutdown.")
        return isr

    def _place(self, placer: StripedReplicaPlacer, start: int, count: int, rf: int
               ) -> list[tuple[list[int], list[int]]]:
        out = []
        for _ in range(count):
            try:
                replicas = placer.place(rf)
            except InvalidReplicationFactor as exc:
                raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                  f"Unable to replicate the partition {rf} time(s): {exc}") from None
            isr = [r for r in replicas if self._is_active_broker(r)]
            if not isr:
                raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                  f"Unable to replicate the partition {rf} time(s): All brokers "
                                  "are currently fenced or in controlled shutdown.")
            out.append((replicas, isr))
        return out

    def _topic_config_records(self, name: str, configs: Iterable[Any]) -> list[tuple[Any, int]]:
        return [(metadata_record(4)(resource_type=TOPIC_RESOURCE, resource_name=name, name=c.name,
                                    value=_topic_config(c.name).check(c.value)), 0)
                for c in configs]

    def _create_topics(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.CREATE_TOPICS).cls
        quota = self._mutation_quota(ApiKey.CREATE_TOPICS, version)
        records: list[tuple[Any, int]] = []
        results = []
        names = [t.name for t in body.topics]
        placer = None
        for t in body.topics:
            res = cls.CreatableTopicResult(name=t.name, error_code=0, error_message=None)
            results.append(res)
            try:
                if names.count(t.name) > 1:
                    raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                why = topic_name_error(t.name)
                if why is not None:
                    raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
                if t.name in self.image.topics:
                    raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                      f"Topic '{t.name}' already exists.")
                collide = t.name.replace(".", "_")
                for other in self.image.topics:
                    if other != t.name and other.replace(".", "_") == collide:
                        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                          f"Topic '{t.name}' collides with existing topic: {other}")
                topic_id = self._new_topic_id()
                config_records = self._topic_config_records(t.name, t.configs)
                if t.assignments:
                    if t.replication_factor != -1:
                        raise BrokerError(ErrorCode.INVALID_REQUEST, "A manual partition assignment "
                                          "was specified, but replication factor was not set to -1.")
                    if t.num_partitions != -1:
                        raise BrokerError(ErrorCode.INVALID_REQUEST, "A manual partition assignment "
                                          "was specified, but numPartitions was not set to -1.")
                    manual: dict[int, tuple[list[int], list[int]]] = {}
                    for a in t.assignments:
                        if a.partition_index in manual:
                            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Found multiple "
                                              f"manual partition assignments for partition {a.partition_index}")
                        replicas = list(a.broker_ids)
                        if manual and len(replicas) != len(next(iter(manual.values()))[0]):
                            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                              "The manual partition assignment includes a partition with "
                                              f"{len(replicas)} replica(s), but this is not consistent with "
                                              "previous partitions, which have "
                                              f"{len(next(iter(manual.values()))[0])} replica(s).")
                        manual[a.partition_index] = (replicas, self._check_manual(a.partition_index, replicas))
                    if sorted(manual) != list(range(len(manual))):
                        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          "partitions should be a consecutive 0-based integer sequence")
                    parts = [manual[i] for i in range(len(manual))]
                else:
                    n = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
                    rf = (self.config.default_replication_factor if t.replication_factor == -1
                          else t.replication_factor)
                    if t.replication_factor < -1 or t.replication_factor == 0:
                        raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                          "Replication factor must be larger than 0, or -1 to use "
                                          "the default value.")
                    if t.num_partitions < -1 or t.num_partitions == 0:
                        raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                                          "Number of partitions was set to an invalid non-positive value.")
                    if placer is None:
                        placer = self._placer()
                    parts = self._place(placer, 0, n, rf)
                if not quota.record(len(parts)):  # after every other check, as Kafka
                    raise BrokerError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
                if version >= 5:
                    res.topic_config_error_code = 0
                continue
            if version >= 5:
                given = {r.name: r.value for r, _ in config_records}
                res.num_partitions = len(parts)
                res.replication_factor = len(parts[0][0])
                res.topic_config_error_code = 0
                # as DescribeConfigs would show them, over the cluster-wide dynamic defaults
                levels = ConfigLevels("", {"": self.image.configs.get((BROKER_RESOURCE, ""), {})}, {})
                res.configs = [cls.CreatableTopicConfigs(
                    name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                    is_sensitive=e.sensitive) for e in levels.describe_overrides(given)]
            if version >= 7:
                res.topic_id = topic_id
            if body.validate_only:
                continue
            # ConfigRecords go between the TopicRecord and the PartitionRecords, as in Kafka
            records.append((metadata_record(2)(name=t.name, topic_id=topic_id), 0))
            records += config_records
            records += [self._partition_record(topic_id, i, r, isr) for i, (r, isr) in enumerate(parts)]
        self._write(records, respond, cls(topics=results, throttle_time_ms=quota.throttle_time_ms()),
                    (ApiKey.CREATE_TOPICS, version, body))

    def _delete_topics(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.DELETE_TOPICS).cls
        quota = self._mutation_quota(ApiKey.DELETE_TOPICS, version)
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        else:
            wanted = [(n, None) for n in body.topic_names]
        records, results, seen = [], [], set()
        for name, topic_id in wanted:
            res = cls.DeletableTopicResult(name=name, error_code=0, error_message=None)
            if version >= 6:
                res.topic_id = topic_id
            results.append(res)
            if name is not None:
                t = self.image.topics.get(name)
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                t = self.image.topics_by_id.get(topic_id)
                code = ErrorCode.UNKNOWN_TOPIC_ID
            if not self.config.delete_topic_enable:
                t, code = None, ErrorCode.TOPIC_DELETION_DISABLED
            if t is None:
                res.error_code = code
                if version >= 5:
                    res.error_message = error_message(code)
                continue
            res.name = t.name
            if version >= 6:
                res.topic_id = t.topic_id
            if t.topic_id not in seen and not quota.record(len(t.partitions)):
                res.error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
                continue
            if t.topic_id not in seen:
                seen.add(t.topic_id)
                records.append((metadata_record(9)(topic_id=t.topic_id), 0))
        self._write(records, respond, cls(responses=results, throttle_time_ms=quota.throttle_time_ms()),
                    (ApiKey.DELETE_TOPICS, version, body))

    def _create_partitions(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.CREATE_PARTITIONS).cls
        quota = self._mutation_quota(ApiKey.CREATE_PARTITIONS, version)
        records: list[tuple[Any, int]] = []
        results = []
        names = [t.name for t in body.topics]
        placer = None
        for t in body.topics:
            res = cls.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
            results.append(res)
            try:
                if names.count(t.name) > 1:
                    raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                topic = self.image.topics.get(t.name)
                if topic is None:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # Kafka: no message
                have = len(topic.partitions)
                if t.count < have:
                    raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                                      f"The topic {t.name} currently has {have} partition(s); "
                                      f"{t.count} would not be an increase.")
                if t.count == have:
                    raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                                      f"Topic already has {have} partition(s).")
                add = t.count - have
                if t.assignments is not None:
                    if len(t.assignments) != add:
                        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                          f"Attempted to add {add} additional partition(s), but only "
                                          f"{len(t.assignments)} assignment(s) were specified.")
                if not quota.record(add):  # Kafka's controller counts them here
                    raise BrokerError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
                if t.assignments is not None:
                    parts = [(list(a.broker_ids), self._check_manual(have + i, list(a.broker_ids)))
                             for i, a in enumerate(t.assignments)]
                else:
                    rf = len(topic.partitions[0].replicas) if topic.partitions else 1
                    if placer is None:
                        placer = self._placer()
                    parts = self._place(placer, have, add, rf)
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
                continue
            if not body.validate_only:
                records += [self._partition_record(topic.topic_id, have + i, r, isr)
                            for i, (r, isr) in enumerate(parts)]
        self._write(records, respond, cls(results=results, throttle_time_ms=quota.throttle_time_ms()),
                    (ApiKey.CREATE_PARTITIONS, version, body))

    # ================================================================== partitions
    def _alter_partition(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.ALTER_PARTITION).cls
        req = (ApiKey.ALTER_PARTITION, version, body)
        if self._check_broker_epoch(body.broker_id, body.broker_epoch) is None:
            self._write([], respond, cls(error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[]), req)
            return
        records: list[tuple[Any, int]] = []
        topics_out = []
        for td in body.topics:
            out_t = cls.TopicData(partitions=[])
            if version >= 2:
                out_t.topic_id = td.topic_id
                topic = self.image.topics_by_id.get(td.topic_id)
                missing = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                out_t.topic_name = td.topic_name
                topic = self.image.topics.get(td.topic_name)
                missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics_out.append(out_t)
            for pd in td.partitions:
                out_p = cls.PartitionData(partition_index=pd.partition_index, error_code=0)
                out_t.partitions.append(out_p)
                p = None if topic is None else topic.partitions.get(pd.partition_index)
                if p is None:
                    out_p.error_code = missing if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if version >= 3:
                    new_isr = [(s.broker_id, s.broker_epoch) for s in pd.new_isr_with_epochs]
                else:
                    new_isr = [(r, -1) for r in pd.new_isr]
                code = self._validate_alter_partition(body.broker_id, version, p, pd, new_isr)
                if code:
                    out_p.error_code = code
                    continue
                b = self._builder(p)
                if self._unclean_enabled(p.topic):
                    b.election = _ELECT_UNCLEAN
                b.isr = [r for r, _ in new_isr]
                if version >= 1:
                    b.recovery = pd.leader_recovery_state
                rec = b.build()
                new = p
                if rec is not None:
                    records.append((rec, _V_PARTITION_CHANGE))
                    new = p.merge(rec)
                    if rec.leader not in (body.broker_id, NO_LEADER_CHANGE):
                        # a completed reassignment moved leadership away from the asker: it
                        # must fetch metadata before trying again
                        out_p.error_code = (ErrorCode.NEW_LEADER_ELECTED if version > 1
                                            else ErrorCode.FENCED_LEADER_EPOCH)
                        continue
                out_p.leader_id, out_p.leader_epoch = new.leader, new.leader_epoch
                out_p.isr, out_p.partition_epoch = list(new.isr), new.partition_epoch
                if version >= 1:
                    out_p.leader_recovery_state = new.leader_recovery_state
        self._write(records, respond, cls(error_code=0, topics=topics_out), req)

    def _validate_alter_partition(self, broker_id: int, version: int, p: PartitionInfo, pd: Any,
                                  new_isr: list[tuple[int, int]]) -> int:
        """Kafka's ``validateAlterPartitionData``: the error code, 0 when acceptable."""
        # the asker knows a newer state than ours: we are probably no longer the controller
        if pd.leader_epoch > p.leader_epoch or pd.partition_epoch > p.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if pd.leader_epoch < p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if p.leader != broker_id:
            return ErrorCode.INVALID_REQUEST
        if pd.partition_epoch < p.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        ids = [r for r, _ in new_isr]
        if len(set(ids)) != len(ids) or any(r not in p.replicas for r in ids):
            return ErrorCode.INVALID_REQUEST
        if p.leader not in ids:
            return ErrorCode.INVALID_REQUEST
        lrs = pd.leader_recovery_state if version >= 1 else RECOVERED
        if lrs == RECOVERING and len(ids) > 1:
            return ErrorCode.INVALID_REQUEST
        if p.leader_recovery_state == RECOVERED and lrs == RECOVERING:
            return ErrorCode.INVALID_REQUEST
        for r, epoch in new_isr:
            b = self.image.brokers.get(r)
            ok = (b is not None and not b.fenced and not b.in_controlled_shutdown
                  and (epoch == -1 or epoch == b.epoch))
            if not ok:
                return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
        return 0

    def _elect_leaders(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.ELECT_LEADERS).cls
        kind = body.election_type if version >= 1 else _PREFERRED
        if kind not in (_PREFERRED, _UNCLEAN):  # the whole request refused, as Kafka's controller
            self._write([], respond, elect_leaders_error(cls, version, body, ErrorCode.INVALID_REQUEST,
                                                         f"Unknown election type {kind}"),
                        (ApiKey.ELECT_LEADERS, version, body))
            return
        explicit = body.topic_partitions is not None
        if explicit:
            wanted = [(tp.topic, i) for tp in body.topic_partitions for i in tp.partitions]
        else:
            wanted = [(p.topic, p.partition) for p in self.image.all_partitions()]
        records: list[tuple[Any, int]] = []
        # electing everything, every topic gets a result, even with no partition in it
        by_topic: dict[str, list[Any]] = {} if explicit else {t: [] for t in self.image.topics}
        for topic, index in wanted:
            code, msg = self._elect_one(topic, index, kind, records)
            if not explicit and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            by_topic.setdefault(topic, []).append(
                cls.PartitionResult(partition_id=index, error_code=code, error_message=msg))
        results = [cls.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in by_topic.items()]
        self._write(records, respond, cls(error_code=0, replica_election_results=results),
                    (ApiKey.ELECT_LEADERS, version, body))

    def _elect_one(self, topic: str, index: int, kind: int, records: list) -> tuple[int, Optional[str]]:
        if topic not in self.image.topics:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
        p = self.image.partition(topic, index)
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{index}"
        if (kind == _PREFERRED and p.replicas and p.leader == p.replicas[0]) or (
                kind == _UNCLEAN and p.leader != NO_LEADER):
            return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE
        b = self._builder(p)
        b.election = _ELECT_PREFERRED if kind == _PREFERRED else _ELECT_UNCLEAN
        rec = b.build()
        if rec is None:
            code = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if kind == _PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            return code, error_message(code)
        records.append((rec, _V_PARTITION_CHANGE))
        return 0, None

    def _alter_reassignments(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
        allow_rf = getattr(body, "allow_replication_factor_change", True) if version >= 1 else True
        records: list[tuple[Any, int]] = []
        topics_out = []
        for t in body.topics:
            out_t = cls.ReassignableTopicResponse(name=t.name, partitions=[])
            topics_out.append(out_t)
            for rp in t.partitions:
                out_p = cls.ReassignablePartitionResponse(partition_index=rp.partition_index,
                                                          error_code=0, error_message=None)
                out_t.partitions.append(out_p)
                try:
                    rec = self._reassign(t.name, rp.partition_index, rp.replicas, allow_rf)
                except BrokerError as exc:
                    out_p.error_code, out_p.error_message = exc.code, exc.message
                    continue
                if rec is not None:
                    records.append((rec, _V_PARTITION_CHANGE))
        resp = cls(error_code=0, error_message=None, responses=topics_out)
        if version >= 1:
            resp.allow_replication_factor_change = allow_rf
        self._write(records, respond, resp, (ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, body))

    def _reassign(self, topic: str, index: int, target: Optional[list[int]], allow_rf: bool
                  ) -> Optional[Any]:
        if topic not in self.image.topics:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}.")
        p = self.image.partition(topic, index)
        if p is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"Unable to find partition {topic}:{index}.")
        original = [r for r in p.replicas if r not in p.adding_replicas]
        b = self._builder(p)
        if self._unclean_enabled(topic):
            b.election = _ELECT_UNCLEAN
        if target is None:  # cancel: back to the replicas before the reassignment
            if not p.is_reassigning:
                raise BrokerError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)  # Kafka: no message
            isr = [r for r in p.isr if r not in p.adding_replicas]
            if not isr:
                if not self._unclean_enabled(topic):
                    raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"Unable to revert partition assignment for {topic}:{index} "
                                      "because it would require an unclean leader election.")
                isr, b.election = list(original), _ELECT_UNCLEAN
            b.isr, b.replicas, b.removing, b.adding = isr, original, [], []
            return b.build()
        target = list(target)
        validate_manual_assignment(target, self.image.brokers)
        if not allow_rf and len(target) != len(original):
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"The replication factor is changed from {len(original)} to "
                              f"{len(target)}")
        removing = [r for r in original if r not in target]
        adding = [r for r in target if r not in original]
        b.replicas = target + removing
        b.removing, b.adding = removing, adding
        # a previous reassignment's extra replicas leave the ISR with it
        b.isr = [r for r in p.isr if r in b.replicas]
        return b.build()

    def _list_reassignments(self, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(ApiKey.LIST_PARTITION_REASSIGNMENTS).cls
        if body.topics is None:
            wanted = [p for p in self.image.all_partitions()]
        else:
            wanted = [p for t in body.topics for i in t.partition_indexes
                      if (p := self.image.partition(t.name, i)) is not None]
        by_topic: dict[str, list[Any]] = {}
        for p in wanted:
            if p.is_reassigning:
                by_topic.setdefault(p.topic, []).append(cls.OngoingPartitionReassignment(
                    partition_index=p.partition, replicas=list(p.replicas),
                    adding_replicas=list(p.adding_replicas), removing_replicas=list(p.removing_replicas)))
        topics = [cls.OngoingTopicReassignment(name=n, partitions=ps) for n, ps in by_topic.items()]
        self._write([], respond, cls(error_code=0, error_message=None, topics=topics),
                    (ApiKey.LIST_PARTITION_REASSIGNMENTS, version, body))

    # ================================================================== configs
    def _incremental_alter_configs(self, version: int, body: Any, respond: Respond) -> None:
        self._alter_resources(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, body, respond)

    def _alter_configs(self, version: int, body: Any, respond: Respond) -> None:
        """The legacy AlterConfigs: each resource's configs replaced whole (Kafka's
        ``legacyAlterConfigs``: the keys not given are deleted)."""
        self._alter_resources(ApiKey.ALTER_CONFIGS, version, body, respond)

    def _alter_resources(self, api_key: int, version: int, body: Any, respond: Respond) -> None:
        cls = response_codec(api_key).cls
        records: list[tuple[Any, int]] = []
        out = []
        for r in body.resources:
            res = cls.AlterConfigsResourceResponse(error_code=0, error_message=None,
                                                   resource_type=r.resource_type,
                                                   resource_name=r.resource_name)
            out.append(res)
            try:
                recs = self._config_changes(r, legacy=api_key == ApiKey.ALTER_CONFIGS)
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
                continue
            if not body.validate_only:
                records += recs
        self._write(records, respond, cls(responses=out), (api_key, version, body))

    def _config_changes(self, r: Any, legacy: bool = False) -> list[tuple[Any, int]]:
        """Kafka's ``ConfigurationControlManager.incrementalAlterConfigResource``: a record
        per key whose value changes (SET 0, DELETE 1, APPEND 2, SUBTRACT 3); ``legacy``
        (AlterConfigs) sets every key given and deletes the others."""
        kind, name = r.resource_type, r.resource_name
        if kind == TOPIC_RESOURCE:
            if name not in self.image.topics:
                raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"The topic '{name}' does not exist.")
        elif kind == BROKER_RESOURCE:
            if name and not name.lstrip("-").isdigit():
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"Illegal non-integral BROKER resource "
                                  f"type name {name}")
        elif kind == GROUP_RESOURCE and not legacy:
            if not name:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        else:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {kind}.")
        current = dict(self.image.configs.get((kind, name), {}))
        changed: dict[str, Optional[str]] = {}
        if legacy:
            given = {c.name for c in r.configs}
            changed = {k: None for k in current if k not in given}
        for c in r.configs:
            d = _topic_config(c.name) if kind == TOPIC_RESOURCE else None
            op = 0 if legacy else c.config_operation
            old = current.get(c.name)
            if op == 0:
                new = c.value if d is None else d.check(c.value)
            elif op == 1:
                new = None
            elif op in (2, 3):
                if d is not None and d.type != LIST:
                    raise BrokerError(ErrorCode.INVALID_CONFIG, f"Config value "
                                      f"{'append' if op == 2 else 'subtract'} is not allowed for "
                                      f"config key: {c.name}")
                items = old.split(",") if old else (d.default.split(",") if d and d.default else [])
                values = [v.strip() for v in (c.value or "").split(",") if v.strip()]
                if op == 2:
                    items += [v for v in values if v not in items]
                else:
                    items = [v for v in items if v not in values]
                new = ",".join(items)
                if d is not None:
                    new = d.check(new)
            else:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {op}")
            current[c.name] = new
            if new != old or c.name in changed:
                changed[c.name] = new
        if kind == BROKER_RESOURCE:
            # what the broker checks before forwarding (Kafka's ConfigAdminManager.preprocess)
            changed.update(check_broker_configs({k: v for k, v in changed.items() if v is not None}))
        elif kind == GROUP_RESOURCE:
            # Kafka's GroupConfig.validate of the group's configs after the change
            GroupConfigs(None).validate(name, current)
        return [(metadata_record(4)(resource_type=kind, resource_name=name, name=k, value=v), 0)
                for k, v in changed.items()]

    # ================================================================== ACLs and SCRAM
    def _acl_bindings(self) -> dict[AclBinding, Uuid]:
        return {AclBinding(*astuple(e)): acl_id for acl_id, e in self.image.acls.items()}

    def _create_acls(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's ``AclControlManager.createAcls``: an AccessControlEntryRecord with a new
        random id for each valid ACL not already there."""
        response, new = acl_creations(body, self._acl_bindings())
        record = metadata_record(RecordType.ACCESS_CONTROL_ENTRY)
        records = [(record(id=self.new_acl_id(), resource_type=b.resource_type,
                           resource_name=b.resource_name, pattern_type=b.pattern_type,
                           principal=b.principal, host=b.host, operation=b.operation,
                           permission_type=b.permission), 0) for b in new]
        self._write(records, respond, response, (ApiKey.CREATE_ACLS, version, body))

    def new_acl_id(self) -> Uuid:
        """A random id no ACL of the image has (Kafka's ``AclControlManager.newAclId``)."""
        while True:
            acl_id = Uuid(self.rng.randbytes(16))
            if acl_id != Uuid.ZERO and acl_id not in self.image.acls:
                return acl_id

    def _delete_acls(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's ``AclControlManager.deleteAcls``: a RemoveAccessControlEntryRecord for each
        ACL a filter matches."""
        bindings = self._acl_bindings()
        response, gone = acl_deletions(body, bindings)
        record = metadata_record(RecordType.REMOVE_ACCESS_CONTROL_ENTRY)
        self._write([(record(id=bindings[b]), 0) for b in sorted(gone)], respond, response,
                    (ApiKey.DELETE_ACLS, version, body))

    def _alter_scram(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's ``ScramControlManager.alterCredentials``: a UserScramCredentialRecord (the
        stored and server keys derived from the salted password) per upsertion, a
        RemoveUserScramCredentialRecord per deletion."""
        response, changes = scram_alterations(body, image_credentials(self.image.scram))
        records = scram_records(changes)
        self._write(records, respond, response, (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version, body))

    # ================================================================== delegation tokens
    def _token_change(self, change: Callable[..., tuple[Any, list[tuple[Any, int]]]], api_key: int,
                      version: int, body: Any, respond: Respond) -> None:
        """A token change a broker forwarded in an EnvelopeRequest, under the requester it
        carried (:attr:`_token_requester`); answered once the token's records are committed."""
        who = self._token_requester
        if who is None:  # only forwarded ones carry who asks
            respond(self._error_response(api_key, version, body, ErrorCode.INVALID_REQUEST))
            return
        resp, records = change(who, body, version, self.image.tokens)
        self._write(records, respond, resp, (api_key, version, body))

    def _schedule_token_sweep(self) -> None:
        self._token_task = CallbackTask(max(1, self.config.delegation_token_expiry_check_interval_ms),
                                        self._sweep_tokens)
        self.timer.add(self._token_task)

    def _sweep_tokens(self) -> None:
        """Kafka's ``DelegationTokenControlManager.sweepExpiredDelegationTokens``: a
        RemoveDelegationTokenRecord for each token past its expiry."""
        self._token_task = None
        if not self.active:
            return
        self._write(self.tokens.sweep(self.image.tokens))
        self._schedule_token_sweep()

    # ================================================================== client quotas
    def _alter_client_quotas(self, version: int, body: Any, respond: Respond) -> None:
        """Kafka's ``ClientQuotaControlManager.alterClientQuotas``: a ClientQuotaRecord per
        key set or removed; every broker enforces them from its image."""
        response, changes = alter_client_quotas(self.image.client_quotas, body, version)
        self._write([(quota_record(ent, key, value), 0) for ent, key, value in changes], respond, response,
                    (ApiKey.ALTER_CLIENT_QUOTAS, version, body))
