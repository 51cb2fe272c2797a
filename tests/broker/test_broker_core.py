"""The sans-I/O core: requests in, responses out, time from a fake clock."""
from __future__ import annotations

import os

import pytest

import kproto
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import ADVERTISED_FROM, IMPLEMENTED, BrokerCore, Intercept
from kproto.broker.timer import FakeClock
from kproto.error_codes import ErrorCode as E
from kproto.records import iter_batches
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client, batch


@pytest.fixture
def core(tmp_path):
    clock = FakeClock(1_000)
    c = BrokerCore(str(tmp_path / "data"), BrokerConfig(port=9092), clock=clock,
                   wall_clock=lambda: 1_700_000_000_000 + clock.now_ms())
    yield c
    c.close()


def produce(client, topic, partition, records, version=9, acks=-1):
    req = kproto.request(0).cls
    return client.call(K.PRODUCE, version, acks=acks, timeout_ms=1000, topic_data=[
        req.TopicProduceData(name=topic, partition_data=[
            req.PartitionProduceData(index=partition, records=records)])])


def fetch_body(topic, partition, offset, *, max_wait=500, min_bytes=1, session_id=0, epoch=-1,
               topic_id=None, max_bytes=1 << 20):
    req = kproto.request(1).cls
    return req(max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes, session_id=session_id,
               session_epoch=epoch, topics=[req.FetchTopic(
                   topic=topic, topic_id=topic_id or kproto.Uuid(), partitions=[req.FetchPartition(
                       partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def create(client, name, partitions=1, configs=None, version=7):
    req = kproto.request(19).cls
    return client.call(K.CREATE_TOPICS, version, timeout_ms=1000, topics=[req.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, configs=[
            req.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])


def test_api_versions_are_the_implemented_ones_within_what_the_codecs_know(core):
    client = Client(core)
    resp = client.call(K.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    got = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
    assert set(got) == set(IMPLEMENTED)
    for key, (lo, hi) in got.items():
        valid = kproto.request(key).valid_versions
        assert lo >= valid.start and hi <= valid[-1] and (lo, hi) != (0, -1)
        assert min(IMPLEMENTED[key][0], ADVERTISED_FROM.get(key, 99)) <= lo and hi <= IMPLEMENTED[key][1]


def test_api_versions_v5_checks_the_cluster_and_node_the_client_meant(core):
    """As Kafka 4.4's broker: ClusterId and NodeId both or neither (INVALID_REQUEST), another
    cluster's id or another node's id answered REBOOTSTRAP_REQUIRED without API keys."""
    client = Client(core)
    assert core.api_versions()[K.API_VERSIONS] == (0, 5)
    sw = dict(client_software_name="t", client_software_version="1")
    ok = client.call(K.API_VERSIONS, 5, **sw)
    assert ok.error_code == 0 and ok.api_keys
    cluster, node = core.logs.cluster_id, core.config.node_id
    ok = client.call(K.API_VERSIONS, 5, cluster_id=cluster, node_id=node, **sw)
    assert ok.error_code == 0 and ok.api_keys
    for fields, code in [(dict(cluster_id=cluster), E.INVALID_REQUEST), (dict(node_id=node), E.INVALID_REQUEST),
                         (dict(cluster_id="another", node_id=node), E.REBOOTSTRAP_REQUIRED),
                         (dict(cluster_id=cluster, node_id=node + 1), E.REBOOTSTRAP_REQUIRED)]:
        resp = client.call(K.API_VERSIONS, 5, **fields, **sw)
        assert (resp.error_code, resp.api_keys) == (code, []), fields
    # v4 has no such fields: nothing to check
    assert client.call(K.API_VERSIONS, 4, **sw).error_code == 0


def test_an_api_versions_request_too_new_gets_a_v0_answer_with_unsupported_version(core):
    client = Client(core)
    header = kproto.RequestHeader(request_api_key=18, request_api_version=99, correlation_id=7,
                                  client_id="x")
    # v99 cannot be encoded by the codec; a flexible v3 body under a v99 header is what a
    # future client sends
    frame = bytearray(kproto.encode_request(kproto.RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=7, client_id="x"),
        kproto.request(18).cls()))
    frame[6:8] = (99).to_bytes(2, "big")
    core.handle(client.channel, bytes(frame[4:]))
    _, body = kproto.decode_response(client.channel.frames[0], 18, 0)
    assert body.error_code == E.UNSUPPORTED_VERSION
    assert [(a.api_key, a.max_version) for a in body.api_keys] == [(18, core.api_versions()[18][1])]
    del header


def test_create_produce_and_fetch_round_trip_with_offsets_assigned_by_the_broker(core):
    client = Client(core)
    resp = create(client, "orders", 2)
    assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [("orders", 0, 2)]
    r1 = produce(client, "orders", 1, batch([b"a", b"b", b"c"]))
    r2 = produce(client, "orders", 1, batch([b"d"]))
    p1, p2 = r1.responses[0].partition_responses[0], r2.responses[0].partition_responses[0]
    assert (p1.error_code, p1.base_offset, p2.base_offset) == (0, 0, 3)
    f = client.call(K.FETCH, 12, **vars_of(fetch_body("orders", 1, 1)))
    part = f.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, 4, 4)
    recs = [(r.offset, r.value) for b in iter_batches(part.records) for r in b.records()]
    # whole batches: the first batch holds offset 1, so it comes whole
    assert recs == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    b0 = next(iter_batches(part.records))
    assert b0.is_valid() and b0.partition_leader_epoch == 0


def vars_of(obj):
    return {k: getattr(obj, k) for k in obj.__slots__ if not k.startswith("_")} if hasattr(obj, "__slots__") else vars(obj)


def test_a_long_poll_answers_when_data_arrives_not_at_max_wait(core):
    client = Client(core)
    create(client, "t")
    i = client.send(K.FETCH, 12, fetch_body("t", 0, 0, max_wait=500))
    assert len(client.channel.frames) == i  # waiting in the purgatory
    core.timer.clock.advance(10)  # type: ignore[attr-defined]
    core.advance_clock()
    assert len(client.channel.frames) == i
    other = Client(core)
    produce(other, "t", 0, batch([b"x"]))
    # the fetch answered within the produce's call, before any timeout
    assert len(client.channel.frames) == i + 1
    part = client.answer(i).responses[0].partitions[0]
    assert [r.value for b in iter_batches(part.records) for r in b.records()] == [b"x"]


def test_a_long_poll_without_data_answers_empty_at_max_wait(core):
    client = Client(core)
    create(client, "t")
    i = client.send(K.FETCH, 12, fetch_body("t", 0, 0, max_wait=500))
    core.timer.clock.advance(499)  # type: ignore[attr-defined]
    core.advance_clock()
    assert len(client.channel.frames) == i
    core.timer.clock.advance(1)  # type: ignore[attr-defined]
    core.advance_clock()
    part = client.answer(i).responses[0].partitions[0]
    assert part.error_code == 0 and not part.records


def test_min_bytes_holds_the_answer_until_enough_data_is_there(core):
    client = Client(core)
    create(client, "t")
    one = len(batch([b"x" * 100]))
    i = client.send(K.FETCH, 12, fetch_body("t", 0, 0, max_wait=500, min_bytes=2 * one))
    other = Client(core)
    produce(other, "t", 0, batch([b"x" * 100]))
    assert len(client.channel.frames) == i
    produce(other, "t", 0, batch([b"y" * 100]))
    assert len(client.channel.frames) == i + 1
    part = client.answer(i).responses[0].partitions[0]
    assert len(part.records) == 2 * one


def test_fetch_sessions_are_granted_and_incremental_fetches_carry_only_changes(core):
    client = Client(core)
    create(client, "a")
    create(client, "b")
    produce(client, "a", 0, batch([b"1"]))
    req = kproto.request(1).cls
    full = req(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=0, topics=[
        req.FetchTopic(topic=n, partitions=[req.FetchPartition(partition=0, fetch_offset=0,
                                                               partition_max_bytes=1 << 20)])
        for n in ("a", "b")])
    r = client.answer(client.send(K.FETCH, 12, full))
    assert r.error_code == 0 and r.session_id != 0
    assert sorted(t.topic for t in r.responses) == ["a", "b"]
    # incremental: a moved to offset 1, b unchanged; nothing new anywhere -> empty answer
    inc = req(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=r.session_id, session_epoch=1,
              topics=[req.FetchTopic(topic="a", partitions=[req.FetchPartition(
                  partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])])
    r2 = client.answer(client.send(K.FETCH, 12, inc))
    assert (r2.error_code, r2.session_id, r2.responses) == (0, r.session_id, [])
    produce(client, "b", 0, batch([b"2"]))
    inc2 = req(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=r.session_id, session_epoch=2,
               topics=[])
    r3 = client.answer(client.send(K.FETCH, 12, inc2))
    assert [t.topic for t in r3.responses] == ["b"]
    # a wrong epoch is a session error
    bad = req(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=r.session_id, session_epoch=9,
              topics=[])
    assert client.answer(client.send(K.FETCH, 12, bad)).error_code == E.INVALID_FETCH_SESSION_EPOCH


def test_fetch_by_topic_id_from_v13(core):
    client = Client(core)
    tid = create(client, "t").topics[0].topic_id
    produce(client, "t", 0, batch([b"v"]))
    r = client.call(K.FETCH, 13, **vars_of(fetch_body(None, 0, 0, topic_id=tid)))
    assert r.responses[0].topic_id == tid and r.responses[0].partitions[0].records
    r = client.call(K.FETCH, 13, **vars_of(fetch_body(None, 0, 0, topic_id=kproto.Uuid(os.urandom(16)))))
    assert r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID


def test_offset_out_of_range_and_unknown_partitions_answer_at_once(core):
    client = Client(core)
    create(client, "t")
    r = client.call(K.FETCH, 12, **vars_of(fetch_body("t", 0, 5)))
    assert r.responses[0].partitions[0].error_code == E.OFFSET_OUT_OF_RANGE
    r = client.call(K.FETCH, 12, **vars_of(fetch_body("nope", 0, 0)))
    assert r.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # an empty record set, as Kafka answers: librdkafka refuses a null one at v12+
    assert r.responses[0].partitions[0].records == b""


def test_produce_validation_errors(core):
    client = Client(core)
    create(client, "t")
    good = batch([b"a", b"b"])
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    two = good + good
    torn = good[:-3]
    cases = {bytes(bad_crc): E.CORRUPT_MESSAGE, two: E.INVALID_RECORD, torn: E.CORRUPT_MESSAGE}
    for records, code in cases.items():
        p = produce(client, "t", 0, records).responses[0].partition_responses[0]
        assert p.error_code == code, (p, code)
    assert produce(client, "nope", 0, good).responses[0].partition_responses[0].error_code \
        == E.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, "t", 0, good, acks=2).responses[0].partition_responses[0].error_code \
        == E.INVALID_REQUIRED_ACKS
    lo = client.call(K.LIST_OFFSETS, 7, replica_id=-1, topics=[kproto.request(2).cls.ListOffsetsTopic(
        name="t", partitions=[kproto.request(2).cls.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    assert lo.topics[0].partitions[0].offset == 0  # nothing was appended


def test_log_append_time_patches_the_header_and_keeps_the_crc_valid(core):
    client = Client(core)
    create(client, "t", configs={"message.timestamp.type": "LogAppendTime"})
    p = produce(client, "t", 0, batch([b"a", b"b"], timestamp=5)).responses[0].partition_responses[0]
    now = core.wall_ms()
    assert p.log_append_time_ms == now
    r = client.call(K.FETCH, 12, **vars_of(fetch_body("t", 0, 0)))
    b = next(iter_batches(r.responses[0].partitions[0].records))
    assert b.is_valid() and b.timestamp_type == 1 and b.max_timestamp == now
    assert [rec.timestamp for rec in b.records()] == [now, now]
    assert [rec.value for rec in b.records()] == [b"a", b"b"]


def test_idempotent_producer_sequences_duplicates_and_fencing(core):
    client = Client(core)
    create(client, "t")
    pid = client.call(K.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000)
    assert pid.error_code == 0 and pid.producer_id >= 0
    P = pid.producer_id

    def send(values, seq, epoch=0):
        return produce(client, "t", 0, batch(values, producer_id=P, producer_epoch=epoch,
                                             base_sequence=seq)).responses[0].partition_responses[0]
    assert (send([b"a", b"b"], 0).base_offset, send([b"c"], 2).base_offset) == (0, 2)
    dup = send([b"a", b"b"], 0)
    assert (dup.error_code, dup.base_offset) == (0, 0)
    assert send([b"x"], 7).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send([b"y"], 0, epoch=1).error_code == 0  # a new epoch starts at 0
    assert send([b"z"], 1, epoch=0).error_code == E.INVALID_PRODUCER_EPOCH
    lo = client.call(K.LIST_OFFSETS, 7, replica_id=-1, topics=[kproto.request(2).cls.ListOffsetsTopic(
        name="t", partitions=[kproto.request(2).cls.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    assert lo.topics[0].partitions[0].offset == 4


def test_list_offsets_earliest_latest_max_and_by_time(core):
    client = Client(core)
    create(client, "t")
    produce(client, "t", 0, batch([b"a", b"b"], timestamp=1000))
    produce(client, "t", 0, batch([b"c"], timestamp=5000))
    produce(client, "t", 0, batch([b"d"], timestamp=3000))
    L = kproto.request(2).cls
    got = {}
    for ts in (-2, -1, -3, 1001, 2000, 4000, 9000):
        r = client.call(K.LIST_OFFSETS, 8, replica_id=-1, topics=[L.ListOffsetsTopic(
            name="t", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=ts)])])
        p = r.topics[0].partitions[0]
        got[ts] = (p.offset, p.timestamp)
    assert got == {-2: (0, -1), -1: (4, -1), -3: (2, 5000), 1001: (1, 1001), 2000: (2, 5000),
                   4000: (2, 5000), 9000: (-1, -1)}


def test_metadata_auto_creates_and_lists_topics(core):
    client = Client(core)
    M = kproto.request(3).cls
    # Kafka's KRaft broker answers the request that auto-creates a topic before the topic is
    # there (UNKNOWN_TOPIC_OR_PARTITION); the next one finds it
    r = client.call(K.METADATA, 12, topics=[M.MetadataRequestTopic(name="auto")],
                    allow_auto_topic_creation=True)
    assert [(t.error_code, t.name, t.partitions) for t in r.topics] == [(E.UNKNOWN_TOPIC_OR_PARTITION, "auto", [])]
    r = client.call(K.METADATA, 12, topics=[M.MetadataRequestTopic(name="auto")],
                    allow_auto_topic_creation=True)
    t = r.topics[0]
    assert (t.error_code, t.name, len(t.partitions), t.partitions[0].leader_id) == (0, "auto", 1, 1)
    assert [(b.node_id, b.host, b.port) for b in r.brokers] == [(1, "127.0.0.1", 9092)]
    r = client.call(K.METADATA, 12, topics=[M.MetadataRequestTopic(name="no")],
                    allow_auto_topic_creation=False)
    assert r.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    r = client.call(K.METADATA, 12, topics=[M.MetadataRequestTopic(name="bad name!")],
                    allow_auto_topic_creation=True)
    assert r.topics[0].error_code == E.INVALID_TOPIC_EXCEPTION
    r = client.call(K.METADATA, 12, topics=None)
    assert [t.name for t in r.topics] == ["auto"]


def test_create_and_delete_topics_errors(core):
    client = Client(core)
    assert create(client, "t").topics[0].error_code == 0
    assert create(client, "t").topics[0].error_code == E.TOPIC_ALREADY_EXISTS
    assert create(client, "..").topics[0].error_code == E.INVALID_TOPIC_EXCEPTION
    assert create(client, "z", 0).topics[0].error_code == E.INVALID_PARTITIONS
    assert create(client, "c", configs={"segment.bytes": "x"}).topics[0].error_code == E.INVALID_CONFIG
    D = kproto.request(20).cls
    r = client.call(K.DELETE_TOPICS, 6, timeout_ms=1000, topics=[D.DeleteTopicState(name="t"),
                                                                 D.DeleteTopicState(name="gone")])
    assert [x.error_code for x in r.responses] == [0, E.UNKNOWN_TOPIC_OR_PARTITION]
    assert "t" not in core.logs.topics
    assert not any(n.startswith("t-") for n in os.listdir(core.logs.data_dir))


def test_deleting_a_topic_answers_its_waiting_fetches(core):
    client = Client(core)
    create(client, "t")
    i = client.send(K.FETCH, 12, fetch_body("t", 0, 0, max_wait=10_000))
    D = kproto.request(20).cls
    Client(core).send(K.DELETE_TOPICS, 6, D(timeout_ms=1000, topics=[D.DeleteTopicState(name="t")]))
    assert client.answer(i).responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_hooks_error_delay_drop_and_pass(core):
    client = Client(core)
    create(client, "t")
    h = core.control(K.PRODUCE, Intercept(error=E.NOT_LEADER_OR_FOLLOWER))
    p = produce(client, "t", 0, batch([b"a"])).responses[0].partition_responses[0]
    assert p.error_code == E.NOT_LEADER_OR_FOLLOWER and not h.active
    assert produce(client, "t", 0, batch([b"a"])).responses[0].partition_responses[0].base_offset == 0
    # delayed: handled when the timer says so
    core.control(K.METADATA, Intercept(delay_ms=50))
    i = client.send(K.METADATA, 12, kproto.request(3).cls(topics=None))
    assert len(client.channel.frames) == i
    core.timer.clock.advance(50)  # type: ignore[attr-defined]
    core.advance_clock()
    assert client.answer(i).topics[0].name == "t"
    # a function decides per request, until removed
    seen = []

    def only_t(header, body):
        seen.append(header.correlation_id)
        return Intercept(drop=True) if body.topics else None
    h = core.control(K.METADATA, only_t, times=None)
    client.send(K.METADATA, 12, kproto.request(3).cls(topics=None))
    assert client.channel.closed is None
    client.send(K.METADATA, 12, kproto.request(3).cls(topics=[kproto.request(3).cls.MetadataRequestTopic(name="t")]))
    assert client.channel.closed and "hook" in client.channel.closed
    h.remove()
    assert len(seen) == 2 and not h.active


def test_unknown_keys_and_bad_frames_close_the_connection(core):
    client = Client(core)
    core.handle(client.channel, b"\x00\x01")
    assert client.channel.closed
    client = Client(core)
    core.handle(client.channel, (999).to_bytes(2, "big") + b"\0\0\0\0\0\1\xff\xff")
    assert client.channel.closed
    client = Client(core)
    frame = kproto.encode_request(kproto.RequestHeader(request_api_key=3, request_api_version=12,
                                                       correlation_id=1, client_id="x"),
                                  kproto.request(3).cls(topics=None))[4:]
    core.handle(client.channel, frame[:-2])
    assert client.channel.closed


def test_a_known_but_unimplemented_api_gets_unsupported_version(core):
    client = Client(core)
    r = client.call(K.GET_TELEMETRY_SUBSCRIPTIONS, 0)
    assert r.error_code == E.UNSUPPORTED_VERSION


def test_list_offsets_before_v4_has_no_leader_epoch_to_write(core):
    client = Client(core)
    create(client, "lo")
    produce(client, "lo", 0, batch([b"a", b"b"]))
    req = kproto.request(2).cls
    for version in (1, 3, 4):
        r = client.call(K.LIST_OFFSETS, version, replica_id=-1, isolation_level=0, topics=[
            req.ListOffsetsTopic(name="lo", partitions=[req.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
        p = r.topics[0].partitions[0]
        assert (p.error_code, p.offset) == (0, 2)


def test_an_acks0_produce_that_fails_closes_the_connection(core):
    client = Client(core)
    create(client, "t")
    req = kproto.request(0).cls

    def acks0(partition):
        c = Client(core)
        c.send(K.PRODUCE, 9, req(acks=0, timeout_ms=1000, topic_data=[req.TopicProduceData(
            name="t", partition_data=[req.PartitionProduceData(index=partition, records=batch([b"v"]))])]))
        return c.channel
    ok = acks0(0)
    assert ok.frames == [None] and ok.closed is None            # no answer, connection kept
    bad = acks0(5)                                              # UNKNOWN_TOPIC_OR_PARTITION
    assert bad.frames == [] and bad.closed and "acks=0" in bad.closed
    # a test hook's error is a failure too
    core.control(K.PRODUCE, Intercept(error=E.NOT_LEADER_OR_FOLLOWER), times=1)
    hooked = acks0(0)
    assert hooked.frames == [] and hooked.closed
    assert core.logs.get("t", 0).log_end_offset == 1


def test_high_watermarks_are_checkpointed_every_interval_while_running(core):
    from kproto.storage.checkpoints import OffsetCheckpoint
    path = os.path.join(core.logs.data_dir, "replication-offset-checkpoint")

    def checkpoint():
        with open(path, "rb") as f:
            return OffsetCheckpoint.parse(f.read()).entries

    client = Client(core)
    create(client, "t", partitions=2)
    produce(client, "t", 1, batch([b"a", b"b"]))
    assert not os.path.exists(path)
    core.timer.clock.advance(4_999)  # type: ignore[attr-defined]
    core.advance_clock()
    assert not os.path.exists(path)
    core.timer.clock.advance(1)  # type: ignore[attr-defined]
    core.advance_clock()                                     # replica.high.watermark.checkpoint.interval.ms
    assert sorted(checkpoint()) == [("t", 0, 0), ("t", 1, 2)]
    produce(client, "t", 0, batch([b"c"]))
    assert sorted(checkpoint()) == [("t", 0, 0), ("t", 1, 2)]   # not before the next turn
    core.timer.clock.advance(5_000)  # type: ignore[attr-defined]
    core.advance_clock()
    assert sorted(checkpoint()) == [("t", 0, 1), ("t", 1, 2)]
    before = os.stat(path).st_mtime_ns
    core.timer.clock.advance(5_000)  # type: ignore[attr-defined]
    core.advance_clock()
    assert os.stat(path).st_mtime_ns == before               # nothing moved: not rewritten


def test_offsets_for_leader_epoch_answers_from_the_epoch_cache(core):
    client = Client(core)
    create(client, "t")
    produce(client, "t", 0, batch([b"a", b"b"]))
    req = kproto.request(K.OFFSET_FOR_LEADER_EPOCH).cls

    def ask(epoch, current=-1, version=4, topic="t", partition=0):
        r = client.call(K.OFFSET_FOR_LEADER_EPOCH, version, replica_id=-1, topics=[req.OffsetForLeaderTopic(
            topic=topic, partitions=[req.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current,
                                                                  leader_epoch=epoch)])])
        p = r.topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset
    assert ask(0) == (0, 0, 2)                      # the current epoch ends at the log end
    assert ask(0, current=0) == (0, 0, 2)
    assert ask(0, current=1)[0] == E.UNKNOWN_LEADER_EPOCH
    assert ask(0, partition=3)[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    core.logs.get("t", 0).leader_epoch = 2          # as after two leader changes
    produce(client, "t", 0, batch([b"c"]))
    assert ask(0) == (0, 0, 2) and ask(1) == (0, 0, 2) and ask(2) == (0, 2, 3)
    assert ask(0, current=1)[0] == E.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("version", [0, 1])
def test_streams_group_apis_are_answered_as_by_a_kafka_broker_without_streams_groups(core, version):
    """Not advertised; a request anyway is answered UNSUPPORTED_VERSION, as Kafka 4.4's KafkaApis
    does while the streams group protocol is off (StreamsGroupDescribe: each group with it)."""
    client = Client(core)
    supported = core.api_versions()
    assert not {K.STREAMS_GROUP_HEARTBEAT, K.STREAMS_GROUP_DESCRIBE,
                K.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE} & set(supported)
    hb = client.call(K.STREAMS_GROUP_HEARTBEAT, version, group_id="s", member_id="m", member_epoch=0)
    assert hb.error_code == E.UNSUPPORTED_VERSION
    described = client.call(K.STREAMS_GROUP_DESCRIBE, version, group_ids=["s", "t"])
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        ("s", E.UNSUPPORTED_VERSION), ("t", E.UNSUPPORTED_VERSION)]
    if version == 0:
        update = client.call(K.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0, group_id="s", member_id="m")
        assert update.error_code == E.UNSUPPORTED_VERSION


def test_the_newest_fetch_list_offsets_and_metadata_versions_are_served(core):
    # Fetch v18 (a follower's high watermark, tagged: a consumer fetch is unchanged), ListOffsets
    # v10 (a timeout for remote reads) and v11 (earliest pending upload: nothing is tiered, -1),
    # Metadata v13 (a top-level error code, 0)
    client = Client(core)
    tid = create(client, "t").topics[0].topic_id
    produce(client, "t", 0, batch([b"v"]))
    r = client.call(K.FETCH, 18, **vars_of(fetch_body(None, 0, 0, topic_id=tid)))
    assert r.error_code == 0 and r.responses[0].partitions[0].records
    L = kproto.request(2).cls
    got = {}
    for version, ts in ((10, -1), (11, -1), (11, -5), (11, -6), (11, -2)):
        r = client.call(K.LIST_OFFSETS, version, replica_id=-1, timeout_ms=1000, topics=[L.ListOffsetsTopic(
            name="t", partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=ts)])])
        p = r.topics[0].partitions[0]
        got[version, ts] = (p.error_code, p.offset, p.leader_epoch)
    assert got == {(10, -1): (0, 1, 0), (11, -1): (0, 1, 0), (11, -5): (0, -1, -1), (11, -6): (0, -1, -1),
                   (11, -2): (0, 0, 0)}
    M = kproto.request(3).cls
    r = client.call(K.METADATA, 13, topics=[M.MetadataRequestTopic(name="t")], allow_auto_topic_creation=False)
    assert (r.error_code, [(t.error_code, t.name, t.topic_id) for t in r.topics]) == (0, [(0, "t", tid)])


def test_produce_v13_names_topics_by_id(core, monkeypatch):
    # Kafka 4.4's Produce v13 (the Java 4.4 client's): topics by id, answered by id; an id no
    # topic has is UNKNOWN_TOPIC_ID, the other topics of the request still appended
    client = Client(core)
    tid = create(client, "t").topics[0].topic_id
    for i in range(50):
        create(client, f"other-{i}")

    def listed():  # each id is looked up (as Kafka's metadata cache does), not searched for
        raise AssertionError("every topic listed for one Produce")

    monkeypatch.setattr(core, "known_topics", listed)
    req = kproto.request(0).cls
    unknown = kproto.Uuid(b"\x07" * 16)
    r = client.call(K.PRODUCE, 13, acks=-1, timeout_ms=1000, topic_data=[
        req.TopicProduceData(topic_id=tid, partition_data=[req.PartitionProduceData(index=0, records=batch([b"a", b"b"]))]),
        req.TopicProduceData(topic_id=unknown, partition_data=[req.PartitionProduceData(index=0, records=batch([b"c"]))])])
    got = [(t.topic_id, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses]) for t in r.responses]
    assert got == [(tid, [(0, 0, 0)]), (unknown, [(0, E.UNKNOWN_TOPIC_ID, -1)])]
    assert [bytes(rec.value) for b in core.logs.get("t", 0).batches() for rec in b.records()] == [b"a", b"b"]


def test_a_request_looks_the_supported_versions_up_once(core, monkeypatch):
    """handle() and the dispatch share one look-up of the versions served (it walks the
    feature levels: a cost per request)."""
    client = Client(core)
    create(client, "t")
    real, calls = core.api_versions, []
    monkeypatch.setattr(core, "api_versions", lambda: calls.append(1) or real())
    assert produce(client, "t", 0, batch([b"a"])).responses[0].partition_responses[0].error_code == 0
    assert len(calls) == 1
