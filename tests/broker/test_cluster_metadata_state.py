"""Configs, ACLs and SCRAM credentials of a kproto cluster kept in ``__cluster_metadata`` as a
KRaft cluster keeps them: the controller writes ConfigRecord, AccessControlEntryRecord /
RemoveAccessControlEntryRecord and UserScramCredentialRecord / RemoveUserScramCredentialRecord,
every broker serves DescribeConfigs, DescribeAcls, its authorizer's decisions,
DescribeUserScramCredentials and SCRAM logins from its image; the state survives a broker
restart, a snapshot with a wiped broker catching up, a whole restart; the JSON files of older
brokers are migrated into the log once; Apache Kafka's DumpLogSegments reads the records."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import asdict
from typing import Any

import pytest

from kproto.broker.cluster.raft import RaftConfig
from kproto.broker.cluster.snapshots import decode_snapshot
from kproto.broker.security.acl import ALLOW, DENY, LITERAL, PREFIXED, READ, TOPIC, WRITE, AclBinding
from kproto.broker.security.auth import CredentialStore, SaslFailed, ScramCredential, ScramServer
from kproto.client.connection import Connection
from kproto.client.sasl import ScramClient, salted_password
from kproto.codecs import message as message_codec
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage.metadata_image import (MetadataImage, RecordType, decode_metadata_record,
                                           encode_metadata_record)
from kproto.storage.metadata_story import read_metadata_story
from kproto.storage.summary import describe_metadata_event
from kproto.testing import CLUSTER_TEST_DEFAULTS, TEST_DEFAULTS, ClusterThread, require_apache_kafka
from kproto.testing.apache import DEFAULT_VERSION, run_tool

ANON = "User:ANONYMOUS"
SECURED = {"authorizer": True, "allow_everyone_if_no_acl_found": True}
SNAPSHOTTING = RaftConfig(max_bytes_between_snapshots=2048, max_retention_bytes=0, segment_bytes=4096)
SALT = b"0123456789abcdef"


# ---------------------------------------------------------------------------- helpers
def addresses(c: ClusterThread) -> dict[int, tuple[str, int]]:
    return c.inspect(lambda cl: {n: (b.config.host, b.config.port)
                                 for n, b in cl.brokers.items() if b.running})


def ask(c: ClusterThread, node: int, body: Any, version: int) -> Any:
    host, port = addresses(c)[node]

    async def go() -> Any:
        async with await Connection.open(host, port) as conn:
            return await conn.request(body, version)
    return asyncio.run(go())


def create_acls(*bindings: AclBinding) -> Any:
    cls = request_codec(K.CREATE_ACLS).cls
    return cls(creations=[cls.AclCreation(
        resource_type=b.resource_type, resource_name=b.resource_name,
        resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
        operation=b.operation, permission_type=b.permission) for b in bindings])


def delete_acls(resource_name: str) -> Any:
    cls = request_codec(K.DELETE_ACLS).cls
    return cls(filters=[cls.DeleteAclsFilter(
        resource_type_filter=TOPIC, resource_name_filter=resource_name, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1)])


def describe_acls() -> Any:
    cls = request_codec(K.DESCRIBE_ACLS).cls
    return cls(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)


def described_acls(resp: Any) -> set[tuple]:
    assert resp.error_code == 0, resp
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
             a.permission_type) for r in resp.resources for a in r.acls}


def upsert_scram(user: str, password: str, iterations: int = 4096) -> Any:
    cls = request_codec(K.ALTER_USER_SCRAM_CREDENTIALS).cls
    return cls(deletions=[], upsertions=[cls.ScramCredentialUpsertion(
        name=user, mechanism=1, iterations=iterations, salt=SALT,
        salted_password=salted_password("sha256", password, SALT, iterations))])


def delete_scram(user: str) -> Any:
    cls = request_codec(K.ALTER_USER_SCRAM_CREDENTIALS).cls
    return cls(deletions=[cls.ScramCredentialDeletion(name=user, mechanism=1)], upsertions=[])


def describe_scram() -> Any:
    cls = request_codec(K.DESCRIBE_USER_SCRAM_CREDENTIALS).cls
    return cls(users=None)


def alter_configs(rtype: int, name: str, configs: dict[str, str]) -> Any:
    """The legacy AlterConfigs: the resource's configs replaced by ``configs``."""
    cls = request_codec(K.ALTER_CONFIGS).cls
    return cls(resources=[cls.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[cls.AlterableConfig(name=k, value=v) for k, v in configs.items()])],
        validate_only=False)


