"""The kafka-4.4 vectors were written by the 4.4 branch head's classes (4.4.0-SNAPSHOT); kproto's
schemas come from the 4.4.0 release's jars. Their spec files are equal
(test_protocol_merge.test_release_specs_equal_the_snapshot); here the release's own generated
classes read every good vector of the set and write it back byte for byte, so the set is the
release's too. Needs Java 17 (javac) and Kafka 4.4.0's jars in the local Maven repository."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from protocol_support import M2_KAFKA, good_vectors

SOURCE = Path(__file__).parent / "java" / "ReleaseClassesCheck.java"
RELEASE = "4.4.0"
# spec folder -> the Java package of the classes Kafka generates from it
PACKAGES = {
    "message": "org.apache.kafka.common.message",
    "metadata": "org.apache.kafka.common.metadata",
    "group-coordinator": "org.apache.kafka.coordinator.group.generated",
    "transaction-coordinator": "org.apache.kafka.coordinator.transaction.generated",
    "share-coordinator": "org.apache.kafka.coordinator.share.generated",
    "raft": "org.apache.kafka.raft.generated",
    "streams": "org.apache.kafka.streams.internals.generated",
    "storage": "org.apache.kafka.server.log.remote.metadata.storage.generated",
}


def _class_of(vec: dict) -> str:
    source = vec.get("source", "message")
    name = vec["name"] + ("Data" if source == "message" and vec["kind"] in ("request", "response", "header") else "")
    return f"{PACKAGES[source]}.{name}"


def test_the_releases_classes_read_and_write_every_4_4_vector(tmp_path):
    jars = sorted(M2_KAFKA.glob(f"*/{RELEASE}/*-{RELEASE}.jar"))
    javac, java = shutil.which("javac"), shutil.which("java")
    if not jars or not javac or not java:
        pytest.skip(f"needs javac and Kafka {RELEASE}'s jars under {M2_KAFKA}")
    cp = ":".join(map(str, jars))
    subprocess.run([javac, "-nowarn", "-cp", cp, "-d", str(tmp_path), str(SOURCE)], check=True)
    vecs = good_vectors("4.4")
    lines = "".join(f"{_class_of(v)} {v['version']} {v['hex']}\n" for v in vecs)
    out = subprocess.run([java, "-cp", f"{cp}:{tmp_path}", "ReleaseClassesCheck"], input=lines,
                         capture_output=True, text=True, check=True, timeout=300).stdout
    assert out.splitlines()[-1] == f"checked {len(vecs)} bad 0", out[-2000:]
    assert len(vecs) == 4530
