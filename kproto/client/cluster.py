"""The cluster as a client sees it: bootstrap, broker connections, metadata cache, coordinators.

:class:`MetadataCache` is sans-I/O (it digests MetadataResponse objects); :class:`Cluster` owns
the connections (one per broker, plus a separate one per coordinator so that a JoinGroup held by
the broker for seconds does not stall fetches queued behind it on the same socket, which is
also why Kafka's clients keep the coordinator apart)::

    async with Cluster("127.0.0.1:9092") as cluster:
        await cluster.refresh_metadata(["events"])
        leader = cluster.metadata.leader("events", 0)
        conn = await cluster.connection(leader)
"""
from __future__ import annotations

import asyncio
import ssl as _ssl
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from kproto.client.connection import Connection
from kproto.client.protocol import BrokerError, KafkaConnectionError, SaslConfig, raise_for_error
from kproto.codecs import request as _request_codec
from kproto.codecs.primitives import Uuid
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode, is_retriable

__all__ = ["BrokerInfo", "PartitionInfo", "TopicInfo", "MetadataCache", "Cluster",
           "parse_bootstrap", "METADATA_REFRESH_ERRORS", "EARLIEST", "LATEST", "MAX_TIMESTAMP"]

#: ListOffsets timestamps with a meaning of their own
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
ZERO_UUID = Uuid.ZERO
#: Error codes after which the producer/consumer refresh metadata and retry (stale leadership).
#: A choice of Kafka's retriable codes (every one has the table's ``retriable`` flag), as Kafka's
#: Fetcher names the ones that make it refresh; not the table's flag itself: most retriable codes
#: (a timeout, a coordinator loading) say nothing about leadership.
METADATA_REFRESH_ERRORS = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INCONSISTENT_TOPIC_ID,
})
#: A coordinator's answers meaning "ask again, maybe elsewhere": it is loading, gone or not the
#: coordinator (Kafka's clients look the coordinator up again for these three; the table's
#: ``retriable`` flag covers more, e.g. NOT_ENOUGH_REPLICAS, which a new lookup does not cure).
_COORDINATOR_MOVED = frozenset({
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
})


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list of ``host:port``) -> ``[(host, port), ...]``."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap address {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("empty bootstrap list")
    return out


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's address (``MetadataResponseBroker``)."""

    node_id: int
    host: str
    port: int
    rack: Optional[str] = None


@dataclass
class PartitionInfo:
    """Leadership and replicas of one partition; ``leader`` is -1 when there is none."""

    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    error_code: int = 0


@dataclass
class TopicInfo:
    """A topic's id (zero when the broker sends none), error code and partitions."""

    name: str
    topic_id: Uuid
    error_code: int
    partitions: dict[int, PartitionInfo]
    is_internal: bool = False


class MetadataCache:
    """Brokers and topic -> partition -> leader, as of the last MetadataResponse applied."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: Optional[str] = None
        self.controller_id: int = -1
        self.updated_at: float = 0.0
        self._available: dict[str, list[int]] = {}

    def update(self, resp: Any, *, all_topics: bool = False) -> None:
        """Apply a MetadataResponse. Topics it names replace their cached entries; with
        ``all_topics`` (the request asked for every topic) the others are dropped."""
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, getattr(b, "rack", None))
                        for b in resp.brokers}
        self.cluster_id = getattr(resp, "cluster_id", None)
        self.controller_id = getattr(resp, "controller_id", -1)
        self._available = {}
        if all_topics:
            self.topics = {}
        for t in resp.topics:
            parts = {p.partition_index: PartitionInfo(
                p.partition_index, p.leader_id, getattr(p, "leader_epoch", -1), list(p.replica_nodes),
                list(p.isr_nodes), p.error_code) for p in t.partitions}
            self.topics[t.name] = TopicInfo(t.name, getattr(t, "topic_id", ZERO_UUID) or ZERO_UUID,
                                            t.error_code, parts, t.is_internal)
        self.updated_at = time.monotonic()

    def partitions(self, topic: str) -> list[int]:
        """Partition indexes of ``topic`` (empty when unknown)."""
        t = self.topics.get(topic)
        return sorted(t.partitions) if t else []

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions with a known leader (``Cluster.availablePartitionsForTopic``)."""
        found = self._available.get(topic)
        if found is None:  # the producer asks for every keyless record: kept until the next update
            t = self.topics.get(topic)
            found = sorted(p for p, info in t.partitions.items() if info.leader >= 0) if t else []
            self._available[topic] = found
        return found

    def leader(self, topic: str, partition: int) -> Optional[int]:
        """Leader node id, or None when unknown."""
        t = self.topics.get(topic)
        info = t.partitions.get(partition) if t else None
        return info.leader if info is not None and info.leader >= 0 else None

    def topic_id(self, topic: str) -> Uuid:
        """The topic's id, or the zero id when unknown."""
        t = self.topics.get(topic)
        return t.topic_id if t else ZERO_UUID

    def topic_names(self) -> dict[Uuid, str]:
        """Topic id -> name for topics that have an id."""
        return {t.topic_id: t.name for t in self.topics.values() if t.topic_id != ZERO_UUID}

    def partition_counts(self) -> dict[str, int]:
        """topic -> partition count (the cluster input of :mod:`kproto.client.assignors`)."""
        return {name: len(t.partitions) for name, t in self.topics.items() if not t.error_code}


