"""Real broker log directories from other projects' repositories ($KPROTO_EXTERNAL/logdirs):
``kproto logdir``, ``kproto dump-log`` (plain, jsonl, --decode-internal) and ``read_arrow`` read
each without reporting damage in Kafka's own files. The facts below were checked by hand: batch
counts and last offsets by walking the batch headers with ``struct`` alone, checkpoint counts
and record counts by summing the batches' count fields, the missing partition folder with
``head``/``ls``, file forms with ``cat -A``."""
from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout

import pytest

import kproto.storage as ks
from kproto.cli.main import main
from kproto.storage.summary import summarize
from kproto.problems import Problems

from external_support import LOGDIRS, logdir

NAMES = sorted(p.name for p in LOGDIRS.iterdir() if (p / "logdir").is_dir())

# per log dir: partitions, topics, non-empty partitions -> (end offset, batches), root files
FACTS = {
    "LDI-POC": {
        "partitions": 54,
        "topics": {"Retry.TestTopicPatient", "TestTopicPatient", "__cluster_metadata",
                   "__consumer_offsets", "batch2.work.notification.SHR_PROD.persistence",
                   "subscription.matching.SHR_PROD.persistence"},
        "data": {("TestTopicPatient", 0): (3, 3), ("__cluster_metadata", 0): (4929, 4814),
                 ("__consumer_offsets", 6): (13, 13)},
        "clean_shutdown": None,
        "checkpoints": {"cleaner-offset-checkpoint": 0, "log-start-offset-checkpoint": 0,
                        "recovery-point-offset-checkpoint": 54,
                        "replication-offset-checkpoint": 54},
        # a real broker's checkpoints still name __consumer_offsets-14, whose folder is gone
        "without_folder": {("recovery-point-offset-checkpoint", "__consumer_offsets", 14),
                           ("replication-offset-checkpoint", "__consumer_offsets", 14)},
        "bootstrap": (3, 3, 19),  # batches, records, metadata.version feature level
        "ignored": {},
        "quorum": (1, 1),  # leader, epoch
        # data records per partition (v2 batch counts summed; control records left out)
        "records": {("TestTopicPatient", 0): 3, ("__cluster_metadata", 0): 4928,
                    ("__consumer_offsets", 6): 13},
    },
    "VolodymyrZee-kafka": {
        "partitions": 54,
        "topics": {"__consumer_offsets", "first_topic", "new_topic"},
        "data": {("__consumer_offsets", 12): (470, 162), ("__consumer_offsets", 17): (3, 3),
                 ("__consumer_offsets", 18): (499, 277), ("__consumer_offsets", 32): (50, 18),
                 ("__consumer_offsets", 33): (3, 3), ("first_topic", 0): (11, 10),
                 ("first_topic", 1): (12, 12), ("first_topic", 2): (18, 16),
                 ("new_topic", 0): (2, 2)},
        "clean_shutdown": {"version": 0, "brokerEpoch": None, "form": "empty"},
        "checkpoints": {"cleaner-offset-checkpoint": 0, "log-start-offset-checkpoint": 0,
                        "recovery-point-offset-checkpoint": 54,
                        "replication-offset-checkpoint": 54},
        "without_folder": set(),
        "bootstrap": None,
        "ignored": {".DS_Store": "not a Kafka file",
                    ".lock": "the broker's directory lock, no content"},
        "quorum": None,
        "records": {("__consumer_offsets", 12): 470, ("__consumer_offsets", 17): 3,
                    ("__consumer_offsets", 18): 499, ("__consumer_offsets", 32): 50,
                    ("__consumer_offsets", 33): 3, ("first_topic", 0): 11,
                    ("first_topic", 1): 12, ("first_topic", 2): 18, ("new_topic", 0): 2},
    },
    "nomanazeem-Kafka-java": {
        "partitions": 54,
        "topics": {"__cluster_metadata", "__consumer_offsets", "demo-topic"},
        "data": {("__cluster_metadata", 0): (2067, 1842), ("__consumer_offsets", 15): (256, 88)},
        "clean_shutdown": {"version": 0, "brokerEpoch": 12},
        "checkpoints": {"cleaner-offset-checkpoint": 0, "log-start-offset-checkpoint": 0,
                        "recovery-point-offset-checkpoint": 53,
                        "replication-offset-checkpoint": 53},
        "without_folder": set(),
        "bootstrap": (3, 8, 29),
        "ignored": {},
        "quorum": (1, 1),
        "records": {("__cluster_metadata", 0): 2066, ("__consumer_offsets", 15): 256},
    },
}