def incremental(rtype: int, name: str, configs: dict[str, str]) -> Any:
    cls = request_codec(K.INCREMENTAL_ALTER_CONFIGS).cls
    return cls(resources=[cls.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[cls.AlterableConfig(name=k, config_operation=0, value=v) for k, v in configs.items()])],
        validate_only=False)


def topic_configs(c: ClusterThread, node: int, topic: str) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of ``topic`` at broker ``node``: name -> (value, source)."""
    cls = request_codec(K.DESCRIBE_CONFIGS).cls
    resp = ask(c, node, cls(resources=[cls.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)],
        include_synonyms=False, include_documentation=False), 4)
    (res,) = resp.results
    assert res.error_code == 0, res
    return {e.name: (e.value, e.config_source) for e in res.configs}


def scram_login(store: CredentialStore, user: str, password: str) -> bool:
    """A SCRAM-SHA-256 exchange against the broker's credentials (the SASL state machine the
    listener runs); True when the server accepted the proof."""
    server = ScramServer("SCRAM-SHA-256", store)
    client = ScramClient("SCRAM-SHA-256", user, password)
    token = client.initial()
    try:
        while token is not None:
            reply = server.step(token)
            token = client.step(reply)
    except SaslFailed:
        return False
    return True


SECRET_DENY = AclBinding(TOPIC, "secret", LITERAL, ANON, "*", READ, DENY)
PREFIX_ALLOW = AclBinding(TOPIC, "pub-", PREFIXED, "User:bob", "*", WRITE, ALLOW)


def state_of(cl: Any, node: int) -> dict[str, Any]:
    """What broker ``node`` holds of the cluster's security state and configs (in its loop)."""
    core = cl.brokers[node].core
    return {"acls": set(core.authorizer.acls),
            "denied": not core.authorizer.authorize(ANON, "127.0.0.1", READ, TOPIC, "secret"),
            "allowed": core.authorizer.authorize(ANON, "127.0.0.1", READ, TOPIC, "open"),
            "scram": dict(core.security.store.scram),
            "retention": core.logs.topics["open"].configs.get("retention.ms")
            if "open" in core.logs.topics else None,
            "default_bytes": core.configs.broker_dynamic[""].get("log.retention.bytes")}


def expect_everywhere(c: ClusterThread, want: dict[str, Any], what: str) -> None:
    def same(cl: Any) -> bool:
        for n, b in cl.brokers.items():
            if not (b.running and b.core is not None and b.core.ready):
                return False
            got = state_of(cl, n)
            if any(got[k] != v for k, v in want.items()):
                return False
        return True
    c.wait_for(same, 30, what)


