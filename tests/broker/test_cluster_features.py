"""Feature flags in kproto's cluster: finalized in the metadata log (FeatureLevelRecords the
controller writes), advertised by every broker and by the controller; UpdateFeatures and
DescribeQuorum forwarded to the active controller; kproto's admin client over them."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kproto.broker.features import default_levels, supported_features
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.connection import Connection
from kproto.client.protocol import BrokerError
from kproto.codecs import request as request_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.storage.metadata_image import RecordType, decode_metadata_record
from kproto.testing import ClusterThread

API_VERSIONS = request_codec(ApiKey.API_VERSIONS).cls(client_software_name="t", client_software_version="1")


def ask(host: str, port: int, body: Any, version: int) -> Any:
    async def go() -> Any:
        async with await Connection.open(host, port) as conn:
            return await conn.request(body, version)
    return asyncio.run(go())


def nodes(cluster: ClusterThread) -> dict[int, tuple[str, int]]:
    """Every running node's (host, port): brokers and controllers."""
    return cluster.inspect(lambda c: {**{n: (b.config.host, b.config.port) for n, b in c.brokers.items() if b.running},
                                      **{n: (k.host, k.port) for n, k in c.controllers.items() if k.running}})


def features(resp: Any) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    return ({f.name: f.max_version_level for f in resp.finalized_features},
            {f.name: (f.min_version, f.max_version) for f in resp.supported_features})


def feature_records(cluster: ClusterThread) -> list[tuple[str, int]]:
    """The FeatureLevelRecords of the active controller's metadata log, in order."""
    def read(c: Any) -> list[tuple[str, int]]:
        ctrl = c.controllers[c.active_controller()]
        out = []
        for batch in ctrl.replica.log.batches():
            for rec in [] if batch.is_control else batch.records():
                rtype, _, obj = decode_metadata_record(rec.value)
                if rtype == RecordType.FEATURE_LEVEL:
                    out.append((obj.name, obj.feature_level))
        return out
    return cluster.inspect(read)


@pytest.mark.kafka_cluster(brokers=2, controllers=1)
def test_features_in_the_metadata_log_and_updates_through_any_broker(kafka_cluster: ClusterThread) -> None:
    # every broker and the controller answer the bootstrap levels
    for node, (host, port) in nodes(kafka_cluster).items():
        resp = ask(host, port, API_VERSIONS, 4)
        assert features(resp) == (default_levels(), supported_features()), node
        assert resp.finalized_features_epoch >= 0
    assert feature_records(kafka_cluster)[:len(default_levels())] == \
        sorted(default_levels().items(), key=lambda x: x[0] != "metadata.version")

    async def run() -> None:
        async with Cluster(kafka_cluster.bootstrap) as client:
            admin = Admin(client)
            before = await admin.describe_features()
            assert before.finalized == default_levels()
            await admin.update_features({"group.version": 0}, upgrade_type="safe_downgrade", validate_only=True)
            with pytest.raises(BrokerError) as err:
                await admin.update_features({"group.version": 2})
            assert err.value.code == ErrorCode.INVALID_UPDATE_VERSION
            assert "Local controller 3001 only supports versions 0-1" in str(err.value)
            assert (await admin.describe_features()).finalized == default_levels()
            await admin.update_features({"group.version": 0}, upgrade_type="safe_downgrade")
    asyncio.run(run())
    assert feature_records(kafka_cluster)[-1] == ("group.version", 0)
    wanted = {n: v for n, v in default_levels().items() if n != "group.version"}
    kafka_cluster.wait_for(lambda c: all(b.core.image.features == wanted for b in c.brokers.values()),
                           what="every broker without group.version")
    for node, (host, port) in nodes(kafka_cluster).items():
        finalized, _ = features(ask(host, port, API_VERSIONS, 4))
        assert finalized == wanted, node


@pytest.mark.kafka_cluster(brokers=2, controllers=1)
def test_describe_quorum_forwarded_to_the_controller(kafka_cluster: ClusterThread) -> None:
    req = request_codec(ApiKey.DESCRIBE_QUORUM).cls
    body = req(topics=[req.TopicData(topic_name="__cluster_metadata", partitions=[req.PartitionData(partition_index=0)])])
    controller = kafka_cluster.active_controller()
    chost, cport = nodes(kafka_cluster)[controller]
    for node, (host, port) in nodes(kafka_cluster).items():
        resp = ask(host, port, body, 2)
        p = resp.topics[0].partitions[0]
        assert (p.error_code, p.leader_id) == (0, controller), node
        assert [v.replica_id for v in p.current_voters] == [controller]
        assert sorted(o.replica_id for o in p.observers) == [1, 2]
        assert [(n.node_id, [(lst.name, lst.host, lst.port) for lst in n.listeners]) for n in resp.nodes] == \
            [(controller, [("CONTROLLER", chost, cport)])]


