"""Partition administration on the single broker, answered as Apache Kafka 4.4.0's one-node
cluster answers (each expected answer below is the one that node gave): ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments, DescribeTopicPartitions (KIP-966's
paging) and ListConfigResources; the same through kproto's admin client, against kproto's
broker and cluster and against Apache Kafka."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from kproto.broker.admin import ELECTION_NOT_NEEDED_MESSAGE, validate_manual_assignment
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.broker.log import BrokerError
from kproto.codecs import Uuid
from kproto.conformance.scenario import build
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client
from test_broker_core import create

NOT_NEEDED = (E.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)


@pytest.fixture
def client(tmp_path):
    core = BrokerCore(str(tmp_path / "data"), BrokerConfig(port=9092))
    c = Client(core)
    create(c, "pa", 3)
    create(c, "pb", 1)
    yield c
    core.close()


def call(client, key, version, **fields):
    return client.answer(client.send(key, version, build(key, version, **fields)))


def elect(client, version, kind, partitions):
    return call(client, K.ELECT_LEADERS, version, election_type=kind, timeout_ms=1000,
                topic_partitions=partitions)


def results(resp):
    return {(r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in resp.replica_election_results for p in r.partition_result}


# ---------------------------------------------------------------------------- ElectLeaders
@pytest.mark.parametrize("version,kind", [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1)])
def test_elect_leaders_is_never_needed_on_one_node(client, version, kind):
    resp = elect(client, version, kind, [{"topic": "pa", "partitions": [0, 7]}, {"topic": "nope", "partitions": [0]}])
    assert results(resp) == {("pa", 0): NOT_NEEDED,
                             ("pa", 7): (E.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as pa-7"),
                             ("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")}
    assert resp.error_code == 0
    # a partition asked twice is answered twice
    assert [p.error_code for p in elect(client, version, kind, [{"topic": "pa", "partitions": [1, 1]}])
            .replica_election_results[0].partition_result] == [E.ELECTION_NOT_NEEDED] * 2


def test_elect_leaders_every_partition_and_none(client):
    resp = elect(client, 2, 0, None)
    # every topic answered, without the partitions that need no election
    assert sorted((r.topic, list(r.partition_result)) for r in resp.replica_election_results) == [("pa", []), ("pb", [])]
    assert elect(client, 2, 0, []).replica_election_results == []


def test_elect_leaders_unknown_type_refuses_the_whole_request(client):
    resp = elect(client, 2, 5, [{"topic": "pa", "partitions": [0]}, {"topic": "nope", "partitions": [3]}])
    assert resp.error_code == E.INVALID_REQUEST
    assert results(resp) == {("pa", 0): (E.INVALID_REQUEST, "Unknown election type 5"),
                             ("nope", 3): (E.INVALID_REQUEST, "Unknown election type 5")}


# ---------------------------------------------------------------------------- reassignments
def alter(client, version, topics, allow_rf=True):
    resp = call(client, K.ALTER_PARTITION_REASSIGNMENTS, version, timeout_ms=1000,
                allow_replication_factor_change=allow_rf, topics=topics)
    assert (resp.error_code, resp.error_message) == (0, None)
    return resp, {(t.name, p.partition_index): (p.error_code, p.error_message)
                  for t in resp.responses for p in t.partitions}


def _unknown_broker(b):
    return (E.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes broker {b}, but no such broker is registered.")


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("replicas,expected", [
    ([1], (0, None)),
    ([2], _unknown_broker(2)),
    ([1, 2], _unknown_broker(2)),
    ([], (E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list.")),
    ([5, 5], _unknown_broker(5)),  # brokers checked in id order: unknown before repeated
    ([1, 1], (E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 1 more than once.")),
    (None, (E.NO_REASSIGNMENT_IN_PROGRESS, None)),
])
def test_alter_partition_reassignments_one_broker(client, version, replicas, expected):
    _, got = alter(client, version, [{"name": "pa", "partitions": [{"partition_index": 0, "replicas": replicas}]}])
    assert got == {("pa", 0): expected}


def test_alter_partition_reassignments_unknown_partition_and_topic(client):
    resp, got = alter(client, 1, [
        {"name": "pa", "partitions": [{"partition_index": 0, "replicas": [1, 5]},
                                      {"partition_index": 1, "replicas": [1]},
                                      {"partition_index": 9, "replicas": [1]}]},
        {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [1]}]}], allow_rf=False)
    assert resp.allow_replication_factor_change is False
    assert got == {("pa", 0): _unknown_broker(5), ("pa", 1): (0, None),
                   ("pa", 9): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition pa:9."),
                   ("nope", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")}


def test_list_partition_reassignments_finds_none(client):
    alter(client, 0, [{"name": "pa", "partitions": [{"partition_index": 0, "replicas": [1]}]}])
    for topics in (None, [{"name": "pa", "partition_indexes": [0, 8]}, {"name": "nope", "partition_indexes": [0]}]):
        resp = call(client, K.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=1000, topics=topics)
        assert (resp.error_code, resp.error_message, resp.topics) == (0, None, [])


def test_manual_assignment_check():
    validate_manual_assignment([3, 1], {1, 2, 3})
    with pytest.raises(BrokerError, match="includes broker 4,"):
        validate_manual_assignment([5, 5, 4], {5})
    with pytest.raises(BrokerError, match="the broker 1 more than once"):
        validate_manual_assignment([2, 1, 1], {1, 2})


# ---------------------------------------------------------------------------- DescribeTopicPartitions
def describe(client, topics, limit, cursor=None):
    return call(client, K.DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=limit,
                cursor=None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
                topics=[{"name": n} for n in topics])


def shape(resp):
    """(error, name, partition indexes) per topic, and the next cursor."""
    nxt = resp.next_cursor
    return ([(t.error_code, t.name, [p.partition_index for p in t.partitions]) for t in resp.topics],
            None if nxt is None else (nxt.topic_name, nxt.partition_index))


def test_describe_topic_partitions_pages_with_a_cursor(client):
    resp = describe(client, ["pa", "nope", "bad/x", "pb"], 2)
    # name order; unknown and invalid names answered; the cursor where the limit stopped
    assert shape(resp) == ([(E.INVALID_TOPIC_EXCEPTION, "bad/x", []), (E.UNKNOWN_TOPIC_OR_PARTITION, "nope", []),
                            (0, "pa", [0, 1])], ("pa", 2))
    pa = resp.topics[2]
    assert pa.topic_id == client.core.logs.topics["pa"].topic_id and not pa.is_internal
    assert pa.topic_authorized_operations == 3576 == resp.topics[1].topic_authorized_operations
    assert resp.topics[1].topic_id == Uuid.ZERO
    p = pa.partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas,
            p.last_known_elr, p.offline_replicas) == (0, 1, 0, [1], [1], [], [], [])
    assert shape(describe(client, ["pa", "nope", "pb"], 2, ("pa", 2))) == ([(0, "pa", [2]), (0, "pb", [0])], None)
    # the limit is at least 1: a cursor past the end answers no partition and goes on
    assert shape(describe(client, ["pa", "pb"], 0, ("pa", 5))) == ([(0, "pa", []), (0, "pb", [0])], None)
    # a page ending exactly at a topic's end points at the next topic's start
    assert shape(describe(client, ["pb", "pa"], 3)) == ([(0, "pa", [0, 1, 2])], ("pb", 0))
    # no topics: every topic, from the cursor's on
    assert shape(describe(client, [], 3, ("pa", 1))) == ([(0, "pa", [1, 2]), (0, "pb", [0])], None)
    # a topic asked twice is described once
    assert shape(describe(client, ["pb", "pb"], 3)) == ([(0, "pb", [0])], None)


@pytest.mark.parametrize("cursor", [("pz", 0), ("pa", -1)])
def test_describe_topic_partitions_bad_cursor(client, cursor):
    # a cursor on a topic not asked for, or on a negative partition: the request refused whole
    resp = describe(client, ["pa"], 3, cursor)
    assert shape(resp) == ([(E.INVALID_REQUEST, "pa", [])], None)
    assert resp.topics[0].topic_id == Uuid.ZERO and resp.topics[0].topic_authorized_operations == -2**31


def test_describe_topic_partitions_internal_topic(client):
    client.core.groups.ensure_topic()
    [t] = describe(client, ["__consumer_offsets"], 1).topics
    assert t.is_internal and t.error_code == 0


# ---------------------------------------------------------------------------- ListConfigResources
def listed(client, version, types):
    resp = call(client, K.LIST_CONFIG_RESOURCES, version, resource_types=types)
    return resp.error_code, [(r.resource_name, r.resource_type) for r in resp.config_resources]


def test_list_config_resources(client):
    # v0 (ListClientMetricsResources) lists client-metrics subscriptions only: there are none
    assert listed(client, 0, []) == (0, [])
    assert listed(client, 1, []) == (0, [("1", 8), ("1", 4), ("pa", 2), ("pb", 2)])
    assert listed(client, 1, [2, 4]) == (0, [("1", 4), ("pa", 2), ("pb", 2)])
    assert listed(client, 1, [8]) == (0, [("1", 8)])
    assert listed(client, 1, [16]) == listed(client, 1, [32]) == (0, [])
    assert listed(client, 1, [2, 99]) == (E.UNSUPPORTED_VERSION, [])


# ---------------------------------------------------------------------------- the admin client
async def _admin_calls(bootstrap: str) -> None:
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import BrokerError as ClientError

    topic = f"pad-{uuid.uuid4().hex[:8]}"
    async with Cluster(bootstrap) as cluster:
        admin = Admin(cluster)
        await admin.create_topics({topic: 3})
        await cluster.wait_for_leaders([topic])
        info = (await admin.describe_topic_partitions([topic], page_size=2))[topic]
        assert sorted(info.partitions) == [0, 1, 2]
        assert all(p.replicas == p.isr == [p.leader] for p in info.partitions.values())
        assert info.topic_id != Uuid.ZERO
        leader = info.partitions[1].leader
        assert topic in await admin.describe_topic_partitions(page_size=1)
        with pytest.raises(ClientError) as err:
            await admin.describe_topic_partitions([topic + "-missing"])
        assert err.value.code == E.UNKNOWN_TOPIC_OR_PARTITION
        for election in ("preferred", "unclean"):
            got = await admin.elect_leaders([(topic, 0), (topic, 9)], election=election)
            assert {tp: e.code for tp, e in got.items()} == {
                (topic, 0): E.ELECTION_NOT_NEEDED, (topic, 9): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert (topic, 0) not in await admin.elect_leaders()
        await admin.alter_partition_reassignments({(topic, 1): [leader]})
        assert await admin.list_partition_reassignments([(topic, 1)]) == {}
        assert await admin.list_partition_reassignments() == {}
        with pytest.raises(ClientError) as err:
            await admin.alter_partition_reassignments({(topic, 1): [leader + 12345]})
        assert err.value.code == E.INVALID_REPLICA_ASSIGNMENT
        with pytest.raises(ClientError) as err:
            await admin.alter_partition_reassignments({(topic, 1): None})
        assert err.value.code == E.NO_REASSIGNMENT_IN_PROGRESS


def test_admin_client_partition_administration(any_broker):
    asyncio.run(asyncio.wait_for(_admin_calls(any_broker.bootstrap), 60))


def test_admin_client_partition_administration_on_kprotos_cluster(kafka_cluster):
    # the brokers answer DescribeTopicPartitions from the metadata image and forward the rest
    # to the controller: the same answers as one node's
    asyncio.run(asyncio.wait_for(_admin_calls(kafka_cluster.bootstrap), 60))


# ---------------------------------------------------------------------------- with an authorizer
def test_partition_administration_under_an_authorizer(tmp_path):
    from kproto.broker.security.acl import DESCRIBE, TOPIC
    from test_broker_security import USERS, acl, create_acls, make_core, user

    core = make_core(tmp_path, sasl_enabled_mechanisms=("PLAIN",), sasl_users=USERS, authorizer=True,
                     super_users=("User:admin",))
    try:
        admin = user(core, "admin")
        create(admin, "pa", 2)
        create(admin, "pb", 1)
        assert create_acls(admin, acl(TOPIC, "pb", "User:alice", DESCRIBE)) == [0]
        alice = user(core, "alice")
        # cluster operations need the cluster's ALTER / DESCRIBE / DESCRIBE_CONFIGS
        resp = elect(alice, 2, 0, [{"topic": "pb", "partitions": [0]}])
        assert resp.error_code == E.CLUSTER_AUTHORIZATION_FAILED
        assert results(resp)[("pb", 0)][0] == E.CLUSTER_AUTHORIZATION_FAILED
        assert call(alice, K.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=1000, topics=[
            {"name": "pb", "partitions": [{"partition_index": 0, "replicas": [1]}]}]).error_code == \
            E.CLUSTER_AUTHORIZATION_FAILED
        assert call(alice, K.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=1000, topics=None).error_code == \
            E.CLUSTER_AUTHORIZATION_FAILED
        assert listed(alice, 1, [])[0] == E.CLUSTER_AUTHORIZATION_FAILED
        assert results(elect(admin, 2, 0, [{"topic": "pb", "partitions": [0]}])) == {("pb", 0): NOT_NEEDED}
        # DescribeTopicPartitions: a topic not describable is refused after the page (no id),
        # left out when every topic is asked for
        resp = describe(alice, ["pa", "pb", "nope"], 10)
        assert shape(resp) == ([(0, "pb", [0]), (E.TOPIC_AUTHORIZATION_FAILED, "nope", []),
                                (E.TOPIC_AUTHORIZATION_FAILED, "pa", [])], None)
        assert resp.topics[2].topic_id == Uuid.ZERO
        assert shape(describe(alice, [], 10)) == ([(0, "pb", [0])], None)
        assert shape(describe(admin, [], 10)) == ([(0, "pa", [0, 1]), (0, "pb", [0])], None)
    finally:
        core.close()


def test_a_test_hooks_error_is_mirrored_over_the_request(client):
    from kproto.broker.core import Intercept

    client.core.control(K.DESCRIBE_TOPIC_PARTITIONS, Intercept(error=E.NOT_CONTROLLER))
    assert shape(describe(client, ["pa", "nope"], 5)) == (
        [(E.NOT_CONTROLLER, "pa", []), (E.NOT_CONTROLLER, "nope", [])], None)
    # ElectLeaders v0 has no top-level error code: the partitions carry it
    client.core.control(K.ELECT_LEADERS, Intercept(error=E.NOT_CONTROLLER))
    assert results(elect(client, 0, 0, [{"topic": "pa", "partitions": [0]}])) == {("pa", 0): (E.NOT_CONTROLLER, None)}
