"""Version negotiation (issue 15): every request of kproto's client goes at the highest version
both the broker and the client's own table (``CLIENT_VERSIONS``) have, never the schemas'
newest; against a Kafka 4.x broker (KIP-896's raised minimums, answering what it dropped with
UNSUPPORTED_VERSION) the producer names topics by id (Produce v13) and reads answers by id."""
from __future__ import annotations

import asyncio
import contextlib

import pytest

import kproto
from kproto.client.cluster import Cluster
from kproto.client.connection import Connection
from kproto.client.producer import Producer
from kproto.client.protocol import (CLIENT_VERSIONS, ApiVersionTable, NoCommonVersionError,
                                    UnsupportedVersionError)
from kproto.error_codes import ErrorCode
from kproto.records import iter_batches
from kproto.schemas.api_keys import ApiKey as K

from client_io_fakebroker import FakeBroker, kafka_ranges, metadata_response

#: What the client sends to an Apache Kafka 3.9 broker, a 4.3.1 one and a 4.4 one, API by API (where
#: kproto stops below the broker: EndTxn/TxnOffsetCommit v5 are transaction version 2, which the
#: producer asks for only where the broker finalizes it (v4 at most otherwise); AddPartitionsToTxn
#: v4+ is for brokers). OffsetCommit/OffsetFetch v10 and TxnOffsetCommit v6 (topics by id) are
#: used where the client knows every topic's id, v9 and v5 otherwise.
EXPECTED = {
    #                               3.9  4.3.1  4.4
    K.PRODUCE:                     (11, 13, 13),
    K.FETCH:                       (17, 18, 18),
    K.LIST_OFFSETS:                (9, 11, 11),
    K.METADATA:                    (12, 13, 13),
    K.OFFSET_COMMIT:               (9, 10, 10),
    K.OFFSET_FETCH:                (9, 10, 10),
    K.FIND_COORDINATOR:            (6, 6, 6),
    K.JOIN_GROUP:                  (9, 9, 9),
    K.HEARTBEAT:                   (4, 4, 4),
    K.LEAVE_GROUP:                 (5, 5, 5),
    K.SYNC_GROUP:                  (5, 5, 5),
    K.DESCRIBE_GROUPS:             (5, 6, 6),
    K.LIST_GROUPS:                 (5, 5, 5),
    K.SASL_HANDSHAKE:              (1, 1, 1),
    K.API_VERSIONS:                (4, 4, 5),
    K.CREATE_TOPICS:               (7, 7, 7),
    K.DELETE_TOPICS:               (6, 6, 6),
    K.DELETE_RECORDS:              (2, 2, 2),
    K.INIT_PRODUCER_ID:            (5, 6, 6),
    K.ADD_PARTITIONS_TO_TXN:       (3, 3, 3),
    K.ADD_OFFSETS_TO_TXN:          (4, 4, 4),
    K.END_TXN:                     (4, 5, 5),
    K.TXN_OFFSET_COMMIT:           (4, 5, 6),
    K.DESCRIBE_ACLS:               (3, 3, 3),
    K.CREATE_ACLS:                 (3, 3, 3),
    K.DELETE_ACLS:                 (3, 3, 3),
    K.DESCRIBE_CONFIGS:            (4, 4, 4),
    K.SASL_AUTHENTICATE:           (2, 2, 2),
    K.CREATE_PARTITIONS:           (3, 3, 3),
    K.DELETE_GROUPS:               (2, 2, 3),
    K.INCREMENTAL_ALTER_CONFIGS:   (1, 1, 1),
    K.DESCRIBE_CLIENT_QUOTAS:      (1, 1, 1),
    K.ALTER_CLIENT_QUOTAS:         (1, 1, 1),
    K.CONSUMER_GROUP_HEARTBEAT:    (0, 1, 1),
    K.CONSUMER_GROUP_DESCRIBE:     (0, 1, 1),
    K.UPDATE_FEATURES:             (1, 2, 2),
    K.ELECT_LEADERS:               (2, 2, 2),
    K.ALTER_PARTITION_REASSIGNMENTS: (0, 1, 1),
    K.LIST_PARTITION_REASSIGNMENTS: (0, 0, 0),
    K.DESCRIBE_TOPIC_PARTITIONS:   (0, 0, 0),
    # share groups: Kafka 3.9 has only the early-access v0, which the client does not write
    K.SHARE_GROUP_HEARTBEAT:       (None, 1, 1),
    K.SHARE_FETCH:                 (None, 2, 2),
    K.SHARE_ACKNOWLEDGE:           (None, 2, 2),
    K.CREATE_DELEGATION_TOKEN:     (3, 3, 3),
    K.RENEW_DELEGATION_TOKEN:      (2, 2, 2),
    K.EXPIRE_DELEGATION_TOKEN:     (2, 2, 2),
    K.DESCRIBE_DELEGATION_TOKEN:   (3, 3, 3),
}

