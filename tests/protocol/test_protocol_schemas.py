"""The committed schemas are exactly what the import tool makes of the reference specs of every
release they come from (Kafka 3.9, 4.3.1 and 4.4.0, merged)."""
from __future__ import annotations

import filecmp
import subprocess
import sys

import kproto
from kproto.codecs import KAFKA_VERSION, RELEASES, api_keys
from protocol_support import REPO, release_folder


def test_import_tool_regenerates_the_committed_schemas(tmp_path):
    assert RELEASES[-1] == KAFKA_VERSION
    out = subprocess.run([sys.executable, str(REPO / "tools" / "import_schemas.py"),
                          *(str(release_folder(r)) for r in RELEASES),
                          "--dest", str(tmp_path), "--stub", str(tmp_path / "messages.pyi")],
                         capture_output=True, text=True, check=True).stdout
    assert "95 request, 95 response" in out
    # 4.4.0 defines every version 4.3.1 does (and 16 more): 4.3.1 stands for none
    assert "121 from 3.9, 0 from 4.3.1, 755 from 4.4.0" in out
    committed = REPO / "kproto" / "schemas"
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    assert generated, "the tool wrote nothing"
    mismatch = [str(p) for p in generated if not filecmp.cmp(tmp_path / p, committed / p, shallow=False)]
    assert mismatch == []
    stale = sorted(str(p.relative_to(committed)) for p in committed.rglob("*.py")
                   if p.parent != committed and not (tmp_path / p.relative_to(committed)).exists())
    assert stale == []
    assert filecmp.cmp(tmp_path / "messages.pyi", REPO / "kproto" / "messages.pyi", shallow=False)


def test_release_names_from_folders_or_given(tmp_path):
    # PATH=NAME names a release whatever its folder is called
    out = subprocess.run([sys.executable, str(REPO / "tools" / "import_schemas.py"),
                          f"{release_folder('3.9')}=3.9.x", "--dest", str(tmp_path / "s"),
                          "--stub", str(tmp_path / "m.pyi")],
                         capture_output=True, text=True, check=True).stdout
    assert "from 3.9.x" in out
    text = (tmp_path / "s" / "message" / "produce_request.py").read_text()
    assert "releases={'0-11': '3.9.x'}" in text and "Kafka 3.9.x specs" in text


def test_every_api_key_from_0_to_94():
    keys = api_keys()
    assert sorted(keys) == list(range(95))
    for key in keys:
        req, resp = kproto.request(key), kproto.response(key)
        assert req.valid_versions == resp.valid_versions and req.valid_versions.start == 0
        assert req.cls.API_KEY == key
        assert [req.release(v) for v in req.valid_versions] == [resp.release(v) for v in resp.valid_versions]
    assert keys[74] == "ListConfigResources"
    assert [keys[k] for k in range(88, 95)] == [
        "StreamsGroupHeartbeat", "StreamsGroupDescribe", "DescribeShareGroupOffsets",
        "AlterShareGroupOffsets", "DeleteShareGroupOffsets", "StreamsGroupTopologyDescriptionUpdate",
        "UnregisterController"]


def test_provenance():
    produce = kproto.request(0)
    assert produce.valid_versions == range(0, 14)
    assert [produce.release(v) for v in (0, 2, 3, 13)] == ["3.9", "3.9", "4.4.0", "4.4.0"]
    assert produce.releases == [(range(0, 3), "3.9"), (range(3, 14), "4.4.0")]
    assert produce.schema.releases == {"0-2": "3.9", "3-13": "4.4.0"}
    for key in (4, 5, 6, 7):           # ZooKeeper-era: 4.x has no versions, 3.9's stand
        assert {kproto.request(key).release(v) for v in kproto.request(key).valid_versions} == {"3.9"}
    assert kproto.request(4).valid_versions == range(0, 8)
    assert kproto.request(52).release(0) == "4.4.0"      # Vote v0: all define it, the newest stands
    assert kproto.message("RequestHeader").releases == [(range(0, 1), "3.9"), (range(1, 3), "4.4.0")]
    assert kproto.request(18).valid_versions == range(6)     # ApiVersions v5: 4.4.0's
    assert kproto.message("UnregisterControllerRecord").api_key == 29
    assert kproto.message("AbortedTxn").releases == [(range(0, 1), "4.4.0")]
    # a renamed message answers to its old name too
    assert kproto.message("ListClientMetricsResourcesRequest") is kproto.request(74)
    assert kproto.request(74).aliases == ("ListClientMetricsResourcesRequest",)
    import pytest
    with pytest.raises(kproto.UnsupportedVersionError):
        produce.release(14)


