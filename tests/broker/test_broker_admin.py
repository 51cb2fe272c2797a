"""Admin APIs through the sans-I/O core: CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster, DescribeLogDirs, DeleteRecords; configs kept across
a restart; retention by time and size, the log start offset checkpoint, rolling by time."""
from __future__ import annotations

import os

import pytest

import kproto
from kproto.broker.configs import CONFIGS_FILE
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.broker.log import LogConfig
from kproto.broker.timer import FakeClock
from kproto.error_codes import ErrorCode as E
from kproto.records import iter_batches
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage.checkpoints import OffsetCheckpoint

from broker_support import Client, batch, metadata_on_disk
from test_broker_core import create, fetch_body, produce

WALL0 = 1_700_000_000_000


class Env:
    """A core on a fake clock whose wall clock follows it; ``restart`` reopens the directory."""

    def __init__(self, path, **config):
        self.path, self.config = str(path), config
        self.clock = FakeClock(1_000)
        self.open()

    def open(self):
        self.core = BrokerCore(self.path, BrokerConfig(port=9092, **self.config), clock=self.clock,
                               wall_clock=lambda: WALL0 + self.clock.now_ms())
        self.client = Client(self.core)

    def restart(self, clean=True):
        self.core.close(clean)
        self.open()

    def advance(self, ms):
        self.clock.advance(ms)
        self.core.advance_clock()


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path / "data")
    yield e
    e.core.close()


def describe(client, name, rtype=2, version=4, keys=None, synonyms=True):
    req = kproto.request(K.DESCRIBE_CONFIGS).cls
    resp = client.call(K.DESCRIBE_CONFIGS, version, include_synonyms=synonyms, resources=[
        req.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=keys)])
    return resp.results[0]


def incremental(client, name, changes, rtype=2, validate_only=False):
    req = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    resp = client.call(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=validate_only, resources=[
        req.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
            req.AlterableConfig(name=k, config_operation=op, value=v) for k, (op, v) in changes.items()])])
    return resp.responses[0]


def configs_of(result):
    return {c.name: c for c in result.configs}


def delete_records(client, topic, partition, offset):
    req = kproto.request(K.DELETE_RECORDS).cls
    resp = client.call(K.DELETE_RECORDS, 2, timeout_ms=1000, topics=[req.DeleteRecordsTopic(
        name=topic, partitions=[req.DeleteRecordsPartition(partition_index=partition, offset=offset)])])
    return resp.topics[0].partitions[0]


def list_offset(client, topic, partition, ts):
    req = kproto.request(K.LIST_OFFSETS).cls
    resp = client.call(K.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=[req.ListOffsetsTopic(
        name=topic, partitions=[req.ListOffsetsPartition(partition_index=partition, timestamp=ts)])])
    return resp.topics[0].partitions[0].offset


def fetch(client, topic, partition, offset):
    i = client.send(K.FETCH, 12, fetch_body(topic, partition, offset, max_wait=0))
    return client.answer(i).responses[0].partitions[0]


def segments(core, topic, partition=0):
    d = core.logs.get(topic, partition).path
    return sorted(int(n[:-4]) for n in os.listdir(d) if n.endswith(".log"))


# ---------------------------------------------------------------------------------- configs
def test_describe_topic_configs_with_kafka_names_defaults_sources_and_synonyms(env):
    c = env.client
    create(c, "t", configs={"retention.ms": "60000", "cleanup.policy": "delete"})
    got = configs_of(describe(c, "t"))
    for name in ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "cleanup.policy",
                 "message.timestamp.type", "min.insync.replicas", "max.message.bytes"):
        assert name in got
    r = got["retention.ms"]
    assert (r.value, r.config_source, r.read_only, r.config_type) == ("60000", 1, False, 5)
    # Kafka lists no log.retention.hours=168: its synonyms start at log.retention.ms, which
    # has no default
    assert [(s.name, s.value, s.source) for s in r.synonyms] == [("retention.ms", "60000", 1)]
    assert (got["retention.bytes"].value, got["retention.bytes"].config_source) == ("-1", 5)
    assert (got["segment.bytes"].value, got["segment.ms"].value) == ("1073741824", "604800000")
    assert got["message.timestamp.type"].value == "CreateTime"
    assert (got["max.message.bytes"].value, got["min.insync.replicas"].value) == ("1048588", "1")
    assert [(s.name, s.source) for s in got["segment.bytes"].synonyms] == [("log.segment.bytes", 5)]
    # only the keys asked for
    only = describe(c, "t", keys=["retention.ms", "segment.ms"])
    assert sorted(x.name for x in only.configs) == ["retention.ms", "segment.ms"]
    # errors per resource
    assert describe(c, "nope").error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(c, "bad name!").error_code == E.INVALID_TOPIC_EXCEPTION
    assert describe(c, "7", rtype=4).error_code == E.INVALID_REQUEST
    assert describe(c, "x", rtype=99).error_code == E.INVALID_REQUEST


