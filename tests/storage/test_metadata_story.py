"""The story of a ``__cluster_metadata`` log (kproto.storage.metadata_story) and ``kproto logdir``
telling it: the log is written by kproto's own KRaft controller (one voter, sans-I/O, fake
clock) as brokers register, a topic is created, an ISR shrinks and grows back, a broker misses
its heartbeats and is fenced, a topic is deleted, the controller restarts; then the story read
from disk must say what happened. Also Kafka's own log of the shared fixtures."""
from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kproto.broker.cluster.controller import ControllerConfig
from kproto.broker.cluster.controller_node import ControllerCore
from kproto.storage.metadata_image import MetadataImage
from kproto.broker.cluster.raft import RaftConfig
from kproto.broker.timer import FakeClock
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.problems import Problems
from kproto.records.batch import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey
from kproto.storage.metadata_story import MetadataStory, read_metadata_story
from kproto.storage.summary import has_damage, summarize

from storage_fixtures import LOGDIRS, load_expected, run_cli

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
RAFT = RaftConfig(election_timeout_ms=250, fetch_timeout_ms=500, election_backoff_max_ms=250)
SESSION_MS = 3000


class _NoNetwork:
    def send(self, *args: Any) -> None:
        raise AssertionError("a single voter sends nothing")


class Controller:
    """A single-voter controller quorum writing ``data_dir/__cluster_metadata-0``."""

    def __init__(self, data_dir: str, clock: FakeClock) -> None:
        self.clock = clock
        self.core = ControllerCore(1, [1], data_dir, cluster_id=CLUSTER_ID, transport=_NoNetwork(),
                                   raft_config=RAFT, clock=clock,
                                   controller_config=ControllerConfig(
                                       broker_session_timeout_ms=SESSION_MS))
        for _ in range(200):   # the only voter leads once its LeaderChange is committed
            if self.core.controller.is_active:
                break
            self.tick(10)
        assert self.core.controller.is_active
        self.epochs: dict[int, int] = {}

    @property
    def image(self) -> MetadataImage:
        return self.core.controller.image

    def tick(self, ms: int) -> None:
        self.clock.advance(ms)
        self.core.advance_clock()

    def call(self, api: int, version: int, **fields: Any) -> Any:
        out: list[Any] = []
        self.core.controller.handle(api, version, request_codec(api).cls(**fields), out.append)
        for _ in range(100):   # answered once the records are committed
            if out:
                return out[0]
            self.tick(1)
        raise AssertionError(f"no answer to API {api}")

    def register(self, broker: int) -> None:
        R = request_codec(ApiKey.BROKER_REGISTRATION).cls
        r = self.call(ApiKey.BROKER_REGISTRATION, 3, broker_id=broker, cluster_id=CLUSTER_ID,
                      incarnation_id=Uuid(bytes([broker] * 16)),
                      listeners=[R.Listener(name="PLAINTEXT", host=f"b{broker}", port=9092 + broker,
                                            security_protocol=0)],
                      features=[R.Feature(name="metadata.version", min_supported_version=1,
                                          max_supported_version=21)],
                      rack=f"r{broker}", log_dirs=[Uuid(bytes([100 + broker] * 16))])
        assert r.error_code == 0, r
        self.epochs[broker] = r.broker_epoch

    def heartbeat(self, broker: int, **flags: Any) -> Any:
        r = self.call(ApiKey.BROKER_HEARTBEAT, 1, broker_id=broker,
                      broker_epoch=self.epochs[broker],
                      current_metadata_offset=self.core.replica.high_watermark, **flags)
        assert r.error_code == 0, r
        return r

    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        Q = request_codec(ApiKey.CREATE_TOPICS).cls
        r = self.call(ApiKey.CREATE_TOPICS, 7, timeout_ms=1000, validate_only=False,
                      topics=[Q.CreatableTopic(name=name, num_partitions=partitions,
                                               replication_factor=rf, assignments=[],
                                               configs=[Q.CreatableTopicConfig(
                                                   name="retention.ms", value="60000")])])
        assert r.topics[0].error_code == 0, r

    def delete_topic(self, name: str) -> None:
        D = request_codec(ApiKey.DELETE_TOPICS).cls
        r = self.call(ApiKey.DELETE_TOPICS, 6, timeout_ms=0,
                      topics=[D.DeleteTopicState(name=name, topic_id=Uuid.ZERO)])
        assert r.responses[0].error_code == 0, r

    def alter_isr(self, topic: str, partition: int, isr: list[int]) -> None:
        p = self.image.partition(topic, partition)
        A = request_codec(ApiKey.ALTER_PARTITION).cls
        pd = A.PartitionData(partition_index=partition, leader_epoch=p.leader_epoch,
                             partition_epoch=p.partition_epoch, leader_recovery_state=0,
                             new_isr=isr, new_isr_with_epochs=[
                                 A.BrokerState(broker_id=b, broker_epoch=-1) for b in isr])
        r = self.call(ApiKey.ALTER_PARTITION, 3, broker_id=p.leader,
                      broker_epoch=self.epochs[p.leader],
                      topics=[A.TopicData(topic_name=topic, topic_id=p.topic_id, partitions=[pd])])
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0, r

    def run(self, ms: int, heartbeats: tuple[int, ...]) -> None:
        for _ in range(ms // 500):
            self.tick(500)
            for b in heartbeats:
                self.heartbeat(b)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> dict[str, Any]:
    """Run the scenario once; what the tests compare the story with."""
    data_dir = str(tmp_path_factory.mktemp("controller"))
    clock = FakeClock(1_700_000_000_000)
    c = Controller(data_dir, clock)
    for b in (1, 2, 3):
        c.register(b)
    for b in (1, 2, 3):
        assert c.heartbeat(b).is_fenced is False
    c.create_topic("orders", partitions=3, rf=3)
    c.create_topic("scratch", partitions=1, rf=2)
    before = {i: p for i, p in c.image.topics["orders"].partitions.items()}
    # broker 1 will stop heartbeating: fenced after its session, its leaderships move
    victim = 1
    alive = (2, 3)
    # first orders-0's leader drops another follower from the ISR, then takes it back
    lead0 = before[0].leader
    dropped = next(r for r in before[0].replicas if r not in (lead0, victim))
    c.alter_isr("orders", 0, [r for r in before[0].isr if r != dropped])
    c.alter_isr("orders", 0, list(before[0].isr))
    c.run(SESSION_MS + 1500, heartbeats=alive)
    assert c.image.brokers[victim].fenced
    c.delete_topic("scratch")
    c.core.close()
    # the controller restarts on the same data dir: a second quorum epoch
    c = Controller(data_dir, clock)
    c.epochs = {b: c.image.brokers[b].epoch for b in (1, 2, 3)}
    c.heartbeat(3, want_shut_down=True)
    final = c.image.copy()
    c.core.close()
    return {"dir": data_dir, "before": before, "victim": victim, "dropped": dropped,
            "final": final}


def _of(story: MetadataStory, kind: str) -> list[dict[str, Any]]:
    return [e for e in story.events if e["kind"] == kind]


def test_story_of_a_controller_log(cluster) -> None:
    problems = Problems()
    story = read_metadata_story(cluster["dir"], problems)
    assert not problems, problems.to_json()
    final, victim = cluster["final"], cluster["victim"]

    # the quorum: one voter, elected at start and again after the restart
    leaders = _of(story, "quorum_leader")
    assert [(e["leader"], e["voters"]) for e in leaders] == [(1, [1]), (1, [1])]
    assert leaders[0]["epoch"] < leaders[1]["epoch"] == story.quorum[1]
    assert _of(story, "feature")[0]["name"] == "metadata.version"

    # brokers: registered (fenced at first) with their listener and rack, then unfenced
    regs = _of(story, "broker_registered")
    assert [(e["broker"], e["listeners"], e["rack"], e["fenced"]) for e in regs] == [
        (b, [f"PLAINTEXT://b{b}:{9092 + b}"], f"r{b}", True) for b in (1, 2, 3)]
    assert all(e["broker_epoch"] == e["offset"] for e in regs)  # Kafka's broker epoch
    unfenced = _of(story, "broker_unfenced")
    assert [e["broker"] for e in unfenced] == [1, 2, 3]
    fenced = _of(story, "broker_fenced")
    assert [(e["broker"], e["broker_epoch"]) for e in fenced] == [(victim, regs[0]["broker_epoch"])]
    assert fenced[0]["offset"] > max(e["offset"] for e in unfenced)
    shutdown = _of(story, "broker_controlled_shutdown")
    assert [e["broker"] for e in shutdown] == [3]
    assert shutdown[0]["epoch"] == leaders[1]["epoch"]

    # topics: created with their partition count and replication factor; scratch deleted
    created = _of(story, "topic_created")
    assert [(e["topic"], e["partitions"], e["replication_factor"]) for e in created] == [
        ("orders", 3, 3), ("scratch", 1, 2)]
    assert [e["topic"] for e in _of(story, "topic_deleted")] == ["scratch"]
    assert created[0]["topic_id"] == str(final.topics["orders"].topic_id)
    assert [(e["resource"], e["name"], e["value"]) for e in _of(story, "config")
            if e["resource_type"] == "topic"] == [
        ("orders", "retention.ms", "60000"), ("scratch", "retention.ms", "60000")]


def test_story_partition_leaders_and_isr(cluster) -> None:
    story = read_metadata_story(cluster["dir"])
    before, victim, dropped = cluster["before"], cluster["victim"], cluster["dropped"]
    changes = [e for e in _of(story, "partition_changed") if e["topic"] == "orders"]
    # orders-0: the ISR shrink and expansion asked for by its leader, no election
    p0 = [e for e in changes if e["partition"] == 0]
    assert (p0[0]["isr_removed"], p0[0]["isr_added"], p0[0]["election"]) == ([dropped], [], False)
    assert (p0[1]["isr_removed"], p0[1]["isr_added"], p0[1]["election"]) == ([], [dropped], False)
    assert p0[1]["isr"] == list(before[0].isr)
    # the fencing: every partition drops the victim from its ISR; those it led elect another
    fence_offset = _of(story, "broker_fenced")[0]["offset"]
    for i, old in before.items():
        at_fence = [e for e in changes if e["partition"] == i and
                    e["offset"] < fence_offset and victim in e["isr_removed"]]
        assert len(at_fence) == 1, (i, changes)
        e = at_fence[0]
        assert victim not in e["isr"]
        if old.leader == victim:
            assert e["election"] and e["previous"]["leader"] == victim
            assert e["leader"] != victim and e["leader_epoch"] == old.leader_epoch + 1
        else:
            assert not e["election"] and e["leader"] == old.leader
    assert any(old.leader == victim for old in before.values())

    # the end state read from disk is the controller's own
    final = cluster["final"]
    parts = story.partitions()
    assert set(parts) == {f"orders-{i}" for i in before}
    for i in before:
        p = final.partition("orders", i)
        s = parts[f"orders-{i}"]
        assert (s["leader"], s["leader_epoch"], s["isr"], s["replicas"]) == (
            p.leader, p.leader_epoch, list(p.isr), list(p.replicas))
        assert s["elections"] == p.leader_epoch - before[i].leader_epoch
    assert parts["orders-0"]["isr_shrinks"] >= 2 and parts["orders-0"]["isr_expansions"] == 1
    brokers = story.brokers()
    assert {i: (b["fenced"], b["in_controlled_shutdown"]) for i, b in brokers.items()} == {
        i: (b.fenced, b.in_controlled_shutdown) for i, b in final.brokers.items()}
    assert brokers[victim]["fenced"] and brokers[3]["in_controlled_shutdown"]


def test_logdir_cli_tells_the_story(cluster) -> None:
    rc, out = run_cli(["logdir", "--no-segments", cluster["dir"]])
    assert rc == 0, out
    victim = cluster["victim"]
    assert "metadata story: offsets [0, " in out
    assert "2 quorum elections (leader 1, epoch" in out
    assert "brokers: 3 registrations, 1 fencings, 3 unfencings, 1 controlled shutdowns" in out
    assert f"broker {victim} epoch" in out and "FENCED" in out
    assert "topics: 2 created, 1 deleted; 3 partitions" in out
    assert "timeline:" not in out
    final = cluster["final"]
    for i in range(3):
        p = final.partition("orders", i)
        assert f"orders-{i} leader {p.leader} (epoch {p.leader_epoch}) isr " \
               f"[{','.join(map(str, p.isr))}]" in out

    rc, full = run_cli(["logdir", "--no-segments", "--metadata-timeline", cluster["dir"]])
    assert rc == 0
    lines = full.splitlines()
    assert "  timeline:" in lines
    timeline = lines[lines.index("  timeline:") + 1:]
    assert sum("quorum leader 1 elected" in line for line in timeline) == 2
    assert sum(f"broker {victim} fenced" in line for line in timeline) == 1
    assert any("topic scratch deleted" in line for line in timeline)
    assert any(f"leader {victim} -> " in line for line in timeline)
    assert any(f"-{victim}" in line and "isr [" in line for line in timeline)

    rc, out = run_cli(["logdir", "--format", "json", cluster["dir"]])
    assert rc == 0
    doc = json.loads(out)
    (part,) = doc["partitions"]
    m = part["metadata_story"]
    assert m["events"]["broker_fenced"] == 1 and m["brokers"][str(victim)]["fenced"] is True
    assert [e["kind"] for e in m["timeline"]] == \
        [e["kind"] for e in read_metadata_story(cluster["dir"]).events]


def test_kafka_written_metadata_log() -> None:
    """Kafka's own ``__cluster_metadata`` of the shared fixtures, checked against its decoded
    dump (the records the expected files say are there)."""
    rel = os.path.join("broker1-clean", "__cluster_metadata-0", "00000000000000000000.log.decoded.jsonl")
    decoded = load_expected(rel)
    path = os.path.join(LOGDIRS, "broker1-clean")
    problems = Problems()
    story = read_metadata_story(path, problems)
    assert not problems
    want = [r for r in decoded if not r["is_control"]]
    regs = [r["data"] for r in want if r["type"] == "REGISTER_BROKER_RECORD"]
    assert [(e["broker"], e["broker_epoch"]) for e in _of(story, "broker_registered")] == \
        [(r["brokerId"], r["brokerEpoch"]) for r in regs]
    assert [e["offset"] for e in _of(story, "quorum_leader")] == \
        [r["offset"] for r in decoded if r["is_control"]]
    topics = {r["data"]["topicId"]: r["data"]["name"] for r in want if r["type"] == "TOPIC_RECORD"}
    parts = {f"{topics[r['data']['topicId']]}-{r['data']['partitionId']}": r["data"]
             for r in want if r["type"] == "PARTITION_RECORD"}
    assert {k: (v["leader"], v["isr"]) for k, v in story.partitions().items()} == \
        {k: (v["leader"], v["isr"]) for k, v in parts.items()}
    # this log's PartitionChangeRecords name a topic id it never created: replay skips them
    unknown = [r for r in want if r["type"] == "PARTITION_CHANGE_RECORD"
               and r["data"]["topicId"] not in topics]
    assert [e["offset"] for e in _of(story, "partition_change_ignored")] == \
        [r["offset"] for r in unknown] and unknown
    assert sum(story.records.values()) == len(decoded)

    doc = summarize(path)
    (meta,) = [p for p in doc["partitions"] if p["topic"] == "__cluster_metadata"]
    assert meta["metadata_story"]["quorum_leader"] == 1
    assert not has_damage(doc)
    rc, out = run_cli(["logdir", "--no-segments", path])
    assert "brokers: 3 registrations, 0 fencings, 3 unfencings" in out
    assert f"{len(unknown)} changes of partitions that do not exist" in out


def test_undecodable_record_is_reported_not_raised() -> None:
    """A record value that is no metadata frame is a ``record`` problem; the rest is told."""
    from kproto.storage.metadata_image import encode_metadata_record
    from kproto.codecs import message

    topic = message("TopicRecord").cls(name="t", topic_id=Uuid(bytes([7] * 16)))
    b = RecordBatchBuilder(base_offset=5, partition_leader_epoch=3)
    b.append(10, None, b"\x01\x7f\x00garbage")
    b.append(11, None, encode_metadata_record(topic, 0))
    batch = RecordBatch(b.build())
    story, problems = MetadataStory(), Problems()
    story.add_batch(batch, problems)
    assert [p.kind for p in problems] == ["record"] and "offset 5" in problems[0].reason
    assert [(e["offset"], e["epoch"], e["kind"], e["topic"]) for e in story.events] == [
        (6, 3, "topic_created", "t")]


def test_story_starts_from_a_snapshot_when_the_log_was_cut(cluster, tmp_path) -> None:
    """A log whose records below N were replaced by a snapshot at N: the state comes from the
    snapshot, the events from the records left, and the end is the same."""
    from kproto.storage.partition import scan_batches

    src = os.path.join(cluster["dir"], "__cluster_metadata-0")
    with open(os.path.join(src, "00000000000000000000.log"), "rb") as f:
        data = f.read()
    full = read_metadata_story(cluster["dir"])
    fenced_at = _of(full, "broker_fenced")[0]["offset"]
    # cut at the first batch boundary after the topics were created (before the fencing)
    at = next(b for b in scan_batches(data)
              if b.base_offset > _of(full, "topic_created")[-1]["offset"])
    cut = at.base_offset
    assert cut < fenced_at
    head, tail = data[:at.position], data[at.position:]
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    (part / f"{cut:020d}.log").write_bytes(tail)
    (part / f"{cut:020d}-{1:010d}.checkpoint").write_bytes(head)
    problems = Problems()
    story = read_metadata_story(str(part), problems)
    assert not problems, problems.to_json()
    assert story.snapshot == cut and story.offsets[0] == cut
    assert [e for e in full.events if e["offset"] >= cut] == story.events
    assert story.partitions().keys() == full.partitions().keys()
    assert story.brokers() == full.brokers()
    assert _of(story, "topic_created") == []
    rc, out = run_cli(["logdir", "--no-segments", str(part)])
    assert f"metadata story: offsets [{cut}, " in out and f"after the snapshot at {cut}" in out


def test_controllers_registered_and_unregistered() -> None:
    """RegisterControllerRecord and Kafka 4.4's UnregisterControllerRecord (type 29) are events
    of the story, told in words by the summary."""
    from kproto.codecs import message
    from kproto.storage.metadata_image import encode_metadata_record
    from kproto.storage.summary import describe_metadata_event

    reg = message("RegisterControllerRecord").cls
    b = RecordBatchBuilder(base_offset=0, partition_leader_epoch=1)
    b.append(10, None, encode_metadata_record(reg(
        controller_id=3000, incarnation_id=Uuid(bytes([9] * 16)),
        end_points=[reg.ControllerEndpoint(name="CONTROLLER", host="c1", port=9093)]), 0))
    b.append(11, None, encode_metadata_record(message("UnregisterControllerRecord").cls(controller_id=3000), 0))
    story, problems = MetadataStory(), Problems()
    story.add_batch(RecordBatch(b.build()), problems)
    assert not problems
    assert [(e["offset"], e["kind"], e["controller"]) for e in story.events] == [
        (0, "controller_registered", 3000), (1, "controller_unregistered", 3000)]
    assert story.events[0]["listeners"] == ["CONTROLLER://c1:9093"]
    assert [describe_metadata_event(e) for e in story.events] == [
        f"controller 3000 registered, incarnation {Uuid(bytes([9] * 16))}, CONTROLLER://c1:9093",
        "controller 3000 unregistered"]
