"""The single broker as a one-node combined KRaft node: its topics, configs, ACLs, SCRAM
credentials and feature levels are records of its own ``__cluster_metadata-0`` (a one-voter
Raft log with quorum-state and snapshots), read back at start; an older kproto's JSON state
files are migrated into it once."""
from __future__ import annotations

import json
import os
from dataclasses import astuple

import kproto
from kproto.broker import features as feat
from kproto.broker.cluster.raft import read_quorum_state
from kproto.broker.cluster.snapshots import decode_snapshot
from kproto.broker.configs import CONFIGS_FILE, BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.broker.security.acl import SECURITY_FILE, AclBinding
from kproto.broker.security.auth import ScramCredential
from kproto.codecs.primitives import Uuid
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage.checkpoints import MetaProperties
from kproto.storage.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE

from broker_support import Client, metadata_on_disk
from test_broker_core import create

META = "__cluster_metadata-0"
SASL = dict(sasl_enabled_mechanisms=("SCRAM-SHA-256",), sasl_users={"admin": "admin-pw"})


def make_core(path, **config) -> BrokerCore:
    return BrokerCore(str(path), BrokerConfig(**config))


def _tid(core: BrokerCore, name: str) -> Uuid:
    return core.logs.topics[name].topic_id


def _incremental(client: Client, rtype: int, name: str, configs: dict[str, str]) -> None:
    req = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    resp = client.call(K.INCREMENTAL_ALTER_CONFIGS, 1, resources=[req.AlterConfigsResource(
        resource_type=rtype, resource_name=name, configs=[
            req.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])])
    assert [r.error_code for r in resp.responses] == [0]


def _batch_of(data, topic: str) -> list[str]:
    """The record types of the metadata log batch that holds ``topic``'s TopicRecord."""
    from kproto.records.batch import RecordBatch
    from kproto.records.reader import BatchReader
    from kproto.storage.metadata_image import decode_metadata_record

    raw = (data / META / "00000000000000000000.log").read_bytes()
    for b in BatchReader(raw):
        if isinstance(b, RecordBatch) and not b.is_control:
            objs = [decode_metadata_record(r.value)[2] for r in b.records()]
            if any(type(o).__name__ == "TopicRecord" and o.name == topic for o in objs):
                return [type(o).__name__ for o in objs]
    return []


def test_a_new_broker_is_formatted_as_a_one_voter_combined_node(tmp_path):
    core = make_core(tmp_path / "d")
    data = tmp_path / "d"
    meta = MetaProperties.parse((data / "meta.properties").read_bytes())
    assert (meta.node_id, meta.cluster_id) == (1, core.logs.cluster_id)
    assert meta.properties["directory.id"] == str(core.logs.directory_id)
    # this node voted for itself and leads the metadata partition
    assert read_quorum_state(str(data / META / "quorum-state"))[:2] == (1, 1)
    on_disk = metadata_on_disk(data)
    assert on_disk.features == feat.default_levels()
    assert on_disk.configs == {(BROKER_RESOURCE, ""): {"min.insync.replicas": "1"}}
    assert not [f for f in os.listdir(data) if f.startswith("kproto-")]
    core.close()


def test_the_configured_users_scram_credentials_are_written_when_the_log_is_made(tmp_path):
    # as kafka-storage format --add-scram: from then on the credentials are the log's
    data = tmp_path / "d"
    core = make_core(data, **SASL)
    made = core.security.store.scram[("SCRAM-SHA-256", "admin")]
    assert sorted(metadata_on_disk(data).scram) == [(1, "admin")]
    core.security.store.apply_altered({("SCRAM-SHA-256", "admin"): None})   # as a deletion does
    core._save_security()
    assert metadata_on_disk(data).scram == {}
    core.close()
    core = make_core(data, **SASL)   # the deletion holds: the configured user is not made again
    assert ("SCRAM-SHA-256", "admin") not in core.security.store.scram
    core.close()
    core = make_core(tmp_path / "e", **SASL)
    assert core.security.store.scram[("SCRAM-SHA-256", "admin")].stored_key != made.stored_key  # new salt
    core.close()