def test_broker_started_with_settings_reports_them_as_static(tmp_path):
    e = Env(tmp_path / "d", log_retention_ms=3_600_000, log=LogConfig(segment_bytes=1 << 20))
    try:
        got = configs_of(describe(e.client, "1", rtype=4))
        assert (got["log.retention.ms"].value, got["log.retention.ms"].config_source) == ("3600000", 4)
        assert (got["log.retention.hours"].value, got["log.retention.hours"].config_source) == ("168", 5)
        assert got["node.id"].read_only and got["node.id"].value == "1"
        create(e.client, "t")
        t = configs_of(describe(e.client, "t"))
        assert (t["retention.ms"].value, t["retention.ms"].config_source) == ("3600000", 4)
        assert [(s.name, s.value, s.source) for s in t["retention.ms"].synonyms] == \
            [("log.retention.ms", "3600000", 4), ("log.retention.hours", "168", 5)]
        assert (t["segment.bytes"].value, t["segment.bytes"].config_source) == (str(1 << 20), 4)
    finally:
        e.core.close()


def test_create_topics_validates_configs_and_answers_every_config(env):
    c = env.client
    assert create(c, "a", configs={"no.such.config": "1"}).topics[0].error_code == E.INVALID_CONFIG
    bad = create(c, "b", configs={"retention.ms": "-5"}).topics[0]
    assert bad.error_code == E.INVALID_CONFIG and "retention.ms" in bad.error_message
    assert create(c, "c", configs={"cleanup.policy": "shred"}).topics[0].error_code == E.INVALID_CONFIG
    ok = create(c, "d", configs={"segment.ms": "1000"}).topics[0]
    assert ok.error_code == 0
    answered = {x.name: (x.value, x.config_source) for x in ok.configs}
    assert answered["segment.ms"] == ("1000", 1) and answered["retention.ms"] == ("604800000", 5)


def test_incremental_alter_configs_set_delete_append_subtract_and_validate_only(env):
    c = env.client
    create(c, "t")
    assert incremental(c, "t", {"retention.ms": (0, "1000"), "cleanup.policy": (2, "compact")}).error_code == 0
    got = configs_of(describe(c, "t"))
    assert got["retention.ms"].value == "1000" and got["cleanup.policy"].value == "delete,compact"
    assert incremental(c, "t", {"cleanup.policy": (3, "delete")}).error_code == 0
    assert configs_of(describe(c, "t"))["cleanup.policy"].value == "compact"
    assert incremental(c, "t", {"retention.ms": (1, None)}).error_code == 0
    got = configs_of(describe(c, "t"))
    assert (got["retention.ms"].value, got["retention.ms"].config_source) == ("604800000", 5)
    # append to a non-list config, bad values, unknown names: nothing changes
    assert incremental(c, "t", {"retention.ms": (2, "5")}).error_code == E.INVALID_CONFIG
    assert incremental(c, "t", {"segment.bytes": (0, "x")}).error_code == E.INVALID_CONFIG
    assert incremental(c, "t", {"what": (0, "1")}).error_code == E.INVALID_CONFIG
    assert incremental(c, "nope", {"retention.ms": (0, "1")}).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert incremental(c, "t", {"retention.ms": (0, "7")}, validate_only=True).error_code == 0
    assert configs_of(describe(c, "t"))["retention.ms"].value == "604800000"
    # a log setting takes effect on the partition's log at once
    assert incremental(c, "t", {"message.timestamp.type": (0, "LogAppendTime")}).error_code == 0
    assert env.core.logs.get("t", 0).config.message_timestamp_type == "LogAppendTime"


def test_legacy_alter_configs_replaces_the_topic_configs(env):
    c = env.client
    create(c, "t", configs={"retention.ms": "1000", "segment.ms": "5000"})
    req = kproto.request(K.ALTER_CONFIGS).cls
    resp = c.call(K.ALTER_CONFIGS, 2, validate_only=False, resources=[req.AlterConfigsResource(
        resource_type=2, resource_name="t", configs=[req.AlterableConfig(name="retention.bytes", value="99")])])
    assert resp.responses[0].error_code == 0
    got = configs_of(describe(c, "t"))
    assert got["retention.bytes"].value == "99"
    assert got["retention.ms"].config_source == 5 and got["segment.ms"].config_source == 5


