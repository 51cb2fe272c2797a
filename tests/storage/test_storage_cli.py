"""``kproto logdir`` and the storage file kinds of ``kproto dump-log``."""
from __future__ import annotations

import json
import os

import pytest

from kproto.cli.main import main

from storage_fixtures import (LOGDIRS, expected_files, load_expected, partition_dirs, run_cli,
                              source_of)

NON_LOG = [p for p in expected_files("**/*.json*")
           if ".log." not in p and not p.endswith("partition.json")]


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("rel", NON_LOG)
def test_dump_log_storage_files(rel):
    rc, out = run_cli(["dump-log", "--format", "jsonl", source_of(rel)])
    assert rc == 0
    assert _jsonl(out) == load_expected(rel)


@pytest.mark.parametrize("rel", expected_files("*/*/*.log.decoded.jsonl"))
def test_dump_log_decode_internal(rel):
    rc, out = run_cli(["dump-log", "--format", "jsonl", "--decode-internal", source_of(rel)])
    assert rc == 0
    assert _jsonl(out) == load_expected(rel)


def test_dump_log_partition_folder_and_text():
    part = os.path.join(LOGDIRS, "broker1-clean", "payments-0")
    rc, out = run_cli(["dump-log", "--format", "jsonl", part])
    files = [x["path"] for x in _jsonl(out) if x.get("type") == "file"]
    assert sorted(files) == sorted(os.path.join(os.path.normpath(part), n) for n in os.listdir(part))
    rc, out = run_cli(["dump-log", "--format", "text", os.path.join(part, "leader-epoch-checkpoint")])
    assert rc == 0 and '"start_offset": 0' in out


@pytest.mark.parametrize("broker", sorted(os.listdir(LOGDIRS)))
def test_logdir_summary(broker):
    rc, out = run_cli(["logdir", "--format", "json", os.path.join(LOGDIRS, broker)])
    doc = json.loads(out)
    parts = [p for p in partition_dirs() if p.startswith(broker + "/")]
    assert len(doc["partitions"]) == len(parts)
    damaged = False
    for p in doc["partitions"]:
        info = load_expected(os.path.join(broker, f"{p['topic']}-{p['partition']}",
                                          "partition.json"))[0]
        assert p["topic_id"] == info["topic_id"]
        assert p["offsets"][1] == info["log_end_offset"]
        assert p["producer_snapshots"] == info["producer_snapshots"]
        assert p["leader_epochs"] == info["leader_epochs"]
        for s, e in zip(p["segments"], info["segments"], strict=True):
            assert (s["base_offset"], s["size"], s["batches"]) == \
                (e["base_offset"], e["log_size"], e["batches"])
            assert s["offsets"] == [e["first_batch_base_offset"], e["last_batch_last_offset"] + 1]
            torn = e["log_size"] - e["valid_bytes"]
            kinds = [d["kind"] for d in s["damage"]]
            assert ("torn-tail" in kinds) == (torn > 0)
            if torn:
                assert s["damage"][kinds.index("torn-tail")]["bytes_skipped"] == torn
        if "corrupted byte" in info.get("note", ""):
            assert [d["kind"] for d in p["damage"]] == ["crc"]
        damaged |= bool(p["damage"])
    assert rc == (1 if damaged else 0)
    assert (broker == "broker1-crashed") == damaged
    rc, text = run_cli(["logdir", os.path.join(LOGDIRS, broker)])
    assert all(f"{os.path.basename(p)}  topic_id=" in text for p in parts)


def test_logdir_on_partition_folder_and_bad_path(tmp_path):
    rc, out = run_cli(["logdir", "--format", "json", os.path.join(LOGDIRS, "broker1-clean", "users-0")])
    assert rc == 0 and json.loads(out)["partitions"][0]["offsets"] == [0, 4418]
    assert main(["logdir", str(tmp_path / "missing")]) == 2


def test_logdir_on_a_legacy_wrapper_that_does_not_decompress(tmp_path):
    # the first offset of a compressed magic 1 wrapper is inside its payload
    import gzip

    from kproto.records.builder import encode_legacy_message

    part = tmp_path / "old-0"
    part.mkdir()
    bad = encode_legacy_message(7, 1, 1, 1000, None, gzip.compress(b"x" * 100)[:-12])
    (part / "00000000000000000000.log").write_bytes(
        bad + encode_legacy_message(8, 1, 0, 1001, b"k", b"v"))
    rc, out = run_cli(["logdir", "--format", "json", str(part)])
    seg = json.loads(out)["partitions"][0]["segments"][0]
    assert rc == 1 and seg["batches"] == 2 and seg["offsets"] == [7, 9]
    assert [(d["kind"], d["position"]) for d in seg["damage"]] == [("corrupt", 0)]
    assert "gzip" in seg["damage"][0]["reason"]
