"""A broker of a KRaft cluster, sans-I/O: the broker core driven by the metadata log.

:class:`ClusterBrokerCore` is the single broker's :class:`~kproto.broker.core.BrokerCore` with
what a broker of a cluster adds, after Kafka's ``BrokerServer``:

* the metadata log: an observer :class:`~kproto.broker.cluster.raft.KRaftReplica` of
  ``__cluster_metadata-0`` fetches it from the controller quorum into this broker's data dir,
  and each committed record is replayed into a :class:`~kproto.storage.metadata_image.MetadataImage`
  (Kafka's ``BrokerMetadataListener``); what changed is applied (``BrokerMetadataPublisher``):
  replicas created where the broker is assigned, led or followed through the
  :class:`~kproto.broker.cluster.replica.ReplicaManager`, deleted where it no longer is;
* the lifecycle (``BrokerLifecycleManager``): BrokerRegistration with a new incarnation id,
  BrokerHeartbeat every ``broker_heartbeat_interval_ms`` (the controller unfences the broker
  once it has replayed its own registration, fences it when heartbeats stop), controlled
  shutdown (heartbeats asking to shut down until the controller has moved leadership away);
* requests: Produce and Fetch only on a partition's leader (NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH otherwise); an acks=all Produce waits in a purgatory until the high
  watermark passes it (``DelayedProduce``), refused when the ISR is below
  ``min.insync.replicas``; consumers read up to the high watermark; followers' fetches are
  answered by the replica manager and wait while there is nothing new; Metadata and
  DescribeCluster from the image; topic and partition admin, config changes, ACL changes
  and SCRAM credential changes forwarded to the active controller (Kafka's
  ``ForwardingManager``), whose records every broker applies from its image: DescribeConfigs,
  the authorizer's ACLs, DescribeAcls and the SCRAM credentials are served from it; producer
  ids from blocks the controller hands out (AllocateProducerIds); a group's requests only at the leader of its
  ``__consumer_offsets`` partition (NOT_COORDINATOR elsewhere), whose groups the broker loads
  when it becomes that leader.

Transactions: a transactional id's coordinator is the leader of its ``__transaction_state``
partition (NOT_COORDINATOR elsewhere; its transactions are loaded when it becomes leader), and
it has the markers written by each partition's leader through WriteTxnMarkers, retried until
every leader has written them. A transactional write (a Produce, a TxnOffsetCommit) is
verified with the coordinator first (KIP-890), through AddPartitionsToTxn v5 when that is
another broker.

Share groups (KIP-932): the group coordinator serves their membership, the leader of each
data partition its share-partitions, the leader of each ``__share_group_state`` partition the
states whose keys hash to it (see :mod:`kproto.broker.cluster.share`).
"""
from __future__ import annotations

import os
import socket
from dataclasses import astuple
from typing import Any, Callable, Mapping, Optional, Sequence

from kproto.broker.configs import BrokerConfig
from kproto.broker.cluster.controller_node import CONTROLLER_APIS, RAFT_APIS
from kproto.broker.features import supported_features
from kproto.broker.core import (IMPLEMENTED, BrokerCore, Request, find_coordinator_message,
                                metadata_request_topics)
from kproto.broker.coordinators.share_state import SHARE_STATE_TOPIC, share_state_topic_configs
from kproto.broker.group_configs import GROUP_RESOURCE
from kproto.broker.cluster.share import (STATE_RPCS, ClusterShareGroupCoordinator, ClusterSharePartitionManager,
                                         RemoteSharePersister,
                                         serve_state_rpc, share_offsets_handler)
from kproto.broker.log import BrokerError, Log, topic_name_error
from kproto.storage.metadata_image import (BROKER_RESOURCE, NO_LEADER, TOPIC_RESOURCE,
                                            DelegationTokenEntry, MetadataImage, PartitionInfo,
                                            encode_metadata_record)
from kproto.broker.security.acl import AclBinding
from kproto.broker.quotas import MUTATION_STRICT_FROM
from kproto.broker.security.auth import image_credentials
from kproto.broker.security.tokens import TOKEN_CHANGES, encode_principal

#: Kafka's SecurityProtocol ids, as registrations carry them
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for
from kproto.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kproto.broker.cluster.raft import KRaftReplica, RaftConfig, RaftTransport, open_metadata_log
from kproto.broker.cluster.replica import ReplicaConfig, ReplicaManager
from kproto.broker.timer import CallbackTask, Clock
from kproto.broker.coordinators.txn import TXN_TOPIC, append_txn_marker
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.framing import decode_response, encode_request
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session.messages import request_replica_id
from kproto.framing import RequestHeader, decode_response, encode_request
from kproto.schemas.api_keys import ApiKey
from kproto.storage.tail import read_high_watermarks

__all__ = ["ClusterBrokerCore", "FORWARDED_APIS", "FORWARDED_ACL_APIS", "OFFSETS_TOPIC_REPLICATION_FACTOR"]

#: Admin requests a broker forwards to the active controller, at the client's version.
FORWARDED_APIS = (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
                  ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.ELECT_LEADERS,
                  ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                  ApiKey.UPDATE_FEATURES, ApiKey.DESCRIBE_QUORUM, ApiKey.UNREGISTER_CONTROLLER,
                  ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_CLIENT_QUOTAS)
