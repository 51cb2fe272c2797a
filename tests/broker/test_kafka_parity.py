"""Where kproto's broker answered differently from Apache Kafka, found with real clients:
committed offsets of a deleted topic, Metadata by topic id, a fenced transactional producer's
Produce, a partition reassignment on a cluster. Each test states what Kafka does.

The tests talk to a broker through :class:`Target` (a bootstrap address and a confluent-kafka
AdminClient) and run against kproto's single broker and cluster and against Apache Kafka 4.4's
single node and cluster (``target``; ``cluster`` for what needs three brokers): Apache Kafka
is the judge of what the answer should be."""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable, Iterator, Optional

import pytest

from kproto.client.connection import Connection
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


class Target:
    """A broker under test: ``bootstrap`` and an ``admin`` client, raw requests through
    kproto's client (:meth:`request`)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def request(self, body: Any, version: Optional[int] = None) -> Any:
        host, port = self.bootstrap.split(",")[0].rsplit(":", 1)

        async def ask() -> Any:
            async with await Connection.open(host, int(port)) as conn:
                return await conn.request(body, version)
        return asyncio.run(ask())

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        futures = self.admin.create_topics([NewTopic(name, partitions, replication_factor)])
        futures[name].result(30)
        eventually(lambda: self.topic_id(name) is not None, what=f"{name} in metadata")

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name])[name].result(30)
        eventually(lambda: self.topic_id(name) is None, what=f"{name} gone from metadata")

    def topic_id(self, name: str) -> Optional[Uuid]:
        """The topic's id once every partition has a leader (None: not there yet)."""
        md = metadata(self, [(name, Uuid.ZERO)], allow_auto_topic_creation=False)
        t = md.topics[0]
        if t.error_code or not t.partitions or any(p.leader_id < 0 for p in t.partitions):
            return None
        return t.topic_id


#: the brokers a test runs against: kproto's single broker and cluster, Apache Kafka's
#: single node and cluster (the fixtures of kproto.testing; Apache Kafka's are skipped where
#: Java or its jars are missing)
BROKERS = {"kproto": "kafka_broker", "kproto-cluster": "kafka_cluster",
           "apache": "apache_kafka", "apache-cluster": "apache_kafka_cluster"}
CLUSTERS = ["kproto-cluster", "apache-cluster"]


@pytest.fixture(params=list(BROKERS))
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """Each broker of :data:`BROKERS` as a :class:`Target`."""
    yield Target(request.getfixturevalue(BROKERS[request.param]).bootstrap)


@pytest.fixture(params=CLUSTERS)
def cluster(request: pytest.FixtureRequest) -> Iterator[Target]:
    """A cluster of three brokers (ids 1, 2, 3), kproto's and Apache Kafka's."""
    yield Target(request.getfixturevalue(BROKERS[request.param]).bootstrap)