# ---------------------------------------------------------------------------- the image
def test_image_replays_and_snapshots_acls_and_scram() -> None:
    from kproto.codecs import metadata_record
    acl, remove_acl = metadata_record(18), metadata_record(19)
    scram, remove_scram = metadata_record(11), metadata_record(22)
    a1, a2 = Uuid(b"\1" * 16), Uuid(b"\2" * 16)
    image = MetadataImage()
    records = [
        (acl(id=a1, resource_type=2, resource_name="t", pattern_type=3, principal=ANON, host="*",
             operation=3, permission_type=2), 0),
        (acl(id=a2, resource_type=3, resource_name="g", pattern_type=4, principal="User:x",
             host="10.0.0.1", operation=2, permission_type=3), 0),
        (scram(name="alice", mechanism=1, salt=b"s", stored_key=b"k1", server_key=b"k2",
               iterations=4096), 0),
        (scram(name="alice", mechanism=2, salt=b"s", stored_key=b"k3", server_key=b"k4",
               iterations=8192), 0),
    ]
    for i, (obj, v) in enumerate(records):
        image.replay_value(encode_metadata_record(obj, v), i)
    changes = image.take_changes()
    assert changes.acls and sorted(changes.scram) == [(1, "alice"), (2, "alice")] and changes
    assert set(image.acls) == {a1, a2} and image.scram[(2, "alice")].iterations == 8192
    image.replay_value(encode_metadata_record(remove_acl(id=a1), 0), 10)
    image.replay_value(encode_metadata_record(remove_scram(name="alice", mechanism=1), 0), 11)
    changes = image.take_changes()
    assert changes.acls and changes.scram == [(1, "alice")]
    assert set(image.acls) == {a2} and set(image.scram) == {(2, "alice")}
    # removing what is not there changes nothing
    image.replay_value(encode_metadata_record(remove_acl(id=a1), 0), 12)
    assert not image.take_changes()
    # the snapshot records give the image back, the ACLs and credentials after the producer ids
    again = MetadataImage()
    kinds = []
    for obj, v in image.records():
        again.replay_value(encode_metadata_record(obj, v), 0)
        kinds.append(type(obj).__name__)
    assert again.acls == image.acls and again.scram == image.scram
    assert kinds == ["AccessControlEntryRecord", "UserScramCredentialRecord"]
    # an image loaded over another reports what differs
    again.note_changes_since(MetadataImage())
    changes = again.take_changes()
    assert changes.acls and changes.scram == [(2, "alice")]


