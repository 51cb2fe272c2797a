"""The I/O of a conformance run: connections to both brokers, topic set-up, and driving each
scenario's generator against both (the comparison itself is sans-I/O).

    report = await run_conformance(("127.0.0.1", 9092), ("127.0.0.1", 19092))
    print(report.text())

Every scenario runs once per version of its API both brokers advertise; the runs are
independent (names unique per run) and go in parallel over a small pool of connections per
broker. Topics the scenarios declare are created up front with CreateTopics on each broker, in
batches, and the run waits until Metadata shows a leader for every partition and that leader
serves it (ListOffsets answers without NOT_LEADER_OR_FOLLOWER).

With ``cluster=True`` both sides are clusters and each request goes where a client would send
it: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers to the
leader of their topic, group requests to the group coordinator and transaction requests to the
transaction coordinator (found with FindCoordinator, as clients do), everything else to the
bootstrap broker. The pre-created topics are placed by hand (CreateTopics assignments): all
partitions of one scenario run share one leader, so a request naming several of its topics has a
single destination; the runs' leaders rotate over the brokers, with every broker a replica
(replication factor min(3, brokers)). Node ids are then compared by role (see
:data:`~kproto.conformance.normalise.NODE_ROLES`).
"""
from __future__ import annotations

import asyncio
import copy
import fnmatch
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from kproto.client.connection import Connection
from kproto.client.protocol import KafkaConnectionError
from kproto.codecs import Uuid
from kproto.codecs import request as request_codec
from kproto.conformance.compare import Diff, compare
from kproto.conformance.deviations import Deviations
from kproto.conformance.normalise import Normaliser, to_tree
from kproto.conformance.report import CallResult, Report
from kproto.conformance.scenario import TRANSIENT_COORDINATOR_ERRORS, Call, Context, MissingApi, Scenario, api_name, build
from kproto.conformance.scenarios import SCENARIOS
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schemas.api_keys import ApiKey

__all__ = ["run_conformance", "parse_address"]

Address = Tuple[str, int]

#: The outcome of a call the kit itself failed to make or to follow (a scenario bug, or an
#: answer missing what the scenario reads next): a difference even when both sides agree.
KIT_ERROR = "<kit error>"

#: How often a call with ``retry`` is sent again at most (100 ms apart).
RETRIES = 100


def parse_address(text: str) -> Address:
    """``HOST:PORT`` -> (host, port); of a comma-separated bootstrap list, the first."""
    host, sep, port = text.split(",")[0].strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass
class _Outcome:
    label: str
    api_key: int
    version: int
    compare: bool
    tree: Any  # normalised answer, or {"<error>": text}


#: Requests sent to the leader of the (first) topic they name, in cluster mode.
_TO_LEADER = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                        ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_PRODUCERS, ApiKey.SHARE_FETCH,
                        ApiKey.SHARE_ACKNOWLEDGE})
#: Requests sent to the group coordinator of the (first) group they name.
_TO_GROUP_COORDINATOR = frozenset({
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
    ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE,
    ApiKey.TXN_OFFSET_COMMIT, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE,
    ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.STREAMS_GROUP_HEARTBEAT,
    ApiKey.STREAMS_GROUP_DESCRIBE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS})
#: The share coordinator's RPCs, sent to the share coordinator of the (first) share-partition they
#: name (FindCoordinator key type 2, key ``group:topicId:partition``), as a broker sends them.
_TO_SHARE_COORDINATOR = frozenset({ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                                   ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
                                   ApiKey.READ_SHARE_GROUP_STATE_SUMMARY})
#: Requests sent to the transaction coordinator of the (first) transactional id they name
#: (InitProducerId only with one; AddOffsetsToTxn names a group too but goes here).
_TO_TXN_COORDINATOR = frozenset({ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN,
                                 ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.DESCRIBE_TRANSACTIONS})


