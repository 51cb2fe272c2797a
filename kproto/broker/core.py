"""The broker's sans-I/O core: request frames in, response frames out, through callbacks.

:class:`BrokerCore` decodes a request with kproto's codecs, runs its handler and hands the
encoded response to the connection (:class:`Channel`: ``respond`` once per request, with None
when there is no answer as for acks=0; or ``close``). Requests that wait (a Fetch for
``min_bytes``/``max_wait_ms``) go to the fetch purgatory and answer from there, either when a
produce brings enough data or when the timer expires them. Time: :meth:`BrokerCore.advance_clock`
runs the timer; :meth:`BrokerCore.next_deadline_ms` says when it must next be called.

As in Kafka, one request per connection is handled at a time (the socket layer mutes the
connection until the answer is out), so answers keep the order of their requests.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import time
from time import perf_counter_ns
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Optional, Protocol, Union

from kproto.broker.security.acl import ACL_VERSIONS, DESCRIBE, TOPIC, AclHandlers, Authorizer
from kproto.broker.admin import ADMIN_VERSIONS, AdminHandlers, admin_error_response
from kproto.broker.security.auth import ANONYMOUS, SASL_VERSIONS, Security
from kproto.broker.security.tokens import TOKEN_VERSIONS, DelegationTokens, TokenRequest
from kproto.broker.security.authz import RequestAuthorizer
from kproto.broker.configs import BrokerConfig, ConfigManager
from kproto.broker.coordinators.group import GroupCoordinator
from kproto.broker.coordinators.share_group import ShareGroupCoordinator
from kproto.broker.group_configs import GroupConfigs
from kproto.broker.coordinators.share_state import SHARE_STATE_TOPIC, ShareStateCoordinator
from kproto.broker.share_fetch import SharePartitionManager
from kproto.broker import features as feat
from kproto.broker.log import BrokerError, FileRegion, Log, LogManager, Topic, topic_name_error
from kproto.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kproto.broker.quotas import (THROTTLE_EXEMPT, ConnectionQuotas, MutationQuota, QuotaManagers, QuotaStore, alter_client_quotas, alter_error,
                                  describe_client_quotas, describe_error, quota_record, request_percentage)
from kproto.broker.cleaner import CleanerConfig, LogCleaner
from kproto.broker.cluster.combined import CombinedMetadata
from kproto.broker.cluster.controller import ControllerConfig
from kproto.broker.retention import RetentionManager, incoming_max_timestamp, maybe_roll_by_time
from kproto.broker.coordinators.txn import TransactionCoordinator, leader_verification_error
from kproto.broker.timer import CallbackTask, Clock, SystemClock, SystemTimer
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode, error_message
from kproto.errors import DecodeError, EncodeError
from kproto.fetch_session import FetchSessionCache, SessionErrorContext
from kproto.fetch_session.messages import (build_fetch_response, request_fetch_data,
                                           request_metadata, request_replica_id)
from kproto.fetch_session.model import TopicIdPartition
from kproto.codecs import message
from kproto.framing import (ResponseHeader, decode_request, encode_response, encode_response_parts,
                            peek_request_header, request_header_version)
from kproto.schemas.api_keys import ApiKey
from kproto.storage.metadata_image import DelegationTokenEntry, PartitionInfo

# Produce errors whose partition answer keeps the message (Kafka's RecordValidationException),
# and those answered with log start offset -1 (Kafka's UNKNOWN_LOG_APPEND_INFO)
#: The first version of each API that names topics by id only (their names are filled in from
#: the ids before anything else looks at the request).
_BY_TOPIC_ID: dict[int, int] = {ApiKey.PRODUCE: 13, ApiKey.OFFSET_COMMIT: 10, ApiKey.OFFSET_FETCH: 10}
_PRODUCE_ERRORS_WITH_MESSAGE = frozenset({ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP})
_PRODUCE_ERRORS_WITHOUT_LOG_START = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                                               ErrorCode.CORRUPT_MESSAGE, ErrorCode.KAFKA_STORAGE_ERROR})
#: Fetch errors KafkaApis answers before ReplicaManager reads (the partition is not in its metadata)
_FETCH_ERRORS_BEFORE_READ = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})

# what ApiVersions v3+ accepts as client software name and version (Kafka's pattern)
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

__all__ = ["BrokerConfig", "BrokerCore", "Channel", "Intercept", "ControlHandle", "IMPLEMENTED", "ADVERTISED_FROM",
           "SHARE_VERSIONS"]

log = logging.getLogger("kproto.broker")

_INT32_MAX = 2**31 - 1

#: A partition's records of at least this many bytes are sent from their file (``sendfile``)
#: on a channel that can; fewer are read and written with the answer's other bytes: each
#: sendfile through the event loop costs about 70 microseconds of CPU, more than copying
#: 64 KiB; the two cost about the same at 128 KiB (32 such partitions an answer, loopback)
MIN_FILE_REGION = 128 * 1024
ZERO_UUID = Uuid.ZERO
_REQUEST_HEADER = message("RequestHeader")

#: KIP-932 share groups (kproto.broker.coordinators.share_group, kproto.broker.share_fetch and the
#: persister kproto.broker.coordinators.share_state), the versions Apache Kafka 4.4.0 advertises
SHARE_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}

#: The share-group APIs a client sends: UNSUPPORTED_VERSION while share.version is below 1.
_SHARE_GROUP_APIS = frozenset({ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
                               ApiKey.SHARE_ACKNOWLEDGE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
                               ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS})

#: What the handlers implement: API key -> (lowest, highest version). ApiVersions advertises
#: the intersection with the versions the codecs know (:meth:`BrokerCore.api_versions`), so a
#: schema update never advertises a version no handler was written for.
IMPLEMENTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.METADATA: (0, 13),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.API_VERSIONS: (0, 5),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    # classic groups; OffsetCommit/OffsetFetch v10 name topics by id (KIP-848)
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 10),
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 3),
    # transactions, versions 1 and 2 (KIP-890: Produce v12, EndTxn v5 and TxnOffsetCommit v5+
    # are transaction version 2's, see TV1_MAX_VERSIONS)
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 6),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    # KIP-848 consumer groups (kproto.broker.coordinators.consumer_group)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # feature flags (kproto.broker.features) and the metadata quorum as a combined node has it
    ApiKey.UPDATE_FEATURES: (0, 2),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    # client quotas (kproto.broker.quotas)
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    **SHARE_VERSIONS,
    **ADMIN_VERSIONS,
    **SASL_VERSIONS,    # kproto.broker.security.auth
    **ACL_VERSIONS,     # kproto.broker.security.acl
    **TOKEN_VERSIONS,   # kproto.broker.security.tokens
}

#: Versions ApiVersions lists below what is served: Kafka 4 removed Produce v0-2 (KIP-896) but
#: still lists them, as librdkafka refuses to produce to a broker that does not; a request at
#: one of them closes the connection, as Kafka's does.
ADVERTISED_FROM: dict[int, int] = {ApiKey.PRODUCE: 0}

# Kafka's text of UNKNOWN_TOPIC_OR_PARTITION in a DescribeQuorum answer
_NOT_HOSTED = "This server does not host this topic-partition."

#: The newest versions a broker whose finalized transaction.version is below 2 advertises: the
#: versions above them carry KIP-890 part 2's meaning (implicit partition adds, epoch bumps).
#: (AddPartitionsToTxn v5 stays: only brokers send v4+, and v5 is their verification's version.)
TV1_MAX_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 11, ApiKey.END_TXN: 4, ApiKey.TXN_OFFSET_COMMIT: 4}


class Channel(Protocol):
    """One client connection as the core sees it."""

    def respond(self, frame: Optional[bytes]) -> None:
        """The answer to the current request (None: the request has no answer)."""

    def close(self, reason: str) -> None:
        """Drop the connection (bad frame, unknown API, a test's hook)."""


def _sends_files(channel: Channel) -> bool:
    """Does ``channel`` take answers with :class:`~kproto.broker.log.FileRegion` parts
    (``respond_parts``, records sent from their files with ``sendfile``: a plaintext socket)?"""
    return bool(getattr(channel, "sends_files", False))


def _mute(channel: Channel, throttle_ms: int) -> None:
    """KIP-219: read nothing more from a throttled client's connection for ``throttle_ms``
    after its answer (a channel without a socket, as a test's, has nothing to mute)."""
    mute = getattr(channel, "mute", None)
    if mute is not None and throttle_ms > 0:
        mute(throttle_ms)


@dataclass
class Intercept:
    """What a test hook does with a request (franz-go kfake's ControlKey model):
    ``error`` answers with that code everywhere the response has an error code, ``delay_ms``
    holds the request back (then handles it, or applies ``error``/``drop``), ``drop`` closes
    the connection, and an Intercept with nothing set lets the request through."""

    error: Optional[int] = None
    delay_ms: int = 0
    drop: bool = False

    @property
    def passes(self) -> bool:
        return self.error is None and not self.drop and self.delay_ms <= 0


HookAction = Union[Intercept, Callable[[Any, Any], Optional[Intercept]]]


class ControlHandle:
    """A registered hook; ``remove()`` ends it. ``seen`` counts the requests it acted on."""

    def __init__(self, core: BrokerCore, api_key: int, action: HookAction,
                 times: Optional[int]) -> None:
        self.core, self.api_key, self.action, self.times = core, api_key, action, times
        self.seen = 0

    def remove(self) -> None:
        hooks = self.core.hooks.get(self.api_key, [])
        if self in hooks:
            hooks.remove(self)

    @property
    def active(self) -> bool:
        return self in self.core.hooks.get(self.api_key, [])


@dataclass
class Request:
    """One decoded request and the channel its answer goes to (also a controller node's)."""
    channel: Channel
    header: Any
    body: Any
    api_key: int
    version: int
    received_ms: int
    #: puts back what the authorizer took out of the request (kproto.broker.security.authz)
    patch: Optional[Callable[[Any], Any]] = None
    #: the frame's size (a produce's bytes for its quota)
    size: int = 0
    #: records the request against its client's quotas and answers the throttle time in ms
    #: (set when quotas are configured)
    throttle: Optional[Callable[[Request], int]] = None
    #: when the handler started and how long it ran (the request quota counts handler time,
    #: not the time a request waits in a purgatory)
    started_ns: int = 0
    handler_ns: Optional[int] = None
    #: a Fetch's throttle for its byte rate, decided when its answer was built
    fetch_throttle_ms: int = 0
    #: the controller mutation quota of a CreateTopics, CreatePartitions or DeleteTopics
    mutation: Optional[MutationQuota] = None
    #: the throttle time of the controller's answer to a forwarded request (the client's
    #: connection is muted that long, as Kafka's broker does)
    forwarded_throttle_ms: int = 0

    def respond(self, body: Any, api_version: Optional[int] = None, *, file_regions: bool = False) -> None:
        """Encode and send the answer; ``file_regions``: the body holds
        :class:`~kproto.broker.log.FileRegion` records, for the channel's ``respond_parts``."""
        ver = self.version if api_version is None else api_version
        if self.patch is not None:
            body = self.patch(body)
        throttle_ms = max(self.throttle(self) if self.throttle is not None else 0, self.forwarded_throttle_ms)
        if throttle_ms > 0 and hasattr(body, "throttle_time_ms"):
            body.throttle_time_ms = throttle_ms
        header = ResponseHeader(correlation_id=self.header.correlation_id)
        if file_regions:
            self.channel.respond_parts(encode_response_parts(header, body, self.api_key, ver))  # type: ignore[attr-defined]
        else:
            self.channel.respond(encode_response(header, body, self.api_key, ver))
        _mute(self.channel, throttle_ms)

    def respond_nothing(self) -> None:
        """No answer (an acks=0 produce); its bytes still count against its client's quota."""
        throttle_ms = self.throttle(self) if self.throttle is not None else 0
        self.channel.respond(None)
        _mute(self.channel, throttle_ms)


def _producer_of_batch(records: Any) -> tuple[int, int, bool]:
    """The producer id, epoch and transactional flag in a v2 batch header (bytes 43..53, the
    attributes at 21..23); (-1, -1, False) if there is none."""
    if len(records) < 61 or records[16] != 2:
        return -1, -1, False
    return (int.from_bytes(bytes(records[43:51]), "big", signed=True),
            int.from_bytes(bytes(records[51:53]), "big", signed=True),
            bool(records[22] & 0x10))


#: coordinator answers a leader cannot give an old producer as they are: retriable ones become
#: NOT_ENOUGH_REPLICAS (no metadata refresh), as Kafka's ReplicaManager translates them
_VERIFICATION_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                     ErrorCode.REQUEST_TIMED_OUT})