def test_dynamic_broker_configs_become_topic_defaults(env):
    c = env.client
    create(c, "t", configs={"retention.bytes": "5"})
    assert incremental(c, "", {"log.retention.ms": (0, "120000")}, rtype=4).error_code == 0
    assert incremental(c, "1", {"log.retention.bytes": (0, "777")}, rtype=4).error_code == 0
    assert incremental(c, "1", {"node.id": (0, "3")}, rtype=4).error_code == E.INVALID_CONFIG
    t = configs_of(describe(c, "t"))
    assert (t["retention.ms"].value, t["retention.ms"].config_source) == ("120000", 3)
    assert (t["retention.bytes"].value, t["retention.bytes"].config_source) == ("5", 1)
    assert [s.source for s in t["retention.bytes"].synonyms] == [1, 2, 5]
    # min.insync.replicas: written when the directory was formatted, as Kafka 4.x does
    assert {x.name for x in describe(c, "", rtype=4).configs} == {"log.retention.ms", "min.insync.replicas"}
    b = configs_of(describe(c, "1", rtype=4))
    assert (b["log.retention.bytes"].value, b["log.retention.bytes"].config_source) == ("777", 2)


def test_topic_and_broker_configs_survive_a_restart_clean_or_not(env):
    c = env.client
    create(c, "t", configs={"retention.ms": "60000"})
    create(c, "plain")
    incremental(c, "t", {"message.timestamp.type": (0, "LogAppendTime")})
    incremental(c, "", {"log.retention.bytes": (0, "1000000")}, rtype=4)
    env.restart(clean=False)
    got = configs_of(describe(env.client, "t"))
    assert (got["retention.ms"].value, got["retention.ms"].config_source) == ("60000", 1)
    assert got["message.timestamp.type"].value == "LogAppendTime"
    assert env.core.logs.get("t", 0).config.message_timestamp_type == "LogAppendTime"
    assert configs_of(describe(env.client, "plain"))["retention.bytes"].value == "1000000"
    # ConfigRecords in the metadata log (the broker keeps them nowhere else)
    on_disk = metadata_on_disk(env.path)
    assert on_disk.configs[(2, "t")] == {"message.timestamp.type": "LogAppendTime", "retention.ms": "60000"}
    assert on_disk.configs[(4, "")]["log.retention.bytes"] == "1000000"
    assert not os.path.exists(os.path.join(env.path, CONFIGS_FILE))
    # a deleted topic's configs go; a topic recreated under the name starts from the defaults
    req = kproto.request(K.DELETE_TOPICS).cls
    env.client.call(K.DELETE_TOPICS, 6, timeout_ms=1000, topics=[req.DeleteTopicState(name="t")])
    assert (2, "t") not in metadata_on_disk(env.path).configs
    create(env.client, "t")
    env.restart()
    assert configs_of(describe(env.client, "t"))["retention.ms"].config_source == 5


def test_min_insync_replicas_above_one_fails_acks_all_only(env):
    c = env.client
    create(c, "t", configs={"min.insync.replicas": "2"})
    assert produce(c, "t", 0, batch([b"x"])).responses[0].partition_responses[0].error_code == \
        E.NOT_ENOUGH_REPLICAS
    assert produce(c, "t", 0, batch([b"x"]), acks=1).responses[0].partition_responses[0].error_code == 0


# ---------------------------------------------------------------------------------- others
def test_create_partitions_grows_a_topic(env):
    c = env.client
    create(c, "t", partitions=2, configs={"segment.bytes": "100000"})
    req = kproto.request(K.CREATE_PARTITIONS).cls

    def grow(name, count, assignments=None, validate_only=False):
        return c.call(K.CREATE_PARTITIONS, 3, timeout_ms=1000, validate_only=validate_only, topics=[
            req.CreatePartitionsTopic(name=name, count=count, assignments=assignments)]).results[0]

    assert grow("t", 4, validate_only=True).error_code == 0
    assert len(env.core.logs.topics["t"].partitions) == 2
    assert grow("t", 4).error_code == 0
    assert grow("t", 4).error_code == E.INVALID_PARTITIONS
    assert grow("t", 3).error_code == E.INVALID_PARTITIONS
    assert grow("nope", 3).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert grow("t", 6, [req.CreatePartitionsAssignment(broker_ids=[1])]).error_code == \
        E.INVALID_REPLICA_ASSIGNMENT
    assert grow("t", 5, [req.CreatePartitionsAssignment(broker_ids=[2])]).error_code == \
        E.INVALID_REPLICA_ASSIGNMENT
    assert grow("t", 5, [req.CreatePartitionsAssignment(broker_ids=[1])]).error_code == 0
    md = c.call(K.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)
    assert len(md.topics[0].partitions) == 5
    assert produce(c, "t", 4, batch([b"new"])).responses[0].partition_responses[0].error_code == 0
    assert env.core.logs.get("t", 4).config.segment_bytes == 100000
    env.restart()
    assert len(env.core.logs.topics["t"].partitions) == 5
    assert env.core.logs.get("t", 4).log_end_offset == 1