#: Requests naming several groups or transactional ids, split per coordinator as the admin
#: client splits them: API -> (request list, key type, response list the answers are merged in).
_SPLIT: Dict[int, Tuple[str, int, str]] = {ApiKey.DESCRIBE_GROUPS: ("groups", 0, "groups"), ApiKey.DELETE_GROUPS: ("groups_names", 0, "results"),
          ApiKey.CONSUMER_GROUP_DESCRIBE: ("group_ids", 0, "groups"), ApiKey.OFFSET_FETCH: ("groups", 0, "groups"),
          ApiKey.SHARE_GROUP_DESCRIBE: ("group_ids", 0, "groups"),
          ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ("groups", 0, "groups"),
          ApiKey.DESCRIBE_TRANSACTIONS: ("transactional_ids", 1, "transaction_states")}
#: Requests a client sends to every broker, merging the lists of the answers.
_TO_ALL: Dict[int, str] = {ApiKey.LIST_GROUPS: "groups", ApiKey.LIST_TRANSACTIONS: "transaction_states"}


def _key_of(item: Any) -> str:
    return item if isinstance(item, str) else (getattr(item, "group_id", None)
                                               or getattr(item, "transactional_id", None) or "")


def _first(body: Any, *attrs: str) -> Any:
    """The first non-empty value among ``attrs`` of ``body``; of a list, its first element."""
    for a in attrs:
        v = getattr(body, a, None)
        if isinstance(v, list):
            v = v[0] if v else None
        if v not in (None, ""):
            return v
    return None


def _group_key(body: Any) -> Optional[str]:
    g = _first(body, "group_id", "groups", "groups_names", "group_ids")
    return g if g is None or isinstance(g, str) else getattr(g, "group_id", None)


def _share_key(body: Any) -> Optional[str]:
    t = _first(body, "topics")
    p = None if t is None else _first(t, "partitions")
    return None if p is None else f"{body.group_id}:{Uuid(t.topic_id)}:{p.partition}"


def _txn_key(body: Any) -> Optional[str]:
    t = _first(body, "transactional_id", "v3_and_below_transactional_id", "transactions", "transactional_ids")
    return t if t is None or isinstance(t, str) else getattr(t, "transactional_id", None)