def _produce_verification_error(code: int, version: int) -> tuple[int, Optional[str]]:
    """A Produce partition's code (and message) for a failed transaction verification."""
    code = leader_verification_error(code, generic_errors=version >= 11)
    if code == ErrorCode.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in _VERIFICATION_RETRIABLE:
        return (ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                f"transaction. Underlying error: {ErrorCode(code).name}")
    return code, None


def _close_for_acks0(req: Request) -> None:
    """An acks=0 produce that failed anywhere closes its connection, as Kafka's KafkaApis does:
    the producer expects no answer, and a closed connection makes it refresh metadata."""
    req.channel.close(f"an error handling acks=0 produce request {req.header.correlation_id}")


def _peer(channel: Channel) -> str:
    """The client's host as Kafka reports it (``/127.0.0.1``); channels may carry ``peer``."""
    return getattr(channel, "peer", None) or "/127.0.0.1"


def parse_request(frame: bytes, key: int, ver: int) -> tuple[Any, Any]:
    """(header, body) of a request frame (without its size prefix), or the DecodeError.
    A body that parses but leaves bytes over is accepted: Kafka reads a request body without
    checking that it was all consumed, and librdkafka 2.x sends such a Metadata v12 (three
    bytes after an all-topics request)."""
    try:
        return decode_request(frame, size_prefix=False, lazy=False)  # the broker reads it all
    except DecodeError as exc:
        if "trailing bytes after the message" not in str(exc):
            raise
        try:
            header, pos = _REQUEST_HEADER.decode_from(frame, 0, request_header_version(key, ver))
            body, _ = request_codec(key).decode_from(memoryview(frame), pos, ver, lazy=False)  # read whole
        except (DecodeError, KeyError):
            raise exc from None
        return header, body


class DelayedFetch(DelayedOperation):
    """A Fetch waiting for ``min_bytes`` (Kafka's ``DelayedFetch``): completes as soon as the
    partitions hold enough new bytes, or one of them is in error, or at ``max_wait_ms``."""

    def __init__(self, core: BrokerCore, req: Request, ctx: Any,
                 parts: list[tuple[TopicIdPartition, Any]], min_bytes: int, max_wait_ms: int) -> None:
        super().__init__(max_wait_ms)
        self.core, self.req, self.ctx, self.parts = core, req, ctx, parts
        self.min_bytes = min_bytes
        self.committed = req.version >= 4 and req.body.isolation_level == 1

    def try_complete(self) -> bool:
        total = 0
        for tip, data in self.parts:
            try:
                lg = self.core.fetch_log(tip, data)
            except BrokerError:
                return self.force_complete()  # answer with the partition's error now
            if data.fetch_offset > lg.log_end_offset or data.fetch_offset < lg.log_start_offset:
                return self.force_complete()
            upto = lg.last_stable_offset if self.committed else lg.high_watermark
            total += min(lg.bytes_available(data.fetch_offset, upto), max(data.max_bytes, 0))
        if total >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.core._answer_fetch(self.req, self.ctx, self.parts)


def find_coordinator_message(code: int, version: int) -> Optional[str]:
    """FindCoordinator's error message as Kafka sends it: the error's text, for NONE 'NONE'
    in v1-3 and '' per key in v4+ (none in v0)."""
    if version < 1:
        return None
    return error_message(code) if code else ("NONE" if version < 4 else "")