def eventually(check: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def metadata(t: Target, topics: list[tuple[Optional[str], Uuid]], version: int = 12,
             allow_auto_topic_creation: bool = False) -> Any:
    cls = request_codec(ApiKey.METADATA).cls
    body = cls(topics=[cls.MetadataRequestTopic(name=n, topic_id=i) for n, i in topics],
               allow_auto_topic_creation=allow_auto_topic_creation,
               include_topic_authorized_operations=False)
    return t.request(body, version)


# ---------------------------------------------------------------------------- Metadata by id
def test_metadata_by_topic_id_ignores_the_empty_name_the_java_client_sends(target: Target) -> None:
    """Kafka's ``handleTopicMetadataRequest``: once any topic id is given, the request is by
    id; names (the Java Admin's ``describeTopics(TopicCollection.ofTopicIds(..))`` sends "")
    are not looked up. Unknown ids come first with UNKNOWN_TOPIC_ID and a null name."""
    name = unique("by-id")
    target.create_topic(name, partitions=2)
    tid = target.topic_id(name)
    assert tid is not None
    for given in ("", None):
        md = metadata(target, [(given, tid)])
        assert [(t.error_code, t.name, t.topic_id) for t in md.topics] == [(0, name, tid)]
        assert sorted(p.partition_index for p in md.topics[0].partitions) == [0, 1]
    missing = Uuid(uuid.uuid4().bytes)
    md = metadata(target, [("", tid), ("", missing)], allow_auto_topic_creation=True)
    assert [(t.error_code, t.name, t.topic_id) for t in md.topics] == [
        (E.UNKNOWN_TOPIC_ID, None, missing), (0, name, tid)]


def test_metadata_topic_id_before_v12_is_an_invalid_request(target: Target) -> None:
    """v10 and v11 carry a topic id field, but Kafka refuses a request using it."""
    name = unique("by-id-v11")
    target.create_topic(name)
    tid = target.topic_id(name)
    md = metadata(target, [(name, tid)], version=11)
    assert [t.error_code for t in md.topics] == [E.INVALID_REQUEST]
    assert metadata(target, [(name, Uuid.ZERO)], version=11).topics[0].error_code == 0


@pytest.fixture(scope="session")
def java_cp(tmp_path_factory: Any) -> str:
    import java_interop as jv
    return jv.classpath(str(tmp_path_factory.mktemp("java")))


def test_java_admin_describes_topics_by_id(target: Target, java_cp: str) -> None:
    """``Admin.describeTopics(TopicCollection.ofTopicIds(..))`` of the Java client: the topic
    by its id, and UnknownTopicIdException for an id no topic has."""
    import java_interop as jv
    events = jv.run(java_cp, target.bootstrap, "topicids")
    [found] = jv.of(events, "topicids", "by-id")
    assert (found["name"], found["partitions"]) == ("j-topicids", 2)
    assert found["topic_id"] == str(target.topic_id("j-topicids"))
    [unknown] = jv.of(events, "topicids", "unknown-id")
    assert unknown["error"] == "UnknownTopicIdException"


# ---------------------------------------------------------------------------- fenced producer
def test_fenced_producer_learns_it_is_fenced_at_its_next_produce(target: Target) -> None:
    """A transactional producer fenced by a second one with its transactional id (whose
    InitProducerId aborts the open transaction) produces again. Kafka's produce path asks the
    coordinator (KIP-890 verification): an epoch that is not the transaction's is fenced,
    INVALID_PRODUCER_EPOCH, which librdkafka turns into its fatal _FENCED at once (with
    INVALID_TXN_STATE it only asked for an abort, and learnt of the fence a transaction later)."""
    topic = unique("fenced")
    target.create_topic(topic)
    conf = {"bootstrap.servers": target.bootstrap, "transactional.id": unique("fenced"),
            "linger.ms": 0, "message.timeout.ms": 15000}
    first = ck.Producer(conf)
    first.init_transactions(20)
    first.begin_transaction()
    first.produce(topic, b"before")
    assert first.flush(20) == 0
    ck.Producer(conf).init_transactions(20)
    errors: list[Any] = []
    try:
        first.produce(topic, b"after", on_delivery=lambda err, msg: errors.append(err))
        first.flush(20)
    except ck.KafkaException as exc:
        # it may already know (a request of its own in the background was refused): no produce
        assert exc.args[0].code() == ck.KafkaError._STATE, exc
    except SystemError:
        pass  # the fatal error surfaces from the delivery callback's poll
    assert [e.code() for e in errors] in ([], [ck.KafkaError.INVALID_PRODUCER_EPOCH]), errors
    with pytest.raises(ck.KafkaException) as commit:
        first.commit_transaction(20)
    err = commit.value.args[0]
    assert err.fatal() and err.code() == ck.KafkaError._FENCED, err


# ---------------------------------------------------------------------------- deleted topics
def produce_values(target: Target, topic: str, values: list[bytes]) -> None:
    p = ck.Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(20) == 0


def commit_offset(target: Target, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` for partition 0 as a simple consumer (no group membership)."""
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group})
    deadline = time.monotonic() + 20
    try:
        while True:
            try:
                c.commit(offsets=[ck.TopicPartition(topic, 0, offset)], asynchronous=False)
                return
            except ck.KafkaException as exc:
                # a coordinator just elected (the offsets topic created on first use) is
                # still loading, or moves: Kafka's own clients retry these
                if not exc.args[0].retriable() and exc.args[0].code() not in _COORDINATOR_MOVING \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


_COORDINATOR_MOVING = (ck.KafkaError.NOT_COORDINATOR, ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       ck.KafkaError.COORDINATOR_NOT_AVAILABLE)


def committed(target: Target, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 (-1001: none), read with OffsetFetch."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    f = target.admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, 0)])])[group]
    [tp] = f.result(20).topic_partitions
    return int(tp.offset)


def consume_all(target: Target, group: str, topic: str, expect: int) -> list[bytes]:
    c = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and len(out) < expect:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
        # anything past what is expected would be a duplicate: look a moment longer
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


def test_deleting_a_topic_deletes_the_offsets_groups_committed_for_it(target: Target) -> None:
    """Kafka's group coordinator deletes the committed offsets of a deleted topic's partitions
    (``onPartitionsDeleted``): a topic created again under the name is read from its start,
    not from the old topic's offset (which skipped its first records)."""
    topic, group = unique("recreated"), unique("group")
    target.create_topic(topic)
    produce_values(target, topic, [b"old-%d" % i for i in range(5)])
    commit_offset(target, group, topic, 5)
    assert committed(target, group, topic) == 5
    target.delete_topic(topic)
    eventually(lambda: committed(target, group, topic) < 0, what="the offset deleted with its topic")
    target.create_topic(topic)
    produce_values(target, topic, [b"new-%d" % i for i in range(10)])
    assert committed(target, group, topic) < 0
    assert consume_all(target, group, topic, 10) == [b"new-%d" % i for i in range(10)]


def test_offsets_of_a_deleted_topic_stay_deleted_after_a_restart(kafka_broker: Any) -> None:
    """The deletion is written to ``__consumer_offsets`` (tombstones), so a restarted broker
    does not load the old offsets back; a transactional offset pending when the topic went is
    dropped too, and its transaction's COMMIT does not bring it back."""
    target = Target(kafka_broker.bootstrap)
    topic, group, pending_group = unique("gone"), unique("group"), unique("txn-group")
    target.create_topic(topic)
    produce_values(target, topic, [b"x"] * 3)
    commit_offset(target, group, topic, 3)
    producer = ck.Producer({"bootstrap.servers": target.bootstrap, "transactional.id": unique("txn")})
    producer.init_transactions(20)
    producer.begin_transaction()
    meta = ck.Consumer({"bootstrap.servers": target.bootstrap, "group.id": pending_group})
    producer.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 2)], meta.consumer_group_metadata(), 20)
    meta.close()
    target.delete_topic(topic)
    producer.commit_transaction(20)
    assert committed(target, group, topic) < 0
    assert committed(target, pending_group, topic) < 0
    kafka_broker.restart()
    target = Target(kafka_broker.bootstrap)
    assert committed(target, group, topic) < 0
    assert committed(target, pending_group, topic) < 0


# ---------------------------------------------------------------------------- a cluster
def partition_state(target: Target, topic: str) -> Optional[tuple[int, list[int], list[int]]]:
    """(leader, replicas, sorted ISR) of partition 0 as Metadata says (None: not known yet)."""
    [t] = metadata(target, [(topic, Uuid.ZERO)]).topics
    if t.error_code or len(t.partitions) != 1:
        return None
    p = t.partitions[0]
    return p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes)


def state_is(target: Target, topic: str, check: Callable[[int, list[int], list[int]], bool]
             ) -> Optional[tuple[int, list[int], list[int]]]:
    state = partition_state(target, topic)
    return state if state is not None and check(*state) else None


def reassigning(target: Target, topic: str) -> list[Any]:
    cls = request_codec(ApiKey.LIST_PARTITION_REASSIGNMENTS).cls
    r = target.request(cls(timeout_ms=10000, topics=[cls.ListPartitionReassignmentsTopics(
        name=topic, partition_indexes=[0])]), 0)
    assert r.error_code == 0, r
    return [p for t in r.topics for p in t.partitions]


def test_reassignment_replacing_the_leader_completes(cluster: Target) -> None:
    """``[1, 2] -> [3, 2]`` (Kafka's ReplicationControlManager and PartitionChangeBuilder):
    replica 3 is added and catches up, the leader adds it to the ISR, the reassignment
    completes, replica 1 leaves and leadership moves off it."""
    target = cluster
    topic = unique("moved")
    fs = target.admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])
    fs[topic].result(30)
    eventually(lambda: state_is(target, topic, lambda leader, replicas, isr: isr == [1, 2]),
               what="both replicas in sync")
    produce_values(target, topic, [b"r-%d" % i for i in range(20)])
    cls = request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
    r = target.request(cls(timeout_ms=10000, topics=[cls.ReassignableTopic(
        name=topic, partitions=[cls.ReassignablePartition(partition_index=0, replicas=[3, 2])])]), 0)
    assert [p.error_code for t in r.responses for p in t.partitions] == [0]
    eventually(lambda: not reassigning(target, topic), what="the reassignment to complete")
    leader, replicas, isr = eventually(lambda: state_is(target, topic, lambda leader, replicas, isr:
                                                         isr == [2, 3]), what="the ISR of the new replicas")
    assert (leader, replicas) == (3, [3, 2])
    assert consume_all(target, unique("g"), topic, 20) == [b"r-%d" % i for i in range(20)]
