"""KRaft metadata snapshots in kproto's cluster: every node writes ``<offset>-<epoch>.checkpoint``
files and truncates its metadata log below them, a wiped broker catches up by FetchSnapshot
and serves every topic, a restart loads the latest snapshot then the tail, ``kproto logdir``'s
metadata story starts from a snapshot, and Apache Kafka's DumpLogSegments reads the files.
(The Raft and file-format units are in test_raft_snapshots.py.)"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from kproto.broker.cluster.raft import RaftConfig
from kproto.broker.cluster.snapshots import decode_snapshot
from kproto.codecs import message as message_codec
from kproto.storage.metadata_image import (MetadataImage, decode_metadata_record,
                                           encode_metadata_record)
from kproto.storage.metadata_story import read_metadata_story
from kproto.testing import CLUSTER_TEST_DEFAULTS, TEST_DEFAULTS, ClusterThread, require_apache_kafka
from kproto.testing.apache import DEFAULT_VERSION, run_tool


# ---------------------------------------------------------------------------- the cluster
CLUSTER_CONFIG = RaftConfig(max_bytes_between_snapshots=2048, max_retention_bytes=0,
                            segment_bytes=4096)


def _metadata_dirs(cluster: ClusterThread) -> dict[int, str]:
    return cluster.inspect(lambda c: {
        **{n: b.core.metadata_log.path for n, b in c.brokers.items() if b.running},
        **{n: x.core.log.path for n, x in c.controllers.items() if x.running}})


def _assignments(image: MetadataImage) -> dict[str, Any]:
    return {n: (str(t.topic_id), {i: p.replicas for i, p in t.partitions.items()})
            for n, t in image.topics.items()}


@pytest.mark.kafka_cluster(brokers=3, controllers=1, raft_config=CLUSTER_CONFIG)
def test_cluster_snapshots_wiped_broker_and_restart(kafka_cluster: ClusterThread, tmp_path) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    c = kafka_cluster
    topics = [f"snap{i}" for i in range(10)]
    for t in topics:
        c.create_topic(t, 2, 3)

    def truncated(cl: Any) -> bool:
        states = {**{n: b.core.raft for n, b in cl.brokers.items()},
                  **{n: x.replica for n, x in cl.controllers.items()}}
        return all(r.snapshots.ids and r.log.log_start_offset == r.snapshots.earliest.end_offset > 0
                   for r in states.values())
    c.wait_for(truncated, 20, "every node's metadata log truncated to a snapshot")
    controller = c.cluster.controller_ids[0]
    cdir = _metadata_dirs(c)[controller]
    assert "00000000000000000000.log" not in os.listdir(cdir)   # segments deleted
    before = c.inspect(lambda cl: _assignments(cl.controllers[controller].controller.committed))
    assert set(topics) <= set(before)

    # the logdir story starts from the snapshot and knows every topic
    story = read_metadata_story(cdir)
    assert story.snapshot is not None and story.snapshot > 0
    assert set(topics) <= set(story.image.topics)

    # broker 1 wiped: it fetches the snapshot (its log starts there) and hosts its replicas again
    c.stop(1)
    bdir = os.path.join(c.data_dir, "broker-1")
    shutil.rmtree(bdir)
    c.start(1)

    def back(cl: Any) -> bool:
        b = cl.brokers[1]
        return b.running and b.core.ready and all(
            1 in p.isr for p in cl.controllers[controller].controller.committed.all_partitions()
            if 1 in p.replicas)
    c.wait_for(back, 30, "broker 1 back in every ISR")
    raft = c.inspect(lambda cl: cl.brokers[1].core.raft.describe())
    assert raft["log_start_offset"] > 0 and raft["snapshots"][0][0] == raft["log_start_offset"]
    host, port = c.inspect(lambda cl: (cl.brokers[1].config.host, cl.brokers[1].config.port))
    md = AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=10)
    for t in topics:
        assert len(md.topics[t].partitions) == 2 and all(
            p.leader >= 0 for p in md.topics[t].partitions.values()), t
    p = ck.Producer({"bootstrap.servers": f"{host}:{port}", "acks": "all"})
    for t in topics:
        p.produce(t, b"after-wipe", partition=0)
    assert p.flush(20) == 0

    # a whole-cluster restart: the topics come back from the snapshot (the log holds none of
    # their TopicRecords any more)
    data_dir = c.data_dir
    c.close()
    with ClusterThread(data_dir, brokers=3, controllers=1, raft_config=CLUSTER_CONFIG,
                       **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS) as again:
        after = again.inspect(lambda cl: _assignments(cl.controllers[controller].controller.committed))
        assert after == before
        assert again.inspect(lambda cl: set(topics) <= set(cl.brokers[2].core.image.topics))
        cons = ck.Consumer({"bootstrap.servers": again.bootstrap, "group.id": "g",
                            "auto.offset.reset": "earliest"})
        cons.assign([ck.TopicPartition(topics[0], 0)])
        msg = None
        for _ in range(50):
            msg = cons.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        cons.close()
        assert msg is not None and msg.value() == b"after-wipe"


def test_image_records_replay_to_the_same_image(tmp_path) -> None:
    with ClusterThread(tmp_path / "c", brokers=2, controllers=1, **TEST_DEFAULTS,
                       **CLUSTER_TEST_DEFAULTS) as c:
        c.create_topic("img", 3, 2, {"retention.ms": "1000"})
        image = c.inspect(lambda cl: next(iter(cl.controllers.values())).controller.committed.copy())
    again = MetadataImage()
    for obj, version in image.records():
        again.replay_value(encode_metadata_record(obj, version), 0)
    assert again.topics == image.topics and again.brokers == image.brokers
    assert again.configs == image.configs and again.features == image.features
    assert again.next_producer_id == image.next_producer_id


# ---------------------------------------------------------------------------- Apache Kafka
def test_kafka_dump_log_segments_reads_the_snapshots(tmp_path) -> None:
    require_apache_kafka(DEFAULT_VERSION)
    with ClusterThread(tmp_path / "c", brokers=1, controllers=1, raft_config=CLUSTER_CONFIG,
                       default_replication_factor=1, **TEST_DEFAULTS,
                       **CLUSTER_TEST_DEFAULTS) as c:
        for i in range(12):
            c.create_topic(f"d{i}", 2, 1, {"cleanup.policy": "compact"})
        c.wait_for(lambda cl: all(len(r.snapshots.ids) >= 1 for r in (
            cl.brokers[1].core.raft, next(iter(cl.controllers.values())).replica)), 20)
        dirs = list(_metadata_dirs(c).values())
    files = sorted(os.path.join(d, f) for d in dirs for f in os.listdir(d) if f.endswith(".checkpoint"))
    assert len(files) >= 2
    out = run_tool(DEFAULT_VERSION, "org.apache.kafka.tools.DumpLogSegments",
                   "--cluster-metadata-decoder", "--files", ",".join(files), timeout=180).stdout
    dumps: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("Dumping "):
            cur = dumps.setdefault(line[len("Dumping "):], [])
        else:
            cur.append(line)
    for f in files:
        lines = dumps[f]
        end, epoch = (int(x) for x in os.path.basename(f)[:-len(".checkpoint")].split("-"))
        assert f"Snapshot end offset: {end}, epoch: {epoch}" in lines[0], lines[:2]
        assert not [ln for ln in lines if "isvalid: false" in ln or "Exception" in ln or "Error" in ln]
        payloads = [json.loads(ln.split(" payload: ", 1)[1]) for ln in lines if " payload: " in ln]
        with open(f, "rb") as fh:
            _, values = decode_snapshot(fh.read())
        ours = []
        for v in values:
            rtype, version, obj = decode_metadata_record(v)
            codec = message_codec(type(obj).__name__)
            ours.append((version, codec.to_json(obj, version)))
        assert [(p["version"], p["data"]) for p in payloads] == ours, f
        kinds = [ln.split("headerKeys: [] ", 1)[1].split(" ")[0] for ln in lines
                 if ln.startswith("| offset") and " payload: " not in ln]
        assert kinds == ["SnapshotHeader", "SnapshotFooter"], kinds


@pytest.mark.kafka_cluster(brokers=3, controllers=1, raft_config=CLUSTER_CONFIG)
def test_a_broker_cut_off_past_the_log_start_loads_the_snapshot_over_its_image(
        kafka_cluster: ClusterThread) -> None:
    """A broker that missed a topic's deletion and creations (the log truncated meanwhile)
    loads the snapshot over its image: the deleted topic's replica goes, the new ones come."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    c = kafka_cluster
    c.create_topic("gone", 1, 3)
    c.create_topic("stay", 1, 3)
    c.wait_for(lambda cl: os.path.isdir(os.path.join(cl.brokers[3].core.logs.data_dir, "gone-0")))
    end_before = c.inspect(lambda cl: cl.brokers[3].core.raft.log.log_end_offset)
    c.isolate(3)
    admin = AdminClient({"bootstrap.servers": c.inspect(
        lambda cl: f"{cl.brokers[1].config.host}:{cl.brokers[1].config.port}")})
    for f in admin.delete_topics(["gone"], operation_timeout=10).values():
        f.result(15)
    controller = c.cluster.controller_ids[0]

    def truncated() -> bool:
        return c.inspect(lambda cl: cl.controllers[controller].replica.log.log_start_offset) > end_before
    # new topics until the controller's log starts past broker 3's end (not
    # Cluster.create_topic: it waits for every broker, broker 3 too, to know the topic)
    for round in range(10):
        fresh = [NewTopic(f"new{round}-{i}", 1, replica_assignment=[[1, 2]]) for i in range(5)]
        for f in admin.create_topics(fresh, operation_timeout=10).values():
            f.result(15)
        if truncated():
            break
    assert truncated(), "the controller's log was not truncated past broker 3's end"
    c.heal(3)

    def caught_up(cl: Any) -> bool:
        b = cl.brokers[3].core
        image = cl.controllers[controller].controller.committed
        return b.ready and set(b.image.topics) == set(image.topics) and all(
            os.path.isdir(os.path.join(b.logs.data_dir, f"{p.topic}-{p.partition}"))
            for p in image.all_partitions() if 3 in p.replicas)
    c.wait_for(caught_up, 30, "broker 3 caught up through the snapshot")
    raft = c.inspect(lambda cl: cl.brokers[3].core.raft.describe())
    assert raft["log_start_offset"] > end_before          # it loaded a snapshot
    assert "gone" not in c.inspect(lambda cl: cl.brokers[3].core.image.topics)
    assert not os.path.exists(os.path.join(c.data_dir, "broker-3", "gone-0"))