def test_every_external_log_dir_has_facts():
    assert NAMES == sorted(FACTS)


def _run(argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_summary_facts(name):
    facts = FACTS[name]
    root = logdir(name)
    doc = summarize(root)
    assert doc["problems"] == []
    parts = doc["partitions"]
    assert len(parts) == facts["partitions"]
    assert {p["topic"] for p in parts} == facts["topics"]
    assert all(p["damage"] == [] for p in parts)
    data = {(p["topic"], p["partition"]): (p["offsets"][1], p["batches"]) for p in parts
            if p["batches"]}
    assert data == facts["data"]
    assert doc["clean_shutdown"] == facts["clean_shutdown"]
    assert {k: v["count"] for k, v in doc["checkpoints"].items()} == facts["checkpoints"]
    assert {(u["checkpoint"], u["topic"], u["partition"])
            for u in doc["checkpoint_entries_without_folder"]} == facts["without_folder"]
    boot = doc["bootstrap"]
    assert (boot and (boot["batches"], boot["records"], boot["metadata_version"])) == \
        (facts["bootstrap"] or None)
    assert {os.path.relpath(i["path"], root): i["why"] for i in doc["ignored"]} == facts["ignored"]
    meta = [p for p in parts if p["topic"] == "__cluster_metadata"]
    quorum = meta[0]["quorum_state"] if meta else None
    assert (quorum and (quorum["leaderId"], quorum["leaderEpoch"])) == (facts["quorum"] or None)


@pytest.mark.parametrize("name", NAMES)
def test_logdir_cli(name):
    rc, out = _run(["logdir", logdir(name)])
    assert rc == 0 and "DAMAGE" not in out and "PROBLEM" not in out
    for topic in FACTS[name]["topics"]:
        assert topic in out


@pytest.mark.parametrize("mode", ["text", "jsonl", "decode-internal"])
@pytest.mark.parametrize("name", NAMES)
def test_dump_log(name, mode):
    argv = ["dump-log", "--format", "text" if mode == "text" else "jsonl"]
    if mode == "decode-internal":
        argv.append("--decode-internal")
    rc, out = _run(argv + [logdir(name)])
    assert rc == 0
    if mode == "text":
        assert "ERROR" not in out
        return
    lines = [json.loads(x) for x in out.splitlines()]
    assert not [x for x in lines if x.get("type") == "error"]
    ignored = {os.path.basename(x["path"]) for x in lines if x.get("type") == "ignored"}
    assert ignored == {os.path.basename(p) for p in FACTS[name]["ignored"]} | (
        {".DS_Store"} if name == "VolodymyrZee-kafka" else set())  # also one in new_topic-0
    if mode == "jsonl":
        batches = sum(1 for x in lines if x.get("type") == "batch")
        assert batches == sum(b for _, b in FACTS[name]["data"].values()) + \
            (FACTS[name]["bootstrap"] or (0,))[0]
    else:
        decoded = [x for x in lines if "key" in x or "frame_version" in x]
        assert decoded  # internal topics' records went through their schemas
        regular = sum(1 for x in lines if x.get("type") == "batch")
        assert regular == sum(b for (t, _), (_, b) in FACTS[name]["data"].items()
                              if not t.startswith("__"))


@pytest.mark.parametrize("name", NAMES)
def test_read_arrow(name):
    damage = Problems()
    table = ks.read_arrow(logdir(name), problems=damage)
    assert not damage
    counts = {}
    for topic, part in zip(table.column("topic").to_pylist(), table.column("partition").to_pylist()):
        counts[(topic, part)] = counts.get((topic, part), 0) + 1
    assert counts == FACTS[name]["records"]
