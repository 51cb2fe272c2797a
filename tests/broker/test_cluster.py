"""The first hour with a kproto cluster through real clients (issue 17): what the metadata says,
topic admin through any broker, leader elections, a whole-cluster restart, a group's
coordinator failing over and the ``kproto logdir`` story of a run with a failover."""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable

import pytest

from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for
from kproto.cli.main import main as cli_main
from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.testing import CLUSTER_TEST_DEFAULTS, TEST_DEFAULTS, ClusterThread

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewPartitions, NewTopic)

TOPIC_TYPE = 2  # DescribeConfigs resource type of a topic


def admin(cluster: ClusterThread) -> Any:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def done(futures: dict[Any, Any], timeout: float = 15.0) -> dict[Any, Any]:
    """The results of an AdminClient call's futures (raising the first error)."""
    return {k: f.result(timeout) for k, f in futures.items()}


def eventually(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``check()`` from the test's thread until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def topic_metadata(client: Any, topic: str) -> Any:
    return client.list_topics(topic, timeout=5).topics[topic]


def led_everywhere(client: Any, topic: str, partitions: int) -> Any:
    """The topic's metadata once it has every partition with a leader, else None."""
    t = topic_metadata(client, topic)
    if t.error is None and len(t.partitions) == partitions and \
            all(p.leader >= 0 and p.error is None for p in t.partitions.values()):
        return t
    return None


def partition_dirs(cluster: ClusterThread, broker: int, topic: str) -> set[int]:
    """The partitions of ``topic`` whose folders are in the broker's log dir."""
    root = os.path.join(cluster.data_dir, f"broker-{broker}")
    prefix = topic + "-"
    return {int(name[len(prefix):]) for name in os.listdir(root)
            if name.startswith(prefix) and name[len(prefix):].isdigit()}


def addresses(cluster: ClusterThread) -> dict[int, tuple[str, int]]:
    return cluster.inspect(lambda c: {n: (b.config.host, b.config.port)
                                      for n, b in c.brokers.items() if b.running})


def request_each(cluster: ClusterThread, body: Any) -> dict[int, Any]:
    """``body`` sent to every running broker with kproto's connection; the answers by broker."""
    async def ask() -> dict[int, Any]:
        out = {}
        for node, (host, port) in addresses(cluster).items():
            async with await Connection.open(host, port) as conn:
                out[node] = await conn.request(body)
        return out
    return asyncio.run(ask())


def produce(cluster: ClusterThread, topic: str, values: list[bytes], **config: Any) -> list[Any]:
    """Produce with acks=all; the delivered messages in order of delivery."""
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                     "enable.idempotence": True, **config})
    delivered: list[Any] = []

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append(msg)

    for i, v in enumerate(values):
        p.produce(topic, value=v, key=str(i).encode(), on_delivery=cb)
    assert p.flush(30) == 0
    assert len(delivered) == len(values)
    return delivered


def consume(cluster: ClusterThread, topic: str, count: int, group: str, **config: Any) -> list[Any]:
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    c.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m)
    finally:
        c.close()
    return out


# ---------------------------------------------------------------------------- metadata
@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_metadata_shows_brokers_leaders_replicas_and_sparse_log_dirs(kafka_cluster: ClusterThread) -> None:
    a = admin(kafka_cluster)
    done(a.create_topics([NewTopic("spread", 6, 3), NewTopic("pairs", 6, 2)]))
    cluster_id = kafka_cluster.inspect(lambda c: c.cluster_id)

    described = a.describe_cluster().result(10)
    assert described.cluster_id == cluster_id
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller.id in (1, 2, 3)  # a KRaft broker names a broker
    md = a.list_topics(timeout=5)
    assert md.cluster_id == cluster_id and sorted(md.brokers) == [1, 2, 3]

    for topic, rf in (("spread", 3), ("pairs", 2)):
        t = eventually(lambda: led_everywhere(a, topic, 6), what=f"{topic} led")
        image = kafka_cluster.inspect(lambda c: {i: (p.leader, list(p.replicas), list(p.isr))
                                                 for i, p in c.image().topics[topic].partitions.items()})
        for i, p in t.partitions.items():
            assert (p.leader, p.replicas, p.isrs) == image[i]
            assert len(set(p.replicas)) == rf and p.leader == p.replicas[0]
            assert sorted(p.isrs) == sorted(p.replicas)
        # leaders on all three brokers
        assert {p.leader for p in t.partitions.values()} == {1, 2, 3}
        # every broker's log dir holds its replicas and no other
        for broker in (1, 2, 3):
            hosted = {i for i, p in t.partitions.items() if broker in p.replicas}
            assert partition_dirs(kafka_cluster, broker, topic) == hosted
    assert all(len({b for b in (1, 2, 3) if i in partition_dirs(kafka_cluster, b, "pairs")}) == 2
               for i in range(6))


