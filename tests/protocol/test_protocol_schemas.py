"""The committed schemas are exactly what the import tool makes of the reference specs."""
from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import kproto
from kproto.codecs import api_keys

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path(os.environ.get("KPROTO_REFERENCE", REPO.parent / "shared" / "reference" / "kafka-3.9"))


def test_import_tool_regenerates_the_committed_schemas(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "tools" / "import_schemas.py"), str(REFERENCE),
                          "--kafka-version", "3.9", "--dest", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "88 request, 88 response" in out
    committed = REPO / "kproto" / "schemas"
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    assert generated, "the tool wrote nothing"
    mismatch = [str(p) for p in generated if not filecmp.cmp(tmp_path / p, committed / p, shallow=False)]
    assert mismatch == []
    stale = sorted(str(p.relative_to(committed)) for p in committed.rglob("*.py")
                   if p.parent != committed and not (tmp_path / p.relative_to(committed)).exists())
    assert stale == []


def test_every_api_key_from_0_to_87():
    keys = api_keys()
    assert sorted(keys) == list(range(88))
    for key in keys:
        req, resp = kproto.request(key), kproto.response(key)
        assert req.valid_versions == resp.valid_versions and req.valid_versions.start == 0
        assert req.cls.API_KEY == key


def test_internal_topic_schemas_are_there():
    for name in ["OffsetCommitKey", "OffsetCommitValue", "GroupMetadataValue", "TransactionLogValue",
                 "PartitionChangeRecord", "RegisterBrokerRecord", "TopicRecord", "LeaderChangeMessage",
                 "SnapshotHeaderRecord", "VotersRecord", "KRaftVersionRecord"]:
        assert kproto.message(name).valid_versions
    assert kproto.codecs.metadata_record(2).name == "TopicRecord"