class _Side:
    """One broker (or cluster): pools of connections and what the set-up learnt (topic ids,
    node id; in cluster mode the nodes, the topics' leaders and the coordinators)."""

    def __init__(self, name: str, address: Address, size: int, timeout: float, cluster: bool = False) -> None:
        self.name, self.address, self.timeout, self.cluster = name, address, timeout, cluster
        self.pool: asyncio.Queue[Connection] = asyncio.Queue()
        self.nodes: Dict[int, Address] = {}  # cluster mode: node id -> address
        self.node_pools: Dict[int, List[Connection]] = {}
        self.leaders: Dict[str, int] = {}  # topic name -> the leader of all its partitions
        self.id_names: Dict[str, str] = {}  # str(topic id) -> name
        self.coordinators: Dict[Tuple[int, str], int] = {}
        self._finding: Dict[Tuple[int, str], "asyncio.Future[int]"] = {}
        self.size = size
        self.versions: Dict[int, range] = {}
        self.topic_ids: Dict[str, Any] = {}
        self.node_id = -1
        self.touched: Set[Tuple[str, str, str]] = set()  # what the normaliser replaced
        self._all: List[Connection] = []

    async def connect(self) -> Connection:
        conn = await Connection.open(*self.address, client_id="kproto-conformance",
                                     request_timeout=self.timeout)
        self._all.append(conn)
        return conn

    async def start(self) -> None:
        first = await self.connect()
        self.versions = dict(first.versions.broker)
        self.pool.put_nowait(first)
        for conn in await asyncio.gather(*(self.connect() for _ in range(self.size - 1))):
            self.pool.put_nowait(conn)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._all), return_exceptions=True)

    async def learn_nodes(self) -> None:
        """Cluster mode: the brokers' ids and addresses (Metadata on the bootstrap broker)."""
        conn = await self.pool.get()
        try:
            ver = min(self.versions[ApiKey.METADATA][-1], 12)
            resp = await conn.request(build(ApiKey.METADATA, ver, topics=[]), ver)
            self.nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        finally:
            self.pool.put_nowait(conn)

    async def node_conn(self, node: int) -> Connection:
        """A connection to ``node`` (cluster mode), from its pool or new."""
        free = self.node_pools.setdefault(node, [])
        if free:
            return free.pop()
        conn = await Connection.open(*self.nodes[node], client_id="kproto-conformance",
                                     request_timeout=self.timeout)
        self._all.append(conn)
        return conn

    def release(self, node: int, conn: Connection) -> None:
        if not conn.closed:
            self.node_pools.setdefault(node, []).append(conn)

    async def coordinator(self, key_type: int, key: str) -> Optional[int]:
        """The node id of the group (0), transaction (1) or share (2) coordinator of ``key``, found as
        clients find it (FindCoordinator on the bootstrap broker, transient errors waited out)."""
        k = (key_type, key)
        if k in self.coordinators:
            return self.coordinators[k]
        if k in self._finding and not self._finding[k].done():
            return await self._finding[k]
        fut: "asyncio.Future[int]" = asyncio.get_running_loop().create_future()
        self._finding[k] = fut
        node = -1
        ask = min(self.nodes)  # not the scenarios' pool: they wait on this lookup holding theirs
        conn = await self.node_conn(ask)
        try:
            ver = min(self.versions[ApiKey.FIND_COORDINATOR][-1], 6)
            for _ in range(RETRIES):
                resp = await conn.request(build(ApiKey.FIND_COORDINATOR, ver, key=key, key_type=key_type,
                                                coordinator_keys=[key]), ver)
                c = resp.coordinators[0] if ver >= 4 else resp
                if c.error_code == 0:
                    node = c.node_id
                    break
                if c.error_code not in TRANSIENT_COORDINATOR_ERRORS:
                    break
                await asyncio.sleep(0.1)
        finally:
            self.release(ask, conn)
            self.coordinators[k] = node
            fut.set_result(node)
        return node

    async def plan(self, call: Call) -> Tuple[List[Tuple[Optional[int], Any]], Optional[str]]:
        """Cluster mode: the requests a client sends for ``call`` (node id or None for the
        bootstrap broker, body) and the response list their answers are merged in (None: one
        request)."""
        if call.api_key in _TO_ALL:
            return [(n, call.body) for n in sorted(self.nodes)], _TO_ALL[call.api_key]
        split = _SPLIT.get(call.api_key)
        items = getattr(call.body, split[0], None) if split else None
        if split and items and len(items) > 1:
            by_node: Dict[Optional[int], List[Any]] = {}
            for item in items:
                node = await self.coordinator(split[1], _key_of(item))
                by_node.setdefault(node if node in self.nodes else None, []).append(item)
            if len(by_node) > 1:
                parts = []
                for node, some in by_node.items():
                    body = copy.copy(call.body)
                    setattr(body, split[0], some)
                    parts.append((node, body))
                return parts, split[2]
        return [(await self.route(call), call.body)], None

    def _topic_of(self, call: Call) -> Optional[str]:
        t = _first(call.body, "topic_data", "topics")
        name = None if t is None else (getattr(t, "name", None) or getattr(t, "topic", None))
        if not name and t is not None and getattr(t, "topic_id", None) is not None:
            name = self.id_names.get(str(Uuid(t.topic_id)))
        return name or None

    async def refresh_leader(self, call: Call) -> Optional[int]:
        """Read the leader of ``call``'s topic again (Metadata on the bootstrap broker)."""
        name = self._topic_of(call)
        if name is None or name not in self.leaders:
            return None
        conn = await self.node_conn(min(self.nodes))
        try:
            ver = min(self.versions[ApiKey.METADATA][-1], 12)
            resp = await conn.request(build(ApiKey.METADATA, ver, topics=[{"name": name}],
                                            allow_auto_topic_creation=False), ver)
            for t in resp.topics:
                if t.name == name and t.partitions and t.partitions[0].leader_id in self.nodes:
                    self.leaders[name] = t.partitions[0].leader_id
        finally:
            self.release(min(self.nodes), conn)
        return self.leaders[name]

    def forget(self, call: Call) -> bool:
        """Drop the cached coordinator ``call`` was sent to; False if it went to none."""
        if call.api_key in _TO_TXN_COORDINATOR and _txn_key(call.body):
            return self.coordinators.pop((1, _txn_key(call.body) or ""), None) is not None
        if call.api_key in _TO_GROUP_COORDINATOR and _group_key(call.body):
            return self.coordinators.pop((0, _group_key(call.body) or ""), None) is not None
        if call.api_key in _TO_SHARE_COORDINATOR and _share_key(call.body):
            return self.coordinators.pop((2, _share_key(call.body) or ""), None) is not None
        return False

    async def route(self, call: Call) -> Optional[int]:
        """Where a client sends ``call`` (cluster mode): a node id, or None for the bootstrap."""
        node: Optional[int] = None
        if call.api_key in _TO_LEADER:
            name = self._topic_of(call)
            node = self.leaders.get(name) if name else None
        elif call.api_key in _TO_TXN_COORDINATOR and _txn_key(call.body):
            node = await self.coordinator(1, _txn_key(call.body) or "")
        elif call.api_key in _TO_GROUP_COORDINATOR and _group_key(call.body):
            node = await self.coordinator(0, _group_key(call.body) or "")
        elif call.api_key in _TO_SHARE_COORDINATOR and _share_key(call.body):
            node = await self.coordinator(2, _share_key(call.body) or "")
        return node if node is not None and node in self.nodes else None