class BrokerCore:
    """Everything a broker does between bytes in and bytes out, with no sockets."""

    #: topics hold only some partitions (a broker of a cluster: its replicas)
    sparse_logs = False
    #: the APIs and versions the handlers implement
    implemented: dict[int, tuple[int, int]] = IMPLEMENTED
    #: this node is its own one-voter KRaft controller, its state (topics, configs, ACLs, SCRAM
    #: credentials, feature levels) in its own ``__cluster_metadata-0`` (a broker of a cluster
    #: follows its controllers' metadata log instead)
    own_metadata_log = True

    def __init__(self, data_dir: str, config: Optional[BrokerConfig] = None, *,
                 clock: Optional[Clock] = None,
                 wall_clock: Optional[Callable[[], int]] = None) -> None:
        self.config = config or BrokerConfig()
        self.clock: Clock = clock if clock is not None else SystemClock()
        # record timestamps are wall-clock time; the timer runs on the monotonic clock
        self.wall_ms: Callable[[], int] = wall_clock or (lambda: time.time_ns() // 1_000_000)
        self.timer = SystemTimer(clock=self.clock)
        # consumers' DelayedFetch; a cluster broker's followers wait here too
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedOperation] = \
            DelayedOperationPurgatory("Fetch", self.timer)
        self.sessions = FetchSessionCache(self.config.fetch_session_slots)
        self.closed = False
        self.logs = LogManager(data_dir, node_id=self.config.node_id,
                               cluster_id=self.config.cluster_id, defaults=self.config.log,
                               sparse=self.sparse_logs)
        self.metadata = self._open_metadata(data_dir) if self.own_metadata_log else None
        # topic and dynamic broker configs from the metadata log, before anything reads a log
        self.configs = ConfigManager(self.config, self.logs, store=self.metadata)
        self.hooks: dict[int, list[ControlHandle]] = {}
        self.group_configs = GroupConfigs(self.config, store=self.metadata)
        self._next_producer_id = 1 + max(
            (pid for t in self.logs.topics.values() for lg in t.logs for pid in lg.producers),
            default=-1)
        self.groups = GroupCoordinator(self)
        self.txns = TransactionCoordinator(self, self.groups)
        # share groups: the persister (__share_group_state), membership, share-partitions
        self.share_state = ShareStateCoordinator(self)
        self.share_groups = ShareGroupCoordinator(self, self.share_state, self.groups.group_type,
                                                  self.groups)
        self.groups.share = self.share_groups
        self.shares = SharePartitionManager(self, self.share_state, self.share_groups)
        self.retention = RetentionManager(self)
        self.cleaner = LogCleaner(self, self._cleaner_config())
        self.configs.on_broker_change = lambda: self.cleaner.reconfigure(self._cleaner_config())
        self._hw_task: Optional[CallbackTask] = None
        self._checkpoint_high_watermarks(schedule_only=True)
        self.admin = AdminHandlers(self, self.retention)
        # security: SASL per connection, ACLs and SCRAM credentials from the metadata log
        self.security = Security(self.config)
        acls = sorted(self.metadata.stored_acls()) if self.metadata is not None else []
        self._stored_acls = acls  # kept in the log even while no authorizer is configured
        md = self.metadata
        if md is not None:
            store = self.security.store
            if md.created:
                # as kafka-storage format --add-scram: the configured users' SCRAM credentials
                # go into the new metadata log (those an older kproto's file named are migrated)
                md.store_scram({k: c for k, c in store.scram.items() if k not in md.migrated_scram})
            # from now on SCRAM credentials are the metadata log's, as in Kafka
            store.scram.clear()
            store.apply_altered(md.stored_scram())
        self.authorizer: Optional[Authorizer] = (
            Authorizer(self.config.super_users, self.config.allow_everyone_if_no_acl_found, acls)
            if self.config.authorizer else None)
        self.authz = RequestAuthorizer(self.authorizer, self) if self.authorizer is not None else None
        self.security.on_change = lambda _store: self._save_security()
        #: the security of the broker's other listeners by name (a cluster broker's
        #: inter-broker listener), sharing the credentials
        self.listener_security: dict[str, Security] = {}
        name = self.config.inter_broker_listener_name
        if name:
            protocol = self.config.inter_broker_security_protocol
            self.listener_security[name] = Security(dataclasses.replace(
                self.config, sasl_enabled_mechanisms=self.config.sasl_enabled_mechanisms
                if protocol.startswith("SASL_") else ()), store=self.security.store)
        # delegation tokens: kept in the metadata log, their SCRAM credentials in the store
        authorizer = self.authorizer
        sec_clock = self.security.clock  # wall-clock time: tokens' timestamps are epoch ms
        self.tokens = DelegationTokens(self.config, None if authorizer is None else authorizer.authorize,
                                       lambda: int(sec_clock() * 1000))
        self._token_task: Optional[CallbackTask] = None
        self._sync_tokens()
        if self.metadata is not None and self.tokens.enabled:
            self._sweep_tokens(schedule_only=True)
        # client quotas: ClientQuotaRecords of the metadata log (a broker of a cluster: its image's)
        self.quota_store = QuotaStore()
        if self.metadata is not None:
            self.quota_store.replace(self.metadata.image.client_quotas)
        self.quotas = QuotaManagers(self.quota_store, self.config.quota_window_num,
                                    self.config.quota_window_size_seconds,
                                    self.config.controller_quota_window_num,
                                    self.config.controller_quota_window_size_seconds)
        #: what the listener does with a new connection (its limits are dynamic broker configs)
        self.connection_quotas = ConnectionQuotas(self.quota_store, self.configs.broker_config,
                                                  self.config.quota_window_num,
                                                  self.config.quota_window_size_seconds)
        acl = AclHandlers(self.authorizer, self._save_security)
        sec = self.security
        tx, adm = self.txns, self.admin
        self.handlers: dict[int, Callable[[Request], None]] = {
            ApiKey.ADD_PARTITIONS_TO_TXN: lambda r: tx.add_partitions(r.body, r.version, r.respond),
            ApiKey.ADD_OFFSETS_TO_TXN: lambda r: tx.add_offsets(r.body, r.version, r.respond),
            ApiKey.END_TXN: lambda r: tx.end_txn(r.body, r.version, r.respond),
            ApiKey.TXN_OFFSET_COMMIT: lambda r: self.groups.txn_commit_offsets(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_TRANSACTIONS: lambda r: tx.describe_transactions(r.body, r.version, r.respond),
            ApiKey.LIST_TRANSACTIONS: lambda r: tx.list_transactions(r.body, r.version, r.respond),
            ApiKey.JOIN_GROUP: lambda r: self.groups.join_group(r.body, r.version, r.header.client_id or "",
                                                      _peer(r.channel), r.respond),
            ApiKey.SYNC_GROUP: lambda r: self.groups.sync_group(r.body, r.version, r.respond),
            ApiKey.HEARTBEAT: lambda r: self.groups.heartbeat(r.body, r.version, r.respond),
            ApiKey.LEAVE_GROUP: lambda r: self.groups.leave_group(r.body, r.version, r.respond),
            ApiKey.OFFSET_COMMIT: lambda r: self.groups.commit_offsets(r.body, r.version, r.respond),
            ApiKey.OFFSET_FETCH: lambda r: self.groups.fetch_offsets(r.body, r.version, r.respond),
            ApiKey.OFFSET_DELETE: lambda r: self.groups.delete_offsets(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_GROUPS: lambda r: self.groups.describe_groups(r.body, r.version, r.respond),
            ApiKey.LIST_GROUPS: lambda r: self.groups.list_groups(r.body, r.version, r.respond),
            ApiKey.DELETE_GROUPS: lambda r: self.groups.delete_groups(r.body, r.version, r.respond),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: lambda r: self.groups.consumer.heartbeat(
                r.body, r.version, r.header.client_id or "", _peer(r.channel), r.respond),
            ApiKey.CONSUMER_GROUP_DESCRIBE: lambda r: self.groups.consumer.describe(r.body, r.version, r.respond),
            ApiKey.SHARE_GROUP_HEARTBEAT: lambda r: self.share_groups.heartbeat(
                r.body, r.version, r.header.client_id or "", _peer(r.channel), r.respond),
            ApiKey.SHARE_GROUP_DESCRIBE: lambda r: self.share_groups.describe(r.body, r.version, r.respond),
            ApiKey.SHARE_FETCH: self.shares.fetch,
            ApiKey.SHARE_ACKNOWLEDGE: self.shares.acknowledge,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
                lambda r: self.share_groups.describe_offsets(r.body, r.version, r.respond),
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: lambda r: self.share_groups.alter_offsets(r.body, r.version, r.respond),
            ApiKey.DELETE_SHARE_GROUP_OFFSETS:
                lambda r: self.share_groups.delete_offsets(r.body, r.version, r.respond),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE:
                lambda r: self.share_state.initialize_rpc(r.body, r.version, r.respond),
            ApiKey.READ_SHARE_GROUP_STATE: lambda r: self.share_state.read_rpc(r.body, r.version, r.respond),
            ApiKey.WRITE_SHARE_GROUP_STATE: lambda r: self.share_state.write_rpc(r.body, r.version, r.respond),
            ApiKey.DELETE_SHARE_GROUP_STATE: lambda r: self.share_state.delete_rpc(r.body, r.version, r.respond),
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY:
                lambda r: self.share_state.summary_rpc(r.body, r.version, r.respond),
            ApiKey.CREATE_PARTITIONS: lambda r: adm.create_partitions(r.body, r.version, r.respond,
                                                                     self.mutation_quota(r)),
            ApiKey.DESCRIBE_CONFIGS: lambda r: adm.describe_configs(r.body, r.version, r.respond),
            ApiKey.ALTER_CONFIGS: lambda r: adm.alter_configs(r.body, r.version, r.respond),
            ApiKey.INCREMENTAL_ALTER_CONFIGS:
                lambda r: adm.incremental_alter_configs(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_CLUSTER: lambda r: adm.describe_cluster(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_LOG_DIRS: lambda r: adm.describe_log_dirs(r.body, r.version, r.respond),
            ApiKey.DELETE_RECORDS: lambda r: adm.delete_records(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_PRODUCERS: lambda r: adm.describe_producers(r.body, r.version, r.respond),
            ApiKey.ELECT_LEADERS: lambda r: adm.elect_leaders(r.body, r.version, r.respond),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS:
                lambda r: adm.alter_partition_reassignments(r.body, r.version, r.respond),
            ApiKey.LIST_PARTITION_REASSIGNMENTS:
                lambda r: adm.list_partition_reassignments(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_TOPIC_PARTITIONS:
                lambda r: adm.describe_topic_partitions(r.body, r.version, r.respond, self._describable(r)),
            ApiKey.LIST_CONFIG_RESOURCES: lambda r: adm.list_config_resources(r.body, r.version, r.respond),
            ApiKey.SASL_HANDSHAKE: lambda r: self.security_of(r.channel).handshake(
                r.channel, r.body, r.version, r.respond),
            ApiKey.SASL_AUTHENTICATE: lambda r: self.security_of(r.channel).authenticate(
                r.channel, r.body, r.version, r.respond),
            ApiKey.CREATE_ACLS: lambda r: acl.create_acls(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_ACLS: lambda r: acl.describe_acls(r.body, r.version, r.respond),
            ApiKey.DELETE_ACLS: lambda r: acl.delete_acls(r.body, r.version, r.respond),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: lambda r: sec.describe_scram(r.body, r.version, r.respond),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda r: sec.alter_scram(r.body, r.version, r.respond),
            ApiKey.CREATE_DELEGATION_TOKEN: lambda r: self._token_change(r, self.tokens.create),
            ApiKey.RENEW_DELEGATION_TOKEN: lambda r: self._token_change(r, self.tokens.renew),
            ApiKey.EXPIRE_DELEGATION_TOKEN: lambda r: self._token_change(r, self.tokens.expire),
            ApiKey.DESCRIBE_DELEGATION_TOKEN: lambda r: r.respond(self.tokens.describe(
                self._token_request(r), r.body, r.version, self._token_image())),
            ApiKey.PRODUCE: self._produce, ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets, ApiKey.METADATA: self._metadata,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offsets_for_leader_epoch,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.API_VERSIONS: self._api_versions, ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.UPDATE_FEATURES: self._update_features,
            ApiKey.DESCRIBE_QUORUM: self._describe_quorum,
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self._describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self._alter_client_quotas,
        }
        self.requests_handled = 0

    def _describable(self, req: Request) -> Optional[Callable[[str], bool]]:
        """Whether the request's client may describe a topic (None: no authorizer, any)."""
        if self.authz is None:
            return None
        authz, session = self.authz, self.security_of(req.channel).session(req.channel)
        return lambda name: authz.ok(session, DESCRIBE, TOPIC, name)

    # ------------------------------------------------------------------ versions
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """API key -> (min, max) advertised: implemented versions the codecs know (computed
        once: every request looks its range up, and the walk over the codecs costs ~0.1 ms)."""
        if self.transaction_version() < 2:  # the TV2 request versions are not advertised
            cached = self.__dict__.get("_api_versions_tv1")
            if cached is None:
                cached = self._api_versions_tv1 = {
                    k: (lo, min(hi, TV1_MAX_VERSIONS[k])) if k in TV1_MAX_VERSIONS else (lo, hi)
                    for k, (lo, hi) in self._api_versions_all().items()}
            return cached
        return self._api_versions_all()

    def _api_versions_all(self) -> dict[int, tuple[int, int]]:
        cached = self.__dict__.get("_api_versions_cache")
        if cached is None:
            cached = self._api_versions_cache = self._compute_api_versions()
        return cached

    def _compute_api_versions(self) -> dict[int, tuple[int, int]]:
        out = {}
        for key, (lo, hi) in self.implemented.items():
            try:
                valid = request_codec(key).valid_versions
            except KeyError:
                continue
            lo2, hi2 = max(lo, valid.start), min(hi, valid[-1])
            if lo2 <= hi2:
                out[int(key)] = (lo2, hi2)
        return out

    # ------------------------------------------------------------------ time
    def advance_clock(self) -> None:
        """Run what the timer holds that is due (expired fetches answer here, sessions
        expire, rebalances time out); each purgatory then purges past its threshold."""
        self.fetch_purgatory.advance_clock()
        self.groups.rebalance_purgatory.advance_clock()
        self.groups.heartbeat_purgatory.advance_clock()

    def next_deadline_ms(self) -> Optional[int]:
        return self.timer.next_expiration_ms()

    # ------------------------------------------------------------------ hooks
    def control(self, api_key: int, action: HookAction, *, times: Optional[int] = 1) -> ControlHandle:
        """Intercept requests of ``api_key``: ``action`` is an :class:`Intercept` or a function
        of (header, body) returning one (None: let it through, not counted). ``times``: how many
        requests it acts on before removing itself (None: until ``remove()``)."""
        handle = ControlHandle(self, int(api_key), action, times)
        self.hooks.setdefault(int(api_key), []).append(handle)
        return handle

    def _intercept(self, header: Any, body: Any) -> Optional[Intercept]:
        for handle in list(self.hooks.get(header.request_api_key, [])):
            act = handle.action
            result = act(header, body) if callable(act) else act
            if result is None:
                continue
            handle.seen += 1
            if handle.times is not None and handle.seen >= handle.times:
                handle.remove()
            return result
        return None

    # ------------------------------------------------------------------ dispatch
    def handle(self, channel: Channel, frame: bytes) -> None:
        """Handle one request frame (without its size prefix). The channel gets exactly one
        ``respond`` or ``close`` for it, now or later."""
        try:
            key, ver, cid = peek_request_header(frame, size_prefix=False)
        except DecodeError as exc:
            if self.security_of(channel).gate(channel, frame, None):  # a legacy SASL token has no header
                return
            channel.close(f"bad request header: {exc}")
            return
        if self.security_of(channel).gate(channel, frame, key):  # before authentication: SASL only
            return
        if key != ApiKey.API_VERSIONS and removed_in_kafka_4(key, ver):
            # Kafka 4 cannot even parse it (KIP-896: Produce v0-2, OffsetCommit v0-1, the
            # ZooKeeper-era APIs, ...): it closes the connection
            channel.close(f"API key {key} v{ver} was removed in Kafka 4")
            return
        supported = self.api_versions()
        if key == ApiKey.API_VERSIONS and (key not in supported or ver > supported[key][1]):
            # KIP-511: a version too new is answered in v0 form with the versions we have
            body = response_codec(key).cls(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
                response_codec(key).cls.ApiVersion(api_key=key, min_version=supported[key][0],
                                                   max_version=supported[key][1])])
            channel.respond(encode_response(ResponseHeader(correlation_id=cid), body, key, 0))
            return
        try:
            header, body = parse_request(frame, key, ver)
        except DecodeError as exc:
            # Kafka closes a connection whose request it cannot parse
            channel.close(f"cannot parse request (API key {key} v{ver}): {exc}")
            return
        req = Request(channel, header, body, key, ver, self.clock.now_ms(), size=len(frame))
        if self.quotas.any:
            req.throttle = self._throttle
        try:
            hook = self._intercept(header, body)
        except Exception:  # a test's hook that raises: close, do not leave the request unanswered
            log.exception("a test hook on API key %d raised", key)
            channel.close(f"a test hook on API key {key} raised")
            return
        if hook is not None and not hook.passes:
            if hook.delay_ms > 0:
                after = Intercept(error=hook.error, drop=hook.drop)
                self.timer.add(CallbackTask(hook.delay_ms, lambda: self._dispatch(req, after)))
                return
        self._dispatch(req, hook, supported)

    def _dispatch(self, req: Request, hook: Optional[Intercept],
                  supported: Optional[dict[int, tuple[int, int]]] = None) -> None:
        """Run ``req``'s handler; ``supported``: :meth:`api_versions` when the request arrived
        (None: now, for a request a test hook held back)."""
        if hook is not None and hook.drop:
            req.channel.close(f"dropped by a test hook on API key {req.api_key}")
            return
        if hook is not None and hook.error is not None:
            self._answer_error(req, hook.error, run_handler=req.api_key in self.handlers)
            return
        self.requests_handled += 1
        rng = (self.api_versions() if supported is None else supported).get(req.api_key)
        handler = self.handlers.get(req.api_key)
        if handler is None or rng is None or not rng[0] <= req.version <= rng[1]:
            self._answer_error(req, ErrorCode.UNSUPPORTED_VERSION, run_handler=False)
            return
        if req.api_key in _SHARE_GROUP_APIS and self.feature_levels()[0].get(feat.SHARE_VERSION, 0) < 1:
            # share groups disabled (share.version 0): Kafka still advertises the APIs
            self._answer_error(req, ErrorCode.UNSUPPORTED_VERSION, run_handler=True)
            return
        if req.version >= _BY_TOPIC_ID.get(req.api_key, 99):
            self._name_topics_by_id(req)
        try:
            if self.authz is not None:
                verdict = self.authz.check(req.api_key, req.version, req.body,
                                           self.security_of(req.channel).session(req.channel))
                if verdict is not None:
                    if verdict.error is not None:
                        self._answer_error(req, verdict.error, run_handler=True)
                        return
                    if verdict.response is not None:
                        req.respond(verdict.response)
                        return
                    req.patch = verdict.patch
            req.started_ns = perf_counter_ns()
            handler(req)
            req.handler_ns = perf_counter_ns() - req.started_ns
        except Exception:  # a handler bug must not take the broker down
            log.exception("error handling %s v%d", request_codec(req.api_key).name, req.version)
            self._answer_error(req, ErrorCode.UNKNOWN_SERVER_ERROR, run_handler=False)

    def _name_topics_by_id(self, req: Request) -> None:
        """Produce v13 and OffsetCommit/OffsetFetch v10 name topics by id only: fill in each
        topic's name, as Kafka's broker does before authorising the request and handling it;
        an unknown id keeps the name "" and is answered UNKNOWN_TOPIC_ID."""
        name = self.topic_name
        if req.api_key == ApiKey.PRODUCE:
            for t in req.body.topic_data:
                t.name = name(t.topic_id) or ""
            return
        holders = [req.body] if req.api_key == ApiKey.OFFSET_COMMIT else req.body.groups
        for holder in holders:
            for t in holder.topics or ():
                t.name = name(t.topic_id) or ""

    def _answer_error(self, req: Request, code: int, run_handler: bool) -> None:
        """Answer with ``code`` (Kafka's ``getErrorResponse``): for the implemented APIs the
        request's topics and partitions mirrored with the error, nothing done; for the others
        the response's top-level error code; an API whose response has none closes the
        connection, as Kafka does with a request it cannot serve."""
        # streams groups are not implemented: answered as a Kafka broker without them answers
        # (StreamsGroupDescribe's groups each with the error, the others' top-level error)
        mirror = run_handler or req.api_key == ApiKey.STREAMS_GROUP_DESCRIBE
        body = error_response(req.api_key, req.version, req.body, code) if mirror else None
        if body is None:
            body = response_codec(req.api_key).cls()
            if not hasattr(body, "error_code"):
                req.channel.close(f"{ErrorCode(code).name} for API key {req.api_key} v{req.version}")
                return
            body.error_code = code
        if req.api_key == ApiKey.PRODUCE and req.body.acks == 0:
            _close_for_acks0(req)
            return
        try:
            req.respond(body)
        except EncodeError:
            # the response has no error code at this version (ElectLeaders v0, ...)
            req.channel.close(f"{ErrorCode(code).name} for API key {req.api_key} v{req.version}")

    # ------------------------------------------------------------------ helpers
    def log_for(self, tip: TopicIdPartition) -> Optional[Log]:
        if tip.topic is None:
            return None
        return self.logs.get(tip.topic, tip.partition)

    def leader_log(self, topic: str, partition: int, current_leader_epoch: int = -1) -> Log:
        """The partition's log if this broker leads it at ``current_leader_epoch`` (-1: any),
        else :class:`BrokerError` as Kafka answers (UNKNOWN_TOPIC_OR_PARTITION;
        FENCED_LEADER_EPOCH for an older epoch, UNKNOWN_LEADER_EPOCH for a newer one)."""
        lg = self.logs.get(topic, partition)
        if lg is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if 0 <= current_leader_epoch < lg.leader_epoch:
            raise BrokerError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > lg.leader_epoch:
            raise BrokerError(ErrorCode.UNKNOWN_LEADER_EPOCH)
        return lg

    def fetch_log(self, tip: TopicIdPartition, data: Any) -> Log:
        """The log a consumer's fetch of ``tip`` reads (:meth:`leader_log` of it)."""
        if tip.topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_ID)
        epoch = data.current_leader_epoch
        return self.leader_log(tip.topic, tip.partition, -1 if epoch is None else epoch)

    def leads(self, topic: str, partition: int) -> bool:
        return self.logs.get(topic, partition) is not None

    def appended_internal(self, log: Log) -> None:
        """A coordinator wrote to an internal topic's partition: waiting fetches may complete."""
        self.fetch_purgatory.check_and_complete((log.topic, log.partition))

    def when_replicated(self, log: Log, offset: int, then: Callable[[int], None],
                        timeout_ms: int) -> None:
        """``then(0)``: a single replica has committed what it appended."""
        then(ErrorCode.NONE)

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.logs.get(topic, partition) is not None

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, partitions: set[tuple[str, int]], done: Callable[[], None]) -> None:
        """Write a transaction's markers to its partitions, then ``done()``: here, at once."""
        self.txns.complete_markers_locally(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
        done()

    def verify_txn_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: list[tuple[str, int]], add: bool,
                              then: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """KIP-890: ask the transactional id's coordinator whether ``partitions`` are in the
        producer's transaction (``add``: TV2, put them in), then ``then(codes)`` with the
        coordinator's codes (AddPartitionsToTxn v5's). The coordinator is here: at once."""
        self.txns.verify_or_add(transactional_id, producer_id, producer_epoch, partitions, add, then)

    def known_topics(self) -> dict[str, tuple[Uuid, int, bool]]:
        return {n: (t.topic_id, len(t.partitions), t.is_internal) for n, t in self.logs.topics.items()}

    def topic_name(self, topic_id: Uuid) -> Optional[str]:
        """The name of the topic ``known_topics`` lists with ``topic_id`` (None: no such topic),
        looked up, not searched: every Produce v13 asks it."""
        t = self.logs.topics_by_id.get(topic_id)
        return None if t is None else t.name

    def partition_states(self, topic: str) -> Optional[list[PartitionInfo]]:
        """A topic's partitions: each led by this broker, its only replica and in-sync."""
        t = self.logs.topics.get(topic)
        if t is None:
            return None
        me = self.config.node_id
        return [PartitionInfo(topic=topic, topic_id=t.topic_id, partition=p, replicas=(me,), isr=(me,),
                              leader=me, leader_epoch=lg.leader_epoch, partition_epoch=0)
                for p, lg in enumerate(t.partitions) if lg is not None]

    def broker_ids(self, alive: bool) -> list[int]:
        return [self.config.node_id]

    def check_produce(self, log: Log, acks: int, min_insync_replicas: int) -> None:
        """Before an append: with acks=all, enough replicas in sync (Kafka's
        ``Partition.appendRecordsToLeader``). One replica is in sync here."""
        if acks == -1 and min_insync_replicas > 1:
            raise BrokerError(ErrorCode.NOT_ENOUGH_REPLICAS)

    def produce_appended(self, log: Log, last_offset: int) -> Optional[int]:
        """After a leader append: the offset the high watermark must reach before acks=all
        is answered (None: it already has, as for a single replica)."""
        return None

    def answer_produce(self, req: Request, response: Any, waits: dict[tuple[str, int], int]) -> None:
        """Send a Produce's answer; ``waits``: partitions whose acks=all append is not yet
        replicated (none on a single broker)."""
        req.respond(response)

    def _cleaner_config(self) -> CleanerConfig:
        """The log cleaner's settings: ``log.cleaner.enable`` from the start-up settings, the
        others as configured at their most specific level (they change at run time)."""
        v = self.configs.broker_config
        return CleanerConfig(
            self.config.log_cleaner_enable, int(v("log.cleaner.backoff.ms")),
            int(v("log.cleaner.dedupe.buffer.size")), int(v("log.cleaner.io.buffer.size")),
            float(v("log.cleaner.io.buffer.load.factor")), int(v("log.cleaner.threads")),
            float(v("log.cleaner.io.max.bytes.per.second")))

    def _open_metadata(self, data_dir: str) -> CombinedMetadata:
        """The single broker's metadata log, brought up to the topics found in the directory
        (all of them on a directory of an older kproto) and to the state of an older kproto's
        JSON files (migrated once)."""
        c = self.config
        md = CombinedMetadata(data_dir, node_id=c.node_id, cluster_id=self.logs.cluster_id,
                              directory_id=self.logs.directory_id, timer=self.timer,
                              controller_config=ControllerConfig(
                                  cluster_id=self.logs.cluster_id, node_id=c.node_id, voters=(c.node_id,),
                                  num_partitions=c.num_partitions, min_insync_replicas=c.min_insync_replicas,
                                  transaction_version=c.transaction_version,
                                  auto_leader_rebalance_enable=False))
        md.sync_topics(self.logs.topics)
        md.migrate(data_dir)
        for problem in md.migration_problems:
            log.warning("migrating the old state files: %s", problem)
        self.logs.on_topic_changed = lambda name: md.sync_topics(self.logs.topics, (name,))
        return md

    def _save_security(self) -> None:
        if self.metadata is None:
            return
        self.metadata.store_acls(self.authorizer.acls if self.authorizer is not None else self._stored_acls)
        self.metadata.store_scram(self.security.store.altered)

    def security_of(self, channel: Channel) -> Security:
        """The security of the listener ``channel`` came in on."""
        if not self.listener_security:  # one listener (the hot path: every request asks)
            return self.security
        name = getattr(channel, "listener", None)
        return self.security if name is None else self.listener_security.get(name, self.security)

    # ------------------------------------------------------------------ delegation tokens
    def _token_request(self, req: Request) -> TokenRequest:
        """Who asks, and whether Kafka takes token requests from this connection: not on a
        PLAINTEXT listener, not over SSL without a client certificate, not from a connection
        authenticated with a token."""
        sec = self.security_of(req.channel)
        s = sec.session(req.channel)
        tls = getattr(req.channel, "ssl_object", None) is not None
        refused = (s.token_authenticated or (not sec.sasl and not tls)
                   or (not sec.sasl and s.principal == ANONYMOUS))
        return TokenRequest(s.principal, s.host, not refused)

    def _token_image(self) -> Mapping[str, DelegationTokenEntry]:
        """The delegation tokens by id (the metadata image's)."""
        return self.metadata.image.tokens if self.metadata is not None else {}

    def _token_change(self, req: Request, handler: Callable[..., tuple[Any, list]]) -> None:
        """Create, renew or expire: the records written to the metadata log, then the answer."""
        resp, records = handler(self._token_request(req), req.body, req.version, self._token_image())
        if records:
            assert self.metadata is not None
            self.metadata.write(records)
            self._sync_tokens()
        req.respond(resp)

    def _sync_tokens(self) -> None:
        """The SCRAM credentials of the tokens the metadata image holds (Kafka's
        ``DelegationTokenPublisher`` feeding the token cache)."""
        store, image = self.security.store, self._token_image()
        for gone in set(store.tokens) - set(image):
            del store.tokens[gone]
        if not self.tokens.enabled:
            return
        for token_id, t in image.items():
            have = store.tokens.get(token_id)
            if have is None or (have.owner, have.expiry_ms) != (t.owner, t.expiry_ms):
                store.put_token(token_id, t.owner, t.expiry_ms, self.tokens.hmac(token_id))

    def _sweep_tokens(self, schedule_only: bool = False) -> None:
        """Remove the expired tokens, every ``delegation.token.expiry.check.interval.ms``."""
        if not schedule_only and self.metadata is not None:
            records = self.tokens.sweep(self._token_image())
            if records:
                self.metadata.write(records)
                self._sync_tokens()
        self._token_task = CallbackTask(max(1, self.config.delegation_token_expiry_check_interval_ms),
                                        self._sweep_tokens)
        self.timer.add(self._token_task)

    def _create_topic(self, name: str, partitions: int, configs: Optional[dict] = None) -> Topic:
        topic = self.logs.create_topic(name, partitions, configs)
        return topic

    # ------------------------------------------------------------------ ApiVersions
    def _api_versions(self, req: Request) -> None:
        cls = response_codec(ApiKey.API_VERSIONS).cls
        refused = api_versions_refusal(req.body, req.version, self.logs.cluster_id, self.config.node_id)
        if refused:
            req.respond(cls(error_code=refused))
            return
        resp = cls(error_code=0, api_keys=[
            cls.ApiVersion(api_key=k, min_version=min(lo, ADVERTISED_FROM.get(k, lo)), max_version=hi)
            for k, (lo, hi) in sorted(self.api_versions().items())])
        if req.version >= 3:
            feat.set_api_versions_features(resp, req.version, *self.feature_levels())
        req.respond(resp)

    # ------------------------------------------------------------------ client quotas
    def quota_identity(self, req: Request) -> tuple[str, str]:
        """The (user, client id) a request is counted under: the principal's name (ANONYMOUS
        on a listener without authentication), as Kafka's quota entities name users."""
        principal = self.security_of(req.channel).session(req.channel).principal
        return principal.split(":", 1)[-1], req.header.client_id or ""

    def _throttle(self, req: Request) -> int:
        """Kafka's throttling of an answer: the request's handler time against its client's
        request quota (not for the exempt APIs nor an acks=0 produce), a produce's bytes against
        the produce byte rate, a fetch's byte-rate throttle decided with its answer; the
        longest of them."""
        if req.api_key == ApiKey.FETCH and request_replica_id(req.body, req.version) >= 0:
            return 0  # a follower's fetch: replication is not a client's traffic
        user, client_id = self.quota_identity(req)
        now = self.clock.now_ms()
        throttle = 0
        produce = req.api_key == ApiKey.PRODUCE
        if req.api_key not in THROTTLE_EXEMPT and not (produce and req.body.acks == 0):
            nanos = req.handler_ns if req.handler_ns is not None else perf_counter_ns() - req.started_ns
            throttle = self.quotas.request.record(user, client_id, request_percentage(nanos), now)
        if produce:
            throttle = max(throttle, self.quotas.produce.record(user, client_id, req.size, now))
        if req.mutation is not None:
            throttle = max(throttle, req.mutation.throttle_time_ms())
        return max(throttle, req.fetch_throttle_ms)

    def mutation_quota(self, req: Request) -> MutationQuota:
        """The controller mutation quota of a CreateTopics, CreatePartitions or DeleteTopics
        (kept on the request: its answer is throttled by it)."""
        if not self.quotas.any:
            req.mutation = MutationQuota(None, 0.0, 0.0, False, self.clock.now_ms)
        else:
            req.mutation = self.quotas.mutation.quota_for(*self.quota_identity(req), req.api_key,
                                                          req.version, self.clock.now_ms)
        return req.mutation

    def _describe_client_quotas(self, req: Request) -> None:
        req.respond(describe_client_quotas(self.quota_store.entries, req.body))

    def _alter_client_quotas(self, req: Request) -> None:
        resp, changes = alter_client_quotas(self.quota_store.entries, req.body, req.version)
        self.apply_client_quotas(changes)
        req.respond(resp)

    def apply_client_quotas(self, changes: list[tuple[Any, str, Optional[float]]]) -> None:
        """Make quota changes (ClientQuotaRecords' content) and keep them."""
        if not changes:
            return
        if self.metadata is not None:
            self.metadata.write([(quota_record(entity, key, value), 0) for entity, key, value in changes])
        for entity, key, value in changes:
            self.quota_store.apply(entity, key, value)

    # ------------------------------------------------------------------ features
    def feature_levels(self) -> tuple[dict[str, int], int]:
        """The finalized feature levels and their epoch, as ApiVersions v3+ answers them."""
        assert self.metadata is not None  # a broker of a cluster answers from its image
        return self.metadata.feature_levels()

    def transaction_version(self) -> int:
        """The finalized transaction.version: 2 is KIP-890 part 2's protocol."""
        return self.feature_levels()[0].get(feat.TRANSACTION_VERSION, 0)

    def _update_features(self, req: Request) -> None:
        # Kafka's controller checks (kproto.broker.features); this node is its own controller
        updates = feat.requested_updates(req.version, req.body)
        outcome = feat.update_features(updates, self.feature_levels()[0], node_id=self.config.node_id,
                                       validate_only=req.version >= 1 and req.body.validate_only)
        if outcome.levels:
            assert self.metadata is not None
            self.metadata.store_features(outcome.levels)
        req.respond(feat.update_features_response(req.version, updates, outcome))

    # ------------------------------------------------------------------ DescribeQuorum
    def _describe_quorum(self, req: Request) -> None:
        """As Kafka's combined node with a one-voter quorum answers: this node leads the
        metadata partition, its log end is the high watermark; the node's own listener stands
        for the controller listener."""
        cls = response_codec(ApiKey.DESCRIBE_QUORUM).cls
        text = req.version >= 2  # error messages from v2 on
        assert self.metadata is not None
        raft = self.metadata.replica
        end = raft.high_watermark
        now = self.wall_ms()
        me = self.config.node_id
        topics, known = [], False
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                ours = (t.topic_name == "__cluster_metadata" and p.partition_index == 0
                        and len(req.body.topics) == 1 and len(t.partitions) == 1)
                known |= ours
                if not ours:
                    # Kafka answers every partition asked with this unless the request is exactly ours
                    parts.append(cls.PartitionData(partition_index=p.partition_index,
                                                   error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                   error_message=_NOT_HOSTED if text else None,
                                                   leader_id=0, leader_epoch=0, high_watermark=0))
                    continue
                parts.append(cls.PartitionData(
                    partition_index=0, error_code=0, error_message="" if text else None, leader_id=me,
                    leader_epoch=raft.epoch,
                    high_watermark=end, observers=[], current_voters=[cls.ReplicaState(
                        replica_id=me, replica_directory_id=self.logs.directory_id if text else Uuid.ZERO,
                        log_end_offset=end, last_fetch_timestamp=now if req.version >= 1 else -1,
                        last_caught_up_timestamp=now if req.version >= 1 else -1)]))
            topics.append(cls.TopicData(topic_name=t.topic_name, partitions=parts))
        nodes = [cls.Node(node_id=me, listeners=[cls.Listener(name="CONTROLLER", host=self.config.host,
                                                              port=self.config.port)])] if known and text else []
        req.respond(cls(error_code=0, error_message="" if text else None, topics=topics, nodes=nodes))


    # ------------------------------------------------------------------ Metadata
    def _metadata(self, req: Request) -> None:
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.METADATA).cls
        cfg = self.config
        topics_out = []
        try:
            every, names, ids = metadata_request_topics(body, ver)
        except BrokerError as exc:
            self._answer_error(req, exc.code, run_handler=True)
            return
        if every:
            names = sorted(self.logs.topics)
        for tid in ids:
            by_id = self.logs.topics_by_id.get(tid)
            if by_id is None:
                topics_out.append(cls.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=tid))
            else:
                names.append(by_id.name)
        auto = cfg.auto_create_topics and (ver < 4 or body.allow_auto_topic_creation) and not ids
        for name in names:
            topic = self.logs.topics.get(name)
            if topic is None:
                why = topic_name_error(name)
                if why is not None:
                    topics_out.append(cls.MetadataResponseTopic(
                        error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name))
                    continue
                if auto:
                    # created now, but Kafka's KRaft broker answers the request that asked for
                    # it before the controller has: UNKNOWN_TOPIC_OR_PARTITION, the client
                    # asks again (AutoTopicCreationManager)
                    self._create_topic(name, cfg.num_partitions)
                topics_out.append(cls.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            topics_out.append(cls.MetadataResponseTopic(
                error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
                partitions=[cls.MetadataResponsePartition(
                    error_code=0, partition_index=p, leader_id=cfg.node_id, leader_epoch=lg.leader_epoch,
                    replica_nodes=[cfg.node_id], isr_nodes=[cfg.node_id], offline_replicas=[])
                    for p, lg in enumerate(topic.partitions) if lg is not None]))
        req.respond(cls(
            brokers=[cls.MetadataResponseBroker(node_id=cfg.node_id, host=cfg.host, port=cfg.port,
                                                rack=cfg.rack)],
            cluster_id=self.logs.cluster_id, controller_id=cfg.node_id, topics=topics_out))

    # ------------------------------------------------------------------ FindCoordinator
    def _find_coordinator(self, req: Request) -> None:
        """This broker coordinates every group and transactional id; the internal topic of
        the key type is created on first use, as Kafka does."""
        cls = response_codec(ApiKey.FIND_COORDINATOR).cls
        cfg = self.config
        key_type = req.body.key_type if req.version >= 1 else 0
        if key_type == 0:
            self.groups.ensure_topic()
            err = 0
        elif key_type == 1:
            self._ensure_txn_topic()
            err = 0
        elif key_type == 2:  # a share-partition's state: group:topicId:partition
            self.share_state.ensure_topic()
            err = 0
        else:
            err = ErrorCode.INVALID_REQUEST
        node, host, port = (cfg.node_id, cfg.host, cfg.port) if not err else (-1, "", -1)
        msg = find_coordinator_message(err, req.version)
        if req.version < 4:
            req.respond(cls(error_code=err, error_message=msg, node_id=node, host=host, port=port))
            return
        req.respond(cls(coordinators=[
            cls.Coordinator(key=k, node_id=node, host=host, port=port, error_code=err, error_message=msg)
            for k in req.body.coordinator_keys]))

    def _ensure_txn_topic(self) -> None:
        self.txns.ensure_topic()

    def allocate_producer_id(self) -> int:
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    def reserve_producer_id(self, pid: int) -> None:
        """An id found in ``__transaction_state`` at start is never handed out again."""
        self._next_producer_id = max(self._next_producer_id, pid + 1)

    # ------------------------------------------------------------------ InitProducerId
    def _init_producer_id(self, req: Request) -> None:
        cls = response_codec(ApiKey.INIT_PRODUCER_ID).cls
        if req.body.transactional_id is not None:
            self.txns.init_producer_id(req.body, req.version, req.respond)
            return
        req.respond(cls(error_code=0, producer_id=self.allocate_producer_id(), producer_epoch=0))

    # ------------------------------------------------------------------ CreateTopics
    def _create_topics(self, req: Request) -> None:
        body = req.body
        cls = response_codec(ApiKey.CREATE_TOPICS).cls
        quota = self.mutation_quota(req)
        results = []
        seen: set[str] = set()
        dupes = {t.name for t in body.topics if sum(1 for u in body.topics if u.name == t.name) > 1}
        for t in body.topics:
            res = cls.CreatableTopicResult(name=t.name, error_code=0, error_message=None)
            results.append(res)
            if t.name in dupes:
                if t.name in seen:
                    results.pop()
                    continue
                seen.add(t.name)
                res.error_code = ErrorCode.INVALID_REQUEST
                res.error_message = f"Create topics request from client `{req.header.client_id}` " \
                                    f"contains multiple entries for the following topics: {t.name}"
                continue
            try:
                n, configs = self._check_new_topic(t)
                if n > self.config.max_partitions_per_request:
                    raise BrokerError(ErrorCode.POLICY_VIOLATION,
                                      f"Unable to create {n} partitions in one operation: the "
                                      f"limit is {self.config.max_partitions_per_request}")
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
                continue
            if not quota.record(n):  # after every other check, as Kafka's controller (validate_only too)
                res.error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
                continue
            res.num_partitions, res.replication_factor = n, 1
            # v5+: every config of the new topic, as DescribeConfigs would show it (KIP-525)
            res.configs = [cls.CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                                     config_source=e.source, is_sensitive=e.sensitive)
                           for e in self.configs.describe_overrides(configs)]
            if body.validate_only:
                # Kafka's controller answers the id it drew for the topic, then keeps nothing
                res.topic_id = Uuid(os.urandom(16))
                continue
            topic = self._create_topic(t.name, n, configs)
            res.topic_id = topic.topic_id
            if configs:
                self.configs.save()
        req.respond(cls(topics=results))

    def _check_new_topic(self, t: Any) -> tuple[int, dict[str, str]]:
        why = topic_name_error(t.name)
        if why is not None:
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
        if t.name in self.logs.topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  "Both numPartitions or replicationFactor and replicasAssignments "
                                  "were set. Both cannot be used at the same time.")
            for a in t.assignments:
                if list(a.broker_ids) != [self.config.node_id]:
                    raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"Unknown broker(s) in the assignment of partition "
                                      f"{a.partition_index}: {list(a.broker_ids)}")
            if sorted(a.partition_index for a in t.assignments) != list(range(len(t.assignments))):
                raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  "Partitions should be a consecutive 0-based integer sequence")
            n = len(t.assignments)
        else:
            n = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
            if n <= 0:
                raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                                  "Number of partitions must be larger than 0.")
            rf = 1 if t.replication_factor == -1 else t.replication_factor
            if rf <= 0:
                raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                  "Replication factor must be larger than 0.")
            if rf > 1:
                raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                  f"Unable to replicate the partition {rf} time(s): The target "
                                  "replication factor of 1 cannot be reached because only 1 "
                                  "broker(s) are registered.")
        configs = self.configs.validate_topic({c.name: c.value for c in t.configs})  # INVALID_CONFIG
        return n, configs

    # ------------------------------------------------------------------ DeleteTopics
    def _delete_topics(self, req: Request) -> None:
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.DELETE_TOPICS).cls
        quota = self.mutation_quota(req)
        if ver < 6:
            wanted = [(n, ZERO_UUID) for n in body.topic_names]
        else:
            wanted = [(t.name, t.topic_id) for t in body.topics]
        results = []
        for name, tid in wanted:
            topic = self.logs.topics.get(name) if name is not None else self.logs.topics_by_id.get(tid)
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
                # with the error's message, as Kafka's controller answers (v5+ carry it)
                results.append(cls.DeletableTopicResult(name=name, topic_id=tid, error_code=code,
                                                        error_message=error_message(code) if ver >= 5 else None))
                continue
            if not quota.record(len(topic.partitions)):
                results.append(cls.DeletableTopicResult(name=topic.name, topic_id=topic.topic_id,
                                                        error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED))
                continue
            self.logs.delete_topic(topic.name)
            self.cleaner.forget(topic.name)
            if topic.configs:
                self.configs.save()
            self.groups.on_partitions_deleted((topic.name, p) for p in range(len(topic.partitions)))
            for p in range(len(topic.partitions)):
                # waiting fetches of the partition answer now, with its error
                self.fetch_purgatory.check_and_complete((topic.name, p))
            results.append(cls.DeletableTopicResult(name=topic.name, topic_id=topic.topic_id, error_code=0))
        req.respond(cls(responses=results))

    # ------------------------------------------------------------------ ListOffsets
    def _list_offsets(self, req: Request) -> None:
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.LIST_OFFSETS).cls
        committed = ver >= 2 and body.isolation_level == 1
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                res = cls.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0,
                                                       timestamp=-1, offset=-1, leader_epoch=-1)
                parts.append(res)
                try:
                    lg = self.leader_log(t.name, p.partition_index,
                                         p.current_leader_epoch if ver >= 4 else -1)
                except BrokerError as exc:
                    res.error_code = exc.code
                    continue
                if ver >= 4:  # the field is v4+; the codec refuses a non-default value before
                    res.leader_epoch = lg.leader_epoch
                ts = p.timestamp
                if ts in (-2, -4):        # EARLIEST, EARLIEST_LOCAL
                    res.offset = lg.log_start_offset
                elif ts == -1:            # LATEST
                    res.offset = lg.last_stable_offset if committed else lg.high_watermark
                elif ts == -3:            # MAX_TIMESTAMP (KIP-734)
                    mts, moff = lg.max_timestamp
                    if moff >= lg.log_start_offset:
                        res.timestamp, res.offset = mts, moff
                elif ts in (-5, -6):      # LATEST_TIERED, EARLIEST_PENDING_UPLOAD: nothing is tiered
                    res.offset = -1
                elif ts >= 0:
                    found = lg.offset_for_timestamp(ts)
                    if found is not None:
                        res.offset, res.timestamp = found
                else:
                    res.error_code = ErrorCode.UNSUPPORTED_VERSION  # an unknown special timestamp
                if res.offset < 0:
                    res.leader_epoch = -1  # nothing found: no epoch either, as Kafka answers
            topics.append(cls.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        req.respond(cls(topics=topics))

    # ------------------------------------------------------------------ OffsetsForLeaderEpoch
    def _offsets_for_leader_epoch(self, req: Request) -> None:
        """Where each asked epoch ended in the leader's log (KIP-101's epoch cache): clients
        check their position after a leader change with it (KIP-320), followers find where
        their log diverged."""
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.OFFSET_FOR_LEADER_EPOCH).cls
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                res = cls.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
                parts.append(res)
                try:
                    lg = self.leader_log(t.topic, p.partition, p.current_leader_epoch if ver >= 2 else -1)
                except BrokerError as exc:
                    res.error_code = exc.code
                    continue
                epoch, end = self._end_offset_for_epoch(lg, p.leader_epoch)
                if ver >= 1:
                    res.leader_epoch = epoch
                res.end_offset = end
            topics.append(cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        req.respond(cls(throttle_time_ms=0, topics=topics))

    @staticmethod
    def _end_offset_for_epoch(lg: Log, epoch: int) -> tuple[int, int]:
        """Where ``epoch`` ended in the leader's log, as Kafka's epoch cache answers: the
        leader's own epoch is in Kafka's cache from the moment it leads (records or not), so
        it ends at the log end; an epoch above it is unknown, (-1, -1)."""
        if epoch > lg.leader_epoch:
            return -1, -1
        if epoch == lg.leader_epoch and lg.latest_epoch < epoch:
            return epoch, lg.log_end_offset
        return lg.end_offset_for_epoch(epoch)

    # ------------------------------------------------------------------ Produce
    def _produce(self, req: Request) -> None:
        """Kafka's ``appendRecordsWithTransactionVerification``: a transactional produce's
        partitions are verified with the transaction coordinator first (KIP-890; Produce v12
        from a TV2 producer adds them to the transaction), unless the partition already holds
        the producer's open transaction at this epoch; then the append."""
        body = req.body
        if body.transactional_id is None or not self.config.transaction_partition_verification_enable:
            return self._produce_append(req, {})
        by_producer: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for t in body.topic_data:
            for p in t.partition_data:
                lg = self.logs.get(t.name, p.index)
                if lg is None or p.records is None or not self.leads(t.name, p.index):
                    continue  # refused below without asking
                pid, epoch, transactional = _producer_of_batch(p.records)
                if not transactional:
                    continue
                if lg.has_ongoing_transaction(pid, epoch):
                    continue  # its transaction is open there already: nothing to verify
                by_producer.setdefault((pid, epoch), []).append((t.name, p.index))
        if not by_producer:
            return self._produce_append(req, {})
        add = req.version >= 12 and self.transaction_version() >= 2
        errors: dict[tuple[str, int], tuple[int, Optional[str]]] = {}
        waiting = [len(by_producer)]

        def verified(codes: dict[tuple[str, int], int]) -> None:
            for tp, code in codes.items():
                if code:
                    errors[tp] = _produce_verification_error(code, req.version)
            waiting[0] -= 1
            if waiting[0] == 0:
                self._produce_append(req, errors)

        for (pid, epoch), tps in by_producer.items():
            self.verify_txn_partitions(body.transactional_id, pid, epoch, tps, add, verified)
        return None

    def _produce_append(self, req: Request, refused: dict[tuple[str, int], tuple[int, Optional[str]]]) -> None:
        """Append what the request carries; ``refused`` partitions failed verification."""
        body = req.body
        cls = response_codec(ApiKey.PRODUCE).cls
        acks = body.acks
        now = self.wall_ms()
        topics = []
        appended: list[Hashable] = []
        waits: dict[tuple[str, int], int] = {}
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                res = cls.PartitionProduceResponse(index=p.index, error_code=0, base_offset=-1,
                                                   log_append_time_ms=-1, log_start_offset=-1)
                parts.append(res)
                if acks not in (0, 1, -1):
                    res.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                    continue
                if not t.name and req.version >= 13:
                    res.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    continue
                try:
                    lg = self.leader_log(t.name, p.index)
                except BrokerError as exc:
                    res.error_code = exc.code
                    continue
                if p.records is None:
                    res.error_code = ErrorCode.INVALID_RECORD
                    continue
                if (t.name, p.index) in refused:
                    res.error_code, message_ = refused[(t.name, p.index)]
                    if req.version >= 8:
                        res.error_message = message_
                    continue
                st = self.configs.settings(self.logs.topics[t.name])
                try:
                    self.check_produce(lg, acks, st.min_insync_replicas)
                    maybe_roll_by_time(lg, now, st.segment_ms, st.segment_jitter_ms,
                                       None if lg.config.message_timestamp_type == "LogAppendTime"
                                       else incoming_max_timestamp(p.records))
                    info = lg.append_as_leader(p.records, now)
                except BrokerError as exc:
                    # as Kafka's ReplicaManager: only a record validation failure carries its
                    # message; a batch too large or corrupt answers no log start offset
                    res.error_code = exc.code
                    if exc.code in _PRODUCE_ERRORS_WITH_MESSAGE:
                        res.error_message = exc.message
                        if req.version >= 8:
                            res.record_errors = [cls.BatchIndexAndErrorMessage(
                                batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors]
                    if exc.code not in _PRODUCE_ERRORS_WITHOUT_LOG_START:
                        res.log_start_offset = lg.log_start_offset
                    continue
                res.base_offset, res.log_append_time_ms = info.base_offset, info.log_append_time
                res.log_start_offset = info.log_start_offset
                if not info.duplicate:
                    appended.append((t.name, p.index))
                # a duplicate waits too: its first append may not be replicated yet
                required = self.produce_appended(lg, info.last_offset)
                if acks == -1 and required is not None:
                    waits[(t.name, p.index)] = required
            topics.append(cls.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts))
        if acks == 0:
            if req.patch is not None or any(p.error_code for t in topics for p in t.partition_responses):
                _close_for_acks0(req)  # partitions refused by the authorizer, or an append failed
            else:
                req.respond_nothing()
        else:
            self.answer_produce(req, cls(responses=topics), waits)
        for key in appended:
            self.fetch_purgatory.check_and_complete(key)

    # ------------------------------------------------------------------ Fetch
    def _fetch(self, req: Request) -> None:
        body, ver = req.body, req.version
        names = {t.topic_id: t.name for t in self.logs.topics.values()} if ver >= 13 else {}
        fetch_data, to_forget = request_fetch_data(body, ver, names)
        is_follower = request_replica_id(body, ver) >= 0
        ctx = self.sessions.new_context(ver, request_metadata(body), is_follower, fetch_data,
                                        to_forget, names, self.clock.now_ms())
        if isinstance(ctx, SessionErrorContext):
            req.respond(build_fetch_response(ctx.update_and_generate_response_data({}), ver))
            return
        parts = list(ctx.partitions())
        op = DelayedFetch(self, req, ctx, parts, body.min_bytes, body.max_wait_ms)
        if body.max_wait_ms <= 0 or not parts or body.min_bytes <= 0:
            op.force_complete()
            return
        keys = [(tip.topic, tip.partition) for tip, _ in parts if tip.topic is not None]
        self.fetch_purgatory.try_complete_else_watch(op, keys)

    def _answer_fetch(self, req: Request, ctx: Any, parts: list[tuple[TopicIdPartition, Any]]) -> None:
        body, ver = req.body, req.version
        cls = response_codec(ApiKey.FETCH).cls
        committed = ver >= 4 and body.isolation_level == 1
        budget = min(body.max_bytes if ver >= 3 else _INT32_MAX, self.config.fetch_max_bytes)
        quota = self.quotas.fetch
        who: Optional[tuple[str, str]] = None
        if req.throttle is not None and request_replica_id(body, ver) < 0:
            who = self.quota_identity(req)
            in_window = quota.max_value_in_window(*who)
            if in_window is None:
                who = None  # no consumer byte rate for this client
            else:
                budget = min(budget, int(in_window))  # Kafka's cap of a consumer's answer
        first = True
        # records go out from their files (sendfile) on a plaintext connection; a client with
        # quotas keeps the copying path (its answer's size is counted, maybe thrown away)
        zero_copy = req.throttle is None and _sends_files(req.channel)
        regions = False
        updates: dict[TopicIdPartition, Any] = {}
        # records start empty, not null, as Kafka answers (MemoryRecords.EMPTY): librdkafka
        # refuses a null record set at v12+ ("invalid MessageSetSize -1") and fetches again at once
        for tip, data in parts:
            pd = cls.PartitionData(partition_index=tip.partition, error_code=0, high_watermark=-1,
                                   last_stable_offset=-1, log_start_offset=-1,
                                   aborted_transactions=[] if committed else None,
                                   preferred_read_replica=-1, records=b"")
            updates[tip] = pd
            try:
                lg = self.fetch_log(tip, data)
            except BrokerError as exc:
                pd.error_code = exc.code
                # KafkaApis answers an unknown partition itself (FetchResponse.partitionResponse):
                # an empty list; the errors of ReplicaManager's read leave it null
                pd.aborted_transactions = [] if ver >= 4 and exc.code in _FETCH_ERRORS_BEFORE_READ else None
                continue
            pd.high_watermark, pd.log_start_offset = lg.high_watermark, lg.log_start_offset
            pd.last_stable_offset = lso = lg.last_stable_offset
            try:
                upto = lso if committed else pd.high_watermark
                size = min(max(data.max_bytes, 0), budget)
                if zero_copy:
                    records = lg.read_region(data.fetch_offset, size, first, upto, MIN_FILE_REGION)
                    regions = regions or isinstance(records, FileRegion)
                else:
                    records = lg.read(data.fetch_offset, size, first, upto)
            except BrokerError as exc:
                # Kafka's ReplicaManager answers a partition whose read failed (OFFSET_OUT_OF_RANGE,
                # ...) without offsets and with a null list of aborted transactions
                pd.error_code = exc.code
                pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
                pd.aborted_transactions = None
                continue
            pd.records = records
            if committed and records:
                pd.aborted_transactions = [cls.AbortedTransaction(producer_id=pid, first_offset=off)
                                           for pid, off in lg.aborted_between(data.fetch_offset, lso)]
            if records:
                first = False
                budget = max(0, budget - len(records))
        answer = ctx.update_and_generate_response_data(updates)
        resp = build_fetch_response(answer, ver)
        if who is not None:
            # Kafka counts the answer's size; a client over its rate gets an empty answer (its
            # bytes taken back) and the throttle time
            size = len(response_codec(ApiKey.FETCH).encode(resp, ver))
            now = self.clock.now_ms()
            throttle = quota.record(*who, size, now)
            if throttle > 0:
                quota.unrecord(*who, size, now)
                req.fetch_throttle_ms = throttle
                resp = build_fetch_response(ctx.get_throttled_response(throttle), ver)
        req.respond(resp, file_regions=regions)

    # ------------------------------------------------------------------ lifecycle
    def _checkpoint_high_watermarks(self, schedule_only: bool = False) -> None:
        if not schedule_only:
            self.logs.write_high_watermarks()
        self._hw_task = CallbackTask(max(1, self.config.replica_high_watermark_checkpoint_interval_ms),
                                     self._checkpoint_high_watermarks)
        self.timer.add(self._hw_task)

    def close(self, clean: bool = True) -> None:
        """Stop: waiting operations are dropped unanswered, logs closed (checkpoints and the
        clean-shutdown marker with ``clean``)."""
        self.closed = True
        if self._hw_task is not None:
            self._hw_task.cancel()
        if self._token_task is not None:
            self._token_task.cancel()
        self.fetch_purgatory.shutdown()
        self.retention.shutdown()
        self.cleaner.shutdown()
        self.groups.shutdown()
        self.share_groups.shutdown()
        self.shares.shutdown()
        self.txns.shutdown()
        self.logs.close(clean)
        if self.metadata is not None:
            self.metadata.close(clean)

    def connection_closed(self, channel: Channel) -> None:
        """A client connection ended: its share sessions end with it (their records released)."""
        self.shares.connection_closed(channel)

@functools.lru_cache(maxsize=1024)  # asked for every request: a pure function of its arguments
def removed_in_kafka_4(api_key: int, version: int) -> bool:
    """Whether a request version exists only in Kafka releases before 4.0 (KIP-896 removed it,
    or its whole API went with ZooKeeper)."""
    try:
        release = request_codec(api_key).release(version)
    except (KeyError, ValueError):
        return False  # an API or version no release has: answered UNSUPPORTED_VERSION
    return int(release.split(".")[0]) < 4


def api_versions_refusal(body: Any, version: int, cluster_id: Optional[str], node_id: int) -> int:
    """The error an ApiVersions request is answered with before anything else (0: none), as
    Kafka 4.4 checks it: v3+ a client software name and version of Kafka's pattern; v5+ the
    cluster id and node id together or not at all, and a client that meant another cluster
    or node is told to bootstrap again."""
    if version >= 3 and not (_SOFTWARE_NAME_VERSION.fullmatch(body.client_software_name)
                             and _SOFTWARE_NAME_VERSION.fullmatch(body.client_software_version)):
        return ErrorCode.INVALID_REQUEST
    if version >= 5:
        if (body.cluster_id is None) != (body.node_id == -1):
            return ErrorCode.INVALID_REQUEST
        if body.cluster_id is not None and (body.cluster_id != cluster_id or body.node_id != node_id):
            return ErrorCode.REBOOTSTRAP_REQUIRED
    return ErrorCode.NONE


def metadata_request_topics(body: Any, version: int) -> tuple[bool, list[str], list[Uuid]]:
    """What a Metadata request asks for, read as Kafka's ``handleTopicMetadataRequest`` does:
    (every topic, names, topic ids). A request naming any topic id asks by id only: the Java
    client sends its ids with empty names, which are not topics to look up. Before v12 a
    null name or a topic id is INVALID_REQUEST."""
    if body.topics is None or (version == 0 and not body.topics):
        return True, [], []
    if version < 12:
        for t in body.topics:
            if t.name is None or getattr(t, "topic_id", ZERO_UUID) != ZERO_UUID:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"Topic names must be given and topic ids are not supported in "
                                  f"requests for version {version}")
    ids = list(dict.fromkeys(t.topic_id for t in body.topics
                             if getattr(t, "topic_id", ZERO_UUID) not in (None, ZERO_UUID)))
    if ids:
        return False, [], ids
    return False, list(dict.fromkeys(t.name for t in body.topics if t.name is not None)), []