# ---------------------------------------------------------------------------- the cluster
@pytest.mark.kafka_cluster(brokers=3, controllers=1, raft_config=SNAPSHOTTING, **SECURED)
def test_configs_acls_and_scram_on_every_broker_through_restart_and_snapshot(
        kafka_cluster: ClusterThread) -> None:
    c = kafka_cluster
    c.create_topic("open", 1, 3)
    # each change through a different broker, forwarded to the controller
    res = ask(c, 1, create_acls(SECRET_DENY, PREFIX_ALLOW), 3)
    assert [r.error_code for r in res.results] == [0, 0]
    res = ask(c, 2, upsert_scram("alice", "alice-pw"), 0)
    assert [(r.user, r.error_code) for r in res.results] == [("alice", 0)]
    res = ask(c, 3, alter_configs(2, "open", {"retention.ms": "7777"}), 1)
    assert [r.error_code for r in res.responses] == [0]
    res = ask(c, 1, incremental(4, "", {"log.retention.bytes": "12345678"}), 1)
    assert [r.error_code for r in res.responses] == [0]
    want = {"acls": {SECRET_DENY, PREFIX_ALLOW}, "denied": True, "allowed": True,
            "retention": "7777", "default_bytes": "12345678"}
    expect_everywhere(c, want, "the ACLs and configs on every broker")

    def served(node: int) -> None:
        assert described_acls(ask(c, node, describe_acls(), 3)) == {
            (TOPIC, "secret", LITERAL, ANON, "*", READ, DENY),
            (TOPIC, "pub-", PREFIXED, "User:bob", "*", WRITE, ALLOW)}
        resp = ask(c, node, describe_scram(), 0)
        assert [(r.user, r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos])
                for r in resp.results] == [("alice", 0, [(1, 4096)])]
        configs = topic_configs(c, node, "open")
        assert configs["retention.ms"] == ("7777", 1)            # DYNAMIC_TOPIC_CONFIG
        assert configs["retention.bytes"] == ("12345678", 3)     # DYNAMIC_DEFAULT_BROKER_CONFIG
        store = c.inspect(lambda cl: cl.brokers[node].core.security.store)
        assert c.inspect(lambda cl: scram_login(store, "alice", "alice-pw"))
        assert not c.inspect(lambda cl: scram_login(store, "alice", "wrong"))
    for node in (1, 2, 3):
        served(node)
    # no broker keeps a state file any more
    for node in (1, 2, 3):
        names = os.listdir(os.path.join(c.data_dir, f"broker-{node}"))
        assert not [n for n in names if n.startswith("kproto-")], names

    # an ACL created again is no error and no second record
    assert [r.error_code for r in ask(c, 2, create_acls(SECRET_DENY), 3).results] == [0]
    assert len(c.inspect(lambda cl: cl.controllers[cl.controller_ids[0]].controller.committed.acls)) == 2
    # a broker's own dynamic config reaches that broker only
    res = ask(c, 1, incremental(4, "2", {"log.retention.ms": "5555"}), 1)
    assert [r.error_code for r in res.responses] == [0]
    c.wait_for(lambda cl: cl.brokers[2].core.configs.broker_dynamic["2"] == {"log.retention.ms": "5555"},
               10, "broker 2's dynamic config")
    assert c.inspect(lambda cl: [cl.brokers[n].core.configs.broker_dynamic.get("2") for n in (1, 3)]) \
        == [None, None]

    # the controller refuses what is invalid, as the single broker does
    bad = AclBinding(TOPIC, "x", LITERAL, "nocolon", "*", READ, ALLOW)
    (r,) = ask(c, 2, create_acls(bad), 3).results
    assert r.error_code == E.INVALID_REQUEST and "colon" in r.error_message
    (r,) = ask(c, 3, delete_scram("nobody"), 0).results
    assert r.error_code == E.RESOURCE_NOT_FOUND

    # a broker restart: all of it back from its metadata log
    c.stop(2)
    c.start(2)
    expect_everywhere(c, want, "broker 2 back with the state")
    served(2)

    # snapshots: the controller's and brokers' hold the records
    def snapshotted(cl: Any) -> bool:
        return all(r.snapshots.ids and r.log.log_start_offset == r.snapshots.earliest.end_offset > 0
                   for r in [b.core.raft for b in cl.brokers.values()]
                   + [x.replica for x in cl.controllers.values()])
    for i in range(12):  # records enough to pass the 2 KiB between snapshots
        c.create_topic(f"filler{i}", 1, 1)
    c.wait_for(snapshotted, 30, "every node's metadata log truncated to a snapshot")
    controller = c.cluster.controller_ids[0]
    cdir = c.inspect(lambda cl: cl.controllers[controller].core.log.path)
    latest = sorted(f for f in os.listdir(cdir) if f.endswith(".checkpoint"))[-1]
    with open(os.path.join(cdir, latest), "rb") as f:
        _, values = decode_snapshot(f.read())
    kinds = [decode_metadata_record(v)[0] for v in values]
    assert kinds.count(RecordType.ACCESS_CONTROL_ENTRY) == 2
    assert kinds.count(RecordType.USER_SCRAM_CREDENTIAL) == 1
    assert kinds.count(RecordType.CONFIG) >= 2

    # broker 3 wiped: it catches up from the snapshot and holds the state again
    c.stop(3)
    shutil.rmtree(os.path.join(c.data_dir, "broker-3"))
    c.start(3)
    expect_everywhere(c, want, "the wiped broker back with the state")
    served(3)
    assert c.inspect(lambda cl: cl.brokers[3].core.raft.describe()["log_start_offset"]) > 0

    # removals reach every broker too
    (r,) = ask(c, 3, delete_acls("secret"), 3).filter_results
    assert r.error_code == 0 and [m.resource_name for m in r.matching_acls] == ["secret"]
    assert [r.error_code for r in ask(c, 1, delete_scram("alice"), 0).results] == [0]
    res = ask(c, 2, alter_configs(2, "open", {}), 1)   # the legacy API: everything unset
    assert [r.error_code for r in res.responses] == [0]
    expect_everywhere(c, {"acls": {PREFIX_ALLOW}, "denied": False, "scram": {}, "retention": None},
                      "the removals on every broker")
    assert topic_configs(c, 1, "open")["retention.ms"][1] != 1   # no topic override left