def _common(a: Dict[int, range], b: Dict[int, range]) -> Dict[int, range]:
    out = {}
    for k in set(a) & set(b):
        try:
            codec = request_codec(k).valid_versions
        except KeyError:
            continue
        lo = max(a[k].start, b[k].start, codec.start)
        hi = min(a[k].stop, b[k].stop, codec.stop)
        if lo < hi:
            out[k] = range(lo, hi)
    return out


async def _ask(home: Connection, routed: Dict[int, Connection], parts: List[Tuple[Optional[int], Any]],
               merge: Optional[str], version: int) -> Any:
    """Send each part to its node; several answers are merged as a client merges them (the
    lists ``merge`` concatenated, the first error code kept)."""
    resps = [await (home if node is None else routed[node]).request(body, version) for node, body in parts]
    resp = resps[0]
    if merge is not None and len(resps) > 1:
        resp = copy.copy(resp)
        setattr(resp, merge, [x for r in resps for x in getattr(r, merge)])
        codes = [r.error_code for r in resps if getattr(r, "error_code", 0)]
        if codes:
            resp.error_code = codes[0]
    return resp


async def _drive(side: _Side, scenario: Scenario, ctx: Context) -> List[_Outcome]:
    """Run one scenario's generator against one broker; a failed call ends the run."""
    norm = Normaliser(cluster=side.cluster)
    outcomes: List[_Outcome] = []
    gen = scenario.body(ctx)
    home = conn = await side.pool.get()
    routed: Dict[int, Connection] = {}
    try:
        call: Optional[Call] = next(gen)
        while call is not None:
            try:
                parts: List[Tuple[Optional[int], Any]] = [(None, call.body)]
                merge: Optional[str] = None
                if side.cluster:
                    parts, merge = await side.plan(call)
                    for node, _body in parts:
                        if node is not None and node not in routed:
                            routed[node] = await side.node_conn(node)
                if call.expect_response:
                    resp = await _ask(home, routed, parts, merge, call.version)
                    for _ in range(RETRIES if side.cluster else 0):
                        # the coordinator moved (leadership of its partition changed): a client
                        # finds it again and resends
                        if getattr(resp, "error_code", 0) != ErrorCode.NOT_COORDINATOR or not side.forget(call):
                            break
                        await asyncio.sleep(0.1)
                        parts, merge = await side.plan(call)
                        for node, _body in parts:
                            if node is not None and node not in routed:
                                routed[node] = await side.node_conn(node)
                        resp = await _ask(home, routed, parts, merge, call.version)
                    for _ in range(RETRIES if side.cluster and call.api_key in _TO_LEADER else 0):
                        # leadership moved since Metadata was read: a client refreshes it and resends
                        if not _has_code(to_tree(call.api_key, call.version, resp), ErrorCode.NOT_LEADER_OR_FOLLOWER):
                            break
                        await asyncio.sleep(0.1)
                        node = await side.refresh_leader(call)
                        if node is None:
                            break
                        if node not in routed:
                            routed[node] = await side.node_conn(node)
                        parts = [(node, call.body)]
                        resp = await _ask(home, routed, parts, None, call.version)
                    for _ in range(RETRIES):
                        if call.retry is None or not call.retry(resp):
                            break
                        await asyncio.sleep(0.1)
                        resp = await _ask(home, routed, parts, merge, call.version)
                else:
                    node = parts[0][0]
                    (home if node is None else routed[node]).send(call.body, call.version, expect_response=False)
                    resp = None
            except DecodeError as exc:  # the broker's answer does not parse: its difference
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {"<error>": f"DecodeError: {exc}"}))
                break
            except (EncodeError, UnsupportedVersionError, TypeError, ValueError) as exc:
                # the kit could not write its own request: always reported, never "same"
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {KIT_ERROR: f"{type(exc).__name__}: {exc}"}))
                break
            except Exception as exc:  # noqa: BLE001 - recorded and compared as the outcome
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {"<error>": type(exc).__name__}))
                if home.closed:
                    try:
                        home = await side.connect()
                    except KafkaConnectionError:
                        pass  # the broker is gone: later calls on this connection fail too
                break
            tree = None if resp is None else norm.apply(api_name(call.api_key),
                                                         to_tree(call.api_key, call.version, resp))
            if call.view is not None and tree is not None:
                tree = call.view(tree)
            outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare, tree))
            try:
                call = gen.send(resp)
            except (StopIteration, MissingApi):
                raise
            except Exception as exc:  # noqa: BLE001 - the answer was not what the scenario needs
                outcomes.append(_Outcome("<scenario>", call.api_key, call.version, False,
                                         {KIT_ERROR: f"{type(exc).__name__}: {exc}"}))
                break
    except StopIteration:
        pass
    finally:
        gen.close()
        side.pool.put_nowait(home)
        for node, c in routed.items():
            side.release(node, c)
        side.touched |= norm.touched
    return outcomes


