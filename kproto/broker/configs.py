"""Topic and broker configs as Kafka names, defaults, validates and describes them.

:data:`TOPIC_CONFIGS` is Kafka's ``LogConfig`` table (3.9 defaults): each topic config with
its type, default and broker synonyms (``retention.ms`` <- ``log.retention.ms``,
``log.retention.minutes``, ``log.retention.hours``). A topic's value comes, as in Kafka, from
the first level that sets it: the topic's own override (DYNAMIC_TOPIC_CONFIG), a dynamic
config of this broker (DYNAMIC_BROKER_CONFIG), the dynamic cluster default
(DYNAMIC_DEFAULT_BROKER_CONFIG), the broker's start-up settings (STATIC_BROKER_CONFIG),
Kafka's default (DEFAULT_CONFIG); DescribeConfigs lists the levels that are set as synonyms.

Persistence: a KRaft node keeps topic and dynamic broker configs as ConfigRecords in
``__cluster_metadata``. A broker of a kproto cluster is given them from its metadata image;
the single broker hands its :class:`ConfigManager` a :class:`ConfigStore` (its own metadata
log, :class:`~kproto.broker.cluster.combined.CombinedMetadata`) that they are read from at
start and written to on every change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Protocol

from kproto.broker.log import BrokerError, LogConfig, Topic
from kproto.error_codes import ErrorCode

if TYPE_CHECKING:
    from kproto.broker.log import LogManager

__all__ = ["BrokerConfig", "ConfigDef", "TOPIC_CONFIGS", "CLEANER_CONFIGS", "CONNECTION_CONFIGS",
           "LISTENER_CONNECTION_CONFIGS", "listener_config", "broker_config_def", "JAVA_DOUBLE_MAX", "ConfigEntry", "TopicSettings", "ConfigManager", "ConfigStore", "CONFIGS_FILE",
           "formatted_cluster_defaults", "ConfigLevels", "check_broker_configs",
           "DYNAMIC_TOPIC", "DYNAMIC_BROKER", "DYNAMIC_DEFAULT_BROKER", "STATIC_BROKER", "DEFAULT"]


@dataclass
class BrokerConfig:
    """Broker settings (Kafka's names in the comments)."""

    node_id: int = 1                      # node.id
    rack: Optional[str] = None            # broker.rack (replica placement spreads over racks)
    host: str = "127.0.0.1"               # advertised host
    port: int = 0                         # advertised port (set by the server once bound)
    cluster_id: Optional[str] = None      # new directories get a random one
    auto_create_topics: bool = True       # auto.create.topics.enable
    num_partitions: int = 1               # num.partitions
    log: LogConfig = field(default_factory=LogConfig)
    fetch_session_slots: int = 1000       # max.incremental.fetch.session.cache.slots
    fetch_max_bytes: int = 55 * 1024 * 1024  # fetch.max.bytes (broker cap on a response)
    offsets_topic_num_partitions: int = 50          # offsets.topic.num.partitions
    group_initial_rebalance_delay_ms: int = 3000    # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000        # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1800000     # group.max.session.timeout.ms
    group_consumer_session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    group_consumer_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    group_consumer_assignors: str = "uniform,range"  # group.consumer.assignors (first: default)
    group_consumer_assignment_interval_ms: int = 1000  # group.consumer.assignment.interval.ms (KIP-1263)
    # KIP-932 share groups (kproto.broker.coordinators.share_group, kproto.broker.share_partition)
    group_share_session_timeout_ms: int = 45000     # group.share.session.timeout.ms
    group_share_heartbeat_interval_ms: int = 5000   # group.share.heartbeat.interval.ms
    group_share_assignment_interval_ms: int = 1000  # assignments batched as consumer groups' (KIP-1263)
    group_share_record_lock_duration_ms: int = 30000  # group.share.record.lock.duration.ms
    group_share_delivery_count_limit: int = 5       # group.share.delivery.count.limit
    group_share_partition_max_record_locks: int = 2000  # group.share.partition.max.record.locks
    share_auto_offset_reset: str = "latest"         # share.auto.offset.reset (the group config's default)
    share_coordinator_state_topic_num_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    share_coordinator_snapshot_update_records_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    offset_metadata_max_bytes: int = 4096           # offset.metadata.max.bytes
    offsets_commit_timeout_ms: int = 5000           # offsets.commit.timeout.ms
    transaction_state_num_partitions: int = 50      # transaction.state.log.num.partitions
    transaction_max_timeout_ms: int = 900000        # transaction.max.timeout.ms
    transaction_partition_verification_enable: bool = True  # transaction.partition.verification.enable
    # the transaction.version a new broker (or cluster) is formatted with, as Kafka's storage
    # tool's --feature: 2 is KIP-890 part 2 (EndTxn v5's epoch bump, partitions added by
    # Produce v12 and TxnOffsetCommit v5+), 0 or 1 transactions as before it
    transaction_version: int = 2
    # broker-level defaults of topic configs (see kproto.broker.configs for the others)
    log_retention_ms: int = 604800000               # log.retention.ms (log.retention.hours=168)
    log_retention_bytes: int = -1                   # log.retention.bytes
    log_roll_ms: int = 604800000                    # log.roll.ms (log.roll.hours=168)
    log_cleanup_policy: str = "delete"              # log.cleanup.policy
    min_insync_replicas: int = 1                    # min.insync.replicas
    log_retention_check_interval_ms: int = 300000   # log.retention.check.interval.ms
    # the log cleaner (kproto.broker.cleaner)
    log_cleaner_enable: bool = True                 # log.cleaner.enable
    log_cleaner_backoff_ms: int = 15000             # log.cleaner.backoff.ms
    log_cleaner_dedupe_buffer_size: int = 134217728  # log.cleaner.dedupe.buffer.size
    log_cleaner_io_buffer_size: int = 524288        # log.cleaner.io.buffer.size
    log_cleaner_io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    log_cleaner_threads: int = 1                    # log.cleaner.threads
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308  # log.cleaner.io.max.bytes.per.second
    replica_high_watermark_checkpoint_interval_ms: int = 5000  # replica.high.watermark.checkpoint.interval.ms
    # limits of the socket layer (kproto.broker.server): each connection has one request in
    # flight (Kafka mutes it); the queue caps hold across connections the requests read (or
    # being read) and not yet handled: a connection whose next frame does not fit waits
    queued_max_requests: int = 500                  # queued.max.requests
    queued_max_request_bytes: int = -1              # queued.max.request.bytes
    socket_request_max_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    # partitions one CreateTopics/CreatePartitions may add (KRaft's controller refuses an
    # operation of more than 10000 records, QuorumController.MAX_RECORDS_PER_USER_OP)
    max_partitions_per_request: int = 10000
    # client quotas (kproto.broker.quotas): the samples a rate is measured over
    quota_window_num: int = 11                      # quota.window.num
    quota_window_size_seconds: int = 1              # quota.window.size.seconds
    # controller_mutation_rate's token bucket holds rate x num x size (KIP-599)
    controller_quota_window_num: int = 11           # controller.quota.window.num
    controller_quota_window_size_seconds: int = 1   # controller.quota.window.size.seconds
    # connections (Kafka's ConnectionQuotas): at most this many open per client address (the
    # overrides: "address:count,..."), this many in all, accepted at most this many a second
    max_connections_per_ip: int = 2**31 - 1         # max.connections.per.ip
    max_connections_per_ip_overrides: str = ""      # max.connections.per.ip.overrides
    max_connections: int = 2**31 - 1                # max.connections
    max_connection_creation_rate: int = 2**31 - 1   # max.connection.creation.rate
    # security (kproto.broker.security.auth, kproto.broker.security.acl): SASL on the listener when mechanisms
    # are enabled (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), users name -> password (PLAIN's JAAS
    # user_<name> options; the SCRAM credentials are salted from them), and the authorizer
    sasl_enabled_mechanisms: tuple[str, ...] = ()   # sasl.enabled.mechanisms (empty: no SASL)
    sasl_users: dict[str, str] = field(default_factory=dict)
    scram_iterations: int = 4096                    # of the credentials made from sasl_users
    authorizer: bool = False                        # authorizer.class.name=StandardAuthorizer
    super_users: tuple[str, ...] = ()               # super.users (User:admin, ...)
    allow_everyone_if_no_acl_found: bool = False    # allow.everyone.if.no.acl.found
    # TLS listeners (kproto.broker.security.tls): whether a client certificate is asked for
    # (required, requested, none) and how its subject becomes the principal's name
    ssl_client_auth: str = "none"                   # ssl.client.auth
    ssl_principal_mapping_rules: str = "DEFAULT"    # ssl.principal.mapping.rules
    # OAUTHBEARER (kproto.broker.security.oauth): Kafka's unsecured validator (alg none) unless
    # a JWKS file is given, then signed tokens checked with its keys (RS256, ES256, ...)
    oauthbearer_jwks_file: Optional[str] = None     # sasl.oauthbearer.jwks.endpoint.url=file:...
    oauthbearer_sub_claim_name: str = "sub"         # unsecuredValidatorPrincipalClaimName / sasl.oauthbearer.sub.claim.name
    oauthbearer_scope_claim_name: str = "scope"     # unsecuredValidatorScopeClaimName / sasl.oauthbearer.scope.claim.name
    oauthbearer_required_scope: tuple[str, ...] = ()  # unsecuredValidatorRequiredScope
    oauthbearer_clock_skew_ms: Optional[int] = None  # None: 0 unsecured, 30 s with a JWKS (Kafka's defaults)
    oauthbearer_expected_audience: tuple[str, ...] = ()  # sasl.oauthbearer.expected.audience
    oauthbearer_expected_issuer: Optional[str] = None  # sasl.oauthbearer.expected.issuer
    # with a JWKS, Kafka refuses to start without an expected audience and issuer unless these say so
    oauthbearer_allow_unverified_audience: bool = False  # sasl.oauthbearer.allow.unverified.audience
    oauthbearer_allow_unverified_issuer: bool = False    # sasl.oauthbearer.allow.unverified.issuer
    connections_max_reauth_ms: int = 0              # connections.max.reauth.ms (0: sessions last)
    # a cluster broker's own listener for the other brokers (inter.broker.listener.name) and
    # its security protocol (listener.security.protocol.map's entry for it); None: the
    # brokers share the clients' listener
    inter_broker_listener_name: Optional[str] = None
    inter_broker_security_protocol: str = "PLAINTEXT"
    inter_broker_port: int = 0                      # 0: a free port
    # delegation tokens (kproto.broker.security.tokens): on only with a secret key
    delegation_token_secret_key: Optional[str] = None     # delegation.token.secret.key
    delegation_token_max_lifetime_ms: int = 7 * 24 * 3600 * 1000  # delegation.token.max.lifetime.ms
    delegation_token_expiry_time_ms: int = 24 * 3600 * 1000       # delegation.token.expiry.time.ms
    delegation_token_expiry_check_interval_ms: int = 3600 * 1000  # delegation.token.expiry.check.interval.ms


#: where older kproto versions kept the configs (migrated into the metadata log once)
CONFIGS_FILE = "kproto-configs.json"

# DescribeConfigs' ConfigSource values
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 1, 2, 3, 4, 5
# DescribeConfigs' ConfigType values
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9

_LONG_MAX = str(2**63 - 1)
_TYPE_NAMES = {BOOLEAN: "BOOLEAN", STRING: "STRING", INT: "INT", LONG: "LONG", DOUBLE: "DOUBLE",
               LIST: "LIST"}


@dataclass(frozen=True)
class ConfigDef:
    """One topic config: ``synonyms`` are (broker config name, multiplier to the topic
    config's unit), most specific first; ``broker_default`` is the Kafka default of the last
    synonym when it differs in unit (``log.retention.hours=168``)."""

    name: str
    type: int
    default: Optional[str]
    synonyms: tuple[tuple[str, int], ...] = ()
    broker_default: Optional[str] = None
    min: Optional[float] = None
    max: Optional[float] = None
    choices: tuple[str, ...] = ()
    doc: str = ""

    def check(self, value: Optional[str]) -> str:
        """``value`` normalised, or :class:`BrokerError` INVALID_CONFIG as Kafka's
        ``ConfigDef`` validators word it."""
        if value is None:
            raise BrokerError(ErrorCode.INVALID_CONFIG,
                              f"Null value not supported for topic configs: {self.name}")
        v = value.strip()
        kind = _TYPE_NAMES.get(self.type, "STRING")
        if self.type in (INT, LONG, SHORT):
            try:
                number: float = int(v)
            except ValueError:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for "
                                  f"configuration {self.name}: Not a number of type {kind}") from None
            bits = 63 if self.type == LONG else 31
            if not -(2**bits) <= number < 2**bits:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for "
                                  f"configuration {self.name}: Not a number of type {kind}")
        elif self.type == DOUBLE:
            try:
                number = float(v)
            except ValueError:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for "
                                  f"configuration {self.name}: Not a number of type DOUBLE") from None
        elif self.type == BOOLEAN:
            if v.lower() not in ("true", "false"):
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for "
                                  f"configuration {self.name}: Expected value to be either true or false")
            return v.lower()
        elif self.type == LIST:
            items = [s.strip() for s in v.split(",") if s.strip()]
            bad = [s for s in items if self.choices and s not in self.choices]
            if bad or (self.choices and not items):
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration "
                                  f"{self.name}: String must be one of: {', '.join(self.choices)}")
            return ",".join(items)
        else:
            if self.choices and v not in self.choices:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration "
                                  f"{self.name}: String must be one of: {', '.join(self.choices)}")
            return v
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            bound = (f"Value must be at least {_num(self.min)}" if self.max is None else
                     f"Value must be no more than {_num(self.max)}" if self.min is None else
                     f"Value must be in the range [{_num(self.min)}, {_num(self.max)}]")
            raise BrokerError(ErrorCode.INVALID_CONFIG,
                              f"Invalid value {value} for configuration {self.name}: {bound}")
        return v