def test_describe_cluster_and_log_dirs(env):
    c = env.client
    resp = c.call(K.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, env.core.logs.cluster_id, 1)
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [(1, "127.0.0.1", 9092)]
    assert resp.cluster_authorized_operations == -2**31
    assert c.call(K.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False,
                  endpoint_type=2).error_code == E.UNSUPPORTED_ENDPOINT_TYPE
    create(c, "t", partitions=2)
    data = batch([b"v" * 100])
    produce(c, "t", 1, data)
    resp = c.call(K.DESCRIBE_LOG_DIRS, 4, topics=None)
    (result,) = resp.results
    assert result.log_dir == os.path.abspath(env.path) and result.total_bytes > 0
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    assert sizes == {("t", 0): 0, ("t", 1): len(data)}
    req = kproto.request(K.DESCRIBE_LOG_DIRS).cls
    resp = c.call(K.DESCRIBE_LOG_DIRS, 1, topics=[req.DescribableLogDirTopic(topic="t", partitions=[1, 9])])
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.results[0].topics] == [("t", [1])]


def test_delete_records_moves_the_log_start_offset(env):
    c = env.client
    create(c, "t")
    for i in range(5):
        produce(c, "t", 0, batch([b"a%d" % i, b"b%d" % i]))  # offsets 2i, 2i+1
    assert delete_records(c, "t", 0, 11).error_code == E.OFFSET_OUT_OF_RANGE
    r = delete_records(c, "t", 0, 3)
    assert (r.error_code, r.low_watermark) == (0, 3)
    assert delete_records(c, "t", 0, 1).low_watermark == 3  # never backwards
    assert list_offset(c, "t", 0, -2) == 3
    assert fetch(c, "t", 0, 2).error_code == E.OFFSET_OUT_OF_RANGE
    got = fetch(c, "t", 0, 3)
    assert got.error_code == 0 and got.log_start_offset == 3
    # the batch holding offset 3 comes whole, as Kafka answers
    assert [b.base_offset for b in iter_batches(got.records)][0] == 2
    assert delete_records(c, "nope", 0, 1).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert delete_records(c, "t", 0, -1).low_watermark == 10
    # kept through a crash: the checkpoint is written when the start moves
    env.restart(clean=False)
    assert list_offset(env.client, "t", 0, -2) == 10
    ck = OffsetCheckpoint.parse(open(os.path.join(env.path, "log-start-offset-checkpoint"), "rb").read())
    assert ("t", 0, 10) in list(ck.entries)


def test_delete_records_refused_on_compacted_and_internal_topics(env):
    c = env.client
    create(c, "compacted", configs={"cleanup.policy": "compact"})
    produce(c, "compacted", 0, batch([b"x"]))
    assert delete_records(c, "compacted", 0, 1).error_code == E.POLICY_VIOLATION
    env.core.groups.ensure_topic()
    assert delete_records(c, "__consumer_offsets", 0, 0).error_code == E.INVALID_TOPIC_EXCEPTION