def test_acls_without_an_authorizer_and_static_broker_configs_are_refused(tmp_path: Any) -> None:
    with ClusterThread(tmp_path / "c", brokers=1, controllers=1, default_replication_factor=1,
                       **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS) as c:
        (r,) = ask(c, 1, create_acls(SECRET_DENY), 3).results
        assert r.error_code == E.SECURITY_DISABLED
        # a config that cannot change at run time, through either API
        for body, version in ((alter_configs(4, "", {"num.io.threads": "4"}), 1),
                              (incremental(4, "1", {"num.io.threads": "4"}), 1)):
            (r,) = ask(c, 1, body, version).responses
            assert (r.error_code, r.error_message) == (
                E.INVALID_CONFIG, "Cannot update these configs dynamically: num.io.threads")
        (r,) = ask(c, 1, incremental(4, "", {"log.retention.ms": "soon"}), 1).responses
        assert r.error_code == E.INVALID_CONFIG
        image = c.inspect(lambda cl: next(iter(cl.controllers.values())).controller.committed)
    assert not image.acls and image.configs == {(4, ""): {"min.insync.replicas": "1"}}  # nothing written (but the format-time default)


def test_a_broker_checks_a_cleaner_thread_change_it_would_run_with_before_forwarding_it(tmp_path: Any) -> None:
    """As Kafka's ConfigAdminManager: log.cleaner.threads for this broker (or cluster-wide) is
    checked against the count it runs with before the change goes to the controller; a
    refused resource is answered by the broker, the others of the request are forwarded and
    answered in the request's order."""
    with ClusterThread(tmp_path / "c", brokers=1, controllers=1, default_replication_factor=1,
                       **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS) as c:
        twice = "Invalid value org.apache.kafka.common.config.ConfigException: Log cleaner threads cannot " \
            "be increased to more than double the current value {} for configuration Invalid dynamic configuration"
        (r,) = ask(c, 1, incremental(4, "1", {"log.cleaner.threads": "3"}), 1).responses
        assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, twice.format(1))
        c.create_topic("t")
        cls = request_codec(K.INCREMENTAL_ALTER_CONFIGS).cls
        both = cls(validate_only=False, resources=[cls.AlterConfigsResource(
            resource_type=rtype, resource_name=name, configs=[cls.AlterableConfig(
                name=key, config_operation=0, value=value)]) for rtype, name, key, value in [
            (4, "", "log.cleaner.threads", "4"), (4, "1", "log.cleaner.threads", "2"), (2, "t", "retention.ms", "5000")]])
        got = [(r.resource_name, r.error_code, r.error_message) for r in ask(c, 1, both, 1).responses]
        assert got == [("", E.INVALID_REQUEST, twice.format(1)), ("1", 0, None), ("t", 0, None)]
        c.wait_for(lambda cl: cl.brokers[1].core.configs.broker_config("log.cleaner.threads") == "2",
                   what="the broker runs 2 cleaner threads")
        (r,) = ask(c, 1, incremental(4, "", {"log.cleaner.threads": "4"}), 1).responses  # its own 2 stay
        assert (r.error_code, r.error_message) == (0, None)
        # the legacy AlterConfigs replaces the broker's configs: back to the default's 4 from 2
        (r,) = ask(c, 1, alter_configs(4, "1", {"log.cleaner.threads": "5"}), 1).responses
        assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, twice.format(2))
        (r,) = ask(c, 1, alter_configs(4, "1", {}), 1).responses
        assert (r.error_code, r.error_message) == (0, None)