def _reconfiguration_check(problem: Optional[str]) -> None:
    """A refused reconfiguration, as Kafka's broker words it (its ConfigException wrapped)."""
    if problem is not None:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "Invalid value org.apache.kafka.common.config."
                          f"ConfigException: {problem} for configuration Invalid dynamic configuration")


def _num(x: Optional[float]) -> str:
    return str(int(x)) if x is not None and x == int(x) else str(x)


_H, _M = 3_600_000, 60_000


def _defs() -> dict[str, ConfigDef]:
    d = [
        ConfigDef("cleanup.policy", LIST, "delete", (("log.cleanup.policy", 1),),
                  choices=("compact", "delete"), doc="delete: old segments are removed by retention; "
                  "compact: the log cleaner keeps the latest record of each key"),
        ConfigDef("compression.gzip.level", INT, "-1", (("compression.gzip.level", 1),), min=-1, max=9),
        ConfigDef("compression.lz4.level", INT, "9", (("compression.lz4.level", 1),), min=1, max=17),
        ConfigDef("compression.type", STRING, "producer", (("compression.type", 1),),
                  choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigDef("compression.zstd.level", INT, "3", (("compression.zstd.level", 1),), min=-131072, max=22),
        ConfigDef("delete.retention.ms", LONG, "86400000", (("log.cleaner.delete.retention.ms", 1),), min=0),
        ConfigDef("errors.deadletterqueue.group.enable", BOOLEAN, "false"),
        ConfigDef("file.delete.delay.ms", LONG, "60000", (("log.segment.delete.delay.ms", 1),), min=0),
        ConfigDef("flush.messages", LONG, _LONG_MAX, (("log.flush.interval.messages", 1),), min=1),
        # log.flush.interval.ms has no default of its own: it falls back to the scheduler's
        ConfigDef("flush.ms", LONG, _LONG_MAX, (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
                  min=0),
        # no broker config of that name: no synonyms
        ConfigDef("follower.replication.throttled.replicas", LIST, ""),
        ConfigDef("index.interval.bytes", INT, "4096", (("log.index.interval.bytes", 1),), min=0,
                  doc="bytes between entries of the offset index"),
        ConfigDef("leader.replication.throttled.replicas", LIST, ""),
        ConfigDef("local.retention.bytes", LONG, "-2", (("log.local.retention.bytes", 1),), min=-2),
        ConfigDef("local.retention.ms", LONG, "-2", (("log.local.retention.ms", 1),), min=-2),
        ConfigDef("max.compaction.lag.ms", LONG, _LONG_MAX, (("log.cleaner.max.compaction.lag.ms", 1),), min=1),
        ConfigDef("max.decompressed.message.bytes", INT, "2147483639", (("max.decompressed.message.bytes", 1),),
                  min=0),
        ConfigDef("max.message.bytes", INT, "1048588", (("message.max.bytes", 1),), min=0,
                  doc="the largest record batch size allowed"),
        ConfigDef("message.timestamp.after.max.ms", LONG, "3600000",  # Kafka 4.0+: one hour
                  (("log.message.timestamp.after.max.ms", 1),), min=0),
        ConfigDef("message.timestamp.before.max.ms", LONG, _LONG_MAX,
                  (("log.message.timestamp.before.max.ms", 1),), min=0),
        ConfigDef("message.timestamp.type", STRING, "CreateTime", (("log.message.timestamp.type", 1),),
                  choices=("CreateTime", "LogAppendTime"),
                  doc="CreateTime keeps the producer's timestamps, LogAppendTime stamps the broker's"),
        ConfigDef("min.cleanable.dirty.ratio", DOUBLE, "0.5", (("log.cleaner.min.cleanable.ratio", 1),),
                  min=0, max=1),
        ConfigDef("min.compaction.lag.ms", LONG, "0", (("log.cleaner.min.compaction.lag.ms", 1),), min=0),
        ConfigDef("min.insync.replicas", INT, "1", (("min.insync.replicas", 1),), min=1,
                  doc="acks=all produce fails with NOT_ENOUGH_REPLICAS below this many in-sync replicas"),
        ConfigDef("preallocate", BOOLEAN, "false", (("log.preallocate", 1),)),
        # tiered storage (not implemented by this broker): the configs and their defaults
        ConfigDef("remote.copy.lag.bytes", LONG, "-1", (("log.remote.copy.lag.bytes", 1),)),
        ConfigDef("remote.copy.lag.ms", LONG, "0", (("log.remote.copy.lag.ms", 1),)),
        ConfigDef("remote.log.copy.disable", BOOLEAN, "false"),
        ConfigDef("remote.log.delete.on.disable", BOOLEAN, "false"),
        ConfigDef("remote.storage.enable", BOOLEAN, "false"),
        ConfigDef("retention.bytes", LONG, "-1", (("log.retention.bytes", 1),),
                  doc="segments are deleted, oldest first, while the partition is larger (-1: no limit)"),
        ConfigDef("retention.ms", LONG, "604800000",
                  (("log.retention.ms", 1), ("log.retention.minutes", _M), ("log.retention.hours", _H)),
                  broker_default="168", min=-1,
                  doc="segments whose largest timestamp is older are deleted (-1: no limit)"),
        ConfigDef("segment.bytes", INT, "1073741824", (("log.segment.bytes", 1),), min=14,
                  doc="a segment rolls when it would grow past this size"),
        ConfigDef("segment.index.bytes", INT, "10485760", (("log.index.size.max.bytes", 1),), min=4),
        ConfigDef("segment.jitter.ms", LONG, "0", (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _H)),
                  broker_default="0", min=0),
        ConfigDef("segment.ms", LONG, "604800000", (("log.roll.ms", 1), ("log.roll.hours", _H)),
                  broker_default="168", min=1,
                  doc="a segment rolls when its first batch is older than this"),
        ConfigDef("unclean.leader.election.enable", BOOLEAN, "false",
                  (("unclean.leader.election.enable", 1),)),
    ]
    return {c.name: c for c in d}


#: Kafka's topic configs by name.
TOPIC_CONFIGS: dict[str, ConfigDef] = _defs()
#: Kafka's ``Double.MAX_VALUE`` as its configs print it (log.cleaner.io.max.bytes.per.second's default)
JAVA_DOUBLE_MAX = "1.7976931348623157E308"
#: The log cleaner's broker configs that Kafka's ``LogCleaner`` reconfigures at run time
#: (``log.cleaner.min.cleanable.ratio`` is a topic config's synonym); each is its own synonym.
CLEANER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (
    ConfigDef("log.cleaner.threads", INT, "1", (("log.cleaner.threads", 1),), min=0),
    ConfigDef("log.cleaner.io.max.bytes.per.second", DOUBLE, JAVA_DOUBLE_MAX,
              (("log.cleaner.io.max.bytes.per.second", 1),)),
    ConfigDef("log.cleaner.dedupe.buffer.size", LONG, "134217728", (("log.cleaner.dedupe.buffer.size", 1),)),
    ConfigDef("log.cleaner.io.buffer.size", INT, "524288", (("log.cleaner.io.buffer.size", 1),), min=0),
    ConfigDef("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", (("log.cleaner.io.buffer.load.factor", 1),)),
    ConfigDef("log.cleaner.backoff.ms", LONG, "15000", (("log.cleaner.backoff.ms", 1),), min=0),
)}
_INT_MAX = str(2**31 - 1)
#: The connection limits Kafka's ConnectionQuotas takes at run time; each is its own synonym.
CONNECTION_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in (
    ConfigDef("max.connections.per.ip", INT, _INT_MAX, (("max.connections.per.ip", 1),), min=0),
    ConfigDef("max.connections.per.ip.overrides", STRING, "", (("max.connections.per.ip.overrides", 1),)),
    ConfigDef("max.connections", INT, _INT_MAX, (("max.connections", 1),), min=0),
    ConfigDef("max.connection.creation.rate", INT, _INT_MAX, (("max.connection.creation.rate", 1),), min=0),
)}
#: broker config name -> (config, multiplier to its unit): the broker configs that can change
#: at run time: the log defaults (synonyms of topic configs), the log cleaner's, the
#: connection limits
BROKER_SYNONYMS: dict[str, tuple[ConfigDef, int]] = {
    **{s: (c, m) for c in TOPIC_CONFIGS.values() for s, m in c.synonyms},
    **{name: (c, 1) for name, c in CLEANER_CONFIGS.items()},
    **{name: (c, 1) for name, c in CONNECTION_CONFIGS.items()}}