#: forwarded only where the broker has an authorizer (SECURITY_DISABLED answered here otherwise)
FORWARDED_ACL_APIS = (ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS)
#: offsets.topic.replication.factor (Kafka's default; fewer brokers: as many as there are)
OFFSETS_TOPIC_REPLICATION_FACTOR = 3
# the group APIs and where each names its groups
_GROUP_IDS: dict[int, Callable[[Any, int], list[str]]] = {
    ApiKey.JOIN_GROUP: lambda b, v: [b.group_id],
    ApiKey.SYNC_GROUP: lambda b, v: [b.group_id],
    ApiKey.HEARTBEAT: lambda b, v: [b.group_id],
    ApiKey.LEAVE_GROUP: lambda b, v: [b.group_id],
    ApiKey.OFFSET_COMMIT: lambda b, v: [b.group_id],
    ApiKey.TXN_OFFSET_COMMIT: lambda b, v: [b.group_id],
    ApiKey.OFFSET_DELETE: lambda b, v: [b.group_id],
    ApiKey.OFFSET_FETCH: lambda b, v: [b.group_id] if v < 8 else [g.group_id for g in b.groups],
    ApiKey.DESCRIBE_GROUPS: lambda b, v: list(b.groups),
    ApiKey.DELETE_GROUPS: lambda b, v: list(b.groups_names),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: lambda b, v: [b.group_id],
    ApiKey.CONSUMER_GROUP_DESCRIBE: lambda b, v: list(b.group_ids),
    ApiKey.SHARE_GROUP_HEARTBEAT: lambda b, v: [b.group_id],
    ApiKey.SHARE_GROUP_DESCRIBE: lambda b, v: list(b.group_ids),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: lambda b, v: [g.group_id for g in b.groups],
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: lambda b, v: [b.group_id],
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: lambda b, v: [b.group_id],
}
# the transaction APIs the coordinator of every transactional id named serves
_TXN_IDS: dict[int, Callable[[Any, int], list[str]]] = {
    ApiKey.INIT_PRODUCER_ID: lambda b, v: [] if b.transactional_id is None else [b.transactional_id],
    ApiKey.ADD_PARTITIONS_TO_TXN: lambda b, v: ([b.v3_and_below_transactional_id] if v < 4
                                                else [t.transactional_id for t in b.transactions]),
    ApiKey.ADD_OFFSETS_TO_TXN: lambda b, v: [b.transactional_id],
    ApiKey.END_TXN: lambda b, v: [b.transactional_id],
    ApiKey.DESCRIBE_TRANSACTIONS: lambda b, v: list(b.transactional_ids),
}
#: AddPartitionsToTxn as a partition leader asks the coordinator (v4+: brokers only)
ADD_PARTITIONS_TO_TXN_BROKER_VERSION = 5
#: WriteTxnMarkers, as a Kafka 3.9 broker speaks it (v2 is transaction version 2)
WRITE_TXN_MARKERS_VERSION = 1
_CONTROLLER_RETRY_MS = 100
_FORWARD_TIMEOUT_MS = 30_000
# librdkafka and the Java client treat it as retriable: the broker is fetching a block
_NO_PRODUCER_IDS = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class DelayedProduce(DelayedOperation):
    """An acks=all Produce waiting for its partitions' high watermarks (Kafka's
    ``DelayedProduce``): each partition completes when the high watermark reaches the end of
    its append (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
    ``min.insync.replicas`` meanwhile), or fails when the broker stopped leading it; what is
    left at ``timeout_ms`` answers REQUEST_TIMED_OUT."""

    def __init__(self, core: ClusterBrokerCore, req: Request, response: Any,
                 waits: dict[tuple[str, int], int]) -> None:
        super().__init__(max(1, req.body.timeout_ms))
        self.core, self.req, self.response = core, req, response
        self.waits = dict(waits)
        self.results = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        self.epochs = {key: core.replicas.partitions[key].leader_epoch for key in waits}

    def try_complete(self) -> bool:
        for key, required in list(self.waits.items()):
            part = self.core.replicas.partitions.get(key)
            res = self.results[key]
            if part is None or not part.is_leader or part.leader_epoch != self.epochs[key]:
                res.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                del self.waits[key]
            elif part.log.high_watermark >= required:
                if len(part.isr) < self.core.min_insync(key[0]):
                    res.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                del self.waits[key]
        return self.force_complete() if not self.waits else False

    def on_complete(self) -> None:
        for key in self.waits:
            self.results[key].error_code = ErrorCode.REQUEST_TIMED_OUT
        self.req.respond(self.response)


class DelayedReplication(DelayedOperation):
    """A coordinator's append waiting to be committed (Kafka appends group and transaction
    records with acks=all): ``then(0)`` once the high watermark passes ``offset``,
    NOT_COORDINATOR if the broker stopped leading the partition, REQUEST_TIMED_OUT at
    ``timeout_ms``."""

    def __init__(self, core: ClusterBrokerCore, log: Log, offset: int, then: Callable[[int], None],
                 timeout_ms: int) -> None:
        super().__init__(max(1, timeout_ms))
        self.core, self.log, self.offset, self.then = core, log, offset, then
        part = core.replicas.partitions.get((log.topic, log.partition))
        self.epoch = -1 if part is None else part.leader_epoch
        self.error = ErrorCode.REQUEST_TIMED_OUT

    def try_complete(self) -> bool:
        part = self.core.replicas.partitions.get((self.log.topic, self.log.partition))
        if part is None or not part.is_leader or part.leader_epoch != self.epoch:
            self.error = ErrorCode.NOT_COORDINATOR
            return self.force_complete()
        if part.log.high_watermark > self.offset:
            self.error = ErrorCode.NONE
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.then(self.error)