def error_response(api_key: int, version: int, body: Any, code: int) -> Optional[Any]:
    """The response to ``body`` carrying ``code`` wherever it has an error (the request's
    topics and partitions mirrored), for the APIs the broker implements; None for others."""
    if api_key in ADMIN_VERSIONS:
        return admin_error_response(api_key, version, body, code)
    cls = response_codec(api_key).cls
    if api_key == ApiKey.PRODUCE:
        return cls(responses=[cls.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            cls.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1,
                                         log_append_time_ms=-1, log_start_offset=-1)
            for p in t.partition_data]) for t in body.topic_data])
    if api_key == ApiKey.FETCH:
        return cls(error_code=code, session_id=0, responses=[cls.FetchableTopicResponse(
            topic=t.topic, topic_id=t.topic_id, partitions=[cls.PartitionData(
                partition_index=p.partition, error_code=code, high_watermark=-1,
                last_stable_offset=-1, log_start_offset=-1, records=b"") for p in t.partitions])
            for t in body.topics])
    if api_key == ApiKey.LIST_OFFSETS:
        return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[
            cls.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in body.topics])
    if api_key == ApiKey.METADATA:
        # every topic mirrored, a null name (a topic asked by id) as "" as Kafka's
        # MetadataRequest.getErrorResponse does: names are not nullable before v12
        return cls(topics=[cls.MetadataResponseTopic(error_code=code, name="" if t.name is None else t.name,
                                                     topic_id=getattr(t, "topic_id", ZERO_UUID))
                           for t in body.topics or ()])
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        return cls(topics=[cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=[cls.EpochEndOffset(
            error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1) for p in t.partitions])
            for t in body.topics])
    if api_key == ApiKey.CREATE_TOPICS:
        return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=code) for t in body.topics])
    if api_key == ApiKey.DELETE_TOPICS:
        if version < 6:
            return cls(responses=[cls.DeletableTopicResult(name=n, error_code=code) for n in body.topic_names])
        return cls(responses=[cls.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
                              for t in body.topics])
    if api_key == ApiKey.FIND_COORDINATOR and version >= 4:
        return cls(coordinators=[cls.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                                 for k in body.coordinator_keys])
    if api_key == ApiKey.INIT_PRODUCER_ID:
        return cls(error_code=code, producer_id=-1, producer_epoch=-1)
    if api_key in (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                   ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
                   ApiKey.READ_SHARE_GROUP_STATE_SUMMARY):
        # the persister's RPCs: every partition asked carries the error
        topic_cls = next(getattr(cls, n) for n in ("InitializeStateResult", "ReadStateResult", "WriteStateResult",
                                                   "DeleteStateResult", "ReadStateSummaryResult") if hasattr(cls, n))
        return cls(results=[topic_cls(topic_id=t.topic_id, partitions=[
            cls.PartitionResult(partition=p.partition, error_code=code) for p in t.partitions])
            for t in body.topics])
    if api_key == ApiKey.SHARE_GROUP_DESCRIBE:
        return cls(groups=[cls.DescribedGroup(group_id=g, error_code=code, group_state="", assignor_name="")
                           for g in body.group_ids])
    if api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
        return cls(groups=[cls.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                           for g in body.groups])
    if api_key == ApiKey.OFFSET_COMMIT:
        return cls(topics=[cls.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            cls.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in body.topics])
    if api_key == ApiKey.OFFSET_FETCH and version >= 8:
        return cls(groups=[cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                           for g in body.groups])
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return cls(groups=[cls.DescribedGroup(error_code=code, group_id=g, group_state="",
                                              protocol_type="", protocol_data="") for g in body.groups])
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version < 4:
        return cls(results_by_topic_v3_and_below=[cls.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=code) for p in t.partitions])
            for t in body.v3_and_below_topics])
    if api_key == ApiKey.TXN_OFFSET_COMMIT:
        return cls(topics=[cls.TxnOffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            cls.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in body.topics])
    if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        return cls(groups=[cls.DescribedGroup(error_code=code, group_id=g, group_state="", assignor_name="")
                           for g in body.group_ids])
    if api_key == ApiKey.DELETE_GROUPS:
        return cls(results=[cls.DeletableGroupResult(group_id=g, error_code=code)
                            for g in body.groups_names])
    if api_key == ApiKey.STREAMS_GROUP_DESCRIBE:
        return cls(groups=[cls.DescribedGroup(error_code=code, group_id=g, group_state="")
                           for g in body.group_ids])
    if api_key == ApiKey.DESCRIBE_CLIENT_QUOTAS:
        return describe_error(code, error_message(code))
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return alter_error(body, code, error_message(code))
    return None
