"""Cluster administration over a :class:`~kproto.client.cluster.Cluster`: topics, partitions,
configs, offsets, records, consumer groups, ACLs and delegation tokens, routed as Kafka's AdminClient routes them.

Each call sends the requests it needs (to the controller, a partition leader, a group
coordinator or every broker), checks every error code in the answers and raises
:class:`~kproto.client.protocol.BrokerError` naming the first failing item::

    async with Cluster("127.0.0.1:9092") as cluster:
        admin = Admin(cluster)
        await admin.create_topics({"events": 6}, configs={"events": {"retention.ms": "3600000"}})
        print(await admin.list_offsets([("events", 0)], "latest"))
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from kproto.client.cluster import (EARLIEST, LATEST, MAX_TIMESTAMP, ZERO_UUID, BrokerInfo, Cluster,
                                   PartitionInfo, TopicInfo)
from kproto.client.connection import Connection
from kproto.client.protocol import BrokerError, SaslConfig, raise_for_error
from kproto.client.consumer_protocol import decode_assignment
from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.errors import DecodeError
from kproto.topic_partition import TopicPartitionKey
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = ["Admin", "ConfigEntry", "GroupListing", "MemberDescription", "GroupDescription",
           "ClusterDescription", "FeatureMetadata", "DelegationToken", "PartitionReassignment", "ELECTION_TYPES", "UPGRADE_TYPES", "OffsetSpec", "Acl", "AclFilter", "RESOURCE_TYPES", "CONFIG_SOURCES",
           "ACL_RESOURCE_TYPES", "ACL_PATTERN_TYPES", "ACL_OPERATIONS", "ACL_PERMISSIONS"]


#: ConfigResource types by name (``("topic", "events")``, ``("broker", "1")``)
RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "client_metrics": 16, "group": 32}
#: DescribeConfigs ``config_source`` values (Kafka's ConfigEntry.ConfigSource)
CONFIG_SOURCES = {-1: "unknown", 1: "dynamic_topic", 2: "dynamic_broker", 3: "dynamic_default_broker",
                  4: "static_broker", 5: "default", 6: "dynamic_broker_logger", 7: "client_metrics",
                  8: "group"}
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
#: ElectLeaders election types by name
ELECTION_TYPES = {"preferred": 0, "unclean": 1}

#: ``"earliest"``, ``"latest"``, ``"max_timestamp"`` or a timestamp in ms
OffsetSpec = Union[str, int]
_SPECS = {"earliest": EARLIEST, "latest": LATEST, "max_timestamp": MAX_TIMESTAMP}
Resource = tuple[str, str]


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource; ``source`` is a :data:`CONFIG_SOURCES` value."""

    name: str
    value: Optional[str]
    source: int = -1
    read_only: bool = False
    sensitive: bool = False

    @property
    def source_name(self) -> str:
        return CONFIG_SOURCES.get(self.source, str(self.source))

    @property
    def is_default(self) -> bool:
        return self.source == 5


#: ShareGroupDescribe versions the admin client sends (v1: Kafka 4.1+'s share groups; v0 was
#: early access)
_SHARE_GROUP_DESCRIBE = range(1, 2)


@dataclass(frozen=True)
class GroupListing:
    """A group as ListGroups names it (``state`` from v4, ``type`` from v5 brokers)."""

    group_id: str
    protocol_type: str
    state: Optional[str] = None
    type: Optional[str] = None


@dataclass(frozen=True)
class MemberDescription:
    """A group member; ``assignment`` is decoded for consumer groups (None otherwise)."""

    member_id: str
    client_id: str
    client_host: str
    group_instance_id: Optional[str] = None
    assignment: Optional[list[TopicPartitionKey]] = None
    #: consumer-protocol groups (KIP-848, ConsumerGroupDescribe): the member's epoch, what it
    #: subscribes to (topics, or a regex), and the assignment the broker is moving it to
    member_epoch: Optional[int] = None
    subscribed_topics: Optional[list[str]] = None
    subscribed_topic_regex: Optional[str] = None
    target_assignment: Optional[list[TopicPartitionKey]] = None
    rack_id: Optional[str] = None


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups' view of a group: state, protocol and members."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription] = field(default_factory=list)
    #: ``classic`` (DescribeGroups), ``consumer`` (KIP-848, ConsumerGroupDescribe) or ``share``
    #: (KIP-932, ShareGroupDescribe); for the last two ``protocol`` is the server-side assignor
    #: and the epochs are the group's
    type: str = "classic"
    group_epoch: Optional[int] = None
    assignment_epoch: Optional[int] = None


@dataclass(frozen=True)
class ClusterDescription:
    """The cluster id, controller and brokers, as Metadata reports them."""

    cluster_id: Optional[str]
    controller_id: int
    brokers: list[BrokerInfo]


@dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment under way: the replicas now (old and new together), those being added
    and those being removed."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


@dataclass
class FeatureMetadata:
    """A broker's feature flags as ApiVersions v3+ reports them (Kafka's ``describeFeatures``):
    finalized levels (name -> level), their epoch (-1: none) and the supported ranges."""

    finalized: dict[str, int]
    finalized_epoch: int
    supported: dict[str, tuple[int, int]]


#: UpdateFeatures upgrade types by name (Kafka's FeatureUpdate.UpgradeType)
UPGRADE_TYPES = {"upgrade": 1, "safe_downgrade": 2, "unsafe_downgrade": 3}


#: ACL enums by name (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType)
ACL_RESOURCE_TYPES = {"any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional_id": 5,
                      "delegation_token": 6, "user": 7}
ACL_PATTERN_TYPES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
ACL_OPERATIONS = {"any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7,
                  "describe": 8, "cluster_action": 9, "describe_configs": 10, "alter_configs": 11,
                  "idempotent_write": 12, "create_tokens": 13, "describe_tokens": 14}
ACL_PERMISSIONS = {"any": 1, "deny": 2, "allow": 3}