class DelayedReplicaFetch(DelayedOperation):
    """A follower's fetch with nothing new for it: answered when a partition's leader log
    grows past the follower's offset or its high watermark moves (the follower passes it on),
    when leadership changes, or at ``max_wait_ms``."""

    def __init__(self, core: ClusterBrokerCore, req: Request, replica_id: int,
                 offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
        super().__init__(max(1, req.body.max_wait_ms))
        self.core, self.req, self.replica_id, self.offsets = core, req, replica_id, offsets

    def try_complete(self) -> bool:
        for key, (offset, hw) in self.offsets.items():
            part = self.core.replicas.partitions.get(key)
            if part is None or not part.is_leader or part.log.log_end_offset > offset \
                    or part.log.high_watermark != hw:
                return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.req.respond(self.core.replicas.handle_replica_fetch(self.req.body, self.req.version,
                                                                 self.replica_id))


class ClusterBrokerCore(BrokerCore):
    """One broker of a KRaft cluster (``voters``: the controller quorum's node ids), its
    requests to other nodes leaving through ``transport``."""

    sparse_logs = True
    own_metadata_log = False
    implemented = {**IMPLEMENTED, ApiKey.WRITE_TXN_MARKERS: (1, 2)}

    def __init__(self, data_dir: str, config: BrokerConfig, *, voters: Sequence[int],
                 transport: RaftTransport, raft_config: Optional[RaftConfig] = None,
                 replica_config: Optional[ReplicaConfig] = None,
                 broker_heartbeat_interval_ms: int = 2000, clock: Optional[Clock] = None,
                 security_protocol: str = "PLAINTEXT") -> None:
        """``security_protocol``: the listener's, named in the broker's registration (its
        listener is named after it, as a Kafka broker's default listeners are)."""
        if not config.cluster_id:
            raise ValueError("a broker of a cluster needs the cluster's id (config.cluster_id)")
        super().__init__(data_dir, config, clock=clock)
        self.node_id = config.node_id
        self.security_protocol = security_protocol
        self.connection_quotas.listener = security_protocol  # its listener is named after it
        self.voters = sorted(voters)
        self.transport = transport
        self.heartbeat_interval_ms = broker_heartbeat_interval_ms
        self.image = MetadataImage(self.logs.cluster_id)
        self.produce_purgatory: DelayedOperationPurgatory[DelayedOperation] = \
            DelayedOperationPurgatory("Produce", self.timer)
        self.replicas = ReplicaManager(
            self.node_id, self.timer, transport, config=replica_config,
            controller=lambda: self.controller_id, broker_epoch=lambda: self.broker_epoch,
            isr_eligible=self._isr_eligible, broker_epoch_of=self._broker_epoch_of,
            on_high_watermark=self._partition_moved, on_append=self._partition_moved)
        # where replicas new to this run start their high watermark (Kafka's
        # replication-offset-checkpoint, read at start)
        self._checkpointed_hw = read_high_watermarks(data_dir) or {}
        self.incarnation_id = Uuid(os.urandom(16))
        self.broker_epoch = -1
        self.fenced = True
        self.want_shut_down = False
        self._on_shut_down: Optional[Callable[[], None]] = None
        self._heartbeat_task: Optional[CallbackTask] = None
        self.detached = False
        self._heartbeat_in_flight = False
        self._controller_rr = 0
        self._pid_next, self._pid_end = 0, 0
        self._pid_fetching = False
        self._creating: set[str] = set()
        self.metadata_log = open_metadata_log(data_dir, raft_config)
        self.raft = KRaftReplica(self.node_id, self.voters, self.metadata_log,
                                 cluster_id=self.logs.cluster_id, transport=transport,
                                 timer=self.timer, config=raft_config)
        self.raft.register(self)
        self.handlers[ApiKey.DESCRIBE_CLUSTER] = self._describe_cluster
        for key in FORWARDED_APIS:
            self.handlers[key] = self._forward
        if self.authorizer is not None:
            for key in FORWARDED_ACL_APIS:
                self.handlers[key] = self._forward
        self.handlers[ApiKey.INCREMENTAL_ALTER_CONFIGS] = self._forward_alter_configs
        self.handlers[ApiKey.ALTER_CONFIGS] = self._forward_alter_configs
        self.handlers[ApiKey.WRITE_TXN_MARKERS] = self._write_txn_markers
        # share groups as kproto.broker.cluster.share places them
        self.share_persister = RemoteSharePersister(self)
        self.share_groups = self.groups.share = ClusterShareGroupCoordinator(
            self, self.share_persister, self.groups.group_type, self.groups)
        self.shares: ClusterSharePartitionManager = ClusterSharePartitionManager(
            self, self.share_persister, self.share_groups)
        self.handlers[ApiKey.SHARE_FETCH] = self.shares.fetch
        self.handlers[ApiKey.SHARE_ACKNOWLEDGE] = self.shares.acknowledge
        for offsets_api in (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                            ApiKey.DELETE_SHARE_GROUP_OFFSETS):
            self.handlers[offsets_api] = share_offsets_handler(self, self.handlers[offsets_api])
        for state_api in STATE_RPCS:
            self.handlers[state_api] = lambda r: serve_state_rpc(self, r.api_key, r.version, r.body, r.respond)
        for key in TOKEN_CHANGES:
            self.handlers[key] = self._forward_token
        for api, ids in _GROUP_IDS.items():
            self.handlers[api] = self._gate(self.handlers[api], OFFSETS_TOPIC, ids)
        for api, ids in _TXN_IDS.items():
            self.handlers[api] = self._gate(self.handlers[api], TXN_TOPIC, ids)
        self._register()

    # ------------------------------------------------------------------ views
    def _compute_api_versions(self) -> dict[int, tuple[int, int]]:
        # forwarded APIs at the versions the controller serves (Kafka's broker advertises the
        # forwardable APIs the controller's ApiVersions lists): ElectLeaders and the
        # reassignment APIs have no single-broker handler to take a range from
        out = super()._compute_api_versions()
        for key in FORWARDED_APIS:
            lo, hi = {**RAFT_APIS, **CONTROLLER_APIS}[key]
            valid = request_codec(key).valid_versions
            out[int(key)] = (max(lo, valid.start), min(hi, valid[-1]))
        return out

    def feature_levels(self) -> tuple[dict[str, int], int]:
        """The finalized levels of the metadata image; the epoch is its offset, as a Kafka
        broker's (-1 before any metadata)."""
        return self.image.features, self.image.offset

    @property
    def controller_id(self) -> int:
        """The active controller as the metadata log's leader is known (-1: none known)."""
        leader = self.raft.leader_id
        return -1 if leader is None else leader

    @property
    def ready(self) -> bool:
        """Registered and unfenced: serving as a member of the cluster."""
        return self.broker_epoch >= 0 and not self.fenced

    def min_insync(self, topic: str) -> int:
        t = self.logs.topics.get(topic)
        return self.configs.settings(t).min_insync_replicas if t is not None else 1

    def _isr_eligible(self, broker: int) -> bool:
        b = self.image.brokers.get(broker)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _broker_epoch_of(self, broker: int) -> int:
        b = self.image.brokers.get(broker)
        return -1 if b is None else b.epoch

    def _alive(self) -> list[Any]:
        return [b for _, b in sorted(self.image.brokers.items()) if not b.fenced]

    # ------------------------------------------------------------------ controller channel
    def _controller_target(self) -> int:
        leader = self.controller_id
        if leader >= 0:
            return leader
        self._controller_rr += 1
        return self.voters[self._controller_rr % len(self.voters)]

    def send_to_controller(self, api_key: int, version: int, body: Any,
                           on_response: Callable[[Optional[Any]], None],
                           timeout_ms: int = _FORWARD_TIMEOUT_MS) -> None:
        """A request to the active controller until ``timeout_ms``; ``on_response`` gets the
        answer, or None when time ran out. As Kafka's controller channel, it is sent again
        only where the controller cannot have acted on it: NOT_CONTROLLER, a lost connection,
        or another controller becoming active meanwhile. A slow controller is waited for, not
        asked twice (a second CreateTopics would answer TOPIC_ALREADY_EXISTS)."""
        deadline = self.clock.now_ms() + timeout_ms
        current = [0]  # the attempt whose answer counts

        def attempt() -> None:
            if self.detached:
                return
            remaining = deadline - self.clock.now_ms()
            if remaining <= 0:
                on_response(None)
                return
            current[0] += 1
            n, target = current[0], self._controller_target()
            if self.controller_id == target:
                wait = remaining
                self.timer.add(CallbackTask(_CONTROLLER_RETRY_MS, lambda: watch(n, target)))
            else:  # probing for an unknown controller: a short wait per voter
                wait = min(remaining, 5000)
            self.transport.send(target, api_key, version, body,
                                lambda resp: answered(n, resp), wait)

        def watch(n: int, target: int) -> None:
            if self.detached or n != current[0]:
                return
            if self.controller_id not in (target, -1):
                attempt()  # another controller is active: the old one's answer no longer counts
                return
            self.timer.add(CallbackTask(_CONTROLLER_RETRY_MS, lambda: watch(n, target)))

        def answered(n: int, resp: Optional[Any]) -> None:
            if self.detached or n != current[0]:
                return
            current[0] += 1  # settled: the watch stops
            if resp is None or getattr(resp, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                self.timer.add(CallbackTask(_CONTROLLER_RETRY_MS, attempt))
                return
            on_response(resp)

        attempt()

    # ------------------------------------------------------------------ lifecycle
    def _register(self) -> None:
        cls = request_codec(ApiKey.BROKER_REGISTRATION).cls
        cfg = self.config
        body = cls(broker_id=self.node_id, cluster_id=self.logs.cluster_id,
                   incarnation_id=self.incarnation_id,
                   listeners=[cls.Listener(name=self.security_protocol, host=cfg.host, port=cfg.port,
                                           security_protocol=SECURITY_PROTOCOL_IDS[self.security_protocol])] + ([
                       cls.Listener(name=cfg.inter_broker_listener_name, host=cfg.host, port=cfg.inter_broker_port,
                                    security_protocol=SECURITY_PROTOCOL_IDS[cfg.inter_broker_security_protocol])]
                       if cfg.inter_broker_listener_name else []),
                   features=[cls.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                             for n, (lo, hi) in supported_features().items()],
                   rack=cfg.rack, is_migrating_zk_broker=False, log_dirs=[self.logs.directory_id],
                   previous_broker_epoch=-1)

        def answered(resp: Optional[Any]) -> None:
            if resp is None or resp.error_code:
                # DUPLICATE_BROKER_REGISTRATION while our previous incarnation's session
                # lasts: try again until the controller has fenced it
                self.timer.add(CallbackTask(max(_CONTROLLER_RETRY_MS, self.heartbeat_interval_ms // 2),
                                            self._register))
                return
            self.broker_epoch = resp.broker_epoch
            self._heartbeat()
            self._fetch_producer_ids()  # before the first InitProducerId asks

        if not self.detached:
            self.send_to_controller(ApiKey.BROKER_REGISTRATION, 2, body, answered)

    def _schedule_heartbeat(self, delay_ms: int) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        self._heartbeat_task = CallbackTask(max(1, delay_ms), self._heartbeat)
        self.timer.add(self._heartbeat_task)

    def _heartbeat(self) -> None:
        if self.detached or self._heartbeat_in_flight:
            return
        cls = request_codec(ApiKey.BROKER_HEARTBEAT).cls
        body = cls(broker_id=self.node_id, broker_epoch=self.broker_epoch,
                   current_metadata_offset=max(self.image.offset, 0), want_fence=False,
                   want_shut_down=self.want_shut_down, offline_log_dirs=[])
        self._heartbeat_in_flight = True
        sent_epoch = self.broker_epoch

        def answered(resp: Optional[Any]) -> None:
            self._heartbeat_in_flight = False
            if self.detached or sent_epoch != self.broker_epoch:
                return
            if resp is not None and resp.error_code in (ErrorCode.STALE_BROKER_EPOCH,
                                                       ErrorCode.BROKER_ID_NOT_REGISTERED):
                self.broker_epoch, self.fenced = -1, True
                self._register()  # the controller forgot us (fenced and unregistered): again
                return
            if resp is not None and not resp.error_code:
                self.fenced = resp.is_fenced
                if resp.should_shut_down and self._on_shut_down is not None:
                    done, self._on_shut_down = self._on_shut_down, None
                    done()
                    return
            # faster while shutting down, as Kafka's lifecycle manager
            self._schedule_heartbeat(self.heartbeat_interval_ms // 4 if self.want_shut_down
                                     else self.heartbeat_interval_ms)

        self.send_to_controller(ApiKey.BROKER_HEARTBEAT, 1, body, answered,
                                timeout_ms=self.heartbeat_interval_ms * 2)

    def begin_controlled_shutdown(self, done: Callable[[], None]) -> None:
        """Ask the controller to move leadership away (heartbeats with ``want_shut_down``);
        ``done`` is called once it says the broker may stop."""
        if self.broker_epoch < 0:
            done()
            return
        self.want_shut_down = True
        self._on_shut_down = done
        self._schedule_heartbeat(0)

    # ------------------------------------------------------------------ the metadata log
    def handle_commit(self, records: list[tuple[int, bytes]]) -> None:
        """Committed ``__cluster_metadata`` records (the Raft listener): replay, then apply."""
        for offset, value in records:
            self.image.replay_value(value, offset)
        self._apply(self.image.take_changes())

    def handle_load_snapshot(self, end_offset: int, values: list[bytes]) -> None:
        """A metadata snapshot replaces the image (at start, or when this broker fell behind
        the log start); what differs from the image before is applied as a commit's changes."""
        image = MetadataImage(self.logs.cluster_id)
        for value in values:
            image.replay_value(value, end_offset - 1)
        image.offset = end_offset - 1
        image.note_changes_since(self.image)
        self.image = image
        self._apply(image.take_changes())

    def snapshot_records(self) -> list[bytes]:
        """The image as a snapshot's record values."""
        return [encode_metadata_record(obj, v) for obj, v in self.image.records()]

    def handle_leader_change(self, leader_id: Optional[int], epoch: int) -> None:
        """A new metadata quorum leader: our next controller requests go to it."""

    def _apply(self, changes: Any) -> None:
        before = {t: self._led(t) for t in (OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC)}
        touched: list[tuple[str, int]] = []
        deleted: list[tuple[str, int]] = []
        deleted_topics = set(changes.topics_deleted)
        for current, previous in changes.partitions:
            p = current if current is not None else previous
            assert p is not None
            key = (p.topic, p.partition)
            touched.append(key)
            if previous is not None and (current is None or (current.leader, current.leader_epoch) !=
                                         (previous.leader, previous.leader_epoch)):
                self.shares.leadership_changed(previous.topic_id, previous.partition)
            if current is None and p.topic in deleted_topics:
                deleted.append(key)  # (a partition leaves the image for other reasons too)
            if current is None or self.node_id not in current.replicas:
                if previous is not None and previous.topic != p.topic:
                    key = (previous.topic, previous.partition)
                self.replicas.remove(*key)
                self.logs.remove_partition(*key)
                continue
            self._host(current)
        for rtype, name in changes.configs:
            if rtype == BROKER_RESOURCE and name in ("", str(self.node_id)):
                # the cluster-wide and this broker's dynamic configs (topic defaults)
                self.configs.apply_broker(name, self.image.configs.get((rtype, name), {}))
                continue
            if rtype == GROUP_RESOURCE:  # a group's own configs (share groups' settings)
                self.group_configs.set(name, self.image.configs.get((rtype, name), {}))
                continue
            topic = self.logs.topics.get(name) if rtype == TOPIC_RESOURCE else None
            if topic is not None:
                self.configs.apply_topic(topic, self.image.configs.get((rtype, name), {}))
        if changes.acls and self.authorizer is not None:
            self.authorizer.acls = {AclBinding(*astuple(e)) for e in self.image.acls.values()}
        if changes.tokens:  # every broker authenticates every token
            self._sync_tokens()
        if changes.client_quotas:  # served and enforced from the image, as Kafka's brokers
            self.quota_store.replace(self.image.client_quotas)
        if changes.scram:
            self.security.store.apply_altered(image_credentials(self.image.scram, changes.scram))
        for name in changes.topics_created:
            self._creating.discard(name)
        if deleted:
            # Kafka's BrokerMetadataPublisher: the group coordinator drops their offsets
            self.groups.on_partitions_deleted(deleted)
        for key in touched:
            # waiting produces and fetches of a partition that changed hands answer now
            self.produce_purgatory.check_and_complete(key)
            self.fetch_purgatory.check_and_complete(key)
        # Kafka's onResignation/onElection: groups and transactional ids follow the
        # leadership of their partition
        coordinators: tuple[tuple[str, Any], ...] = ((OFFSETS_TOPIC, self.groups), (OFFSETS_TOPIC, self.share_groups),
                                                     (TXN_TOPIC, self.txns), (SHARE_STATE_TOPIC, self.share_state))
        for internal, coordinator in coordinators:
            led = self._led(internal)
            if led != before[internal]:
                coordinator.unload_partitions(before[internal] - led)
                coordinator.load_partitions(led - before[internal])

    def _host(self, p: PartitionInfo) -> None:
        key = (p.topic, p.partition)
        configs = self.image.configs.get((TOPIC_RESOURCE, p.topic), {})
        known = key in self.replicas.partitions
        log = self.logs.open_partition(p.topic, p.partition, p.topic_id, configs)
        topic = self.logs.topics[p.topic]
        if topic.configs != configs:
            self.configs.apply_topic(topic, configs)
        # a PartitionInfo has the fields of a PartitionAssignment (tuples for lists)
        self.replicas.apply(p, log, None if known else self._checkpointed_hw.get(key))  # type: ignore[arg-type]

    def _led(self, topic: str) -> set[int]:
        """The partitions of ``topic`` this broker leads."""
        return {p for (t, p), part in self.replicas.partitions.items() if t == topic and part.is_leader}

    def _partition_moved(self, part: Any) -> None:
        """A partition's log grew or its high watermark moved."""
        key = (part.topic, part.partition)
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

    # ------------------------------------------------------------------ BrokerCore hooks
    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        if self.image.partition(topic, partition) is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return self.replicas.leader_for(topic, partition, current_leader_epoch).log

    def leads(self, topic: str, partition: int) -> bool:
        replicas: Optional[ReplicaManager] = self.__dict__.get("replicas")
        part = None if replicas is None else replicas.partitions.get((topic, partition))
        return part is not None and part.is_leader

    def when_replicated(self, log: Log, offset: int, then: Callable[[int], None],
                        timeout_ms: int) -> None:
        self.produce_purgatory.try_complete_else_watch(
            DelayedReplication(self, log, offset, then, timeout_ms), [(log.topic, log.partition)])

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.image.partition(topic, partition) is not None

    def partition_states(self, topic: str) -> Optional[list[PartitionInfo]]:
        info = self.image.topics.get(topic)
        return None if info is None else [p for _, p in sorted(info.partitions.items())]

    def broker_ids(self, alive: bool) -> list[int]:
        return [i for i, b in sorted(self.image.brokers.items()) if not (alive and b.fenced)]

    def known_topics(self) -> dict[str, tuple[Uuid, int, bool]]:
        return {n: (t.topic_id, len(t.partitions), n.startswith("__"))
                for n, t in self.image.topics.items()}

    def topic_name(self, topic_id: Uuid) -> Optional[str]:
        t = self.image.topics_by_id.get(topic_id)
        return None if t is None else t.name

    def appended_internal(self, log: Log) -> None:
        part = self.replicas.partitions.get((log.topic, log.partition))
        if part is not None:
            self.replicas.appended(part)
        super().appended_internal(log)

    def check_produce(self, log: Log, acks: int, min_insync_replicas: int) -> None:
        self.replicas.check_produce(self.replicas.partitions[(log.topic, log.partition)], acks,
                                    min_insync_replicas)

    def produce_appended(self, log: Log, last_offset: int) -> Optional[int]:
        self.replicas.appended(self.replicas.partitions[(log.topic, log.partition)])
        return last_offset + 1 if log.high_watermark <= last_offset else None

    def answer_produce(self, req: Request, response: Any, waits: dict[tuple[str, int], int]) -> None:
        if not waits:
            req.respond(response)
            return
        self.produce_purgatory.try_complete_else_watch(DelayedProduce(self, req, response, waits),
                                                       list(waits))

    def allocate_producer_id(self) -> int:
        """The next id of the block the controller gave this broker (Kafka's
        ``RPCProducerIdManager``: the next block is asked for when 90% is used)."""
        if self._pid_next >= self._pid_end:
            self._fetch_producer_ids()
            raise BrokerError(_NO_PRODUCER_IDS, "Waiting for a producer id block from the controller")
        pid = self._pid_next
        self._pid_next += 1
        if self._pid_end - self._pid_next < 100:
            self._fetch_producer_ids()
        return pid

    def reserve_producer_id(self, pid: int) -> None:
        """Ids come from the controller's blocks, unique across the cluster."""

    def _fetch_producer_ids(self) -> None:
        if self._pid_fetching or self.broker_epoch < 0:
            return
        self._pid_fetching = True
        cls = request_codec(ApiKey.ALLOCATE_PRODUCER_IDS).cls

        def answered(resp: Optional[Any]) -> None:
            self._pid_fetching = False
            if resp is not None and not resp.error_code and self._pid_next >= self._pid_end - 100:
                self._pid_next = resp.producer_id_start
                self._pid_end = resp.producer_id_start + resp.producer_id_len

        self.send_to_controller(ApiKey.ALLOCATE_PRODUCER_IDS, 0,
                                cls(broker_id=self.node_id, broker_epoch=self.broker_epoch), answered)

    def detach(self, clean: bool = True) -> None:
        """Stop talking to other nodes: heartbeats, replication and the metadata replica end,
        later answers are ignored (the first half of :meth:`close`; a killed broker's peers
        see this at once, its files may be finished later)."""
        if self.detached:
            return
        self.detached = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        self.produce_purgatory.shutdown()
        self.replicas.shutdown()
        self.raft.shutdown(graceful=clean)

    def close(self, clean: bool = True) -> None:
        """Stop: replication and the metadata replica first, then the broker core."""
        if self.closed:
            return
        self.detach(clean)
        self.metadata_log.close(clean)
        super().close(clean)

    # ------------------------------------------------------------------ handlers
    def verify_txn_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: list[tuple[str, int]], add: bool,
                              then: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """KIP-890 verification with the transactional id's coordinator, the leader of its
        ``__transaction_state`` partition: asked directly when that is this broker, otherwise
        with AddPartitionsToTxn v5 (Kafka's ``AddPartitionsToTxnManager``); no answer is
        NETWORK_EXCEPTION, no coordinator COORDINATOR_NOT_AVAILABLE."""
        info = self.image.topics.get(TXN_TOPIC)
        index = partition_for(transactional_id, len(info.partitions)) if info is not None else -1
        part = self.image.partition(TXN_TOPIC, index) if info is not None else None
        if part is not None and self.leads(TXN_TOPIC, index):
            super().verify_txn_partitions(transactional_id, producer_id, producer_epoch, partitions, add, then)
            return
        if part is None or part.leader < 0 or part.leader == self.node_id:
            then({tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions})
            return
        cls = request_codec(ApiKey.ADD_PARTITIONS_TO_TXN).cls
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        body = cls(transactions=[cls.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=[cls.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                         for t, ps in by_topic.items()])])

        def answered(resp: Optional[Any]) -> None:
            if self.detached:
                return
            codes: dict[tuple[str, int], int] = {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
            if resp is not None and resp.error_code:
                codes = {tp: resp.error_code for tp in partitions}
            elif resp is not None:
                for tx in resp.results_by_transaction:
                    for t in tx.topic_results:
                        for r in t.results_by_partition:
                            codes[(t.name, r.partition_index)] = r.partition_error_code
            then(codes)

        self.transport.send(part.leader, ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_BROKER_VERSION, body,
                            answered, self.replicas.config.request_timeout_ms)

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, partitions: set[tuple[str, int]], done: Callable[[], None]) -> None:
        """Kafka's ``TransactionMarkerChannelManager``: the markers go to each partition's
        leader (written here for the partitions this broker leads), retried for the partitions
        whose leader failed or moved, until all are written; then ``done()``."""
        remaining = set(partitions)

        def attempt() -> None:
            if self.detached:
                return
            for tp in list(remaining):
                if self.image.partition(*tp) is None:
                    remaining.discard(tp)  # the topic was deleted
            local = {tp for tp in remaining if self.leads(*tp)}
            if local:
                self.txns.complete_markers_locally(producer_id, producer_epoch, coordinator_epoch,
                                                   commit, local)
                remaining.difference_update(local)
            if not remaining:
                done()
                return
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in sorted(remaining):
                by_leader.setdefault(self.image.partition(*tp).leader, []).append(tp)  # type: ignore[union-attr]
            waiting = [len(by_leader)]

            def settled() -> None:
                waiting[0] -= 1
                if waiting[0] == 0:
                    if remaining:
                        self.timer.add(CallbackTask(_CONTROLLER_RETRY_MS, attempt))
                    else:
                        done()

            for leader, tps in by_leader.items():
                if leader < 0 or leader == self.node_id:
                    settled()  # no leader yet, or ours not applied yet: next attempt
                    continue
                self._send_markers(leader, producer_id, producer_epoch, coordinator_epoch, commit,
                                   tps, remaining, settled)

        attempt()

    def _send_markers(self, leader: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, tps: list[tuple[str, int]], remaining: set[tuple[str, int]],
                      settled: Callable[[], None]) -> None:
        cls = request_codec(ApiKey.WRITE_TXN_MARKERS).cls
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = cls(markers=[cls.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch, topics=[
                cls.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])

        def answered(resp: Optional[Any]) -> None:
            if self.detached:
                return
            for m in resp.markers if resp is not None else ():
                for t in m.topics:
                    for p in t.partitions:
                        # fenced: a newer coordinator has the transaction, its markers are its own
                        if p.error_code in (0, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                            remaining.discard((t.name, p.partition_index))
            settled()

        self.transport.send(leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, answered,
                            self.replicas.config.request_timeout_ms)

    def _write_txn_markers(self, req: Request) -> None:
        """A coordinator's markers for partitions this broker leads: each written as a
        control batch (a ``__consumer_offsets`` one completes the group's transactional
        offsets), the answer once every marker is replicated."""
        cls = response_codec(ApiKey.WRITE_TXN_MARKERS).cls
        now = self.wall_ms()
        waits: list[tuple[Log, int, Any]] = []
        markers = []
        for m in req.body.markers:
            topics = []
            for t in m.topics:
                parts = []
                for p in t.partition_indexes:
                    res = cls.WritableTxnMarkerPartitionResult(partition_index=p, error_code=0)
                    parts.append(res)
                    try:
                        lg = self.leader_log(t.name, p)
                        offset = append_txn_marker(lg, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                                   m.transaction_result, now)
                    except BrokerError as exc:
                        res.error_code = exc.code
                        continue
                    if t.name == OFFSETS_TOPIC:
                        self.groups.complete_txn(p, m.producer_id, m.transaction_result)
                    self.appended_internal(lg)
                    waits.append((lg, offset, res))
                topics.append(cls.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
            markers.append(cls.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        response = cls(markers=markers)
        pending = [len(waits)]
        if not waits:
            req.respond(response)
            return

        def replicated(res: Any) -> Callable[[int], None]:
            def then(err: int) -> None:
                if err:
                    res.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER if err == ErrorCode.NOT_COORDINATOR else err
                pending[0] -= 1
                if pending[0] == 0:
                    req.respond(response)
            return then

        for lg, offset, res in waits:
            self.when_replicated(lg, offset, replicated(res), self.replicas.config.request_timeout_ms)

    def _init_producer_id(self, req: Request) -> None:
        cls = response_codec(ApiKey.INIT_PRODUCER_ID).cls
        if req.body.transactional_id is not None:
            self.txns.init_producer_id(req.body, req.version, req.respond)
            return
        try:
            pid = self.allocate_producer_id()
        except BrokerError as exc:
            req.respond(cls(error_code=exc.code, producer_id=-1, producer_epoch=-1))
            return
        req.respond(cls(error_code=0, producer_id=pid, producer_epoch=0))

    def _fetch(self, req: Request) -> None:
        body, ver = req.body, req.version
        replica_id = request_replica_id(body, ver)
        if replica_id < 0:
            super()._fetch(req)
            return
        resp = self.replicas.handle_replica_fetch(body, ver, replica_id)
        busy = any(pd.records or pd.error_code or pd.diverging_epoch is not None
                   for t in resp.responses for pd in t.partitions)
        if busy or body.max_wait_ms <= 0:
            req.respond(resp)
            return
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        for t in body.topics:
            info = self.image.topics_by_id.get(t.topic_id) if ver >= 13 else self.image.topics.get(t.topic)
            if info is None:
                req.respond(resp)
                return
            for p in t.partitions:
                part = self.replicas.partitions.get((info.name, p.partition))
                hw = -1 if part is None else part.log.high_watermark
                offsets[(info.name, p.partition)] = (p.fetch_offset, hw)
        self.fetch_purgatory.try_complete_else_watch(
            DelayedReplicaFetch(self, req, replica_id, offsets), list(offsets))

    def _forward(self, req: Request) -> None:
        """Kafka's forwarding: the controller answers, at the client's version. The requests
        the controller counts against the client's controller mutation quota go in an
        envelope with the client's principal and client id (Kafka's EnvelopeRequest), and
        the answer's throttle time mutes the client's connection."""
        if req.api_key in MUTATION_STRICT_FROM:
            self._forward_enveloped(req)
            return

        def answered(resp: Optional[Any]) -> None:
            if resp is None:
                self._answer_error(req, ErrorCode.REQUEST_TIMED_OUT, run_handler=True)
                return
            req.respond(resp)
        self.send_to_controller(req.api_key, req.version, req.body, answered)

    def _forward_alter_configs(self, req: Request) -> None:
        """Kafka's ConfigAdminManager.preprocess (IncrementalAlterConfigs and the legacy
        AlterConfigs): a change of this broker's or the cluster-wide configs is first checked
        against what this broker would run with (the log cleaner's thread count may at most
        double or halve); one refused is answered here, the rest are forwarded, and the
        answers come back in the request's order."""
        body, key = req.body, req.api_key
        incremental = key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        refused: dict[int, BrokerError] = {}
        for i, r in enumerate(body.resources):
            name = r.resource_name
            if r.resource_type != BROKER_RESOURCE or name not in ("", str(self.node_id)):
                continue
            try:
                current = dict(self.configs.broker_dynamic.get(name, {}))
                wanted = self.configs.validate_broker(self.admin.incremental_change(current, r) if incremental
                                                      else {c.name: c.value for c in r.configs})
            except BrokerError:
                continue  # the controller refuses it as well, in its own words
            try:
                self.configs.check_reconfiguration(name, wanted)
            except BrokerError as exc:
                refused[i] = exc
        if not refused:
            self._forward(req)
            return
        cls = response_codec(key).cls
        answers: list[Any] = [None] * len(body.resources)
        for i, why in refused.items():
            answers[i] = cls.AlterConfigsResourceResponse(
                error_code=why.code, error_message=why.message, resource_type=body.resources[i].resource_type,
                resource_name=body.resources[i].resource_name)
        rest = [r for i, r in enumerate(body.resources) if i not in refused]

        def merged(resp: Optional[Any]) -> None:
            if resp is None:
                self._answer_error(req, ErrorCode.REQUEST_TIMED_OUT, run_handler=True)
                return
            forwarded = iter(resp.responses)
            resp.responses = [a if a is not None else next(forwarded) for a in answers]
            req.respond(resp)
        if not rest:
            req.respond(cls(throttle_time_ms=0, responses=answers))
            return
        forward = request_codec(key).cls(resources=rest, validate_only=body.validate_only)
        self.send_to_controller(key, req.version, forward, merged)

    def _forward_enveloped(self, req: Request) -> None:
        """Forward ``req`` to the active controller in an EnvelopeRequest carrying its client's
        principal and address, as Kafka's brokers do; the controller's answer to the client
        comes back inside the envelope's."""
        key, ver = req.api_key, req.version
        inner = encode_request(RequestHeader(request_api_key=key, request_api_version=ver,
                                             correlation_id=req.header.correlation_id,
                                             client_id=req.header.client_id), req.body)[4:]
        peer = (getattr(req.channel, "peer", None) or "/127.0.0.1").lstrip("/")
        try:
            address = socket.inet_pton(socket.AF_INET6 if ":" in peer else socket.AF_INET, peer)
        except OSError:
            address = b"\x7f\x00\x00\x01"
        session = self.security_of(req.channel).session(req.channel)
        envelope = request_codec(ApiKey.ENVELOPE).cls(
            request_data=inner, request_principal=encode_principal(session.principal, session.token_authenticated),
            client_host_address=address)

        def answered(resp: Optional[Any]) -> None:
            if resp is None or resp.error_code or resp.response_data is None:
                self._answer_error(req, ErrorCode.REQUEST_TIMED_OUT if resp is None or not resp.error_code
                                   else resp.error_code, run_handler=True)
                return
            _, body = decode_response(bytes(resp.response_data), key, ver, size_prefix=False)
            req.forwarded_throttle_ms = getattr(body, "throttle_time_ms", 0)
            req.respond(body)
        self.send_to_controller(ApiKey.ENVELOPE, 0, envelope, answered)

    def create_share_state_topic(self) -> None:
        """Ask the controller for ``__share_group_state`` (at the first share-state request)."""
        self._create_internal_topic(SHARE_STATE_TOPIC, *_share_state_topic(self))

    def _token_image(self) -> Mapping[str, DelegationTokenEntry]:
        image = getattr(self, "image", None)  # None while the core is made
        return {} if image is None else image.tokens

    def _forward_token(self, req: Request) -> None:
        """A token change, as Kafka's brokers forward it: in an EnvelopeRequest with the
        client's principal, for the active controller to write; what this broker can refuse
        (the connection, the rights, a token its image does not have yet) it answers itself."""
        handlers: dict[int, Callable[..., tuple[Any, list[tuple[Any, int]]]]] = {
                   ApiKey.CREATE_DELEGATION_TOKEN: self.tokens.create,
                   ApiKey.RENEW_DELEGATION_TOKEN: self.tokens.renew,
                   ApiKey.EXPIRE_DELEGATION_TOKEN: self.tokens.expire}
        handler = handlers[req.api_key]
        who = self._token_request(req)
        resp, records = handler(who, req.body, req.version, self._token_image())
        if not records:
            req.respond(resp)
            return
        self._forward_enveloped(req)

    def _create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        """Ask the controller for ``name`` (auto-created topics, ``__consumer_offsets``)."""
        if name in self._creating:
            return
        self._creating.add(name)
        cls = request_codec(ApiKey.CREATE_TOPICS).cls
        rf = (min(OFFSETS_TOPIC_REPLICATION_FACTOR, max(1, len(self._alive())))
              if name in _INTERNAL_TOPICS else -1)
        body = cls(topics=[cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
            configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
            timeout_ms=_FORWARD_TIMEOUT_MS, validate_only=False)

        def answered(resp: Optional[Any]) -> None:
            self._creating.discard(name)

        self.send_to_controller(ApiKey.CREATE_TOPICS, 7, body, answered)

    def _metadata(self, req: Request) -> None:
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.METADATA).cls
        image = self.image
        alive = self._alive()
        alive_ids = {b.id for b in alive}
        try:
            every, names, ids = metadata_request_topics(body, ver)
        except BrokerError as exc:
            self._answer_error(req, exc.code, run_handler=True)
            return
        if every:
            names = sorted(image.topics)
        topics_out = []
        for tid in ids:
            by_id = image.topics_by_id.get(tid)
            if by_id is None:
                topics_out.append(cls.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=tid))
            else:
                names.append(by_id.name)
        auto = self.config.auto_create_topics and (ver < 4 or body.allow_auto_topic_creation) and not ids
        for name in names:
            info = image.topics.get(name)
            if info is None:
                if topic_name_error(name) is not None:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                else:
                    # auto-created: asked of the controller, this request answered before it
                    # is done, UNKNOWN_TOPIC_OR_PARTITION as Kafka's KRaft broker answers
                    if auto and not name.startswith("__"):
                        self._create_internal_topic(name, self.config.num_partitions, {})
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics_out.append(cls.MetadataResponseTopic(error_code=code, name=name))
                continue
            parts = []
            for index, p in sorted(info.partitions.items()):
                parts.append(cls.MetadataResponsePartition(
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0,
                    partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
                    replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                    offline_replicas=[r for r in p.replicas if r not in alive_ids]))
            topics_out.append(cls.MetadataResponseTopic(
                error_code=0, name=info.name, topic_id=info.topic_id,
                is_internal=info.name.startswith("__"), partitions=parts))
        brokers = []
        for b in alive:
            ep = self._endpoint(b, req)
            if ep is not None:
                brokers.append(cls.MetadataResponseBroker(node_id=b.id, host=ep.host, port=ep.port,
                                                          rack=b.rack))
        # a KRaft broker names a live broker as "controller": clients cannot reach controllers
        controller = self.node_id if self.node_id in alive_ids else (min(alive_ids) if alive_ids else -1)
        req.respond(cls(brokers=brokers, cluster_id=self.logs.cluster_id, controller_id=controller,
                        topics=topics_out))

    def _endpoint(self, b: Any, req: Request) -> Optional[Any]:
        """Broker ``b``'s endpoint on the listener the request came in on, as Kafka answers
        Metadata (the first registered when it has none of that name)."""
        name = getattr(req.channel, "listener", None) or self.security_protocol
        for ep in b.listeners:
            if ep.name == name:
                return ep
        return b.listeners[0] if b.listeners else None

    def _describe_cluster(self, req: Request) -> None:
        cls = response_codec(ApiKey.DESCRIBE_CLUSTER).cls
        endpoint = req.body.endpoint_type if req.version >= 1 else 1
        if endpoint != 1:
            self.admin.describe_cluster(req.body, req.version, req.respond)  # its error answer
            return
        out = cls(error_code=0, error_message=None, cluster_id=self.logs.cluster_id,
                  controller_id=self.node_id, brokers=[
                      cls.DescribeClusterBroker(broker_id=b.id, host=ep.host, port=ep.port, rack=b.rack)
                      for b, ep in ((b, self._endpoint(b, req)) for b in self._alive()) if ep is not None],
                  cluster_authorized_operations=-2147483648)
        if req.version >= 1:
            out.endpoint_type = endpoint
        req.respond(out)

    def _find_coordinator(self, req: Request) -> None:
        """The leader of the key's ``__consumer_offsets`` partition; the topic is created
        (through the controller) on first use, COORDINATOR_NOT_AVAILABLE until it has leaders."""
        cls = response_codec(ApiKey.FIND_COORDINATOR).cls
        key_type = req.body.key_type if req.version >= 1 else 0
        keys = list(req.body.coordinator_keys) if req.version >= 4 else [req.body.key]
        answers = []
        for key in keys:
            node, code = -1, int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if key_type not in (0, 1, 2):
                code = ErrorCode.INVALID_REQUEST
            else:
                topic = (OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC)[key_type]
                info = self.image.topics.get(topic)
                if info is None:
                    self._create_internal_topic(topic, *_INTERNAL_TOPICS[topic](self))
                else:
                    p = info.partitions.get(partition_for(key, len(info.partitions)))
                    b = self.image.brokers.get(p.leader) if p is not None else None
                    if b is not None and not b.fenced and b.listeners:
                        node, code = b.id, 0
            answers.append((key, node, code))
        out = []
        for key, node, code in answers:
            b = self.image.brokers.get(node)
            ep = self._endpoint(b, req) if b is not None and not code else None
            host, port = (ep.host, ep.port) if ep is not None else ("", -1)
            out.append((key, node, host, port, code))
        if req.version < 4:
            _, node, host, port, code = out[0]
            req.respond(cls(error_code=code, error_message=find_coordinator_message(code, req.version),
                            node_id=node, host=host, port=port))
            return
        req.respond(cls(coordinators=[cls.Coordinator(key=k, node_id=n, host=h, port=p, error_code=c,
                                                      error_message=find_coordinator_message(c, req.version))
                                      for k, n, h, p, c in out]))

    def _gate(self, handler: Callable[[Request], None], topic: str,
              keys: Callable[[Any, int], list[str]]) -> Callable[[Request], None]:
        """Only the coordinator of every group (or transactional id) a request names handles
        it: the leader of the key's partition of ``topic``."""
        def gated(req: Request) -> None:
            wanted = keys(req.body, req.version)
            if wanted:
                info = self.image.topics.get(topic)
                if info is None or not all(
                        self.leads(topic, partition_for(k, len(info.partitions))) for k in wanted):
                    self._answer_error(req, ErrorCode.NOT_COORDINATOR, run_handler=True)
                    return
            handler(req)
        return gated


def _offsets_topic(core: ClusterBrokerCore) -> tuple[int, dict[str, str]]:
    return core.config.offsets_topic_num_partitions, {
        "cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}


def _txn_topic(core: ClusterBrokerCore) -> tuple[int, dict[str, str]]:
    # transaction.state.log.min.isr is 2 where the topic has the replicas for it
    rf = min(OFFSETS_TOPIC_REPLICATION_FACTOR, max(1, len(core._alive())))
    return core.config.transaction_state_num_partitions, {
        "cleanup.policy": "compact", "compression.type": "uncompressed", "segment.bytes": "104857600",
        "min.insync.replicas": str(min(2, rf))}


def _share_state_topic(core: ClusterBrokerCore) -> tuple[int, dict[str, str]]:
    rf = min(OFFSETS_TOPIC_REPLICATION_FACTOR, max(1, len(core._alive())))
    return core.config.share_coordinator_state_topic_num_partitions, share_state_topic_configs(rf)


#: partitions and configs of the internal topics brokers create on first use
_INTERNAL_TOPICS: dict[str, Callable[[ClusterBrokerCore], tuple[int, dict[str, str]]]] = {
    OFFSETS_TOPIC: _offsets_topic, TXN_TOPIC: _txn_topic, SHARE_STATE_TOPIC: _share_state_topic}