def _placement(side: _Side, specs: Dict[str, Any], runs: Dict[str, int]) -> Dict[str, List[int]]:
    """Cluster mode: each topic's replicas, leader first. The topics of scenario run ``i``
    (``runs``: topic name -> i) all lead on the i-th broker (round robin), replicated on the
    next ones."""
    nodes = sorted(side.nodes)
    rf = min(3, len(nodes))
    return {name: [nodes[(runs[name] + j) % len(nodes)] for j in range(rf)] for name in specs}


async def _create_topics(side: _Side, specs: Dict[str, Any], timeout: float,
                         runs: Optional[Dict[str, int]] = None) -> None:
    """CreateTopics for every declared topic (batches of 50), then wait for their leaders (in
    cluster mode: placed by :func:`_placement`, known to every broker)."""
    if not specs:
        return
    place = _placement(side, specs, runs or {}) if side.cluster else {}
    conn = await side.pool.get()
    try:
        if ApiKey.CREATE_TOPICS in side.versions:
            ver = side.versions[ApiKey.CREATE_TOPICS][-1]
            ver = min(ver, request_codec(ApiKey.CREATE_TOPICS).valid_versions[-1])
            names = list(specs)
            for i in range(0, len(names), 50):
                req = build(ApiKey.CREATE_TOPICS, ver, timeout_ms=30000, topics=[
                    {"name": n, "num_partitions": specs[n].partitions, "replication_factor": 1,
                     "configs": [{"name": k, "value": v} for k, v in specs[n].configs]}
                    if not place else
                    {"name": n, "num_partitions": -1, "replication_factor": -1,
                     "assignments": [{"partition_index": p, "broker_ids": place[n]}
                                     for p in range(specs[n].partitions)],
                     "configs": [{"name": k, "value": v} for k, v in specs[n].configs]}
                    for n in names[i:i + 50]])
                resp = await conn.request(req, ver)
                for t in resp.topics:
                    if t.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                        raise RuntimeError(f"{side.name}: CreateTopics {t.name}: error {t.error_code}")
        md_ver = min(side.versions[ApiKey.METADATA][-1], 12)
        deadline = time.monotonic() + timeout
        pending = set(specs)
        while pending:
            req = build(ApiKey.METADATA, md_ver, topics=[{"name": n} for n in sorted(pending)],
                        allow_auto_topic_creation=ApiKey.CREATE_TOPICS not in side.versions)
            resp = await conn.request(req, md_ver)
            for b in resp.brokers[:1]:
                side.node_id = b.node_id
            for t in resp.topics:
                if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                    side.topic_ids[t.name] = t.topic_id
                    pending.discard(t.name)
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: no leader for {len(pending)} topics after {timeout} s")
                await asyncio.sleep(0.1)
        if side.cluster:
            side.id_names.update((str(Uuid(i)), n) for n, i in side.topic_ids.items())
            await asyncio.gather(*(_await_leaders(side, node, specs, place, md_ver, time.monotonic() + timeout)
                                   for node in side.nodes))
            by_leader: Dict[int, List[str]] = {}
            for name in specs:
                by_leader.setdefault(side.leaders[name], []).append(name)
            await asyncio.gather(*(_await_serving(side, node, names, specs, time.monotonic() + timeout)
                                   for node, names in by_leader.items()))
        else:
            await _await_serving(side, None, list(specs), specs, time.monotonic() + timeout, conn)
    finally:
        side.pool.put_nowait(conn)