# ---------------------------------------------------------------------------- migration
def test_a_cluster_over_old_json_files_migrates_them_into_the_metadata_log(tmp_path: Any) -> None:
    data = tmp_path / "c"
    config = {"brokers": 2, "controllers": 1, "default_replication_factor": 2, **SECURED,
              **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS}
    with ClusterThread(data, **config) as c:
        c.create_topic("open", 1, 2)
        topic_id = c.inspect(lambda cl: str(cl.brokers[1].core.image.topics["open"].topic_id))
    # what an older kproto's brokers kept in their data dirs
    cred = ScramCredential.from_password("SCRAM-SHA-256", "alice-pw", 4096, salt=SALT)
    with open(data / "broker-1" / "kproto-configs.json", "w") as f:
        json.dump({"version": 1, "topics": {
            "open": {"topic_id": topic_id, "configs": {"retention.ms": "7777"}},
            "gone": {"topic_id": str(Uuid(b"\7" * 16)), "configs": {"retention.ms": "1"}}},
            "broker": {"": {"log.retention.bytes": "12345678"}}}, f)
    with open(data / "broker-2" / "kproto-security.json", "w") as f:
        json.dump({"version": 1, "acls": [asdict(SECRET_DENY), asdict(PREFIX_ALLOW)],
            "scram": [{"mechanism": "SCRAM-SHA-256", "user": "alice", "credential": cred.to_json()}]}, f)
    want = {"acls": {SECRET_DENY, PREFIX_ALLOW}, "denied": True, "retention": "7777",
            "default_bytes": "12345678"}
    with ClusterThread(data, **config) as c:
        expect_everywhere(c, want, "the migrated state on every broker")
        assert c.inspect(lambda cl: cl.migration_problems) == []
        for node in (1, 2):
            store = c.inspect(lambda cl: cl.brokers[node].core.security.store)
            assert c.inspect(lambda cl: scram_login(store, "alice", "alice-pw"))
        image = c.inspect(lambda cl: next(iter(cl.controllers.values())).controller.committed)
        assert ("gone" not in image.topics and
                not any(name == "gone" for _, name in image.configs))
    # the files were renamed, not read again
    assert sorted(os.listdir(data / "broker-1")).count("kproto-configs.json.migrated") == 1
    assert not (data / "broker-1" / "kproto-configs.json").exists()
    assert (data / "broker-2" / "kproto-security.json.migrated").exists()
    assert not (data / "broker-2" / "kproto-security.json").exists()
    # a third start has it all from the log alone
    with ClusterThread(data, **config) as c:
        expect_everywhere(c, want, "the state after another restart")
        image = c.inspect(lambda cl: next(iter(cl.controllers.values())).controller.committed)
        assert len(image.acls) == 2 and list(image.scram) == [(1, "alice")]