# ---------------------------------------------------------------------------- topic admin
@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_delete_grow_and_configure_topics_through_any_broker(kafka_cluster: ClusterThread) -> None:
    a = admin(kafka_cluster)
    done(a.create_topics([NewTopic("doomed", 3, 3), NewTopic("grow", 2, 2),
                          NewTopic("tuned", 1, 3)]))
    eventually(lambda: all(partition_dirs(kafka_cluster, b, "doomed") == {0, 1, 2} for b in (1, 2, 3)),
               what="doomed's replicas on every broker")

    done(a.delete_topics(["doomed"]))
    eventually(lambda: not any(partition_dirs(kafka_cluster, b, "doomed") for b in (1, 2, 3)),
               what="doomed's replicas deleted")
    assert "doomed" not in a.list_topics(timeout=5).topics
    assert not any(name.startswith("doomed") for b in (1, 2, 3)
                   for name in os.listdir(os.path.join(kafka_cluster.data_dir, f"broker-{b}")))

    done(a.create_partitions([NewPartitions("grow", 5)]))
    t = eventually(lambda: led_everywhere(a, "grow", 5), what="grow has 5 led partitions")
    for broker in (1, 2, 3):
        hosted = {i for i, p in t.partitions.items() if broker in p.replicas}
        assert eventually(lambda: partition_dirs(kafka_cluster, broker, "grow") == hosted,
                          what=f"grow's replicas on broker {broker}")
    produce(kafka_cluster, "grow", [b"x"] * 20)

    resource = ConfigResource(ConfigResource.Type.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "54321", incremental_operation=AlterConfigOpType.SET)])
    done(a.incremental_alter_configs([resource]))

    cls = request_codec(ApiKey.DESCRIBE_CONFIGS).cls
    body = cls(resources=[cls.DescribeConfigsResource(resource_type=TOPIC_TYPE, resource_name="tuned",
                                                      configuration_keys=None)],
               include_synonyms=False, include_documentation=False)

    def seen_everywhere() -> bool:
        for node, resp in request_each(kafka_cluster, body).items():
            (res,) = resp.results
            assert res.error_code == 0, (node, res.error_code)
            values = {c.name: (c.value, c.config_source) for c in res.configs}
            if values.get("retention.ms") != ("123456", 1) or \
                    values.get("max.message.bytes") != ("54321", 1):  # 1: DYNAMIC_TOPIC_CONFIG
                return False
        return True

    eventually(seen_everywhere, what="the topic's configs on every broker")
    # AdminClient sees it as well, with the defaults of the rest
    (entries,) = done(a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "tuned")])).values()
    assert entries["retention.ms"].value == "123456" and not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    # and the broker applies it: a record over max.message.bytes is refused
    p = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": "all"})
    errors: list[Any] = []
    p.produce("tuned", value=b"z" * 60_000, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE


# ---------------------------------------------------------------------------- elections
@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_preferred_leader_election_moves_leadership_back(kafka_cluster: ClusterThread) -> None:
    a = admin(kafka_cluster)
    done(a.create_topics([NewTopic("pref", 3, 3)]))
    t = eventually(lambda: led_everywhere(a, "pref", 3), what="pref led")
    preferred = {i: p.replicas[0] for i, p in t.partitions.items()}
    produce(kafka_cluster, "pref", [b"before"] * 30)

    # broker 1 shuts down cleanly (its leadership moves away) and comes back as a follower
    kafka_cluster.stop(1)
    moved = {i for i, b in preferred.items() if b == 1}
    assert moved and all(kafka_cluster.leader("pref", i) not in (None, 1) for i in moved)
    kafka_cluster.start(1)
    kafka_cluster.wait_for(lambda c: all(1 in c.isr("pref", i) for i in range(3)), 15,
                           "broker 1 back in every ISR")
    assert all(kafka_cluster.leader("pref", i) != 1 for i in moved)

    result = a.elect_leaders(ck.ElectionType.PREFERRED,
                             [ck.TopicPartition("pref", i) for i in range(3)]).result(10)
    # each partition not led by its preferred replica is elected, the others need no election
    assert {tp.partition: (err.code() if err else None) for tp, err in result.items()} == \
        {i: None if i in moved else ck.KafkaError.ELECTION_NOT_NEEDED for i in range(3)}
    kafka_cluster.wait_for(lambda c: all(c.leader("pref", i) == preferred[i] for i in range(3)), 10,
                           "every partition led by its preferred replica")
    t = eventually(lambda: (lambda t: t if all(p.leader == preferred[i] for i, p in t.partitions.items())
                            else None)(topic_metadata(a, "pref")), what="clients see the preferred leaders")
    # nothing lost on the way, and producing goes on at the preferred leaders
    produce(kafka_cluster, "pref", [b"after"] * 30)
    assert len(consume(kafka_cluster, "pref", 60, "pref-reader")) == 60


@pytest.mark.kafka_cluster(brokers=3, controllers=1, min_insync_replicas=1)
def test_unclean_leader_election_only_where_enabled(kafka_cluster: ClusterThread) -> None:
    a = admin(kafka_cluster)
    done(a.create_topics([
        NewTopic("clean", 1, replica_assignment=[[1, 2]]),
        NewTopic("unclean", 1, replica_assignment=[[1, 2]],
                 config={"unclean.leader.election.enable": "true"})]))
    for topic in ("clean", "unclean"):
        eventually(lambda: led_everywhere(a, topic, 1), what=f"{topic} led")
        assert kafka_cluster.leader(topic, 0) == 1
    produce(kafka_cluster, "clean", [b"both"] * 5)
    produce(kafka_cluster, "unclean", [b"both"] * 5)

    # the follower goes (a controlled shutdown: out of the ISR at once), the leader takes
    # writes alone
    kafka_cluster.stop(2)
    kafka_cluster.wait_for(lambda c: c.isr("clean", 0) == [1] and c.isr("unclean", 0) == [1], 15,
                           "ISR shrunk to the leader")
    produce(kafka_cluster, "clean", [b"leader only"] * 5)
    produce(kafka_cluster, "unclean", [b"leader only"] * 5)

    # the leader dies, then only the stale follower comes back
    kafka_cluster.stop(1, abrupt=True)
    kafka_cluster.wait_for(lambda c: c.leader("clean", 0) is None, 15, "no leader once 1 is fenced")
    kafka_cluster.start(2)
    kafka_cluster.wait_for(lambda c: c.leader("unclean", 0) == 2, 15,
                           "the stale follower elected where unclean election is enabled")
    p = eventually(lambda: (lambda p: p if p.leader == 2 else None)(
        topic_metadata(a, "unclean").partitions[0]), what="clients see the unclean leader")
    assert p.isrs == [2] and p.error is None
    # broker 2 is alive and in the replicas, yet "clean" stays without a leader
    assert kafka_cluster.inspect(lambda c: c.image().brokers[2].fenced) is False
    time.sleep(0.5)
    p = topic_metadata(a, "clean").partitions[0]
    assert p.leader == -1 and p.error is not None
    assert p.error.code() == ck.KafkaError.LEADER_NOT_AVAILABLE
    assert kafka_cluster.isr("clean", 0) == [1]

    # the last in-sync replica returns and leads again, with every acknowledged record
    kafka_cluster.start(1)
    kafka_cluster.wait_for(lambda c: c.leader("clean", 0) == 1, 15, "the old leader back")
    assert [m.value() for m in consume(kafka_cluster, "clean", 10, "clean-reader")] == \
        [b"both"] * 5 + [b"leader only"] * 5
    # the unclean side kept only what its new leader had
    kafka_cluster.wait_for(lambda c: c.isr("unclean", 0) == [1, 2] or c.isr("unclean", 0) == [2, 1],
                           15, "the old leader back in sync as a follower")
    assert [m.value() for m in consume(kafka_cluster, "unclean", 5, "unclean-reader")] == [b"both"] * 5


# ---------------------------------------------------------------------------- restarts
CONFIG = {**TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS}


def by_partition(messages: list[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for m in messages:
        out.setdefault(m.partition(), []).append(m.offset())
    return {p: sorted(offsets) for p, offsets in out.items()}


def test_whole_cluster_restart_keeps_records_leaders_and_offsets(tmp_path: Any) -> None:
    data = tmp_path / "cluster"
    values = [f"r{i}".encode() for i in range(300)]
    with ClusterThread(data, **CONFIG) as first:
        cluster_id = first.inspect(lambda c: c.cluster_id)
        first.create_topic("durable", partitions=3, replication_factor=3)
        written = by_partition(produce(first, "durable", values))
        first.wait_for(lambda c: all(c.isr("durable", p) and len(c.isr("durable", p)) == 3
                                     for p in range(3)), 10, "full ISRs")
    assert sorted(written) == [0, 1, 2] and all(o == list(range(len(o))) for o in written.values())

    with ClusterThread(data, **CONFIG) as second:
        assert second.inspect(lambda c: c.cluster_id) == cluster_id  # read from meta.properties
        second.wait_for(lambda c: all(c.leader("durable", p) is not None
                                      and sorted(c.isr("durable", p)) == [1, 2, 3] for p in range(3)),
                        15, "leaders and full ISRs after the restart")
        a = admin(second)

        def led_with_full_isrs() -> Any:
            # the brokers' metadata follows the controller's: on a busy machine a client may
            # see the leaders before the full ISRs the controller already holds
            t = led_everywhere(a, "durable", 3)
            return t if t and all(sorted(p.isrs) == [1, 2, 3] for p in t.partitions.values()) else None

        eventually(led_with_full_isrs, what="clients see the leaders and full ISRs")
        read = consume(second, "durable", len(values), "restart-reader")
        assert sorted(m.value() for m in read) == sorted(values)
        assert by_partition(read) == written
        # producing goes on where the logs ended
        more = by_partition(produce(second, "durable", [b"after"] * 30))
        for p, offsets in more.items():
            assert offsets == list(range(len(written[p]), len(written[p]) + len(offsets)))


# ---------------------------------------------------------------------------- groups
def test_group_coordinator_failover_keeps_committed_offsets(tmp_path: Any, capsys: Any) -> None:
    data = tmp_path / "cluster"
    with ClusterThread(data, **CONFIG) as cluster:
        a = admin(cluster)
        done(a.create_topics([NewTopic("events", 2, 3)]))
        eventually(lambda: led_everywhere(a, "events", 2), what="events led")
        produce(cluster, "events", [f"e{i}".encode() for i in range(40)])

        first = consume(cluster, "events", 40, "g")
        assert len(first) == 40
        # the group commits what it read of each partition, short of the end
        committed = {p: len(offsets) // 2 for p, offsets in by_partition(first).items()}
        c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g"})
        c.commit(offsets=[ck.TopicPartition("events", p, o) for p, o in committed.items()],
                 asynchronous=False)
        c.close()

        (group,) = done(a.describe_consumer_groups(["g"])).values()
        coordinator = group.coordinator.id
        offsets_partition = partition_for("g", cluster.inspect(
            lambda c: len(c.image().topics[OFFSETS_TOPIC].partitions)))
        assert cluster.leader(OFFSETS_TOPIC, offsets_partition) == coordinator
        cluster.stop(coordinator, abrupt=True)
        cluster.wait_for(lambda c: c.leader(OFFSETS_TOPIC, offsets_partition) not in (None, coordinator),
                         15, "a new leader of the group's __consumer_offsets partition")
        assert cluster.inspect(lambda c: sorted(b for b, info in c.image().brokers.items()
                                                if info.fenced)) == [coordinator]

        def listed() -> Any:
            try:
                (res,) = done(a.list_consumer_group_offsets(
                    [ck.ConsumerGroupTopicPartitions("g")]), 5).values()
            except ck.KafkaException:
                return None  # the new coordinator still loading
            return {tp.partition: tp.offset for tp in res.topic_partitions}

        assert eventually(listed, what="the committed offsets at the new coordinator") == committed
        (group,) = done(a.describe_consumer_groups(["g"])).values()
        assert group.coordinator.id not in (coordinator, -1)

        # a consumer of the group resumes from the committed offsets
        rest = consume(cluster, "events", 40 - sum(committed.values()), "g")
        resumed = by_partition(rest)
        assert {p: o[0] for p, o in resumed.items()} == committed
        assert sum(len(o) for o in resumed.values()) == 40 - sum(committed.values())
        cluster.start(coordinator)
        cluster.wait_for(lambda c: all(coordinator in c.isr("events", p) for p in range(2)), 15,
                         "the old coordinator back in sync")
        active = cluster.active_controller()

    # the logs of the run, read by kproto logdir once the cluster is down
    assert cli_main(["logdir", str(data / f"broker-{coordinator}")]) == 0
    out = capsys.readouterr().out
    assert "events-0" in out and "__cluster_metadata-0" in out
    assert cli_main(["logdir", str(data / f"controller-{active}"), "--metadata-timeline"]) == 0
    out = capsys.readouterr().out
    # the controller's metadata log tells the failover: the coordinator fenced, its partitions
    # led elsewhere, then it registered again and caught up
    fencings = [line for line in out.splitlines() if " fenced (epoch" in line]
    # only the killed broker: the others heartbeat on while its files are finished
    assert len(fencings) == 1 and f"broker {coordinator} fenced" in fencings[0], fencings
    moved = f"{OFFSETS_TOPIC}-{offsets_partition}: leader {coordinator} -> "
    assert any(moved in line for line in out.splitlines()), out
    assert out.count(f"broker {coordinator} registered") == 2, out
    assert "events-0 leader" in out and "1 quorum elections" in out


# ---------------------------------------------------------------------------- offsets by topic id
@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_offset_commit_and_fetch_v10_by_topic_id_at_the_coordinator(kafka_cluster: ClusterThread) -> None:
    """OffsetCommit/OffsetFetch v10 name topics by id: a cluster's coordinator resolves them from
    the metadata image, an id the cluster does not know is UNKNOWN_TOPIC_ID."""
    a = admin(kafka_cluster)
    done(a.create_topics([NewTopic("byid", 2, 2)]))
    eventually(lambda: led_everywhere(a, "byid", 2), what="byid led")
    unknown = Uuid(bytes(range(16)))
    oc, of, fc = (request_codec(k).cls for k in (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
                                                  ApiKey.FIND_COORDINATOR))

    async def run() -> tuple[Any, Any, Any]:
        host, port = kafka_cluster.bootstrap.split(",")[0].rsplit(":", 1)
        async with await Connection.open(host, int(port)) as conn:
            md = await conn.request(request_codec(ApiKey.METADATA).cls(topics=[
                request_codec(ApiKey.METADATA).cls.MetadataRequestTopic(name="byid")]), 12)
            coord = None
            for _ in range(50):
                coord = (await conn.request(fc(key_type=0, coordinator_keys=["byid-g"]), 4)).coordinators[0]
                if coord.error_code == 0:
                    break
                await asyncio.sleep(0.2)
        tid = md.topics[0].topic_id
        async with await Connection.open(coord.host, coord.port) as conn:
            committed = await conn.request(oc(group_id="byid-g", generation_id_or_member_epoch=-1, topics=[
                oc.OffsetCommitRequestTopic(topic_id=i, partitions=[oc.OffsetCommitRequestPartition(
                    partition_index=1, committed_offset=3)]) for i in (tid, unknown)]), 10)
            fetched = await conn.request(of(groups=[of.OffsetFetchRequestGroup(group_id="byid-g", topics=[
                of.OffsetFetchRequestTopics(topic_id=i, partition_indexes=[1]) for i in (unknown, tid)])]), 10)
        return tid, committed, fetched
    tid, committed, fetched = asyncio.run(run())
    assert [(t.topic_id, t.partitions[0].error_code) for t in committed.topics] == [
        (unknown, ErrorCode.UNKNOWN_TOPIC_ID), (tid, 0)]
    assert [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code)
            for t in fetched.groups[0].topics] == [(tid, 3, 0), (unknown, -1, ErrorCode.UNKNOWN_TOPIC_ID)]
