"""Admin clients against the broker on 127.0.0.1: kproto's Admin, the ``kproto topics`` /
``kproto configs`` CLI and confluent-kafka's AdminClient (librdkafka)."""
from __future__ import annotations

import asyncio
import contextlib
import io
import json

import pytest

from kproto.cli.main import main as cli_main


def cli(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(argv))
    return code, out.getvalue()


def test_kproto_admin_configs_partitions_and_delete_records(kafka_broker):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.producer import Producer

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.create_topics({"a": 1}, configs={"a": {"retention.ms": "3600000"}})
            got = (await admin.describe_configs([("topic", "a")]))[("topic", "a")]
            assert (got["retention.ms"].value, got["retention.ms"].source_name) == ("3600000", "dynamic_topic")
            assert got["segment.bytes"].is_default
            await admin.alter_configs({("topic", "a"): {"retention.ms": None, "cleanup.policy": "compact,delete"}})
            got = (await admin.describe_configs([("topic", "a")], keys=["retention.ms", "cleanup.policy"]))
            assert got[("topic", "a")]["retention.ms"].is_default
            assert got[("topic", "a")]["cleanup.policy"].value == "compact,delete"
            broker = (await admin.describe_configs([("broker", "1")]))[("broker", "1")]
            assert broker["log.retention.hours"].value == "168"
            await admin.create_partitions({"a": 3})
            assert len((await admin.describe_topics(["a"]))["a"].partitions) == 3
            producer = await Producer(cluster).start()
            for i in range(10):
                # keyed: the topic is compacted now, and Kafka refuses records without a key there
                await producer.send("a", b"v%d" % i, key=b"k%d" % i, partition=2)
            await producer.flush()
            await producer.close()
            assert await admin.delete_records({("a", 2): 4}) == {("a", 2): 4}
            assert await admin.list_offsets([("a", 2)], "earliest") == {("a", 2): 4}
            desc = await admin.describe_cluster()
            assert desc.controller_id == 1 and [b.node_id for b in desc.brokers] == [1]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_kproto_cli_topics_and_configs(kafka_broker):
    b = kafka_broker.bootstrap
    assert cli("topics", "create", "--bootstrap", b, "t", "--partitions", "2",
               "--config", "retention.ms=60000")[0] == 0
    code, out = cli("configs", "--bootstrap", b, "--topic", "t", "--json")
    assert code == 0
    doc = json.loads(out)
    text = json.dumps(doc)
    assert "retention.ms" in text and "60000" in text
    assert cli("configs", "--bootstrap", b, "--topic", "t", "--set", "segment.ms=1000",
               "--delete", "retention.ms")[0] == 0
    code, out = cli("configs", "--bootstrap", b, "--topic", "t")
    assert "segment.ms" in out and "retention.ms" not in out  # only overrides without --all
    assert cli("topics", "alter", "--bootstrap", b, "t", "--partitions", "4")[0] == 0
    code, out = cli("topics", "describe", "--bootstrap", b, "t", "--json")
    (desc,) = json.loads(out)
    assert code == 0 and len(desc["partitions"]) == 4
    assert cli("configs", "--bootstrap", b, "--broker", "1", "--all")[0] == 0
    # a bad value is refused with the broker's message and a non-zero exit
    assert cli("configs", "--bootstrap", b, "--topic", "t", "--set", "retention.ms=abc")[0] != 0
    # the override is still there after a restart
    kafka_broker.restart()
    code, out = cli("configs", "--bootstrap", kafka_broker.bootstrap, "--topic", "t")
    assert "segment.ms" in out and "1000" in out


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_kafka_admin_client(kafka_broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       NewPartitions, NewTopic)

    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for f in admin.create_topics([NewTopic("c", 1, 1, config={"retention.bytes": "1000000"})]).values():
        f.result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "c")
    got = admin.describe_configs([res])[res].result(10)
    assert got["retention.bytes"].value == "1000000"
    assert got["retention.bytes"].source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["retention.ms"].is_default
    # as Kafka lists them: log.retention.ms has no default, so neither it nor .hours shows
    assert [s.name for s in got["retention.ms"].synonyms.values()] == []
    assert [s.name for s in got["retention.bytes"].synonyms.values()] == ["retention.bytes", "log.retention.bytes"]
    inc = ConfigResource(ConfigResource.Type.TOPIC, "c", incremental_configs=[
        ConfigEntry("segment.ms", "5000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([inc])[inc].result(10)
    got = admin.describe_configs([res])[res].result(10)
    assert got["segment.ms"].value == "5000" and got["retention.bytes"].is_default
    # the legacy AlterConfigs replaces the overrides
    legacy = ConfigResource(ConfigResource.Type.TOPIC, "c", set_config={"retention.ms": "7200000"})
    admin.alter_configs([legacy])[legacy].result(10)
    got = admin.describe_configs([res])[res].result(10)
    assert got["retention.ms"].value == "7200000" and got["segment.ms"].is_default
    bad = ConfigResource(ConfigResource.Type.TOPIC, "c", incremental_configs=[
        ConfigEntry("retention.ms", "nope", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as err:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert err.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    brk = ConfigResource(ConfigResource.Type.BROKER, "1")
    assert admin.describe_configs([brk])[brk].result(10)["node.id"].is_read_only
    admin.create_partitions([NewPartitions("c", 3)])["c"].result(10)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["c"].partitions) == 3
    cluster = admin.describe_cluster().result(10)
    assert cluster.controller.id == 1 and [n.id for n in cluster.nodes] == [1]
    p = ck.Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(5):
        p.produce("c", b"x%d" % i, partition=0)
    p.flush(10)
    tp = ck.TopicPartition("c", 0, 3)
    deleted = admin.delete_records([tp])[tp].result(10)
    assert deleted.low_watermark == 3
    c = ck.Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "g"})
    lo, hi = c.get_watermark_offsets(ck.TopicPartition("c", 0), timeout=10)
    c.close()
    assert (lo, hi) == (3, 5)