#: the connection limits a listener may have of its own (``listener.name.<listener>.<limit>``;
#: unset, the broker-wide one applies, as Kafka's listener-prefixed configs)
LISTENER_CONNECTION_CONFIGS = ("max.connections", "max.connection.creation.rate")
_LISTENER_PREFIX = "listener.name."


def listener_config(listener: str, key: str) -> str:
    """The name of ``listener``'s own ``key`` (``listener.name.plaintext.max.connections``)."""
    return f"{_LISTENER_PREFIX}{listener.lower()}.{key}"


def _listener_base(name: str) -> Optional[str]:
    """The broker-wide limit a listener-prefixed config overrides, or None."""
    if not name.startswith(_LISTENER_PREFIX):
        return None
    listener, _, key = name[len(_LISTENER_PREFIX):].partition(".")
    return key if listener and key in LISTENER_CONNECTION_CONFIGS else None


def broker_config_def(name: str) -> Optional[tuple[ConfigDef, int]]:
    """Dynamic broker config ``name`` (one of :data:`BROKER_SYNONYMS` or a listener's connection
    limit) and its multiplier to its unit; None: not one that changes at run time."""
    got = BROKER_SYNONYMS.get(name)
    base = _listener_base(name) if got is None else None
    if base is not None:
        d = CONNECTION_CONFIGS[base]
        return ConfigDef(name, d.type, None, ((name, 1),), min=d.min), 1
    return got


