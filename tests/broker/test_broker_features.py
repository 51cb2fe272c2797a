"""Feature flags on the single broker (ApiVersions v3+, UpdateFeatures) and its DescribeQuorum,
as Kafka 4.4.0's combined node answers them."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker import features as feat
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.broker.timer import FakeClock
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client

UF = kproto.request(K.UPDATE_FEATURES).cls
DQ = kproto.request(K.DESCRIBE_QUORUM).cls
PREFIX = "The update failed for all features since the following feature had an error: "


def make_core(path):
    clock = FakeClock(1_000)
    return BrokerCore(str(path), BrokerConfig(port=9092), clock=clock,
                      wall_clock=lambda: 1_700_000_000_000 + clock.now_ms())


@pytest.fixture
def core(tmp_path):
    c = make_core(tmp_path / "data")
    yield c
    c.close()


def versions(client, version=4):
    resp = client.call(K.API_VERSIONS, version, client_software_name="t", client_software_version="1")
    return ({f.name: (f.min_version, f.max_version) for f in resp.supported_features},
            {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features},
            resp.finalized_features_epoch)


def update(client, *updates, version=2, validate_only=False):
    fields = {"validate_only": validate_only} if version >= 1 else {}
    return client.call(K.UPDATE_FEATURES, version, timeout_ms=1000, **fields, feature_updates=[
        UF.FeatureUpdateKey(feature=f, max_version_level=level,
                            **({"upgrade_type": kind} if version >= 1 else {"allow_downgrade": kind != 1}))
        for f, level, kind in updates])


def test_registry_records_kafka_4_4_and_what_kproto_finalizes():
    # Apache Kafka 4.4.0's answer (a freshly formatted combined node, ApiVersions v4)
    assert {f.name: f.kafka_supported for f in feat.FEATURES.values()} == {
        "metadata.version": (7, 33), "kraft.version": (0, 1), "group.version": (0, 1),
        "transaction.version": (0, 2), "share.version": (0, 2), "streams.version": (0, 1),
        "eligible.leader.replicas.version": (0, 1)}
    assert {f.name: f.kafka_level for f in feat.FEATURES.values()} == {
        "metadata.version": 33, "kraft.version": 1, "group.version": 1, "transaction.version": 2,
        "share.version": 2, "streams.version": 1, "eligible.leader.replicas.version": 1}
    # kproto: only what it implements
    assert feat.default_levels() == {"metadata.version": 21, "group.version": 1, "share.version": 2,
                                     **({"transaction.version": feat.TRANSACTION_VERSION_LEVEL}
                                        if feat.TRANSACTION_VERSION_LEVEL else {})}
    assert feat.supported_features()["share.version"] == (0, 2)
    assert "streams.version" not in feat.supported_features()


def test_update_order_is_kafkas_hash_map_order():
    # Kafka 4.4.0 lists its supported features in its HashMap's order: the same order decides
    # which failing update of a request its controller reports
    kafka_order = ["group.version", "kraft.version", "metadata.version", "share.version",
                   "streams.version", "transaction.version", "eligible.leader.replicas.version"]
    assert feat._java_hash_order(sorted(kafka_order)) == kafka_order


def test_api_versions_features(core):
    client = Client(core)
    supported, finalized, epoch = versions(client)
    assert supported == feat.supported_features()
    assert finalized == {n: (v, v) for n, v in feat.default_levels().items()}
    # the offset of the last FeatureLevelRecord in the metadata log: a LeaderChange first,
    # then one record per feature
    assert epoch == len(feat.default_levels())
    # v3: a range starting at 0 is left out, as Kafka does
    supported3, finalized3, _ = versions(client, 3)
    assert supported3 == {"metadata.version": (21, 21)} and finalized3 == finalized
    resp = client.call(K.API_VERSIONS, 2)
    assert resp.supported_features == [] and resp.finalized_features == []


def test_update_features_validate_only_then_downgrade_persists(tmp_path):
    core = make_core(tmp_path / "d")
    client = Client(core)
    _, before, epoch = versions(client)
    resp = update(client, ("group.version", 0, feat.SAFE_DOWNGRADE), validate_only=True)
    assert (resp.error_code, resp.error_message) == (0, None)
    assert versions(client)[1:] == (before, epoch)
    resp = update(client, ("group.version", 0, feat.SAFE_DOWNGRADE), version=1)
    assert resp.error_code == 0
    assert [(r.feature, r.error_code, r.error_message) for r in resp.results] == [("group.version", 0, "NONE")]
    _, after, epoch2 = versions(client)
    # the epoch is the offset of the record written, the metadata log's end before it
    assert "group.version" not in after and epoch2 == core.metadata.log.log_end_offset - 1 > epoch
    core.close()
    again = make_core(tmp_path / "d")  # the levels and epoch survive a restart
    client = Client(again)
    assert versions(client)[1:] == (after, epoch2)
    assert update(client, ("group.version", 1, feat.UPGRADE)).error_code == 0
    assert versions(client)[1:] == (before, again.metadata.log.log_end_offset - 1)
    again.close()


@pytest.mark.parametrize("updates, reason", [
    ([("kproto.unknown", 1, 1)], "Invalid update version 1 for feature kproto.unknown. "
                                 "Local controller 1 does not support this feature."),
    ([("kproto.unknown", 0, 1)], "Invalid update version 0 for feature kproto.unknown. "
                                 "Feature kproto.unknown not found."),
    ([("group.version", 2, 1)], "Invalid update version 2 for feature group.version. "
                                "Local controller 1 only supports versions 0-1"),
    ([("metadata.version", 33, 1)], "Invalid update version 33 for feature metadata.version. "
                                    "Local controller 1 only supports versions 21"),
    ([("group.version", -1, 1)], "Invalid update version -1 for feature group.version. "
                                 "A feature version cannot be less than 0."),
    ([("group.version", 0, 1)], "Invalid update version 0 for feature group.version. Can't downgrade "
                                "the version of this feature without setting the upgrade type to "
                                "either safe or unsafe downgrade."),
    ([("group.version", 1, 0)], "Invalid update version 1 for feature group.version. "
                                "The controller does not support the given upgrade type."),
    ([("group.version", 1, 5)], "Invalid update version 1 for feature group.version. "
                                "The controller does not support the given upgrade type."),
    ([("kraft.version", 0, 2)], "Invalid update version 0 for feature kraft.version. "
                                "Can't downgrade the version of this feature."),
    ([("streams.version", 1, 1), ("group.version", 1, 1)],
     "Invalid update version 1 for feature streams.version. Local controller 1 does not support this feature."),
])
def test_update_features_errors(core, updates, reason):
    client = Client(core)
    before = versions(client)
    for version in (1, 2):
        resp = update(client, *updates, version=version)
        assert (resp.error_code, resp.error_message, resp.results) == (E.INVALID_UPDATE_VERSION, PREFIX + reason, [])
    assert versions(client) == before


def test_update_features_v0_reads_no_downgrade(core):
    # Kafka 4.4 takes a v0 update as an upgrade, allow_downgrade or not
    client = Client(core)
    resp = update(client, ("group.version", 0, feat.SAFE_DOWNGRADE), version=0)
    assert resp.error_code == E.INVALID_UPDATE_VERSION and "without setting the upgrade type" in resp.error_message
    assert versions(client)[1]["group.version"] == (1, 1)


def test_describe_quorum_as_a_combined_node(core):
    client = Client(core)
    meta = [DQ.TopicData(topic_name="__cluster_metadata", partitions=[DQ.PartitionData(partition_index=0)])]
    end = core.metadata.log.log_end_offset
    for v in (0, 1, 2):
        resp = client.call(K.DESCRIBE_QUORUM, v, topics=meta)
        p = resp.topics[0].partitions[0]
        assert (resp.error_code, p.error_code, p.leader_id, p.leader_epoch, p.high_watermark) == (0, 0, 1, core.metadata.replica.epoch, end)
        assert [(r.replica_id, r.log_end_offset) for r in p.current_voters] == [(1, end)] and p.observers == []
        assert (p.current_voters[0].last_fetch_timestamp > 0) == (v >= 1)
    assert (resp.error_message, p.error_message) == ("", "")
    assert p.current_voters[0].replica_directory_id == core.logs.directory_id
    assert [(n.node_id, [(lst.name, lst.host, lst.port) for lst in n.listeners]) for n in resp.nodes] == \
        [(1, [("CONTROLLER", "127.0.0.1", 9092)])]
    # not exactly the metadata partition: every partition asked is unknown, no nodes
    two = [DQ.TopicData(topic_name="__cluster_metadata", partitions=[
        DQ.PartitionData(partition_index=0), DQ.PartitionData(partition_index=1)])]
    resp = client.call(K.DESCRIBE_QUORUM, 2, topics=two)
    assert [(p.partition_index, p.error_code, p.leader_id, p.high_watermark, p.error_message)
            for p in resp.topics[0].partitions] == [
        (0, E.UNKNOWN_TOPIC_OR_PARTITION, 0, 0, "This server does not host this topic-partition."),
        (1, E.UNKNOWN_TOPIC_OR_PARTITION, 0, 0, "This server does not host this topic-partition.")]
    assert resp.nodes == []


def test_registry_and_admin_client_against_apache_kafka(apache_kafka):
    """The registry's Kafka 4.4.0 columns are what Apache Kafka 4.4.0 answers, read with
    kproto's admin client; its update_features reaches Kafka's checks."""
    import asyncio

    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import BrokerError

    async def run():
        async with Cluster(apache_kafka.bootstrap) as cluster:
            admin = Admin(cluster)
            described = await admin.describe_features()
            await admin.update_features({"group.version": 1}, validate_only=True)
            with pytest.raises(BrokerError) as err:
                await admin.update_features({"group.version": 0}, validate_only=True)
            return described, err.value
    described, error = asyncio.run(run())
    assert described.supported == {f.name: f.kafka_supported for f in feat.FEATURES.values()}
    assert described.finalized == {f.name: f.kafka_level for f in feat.FEATURES.values()}
    assert described.finalized_epoch >= 0
    assert error.code == E.INVALID_UPDATE_VERSION and "without setting the upgrade type" in str(error)


def test_share_version_is_supported_and_updatable_by_a_cluster_controller():
    # share groups are served by the cluster too: a controller upgrades and downgrades share.version
    assert feat.supported_features()["share.version"] == (0, 2)
    assert feat.default_levels()["share.version"] == 2
    assert feat.update_features([("share.version", 1, feat.UPGRADE)], {}, node_id=3000).levels == {"share.version": 1}
    assert feat.update_features([("share.version", 1, feat.SAFE_DOWNGRADE)], {"share.version": 2}, node_id=1,
                                validate_only=True).error_code == 0