#: ListOffsets errors of a partition its leader has not taken up yet.
_NOT_SERVING = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.OFFSET_NOT_AVAILABLE})


async def _await_serving(side: _Side, node: Optional[int], names: List[str], specs: Dict[str, Any],
                         deadline: float, conn: Optional[Connection] = None) -> None:
    """Wait until the leader (``node``, or ``conn``'s broker) serves every partition of
    ``names``: Metadata shows a leader as soon as the broker's metadata has it, but Apache
    Kafka's broker takes up the partition a moment later (until then Produce and Fetch answer
    NOT_LEADER_OR_FOLLOWER, and a scenario's first batch would be lost). ListOffsets (latest)
    reads nothing and writes nothing."""
    if not names or ApiKey.LIST_OFFSETS not in side.versions:
        return
    ver = min(side.versions[ApiKey.LIST_OFFSETS][-1], request_codec(ApiKey.LIST_OFFSETS).valid_versions[-1])
    own = conn is None
    if conn is None:
        assert node is not None
        conn = await side.node_conn(node)
    try:
        pending = list(names)
        while pending:
            req = build(ApiKey.LIST_OFFSETS, ver, replica_id=-1, isolation_level=0, timeout_ms=10000, topics=[
                {"name": n, "partitions": [{"partition_index": p, "timestamp": -1, "max_num_offsets": 1,
                                            "current_leader_epoch": -1} for p in range(specs[n].partitions)]}
                for n in pending])
            resp = await conn.request(req, ver)
            pending = sorted({t.name for t in resp.topics for p in t.partitions if p.error_code in _NOT_SERVING})
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: {len(pending)} topics not served by their leader "
                                       f"(e.g. {pending[0]})")
                await asyncio.sleep(0.1)
    finally:
        if own and node is not None:
            side.release(node, conn)


async def _await_leaders(side: _Side, node: int, specs: Dict[str, Any], place: Dict[str, List[int]],
                         md_ver: int, deadline: float) -> None:
    """Cluster mode: wait until ``node``'s metadata shows every topic with a leader (brokers
    learn of new topics at their own pace); the first node's view gives the leaders routed to."""
    conn = await side.node_conn(node)
    try:
        pending = set(specs)
        seen: Any = None
        while pending:
            resp = await conn.request(build(ApiKey.METADATA, md_ver, topics=[{"name": n} for n in sorted(pending)],
                                            allow_auto_topic_creation=False), md_ver)
            for t in resp.topics:
                seen = (t.name, t.error_code, [p.leader_id for p in t.partitions])
                if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                    pending.discard(t.name)
                    if node == min(side.nodes):
                        # the leader in fact (the placed one unless that broker was fenced)
                        side.leaders[t.name] = t.partitions[0].leader_id
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: node {node} shows no leader for {len(pending)} "
                                       f"topics (e.g. {seen}, placed on {place[seen[0]] if seen else '?'})")
                await asyncio.sleep(0.1)
    finally:
        side.release(node, conn)