@dataclass(frozen=True)
class TopicSettings:
    """The effective values the broker acts on, cached per topic."""

    retention_ms: int
    retention_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    min_insync_replicas: int
    deletes: bool  # cleanup.policy includes delete
    compacts: bool = False  # cleanup.policy includes compact


@dataclass
class ConfigEntry:
    """One described config, independent of the response version."""

    name: str
    value: Optional[str]
    source: int
    read_only: bool = False
    sensitive: bool = False
    synonyms: tuple[tuple[str, Optional[str], int], ...] = ()
    type: int = STRING
    doc: Optional[str] = None


def _static_broker_values(cfg: BrokerConfig) -> dict[str, str]:
    """The broker's start-up settings that Kafka would show as STATIC_BROKER_CONFIG: those
    that differ from Kafka's defaults."""
    lg = cfg.log
    values = {
        "log.segment.bytes": lg.segment_bytes, "log.index.interval.bytes": lg.index_interval_bytes,
        "log.index.size.max.bytes": lg.segment_index_bytes,
        "log.message.timestamp.type": lg.message_timestamp_type,
        "log.message.timestamp.before.max.ms": lg.timestamp_before_max_ms,
        "log.message.timestamp.after.max.ms": lg.timestamp_after_max_ms,
        "message.max.bytes": lg.max_message_bytes,
        "log.retention.ms": cfg.log_retention_ms, "log.retention.bytes": cfg.log_retention_bytes,
        "log.roll.ms": cfg.log_roll_ms, "log.cleanup.policy": cfg.log_cleanup_policy,
        "min.insync.replicas": cfg.min_insync_replicas,
        "log.cleaner.threads": cfg.log_cleaner_threads,
        "log.cleaner.io.max.bytes.per.second": _java_double(cfg.log_cleaner_io_max_bytes_per_second),
        "log.cleaner.dedupe.buffer.size": cfg.log_cleaner_dedupe_buffer_size,
        "log.cleaner.io.buffer.size": cfg.log_cleaner_io_buffer_size,
        "log.cleaner.io.buffer.load.factor": cfg.log_cleaner_io_buffer_load_factor,
        "log.cleaner.backoff.ms": cfg.log_cleaner_backoff_ms,
        "max.connections.per.ip": cfg.max_connections_per_ip,
        "max.connections.per.ip.overrides": cfg.max_connections_per_ip_overrides,
        "max.connections": cfg.max_connections,
        "max.connection.creation.rate": cfg.max_connection_creation_rate,
    }
    # every name here is a synonym in the topic config's own unit
    return {name: str(v) for name, v in values.items() if str(v) != BROKER_SYNONYMS[name][0].default}


