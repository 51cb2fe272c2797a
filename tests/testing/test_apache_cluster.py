"""Apache Kafka with 3 brokers and 1 dedicated controller (``apache_kafka_cluster``, shared by
these tests): every broker registered, produce/consume through both clients, and the faults'
observable effects: a killed (kill -9) or paused (SIGSTOP) leader loses its partition to another
replica, and rejoins the ISR when started again or resumed. (A clean stop and start is
tested on the single node, tests/testing/test_apache_single.py: each JVM start costs seconds.)"""
from __future__ import annotations

import uuid

import pytest

from apache_support import confluent_consume, confluent_produce, kproto_produce_consume


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def isr(kafka, topic, partition=0, via=None):
    for t in kafka.metadata([topic], via).topics:
        for p in t.partitions:
            if p.partition_index == partition:
                return sorted(p.isr_nodes)
    return None


def test_three_brokers_and_a_dedicated_controller(apache_kafka_cluster):
    kafka = apache_kafka_cluster
    assert kafka.broker_ids == [1, 2, 3] and kafka.controller_ids == [3001]
    assert kafka.properties(3001)["process.roles"] == "controller"
    assert kafka.properties(1)["process.roles"] == "broker"
    for b in kafka.broker_ids:
        md = kafka.metadata(via=b)
        assert sorted(x.node_id for x in md.brokers) == [1, 2, 3]
        assert md.controller_id in (1, 2, 3)  # KRaft: clients are told a random broker
    # the dedicated controller leads the metadata quorum; the brokers follow it
    for node in (3001, 1, 2, 3):
        state = (kafka.log_dir(node) / "__cluster_metadata-0" / "quorum-state").read_text()
        assert '"leaderId":3001,' in state, (node, state)


def test_the_shared_cluster_has_a_scram_listener_and_share_groups(apache_kafka_cluster):
    """The SASL_PLAINTEXT listener of APACHE_CLUSTER_SCRAM_USERS beside PLAINTEXT on every
    broker, and share groups (KIP-932) on: a 4.4 node is formatted with share.version 2."""
    from kproto.codecs import request as request_codec
    from kproto.testing import APACHE_CLUSTER_SCRAM_USERS
    from kproto.testing.apache import _request

    kafka = apache_kafka_cluster
    assert kafka.scram_users == APACHE_CLUSTER_SCRAM_USERS
    for b in kafka.broker_ids:
        n = kafka.nodes[b]
        assert f"SASL_PLAINTEXT://127.0.0.1:{n.sasl_port}" in kafka.properties(b)["listeners"]
        # ApiVersions is answered before authentication, on either listener alike
        for port in (n.port, n.sasl_port):
            versions = _request(kafka.host, port, request_codec(18).cls(
                client_software_name="kproto-test", client_software_version="1"), 3)
            assert versions.error_code == 0
            finalized = {f.name: f.max_version_level for f in versions.finalized_features}
            assert finalized.get("share.version", 0) >= 1, finalized
            assert 76 in {k.api_key for k in versions.api_keys}   # ShareGroupHeartbeat


def test_both_clients_produce_and_consume_through_the_cluster(apache_kafka_cluster):
    kafka = apache_kafka_cluster
    topic = topic_name("kp3")
    metas, got = kproto_produce_consume(kafka.bootstrap, topic, 60, partitions=3)
    assert sorted((r.partition, r.offset, r.value) for r in got) == \
        sorted((m.partition, m.offset, b"v%d" % i) for i, m in enumerate(metas))
    pytest.importorskip("confluent_kafka")
    topic = topic_name("ck3")
    kafka.create_topic(topic, partitions=1, replication_factor=3)
    acked = confluent_produce(kafka.bootstrap, topic, 30)
    assert confluent_consume(kafka.bootstrap, topic, 30) == acked


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_a_leader_that_fails_loses_its_partition_and_rejoins(apache_kafka_cluster, fault):
    pytest.importorskip("confluent_kafka")
    kafka = apache_kafka_cluster
    topic = topic_name(fault)
    kafka.create_topic(topic, partitions=1, replication_factor=3)
    before = confluent_produce(kafka.bootstrap, topic, 10)
    leader = kafka.leader(topic, 0)
    assert leader in (1, 2, 3) and isr(kafka, topic) == [1, 2, 3]
    if fault == "pause":
        kafka.pause(leader)
    else:
        kafka.stop(leader, abrupt=fault == "kill")
    others = [b for b in kafka.broker_ids if b != leader]
    kafka.wait_for(lambda: kafka.leader(topic, 0, via=others[0]) in others, 30, "a new leader")
    kafka.wait_for(lambda: isr(kafka, topic, via=others[0]) == others, 30, "the ISR without the old leader")
    # acks=all still succeeds with two of three replicas, and nothing acknowledged was lost
    after = confluent_produce(",".join(f"127.0.0.1:{kafka.nodes[b].port}" for b in others), topic, 5)
    assert [o for o, _, _ in after] == list(range(10, 15))
    if fault == "pause":
        kafka.resume(leader)
    else:
        kafka.start(leader)
    kafka.wait_for(lambda: isr(kafka, topic, via=others[0]) == [1, 2, 3], 60, "the old leader back in the ISR")
    assert confluent_consume(kafka.bootstrap, topic, 15) == before + after


@pytest.mark.apache_kafka(nodes=1, controllers=3, fresh=True)
def test_three_controllers_form_a_quorum_that_survives_losing_its_leader(apache_kafka_cluster):
    """A broker and a quorum of three controllers (formatted with --initial-controllers), a
    cluster of the test's own (``fresh``: not shared, closed after it, nothing to restore);
    Kafka's MetadataQuorumCommand reports the voters, and a new leader after a kill -9."""
    from kproto.testing import apache
    kafka = apache_kafka_cluster
    assert kafka.controller_ids == [3001, 3002, 3003]

    def status(nodes, check=True):
        controllers = ",".join(f"127.0.0.1:{kafka.nodes[c].controller_port}" for c in nodes)
        out = apache.run_tool(kafka.version, "org.apache.kafka.tools.MetadataQuorumCommand",
                              "--bootstrap-controller", controllers, "describe", "--status", check=check)
        return dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)

    first = status(kafka.controller_ids)
    assert all(f'"id": {c},' in first["CurrentVoters"] for c in kafka.controller_ids)
    assert '"id": 1,' in first["CurrentObservers"]
    leader = int(first["LeaderId"])
    kafka.stop(leader, abrupt=True)
    rest = [c for c in kafka.controller_ids if c != leader]
    # until the election the tool may be sent to the dead leader and time out (exit 1)
    kafka.wait_for(lambda: int(status(rest, check=False).get("LeaderId", -1)) in rest, 90,
                   "a new quorum leader", interval=1.0)
    # the broker still serves: a topic can be created through the remaining quorum
    kafka.create_topic(f"quorum-{leader}", partitions=1, replication_factor=1)