HAS_V13 = kproto.request(K.PRODUCE).valid_versions[-1] >= 13
needs_43_schemas = pytest.mark.skipif(not HAS_V13, reason="the schemas in this tree stop before Produce v13")


def table(release: str) -> ApiVersionTable:
    return ApiVersionTable({k: range(lo, hi + 1) for k, (lo, hi) in kafka_ranges(release).items()})


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


# ---- the table ---------------------------------------------------------------------------------

# 4.4: the 4.4 branch head's specs (kafka-4.4-snapshot), which equal the 4.4.0 release's
@pytest.mark.parametrize("release,column", [("3.9", 0), ("4.3.1", 1), ("4.4-snapshot", 2)])
def test_chosen_version_per_api_against_kafka_releases(release, column):
    versions = table(release)
    assert set(EXPECTED) == set(CLIENT_VERSIONS), "every API the client sends has an expectation"
    none = {key for key, cols in EXPECTED.items() if cols[column] is None}
    for key in none:
        with pytest.raises(UnsupportedVersionError):
            versions.pick(key)
    got = {key: versions.pick(key) for key in EXPECTED if key not in none}
    # capped by the codec where the schemas in this tree are older than 4.3.1's
    want = {key: min(cols[column], kproto.request(key).valid_versions[-1])
            for key, cols in EXPECTED.items() if key not in none}
    assert got == want
    # what depends on the request's contents, as Kafka's clients choose it
    assert versions.pick(K.PRODUCE, range(0, 13)) == min(12, want[K.PRODUCE])   # a topic without id
    assert versions.pick(K.PRODUCE, range(0, 12)) == 11                         # transactional (TV1)
    assert versions.pick(K.FETCH, range(0, 13)) == 12                           # a topic without id


def test_the_client_table_decides_not_the_schemas():
    # a schema set that learned a newer version changes nothing until the client's table does
    broker = {K.PRODUCE: range(3, 14), K.METADATA: range(0, 14)}
    assert ApiVersionTable(broker, client={K.PRODUCE: range(3, 12)}).pick(K.PRODUCE) == 11
    # an API the client code does not send has no version unless the caller names its own
    versions = ApiVersionTable({K.DESCRIBE_CLUSTER: range(0, 3)})
    assert K.DESCRIBE_CLUSTER not in CLIENT_VERSIONS
    with pytest.raises(UnsupportedVersionError, match="implements none"):
        versions.pick(K.DESCRIBE_CLUSTER)
    assert versions.pick(K.DESCRIBE_CLUSTER, range(0, 2)) == 1


def test_a_broker_above_the_client_is_an_unsupported_version_error():
    # a broker that dropped what the client writes: a clear error, nothing sent
    versions = ApiVersionTable({K.ADD_PARTITIONS_TO_TXN: range(4, 6), K.PRODUCE: range(0, 3)})
    with pytest.raises(UnsupportedVersionError, match=r"ADD_PARTITIONS_TO_TXN \(API key 24\): broker supports "
                                                      r"4-5, kproto's client 0-3"):
        versions.pick(K.ADD_PARTITIONS_TO_TXN)
    with pytest.raises(UnsupportedVersionError, match=r"broker supports 0-2, kproto's client 3-"):
        versions.pick(K.PRODUCE)  # record batches (magic 2) need Produce v3
    assert issubclass(UnsupportedVersionError, NoCommonVersionError)
    assert issubclass(UnsupportedVersionError, kproto.UnsupportedVersionError)


# ---- a Kafka 4.x broker ----------------------------------------------------------------------