def test_state_is_the_metadata_logs_and_comes_back_after_a_restart(tmp_path):
    data = tmp_path / "d"
    core = make_core(data, authorizer=True, super_users=("User:ANONYMOUS",))
    client = Client(core)
    create(client, "orders", partitions=2, configs={"retention.ms": "60000"})
    create(client, "gone")
    _incremental(client, BROKER_RESOURCE, "", {"log.retention.bytes": "1000000"})
    req = kproto.request(K.CREATE_PARTITIONS).cls
    r = client.call(K.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False,
                    topics=[req.CreatePartitionsTopic(name="orders", count=3, assignments=None)])
    assert r.results[0].error_code == 0
    req = kproto.request(K.CREATE_ACLS).cls
    r = client.call(K.CREATE_ACLS, 3, creations=[req.AclCreation(
        resource_type=2, resource_name="orders", resource_pattern_type=3, principal="User:bob",
        host="*", operation=3, permission_type=3)])
    assert r.results[0].error_code == 0
    req = kproto.request(K.ALTER_USER_SCRAM_CREDENTIALS).cls
    salted = b"\x01" * 32
    r = client.call(K.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[], upsertions=[req.ScramCredentialUpsertion(
        name="carol", mechanism=1, iterations=4096, salt=b"salt", salted_password=salted)])
    assert r.results[0].error_code == 0
    req = kproto.request(K.DELETE_TOPICS).cls
    assert client.call(K.DELETE_TOPICS, 6, timeout_ms=1000, topics=[
        req.DeleteTopicState(name="gone")]).responses[0].error_code == 0
    req = kproto.request(K.UPDATE_FEATURES).cls
    r = client.call(K.UPDATE_FEATURES, 1, timeout_ms=1000, validate_only=False, feature_updates=[
        req.FeatureUpdateKey(feature="group.version", max_version_level=0, upgrade_type=2)])
    assert r.error_code == 0
    orders = _tid(core, "orders")
    acl = AclBinding(2, "orders", 3, "User:bob", "*", 3, 3)
    # a new topic is one batch, as Kafka's controller writes it: TopicRecord, its ConfigRecords,
    # its PartitionRecords
    assert _batch_of(data, "orders") == ["TopicRecord", "ConfigRecord", "PartitionRecord", "PartitionRecord"]

    # the records on disk, read without the broker
    on_disk = metadata_on_disk(data)
    assert sorted(on_disk.topics) == ["orders"] and on_disk.topics["orders"].topic_id == orders
    parts = on_disk.topics["orders"].partitions
    assert sorted(parts) == [0, 1, 2]
    assert {(p.replicas, p.isr, p.leader, p.directories) for p in parts.values()} == {
        ((1,), (1,), 1, (core.logs.directory_id,))}
    assert on_disk.configs[(TOPIC_RESOURCE, "orders")] == {"retention.ms": "60000"}
    assert on_disk.configs[(BROKER_RESOURCE, "")] == {"log.retention.bytes": "1000000",
                                                      "min.insync.replicas": "1"}
    assert [AclBinding(*astuple(e)) for e in on_disk.acls.values()] == [acl]
    assert sorted(on_disk.scram) == [(1, "carol")]
    assert "group.version" not in on_disk.features
    core.close()

    for clean in (True, False):
        core = make_core(data, authorizer=True, super_users=("User:ANONYMOUS",))
        assert sorted(core.logs.topics) == ["orders"] and _tid(core, "orders") == orders
        assert core.logs.topics["orders"].configs == {"retention.ms": "60000"}
        assert core.configs.broker_dynamic[""]["log.retention.bytes"] == "1000000"
        assert core.configs.settings(core.logs.topics["orders"]).retention_bytes == 1000000
        assert core.authorizer is not None and core.authorizer.acls == {acl}
        carol = core.security.store.scram[("SCRAM-SHA-256", "carol")]
        assert (carol.iterations, carol.salt) == (4096, b"salt")
        assert "group.version" not in core.feature_levels()[0]
        core.close(clean=clean)