#: Purposes starting with this name a consumer's fetches own: a broker answers the requests of
#: a connection one at a time, so a fetch waiting in the broker would hold up any other
#: request sent on it (Kafka's clients do not share connections either); never lent out
FETCH_PURPOSE = "fetch"


class Cluster:
    """Connections to a cluster's brokers and its metadata. Use as ``async with`` or call
    :meth:`start` / :meth:`close`. ``version_caps`` is passed to every :class:`Connection`."""

    def __init__(self, bootstrap: str | Sequence[str], *, client_id: str = "kproto",
                 ssl: _ssl.SSLContext | None = None, sasl: SaslConfig | None = None,
                 request_timeout: float = 30.0, version_caps: Optional[dict[int, int]] = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.ssl = ssl
        self.sasl = sasl
        self.request_timeout = request_timeout
        self.version_caps = version_caps
        self.metadata = MetadataCache()
        self._conns: dict[tuple[Any, str], Connection] = {}
        self._coordinators: dict[tuple[int, str], BrokerInfo] = {}
        self._coordinator_of: dict[tuple[int, str], int] = {}
        self._lock = asyncio.Lock()
        # the highest ApiVersions version the last broker connected to takes (v5 names the node)
        self._api_versions_top = 0

    async def _open(self, host: str, port: int, node_id: int = -1) -> Connection:
        """A connection; to a known node of a cluster whose brokers take ApiVersions v5 it names
        the cluster and node. A broker that is not that node of that cluster answers
        REBOOTSTRAP_REQUIRED: as Kafka's client, the cluster forgets its brokers and
        connections, so the next request bootstraps anew."""
        named = node_id >= 0 and self._api_versions_top >= 5
        try:
            conn = await Connection.open(host, port, ssl=self.ssl, client_id=self.client_id,
                                         request_timeout=self.request_timeout, sasl=self.sasl,
                                         version_caps=self.version_caps, node_id=node_id if named else -1,
                                         cluster_id=self.metadata.cluster_id if named else None)
        except BrokerError as e:
            if e.code != ErrorCode.REBOOTSTRAP_REQUIRED:
                raise
            await self._rebootstrap()
            raise KafkaConnectionError(f"{host}:{port} is not node {node_id} of cluster "
                                       f"{self.metadata.cluster_id}: rebootstrap") from e
        top = conn.versions.supported(ApiKey.API_VERSIONS)
        self._api_versions_top = top[-1] if top else 0
        return conn

    async def _rebootstrap(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
        self.metadata.brokers = {}
        self._coordinators.clear()
        self._coordinator_of.clear()

    async def start(self) -> "Cluster":
        """Connect to the first reachable bootstrap server and read the broker list."""
        await self.refresh_metadata([])
        return self

    async def bootstrap_connection(self) -> Connection:
        """A connection to any broker: a known one if any, else a bootstrap server."""
        for (_, purpose), conn in self._conns.items():
            if not conn.closed and not purpose.startswith(FETCH_PURPOSE):
                return conn
        errors = []
        for node in list(self.metadata.brokers.values()):
            try:
                return await self.connection(node.node_id)
            except KafkaConnectionError as e:
                errors.append(e)
        for host, port in self.bootstrap:
            try:
                conn = await self._open(host, port)
            except KafkaConnectionError as e:
                errors.append(e)
                continue
            self._conns[((host, port), "bootstrap")] = conn
            return conn
        raise KafkaConnectionError("no broker reachable: " + "; ".join(map(str, errors)))

    async def close_connections(self, purpose: str) -> None:
        """Close the connections opened for ``purpose``."""
        for key in [k for k in self._conns if k[1] == purpose]:
            await self._conns.pop(key).close()

    def open_connection(self, node_id: int, purpose: str = "data") -> Optional[Connection]:
        """The connection to ``node_id`` for ``purpose`` when one is open, else None (no
        await: a request can leave at once)."""
        conn = self._conns.get((node_id, purpose))
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int, purpose: str = "data") -> Connection:
        """The connection to ``node_id`` for ``purpose`` (``data`` or ``coordinator``),
        (re)opened when needed."""
        key = (node_id, purpose)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        async with self._lock:
            conn = self._conns.get(key)
            if conn is not None and not conn.closed:
                return conn
            info = self.metadata.brokers.get(node_id) or self._coordinators.get((node_id, purpose))
            if info is None:
                await self.refresh_metadata([])
                info = self.metadata.brokers.get(node_id)
                if info is None:
                    raise KafkaConnectionError(f"unknown broker {node_id}")
            conn = self._conns[key] = await self._open(info.host, info.port, node_id)
            return conn

    async def refresh_metadata(self, topics: Iterable[str] | None = None, *,
                               allow_auto_create: bool = False) -> MetadataCache:
        """Fetch metadata for ``topics`` (None: every topic; []: brokers only) into the cache."""
        conn = await self.bootstrap_connection()
        codec = _request_codec(ApiKey.METADATA)
        version = conn.version(ApiKey.METADATA)
        names = None if topics is None else list(topics)
        req_topics: list | None
        if names is None:
            req_topics = [] if version == 0 else None
        else:
            if not names and version == 0:
                names = list(self.metadata.topics)  # v0 has no "no topics" form
            req_topics = [codec.cls.MetadataRequestTopic(name=n) for n in names]
        resp = await conn.request(codec.cls(topics=req_topics, allow_auto_topic_creation=allow_auto_create),
                                  version)
        # v13 (KIP-1102) answers a request-level failure (e.g. REBOOTSTRAP_REQUIRED) with a
        # top-level error and no brokers: not a metadata to apply
        raise_for_error(getattr(resp, "error_code", ErrorCode.NONE), "Metadata")
        self.metadata.update(resp, all_topics=topics is None)
        return self.metadata

    async def wait_for_leaders(self, topics: Sequence[str], timeout: float = 10.0, *,
                               allow_auto_create: bool = False) -> MetadataCache:
        """Refresh until every partition of ``topics`` has a leader (after topic creation)."""
        deadline = time.monotonic() + timeout
        while True:
            md = await self.refresh_metadata(topics, allow_auto_create=allow_auto_create)
            missing = [t for t in topics if t not in md.topics or md.topics[t].error_code
                       or not md.topics[t].partitions
                       or len(md.available_partitions(t)) < len(md.topics[t].partitions)]
            if not missing:
                return md
            if time.monotonic() > deadline:
                codes = {t: md.topics[t].error_code if t in md.topics else None for t in missing}
                raise BrokerError(next((c for c in codes.values() if c), ErrorCode.LEADER_NOT_AVAILABLE),
                                  f"no leaders for {', '.join(missing)} after {timeout} s")
            await asyncio.sleep(0.1)

    async def find_coordinator(self, key: str, key_type: int = 0, retries: int = 20) -> int:
        """The node id coordinating group (``key_type`` 0) or transaction (1) ``key``; its
        address is remembered for :meth:`connection` with purpose ``coordinator``."""
        codec = _request_codec(ApiKey.FIND_COORDINATOR)
        for attempt in range(retries):
            conn = await self.bootstrap_connection()
            version = conn.version(ApiKey.FIND_COORDINATOR)
            if version >= 4:
                resp = await conn.request(codec.cls(key_type=key_type, coordinator_keys=[key]), version)
                c = resp.coordinators[0]
                code, node_id, host, port, msg = c.error_code, c.node_id, c.host, c.port, c.error_message
            else:
                resp = await conn.request(codec.cls(key=key, key_type=key_type), version)
                code, node_id, host, port = resp.error_code, resp.node_id, resp.host, resp.port
                msg = getattr(resp, "error_message", None)
            if is_retriable(code) and attempt + 1 < retries:  # as Kafka's coordinators do
                await asyncio.sleep(0.1)
                continue
            raise_for_error(code, f"FindCoordinator({key!r})", msg)
            self._coordinators[(node_id, "coordinator")] = BrokerInfo(node_id, host, port)
            return node_id
        raise AssertionError("unreachable")

    async def coordinator(self, key: str, key_type: int = 0) -> Connection:
        """The connection to the coordinator of group (``key_type`` 0) or transaction (1) ``key``,
        looked up once and remembered until :meth:`forget_coordinator`."""
        node = self._coordinator_of.get((key_type, key))
        if node is None:
            node = self._coordinator_of[(key_type, key)] = await self.find_coordinator(key, key_type)
        return await self.connection(node, "coordinator")

    def forget_coordinator(self, key: str, key_type: int = 0) -> None:
        """Look ``key``'s coordinator up again next time (it moved or its connection failed)."""
        self._coordinator_of.pop((key_type, key), None)

    async def coordinator_request(self, key: str, body: Any, *, key_type: int = 0,
                                  version: int | None = None, timeout: float | None = None) -> Any:
        """Send ``body`` to ``key``'s coordinator, looking it up again once if it moved."""
        for attempt in range(2):
            try:
                conn = await self.coordinator(key, key_type)
                resp = await conn.request(body, version, timeout=timeout)
            except KafkaConnectionError:
                self.forget_coordinator(key, key_type)
                if attempt:
                    raise
                continue
            if getattr(resp, "error_code", ErrorCode.NONE) in _COORDINATOR_MOVED and not attempt:
                self.forget_coordinator(key, key_type)
                await asyncio.sleep(0.1)
                continue
            return resp
        return resp

    async def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int, *,
                           isolation_level: int = 0, timeout: float = 30.0) -> dict[tuple[str, int], int]:
        """ListOffsets from each partition's leader: ``timestamp`` is ``EARLIEST`` (-2), ``LATEST``
        (-1), ``MAX_TIMESTAMP`` (-3) or a time in ms (the first offset at or after it; -1 when none).
        ``isolation_level`` 1 (read_committed) answers the last stable offset for ``LATEST``.
        As Kafka's clients, a partition without a leader, or whose leader answers that it is not
        (yet) the leader, is asked again after a metadata refresh, for up to ``timeout`` seconds."""
        lo = _request_codec(ApiKey.LIST_OFFSETS)
        # Kafka's client: read_committed needs v2+, where the isolation level exists, and
        # MAX_TIMESTAMP v7+ (KIP-734)
        wanted = range(7, 100) if timestamp == MAX_TIMESTAMP else range(2, 100) if isolation_level else None
        out: dict[tuple[str, int], int] = {}
        pending = list(dict.fromkeys(partitions))
        deadline = time.monotonic() + timeout
        while True:
            by_leader: dict[int, dict[str, list[int]]] = {}
            retry: list[tuple[tuple[str, int], int]] = []
            for t, p in pending:
                leader = self.metadata.leader(t, p)
                if leader is None:
                    retry.append(((t, p), ErrorCode.LEADER_NOT_AVAILABLE))
                else:
                    by_leader.setdefault(leader, {}).setdefault(t, []).append(p)
            for leader, topics in by_leader.items():
                conn = await self.connection(leader)
                version = conn.version(ApiKey.LIST_OFFSETS, wanted)
                req = lo.cls(replica_id=-1, isolation_level=isolation_level, topics=[lo.cls.ListOffsetsTopic(name=t, partitions=[
                    lo.cls.ListOffsetsPartition(partition_index=p, timestamp=timestamp, max_num_offsets=1)
                    for p in ps]) for t, ps in topics.items()])
                resp = await conn.request(req, version)
                for rt in resp.topics:
                    for rp in rt.partitions:
                        tp = (rt.name, rp.partition_index)
                        if rp.error_code in METADATA_REFRESH_ERRORS:
                            retry.append((tp, rp.error_code))
                            continue
                        raise_for_error(rp.error_code, f"ListOffsets({rt.name}-{rp.partition_index})")
                        if version == 0:
                            out[tp] = rp.old_style_offsets[0] if rp.old_style_offsets else -1
                        else:
                            out[tp] = rp.offset
            if not retry:
                return out
            if time.monotonic() > deadline:
                (t, p), code = retry[0]
                raise BrokerError(code, f"ListOffsets({t}-{p}) after {timeout} s")
            pending = [tp for tp, _ in retry]
            await asyncio.sleep(0.1)  # Kafka's retry.backoff.ms
            await self.refresh_metadata(sorted({t for t, _ in pending}))

    async def close(self) -> None:
        """Close every connection."""
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def __aenter__(self) -> "Cluster":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