async def _warm_coordinators(side: _Side, timeout: float) -> None:
    """FindCoordinator for a group and a transactional id until both are found: the first one
    makes a broker create ``__consumer_offsets``/``__transaction_state`` and load them, which
    scenarios must not see as errors of their own. Then one InitProducerId (see below)."""
    if ApiKey.FIND_COORDINATOR not in side.versions:
        return
    ver = min(side.versions[ApiKey.FIND_COORDINATOR][-1], 6)
    conn = await side.pool.get()
    try:
        for key_type in (0, 1):
            deadline = time.monotonic() + timeout
            while True:
                req = build(ApiKey.FIND_COORDINATOR, ver, key="kproto-conformance", key_type=key_type,
                            coordinator_keys=["kproto-conformance"])
                resp = await conn.request(req, ver)
                code = resp.coordinators[0].error_code if ver >= 4 else resp.error_code
                if code not in TRANSIENT_COORDINATOR_ERRORS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
        if ApiKey.INIT_PRODUCER_ID in side.versions:
            # a broker hands out producer id 0 first; taken here, no scenario's producer has it,
            # so the 0 Kafka answers as a default (DescribeTransactions of an unknown id) is
            # never taken for one of them
            ver = min(side.versions[ApiKey.INIT_PRODUCER_ID][-1],
                      request_codec(ApiKey.INIT_PRODUCER_ID).valid_versions[-1])
            await conn.request(build(ApiKey.INIT_PRODUCER_ID, ver, transactional_id=None,
                                     transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1), ver)
    finally:
        side.pool.put_nowait(conn)


async def _has_authorizer(side: _Side) -> bool:
    if ApiKey.DESCRIBE_ACLS not in side.versions:
        return False
    conn = await side.pool.get()
    try:
        ver = min(side.versions[ApiKey.DESCRIBE_ACLS][-1], request_codec(ApiKey.DESCRIBE_ACLS).valid_versions[-1])
        req = build(ApiKey.DESCRIBE_ACLS, ver, resource_type_filter=1, pattern_type_filter=1,
                    operation=1, permission_type=1)
        resp = await conn.request(req, ver)
        return resp.error_code != ErrorCode.SECURITY_DISABLED
    except Exception:  # noqa: BLE001 - no answer: no usable authorizer
        return False
    finally:
        side.pool.put_nowait(conn)


