"""The KRaft controller quorum on real sockets: elections, Raft over the node network, the
controller's requests over real connections, abrupt failover, rejoin, and check-quorum under
an isolated leader. Real clock, small Raft timeouts."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Optional

import kproto
from kproto.broker.cluster.controller_node import (CONTROLLER_APIS, RAFT_APIS, ControllerCore, ControllerNode,
                                           start_quorum)
from kproto.broker.cluster.network import NodeNetwork
from kproto.broker.cluster.raft import DESCRIBE_QUORUM, METADATA_TOPIC, RaftConfig
from kproto.broker.timer import FakeClock
from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.storage import read_internal

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
RAFT = RaftConfig(election_timeout_ms=250, fetch_timeout_ms=500, election_backoff_max_ms=250,
                  request_timeout_ms=400, retry_backoff_ms=20, fetch_max_wait_ms=200)


async def wait_for(cond: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    """Poll ``cond`` until it is truthy (generous deadline: a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def quorum(tmp_path, ids: list[int], raft: RaftConfig = RAFT
                 ) -> AsyncIterator[tuple[dict[int, ControllerNode], NodeNetwork]]:
    network = NodeNetwork()
    nodes = {n: ControllerNode(n, ids, tmp_path / f"controller-{n}", cluster_id=CLUSTER_ID,
                               network=network, raft_config=raft) for n in ids}
    try:
        await start_quorum(nodes.values())
        yield nodes, network
    finally:
        for node in nodes.values():
            await node.stop()
        await network.close()


def one_leader(nodes: dict[int, ControllerNode],
               among: Optional[set[int]] = None) -> Optional[ControllerNode]:
    """The leader once exactly one node (of ``among``) leads and every running one of them
    follows it in its epoch."""
    group = [n for n in nodes.values() if n.running and (among is None or n.node_id in among)]
    ls = [n for n in group if n.is_leader]
    if len(ls) != 1:
        return None
    lead = ls[0]
    ok = all(n.replica.leader_id == lead.node_id and n.replica.epoch == lead.replica.epoch
             for n in group)
    return lead if ok else None


async def connect(node: ControllerNode) -> Connection:
    host, port = node.bootstrap.rsplit(":", 1)
    return await Connection.open(host, int(port), connect_timeout=5.0)


async def register_broker(conn: Connection, broker_id: int) -> Any:
    R = request_codec(ApiKey.BROKER_REGISTRATION).cls
    return await conn.request(R(
        broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=Uuid(bytes([broker_id] * 16)),
        listeners=[R.Listener(name="PLAINTEXT", host="localhost", port=9092 + broker_id,
                              security_protocol=0)],
        features=[R.Feature(name="metadata.version", min_supported_version=1,
                            max_supported_version=21)],
        rack=None, log_dirs=[Uuid(bytes([100 + broker_id] * 16))]), 3, timeout=10)


async def heartbeat(conn: Connection, broker_id: int, epoch: int, offset: int) -> Any:
    Q = request_codec(ApiKey.BROKER_HEARTBEAT).cls
    return await conn.request(Q(broker_id=broker_id, broker_epoch=epoch,
                                current_metadata_offset=offset), 1, timeout=10)


async def create_topic(conn: Connection, name: str, partitions: int = 2) -> Any:
    Q = request_codec(ApiKey.CREATE_TOPICS).cls
    resp = await conn.request(Q(topics=[Q.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=5000, validate_only=False), 7, timeout=10)
    return resp.topics[0]


async def describe_quorum(conn: Connection) -> Any:
    Q = request_codec(DESCRIBE_QUORUM).cls
    resp = await conn.request(Q(topics=[Q.TopicData(topic_name=METADATA_TOPIC, partitions=[
        Q.PartitionData(partition_index=0)])]), 2, timeout=10)
    return resp.topics[0].partitions[0]


def committed_batches(node: ControllerNode) -> list[tuple[int, int, bytes]]:
    """(base offset, leader epoch, bytes) of every batch below the node's high watermark."""
    hw = node.replica.high_watermark
    return [(b.base_offset, b.partition_leader_epoch, bytes(b.buffer))
            for b in node.replica.log.batches() if b.last_offset < hw]


def test_single_controller_serves_registration_and_topics_and_writes_a_kafka_log_dir(tmp_path) -> None:
    async def main() -> None:
        async with quorum(tmp_path, [1]) as (nodes, _):
            node = nodes[1]
            await wait_for(lambda: node.is_leader, "the only voter to lead")
            conn = await connect(node)
            try:
                # ApiVersions (negotiated on connect) lists what a controller serves
                assert set(conn.versions.broker) == {*RAFT_APIS, *CONTROLLER_APIS,
                                                     ApiKey.API_VERSIONS}
                reg = await register_broker(conn, 7)
                assert reg.error_code == 0
                # the broker epoch is the RegisterBrokerRecord's offset, answered once committed
                assert 0 < reg.broker_epoch < node.replica.high_watermark
                hb = await heartbeat(conn, 7, reg.broker_epoch, node.replica.high_watermark)
                assert hb.error_code == 0
                hb = await heartbeat(conn, 7, reg.broker_epoch, node.replica.high_watermark)
                assert hb.error_code == 0 and hb.is_fenced is False
                topic = await create_topic(conn, "orders", partitions=2)
                assert topic.error_code == 0, topic
                p = await describe_quorum(conn)
                assert (p.error_code, p.leader_id) == (0, 1)
                assert p.high_watermark == node.replica.log.log_end_offset
            finally:
                await conn.close()
        # stopped cleanly: the folder is a Kafka __cluster_metadata-0 partition
        part = os.path.join(tmp_path, "controller-1", "__cluster_metadata-0")
        tables = read_internal(part)
        assert [r["record"]["broker_id"] for r in tables["RegisterBrokerRecord"].to_pylist()] == [7]
        assert [r["record"]["name"] for r in tables["TopicRecord"].to_pylist()] == ["orders"]
        parts = tables["PartitionRecord"].to_pylist()
        assert sorted(r["record"]["partition_id"] for r in parts) == [0, 1]
        assert all(r["record"]["replicas"] == [7] for r in parts)
        with open(os.path.join(tmp_path, "controller-1", "meta.properties")) as f:
            meta = f.read()
        assert "node.id=1" in meta and f"cluster.id={CLUSTER_ID}" in meta
        with open(os.path.join(part, "quorum-state")) as f:
            state = json.load(f)
        assert state["leaderId"] == 1 and state["leaderEpoch"] >= 1
        out = subprocess.run([sys.executable, "-m", "kproto", "logdir", "--format", "json",
                              os.path.join(tmp_path, "controller-1")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "__cluster_metadata" in out.stdout

    asyncio.run(main())


def test_three_controllers_elect_fail_over_rejoin_and_survive_an_isolated_leader(tmp_path) -> None:
    async def main() -> None:
        ids = [1, 2, 3]
        async with quorum(tmp_path, ids) as (nodes, network):
            lead = await wait_for(lambda: one_leader(nodes), "one leader of three")
            conns: list[Connection] = []
            try:
                conn = await connect(lead)
                conns.append(conn)
                reg = await register_broker(conn, 7)
                assert reg.error_code == 0
                end = lead.replica.log.log_end_offset

                async def voters_caught_up() -> Any:
                    p = await describe_quorum(conn)
                    return p if p.error_code == 0 and p.high_watermark == end and \
                        [(v.replica_id, v.log_end_offset) for v in p.current_voters] == \
                        [(n, end) for n in ids] else None
                deadline = time.monotonic() + 15
                while (p := await voters_caught_up()) is None:
                    assert time.monotonic() < deadline, "voters never caught up"
                    await asyncio.sleep(0.05)
                assert (p.leader_id, p.leader_epoch) == (lead.node_id, lead.replica.epoch)
                # a follower is no controller
                follower = next(n for n in nodes.values() if n is not lead)
                fconn = await connect(follower)
                conns.append(fconn)
                assert (await register_broker(fconn, 8)).error_code == ErrorCode.NOT_CONTROLLER

                # the leader dies: the others elect one of them in a higher epoch
                committed = committed_batches(lead)
                old, old_epoch = lead, lead.replica.epoch
                started = time.monotonic()
                await old.stop(abrupt=True)
                lead = await wait_for(lambda: one_leader(nodes), "a new leader after the kill")
                took = time.monotonic() - started
                assert lead is not old and lead.replica.epoch > old_epoch
                assert took < 6.0, took     # ~election timeout + backoff; slack for a loaded machine
                assert committed_batches(lead)[:len(committed)] == committed
                conn = await connect(lead)
                conns.append(conn)
                reg8 = await register_broker(conn, 8)
                assert reg8.error_code == 0 and reg8.broker_epoch > reg.broker_epoch

                # the old leader comes back on its data dir and catches up as a follower
                await old.start()

                def all_same() -> bool:
                    ld = one_leader(nodes)
                    if ld is None or ld.replica.high_watermark != ld.replica.log.log_end_offset:
                        return False
                    logs = [committed_batches(n) for n in nodes.values()]
                    return all(n.replica.high_watermark == ld.replica.high_watermark
                               for n in nodes.values()) and logs[0] == logs[1] == logs[2]
                await wait_for(all_same, "the restarted node to catch up")
                assert not old.is_leader and old.replica.leader_id == lead.node_id
                assert committed_batches(old)[:len(committed)] == committed

                # the leader cut off from both others resigns (check-quorum); they elect another
                iso, iso_epoch = lead, lead.replica.epoch
                network.isolate(iso.node_id)
                rest = set(ids) - {iso.node_id}
                await wait_for(lambda: not iso.replica.is_leader, "the isolated leader to resign")
                other = await wait_for(lambda: one_leader(nodes, rest), "a leader of the majority")
                assert other.replica.epoch > iso_epoch
                network.heal()
                await wait_for(lambda: one_leader(nodes), "one leader after healing")
                await wait_for(all_same, "the same log everywhere after healing")
            finally:
                for c in conns:
                    await c.close()

    asyncio.run(main())


def test_graceful_stop_hands_leadership_over_at_once(tmp_path) -> None:
    # followers that lost their leader silently would wait the whole fetch timeout (10 s
    # here) before standing; EndQuorumEpoch from a leader stopping gracefully makes them
    # stand after the election backoff
    slow_to_notice = RaftConfig(election_timeout_ms=250, fetch_timeout_ms=10_000,
                                election_backoff_max_ms=250, request_timeout_ms=400,
                                retry_backoff_ms=20, fetch_max_wait_ms=200)

    async def main() -> None:
        async with quorum(tmp_path, [1, 2, 3], slow_to_notice) as (nodes, _):
            old = await wait_for(lambda: one_leader(nodes), "one leader of three")
            old_epoch = old.replica.epoch
            started = time.monotonic()
            await old.stop()
            lead = await wait_for(lambda: one_leader(nodes), "a leader after the handover",
                                  timeout=8.0)
            assert lead is not old and lead.replica.epoch > old_epoch
            assert time.monotonic() - started < 8.0
            # its quorum-state says it left as a resigned leader of its epoch, log closed
            with open(os.path.join(old.data_dir, "__cluster_metadata-0", "quorum-state")) as f:
                assert json.load(f)["leaderEpoch"] == old_epoch

    asyncio.run(main())


class _Channel:
    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.closed: Optional[str] = None

    def respond(self, frame: Optional[bytes]) -> None:
        if frame is not None:
            self.frames.append(frame)

    def close(self, reason: str) -> None:
        self.closed = reason


class _NoNetwork:
    def send(self, *args: Any) -> None:
        raise AssertionError("a single voter sends nothing")


def _frame(api_key: int, version: int, body: Any, cid: int = 5) -> bytes:
    return kproto.encode_request(kproto.RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=cid,
        client_id="t"), body)[4:]


def test_controller_core_dispatch_sans_io(tmp_path) -> None:
    clock = FakeClock(1_000)
    core = ControllerCore(1, [1], str(tmp_path / "c1"), cluster_id=CLUSTER_ID,
                          transport=_NoNetwork(), raft_config=RAFT, clock=clock)
    for _ in range(100):          # the only voter leads once its LeaderChange is committed
        if core.controller.is_active:
            break
        clock.advance(10)
        core.advance_clock()
    assert core.replica.is_leader and core.controller.is_active

    ch = _Channel()
    core.handle(ch, _frame(ApiKey.API_VERSIONS, 3, kproto.request(ApiKey.API_VERSIONS).cls(
        client_software_name="t", client_software_version="1")))
    _, body = kproto.decode_response(ch.frames[-1], ApiKey.API_VERSIONS, 3, size_prefix=True)
    advertised = {a.api_key: (a.min_version, a.max_version) for a in body.api_keys}
    assert advertised == core.versions
    assert set(advertised) == {*RAFT_APIS, *CONTROLLER_APIS, ApiKey.API_VERSIONS}
    limits = {**RAFT_APIS, **CONTROLLER_APIS, ApiKey.API_VERSIONS: (0, 5)}
    assert all(limits[k][0] <= lo <= hi <= limits[k][1] for k, (lo, hi) in advertised.items())
    # v5: a client that meant another cluster is told to bootstrap again, as by a broker
    for cluster, code in [(CLUSTER_ID, 0), ("another-cluster-id-00", ErrorCode.REBOOTSTRAP_REQUIRED)]:
        core.handle(ch, _frame(ApiKey.API_VERSIONS, 5, kproto.request(ApiKey.API_VERSIONS).cls(
            client_software_name="t", client_software_version="1", cluster_id=cluster, node_id=1)))
        _, body = kproto.decode_response(ch.frames[-1], ApiKey.API_VERSIONS, 5, size_prefix=True)
        assert body.error_code == code and bool(body.api_keys) == (code == 0)

    # KIP-511: ApiVersions too new gets a v0 answer with our range
    frame = bytearray(_frame(ApiKey.API_VERSIONS, 3, kproto.request(ApiKey.API_VERSIONS).cls()))
    frame[2:4] = (99).to_bytes(2, "big")
    core.handle(ch, bytes(frame))
    _, body = kproto.decode_response(ch.frames[-1], ApiKey.API_VERSIONS, 0, size_prefix=True)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(a.api_key, a.max_version) for a in body.api_keys] == [(18, advertised[18][1])]

    # DescribeQuorum goes to the Raft replica
    Q = kproto.request(DESCRIBE_QUORUM).cls
    core.handle(ch, _frame(DESCRIBE_QUORUM, 2, Q(topics=[Q.TopicData(
        topic_name=METADATA_TOPIC, partitions=[Q.PartitionData(partition_index=0)])])))
    _, body = kproto.decode_response(ch.frames[-1], DESCRIBE_QUORUM, 2, size_prefix=True)
    assert body.topics[0].partitions[0].leader_id == 1
    assert not ch.closed

    # what a controller does not serve, or cannot parse, closes the connection
    for bad in (_frame(ApiKey.METADATA, 12, kproto.request(ApiKey.METADATA).cls(topics=None)),
                _frame(ApiKey.BROKER_HEARTBEAT, 1, kproto.request(ApiKey.BROKER_HEARTBEAT).cls())[:-3],
                b"\x00"):
        ch = _Channel()
        core.handle(ch, bad)
        assert ch.closed and not ch.frames, bad
    core.close()