@dataclass(frozen=True)
class Acl:
    """An ACL binding: ``principal`` (``User:alice``) from ``host`` may (``permission`` allow) or
    may not (deny) do ``operation`` on the resource(s) ``resource_name`` names (``pattern_type``
    literal, or prefixed for every name starting with it)."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "allow"
    host: str = "*"
    pattern_type: str = "literal"


@dataclass(frozen=True)
class AclFilter:
    """Which ACLs to describe or delete: a None name, principal or host, and ``any``, match any;
    ``pattern_type`` match finds the literal, wildcard and prefixed bindings that apply to
    ``resource_name``."""

    resource_type: str = "any"
    resource_name: Optional[str] = None
    principal: Optional[str] = None
    operation: str = "any"
    permission: str = "any"
    host: Optional[str] = None
    pattern_type: str = "any"


def _code(table: Mapping[str, int], name: str, what: str) -> int:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"{what} {name!r} is not one of {sorted(table)}") from None


def _name(table: Mapping[str, int], code: int) -> str:
    return next((k for k, v in table.items() if v == code), f"unknown({code})")


def _acl_from(r: Any, pattern: int, a: Any) -> Acl:
    return Acl(_name(ACL_RESOURCE_TYPES, r.resource_type), r.resource_name, a.principal,
               _name(ACL_OPERATIONS, a.operation), _name(ACL_PERMISSIONS, a.permission_type), a.host,
               _name(ACL_PATTERN_TYPES, pattern))


def _resource(res: Resource) -> tuple[int, str]:
    kind, name = res
    try:
        return RESOURCE_TYPES[kind], str(name)
    except KeyError:
        raise ValueError(f"resource type {kind!r} is not one of {sorted(RESOURCE_TYPES)}") from None


def _timestamp(spec: OffsetSpec) -> int:
    if isinstance(spec, str):
        try:
            return _SPECS[spec]
        except KeyError:
            raise ValueError(f"offset spec {spec!r} is not one of {sorted(_SPECS)} or a timestamp") from None
    if spec < 0:
        raise ValueError(f"timestamp {spec} is negative; use 'earliest', 'latest' or 'max_timestamp'")
    return int(spec)


def _by_topic(partitions: Iterable[TopicPartitionKey]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in partitions:
        out.setdefault(t, []).append(p)
    return out


@dataclass(frozen=True)
class DelegationToken:
    """A delegation token (KIP-48): principals as ``User:<name>``, times in ms since the
    epoch; ``token_id`` and ``hmac`` are what a client authenticates with (:meth:`sasl`)."""

    token_id: str
    hmac: bytes
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def sasl(self, mechanism: str = "SCRAM-SHA-512") -> SaslConfig:
        """The SCRAM credentials of this token (``tokenauth=true``)."""
        return SaslConfig.delegation_token(self.token_id, self.hmac, mechanism)


class Admin:
    """Administrative operations on the cluster behind ``cluster`` (which stays open).
    ``timeout_ms`` is the broker-side timeout of topic and record operations."""

    def __init__(self, cluster: Cluster, *, timeout_ms: int = 30000) -> None:
        self.cluster = cluster
        self.timeout_ms = timeout_ms

    async def _controller(self) -> Connection:
        """The controller when Metadata names a reachable one (ZooKeeper-era brokers need it;
        KRaft brokers forward), else any broker."""
        md = self.cluster.metadata
        if md.controller_id not in md.brokers:
            await self.cluster.refresh_metadata([])
        if md.controller_id in md.brokers:
            return await self.cluster.connection(md.controller_id)
        return await self.cluster.bootstrap_connection()

    async def _leaders(self, partitions: Iterable[TopicPartitionKey]) -> dict[int, dict[str, list[int]]]:
        """leader -> topic -> partitions, refreshing metadata for partitions without a known leader."""
        parts = list(partitions)
        md = self.cluster.metadata
        unknown = {t for t, p in parts if md.leader(t, p) is None}
        if unknown:
            await self.cluster.refresh_metadata(sorted(unknown))
        out: dict[int, dict[str, list[int]]] = {}
        for t, p in parts:
            leader = md.leader(t, p)
            if leader is None:
                topic = md.topics.get(t)
                raise_for_error(topic.error_code if topic and topic.error_code else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"{t}-{p}")
                raise BrokerError(ErrorCode.LEADER_NOT_AVAILABLE, f"{t}-{p}")
            out.setdefault(leader, {}).setdefault(t, []).append(p)
        return out

    # -- cluster and topics ----------------------------------------------------------------------
    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller id and brokers."""
        md = await self.cluster.refresh_metadata([])
        return ClusterDescription(md.cluster_id, md.controller_id,
                                  sorted(md.brokers.values(), key=lambda b: b.node_id))

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        """Names of every topic (internal ones such as ``__consumer_offsets`` with ``internal``)."""
        md = await self.cluster.refresh_metadata(None)
        return sorted(n for n, t in md.topics.items() if not t.error_code and (internal or not t.is_internal))

    async def describe_topics(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        """Partitions, leaders, replicas and ISRs of ``names`` (an unknown topic raises)."""
        names = list(names)
        md = await self.cluster.refresh_metadata(names)
        for n in names:
            t = md.topics.get(n)
            raise_for_error(t.error_code if t is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Metadata({n})")
        return {n: md.topics[n] for n in names}

    async def create_topics(self, topics: Mapping[str, int], replication_factor: int = 1, *,
                            configs: Optional[Mapping[str, Mapping[str, str]]] = None,
                            validate_only: bool = False, exist_ok: bool = False) -> None:
        """CreateTopics ``{name: partition count}``; ``configs``: name -> topic configs.
        ``exist_ok`` ignores TOPIC_ALREADY_EXISTS. Leaders appear shortly after: see
        :meth:`Cluster.wait_for_leaders`."""
        codec = _request_codec(ApiKey.CREATE_TOPICS)
        configs = configs or {}
        unknown = set(configs) - set(topics)
        if unknown:
            raise ValueError(f"configs for topics not being created: {sorted(unknown)}")
        req = codec.cls(timeout_ms=self.timeout_ms, validate_only=validate_only, topics=[
            codec.cls.CreatableTopic(name=n, num_partitions=p, replication_factor=replication_factor, configs=[
                codec.cls.CreatableTopicConfig(name=k, value=v) for k, v in configs.get(n, {}).items()])
            for n, p in topics.items()])
        conn = await self._controller()
        resp = await conn.request(req)
        for t in resp.topics:
            if exist_ok and t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
                continue
            raise_for_error(t.error_code, f"CreateTopics({t.name})", getattr(t, "error_message", None))

    async def create_partitions(self, totals: Mapping[str, int], *, validate_only: bool = False) -> None:
        """Grow each topic to ``{name: new total partition count}``."""
        codec = _request_codec(ApiKey.CREATE_PARTITIONS)
        req = codec.cls(timeout_ms=self.timeout_ms, validate_only=validate_only, topics=[
            codec.cls.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in totals.items()])
        resp = await (await self._controller()).request(req)
        for r in resp.results:
            raise_for_error(r.error_code, f"CreatePartitions({r.name})", r.error_message)

    async def delete_topics(self, names: Iterable[str], *, missing_ok: bool = False) -> None:
        """DeleteTopics; ``missing_ok`` ignores topics that do not exist."""
        codec = _request_codec(ApiKey.DELETE_TOPICS)
        names = list(names)
        conn = await self._controller()
        version = conn.version(ApiKey.DELETE_TOPICS)
        if version >= 6:
            req = codec.cls(timeout_ms=self.timeout_ms, topics=[codec.cls.DeleteTopicState(name=n) for n in names])
        else:
            req = codec.cls(timeout_ms=self.timeout_ms, topic_names=names)
        resp = await conn.request(req, version)
        for r in resp.responses:
            if missing_ok and r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            raise_for_error(r.error_code, f"DeleteTopics({r.name})", getattr(r, "error_message", None))

    async def describe_topic_partitions(self, names: Optional[Iterable[str]] = None, *,
                                        page_size: int = 2000) -> dict[str, TopicInfo]:
        """Partitions, leaders, replicas and ISRs of ``names`` (None: every topic) with
        DescribeTopicPartitions (KIP-966), ``page_size`` partitions per request, following the
        cursor until every partition is in; an unknown topic raises."""
        codec = _request_codec(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
        asked = [] if names is None else list(names)
        conn = await self.cluster.bootstrap_connection()
        out: dict[str, TopicInfo] = {}
        cursor = None
        while True:
            resp = await conn.request(codec.cls(topics=[codec.cls.TopicRequest(name=n) for n in asked],
                                                response_partition_limit=page_size, cursor=cursor))
            for t in resp.topics:
                raise_for_error(t.error_code, f"DescribeTopicPartitions({t.name})")
                info = out.setdefault(t.name, TopicInfo(t.name, t.topic_id, 0, {}, t.is_internal))
                for p in t.partitions:
                    info.partitions[p.partition_index] = PartitionInfo(
                        p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                        list(p.isr_nodes), p.error_code)
            nxt = resp.next_cursor
            if nxt is None:
                return out
            cursor = codec.cls.Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)

    # -- partition leadership and placement ------------------------------------------------------
    async def elect_leaders(self, partitions: Optional[Iterable[TopicPartitionKey]] = None, *,
                            election: str = "preferred") -> dict[TopicPartitionKey, Optional[BrokerError]]:
        """ElectLeaders of ``partitions`` (None: every partition; those that need no election
        are then left out): each partition's outcome, None when a leader was elected, else its
        error (ELECTION_NOT_NEEDED where the wanted leader leads already)."""
        if election not in ELECTION_TYPES:
            raise ValueError(f"election must be one of {sorted(ELECTION_TYPES)}, not {election!r}")
        codec = _request_codec(ApiKey.ELECT_LEADERS)
        conn = await self._controller()
        version = conn.version(ApiKey.ELECT_LEADERS)
        if election != "preferred" and version < 1:
            raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, "ElectLeaders v1 (an election type)")
        wanted = None if partitions is None else [
            codec.cls.TopicPartitions(topic=t, partitions=ps) for t, ps in _by_topic(partitions).items()]
        resp = await conn.request(codec.cls(election_type=ELECTION_TYPES[election], topic_partitions=wanted,
                                            timeout_ms=self.timeout_ms), version)
        if version >= 1:
            raise_for_error(resp.error_code, "ElectLeaders")
        return {(r.topic, p.partition_id): (BrokerError(p.error_code, f"ElectLeaders({r.topic}-{p.partition_id})",
                                                        p.error_message) if p.error_code else None)
                for r in resp.replica_election_results for p in r.partition_result}

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartitionKey, Optional[list[int]]]) -> None:
        """Move each partition to the replicas given, ``{(topic, partition): [broker ids]}``
        (None cancels the partition's reassignment under way); the brokers copy the data in
        the background (:meth:`list_partition_reassignments` shows what is still moving)."""
        codec = _request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
        topics: dict[str, list[Any]] = {}
        for (t, p), replicas in targets.items():
            topics.setdefault(t, []).append(codec.cls.ReassignablePartition(
                partition_index=p, replicas=None if replicas is None else list(replicas)))
        resp = await (await self._controller()).request(codec.cls(timeout_ms=self.timeout_ms, topics=[
            codec.cls.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()]))
        raise_for_error(resp.error_code, "AlterPartitionReassignments", resp.error_message)
        for rt in resp.responses:
            for rp in rt.partitions:
                raise_for_error(rp.error_code, f"AlterPartitionReassignments({rt.name}-{rp.partition_index})",
                                rp.error_message)

    async def list_partition_reassignments(self, partitions: Optional[Iterable[TopicPartitionKey]] = None
                                           ) -> dict[TopicPartitionKey, PartitionReassignment]:
        """The reassignments under way, of ``partitions`` (None: all of them)."""
        codec = _request_codec(ApiKey.LIST_PARTITION_REASSIGNMENTS)
        wanted = None if partitions is None else [
            codec.cls.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
            for t, ps in _by_topic(partitions).items()]
        resp = await (await self._controller()).request(codec.cls(timeout_ms=self.timeout_ms, topics=wanted))
        raise_for_error(resp.error_code, "ListPartitionReassignments", resp.error_message)
        return {(t.name, p.partition_index): PartitionReassignment(list(p.replicas), list(p.adding_replicas),
                                                                   list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    # -- features --------------------------------------------------------------------------------
    async def describe_features(self) -> FeatureMetadata:
        """The finalized and supported feature flags of a broker (ApiVersions v3+)."""
        conn = await self.cluster.bootstrap_connection()
        codec = _request_codec(ApiKey.API_VERSIONS)
        version = conn.version(ApiKey.API_VERSIONS, range(3, 1 << 15))
        resp = await conn.request(codec.cls(client_software_name="kproto", client_software_version="1"), version)
        raise_for_error(resp.error_code, "ApiVersions")
        return FeatureMetadata({f.name: f.max_version_level for f in resp.finalized_features},
                               resp.finalized_features_epoch,
                               {f.name: (f.min_version, f.max_version) for f in resp.supported_features})

    async def update_features(self, levels: Mapping[str, int], *, upgrade_type: str = "upgrade",
                              validate_only: bool = False) -> None:
        """UpdateFeatures: finalize each feature at ``levels[name]`` (0 takes it away);
        ``upgrade_type``: ``upgrade``, ``safe_downgrade`` or ``unsafe_downgrade`` (a lower level
        needs a downgrade). Kafka applies all of them or none."""
        codec = _request_codec(ApiKey.UPDATE_FEATURES)
        kind = UPGRADE_TYPES[upgrade_type]
        conn = await self._controller()
        version = conn.version(ApiKey.UPDATE_FEATURES)
        if version < 1 and (validate_only or kind != UPGRADE_TYPES["upgrade"]):
            raise ValueError("the broker's UpdateFeatures v0 has neither validate_only nor downgrades")
        req = codec.cls(timeout_ms=self.timeout_ms, validate_only=validate_only, feature_updates=[
            codec.cls.FeatureUpdateKey(feature=n, max_version_level=v, upgrade_type=kind)
            for n, v in levels.items()])
        resp = await conn.request(req, version)
        raise_for_error(resp.error_code, "UpdateFeatures", resp.error_message)
        for r in resp.results:
            raise_for_error(r.error_code, f"UpdateFeatures({r.feature})", r.error_message)

    # -- configs ---------------------------------------------------------------------------------
    async def _by_config_broker(self, resources: Iterable[Resource]
                                ) -> list[tuple[Connection, list[tuple[Resource, int, str]]]]:
        """Resources grouped per request: a broker's own configs go to that broker, the rest
        together to any broker (as Kafka's admin routes them)."""
        groups: dict[Optional[int], list[tuple[Resource, int, str]]] = {}
        for res in resources:
            type_id, name = _resource(res)
            node = int(name) if type_id in (4, 8) and name.isdigit() else None
            groups.setdefault(node, []).append((res, type_id, name))
        return [(await (self.cluster.bootstrap_connection() if node is None else self.cluster.connection(node)),
                 group) for node, group in groups.items()]

    async def describe_configs(self, resources: Iterable[Resource], *,
                               keys: Optional[Iterable[str]] = None) -> dict[Resource, dict[str, ConfigEntry]]:
        """Configs of ``("topic", name)`` / ``("broker", id)`` resources (only ``keys`` if given)."""
        codec = _request_codec(ApiKey.DESCRIBE_CONFIGS)
        # every config is asked for and ``keys`` picked here, as Kafka's admin does (some
        # brokers, tansu 0.6 among them, drop the connection on a key list)
        wanted = None if keys is None else set(keys)
        out: dict[Resource, dict[str, ConfigEntry]] = {}
        for conn, group in await self._by_config_broker(resources):
            version = conn.version(ApiKey.DESCRIBE_CONFIGS)
            resp = await conn.request(codec.cls(resources=[codec.cls.DescribeConfigsResource(
                resource_type=type_id, resource_name=name, configuration_keys=None)
                for _, type_id, name in group]), version)
            for (res, _, name), r in zip(group, resp.results):
                raise_for_error(r.error_code, f"DescribeConfigs({res[0]} {name})", r.error_message)
                out[res] = {c.name: ConfigEntry(
                    c.name, c.value, (5 if c.is_default else -1) if version == 0 else c.config_source,
                    c.read_only, c.is_sensitive) for c in r.configs if wanted is None or c.name in wanted}
        return out

    async def alter_configs(self, changes: Mapping[Resource, Mapping[str, Optional[str]]], *,
                            validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: ``{resource: {name: value}}`` sets, a None value removes the
        override (back to the default)."""
        codec = _request_codec(ApiKey.INCREMENTAL_ALTER_CONFIGS)
        for conn, group in await self._by_config_broker(changes):
            resp = await conn.request(codec.cls(validate_only=validate_only, resources=[
                codec.cls.AlterConfigsResource(resource_type=type_id, resource_name=name, configs=[
                    codec.cls.AlterableConfig(name=k, config_operation=_DELETE if v is None else _SET, value=v)
                    for k, v in changes[res].items()]) for res, type_id, name in group]))
            for (res, _, name), r in zip(group, resp.responses):
                raise_for_error(r.error_code, f"IncrementalAlterConfigs({res[0]} {name})", r.error_message)

    # -- offsets and records ---------------------------------------------------------------------
    async def list_offsets(self, partitions: Iterable[TopicPartitionKey], spec: OffsetSpec = "latest", *,
                           isolation: str = "read_uncommitted") -> dict[TopicPartitionKey, int]:
        """Offsets of ``partitions`` for ``spec``: ``"earliest"``, ``"latest"`` (the high watermark,
        or the last stable offset with ``isolation="read_committed"``), ``"max_timestamp"`` (the
        record with the highest timestamp) or a timestamp in ms (the first offset at or after it,
        -1 when there is none)."""
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation must be read_uncommitted or read_committed, not {isolation!r}")
        parts = list(partitions)
        await self._leaders(parts)
        return await self.cluster.list_offsets(parts, _timestamp(spec),
                                               isolation_level=int(isolation == "read_committed"))

    async def delete_records(self, before: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Delete the records below ``{(topic, partition): offset}`` (-1: the high watermark);
        returns each partition's new low watermark."""
        codec = _request_codec(ApiKey.DELETE_RECORDS)
        out: dict[TopicPartitionKey, int] = {}
        for leader, topics in (await self._leaders(before)).items():
            conn = await self.cluster.connection(leader)
            resp = await conn.request(codec.cls(timeout_ms=self.timeout_ms, topics=[
                codec.cls.DeleteRecordsTopic(name=t, partitions=[
                    codec.cls.DeleteRecordsPartition(partition_index=p, offset=before[(t, p)]) for p in ps])
                for t, ps in topics.items()]))
            for rt in resp.topics:
                for rp in rt.partitions:
                    raise_for_error(rp.error_code, f"DeleteRecords({rt.name}-{rp.partition_index})")
                    out[(rt.name, rp.partition_index)] = rp.low_watermark
        return out

    # -- ACLs ------------------------------------------------------------------------------------
    async def _acl_conn(self, api_key: int, literal_only: bool) -> tuple[Connection, int]:
        conn = await self.cluster.bootstrap_connection()
        # v0 knows literal names only: anything else needs v1+ (a clear NoCommonVersionError)
        return conn, conn.version(api_key, None if literal_only else range(1, 100))

    async def create_acls(self, acls: Iterable[Acl]) -> None:
        """CreateAcls for ``acls`` (the broker needs an authorizer)."""
        codec = _request_codec(ApiKey.CREATE_ACLS)
        acls = list(acls)
        creations = [codec.cls.AclCreation(
            resource_type=_code(ACL_RESOURCE_TYPES, a.resource_type, "resource type"),
            resource_name=a.resource_name,
            resource_pattern_type=_code(ACL_PATTERN_TYPES, a.pattern_type, "pattern type"),
            principal=a.principal, host=a.host, operation=_code(ACL_OPERATIONS, a.operation, "operation"),
            permission_type=_code(ACL_PERMISSIONS, a.permission, "permission")) for a in acls]
        conn, version = await self._acl_conn(ApiKey.CREATE_ACLS, all(a.pattern_type == "literal" for a in acls))
        resp = await conn.request(codec.cls(creations=creations), version)
        for a, r in zip(acls, resp.results):
            raise_for_error(r.error_code, f"CreateAcls({a.resource_type} {a.resource_name} {a.principal})",
                            r.error_message)

    async def describe_acls(self, match: AclFilter = AclFilter()) -> list[Acl]:
        """The ACLs ``match`` selects."""
        codec = _request_codec(ApiKey.DESCRIBE_ACLS)
        conn, version = await self._acl_conn(ApiKey.DESCRIBE_ACLS, match.pattern_type == "literal")
        resp = await conn.request(codec.cls(**_filter_fields(match)), version)
        raise_for_error(resp.error_code, "DescribeAcls", resp.error_message)
        return [_acl_from(r, getattr(r, "pattern_type", 3), a) for r in resp.resources for a in r.acls]

    async def delete_acls(self, filters: Iterable[AclFilter]) -> list[Acl]:
        """Delete the ACLs each filter selects; returns those deleted."""
        codec = _request_codec(ApiKey.DELETE_ACLS)
        filters = list(filters)
        conn, version = await self._acl_conn(ApiKey.DELETE_ACLS, all(f.pattern_type == "literal" for f in filters))
        resp = await conn.request(codec.cls(filters=[codec.cls.DeleteAclsFilter(**_filter_fields(f))
                                                     for f in filters]), version)
        deleted = []
        for r in resp.filter_results:
            raise_for_error(r.error_code, "DeleteAcls", r.error_message)
            for m in r.matching_acls:
                raise_for_error(m.error_code, f"DeleteAcls({m.resource_name} {m.principal})", m.error_message)
                deleted.append(_acl_from(m, getattr(m, "pattern_type", 3), m))
        return deleted

    # -- client quotas ---------------------------------------------------------------------------
    async def alter_client_quotas(self, entity: Mapping[str, Optional[str]], quotas: Mapping[str, Optional[float]],
                                  *, validate_only: bool = False) -> None:
        """Set (a value) or remove (None) ``quotas`` of one quota entity: ``{"user": "alice"}``,
        ``{"user": "alice", "client-id": None}`` (None: the default entity), ``{"ip": "10.0.0.1"}``;
        keys as Kafka's (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
        ``controller_mutation_rate``, ``connection_creation_rate``)."""
        codec = _request_codec(ApiKey.ALTER_CLIENT_QUOTAS)
        cls = codec.cls
        body = cls(validate_only=validate_only, entries=[cls.EntryData(
            entity=[cls.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[cls.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                 for k, v in quotas.items()])])
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(body)
        for e in resp.entries:
            raise_for_error(e.error_code, f"AlterClientQuotas({dict(entity)})", e.error_message)

    async def describe_client_quotas(self, match: Optional[Mapping[str, Optional[str]]] = None, *,
                                     any_of: Iterable[str] = (),
                                     strict: bool = False) -> dict[tuple[tuple[str, Optional[str]], ...], dict[str, float]]:
        """The quotas of the entities that ``match`` (entity type -> name, None: the default
        entity) and that have a name of each type in ``any_of``; ``strict``: only entities with
        no other types. Keys: the entities as sorted (type, name) pairs."""
        codec = _request_codec(ApiKey.DESCRIBE_CLIENT_QUOTAS)
        cls = codec.cls
        components = [cls.ComponentData(entity_type=t, match_type=0 if n is not None else 1, match=n)
                      for t, n in (match or {}).items()]
        components += [cls.ComponentData(entity_type=t, match_type=2, match=None) for t in any_of]
        conn = await self.cluster.bootstrap_connection()
        resp = await conn.request(cls(components=components, strict=strict))
        raise_for_error(resp.error_code, "DescribeClientQuotas", resp.error_message)
        return {tuple(sorted((d.entity_type, d.entity_name) for d in e.entity)): {v.key: v.value for v in e.values}
                for e in resp.entries or ()}

    # -- delegation tokens -----------------------------------------------------------------------
    async def create_delegation_token(self, *, renewers: Iterable[str] = (), max_lifetime_ms: int = -1,
                                      owner: Optional[str] = None) -> DelegationToken:
        """A new token of ``owner`` (default: the connection's principal; another takes
        CREATE_TOKENS on that user) that ``renewers`` (``User:<name>``) may renew too;
        ``max_lifetime_ms`` -1: the broker's maximum."""
        cls = _request_codec(ApiKey.CREATE_DELEGATION_TOKEN).cls
        body = cls(renewers=[cls.CreatableRenewers(principal_type=k, principal_name=n)
                             for k, n in (r.split(":", 1) for r in renewers)], max_lifetime_ms=max_lifetime_ms)
        if owner is not None:
            body.owner_principal_type, body.owner_principal_name = owner.split(":", 1)
        conn = await self.cluster.bootstrap_connection()
        if owner is not None and conn.version(ApiKey.CREATE_DELEGATION_TOKEN) < 3:
            raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, "CreateDelegationToken for another owner needs v3")
        resp = await conn.request(body)
        raise_for_error(resp.error_code, "CreateDelegationToken")
        requester = (f"{resp.token_requester_principal_type}:{resp.token_requester_principal_name}"
                     if resp.token_requester_principal_type else f"{resp.principal_type}:{resp.principal_name}")
        return DelegationToken(resp.token_id, bytes(resp.hmac), f"{resp.principal_type}:{resp.principal_name}",
                               requester, tuple(renewers), resp.issue_timestamp_ms, resp.expiry_timestamp_ms,
                               resp.max_timestamp_ms)

    async def renew_delegation_token(self, hmac: bytes, renew_period_ms: int = -1) -> int:
        """Renew the token of ``hmac`` for ``renew_period_ms`` (-1: the broker's renewal time);
        its new expiry."""
        cls = _request_codec(ApiKey.RENEW_DELEGATION_TOKEN).cls
        resp = await (await self.cluster.bootstrap_connection()).request(
            cls(hmac=hmac, renew_period_ms=renew_period_ms))
        raise_for_error(resp.error_code, "RenewDelegationToken")
        return int(resp.expiry_timestamp_ms)

    async def expire_delegation_token(self, hmac: bytes, expiry_time_period_ms: int = -1) -> int:
        """Make the token of ``hmac`` expire ``expiry_time_period_ms`` from now (negative: at
        once, the token is removed); its new expiry."""
        cls = _request_codec(ApiKey.EXPIRE_DELEGATION_TOKEN).cls
        resp = await (await self.cluster.bootstrap_connection()).request(
            cls(hmac=hmac, expiry_time_period_ms=expiry_time_period_ms))
        raise_for_error(resp.error_code, "ExpireDelegationToken")
        return int(resp.expiry_timestamp_ms)

    async def describe_delegation_tokens(self, owners: Optional[Iterable[str]] = None) -> list[DelegationToken]:
        """The tokens of ``owners`` (``User:<name>``; None: every owner) the principal may see."""
        cls = _request_codec(ApiKey.DESCRIBE_DELEGATION_TOKEN).cls
        body = cls(owners=None if owners is None else [
            cls.DescribeDelegationTokenOwner(principal_type=k, principal_name=n)
            for k, n in (o.split(":", 1) for o in owners)])
        resp = await (await self.cluster.bootstrap_connection()).request(body)
        raise_for_error(resp.error_code, "DescribeDelegationToken")
        out = []
        for t in resp.tokens:
            owner = f"{t.principal_type}:{t.principal_name}"
            requester = (f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                         if t.token_requester_principal_type else owner)
            out.append(DelegationToken(t.token_id, bytes(t.hmac), owner, requester,
                                       tuple(f"{r.principal_type}:{r.principal_name}" for r in t.renewers),
                                       t.issue_timestamp, t.expiry_timestamp, t.max_timestamp))
        return out

    # -- groups ----------------------------------------------------------------------------------
    async def list_groups(self) -> list[GroupListing]:
        """Every group of every broker (ListGroups goes to each one, as Kafka's admin does)."""
        codec = _request_codec(ApiKey.LIST_GROUPS)
        md = await self.cluster.refresh_metadata([])
        found: dict[str, GroupListing] = {}
        for node in sorted(md.brokers):
            conn = await self.cluster.connection(node)
            resp = await conn.request(codec.cls(states_filter=[], types_filter=[]))
            raise_for_error(resp.error_code, f"ListGroups(broker {node})")
            for g in resp.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None),
                                                 getattr(g, "group_type", None))
        return sorted(found.values(), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members of each group; consumer groups' member assignments decoded.

        Share groups (KIP-932, type ``share`` in ListGroups v5) are described by
        ShareGroupDescribe. Groups of the consumer protocol (KIP-848) are described by
        ConsumerGroupDescribe where the coordinator has it: those its ListGroups (v5+) lists with type ``consumer``, or, from
        a coordinator without ListGroups v5, any group it does not answer GROUP_ID_NOT_FOUND for
        (Kafka's answer for a classic group, as its admin reads it); the others by DescribeGroups."""
        codec = _request_codec(ApiKey.DESCRIBE_GROUPS)
        out = {}
        for gid in group_ids:
            found = await self._describe_share_group(gid)
            if found is None:
                found = await self._describe_consumer_group(gid)
            if found is not None:
                out[gid] = found
                continue
            resp = await self.cluster.coordinator_request(gid, codec.cls(groups=[gid]))
            g = resp.groups[0]
            raise_for_error(g.error_code, f"DescribeGroups({gid})", getattr(g, "error_message", None))
            out[gid] = GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, [
                MemberDescription(m.member_id, m.client_id, m.client_host, getattr(m, "group_instance_id", None),
                                  _member_assignment(g.protocol_type, m.member_assignment))
                for m in g.members])
        return out

    async def _listed_type(self, gid: str) -> Optional[str]:
        """The group's type as its coordinator's ListGroups v5 names it ('' for a group it does
        not list); None when the coordinator has no ListGroups v5."""
        conn = await self.cluster.coordinator(gid)
        if not conn.versions.supported(ApiKey.LIST_GROUPS, range(5, 100)):
            return None
        lg = _request_codec(ApiKey.LIST_GROUPS)
        listed = await self.cluster.coordinator_request(gid, lg.cls(states_filter=[], types_filter=[]))
        if listed.error_code != ErrorCode.NONE:
            return None
        return {g.group_id: getattr(g, "group_type", "") for g in listed.groups}.get(gid, "").lower()

    async def _describe_share_group(self, gid: str) -> Optional[GroupDescription]:
        conn = await self.cluster.coordinator(gid)
        if not conn.versions.supported(ApiKey.SHARE_GROUP_DESCRIBE, _SHARE_GROUP_DESCRIBE) or \
                await self._listed_type(gid) != "share":
            return None
        codec = _request_codec(ApiKey.SHARE_GROUP_DESCRIBE)
        resp = await self.cluster.coordinator_request(
            gid, codec.cls(group_ids=[gid]), version=conn.version(ApiKey.SHARE_GROUP_DESCRIBE, _SHARE_GROUP_DESCRIBE))
        g = resp.groups[0]
        raise_for_error(g.error_code, f"ShareGroupDescribe({gid})", g.error_message)
        names = self.cluster.metadata.topic_names()
        return GroupDescription(g.group_id, g.group_state, "share", g.assignor_name, [
            MemberDescription(m.member_id, m.client_id, m.client_host, None, sorted(
                (tp.topic_name or names.get(tp.topic_id, str(tp.topic_id)), p)
                for tp in m.assignment.topic_partitions for p in tp.partitions),
                member_epoch=m.member_epoch, subscribed_topics=list(m.subscribed_topic_names), rack_id=m.rack_id)
            for m in g.members], type="share", group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch)

    async def list_share_group_offsets(self, group_id: str) -> dict[TopicPartitionKey, tuple[int, Optional[int]]]:
        """A share group's start offset and lag per partition it has a state for
        (DescribeShareGroupOffsets; the lag is None before v1 or when the broker does not know it)."""
        codec = _request_codec(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
        conn = await self.cluster.coordinator(group_id)
        version = conn.version(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, range(0, 2))  # v1: the lag
        resp = await self.cluster.coordinator_request(group_id, codec.cls(groups=[
            codec.cls.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None)]), version=version)
        g = resp.groups[0]
        raise_for_error(g.error_code, f"DescribeShareGroupOffsets({group_id})", g.error_message)
        out: dict[TopicPartitionKey, tuple[int, Optional[int]]] = {}
        for t in g.topics:
            for p in t.partitions:
                raise_for_error(p.error_code, f"DescribeShareGroupOffsets({group_id}, {t.topic_name}-"
                                f"{p.partition_index})", p.error_message)
                lag = getattr(p, "lag", -1) if version >= 1 else -1
                out[(t.topic_name, p.partition_index)] = (p.start_offset, None if lag < 0 else lag)
        return out

    async def _describe_consumer_group(self, gid: str) -> Optional[GroupDescription]:
        conn = await self.cluster.coordinator(gid)
        if not conn.versions.supported(ApiKey.CONSUMER_GROUP_DESCRIBE):
            return None
        # ListGroups v5 names each group's type: ask ConsumerGroupDescribe only for a
        # consumer-protocol group (some brokers, e.g. tansu 0.6, describe any group with it,
        # a classic one as a member-less "consumer" group, where Kafka says GROUP_ID_NOT_FOUND)
        listed = await self._listed_type(gid)
        if listed is not None and listed != "consumer":
            return None
        codec = _request_codec(ApiKey.CONSUMER_GROUP_DESCRIBE)
        resp = await self.cluster.coordinator_request(gid, codec.cls(group_ids=[gid]))
        g = resp.groups[0] if resp.groups else None
        if g is None or g.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
            return None
        raise_for_error(g.error_code, f"ConsumerGroupDescribe({gid})", g.error_message)
        names = self.cluster.metadata.topic_names()

        def parts(a: Any) -> list[TopicPartitionKey]:
            return sorted((tp.topic_name or names.get(tp.topic_id, str(tp.topic_id)), p)
                          for tp in a.topic_partitions for p in tp.partitions)

        return GroupDescription(g.group_id, g.group_state, "consumer", g.assignor_name, [
            MemberDescription(m.member_id, m.client_id, m.client_host, m.instance_id, parts(m.assignment),
                              member_epoch=m.member_epoch, subscribed_topics=list(m.subscribed_topic_names),
                              subscribed_topic_regex=m.subscribed_topic_regex,
                              target_assignment=parts(m.target_assignment), rack_id=m.rack_id)
            for m in g.members], type="consumer", group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch)

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups (their committed offsets go with them). A group the broker did not
        delete raises :class:`BrokerError` with the broker's message about it (DeleteGroups v3+)."""
        codec = _request_codec(ApiKey.DELETE_GROUPS)
        for gid in group_ids:
            resp = await self.cluster.coordinator_request(gid, codec.cls(groups_names=[gid]))
            for r in resp.results:
                raise_for_error(r.error_code, f"DeleteGroups({r.group_id})", r.error_message)

    async def list_group_offsets(self, group_id: str, partitions: Optional[Iterable[TopicPartitionKey]] = None, *,
                                 require_stable: bool = False, member_id: Optional[str] = None,
                                 member_epoch: int = -1) -> dict[TopicPartitionKey, int]:
        """The group's committed offsets (every partition it has one for when ``partitions`` is
        None; -1 for a named partition without one). ``require_stable`` makes the broker wait out
        pending transactional commits (OffsetFetch v7+). A member of a consumer-protocol group
        (KIP-848) names itself with ``member_id`` and ``member_epoch`` (sent from v9, where the
        broker checks them, as Kafka's consumer sends them)."""
        codec = _request_codec(ApiKey.OFFSET_FETCH)
        by_topic = None if partitions is None else _by_topic(partitions)
        conn = await self.cluster.coordinator(group_id)
        ids = self._topic_ids(by_topic)
        version = conn.version(ApiKey.OFFSET_FETCH, range(2, 10) if by_topic is None
                               else range(0, 100) if ids else range(0, 10))
        if version >= 8:
            topics = None if by_topic is None else [codec.cls.OffsetFetchRequestTopics(
                name=t, topic_id=ids[t] if ids and version >= 10 else ZERO_UUID, partition_indexes=ps)
                for t, ps in by_topic.items()]
            group_req = codec.cls.OffsetFetchRequestGroup(group_id=group_id, topics=topics)
            if version >= 9 and member_id is not None:
                group_req.member_id, group_req.member_epoch = member_id, member_epoch
            req = codec.cls(require_stable=require_stable, groups=[group_req])
        else:
            topics = None if by_topic is None else [codec.cls.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                                    for t, ps in by_topic.items()]
            req = codec.cls(group_id=group_id, topics=topics, require_stable=require_stable)
        resp = await self.cluster.coordinator_request(group_id, req, version=version)
        if version >= 8:
            group = resp.groups[0]
            error, rtopics = group.error_code, group.topics
        else:
            error, rtopics = resp.error_code, resp.topics
        raise_for_error(error, f"OffsetFetch({group_id})")
        names = {i: t for t, i in (ids or {}).items()}
        out = {}
        for t in rtopics:
            name = names.get(t.topic_id, t.name) if version >= 10 else t.name
            for p in t.partitions:
                raise_for_error(p.error_code, f"OffsetFetch({name}-{p.partition_index})")
                out[(name, p.partition_index)] = p.committed_offset
        return out

    def _topic_ids(self, by_topic: Optional[Mapping[str, Any]]) -> Optional[dict[str, Uuid]]:
        """Each topic's id when the metadata knows every one of them, else None: OffsetCommit
        and OffsetFetch v10 name topics by id only, so without all the ids (or for "every
        topic") the client stays at v9, as Kafka's client does."""
        if not by_topic:
            return None
        ids = {t: self.cluster.metadata.topic_id(t) for t in by_topic}
        return ids if all(i != ZERO_UUID for i in ids.values()) else None

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartitionKey, int], *,
                                  generation: int = -1, member_id: str = "",
                                  member_epoch: bool = False) -> None:
        """Commit ``offsets`` for the group. Without ``generation``/``member_id`` (a member's own
        commit) the group must have no active members, as with Kafka's admin. ``member_epoch``:
        ``generation`` is a consumer-protocol member's epoch (KIP-848), which Kafka's broker takes
        from OffsetCommit v9 only (older versions are refused for such members)."""
        if not offsets:
            return
        codec = _request_codec(ApiKey.OFFSET_COMMIT)
        by_topic = _by_topic(offsets)
        ids = self._topic_ids(by_topic)
        conn = await self.cluster.coordinator(group_id)
        version = conn.version(ApiKey.OFFSET_COMMIT, range(9 if member_epoch else 0, 100 if ids else 10))
        req = codec.cls(group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id, topics=[
            codec.cls.OffsetCommitRequestTopic(name=t, topic_id=ids[t] if ids and version >= 10 else ZERO_UUID,
                                               partitions=[codec.cls.OffsetCommitRequestPartition(
                                                   partition_index=p, committed_offset=offsets[(t, p)])
                                                   for p in ps]) for t, ps in by_topic.items()])
        resp = await self.cluster.coordinator_request(group_id, req, version=version)
        names = {i: t for t, i in (ids or {}).items()}
        for t in resp.topics:
            name = names.get(t.topic_id, t.name) if version >= 10 else t.name
            for p in t.partitions:
                raise_for_error(p.error_code, f"OffsetCommit({name}-{p.partition_index})")


def _filter_fields(f: AclFilter) -> dict[str, Any]:
    return dict(resource_type_filter=_code(ACL_RESOURCE_TYPES, f.resource_type, "resource type"),
                resource_name_filter=f.resource_name,
                pattern_type_filter=_code(ACL_PATTERN_TYPES, f.pattern_type, "pattern type"),
                principal_filter=f.principal, host_filter=f.host,
                operation=_code(ACL_OPERATIONS, f.operation, "operation"),
                permission_type=_code(ACL_PERMISSIONS, f.permission, "permission"))


def _member_assignment(protocol_type: str, data: Any) -> Optional[list[TopicPartitionKey]]:
    if protocol_type != "consumer" or not data:
        return None
    try:
        assignment, _ = decode_assignment(data)
    except DecodeError:
        return None  # a member with its own assignment format under the "consumer" type
    return [(t, p) for t, p in assignment.partitions]
