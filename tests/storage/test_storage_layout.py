"""Log-dir and partition-folder discovery."""
from __future__ import annotations

import os
import shutil

import pytest

from kproto.storage.layout import (file_kind, is_partition_dir, offset_file_name,
                                   parse_offset_file_name, parse_partition_dir_name,
                                   scan_log_dir, scan_partition_dir)

from storage_fixtures import LOGDIRS, load_expected, partition_dirs


@pytest.mark.parametrize("name,want", [
    ("orders-0", ("orders", 0, "live")),
    ("my.topic-name_x-12", ("my.topic-name_x", 12, "live")),
    ("__consumer_offsets-49", ("__consumer_offsets", 49, "live")),
    ("a-b-c-3.0123456789abcdef0123456789abcdef-delete", ("a-b-c", 3, "delete")),
    ("t.x-1.0123456789abcdef0123456789abcdef-future", ("t.x", 1, "future")),
    ("t_x-2.0123456789abcdef0123456789abcdef-stray", ("t_x", 2, "stray")),
    ("orders", None), ("orders-", None), ("-3", None), ("orders-x", None),
    ("bad topic-1", None), ("lost+found", None), ("orders-１", None),
])
def test_partition_dir_names(name, want):
    assert parse_partition_dir_name(name) == want


def test_offset_file_names():
    assert offset_file_name(1203, ".log") == "00000000000000001203.log"
    assert parse_offset_file_name("00000000000000001203.timeindex") == (1203, ".timeindex")
    assert parse_offset_file_name("00000000000000001203.log.deleted") is None
    assert parse_offset_file_name("1203.log") is None
    assert file_kind("/x/00000000000000000007.snapshot") == ("snapshot", 7)
    assert file_kind("recovery-point-offset-checkpoint") == ("offset-checkpoint", None)
    assert file_kind("whatever.txt") == ("unknown", None)


@pytest.mark.parametrize("rel", partition_dirs())
def test_partition_scan_matches_expected(rel):
    info = load_expected(os.path.join(rel, "partition.json"))[0]
    pd = scan_partition_dir(os.path.join(LOGDIRS, rel))
    assert (pd.topic, pd.partition, pd.state) == (info["topic"], info["partition"], "live")
    assert [s.base_offset for s in pd.segments] == [s["base_offset"] for s in info["segments"]]
    assert all(s.log and s.index and s.timeindex for s in pd.segments)
    assert [o for o, _ in pd.snapshots] == info["producer_snapshots"]
    assert pd.leader_epoch_checkpoint and pd.partition_metadata and not pd.leftovers
    assert is_partition_dir(pd.path)


def test_log_dir_scan():
    for broker in sorted(os.listdir(LOGDIRS)):
        root = os.path.join(LOGDIRS, broker)
        layout = scan_log_dir(root)
        want = [r for r in partition_dirs() if r.startswith(broker + "/")]
        assert [os.path.relpath(p.path, LOGDIRS) for p in layout.partitions] == sorted(
            want, key=lambda r: (r.rsplit("-", 1)[0], int(r.rsplit("-", 1)[1])))
        assert layout.meta_properties and not layout.moved and not layout.others
        assert not is_partition_dir(root)


def test_moved_dirs_and_leftovers_are_reported_not_read(tmp_path):
    src = os.path.join(LOGDIRS, "broker1-clean")
    root = tmp_path / "logdir"
    root.mkdir()
    shutil.copy(os.path.join(src, "meta.properties"), root)
    shutil.copytree(os.path.join(src, "legacy-0"), root / "legacy-0")
    shutil.copytree(os.path.join(src, "legacy-0"), root / "legacy-0.0123456789abcdef0123456789abcdef-delete")
    shutil.copytree(os.path.join(src, "clicks-0"), root / "my.t-x_y-7.0123456789abcdef0123456789abcdef-future")
    (root / "legacy-0" / "00000000000000000000.log.deleted").write_bytes(b"x")
    (root / "lost+found").mkdir()
    layout = scan_log_dir(str(root))
    assert [(p.topic, p.partition) for p in layout.partitions] == [("legacy", 0)]
    assert sorted((p.topic, p.partition, p.state) for p in layout.moved) == [
        ("legacy", 0, "delete"), ("my.t-x_y", 7, "future")]
    assert layout.partitions[0].leftovers == [str(root / "legacy-0" / "00000000000000000000.log.deleted")]
    assert layout.others == [str(root / "lost+found")]
    from kproto.storage.summary import render_text, summarize

    doc = summarize(str(root))
    assert [m["state"] for m in doc["moved"]] == ["delete", "future"]
    assert doc["partitions"][0]["other_files"] == ["00000000000000000000.log.deleted"]
    text = render_text(doc)
    assert "delete folder" in text and "future folder" in text and ".log.deleted" in text
    with pytest.raises(ValueError):
        scan_partition_dir(str(root / "lost+found"))