class Kafka4Broker:
    """A fake Kafka 4.3.1 broker: advertises 4.3.1's ranges and answers any version outside
    them as Kafka 4 does (UNSUPPORTED_VERSION); topic ``t`` (id ``TID``, 2 partitions);
    Produce answers follow a script of error codes and name topics as the version does."""

    TID = kproto.Uuid(bytes(range(1, 17)))

    def __init__(self, script: tuple[int, ...] = ()) -> None:
        self.ranges = kafka_ranges("4.3.1")
        self.script = list(script)
        self.port = 0
        self.metadata_requests = 0
        self.produced: list[tuple[int, object, str, int]] = []   # (version, topic id, name, seq)
        self.out_of_range: list[tuple[int, int]] = []
        self.log: list[str] = []   # "metadata <topics>" and "produce <error code>", in order

    def __call__(self, header, body):
        key, ver = header.request_api_key, header.request_api_version
        lo, hi = self.ranges.get(key, (0, -1))
        if not lo <= ver <= hi and key != K.API_VERSIONS:
            self.out_of_range.append((key, ver))
            return "close"  # not in the answers we script; the test fails on out_of_range
        if key == K.METADATA:
            self.metadata_requests += 1
            self.log.append(f"metadata {','.join(t.name for t in body.topics or ())}")
            return metadata_response(self.port, {"t": (self.TID, 2)})
        if key == K.INIT_PRODUCER_ID:
            return kproto.response(K.INIT_PRODUCER_ID).cls(producer_id=77, producer_epoch=2)
        if key == K.PRODUCE:
            cls = kproto.response(K.PRODUCE).cls
            code = self.script.pop(0) if self.script else 0
            self.log.append(f"produce {code}")
            topics = []
            for td in body.topic_data:
                by_id = ver >= 13
                tid = td.topic_id if by_id else None
                parts = []
                for pd in td.partition_data:
                    [batch] = iter_batches(pd.records)
                    self.produced.append((ver, tid, td.name, batch.base_sequence))
                    parts.append(cls.PartitionProduceResponse(index=pd.index, error_code=code, base_offset=5))
                topics.append(cls.TopicProduceResponse(topic_id=tid, partition_responses=parts) if by_id
                              else cls.TopicProduceResponse(name=td.name, partition_responses=parts))
            return cls(responses=topics)
        return NotImplemented


@contextlib.asynccontextmanager
async def kafka4(broker: Kafka4Broker):
    async with FakeBroker(broker, versions=broker.ranges) as fb:
        broker.port = fb.port
        async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
            yield cluster


def produce_to_kafka4(broker: Kafka4Broker, **producer_args):
    async def main():
        async with kafka4(broker) as cluster:
            producer = await Producer(cluster, linger_ms=0, **producer_args).start()
            futs = [await producer.send("t", b"v%d" % i, partition=0) for i in range(2)]
            await producer.flush()
            return [f.exception() or f.result() for f in futs], cluster.metadata.topic_id("t")

    return run(main())


@needs_43_schemas
def test_producer_names_topics_by_id_and_reads_answers_by_id():
    broker = Kafka4Broker()
    results, tid = produce_to_kafka4(broker)
    assert tid == Kafka4Broker.TID  # learned from Metadata v13
    assert [(r.topic, r.partition, r.offset) for r in results] == [("t", 0, 5), ("t", 0, 6)]
    assert {(v, t, n) for v, t, n, _ in broker.produced} == {(13, Kafka4Broker.TID, "")}
    assert not broker.out_of_range


@needs_43_schemas
def test_unknown_topic_id_refreshes_metadata_and_retries():
    broker = Kafka4Broker(script=(ErrorCode.UNKNOWN_TOPIC_ID,))
    results, _ = produce_to_kafka4(broker)
    assert [r.offset for r in results] == [5, 6]
    assert [seq for *_, seq in broker.produced] == [0, 0]   # the same batch again, same sequence
    # the topic's metadata is looked up again between the failed attempt and the retry
    assert broker.log[broker.log.index("produce 100"):] == ["produce 100", "metadata t", "produce 0"]
    assert not broker.out_of_range


@needs_43_schemas
def test_an_answer_for_another_topic_id_is_no_answer(monkeypatch):
    broker = Kafka4Broker()
    other = kproto.Uuid(bytes(16 * [9]))
    real = Kafka4Broker.__call__

    def wrong_id(self, header, body):
        answer = real(self, header, body)
        if header.request_api_key == K.PRODUCE:
            for t in answer.responses:
                t.topic_id = other
        return answer

    monkeypatch.setattr(Kafka4Broker, "__call__", wrong_id)
    results, _ = produce_to_kafka4(broker)
    assert [str(r) for r in results] == ["the Produce response has no answer for t-0"] * 2