def test_internal_topic_schemas_are_there():
    for name in ["OffsetCommitKey", "OffsetCommitValue", "GroupMetadataValue", "TransactionLogValue",
                 "PartitionChangeRecord", "RegisterBrokerRecord", "TopicRecord", "LeaderChangeMessage",
                 "SnapshotHeaderRecord", "VotersRecord", "KRaftVersionRecord", "ShareSnapshotValue",
                 "RemoteLogSegmentMetadataRecord", "ProducerSnapshot"]:
        assert kproto.message(name).valid_versions
    assert kproto.codecs.metadata_record(2).name == "TopicRecord"
    assert kproto.codecs.metadata_record(0).name == "RegisterBrokerRecord"   # not storage's type 0
    key, value = kproto.codecs.coordinator_record("group-coordinator", 2)
    assert (key.name, value.name, key.valid_versions) == ("GroupMetadataKey", "GroupMetadataValue", range(1))
    assert [c.name for c in kproto.codecs.coordinator_record("group-coordinator", 0)] == [
        "LegacyOffsetCommitKey", "LegacyOffsetCommitValue"]
    assert [c.name for c in kproto.codecs.coordinator_record("group-coordinator", 9)] == [
        "ShareGroupPartitionMetadataKey", "ShareGroupPartitionMetadataValue"]   # 3.9 only
    assert [c.name for c in kproto.codecs.coordinator_record("transaction-coordinator", 0)] == [
        "TransactionLogKey", "TransactionLogValue"]
    assert [c.name for c in kproto.codecs.coordinator_record("share-coordinator", 1)] == [
        "ShareUpdateKey", "ShareUpdateValue"]


def test_cli_schemas_shows_the_release_of_each_version(capsys):
    import json

    from kproto.cli.main import main

    assert main(["schemas"]) == 0
    text = capsys.readouterr().out
    produce = next(line for line in text.splitlines() if line.split()[:2] == ["0", "Produce"])
    assert produce.split()[2:5] == ["0-13", "9+", "0-2"] and "0-2 3.9, 3-13 4.4.0" in produce
    leader = next(line for line in text.splitlines() if line.split()[:2] == ["4", "LeaderAndIsr"])
    assert "0-7 3.9" in leader and "4.4.0" not in leader
    # the longest API name keeps the columns aligned
    newest = next(line for line in text.splitlines() if line.split()[:2] == ["93", "StreamsGroupTopologyDescriptionUpdate"])
    assert newest.index(" 0 ") == produce.index(" 0-13 ") and newest.split()[2:] == ["0", "0+", "0", "4.4.0", "broker"]
    assert "95 API keys (Kafka 3.9, 4.3.1 and 4.4.0 schemas" in text
    assert main(["schemas", "--json"]) == 0
    rows = {r["api_key"]: r for r in json.loads(capsys.readouterr().out)}
    assert sorted(rows) == list(range(95))
    assert rows[1]["releases"] == [{"versions": [0, 3], "release": "3.9"},
                                   {"versions": [4, 18], "release": "4.4.0"}]
    assert rows[74]["name"] == "ListConfigResources" and rows[74]["aliases"] == ["ListClientMetricsResources"]
    for r in rows.values():     # the runs cover the versions, in order, without overlap
        covered = [v for run in r["releases"] for v in range(run["versions"][0], run["versions"][1] + 1)]
        assert covered == list(range(r["versions"][0], r["versions"][1] + 1))
    assert main(["schemas", "--all", "--json"]) == 0
    every = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert every["RequestHeader"]["releases"] == [{"versions": [0, 0], "release": "3.9"},
                                                  {"versions": [1, 2], "release": "4.4.0"}]
    assert every["GroupMetadataKey"]["kind"] == "coordinator-key"