def _java_double(v: float) -> str:
    """A double as Java prints the largest one (Python's ``repr`` otherwise)."""
    return JAVA_DOUBLE_MAX if v >= 1.7976931348623157e308 else repr(v)


def formatted_cluster_defaults(min_insync_replicas: int) -> dict[str, str]:
    """The cluster-wide dynamic broker defaults a newly formatted Kafka 4.x cluster starts
    with: ``min.insync.replicas`` (the configured one), which its storage tool writes with
    the bootstrap metadata."""
    return {"min.insync.replicas": str(min_insync_replicas)}


class ConfigLevels:
    """The levels a topic's config is set at on one broker, as DescribeConfigs shows them
    (sans-I/O): ``broker_dynamic`` "" (the cluster default) and ``node`` (this broker) ->
    dynamic broker configs, ``static`` the start-up settings that differ from Kafka's
    defaults. A cluster's controller describes a new topic's configs with one too."""

    def __init__(self, node: str, broker_dynamic: Mapping[str, Mapping[str, str]],
                 static: Mapping[str, str]) -> None:
        self.node = node
        self.broker_dynamic: dict[str, dict[str, str]] = {k: dict(v) for k, v in broker_dynamic.items()}
        self.broker_dynamic.setdefault("", {})
        self.static = dict(static)

    def _broker_levels(self, broker_name: str) -> list[tuple[Optional[str], int]]:
        """(value, source) of a broker config at each level that sets it, most specific first."""
        out: list[tuple[Optional[str], int]] = []
        node = self.broker_dynamic.get(self.node, {}) if self.node else {}  # "": no broker of its own
        if broker_name in node:
            out.append((node[broker_name], DYNAMIC_BROKER))
        if broker_name in self.broker_dynamic[""]:
            out.append((self.broker_dynamic[""][broker_name], DYNAMIC_DEFAULT_BROKER))
        if broker_name in self.static:
            out.append((self.static[broker_name], STATIC_BROKER))
        return out

    def _running(self, key: str) -> str:
        levels = self._broker_levels(key)
        if levels:
            return str(levels[0][0])
        base = _listener_base(key)
        if base is not None:
            return self._running(base)
        return str(self._broker_default(BROKER_SYNONYMS[key][0], key))

    def check_reconfiguration(self, name: str, configs: Mapping[str, str]) -> None:
        """Kafka's checks of a change that this broker would run with: broker ``name`` ("" =
        the cluster default) given dynamic ``configs``; INVALID_REQUEST as Kafka words it.
        ``log.cleaner.threads`` may change to at least half and at most double its current
        value (``LogCleaner.validateReconfiguration``); ``max.connections`` and
        ``max.connection.creation.rate`` must stay positive, ``max.connections.per.ip`` may be 0
        only with overrides, which must parse (Kafka's ConnectionQuotas and KafkaConfig)."""
        if name not in ("", self.node):
            return
        after = ConfigLevels(self.node, {**self.broker_dynamic, name: dict(configs)}, self.static)
        old, new = int(self._running("log.cleaner.threads")), int(after._running("log.cleaner.threads"))
        if new != old:  # Kafka reconfigures (and checks) only what changes
            if new == 0:  # Kafka's cleaner config divides by the thread count before its checks
                raise BrokerError(ErrorCode.INVALID_REQUEST, "/ by zero")
            _reconfiguration_check(
                "Log cleaner threads should be at least 1" if new < 1 else
                f"Log cleaner threads cannot be reduced to less than half the current value {old}"
                if new < old // 2 else
                f"Log cleaner threads cannot be increased to more than double the current value {old}"
                if new > old * 2 else None)
        limits = [(key, key) for key in LISTENER_CONNECTION_CONFIGS] + [
            (name, base) for name in configs for base in [_listener_base(name)] if base is not None]
        for key, base in limits:
            value = after._running(key)
            if value != self._running(key) and int(value) <= 0:
                _reconfiguration_check(f"Invalid {base} {value}")
        overrides = after._running("max.connections.per.ip.overrides")
        for item in [i.strip() for i in overrides.split(",")] if overrides.strip() else []:
            host, sep, count = item.rpartition(":")
            if not sep:  # Kafka's parser takes the text before the last ':' (Java's substring)
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Error parsing configuration property "
                                  f"'max.connections.per.ip.overrides': begin 0, end -1, length {len(item)}")
            if not count.strip().lstrip("+-").isdigit():
                raise BrokerError(ErrorCode.INVALID_REQUEST, f'For input string: "{count.strip()}"')
        if int(after._running("max.connections.per.ip")) == 0 and not overrides.strip():
            raise BrokerError(ErrorCode.INVALID_REQUEST, "requirement failed: max.connections.per.ip can "
                              "be set to zero only if max.connections.per.ip.overrides property is set.")

    def _synonyms(self, d: ConfigDef, main: Optional[str] = None) -> list[tuple[str, Optional[str], int]]:
        """``d``'s broker synonyms as DescribeConfigs lists them (Kafka's ``ConfigHelper.
        configSynonyms``): by level (dynamic broker, dynamic default, static, Kafka's
        default), each level in synonym order, the defaults being those of the synonyms that
        have one (the last); then everything before the first entry named ``main`` (default:
        the main synonym) is dropped, so ``retention.ms`` shows no ``log.retention.hours=168``
        (only the hours have a default)."""
        if not d.synonyms:
            return []
        out = [(s, v, src) for level in (DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER)
               for s, _ in d.synonyms for v, src in self._broker_levels(s) if src == level]
        default = self._broker_default(d, d.synonyms[-1][0])
        if default is not None:
            out.append((d.synonyms[-1][0], default, DEFAULT))
        main = d.synonyms[0][0] if main is None else main
        while out and out[0][0] != main:
            out.pop(0)
        return out

    @staticmethod
    def _broker_default(d: ConfigDef, name: str) -> Optional[str]:
        """Kafka's default of broker config ``name``, a synonym of ``d`` (of a group of
        synonyms only the last has one)."""
        if not d.synonyms or d.synonyms[-1][0] != name:
            return None
        return d.broker_default if d.broker_default is not None else d.default

    def broker_value(self, d: ConfigDef) -> tuple[Optional[str], int]:
        """The value a topic without an override gets, in the topic config's unit: the most
        specific synonym set at any level (``log.retention.ms`` before ``.minutes`` before
        ``.hours``), else Kafka's default."""
        for s, m in d.synonyms:
            for v, src in self._broker_levels(s):
                if v is not None:
                    return (str(int(v) * m) if m != 1 else v), src
        return d.default, DEFAULT

    def describe_overrides(self, overrides: Mapping[str, str],
                           keys: Optional[Iterable[str]] = None) -> list[ConfigEntry]:
        """The configs of a topic with these overrides (also one not created: a validate-only
        CreateTopics lists them as a creation would)."""
        wanted = None if keys is None else set(keys)
        out = []
        for name, d in sorted(TOPIC_CONFIGS.items()):
            if wanted is not None and name not in wanted:
                continue
            syn = self._synonyms(d)
            value: Optional[str]
            if name in overrides:
                value, source = overrides[name], DYNAMIC_TOPIC
                syn.insert(0, (name, value, DYNAMIC_TOPIC))
            else:
                # the source is the first synonym's, as Kafka's ConfigHelper sets it (DEFAULT
                # when none is left: log.retention.hours set alone is a default there)
                value = self.broker_value(d)[0]
                source = syn[0][2] if syn else DEFAULT
            out.append(ConfigEntry(name, value, source, False, False, tuple(syn), d.type, d.doc or None))
        return out