def test_transactional_and_id_less_produce_stay_below_v13():
    # a topic whose id Metadata does not give: v12, named (Kafka's Sender does the same)
    broker = Kafka4Broker()
    broker.TID = kproto.Uuid.ZERO
    results, tid = produce_to_kafka4(broker)
    assert tid == kproto.Uuid.ZERO and [r.offset for r in results] == [5, 6]
    assert {(v, n) for v, _, n, _ in broker.produced} == {(min(12, kproto.request(0).valid_versions[-1]), "t")}
    assert not broker.out_of_range


def test_connection_against_a_broker_above_the_client_raises_before_sending():
    async def main():
        ranges = kafka_ranges("4.3.1")
        ranges[K.ADD_PARTITIONS_TO_TXN] = (4, 5)  # a broker that kept only the brokers' batched form
        async with FakeBroker(versions=ranges) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            body = kproto.request(K.ADD_PARTITIONS_TO_TXN).cls()
            with pytest.raises(UnsupportedVersionError):
                conn.send(body)
            await conn.close()
            return [h.request_api_key for h, _ in fb.requests]

    assert run(main()) == [K.API_VERSIONS]  # nothing but the negotiation was sent


# ---- kproto's own broker, narrowed to Kafka 4.3.1's ranges ----------------------------------

@pytest.mark.skipif(not HAS_V13, reason="kproto.broker's group coordinator writes 4.3.1's record "
                                         "versions, which the schemas in this tree lack")
def test_producer_consumer_admin_against_kprotos_broker_with_4x_ranges(tmp_path):
    """kproto.broker, its advertised ranges narrowed to 4.3.1's (KIP-896's raised minimums:
    Produce 3+, Fetch 4+, OffsetCommit 2+, OffsetFetch 1+, ...), answering any other version
    UNSUPPORTED_VERSION as Kafka 4 does: the admin client, the idempotent and the transactional
    producer and a group consumer work, every request is at the top of what both sides have,
    and the consumer fetches by topic id."""
    from kproto.broker import Broker
    from kproto.client.admin import Admin
    from kproto.client.consumer import Consumer

    kafka43 = kafka_ranges("4.3.1")
    seen: list[tuple[int, int, object]] = []

    def watch(header, body):
        seen.append((header.request_api_key, header.request_api_version, body))
        return None  # let it through

    async def main():
        async with Broker(tmp_path / "data") as broker:
            core = broker.core
            assert core is not None
            # the broker has no option for this: its own table, within 4.3.1's, is what it
            # advertises and the only versions it serves (the dispatch asks the same method)
            own = core.api_versions()
            narrowed = {k: (max(lo, kafka43[k][0]), min(hi, kafka43[k][1])) for k, (lo, hi) in own.items()}
            core.api_versions = lambda: narrowed
            for key in narrowed:
                broker.control(key, watch, times=None)
            async with Cluster(broker.bootstrap) as cluster:
                admin = Admin(cluster)
                await admin.create_topics({"ids": 2})
                await cluster.wait_for_leaders(["ids"])
                producer = await Producer(cluster, linger_ms=0).start()
                acks = [await (await producer.send("ids", b"v%d" % i, partition=i % 2)) for i in range(4)]
                await producer.close()
                txn = await Producer(cluster, linger_ms=0, transactional_id="tx-4x").start()
                txn.begin_transaction()
                acks += [await (await txn.send("ids", b"t%d" % i, partition=i % 2)) for i in range(2)]
                await txn.commit_transaction()
                await txn.close()
                ends = await admin.list_offsets([("ids", 0), ("ids", 1)], "latest")
                consumer = await Consumer(cluster, ["ids"], group_id="g-4x", fetch_max_wait_ms=50,
                                          isolation_level="read_committed").start()
                got: list = []
                for _ in range(40):
                    got += await consumer.getmany(timeout=0.2)
                    if len(got) == 6:
                        break
                await consumer.commit()
                committed = await admin.list_group_offsets("g-4x")
                await consumer.close()
                described = await admin.describe_groups(["g-4x"])
                await admin.delete_topics(["ids"])
                return {k: range(lo, hi + 1) for k, (lo, hi) in narrowed.items()}, acks, ends, got, \
                    committed, described

    advertised, acks, ends, got, committed, described = run(main())
    assert advertised[K.PRODUCE].start == 3 and advertised[K.OFFSET_COMMIT].start == 2
    assert ends == {("ids", 0): 4, ("ids", 1): 4}   # 2 + 1 records and a commit marker each
    assert sorted(r.value for r in got) == sorted([b"v%d" % i for i in range(4)] + [b"t0", b"t1"])
    assert committed == ends and described["g-4x"].group_id == "g-4x"
    assert len({(a.partition, a.offset) for a in acks}) == 6
    keys = {key for key, _, _ in seen}
    assert {K.METADATA, K.CREATE_TOPICS, K.INIT_PRODUCER_ID, K.PRODUCE, K.LIST_OFFSETS, K.FETCH,
            K.DELETE_TOPICS, K.FIND_COORDINATOR, K.JOIN_GROUP, K.SYNC_GROUP, K.OFFSET_COMMIT,
            K.OFFSET_FETCH, K.END_TXN, K.DESCRIBE_GROUPS} <= keys
    # the broker finalizes transaction version 2: the Produce (v12+; v13 by topic id) adds the
    # partitions
    assert K.ADD_PARTITIONS_TO_TXN not in keys
    txn_produce = {v for key, v, body in seen if key == K.PRODUCE and body.transactional_id}
    assert txn_produce == {13}
    for key, version, body in seen:
        lo, hi = kafka43[key]
        assert lo <= version <= hi, (key, version)   # nothing Kafka 4 dropped
        top = min(advertised[key][-1], CLIENT_VERSIONS[key][-1])
        # OffsetFetch of every topic stays at v9: v10's answer would name them by id only
        every_topic = key == K.OFFSET_FETCH and version == 9 and all(g.topics is None for g in body.groups)
        assert version == top or every_topic, (key, version)
    # the consumer's own commits and fetches of its positions name topics by id (v10)
    assert {v for key, v, body in seen if key == K.OFFSET_COMMIT} == {10}
    assert 10 in {v for key, v, body in seen if key == K.OFFSET_FETCH}
    fetches = [body for key, _, body in seen if key == K.FETCH]
    assert all(t.topic_id != kproto.Uuid.ZERO for f in fetches for t in f.topics)   # by id (v13+)