@pytest.mark.kafka_cluster(brokers=1, controllers=3)
def test_controllers_register_and_updates_wait_for_them(kafka_cluster: ClusterThread) -> None:
    # each controller registers itself with the active one (RegisterControllerRecord), its
    # controller listener and supported features
    def registered(c: Any) -> bool:
        return all(sorted(k.controller.committed.controllers) == sorted(c.controllers)
                   for k in c.controllers.values())
    kafka_cluster.wait_for(registered, what="every controller registered")
    regs = kafka_cluster.inspect(lambda c: {n: (r.listeners[0].name, r.listeners[0].port, r.features)
                                            for n, r in c.controllers[3001].controller.committed.controllers.items()})
    ports = kafka_cluster.inspect(lambda c: {n: k.port for n, k in c.controllers.items()})
    assert regs == {n: ("CONTROLLER", ports[n], supported_features()) for n in ports}
    host, port = nodes(kafka_cluster)[1]
    uf = request_codec(ApiKey.UPDATE_FEATURES).cls
    resp = ask(host, port, uf(timeout_ms=5000, validate_only=True, feature_updates=[
        uf.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)]), 2)
    assert (resp.error_code, resp.error_message) == (0, None)
    # UnregisterController, forwarded: kproto's metadata.version is below 4.4-IV2
    uc = request_codec(ApiKey.UNREGISTER_CONTROLLER).cls
    standby = min(set(ports) - {kafka_cluster.active_controller()})
    resp = ask(host, port, uc(controller_id=standby), 0)
    assert (resp.error_code, resp.error_message) == (
        ErrorCode.UNSUPPORTED_VERSION, "The current MetadataVersion is too old to support controller unregistration.")


#: What Kafka 4.4.0's controller listener serves and kproto's controllers do not: SASL (their
#: listener is plaintext), DescribeAcls, DescribeConfigs, delegation tokens asked directly
#: (a broker forwards them in an Envelope), DescribeUserScramCredentials, DescribeCluster,
#: AssignReplicasToDirs, the KIP-853 voter APIs (static voters).
NOT_ON_KPROTO_CONTROLLERS = {17, 29, 32, 36, 38, 39, 40, 41, 50, 60, 73, 80, 81, 82}


def controller_versions(host: str, port: int) -> tuple[dict[int, tuple[int, int]], Any]:
    resp = ask(host, port, API_VERSIONS, 4)
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}, resp


def test_controller_api_versions_are_a_controller_listeners(kafka_cluster: ClusterThread, apache_kafka_cluster: Any) -> None:
    ours, resp = controller_versions(*nodes(kafka_cluster)[kafka_cluster.active_controller()])
    kafka_id = apache_kafka_cluster.controller_ids[0]
    theirs, kresp = controller_versions(apache_kafka_cluster.host, apache_kafka_cluster.nodes[kafka_id].controller_port)
    assert set(ours) == set(theirs) - NOT_ON_KPROTO_CONTROLLERS
    # Kafka 4.4's ranges exactly (Raft's Fetch 4-18 too)
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}
    # and the features a controller answers: kproto's, as the brokers'
    assert features(resp) == (default_levels(), supported_features())
    assert {f.name for f in kresp.supported_features} >= set(supported_features())



def raft_fetch(host: str, port: int, version: int, epoch: int = -1) -> tuple[int, list[tuple[int, bool]], int]:
    """An observer's Fetch of the metadata log from offset 0 at ``version`` (``epoch``: the
    leader epoch it believes current): the top-level error, each partition's (error, whether
    records came), and the leader epoch answered (-1: none)."""
    from kproto.broker.cluster.raft import METADATA_TOPIC, METADATA_TOPIC_ID

    cls = request_codec(ApiKey.FETCH).cls
    part = cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 16)
    if version >= 9:
        part.current_leader_epoch = epoch
    if version >= 12:
        part.last_fetched_epoch = 0
    if version >= 5:
        part.log_start_offset = -1
    topic = cls.FetchTopic(partitions=[part])
    if version >= 13:
        topic.topic_id = METADATA_TOPIC_ID
    else:
        topic.topic = METADATA_TOPIC
    body = cls(max_wait_ms=0, min_bytes=0, topics=[topic], max_bytes=1 << 20)
    if version >= 7:
        body.session_epoch = -1
    if version < 15:
        body.replica_id = -1
    resp = ask(host, port, body, version)
    parts = [p for t in resp.responses for p in t.partitions]
    return (resp.error_code, [(p.error_code, bool(p.records)) for p in parts],
            parts[0].current_leader.leader_epoch if parts and version >= 12 else -1)


def test_raft_fetch_at_every_version_answers_as_kafkas_controller(kafka_cluster: ClusterThread,
                                                                   apache_kafka_cluster: Any) -> None:
    """Fetch v4-18 on the controller listener: before v13 (no topic id) INVALID_REQUEST and no
    partitions (before v7 the answer has no error field: empty), from v13 the records."""
    ours = nodes(kafka_cluster)[kafka_cluster.active_controller()]
    node = apache_kafka_cluster.nodes[apache_kafka_cluster.controller_ids[0]]
    theirs_at = (apache_kafka_cluster.host, node.controller_port)
    our_epoch, their_epoch = raft_fetch(*ours, 18)[2], raft_fetch(*theirs_at, 18)[2]
    for version in range(4, 19):
        theirs = raft_fetch(*theirs_at, version, their_epoch)[:2]
        assert raft_fetch(*ours, version, our_epoch)[:2] == theirs, version
        assert theirs == ((ErrorCode.INVALID_REQUEST if version >= 7 else 0, []) if version < 13
                          else (0, [(0, True)])), version