def check_broker_configs(configs: Mapping[str, Optional[str]]) -> dict[str, str]:
    """Dynamic broker configs checked and normalised; INVALID_CONFIG for one that cannot be
    set dynamically or a bad value."""
    out = {}
    defs = {n: broker_config_def(n) for n in configs}
    fixed = sorted(n for n, d in defs.items() if d is None)
    if fixed:
        raise BrokerError(ErrorCode.INVALID_CONFIG,
                          f"Cannot update these configs dynamically: {', '.join(fixed)}")
    for name, value in configs.items():
        found = defs[name]
        assert found is not None
        d = found[0]
        if value is None:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"Null value not supported for {name}")
        out[name] = ConfigDef(name, d.type, None, min=d.min, max=d.max, choices=d.choices).check(value)
    return out


class ConfigStore(Protocol):
    """Where the configs set at run time are kept: dynamic broker configs by broker name (""
    is the cluster-wide default) and topic overrides by topic name."""

    def stored_configs(self) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """(broker configs, topic configs) as stored."""
        ...

    def store_configs(self, broker: Mapping[str, Mapping[str, str]],
                      topics: Mapping[str, Mapping[str, str]]) -> None:
        """Keep exactly these (what is stored and not given here is removed)."""
        ...


class ConfigManager(ConfigLevels):
    """Effective configs of topics and this broker, and their changes, kept in ``store``
    (None: they are given from elsewhere, as a cluster broker's metadata image)."""

    def __init__(self, config: BrokerConfig, logs: LogManager, store: Optional[ConfigStore] = None) -> None:
        super().__init__(str(config.node_id), {"": {}, str(config.node_id): {}}, _static_broker_values(config))
        self.config, self.logs = config, logs
        self.store = store
        self.static_log = logs.defaults
        #: stored topic configs that are no longer valid (skipped at start)
        self.load_problems: list[str] = []
        self._settings: dict[str, tuple[Any, TopicSettings]] = {}
        #: called after the dynamic broker configs changed (the log cleaner reconfigures)
        self.on_broker_change: Optional[Callable[[], None]] = None
        self._load()

    # ------------------------------------------------------------------ store
    def _load(self) -> None:
        if self.store is None:
            self._apply_broker()
            return
        broker, topics = self.store.stored_configs()
        for key in self.broker_dynamic:
            self.broker_dynamic[key] = {k: v for k, v in broker.get(key, {}).items()
                                        if broker_config_def(k) is not None}
        self._apply_broker()
        for name, configs in topics.items():
            topic = self.logs.topics.get(name)
            if topic is None:
                continue
            try:
                self.apply_topic(topic, configs)
            except BrokerError as exc:
                self.load_problems.append(f"{name}: {exc.message}")

    def save(self) -> None:
        """Write the current configs to the store."""
        if self.store is None:
            return
        self.store.store_configs(
            {k: v for k, v in self.broker_dynamic.items() if v},
            {t.name: t.configs for t in self.logs.topics.values() if t.configs})

    # ------------------------------------------------------------------ values
    def topic_value(self, topic: Topic, name: str) -> Optional[str]:
        if name in topic.configs:
            return topic.configs[name]
        return self.broker_value(TOPIC_CONFIGS[name])[0]

    def settings(self, topic: Topic) -> TopicSettings:
        """``topic``'s retention, roll and replica settings (cached until a config changes)."""
        got = self._settings.get(topic.name)
        if got is not None and got[0] == topic.topic_id:
            return got[1]
        v: Callable[[str], int] = lambda n: int(self.topic_value(topic, n) or 0)  # noqa: E731
        policy = self.topic_value(topic, "cleanup.policy") or ""
        st = TopicSettings(v("retention.ms"), v("retention.bytes"), v("segment.ms"),
                           v("segment.jitter.ms"), v("min.insync.replicas"),
                           "delete" in policy.split(","), "compact" in policy.split(","))
        self._settings[topic.name] = (topic.topic_id, st)
        return st

    def validate_topic(self, configs: Mapping[str, Optional[str]]) -> dict[str, str]:
        """Topic configs checked and normalised; INVALID_CONFIG for an unknown name or a bad
        value, as Kafka's ``LogConfig.validate``."""
        out = {}
        for name, value in configs.items():
            d = TOPIC_CONFIGS.get(name)
            if d is None:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            out[name] = d.check(value)
        self.static_log.with_overrides(out)  # the log's own checks (segment.bytes minimum, ...)
        return out

    # ------------------------------------------------------------------ changes
    def _log_defaults(self) -> LogConfig:
        """The broker-level LogConfig: start-up settings with the dynamic log defaults."""
        dyn = {}
        for name, d in TOPIC_CONFIGS.items():
            v, src = self.broker_value(d)
            if src in (DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER) and v is not None:
                dyn[name] = v
        return self.static_log.with_overrides(dyn)

    def _apply_broker(self) -> None:
        self._settings.clear()
        self.logs.defaults = self._log_defaults()
        for topic in self.logs.topics.values():
            self.apply_topic(topic, topic.configs)
        if self.on_broker_change is not None:
            self.on_broker_change()

    def broker_config(self, name: str) -> str:
        """The value of broker config ``name`` (one of :data:`BROKER_SYNONYMS`, or a listener's
        connection limit) this broker runs with: its most specific level, else Kafka's
        default (a listener's limit: the broker-wide one)."""
        levels = self._broker_levels(name)
        base = _listener_base(name)
        if not levels and base is not None:
            return self.broker_config(base)
        value = levels[0][0] if levels else self._broker_default(BROKER_SYNONYMS[name][0], name)
        assert value is not None, name
        return value

    def apply_topic(self, topic: Topic, configs: Mapping[str, str]) -> None:
        """Give ``topic`` these overrides (validated) and its logs the resulting settings."""
        valid = self.validate_topic(configs)
        cfg = self.logs.defaults.with_overrides(valid)
        self._settings.pop(topic.name, None)
        topic.configs = valid
        for lg in topic.logs:
            lg.config = cfg
            # the storage log rolls and indexes by these (the active segment's index
            # interval stays as it was when the segment was opened)
            lg.plog.segment_bytes = cfg.segment_bytes
            lg.plog.index_interval = cfg.index_interval_bytes
            lg.plog.segment_index_bytes = cfg.segment_index_bytes

    def set_topic(self, topic: Topic, configs: Mapping[str, str]) -> None:
        self.apply_topic(topic, configs)
        self.save()

    def set_broker(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of broker ``name`` ("" = the cluster default)."""
        self.apply_broker(name, configs)
        self.save()

    def apply_broker(self, name: str, configs: Mapping[str, str]) -> None:
        """Give broker ``name`` ("" = the cluster default) these dynamic configs (those that
        can be set dynamically) and the topics the resulting defaults, without saving (as they
        are elsewhere: a cluster's metadata image)."""
        self.broker_dynamic[name] = {k: v for k, v in configs.items() if broker_config_def(k) is not None}
        self._apply_broker()

    def validate_broker(self, configs: Mapping[str, Optional[str]]) -> dict[str, str]:
        return check_broker_configs(configs)

    # ------------------------------------------------------------------ describe
    def describe_topic(self, topic: Topic, keys: Optional[Iterable[str]] = None) -> list[ConfigEntry]:
        """``topic``'s configs as DescribeConfigs lists them (``keys``: only these)."""
        return self.describe_overrides(topic.configs, keys)

    def broker_entries(self, name: str) -> list[ConfigEntry]:
        """Broker ``name``'s configs ("" = the cluster defaults: only the dynamic ones, as Kafka
        describes the default resource)."""
        out = []
        value: Optional[str]
        if name == "":
            for key, value in sorted(self.broker_dynamic[""].items()):
                found = broker_config_def(key)
                assert found is not None  # (only dynamic configs are kept)
                d = found[0]
                out.append(ConfigEntry(key, value, DYNAMIC_DEFAULT_BROKER, False, False,
                                       ((key, value, DYNAMIC_DEFAULT_BROKER),), d.type))
            return out
        for key, (d, mult) in sorted(BROKER_SYNONYMS.items()):
            levels = self._broker_levels(key)
            syn = tuple(self._synonyms(d, key))
            value = levels[0][0] if levels else self._broker_default(d, key)
            source = syn[0][2] if syn else DEFAULT
            out.append(ConfigEntry(key, value, source, False, False, syn, d.type))
        # a listener's own connection limits, where set: then the broker-wide one's synonyms
        own = {k for level in ("", self.node) for k in self.broker_dynamic.get(level, {}) if _listener_base(k)}
        for key in sorted(own):
            base = _listener_base(key)
            assert base is not None
            levels = self._broker_levels(key)
            syn = tuple((key, v, src) for v, src in levels) + tuple(self._synonyms(CONNECTION_CONFIGS[base], base))
            # (Kafka marks them read-only, though they change at run time)
            out.append(ConfigEntry(key, levels[0][0], levels[0][1], True, False, syn, INT))
        c = self.config
        fixed: dict[str, tuple[Any, int]] = {
            "node.id": (c.node_id, INT), "broker.id": (c.node_id, INT),
            "process.roles": ("broker,controller", LIST), "log.dirs": (self.logs.data_dir, STRING),
            "advertised.listeners": (f"PLAINTEXT://{c.host}:{c.port}", STRING),
            "num.partitions": (c.num_partitions, INT),
            "auto.create.topics.enable": (str(c.auto_create_topics).lower(), BOOLEAN),
            "default.replication.factor": (1, INT),
            "offsets.topic.num.partitions": (c.offsets_topic_num_partitions, INT),
            "offsets.topic.replication.factor": (1, SHORT),
            "transaction.state.log.num.partitions": (c.transaction_state_num_partitions, INT),
            "transaction.max.timeout.ms": (c.transaction_max_timeout_ms, INT),
            "transaction.partition.verification.enable":
                (str(c.transaction_partition_verification_enable).lower(), BOOLEAN),
            "group.initial.rebalance.delay.ms": (c.group_initial_rebalance_delay_ms, INT),
            "group.min.session.timeout.ms": (c.group_min_session_timeout_ms, INT),
            "group.max.session.timeout.ms": (c.group_max_session_timeout_ms, INT),
            "offset.metadata.max.bytes": (c.offset_metadata_max_bytes, INT),
            "offsets.commit.timeout.ms": (c.offsets_commit_timeout_ms, INT),
            "fetch.max.bytes": (c.fetch_max_bytes, INT),
            "max.incremental.fetch.session.cache.slots": (c.fetch_session_slots, INT),
            "log.retention.check.interval.ms": (c.log_retention_check_interval_ms, LONG),
            "replica.high.watermark.checkpoint.interval.ms":
                (c.replica_high_watermark_checkpoint_interval_ms, LONG),
            "queued.max.requests": (c.queued_max_requests, INT),
            "queued.max.request.bytes": (c.queued_max_request_bytes, LONG),
            "socket.request.max.bytes": (c.socket_request_max_bytes, INT),
        }
        for key, (value, typ) in sorted(fixed.items()):
            # start-up settings: read-only, as Kafka marks configs it cannot update dynamically
            out.append(ConfigEntry(key, str(value), STATIC_BROKER, True, False,
                                   ((key, str(value), STATIC_BROKER),), typ))
        return out
