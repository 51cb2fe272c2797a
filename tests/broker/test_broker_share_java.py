"""Share groups against Apache Kafka's own code. The Java 4.4 client's KafkaShareConsumer
(``java_share/KprotoShare.java``) on kproto's broker, kproto's cluster and on Apache Kafka
4.4.0, the same outcome: two share consumers of one group each take a partition, the released
first record of each partition comes back with delivery count 2, every record is accepted
exactly once, and the group has no lag left. And Kafka's DumpLogSegments reads what kproto's
persister wrote to __share_group_state as kproto does."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid

import pytest

import test_broker_share as share
from kproto.broker.timer import FakeClock
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.storage.dump import dump_internal_log
from kproto.testing import apache, require_apache_kafka

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java_share", "KprotoShare.java")
RECORDS, PARTITIONS, CONSUMERS = 10, 2, 2


@pytest.fixture(scope="module")
def share_cp(tmp_path_factory):
    """KprotoShare compiled against kafka-clients 4.4.0 (KafkaShareConsumer is 4.x's)."""
    jars = apache.client_jars("4.4.0")
    javac = shutil.which("javac")
    assert javac, "Java 17 (javac) is needed for the Java interop tests"
    out = str(tmp_path_factory.mktemp("java-share"))
    proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", os.pathsep.join(jars), "-d", out, SOURCE],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return os.pathsep.join([out, *jars])


def run_share(cp: str, bootstrap: str, topic: str, group: str, *extra: str) -> list[dict]:
    java = shutil.which("java")
    assert java
    proc = subprocess.run([java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
                           "KprotoShare", bootstrap, topic, str(PARTITIONS), group, str(RECORDS), str(CONSUMERS),
                           "90", *extra], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-6000:]}\n{proc.stdout[-3000:]}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


async def share_offsets(bootstrap: str, group: str) -> dict:
    async with await Cluster(bootstrap).start() as cluster:
        return await Admin(cluster).list_share_group_offsets(group)


@pytest.mark.kafka_broker(share_auto_offset_reset="earliest")
@pytest.mark.parametrize("target", ["kproto", "apache", "kproto-cluster"])
def test_share_consumers_release_and_accept(target, share_cp, request):
    if target == "apache":
        require_apache_kafka()
    broker = request.getfixturevalue({"kproto": "kafka_broker", "apache": "apache_kafka",
                                      "kproto-cluster": "kafka_cluster"}[target])
    topic, group = f"share-{uuid.uuid4().hex[:8]}", f"share-g-{uuid.uuid4().hex[:8]}"
    # Apache Kafka and kproto's cluster: the group's share.auto.offset.reset (a group config);
    # kproto's broker: the broker's default
    events = run_share(share_cp, broker.bootstrap, topic, group, *(["earliest"] if target != "kproto" else []))
    records = [e for e in events if e["event"] == "record"]
    assert [e for e in events if e["event"] == "done"] == [{"event": "done", "accepted": RECORDS}]
    accepted = sorted((e["partition"], e["offset"]) for e in records if e["ack"] == "accept")
    assert accepted == sorted((p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS))
    again = sorted((e["partition"], e["offset"], e["delivery"]) for e in records if e["delivery"] > 1)
    assert again == [(p, 0, 2) for p in range(PARTITIONS)]
    # each partition went to one consumer (the simple assignor: two members, two partitions)
    owners = {e["partition"]: {x["consumer"] for x in records if x["partition"] == e["partition"]} for e in records}
    assert all(len(c) == 1 for c in owners.values()) and len({min(c) for c in owners.values()}) == CONSUMERS
    offsets = asyncio.run(share_offsets(broker.bootstrap, group))
    assert sorted(offsets) == [(topic, p) for p in range(PARTITIONS)]
    assert all(lag == 0 for _, lag in offsets.values()), offsets


def test_share_group_state_records_decode_with_kafkas_tool(tmp_path):
    """What kproto's persister writes to __share_group_state, read by Kafka 4.4.0's
    DumpLogSegments --share-group-state-decoder and by kproto's dump-log: the same records."""
    require_apache_kafka()
    clock = FakeClock(1000)
    core = share.make_core(tmp_path / "data", clock)
    core._create_topic("jobs", 1)
    prod = share.Client(core)
    share.join(share.Client(core))
    s = share.Session(core)
    s.call()
    share.produce(prod, 4)
    s.call()
    s.call(acks={0: [(0, 3, [1, 2, 3, 1])]})
    core.close()
    segments = [p for p in sorted((tmp_path / "data").glob("__share_group_state-*/*.log")) if p.stat().st_size]
    assert segments
    out = apache.run_tool("4.4.0", "org.apache.kafka.tools.DumpLogSegments", "--share-group-state-decoder",
                          "--deep-iteration", "--print-data-log", "--files", *map(str, segments), timeout=120)
    kafka = []
    for line in out.stdout.splitlines():
        if line.startswith("| offset:"):
            key, payload = line.split(" key: ", 1)[1].split(" payload: ")
            kafka.append((json.loads(key)["data"], json.loads(payload)["data"]))
    ours = [(d["key"]["data"], d["value"]["data"]) for seg in segments for d in dump_internal_log(str(seg))
            if "key" in d]
    assert kafka == ours and len(ours) == 2
    assert [k for k, _ in kafka] == [{"groupId": "g", "topicId": str(core.logs.topics["jobs"].topic_id),
                                      "partition": 0}] * 2
    assert kafka[1][1]["stateBatches"][2] == {"firstOffset": 2, "lastOffset": 2, "deliveryState": 4,
                                              "deliveryCount": 1}


def test_share_group_records_decode_with_kafkas_offsets_decoder(tmp_path):
    """The share groups' membership records kproto writes to __consumer_offsets (types 10-15),
    read by Kafka 4.4.0's DumpLogSegments --offsets-decoder."""
    require_apache_kafka()
    clock = FakeClock(1000)
    core = share.make_core(tmp_path / "data", clock)
    core._create_topic("jobs", 1)
    share.join(share.Client(core))
    share.hb(share.Client(core), epoch=-1)
    core.close()
    segments = [p for p in sorted((tmp_path / "data").glob("__consumer_offsets-*/*.log")) if p.stat().st_size]
    out = apache.run_tool("4.4.0", "org.apache.kafka.tools.DumpLogSegments", "--offsets-decoder",
                          "--deep-iteration", "--print-data-log", "--files", *map(str, segments), timeout=120)
    decoded = []
    for line in out.stdout.splitlines():
        if line.startswith("| offset:"):
            key, payload = line.split(" key: ", 1)[1].split(" payload: ")
            decoded.append((int(json.loads(key)["type"]), None if payload == "<DELETE>" else json.loads(payload)))
    assert {t for t, _ in decoded} == set(range(10, 16))
    current = [p["data"] for t, p in decoded if t == 14 and p is not None]
    assert current[-1]["memberEpoch"] == 3 and current[-1]["assignedPartitions"][0]["partitions"] == [0]
    assert [t for t, p in decoded if p is None] == [14, 13, 10]  # the member's tombstones when it left
