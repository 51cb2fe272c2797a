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

from kproto.broker.controller_node import CONTROLLER_APIS, RAFT_APIS, ControllerNode, start_quorum
from kproto.broker.network import NodeNetwork
from kproto.broker.raft import DESCRIBE_QUORUM, METADATA_TOPIC, RaftConfig
from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
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
async def quorum(tmp_path, ids: list[int]) -> AsyncIterator[tuple[dict[int, ControllerNode], NodeNetwork]]:
    network = NodeNetwork()
    nodes = {n: ControllerNode(n, ids, tmp_path / f"controller-{n}", cluster_id=CLUSTER_ID,
                               network=network, raft_config=RAFT) for n in ids}
    try:
        await start_quorum(nodes.values())
        yield nodes, network
    finally:
        for node in nodes.values():
            await node.stop()
        await network.close()


def leaders(nodes: dict[int, ControllerNode]) -> list[ControllerNode]:
    return [n for n in nodes.values() if n.running and n.is_leader]


def one_leader(nodes: dict[int, ControllerNode]) -> Optional[ControllerNode]:
    """The leader once exactly one node leads and every running node follows it."""
    ls = leaders(nodes)
    if len(ls) != 1:
        return None
    lead = ls[0]
    ok = all(n.replica.leader_id == lead.node_id and n.replica.epoch == lead.replica.epoch
             for n in nodes.values() if n.running)
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


def committed_log(node: ControllerNode) -> list[tuple[int, int, bytes]]:
    """(offset, epoch, batch bytes) of the batches below the node's high watermark."""
    hw = node.replica.high_watermark
    out = []
    for b in node.replica.log.read_batches(0) if hasattr(node.replica.log, "read_batches") else []:
        if b.last_offset < hw:
            out.append((b.base_offset, b.partition_leader_epoch, bytes(b.raw)))
    return out


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