# ---------------------------------------------------------------------------------- retention
def test_retention_by_time_deletes_old_segments_on_the_timer(tmp_path):
    e = Env(tmp_path / "d", log_retention_check_interval_ms=10_000)
    try:
        c = e.client
        create(c, "t", configs={"segment.bytes": "200", "retention.ms": "60000"})
        for i in range(6):
            now = WALL0 + e.clock.now_ms()
            produce(c, "t", 0, batch([b"x" * 100], timestamp=now))
            e.advance(20_000)
        # now at +120 s: the batches of 0, 20 and 40 s are older than 60 s (the one of 60 s
        # is exactly 60 s old: kept), deleted by the checks on the way (one per 20 s step:
        # a check that ran late is not repeated for the periods it missed)
        assert e.core.retention.checks == 6
        assert segments(e.core, "t") == [3, 4, 5]
        assert list_offset(c, "t", 0, -2) == 3
        assert fetch(c, "t", 0, 0).error_code == E.OFFSET_OUT_OF_RANGE
        # later every segment expires: the active one too, after a roll to an empty segment
        e.advance(200_000)
        assert segments(e.core, "t") == [6]
        assert list_offset(c, "t", 0, -2) == 6 and list_offset(c, "t", 0, -1) == 6
        assert produce(c, "t", 0, batch([b"y"])).responses[0].partition_responses[0].base_offset == 6
        e.restart(clean=False)
        assert segments(e.core, "t") == [6]
        assert list_offset(e.client, "t", 0, -2) == 6 and list_offset(e.client, "t", 0, -1) == 7
    finally:
        e.core.close()


def test_retention_by_size_and_compact_topics_are_left_alone(env):
    c = env.client
    create(c, "t", configs={"segment.bytes": "200", "retention.bytes": "300"})
    create(c, "k", configs={"segment.bytes": "200", "retention.bytes": "0", "cleanup.policy": "compact"})
    data = batch([b"x" * 100])
    for _ in range(5):
        produce(c, "t", 0, data)
        produce(c, "k", 0, data)
    assert segments(env.core, "t") == [0, 1, 2, 3, 4]
    env.core.retention.check()
    # five segments of one batch each, 300 bytes allowed: Kafka deletes, oldest first,
    # while the excess covers a whole segment: 3 of them here
    assert (5 * len(data) - 300) // len(data) == 3
    assert segments(env.core, "t") == [3, 4]
    assert segments(env.core, "k") == [0, 1, 2, 3, 4]


def test_delete_records_then_retention_removes_segments_below_the_start(env):
    c = env.client
    create(c, "t", configs={"segment.bytes": "200"})
    for _ in range(4):
        produce(c, "t", 0, batch([b"x" * 100]))
    delete_records(c, "t", 0, 2)
    assert segments(env.core, "t") == [0, 1, 2, 3]
    env.core.retention.check()
    assert segments(env.core, "t") == [2, 3]
    for ext in (".index", ".timeindex"):
        assert not os.path.exists(os.path.join(env.core.logs.get("t", 0).path,
                                               "%020d%s" % (0, ext)))
    assert fetch(c, "t", 0, 2).records is not None


def test_segments_roll_by_time(env):
    c = env.client
    create(c, "t", configs={"segment.ms": "1000"})
    produce(c, "t", 0, batch([b"a"], timestamp=WALL0 + env.clock.now_ms()))
    env.advance(500)
    produce(c, "t", 0, batch([b"b"], timestamp=WALL0 + env.clock.now_ms()))
    assert segments(env.core, "t") == [0]
    env.advance(600)  # the first batch is now 1100 ms old
    produce(c, "t", 0, batch([b"c"], timestamp=WALL0 + env.clock.now_ms()))
    assert segments(env.core, "t") == [0, 2]
    got = fetch(c, "t", 0, 0)
    assert [b.base_offset for b in iter_batches(got.records)] == [0, 1]


def test_segments_roll_by_the_records_timestamps_not_the_clock(env):
    # Kafka's LogSegment.shouldRoll: the incoming batch's max timestamp minus the active
    # segment's first one. Records an hour old arriving together do not roll a segment each,
    # and a batch stamped 1.1 s after the first rolls without the clock moving
    c = env.client
    create(c, "t", configs={"segment.ms": "1000"})
    old = WALL0 + env.clock.now_ms() - 3_600_000
    for i in range(3):
        produce(c, "t", 0, batch([b"old%d" % i], timestamp=old + i))
    assert segments(env.core, "t") == [0]
    produce(c, "t", 0, batch([b"later"], timestamp=old + 1_100))
    assert segments(env.core, "t") == [0, 3]


def test_the_directory_after_retention_reads_back_without_damage(env):
    import kproto.storage as ks
    c = env.client
    create(c, "t", configs={"segment.bytes": "200", "retention.bytes": "300"})
    for i in range(6):
        produce(c, "t", 0, batch([b"v%d" % i + b"x" * 100]))
    env.core.retention.check()
    env.core.close()
    table = ks.read_arrow(env.path, topics=["t"])
    assert table.column("offset").to_pylist() == [4, 5]
    env.open()