def test_a_snapshot_holds_the_state_and_a_restart_loads_it(tmp_path):
    data = tmp_path / "d"
    core = make_core(data)
    client = Client(core)
    create(client, "a", configs={"cleanup.policy": "compact"})
    core.metadata.snapshot()
    create(client, "b")   # after the snapshot: in the log's tail
    live = core.metadata.image
    snaps = sorted(f for f in os.listdir(data / META) if f.endswith(".checkpoint"))
    assert len(snaps) == 1
    end = int(snaps[0].split("-")[0])
    _, values = decode_snapshot((data / META / snaps[0]).read_bytes())
    assert len(values) > 0 and end < core.metadata.log.log_end_offset
    on_disk = metadata_on_disk(data)
    assert (sorted(on_disk.topics), on_disk.configs, on_disk.features) == (
        sorted(live.topics), live.configs, live.features)
    core.close()
    core = make_core(data)
    assert sorted(core.logs.topics) == ["a", "b"]
    assert core.logs.topics["a"].configs == {"cleanup.policy": "compact"}
    assert core.metadata.image.topics["b"].topic_id == _tid(core, "b")
    core.close()


def test_an_older_kprotos_json_files_are_migrated_once(tmp_path):
    data = tmp_path / "d"
    core = make_core(data)
    create(Client(core), "t")
    tid = _tid(core, "t")
    core.close()
    # the directory as an older kproto left it: no metadata log, its state in JSON files
    for f in os.listdir(data / META):
        os.unlink(data / META / f)
    os.rmdir(data / META)
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", 4096, salt=b"0123456789")
    (data / CONFIGS_FILE).write_text(json.dumps({"version": 1, "topics": {
        "t": {"topic_id": str(tid), "configs": {"retention.ms": "1234"}},
        "deleted": {"topic_id": str(Uuid(os.urandom(16))), "configs": {"retention.ms": "1"}}},
        "broker": {"": {"min.insync.replicas": "1", "log.retention.ms": "5555"}}}))
    (data / SECURITY_FILE).write_text(json.dumps({"version": 1, "acls": [
        {"resource_type": 2, "resource_name": "t", "pattern_type": 3, "principal": "User:x",
         "host": "*", "operation": 3, "permission": 3}],
        "scram": [{"mechanism": "SCRAM-SHA-256", "user": "zoe", "credential": cred.to_json()},
                  {"mechanism": "SCRAM-SHA-256", "user": "admin", "credential": None}]}))
    (data / feat.FEATURES_FILE).write_text(json.dumps({"version": 1, "epoch": 3, "features": {
        "metadata.version": 21, "transaction.version": 1}}))
    core = make_core(data, authorizer=True, super_users=("User:ANONYMOUS",), **SASL)
    assert core.logs.topics["t"].configs == {"retention.ms": "1234"}
    assert core.configs.broker_dynamic[""]["log.retention.ms"] == "5555"
    assert core.authorizer is not None and [a.principal for a in core.authorizer.acls] == ["User:x"]
    # zoe's credential migrated; admin's deleted in the old file stays deleted (not re-made
    # from the configured users)
    assert sorted(core.security.store.scram) == [("SCRAM-SHA-256", "zoe")]
    assert core.feature_levels()[0] == {"metadata.version": 21, "transaction.version": 1}
    for name in (CONFIGS_FILE, SECURITY_FILE, feat.FEATURES_FILE):
        assert not (data / name).exists() and (data / (name + ".migrated")).exists()
    core.configs.set_topic(core.logs.topics["t"], {"retention.ms": "999"})
    core.close()
    # migrated once: the renamed files are not read again
    core = make_core(data, authorizer=True, super_users=("User:ANONYMOUS",), **SASL)
    assert core.logs.topics["t"].configs == {"retention.ms": "999"}
    assert sorted(metadata_on_disk(data).topics) == ["t"]
    core.close()