# ---------------------------------------------------------------------------- Apache Kafka
def test_the_story_and_kafka_dump_log_segments_read_the_security_records(tmp_path: Any) -> None:
    with ClusterThread(tmp_path / "c", brokers=1, controllers=1, default_replication_factor=1,
                       **SECURED, **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS) as c:
        c.create_topic("open", 1, 1)
        ask(c, 1, create_acls(SECRET_DENY), 3)
        ask(c, 1, upsert_scram("alice", "alice-pw"), 0)
        ask(c, 1, alter_configs(2, "open", {"retention.ms": "7777"}), 1)
        ask(c, 1, delete_scram("alice"), 0)
        ask(c, 1, delete_acls("secret"), 3)
        controller = c.cluster.controller_ids[0]
        path = c.inspect(lambda cl: cl.controllers[controller].core.log.path)
    # kproto logdir's story of the controller's log tells them, without the keys
    story = read_metadata_story(os.path.dirname(path))
    told = [describe_metadata_event(e) for e in story.events
            if e["kind"] in ("acl_added", "acl_removed", "scram_credential")]
    assert len(told) == 4, told
    assert told[0].endswith(f"DENY {ANON} from * operation {READ} on resource type {TOPIC} 'secret' "
                            f"(pattern type {LITERAL})") and " added: " in told[0]
    assert told[1] == "SCRAM-SHA-256 credential of 'alice' set (4096 iterations)"
    assert told[2] == "SCRAM-SHA-256 credential of 'alice' removed"
    assert " removed: DENY " in told[3] and told[3].split()[1] == told[0].split()[1]

    require_apache_kafka(DEFAULT_VERSION)
    out = run_tool(DEFAULT_VERSION, "org.apache.kafka.tools.DumpLogSegments",
                   "--cluster-metadata-decoder", "--files",
                   os.path.join(path, "00000000000000000000.log"), timeout=180).stdout
    wanted = {"ACCESS_CONTROL_ENTRY_RECORD", "REMOVE_ACCESS_CONTROL_ENTRY_RECORD",
              "USER_SCRAM_CREDENTIAL_RECORD", "REMOVE_USER_SCRAM_CREDENTIAL_RECORD", "CONFIG_RECORD"}
    theirs = [(p["type"], p["version"], p["data"]) for p in
              (json.loads(ln.split(" payload: ", 1)[1]) for ln in out.splitlines() if " payload: " in ln)
              if p.get("type") in wanted]
    # what these records must be, made by kproto's codecs from the requests' values
    from kproto.codecs import metadata_record
    cred = ScramCredential.from_password("SCRAM-SHA-256", "alice-pw", 4096, salt=SALT)
    expected = [
        # the cluster-wide default the controller bootstraps a new cluster with
        ("CONFIG_RECORD", metadata_record(4)(resource_type=4, resource_name="",
                                             name="min.insync.replicas", value="1")),
        ("ACCESS_CONTROL_ENTRY_RECORD", metadata_record(18)(
            id=Uuid(b"\0" * 16), resource_type=TOPIC, resource_name="secret", pattern_type=LITERAL,
            principal=ANON, host="*", operation=READ, permission_type=DENY)),
        ("USER_SCRAM_CREDENTIAL_RECORD", metadata_record(11)(
            name="alice", mechanism=1, salt=SALT, stored_key=cred.stored_key,
            server_key=cred.server_key, iterations=4096)),
        ("CONFIG_RECORD", metadata_record(4)(resource_type=2, resource_name="open",
                                             name="retention.ms", value="7777")),
        ("REMOVE_USER_SCRAM_CREDENTIAL_RECORD", metadata_record(22)(name="alice", mechanism=1)),
        ("REMOVE_ACCESS_CONTROL_ENTRY_RECORD", metadata_record(19)(id=Uuid(b"\0" * 16))),
    ]
    assert [t for t, _, _ in theirs] == [t for t, _ in expected], theirs
    for (kind, version, data), (_, obj) in zip(theirs, expected):
        mine = message_codec(type(obj).__name__).to_json(obj, 0)
        if "id" in mine:
            mine["id"] = data["id"]   # a random id: the same in the entry and its removal
        assert (version, data) == (0, mine), kind
    assert theirs[1][2]["id"] == theirs[5][2]["id"]


def test_unreadable_old_files_are_reported_and_what_is_readable_migrates(tmp_path: Any) -> None:
    from kproto.broker.cluster.migration import migration_records, read_legacy_state
    a, b = tmp_path / "broker-1", tmp_path / "broker-2"
    a.mkdir()
    b.mkdir()
    (a / "kproto-configs.json").write_text("{not json")
    (b / "kproto-configs.json").write_text(json.dumps({"broker": {"": {
        "log.retention.bytes": "99", "no.such.config": "1"}}}))
    (b / "kproto-security.json").write_text(json.dumps({"acls": [{"bad": 1}]}))
    state = read_legacy_state([str(a), str(b), str(tmp_path / "none")])
    assert len(state.files) == 3 and len(state.problems) == 2
    assert any("broker-1" in p for p in state.problems) and any("security" in p for p in state.problems)
    records = migration_records(state, MetadataImage(), lambda: Uuid(b"\1" * 16))
    # only configs a broker can take dynamically
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r, _ in records] == [
        (4, "", "log.retention.bytes", "99")]
