"""Answers of kproto's broker that Apache Kafka 4.4.0 gives field for field (found by the
conformance kit): error messages that are 'NONE', '' or null, and defaults Kafka 4.x changed."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker.timer import FakeClock
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client, batch, fake_core
from test_broker_admin import configs_of, describe
from test_broker_core import create, produce

WALL0 = 1_700_000_000_000  # fake_core's wall clock at clock 0


@pytest.fixture
def client(tmp_path):
    core = fake_core(tmp_path / "data", FakeClock(0))
    yield Client(core)
    core.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_find_coordinator_says_none_for_no_error(client, version):
    r = client.call(K.FIND_COORDINATOR, version, key="g", key_type=0)
    assert (r.error_code, r.error_message) == (0, "NONE")


def test_find_coordinator_v4_has_an_empty_message_per_key(client):
    r = client.call(K.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=["a", "b"])
    assert [(c.key, c.error_code, c.error_message) for c in r.coordinators] == [
        ("a", 0, ""), ("b", 0, "")]


def test_find_coordinator_unknown_key_type_has_the_errors_text(client):
    r = client.call(K.FIND_COORDINATOR, 4, key_type=7, coordinator_keys=["a"])
    assert r.coordinators[0].error_code == E.INVALID_REQUEST and r.coordinators[0].error_message


def test_describe_configs_without_error_has_an_empty_message_from_v1(client):
    create(client, "t")
    assert describe(client, "t", version=1).error_message == ""
    assert describe(client, "t", version=4).error_message == ""
    missing = describe(client, "missing", version=4)
    assert (missing.error_code, missing.error_message) == (E.UNKNOWN_TOPIC_OR_PARTITION, "")


def test_describe_user_scram_credentials_has_an_empty_top_level_message(client):
    r = client.call(K.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
    assert (r.error_code, r.error_message) == (0, "")


def test_create_partitions_of_an_unknown_topic_has_no_message(client):
    req = kproto.request(K.CREATE_PARTITIONS).cls
    r = client.call(K.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=False, topics=[
        req.CreatePartitionsTopic(name="nope", count=2, assignments=None)])
    assert [(x.error_code, x.error_message) for x in r.results] == [(E.UNKNOWN_TOPIC_OR_PARTITION, None)]


def test_message_timestamp_after_max_ms_defaults_to_an_hour(client):
    create(client, "t")
    got = configs_of(describe(client, "t"))["message.timestamp.after.max.ms"]
    assert (got.value, got.config_source) == ("3600000", 5)
    # a stamp more than an hour ahead of the broker's clock is refused, as Kafka 4.x does
    ahead = produce(client, "t", 0, batch([b"v"], timestamp=WALL0 + 3_600_001 + 10))
    assert ahead.responses[0].partition_responses[0].error_code == E.INVALID_TIMESTAMP
    ok = produce(client, "t", 0, batch([b"v"], timestamp=WALL0 + 3_000_000))
    assert ok.responses[0].partition_responses[0].error_code == 0


@pytest.mark.parametrize("name,version", [("bad name!", "1.0"), ("", "1.0"), ("-x", "1"), ("x.", "1"),
                                          ("kproto", ""), ("kproto", "1 0")])
def test_api_versions_refuses_a_software_name_or_version_kafka_refuses(client, name, version):
    for v in (3, 4):
        r = client.call(K.API_VERSIONS, v, client_software_name=name, client_software_version=version)
        assert (r.error_code, r.api_keys) == (E.INVALID_REQUEST, [])


def test_api_versions_accepts_kafkas_pattern(client):
    for name in ("a", "apache-kafka-java", "confluent-kafka-python", "x.y-z9"):
        r = client.call(K.API_VERSIONS, 3, client_software_name=name,
                        client_software_version="2.6.0-rdkafka-2.6.0")
        assert r.error_code == 0 and r.api_keys
    # below v3 there are no names to check
    assert client.call(K.API_VERSIONS, 2).error_code == 0


def _part(resp):
    return resp.responses[0].partition_responses[0]


def test_a_producer_without_state_is_appended_at_any_sequence(client):
    create(client, "t")
    first = _part(produce(client, "t", 0, batch([b"a"], timestamp=WALL0, producer_id=9, producer_epoch=0,
                                                base_sequence=5)))
    assert (first.error_code, first.base_offset) == (0, 0)
    # from then on the sequence is checked, and the refusal carries no message (as Kafka's)
    gap = _part(produce(client, "t", 0, batch([b"b"], timestamp=WALL0, producer_id=9, producer_epoch=0,
                                              base_sequence=9)))
    assert (gap.error_code, gap.error_message, gap.base_offset) == (E.OUT_OF_ORDER_SEQUENCE_NUMBER, None, -1)
    assert gap.log_start_offset == 0


def test_an_oversized_batch_answers_no_log_start_offset_and_no_message(client):
    create(client, "t", configs={"max.message.bytes": "100"})
    r = _part(produce(client, "t", 0, batch([b"x" * 200], timestamp=WALL0)))
    assert (r.error_code, r.error_message, r.log_start_offset) == (E.MESSAGE_TOO_LARGE, None, -1)
    # a record validation failure keeps its message and the log start offset
    r = _part(produce(client, "t", 0, batch([b"v"], timestamp=WALL0 + 7_200_000)))
    assert r.error_code == E.INVALID_TIMESTAMP and r.error_message and r.log_start_offset == 0


def _keyless(n):
    from kproto.records import RecordBatchBuilder
    b = RecordBatchBuilder(base_offset=0)
    for i in range(n):
        b.append(WALL0 + i, None, b"v%d" % i, [])
    return b.build()


def test_a_record_without_key_on_a_compacted_topic_is_refused_with_record_errors(client):
    create(client, "c", configs={"cleanup.policy": "compact"})
    r = _part(produce(client, "c", 0, _keyless(2)))
    assert (r.error_code, r.base_offset) == (E.INVALID_RECORD, -1) and r.error_message
    assert [e.batch_index for e in r.record_errors] == [0, 1]
    assert "without key" in r.record_errors[0].batch_index_error_message
    old = _part(produce(client, "c", 0, _keyless(1), version=7))
    assert (old.error_code, old.record_errors) == (E.INVALID_RECORD, [])
    # keyed records are appended; a topic that is not compacted takes records without key
    assert _part(produce(client, "c", 0, batch([b"v"], timestamp=WALL0))).error_code == 0
    create(client, "d", configs={"cleanup.policy": "delete"})
    assert _part(produce(client, "d", 0, _keyless(1))).error_code == 0


def test_a_group_that_is_not_a_consumer_group_is_described_without_state(tmp_path):
    from test_broker_groups import joined
    clock = FakeClock(0)
    core = fake_core(tmp_path / "data", clock)
    try:
        (c, _), = joined(core, clock, "g", 1)[0]
        d = c.call(K.CONSUMER_GROUP_DESCRIBE, 0, group_ids=["g", "none"], include_authorized_operations=False)
        assert [(x.group_id, x.error_code, x.group_state) for x in d.groups] == [
            ("g", E.GROUP_ID_NOT_FOUND, ""), ("none", E.GROUP_ID_NOT_FOUND, "")]
    finally:
        core.close()


# -- Metadata v10-11 naming topics by id: refused, every topic mirrored -------------------------------
@pytest.mark.parametrize("version", [10, 11])
def test_metadata_by_topic_id_before_v12_mirrors_each_topic_with_invalid_request(client, version):
    create(client, "t")
    tid = client.call(K.METADATA, 12, topics=None).topics[0].topic_id
    req = kproto.request(K.METADATA).cls
    unknown = kproto.Uuid("AAAAAAAAAAAAAAAAAAAAAQ")
    r = client.call(K.METADATA, version, allow_auto_topic_creation=False, topics=[
        req.MetadataRequestTopic(name=None, topic_id=tid), req.MetadataRequestTopic(name=None, topic_id=unknown)])
    # Kafka's MetadataRequest.getErrorResponse: no brokers, cluster id or controller; the null
    # names (not nullable in the response below v12) as ""
    assert (r.brokers, r.cluster_id, r.controller_id) == ([], None, -1)
    assert [(t.error_code, t.name, t.topic_id, t.partitions) for t in r.topics] == [
        (E.INVALID_REQUEST, "", tid, []), (E.INVALID_REQUEST, "", unknown, [])]


# -- Fetch: a partition in error -----------------------------------------------------------------------
@pytest.mark.parametrize("isolation", [0, 1])
def test_fetch_errors_of_the_read_have_a_null_aborted_list_unknown_partitions_an_empty_one(client, isolation):
    from test_broker_core import fetch_body, vars_of
    create(client, "t")
    produce(client, "t", 0, batch([b"a", b"b"], timestamp=WALL0))
    for version in (4, 12):
        body = fetch_body("t", 0, 100, max_wait=0, min_bytes=0)
        body.isolation_level = isolation
        out_of_range = client.call(K.FETCH, version, **vars_of(body)).responses[0].partitions[0]
        assert (out_of_range.error_code, out_of_range.high_watermark, out_of_range.last_stable_offset,
                out_of_range.log_start_offset) == (E.OFFSET_OUT_OF_RANGE, -1, -1, -1)
        assert out_of_range.aborted_transactions is None
        body = fetch_body("t", 3, 0, max_wait=0, min_bytes=0)
        body.isolation_level = isolation
        unknown = client.call(K.FETCH, version, **vars_of(body)).responses[0].partitions[0]
        assert (unknown.error_code, unknown.high_watermark, unknown.aborted_transactions) == (
            E.UNKNOWN_TOPIC_OR_PARTITION, -1, [])


# -- Produce: a duplicate batch ------------------------------------------------------------------------
def test_a_duplicate_batch_answers_its_max_timestamp_as_log_append_time(client):
    create(client, "t")
    b = batch([b"a", b"b", b"c"], timestamp=WALL0, producer_id=5, producer_epoch=0, base_sequence=0)
    first = _part(produce(client, "t", 0, b))
    assert (first.base_offset, first.log_append_time_ms) == (0, -1)
    again = _part(produce(client, "t", 0, b))
    # Kafka's UnifiedLog: the duplicate's offsets and its batch's max timestamp (a CreateTime topic too)
    assert (again.error_code, again.base_offset, again.log_append_time_ms) == (0, 0, WALL0 + 2)


# -- CreateTopics validate-only ------------------------------------------------------------------------
def test_a_validate_only_creation_answers_a_topic_id_and_every_config_as_a_creation(client):
    req = kproto.request(K.CREATE_TOPICS).cls
    r = client.call(K.CREATE_TOPICS, 7, timeout_ms=1000, validate_only=True, topics=[req.CreatableTopic(
        name="dry", num_partitions=3, replication_factor=1,
        configs=[req.CreatableTopicConfig(name="retention.ms", value="3600000")])])
    dry = r.topics[0]
    # Kafka's controller answers the id it drew (kept nowhere) and the configs a creation would have
    assert dry.error_code == 0 and dry.topic_id != kproto.Uuid.ZERO
    real = create(client, "real", configs={"retention.ms": "3600000"}).topics[0]
    assert [(c.name, c.value, c.config_source) for c in dry.configs] == \
        [(c.name, c.value, c.config_source) for c in real.configs]
    assert ("retention.ms", "3600000", 1) in [(c.name, c.value, c.config_source) for c in dry.configs]
    assert client.call(K.METADATA, 12, topics=None).topics[0].name == "real"  # nothing kept


# -- DescribeTransactions of an unknown transactional id -----------------------------------------------
def test_an_unknown_transactional_id_is_described_with_the_response_defaults(client):
    r = client.call(K.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["nope"])
    s = r.transaction_states[0]
    assert (s.error_code, s.transactional_id, s.transaction_state, s.producer_id, s.producer_epoch,
            s.transaction_timeout_ms, s.transaction_start_time_ms, s.topics) == (
        E.TRANSACTIONAL_ID_NOT_FOUND, "nope", "", 0, 0, 0, 0, [])


# -- configs: sources, synonyms and the topic configs of Kafka 4.4 ---------------------------------------
def _syn(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_a_formatted_directory_has_min_insync_replicas_as_a_cluster_wide_dynamic_default(tmp_path):
    core = fake_core(tmp_path / "data", FakeClock(0))
    client = Client(core)
    create(client, "t")
    mir = configs_of(describe(client, "t"))["min.insync.replicas"]
    # Kafka 4.x's storage tool writes it at format time: source 3, the static default after it
    assert (mir.value, mir.config_source, _syn(mir)) == ("1", 3, [("min.insync.replicas", "1", 3),
                                                                 ("min.insync.replicas", "1", 5)])
    assert [(c.name, c.value, c.config_source) for c in describe(client, "", rtype=4).configs] == [
        ("min.insync.replicas", "1", 3)]
    core.close()
    again = fake_core(tmp_path / "data", FakeClock(0))   # a restart keeps it (it is not formatted again)
    try:
        assert configs_of(describe(Client(again), "t"))["min.insync.replicas"].config_source == 3
    finally:
        again.close()


def test_synonyms_start_at_the_main_broker_config_as_kafka_lists_them(client):
    create(client, "t", configs={"retention.ms": "60000"})
    got = configs_of(describe(client, "t"))
    # log.retention.ms and .minutes have no default, the hours' (168) is dropped with them
    assert _syn(got["retention.ms"]) == [("retention.ms", "60000", 1)]
    assert _syn(got["segment.ms"]) == [] and got["segment.ms"].config_source == 5
    assert _syn(got["flush.ms"]) == [] and _syn(got["follower.replication.throttled.replicas"]) == []
    assert _syn(got["segment.bytes"]) == [("log.segment.bytes", "1073741824", 5)]
    req = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    r = client.call(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[req.AlterConfigsResource(
        resource_type=4, resource_name="", configs=[
            req.AlterableConfig(name=n, config_operation=0, value="120000")
            for n in ("log.retention.ms", "log.flush.interval.ms")])])
    assert r.responses[0].error_code == 0
    got = configs_of(describe(client, "t"))
    assert _syn(got["retention.ms"]) == [("retention.ms", "60000", 1), ("log.retention.ms", "120000", 3),
                                         ("log.retention.hours", "168", 5)]
    assert (got["flush.ms"].value, got["flush.ms"].config_source, _syn(got["flush.ms"])) == (
        "120000", 3, [("log.flush.interval.ms", "120000", 3),
                      ("log.flush.scheduler.interval.ms", "9223372036854775807", 5)])
    broker = configs_of(describe(client, "1", rtype=4))
    assert _syn(broker["log.retention.ms"]) == [("log.retention.ms", "120000", 3), ("log.retention.hours", "168", 5)]
    assert (broker["log.roll.ms"].value, _syn(broker["log.roll.ms"])) == (None, [])


def test_the_topic_configs_kafka_4_4_lists_with_their_defaults(client):
    create(client, "t")
    got = configs_of(describe(client, "t"))
    assert {n: (got[n].value, got[n].config_type, _syn(got[n])) for n in (
        "errors.deadletterqueue.group.enable", "max.decompressed.message.bytes", "remote.copy.lag.bytes",
        "remote.copy.lag.ms", "remote.log.copy.disable", "remote.log.delete.on.disable")} == {
        "errors.deadletterqueue.group.enable": ("false", 1, []),
        "max.decompressed.message.bytes": ("2147483639", 3,
                                           [("max.decompressed.message.bytes", "2147483639", 5)]),
        "remote.copy.lag.bytes": ("-1", 5, [("log.remote.copy.lag.bytes", "-1", 5)]),
        "remote.copy.lag.ms": ("0", 5, [("log.remote.copy.lag.ms", "0", 5)]),
        "remote.log.copy.disable": ("false", 1, []),
        "remote.log.delete.on.disable": ("false", 1, [])}
