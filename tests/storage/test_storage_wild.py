"""What brokers leave in a log dir that nobody tidied: empty checkpoint files, every form of
``.kafka_cleanshutdown``, KRaft's bootstrap.checkpoint, snapshots and quorum-state, checkpoint
entries of partitions that are gone, and files that are not Kafka's. None of it stops a read."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from kproto.errors import DecodeError
from kproto.storage.checkpoints import (ROOT_CHECKPOINTS, CleanShutdown, LeaderEpochCheckpoint,
                                        OffsetCheckpoint, QuorumState)
from kproto.storage.layout import file_kind, log_dir_files, scan_log_dir
from kproto.storage.summary import has_damage, render_text, summarize
from kproto.problems import Problems

from storage_fixtures import LOGDIRS, run_cli

CLEAN = os.path.join(LOGDIRS, "broker1-clean")


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- the files themselves ----------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"", b"0\n", b"0\n0\n"])
def test_checkpoint_without_entries(data):
    # Kafka creates these files empty and reads an empty one (or a lone version line) as empty
    assert OffsetCheckpoint.parse(data).entries == []
    assert LeaderEpochCheckpoint.parse(data).entries == []


@pytest.mark.parametrize("data,form,epoch,version", [
    (b"", "empty", None, 0),
    (b"version: 0\nbrokerEpoch: 42", "text", 42, 0),
    (b'{"broker_epoch":"42","version":"0"}', "json-strings", 42, 0),
    (b'{"version":0,"brokerEpoch":42}', "json", 42, 0),
])
def test_clean_shutdown_every_form_kafka_wrote(data, form, epoch, version):
    cs = CleanShutdown.parse(data)
    assert (cs.form, cs.broker_epoch, cs.version) == (form, epoch, version)
    assert cs.encode() == data
    doc = cs.to_json()
    assert doc["brokerEpoch"] == epoch and (form == "json") == ("form" not in doc)


def test_clean_shutdown_json_strings_order_is_java_hashmap_order():
    # a java.util.HashMap iterates broker_epoch (bucket 11 of 16) before version (bucket 13)
    assert CleanShutdown(7, 0, "json-strings").encode() == b'{"broker_epoch":"7","version":"0"}'


def test_quorum_state():
    data = (b'{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
            b'"currentVoters":[{"voterId":1}],"data_version":0}')
    q = QuorumState.parse(data)
    assert (q.leader_id, q.leader_epoch) == (1, 3) and q.to_json()["currentVoters"] == [{"voterId": 1}]
    with pytest.raises(DecodeError):
        QuorumState.parse(b'{"leaderId": 1}')
    with pytest.raises(DecodeError):  # voters as bare numbers: not what Kafka writes
        QuorumState.parse(b'{"leaderEpoch": 1, "currentVoters": [1]}')


def test_file_kinds_of_kraft_and_lock_files():
    assert file_kind("bootstrap.checkpoint") == ("metadata-snapshot", 0)
    assert file_kind("00000000000000000120-0000000003.checkpoint") == ("metadata-snapshot", 120)
    assert file_kind("quorum-state") == ("quorum-state", None)
    assert file_kind(".lock") == ("lock", None)
    assert file_kind(".DS_Store") == ("unknown", None)


# -- a log dir as brokers leave it --------------------------------------------------------------

@pytest.fixture()
def untidy(tmp_path):
    """A copy of two fixture partitions plus what real broker dirs hold around them."""
    root = tmp_path / "kafka-logs"
    root.mkdir()
    for name in ("meta.properties",):
        shutil.copy(os.path.join(CLEAN, name), root)
    for part in ("orders-0", "__consumer_offsets-0", "__cluster_metadata-0"):
        shutil.copytree(os.path.join(CLEAN, part), root / part)
    for name in ROOT_CHECKPOINTS:
        (root / name).write_bytes(b"")  # as Kafka creates them
    (root / "replication-offset-checkpoint").write_bytes(b"0\n2\norders 0 5\ngone 3 17\n")
    (root / ".kafka_cleanshutdown").write_bytes(b"")  # a broker before KIP-966
    (root / ".lock").write_bytes(b"")
    (root / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / ".idea").mkdir()
    (root / ".idea" / "workspace.xml").write_text("<project/>")
    (root / "orders-0" / "leader-epoch-checkpoint").write_bytes(b"")
    (root / "orders-0" / ".DS_Store").write_bytes(b"x")
    metadata_log = os.path.join(CLEAN, "__cluster_metadata-0", "00000000000000000000.log")
    shutil.copy(metadata_log, root / "bootstrap.checkpoint")
    shutil.copy(metadata_log, root / "__cluster_metadata-0" / "00000000000000000020-0000000001.checkpoint")
    (root / "__cluster_metadata-0" / "quorum-state").write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1}],"data_version":0}')
    return str(root)


def test_layout_knows_kafkas_files_and_ignores_the_rest(untidy):
    layout = scan_log_dir(untidy)
    assert layout.bootstrap_checkpoint and layout.lock and layout.clean_shutdown
    meta = next(p for p in layout.partitions if p.topic == "__cluster_metadata")
    assert meta.quorum_state and [(o, e) for o, e, _ in meta.metadata_snapshots] == [(20, 1)]
    ignored = {os.path.relpath(p, untidy): why for p, why in layout.ignored()}
    assert ignored == {".DS_Store": "not a Kafka file", ".idea": "not a Kafka folder",
                       ".lock": "the broker's directory lock, no content"}
    listed = {os.path.relpath(p, untidy): why for p, why in log_dir_files(untidy)}
    assert listed["orders-0/.DS_Store"] == "not a Kafka file"
    assert listed["bootstrap.checkpoint"] is None and listed["cleaner-offset-checkpoint"] is None


def test_summary_reports_no_damage_and_mentions_everything(untidy):
    doc = summarize(untidy)
    assert not has_damage(doc), doc["problems"]
    assert doc["clean_shutdown"] == {"version": 0, "brokerEpoch": None, "form": "empty"}
    assert doc["checkpoints"]["cleaner-offset-checkpoint"]["count"] == 0
    assert doc["checkpoint_entries_without_folder"] == [
        {"checkpoint": "replication-offset-checkpoint", "topic": "gone", "partition": 3,
         "offset": 17}]
    assert doc["bootstrap"]["batches"] > 0 and doc["bootstrap"]["metadata_version"] is not None
    meta = next(p for p in doc["partitions"] if p["topic"] == "__cluster_metadata")
    assert meta["quorum_state"]["leaderEpoch"] == 1
    assert meta["metadata_snapshots"][0]["records"] == doc["bootstrap"]["records"]
    text = render_text(doc)
    for words in ("clean shutdown: yes (empty file", "1 without a partition folder: gone-3",
                  "bootstrap.checkpoint:", "quorum-state: leader 1", "ignored: .DS_Store",
                  "ignored: .idea", "ignored: .lock"):
        assert words in text, words


def test_logdir_cli_exit_codes(untidy):
    rc, out = run_cli(["logdir", untidy])
    assert rc == 0 and "PROBLEM" not in out and "DAMAGE" not in out
    with open(os.path.join(untidy, ".kafka_cleanshutdown"), "w") as f:
        f.write("shutdown at noon")  # a form Kafka never wrote: reported, the rest still read
    rc, out = run_cli(["logdir", untidy])
    assert rc == 1 and "PROBLEM file: .kafka_cleanshutdown" in out
    assert "orders-0" in out and "clean shutdown: no" in out
    rc, out = run_cli(["logdir", "--format", "json", untidy])
    assert rc == 1 and json.loads(out)["problems"][0]["kind"] == "file"


def test_dump_log_of_the_dir_reports_and_goes_on(untidy):
    rc, out = run_cli(["dump-log", "--format", "jsonl", untidy])
    lines = _jsonl(out)
    assert rc == 0 and not [x for x in lines if x.get("type") == "error"]
    ignored = {os.path.basename(x["path"]) for x in lines if x.get("type") == "ignored"}
    assert ignored == {".DS_Store", ".idea", ".lock"}
    files = [os.path.relpath(x["path"], untidy) for x in lines if x.get("type") == "file"]
    assert "bootstrap.checkpoint" in files and "cleaner-offset-checkpoint" in files
    assert "__cluster_metadata-0/quorum-state" in files
    with open(os.path.join(untidy, "log-start-offset-checkpoint"), "w") as f:
        f.write("0\n3\nx 0 0\n")  # count says 3, one entry
    rc, out = run_cli(["dump-log", "--format", "jsonl", untidy])
    errors = [x for x in _jsonl(out) if x.get("type") == "error"]
    assert rc == 1 and len(errors) == 1 and errors[0]["path"].endswith("log-start-offset-checkpoint")
    assert "expected 3 entries" in errors[0]["error"]
    assert any(x.get("type") == "file" and x["path"].endswith("orders-0/00000000000000000000.log")
               for x in _jsonl(out))  # what follows the bad file is still dumped


def test_dump_log_decode_internal_on_a_dir_with_regular_topics(untidy):
    rc, out = run_cli(["dump-log", "--format", "jsonl", "--decode-internal", untidy])
    assert rc == 0
    lines = _jsonl(out)
    sections: dict[str, list] = {}
    current = None
    for x in lines:
        if x.get("type") == "file":
            current = os.path.relpath(x["path"], untidy)
            sections[current] = []
        elif current:
            sections[current].append(x)
    orders = sections["orders-0/00000000000000000000.log"]
    assert orders and {x["type"] for x in orders} >= {"batch", "record", "summary"}
    offsets = sections["__consumer_offsets-0/00000000000000000000.log"]
    assert offsets and all("key" in x or x["is_control"] for x in offsets)
    boot = sections["bootstrap.checkpoint"]
    assert boot and all("frame_version" in x or x["is_control"] for x in boot)
    # one regular segment given directly: dumped as batches, not refused
    rc, out = run_cli(["dump-log", "--format", "jsonl", "--decode-internal",
                    os.path.join(untidy, "orders-0", "00000000000000000000.log")])
    assert rc == 0 and _jsonl(out)[0]["type"] == "batch"


def test_read_arrow_reports_no_damage(untidy):
    import kproto.storage as ks

    damage = Problems()
    table = ks.read_arrow(untidy, problems=damage)
    assert not damage and table.num_rows > 0