async def run_conformance(target: Address, reference: Address, *,
                          deviations: Optional[Deviations] = None,
                          scenarios: Optional[Sequence[Scenario]] = None,
                          select: Optional[Sequence[str]] = None,
                          concurrency: int = 16, timeout: float = 30.0,
                          run_id: Optional[str] = None, cluster: bool = False) -> Report:
    """Run the corpus (or ``scenarios``; ``select``: fnmatch patterns on scenario names)
    against ``target`` and ``reference`` and return the :class:`Report`. ``cluster``: both
    are bootstrap addresses of multi-broker clusters (requests routed as clients route them,
    node ids compared by role)."""
    scenarios = list(SCENARIOS if scenarios is None else scenarios)
    if select:
        scenarios = [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in select)]
    run_id = run_id or os.urandom(3).hex()
    tside = _Side("target", target, concurrency, timeout, cluster)
    rside = _Side("reference", reference, concurrency, timeout, cluster)
    try:
        await asyncio.gather(tside.start(), rside.start())
        if cluster:
            await asyncio.gather(tside.learn_nodes(), rside.learn_nodes())
        common = _common(tside.versions, rside.versions)
        report = Report(f"{target[0]}:{target[1]}", f"{reference[0]}:{reference[1]}",
                        tside.versions, rside.versions, deviations=deviations or Deviations())
        auth = await asyncio.gather(_has_authorizer(tside), _has_authorizer(rside))
        runs: List[Tuple[Scenario, int]] = []
        for s in scenarios:
            if s.needs_authorizer and not all(auth):
                report.skipped[s.name] = ("needs an authorizer on both brokers (target: %s, reference: %s)"
                                          % ("yes" if auth[0] else "no", "yes" if auth[1] else "no"))
                continue
            ref = rside.versions.get(s.api_key, range(0))
            codec = request_codec(s.api_key).valid_versions
            wanted = s.versions or codec
            ref_versions = [v for v in ref if v in codec and v in wanted]
            if not ref_versions:
                report.skipped[s.name] = f"the reference does not advertise {api_name(s.api_key)}"
                continue
            report.tested.add(s.api_key)
            tgt = tside.versions.get(s.api_key, range(0))
            for v in ref_versions:
                if v in tgt:
                    runs.append((s, v))
                elif (s.api_key, v) not in report.unsupported:
                    report.unsupported.append((s.api_key, v))
        specs: Dict[str, Any] = {}
        run_of: Dict[str, int] = {}
        for i, (s, v) in enumerate(runs):
            for t in s.topics:
                specs[f"kc{run_id}-{s.name}-v{v}-{t.suffix}"] = t
                run_of[f"kc{run_id}-{s.name}-v{v}-{t.suffix}"] = i
        await asyncio.gather(_create_topics(tside, specs, timeout, run_of),
                             _create_topics(rside, specs, timeout, run_of),
                             _warm_coordinators(tside, timeout), _warm_coordinators(rside, timeout))

        sem = asyncio.Semaphore(concurrency)
        t0 = int(time.time()) * 1000

        async def one(s: Scenario, v: int) -> None:
            prefix = f"kc{run_id}-{s.name}-v{v}"
            ctxs = [Context(s, v, prefix, common, side.topic_ids, side.node_id, t0) for side in (tside, rside)]
            async with sem:
                try:
                    t_out, r_out = await asyncio.gather(_drive(tside, s, ctxs[0]), _drive(rside, s, ctxs[1]))
                except MissingApi as exc:
                    report.skipped[s.name] = str(exc)
                    return
            _record(report, s, v, t_out, r_out)

        await asyncio.gather(*(one(s, v) for s, v in runs))
        report.normalised = tside.touched | rside.touched
        return report
    finally:
        await asyncio.gather(tside.close(), rside.close())


def _record(report: Report, s: Scenario, v: int, t_out: List[_Outcome], r_out: List[_Outcome]) -> None:
    """Compare the two transcripts call by call. Compared calls count in their own cell; a
    helper call counts (in the scenario's cell) only when one side failed it; a call only one
    side made is a ``<sequence>`` difference."""
    own = CallResult(s.name, s.api_key, v, s.name)
    report.results.append(own)
    for i in range(max(len(t_out), len(r_out))):
        t = t_out[i] if i < len(t_out) else None
        r = r_out[i] if i < len(r_out) else None
        if t is None or r is None or t.label != r.label:
            own.diffs.append(Diff(f"<sequence>[{i}]", t and t.label, r and r.label))
            break
        kit = [x.tree[KIT_ERROR] for x in (t, r) if isinstance(x.tree, dict) and KIT_ERROR in x.tree]
        if kit:
            own.diffs.append(Diff(f"{KIT_ERROR}[{i}]", t.tree, r.tree))
            break
        if _is_error(t.tree) or _is_error(r.tree):
            # a failed call (closed connection, undecodable answer) ends that side's run
            if t.tree != r.tree:
                res = own if not t.compare else CallResult(s.name, t.api_key, t.version, t.label)
                if res is not own:
                    report.results.append(res)
                res.diffs.append(Diff(f"<error {t.label}>" if res is own else "<error>",
                                      _error_text(t.tree), _error_text(r.tree)))
            break
        if t.compare:
            res = CallResult(s.name, t.api_key, t.version, t.label, compare(t.tree, r.tree))
            report.results.append(res)


def _has_code(tree: Any, code: int) -> bool:
    """Whether an ``error_code`` anywhere in the answer ``tree`` is ``code``."""
    if isinstance(tree, dict):
        return tree.get("error_code") == code or any(_has_code(v, code) for v in tree.values())
    if isinstance(tree, list):
        return any(_has_code(v, code) for v in tree)
    return False


def _error_text(tree: Any) -> Any:
    return tree.get("<error>", "answered") if isinstance(tree, dict) else "answered"


def _is_error(tree: Any) -> bool:
    return isinstance(tree, dict) and "<error>" in tree