def test_api_versions_v5_names_the_cluster_and_node_and_a_mismatch_rebootstraps():
    """As Kafka 4.4's NetworkClient: a connection to a node the metadata named sends ApiVersions
    v5 with the cluster id and that node's id; a broker answering REBOOTSTRAP_REQUIRED makes the
    cluster forget its brokers and connections, and the next request bootstraps again. A
    bootstrap connection has nothing to name and negotiates from v4 (v5's response is v4's), and
    so does every connection to a cluster whose brokers stop at v4 (4.3.1's ranges)."""
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import KafkaConnectionError
    from client_io_fakebroker import api_versions_response

    seen = []
    state = {"reject": False, "versions": None}

    def handler(header, body):
        if header.request_api_key == K.API_VERSIONS:
            seen.append((header.request_api_version, body.cluster_id, body.node_id))
            if state["reject"] and body.cluster_id is not None:
                return api_versions_response({}, error_code=ErrorCode.REBOOTSTRAP_REQUIRED)
            return NotImplemented
        if header.request_api_key == K.METADATA:
            return metadata_response(fb.port, {})
        return NotImplemented

    async def main(versions):
        nonlocal fb
        async with FakeBroker(handler, versions=versions) as fb:
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                first = list(seen)
                await cluster.connection(1)
                known = list(seen)
                if versions is not None:
                    return first, known, None
                state["reject"] = True
                await (await cluster.connection(1)).close()
                with pytest.raises(KafkaConnectionError, match="rebootstrap"):
                    await cluster.connection(1)
                forgot = (cluster.metadata.brokers, len(cluster._conns))
                await cluster.refresh_metadata([])     # through the bootstrap server again
                return first, known, (forgot, list(cluster.metadata.brokers))

    fb = None
    first, known, rebooted = run(main(None))
    assert first == [(4, None, -1)]                       # bootstrap: whom is not known yet
    assert known == [(4, None, -1), (5, "kproto-fake", 1)]
    (brokers, conns), after = rebooted
    assert brokers == {} and conns == 0 and after == [1]
    assert seen[2:] == [(5, "kproto-fake", 1), (4, None, -1)]    # refused, then the bootstrap server
    seen.clear()
    state["reject"] = False
    first, known, _ = run(main(kafka_ranges("4.3.1")))
    assert known == [(4, None, -1), (4, None, -1)]