@pytest.mark.kafka_cluster(brokers=1, controllers=3, raft_config=CLUSTER_CONFIG,
                           default_replication_factor=1)
def test_a_standby_controller_behind_the_log_start_loads_the_leaders_snapshot(
        kafka_cluster: ClusterThread) -> None:
    c = kafka_cluster
    active = c.active_controller()
    standby = next(n for n in c.cluster.controller_ids if n != active)
    end_before = c.inspect(lambda cl: cl.controllers[standby].replica.log.log_end_offset)
    c.stop(standby)

    def truncated_past_it(cl: Any) -> bool:
        return cl.controllers[active].replica.log.log_start_offset > end_before
    for i in range(60):
        c.create_topic(f"c{i}", 2, 1)
        if c.inspect(truncated_past_it):
            break
    assert c.inspect(truncated_past_it)
    c.start(standby)

    def same(cl: Any) -> bool:
        mine, theirs = cl.controllers[standby], cl.controllers[active]
        return mine.running and mine.replica.high_watermark == theirs.replica.high_watermark \
            and _assignments(mine.controller.committed) == _assignments(theirs.controller.committed)
    c.wait_for(same, 30, "the standby controller caught up")
    raft = c.inspect(lambda cl: cl.controllers[standby].replica.describe())
    # its log now starts past where it ended: it started over at the leader's snapshot
    assert raft["log_start_offset"] > end_before and raft["snapshots"]
