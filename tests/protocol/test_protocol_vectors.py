"""Every golden vector written by Apache Kafka's own classes, from every vector set (Kafka 3.9.1's,
4.3.1's and 4.4's): bytes and JSON must match exactly. The few older pairs that a newer release
renamed or redefined are named in protocol_support (RENAMED, REDEFINED) and checked by their own
tests."""
from __future__ import annotations

from collections import defaultdict

import pytest

import kproto
from kproto.codecs import RELEASES
from protocol_support import (REDEFINED, RENAMED, VECTOR_SETS, assert_json_equal, codec_for,
                              load_vectors, release_codec, release_schemas)

SETS = sorted(VECTOR_SETS)


def _grouped(kafka, files):
    groups = defaultdict(list)
    for fname in files:
        for vec in load_vectors(fname, kafka):
            groups[(vec["name"], vec["version"])].append(vec)
    return groups


GOOD = {k: _grouped(k, ["messages.jsonl.gz", "messages-edge.jsonl.gz"]) for k in SETS}
BAD = {k: load_vectors("messages-bad.jsonl.gz", k) for k in SETS}
EXCEPTIONS = {k: set(RENAMED.get(k, ())) | (REDEFINED if k == "3.9.1" else set()) for k in SETS}
PAIRS = [(k, key) for k in SETS for key in sorted(GOOD[k]) if key not in EXCEPTIONS[k]]
RENAMED_PAIRS = [(k, key) for k in sorted(RENAMED) for key in sorted(RENAMED[k])]


def test_a_vector_set_per_release():
    assert sorted(r for _, r in VECTOR_SETS.values()) == sorted(RELEASES)


@pytest.mark.parametrize("kafka", SETS)
def test_vector_files_cover_every_message_version(kafka):
    good = GOOD[kafka]
    assert len(good) == len({(v["name"], v["version"]) for v in load_vectors("messages.jsonl.gz", kafka)})
    release = VECTOR_SETS[kafka][1]
    ours = release_schemas(release)
    # every (message, version) of a vector is one of the release's, and every message of the
    # release has vectors (3.9.1's set has only the message/ folder: no internal records)
    names = {n for n, _ in good}
    for name in names:
        assert {v for n, v in good if n == name} == set(ours[name].versions), name
        assert set(ours[name].versions) <= set(kproto.message(name).valid_versions)
    missing = {n for n, s in ours.items() if s.versions and n not in names
               and (s.source == "message" or kafka != "3.9.1")}
    assert missing == set()


def test_every_version_of_the_schemas_has_vectors_of_its_release():
    """Each (message, version) kproto knows is in the vector set of the release that defines it,
    except the internal records of 3.9 (its set has none) that 4.3.1 dropped."""
    covered = {(kproto.message(n).name, v, VECTOR_SETS[k][1]) for k in SETS for n, v in GOOD[k]}
    missing = []
    for name in kproto.codecs.messages():
        codec = kproto.message(name)
        for v in codec.valid_versions:
            if (name, v, codec.release(v)) not in covered:
                missing.append((name, v, codec.release(v)))
    assert sorted(missing) == [("ShareGroupPartitionMetadataKey", 0, "3.9"),
                               ("ShareGroupPartitionMetadataValue", 0, "3.9")]


def _check_good(codec, vec, version):
    assert vec["api_key"] == codec.api_key and vec.get("spec_type", vec["kind"]) == codec.kind
    assert vec["flexible"] == (version in codec.flexible_versions)
    obj = codec.from_json(vec["json"], version)
    assert codec.encode(obj, version).hex() == vec["hex"], vec.get("case")
    data = bytes.fromhex(vec["hex"])
    decoded = codec.decode(data, version)
    assert_json_equal(codec.to_json(decoded, version), vec["json"])
    assert decoded == obj
    # zero-copy input gives the same message
    assert codec.decode(memoryview(data), version) == decoded
    # and what was read writes the same bytes again
    assert codec.encode(decoded, version) == data


@pytest.mark.parametrize("kafka,key", PAIRS, ids=[f"{k}-{n}-v{v}" for k, (n, v) in PAIRS])
def test_good_vectors(kafka, key):
    name, version = key
    codec = kproto.message(name)
    # the schemas define this version as the vector set's release does (or a newer one that
    # writes the same bytes under the same names)
    assert codec.release(version) in RELEASES[RELEASES.index(VECTOR_SETS[kafka][1]):]
    for vec in GOOD[kafka][key]:
        _check_good(codec, vec, version)


def _renamed(doc, names):
    if isinstance(doc, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_renamed(v, names) for v in doc]
    return doc


@pytest.mark.parametrize("kafka,key", RENAMED_PAIRS, ids=[f"{k}-{n}-v{v}" for k, (n, v) in RENAMED_PAIRS])
def test_renamed_same_bytes(kafka, key):
    """An older set's bytes of a pair a newer release renamed: read and written back byte for
    byte; the JSON is the older set's with the new names; the newest set's own vectors of the
    pair pass in full (test_good_vectors)."""
    name, version = key
    codec = kproto.message(name)
    assert RELEASES.index(codec.release(version)) > RELEASES.index(VECTOR_SETS[kafka][1])
    vecs = GOOD[kafka][key]
    changed = 0
    for vec in vecs:
        data = bytes.fromhex(vec["hex"])
        decoded = codec.decode(data, version)
        assert codec.encode(decoded, version) == data
        want = _renamed(vec["json"], RENAMED[kafka][key])
        assert_json_equal(codec.to_json(decoded, version), want)
        assert codec.encode(codec.from_json(want, version), version) == data
        changed += want != vec["json"]
    assert vecs and changed      # the names did change (where the vector has such fields)
    newest = max(SETS, key=lambda k: RELEASES.index(VECTOR_SETS[k][1]))
    assert (codec.name, version) in GOOD[newest] and key not in RENAMED.get(newest, {})


@pytest.mark.parametrize("key", sorted(REDEFINED), ids=lambda k: f"{k[0]}-v{k[1]}")
def test_redefined_in_4_3_1(key):
    """3.9.1's bytes of a pair 4.3.1 redefined: exact with 3.9's schema alone; kproto's schema
    is 4.3.1's, which reads them alike only where the definitions agree (here: no partitions)."""
    name, version = key
    codec = kproto.message(name)
    assert codec.release(version) in RELEASES[RELEASES.index("4.3.1"):]
    old = release_codec("3.9", name)
    differ = 0
    for vec in GOOD["3.9.1"][key]:
        _check_good(old, vec, version)
        data = bytes.fromhex(vec["hex"])
        partitions = [p for r in vec["json"]["results"] for p in r["partitions"]]
        try:
            same = codec.to_json(codec.decode(data, version), version) == vec["json"]
        except kproto.DecodeError:
            same = False
        assert same == (not partitions), vec.get("case")
        differ += not same
    assert differ > 0


@pytest.mark.parametrize("kafka", SETS)
def test_bad_vectors_raise_decode_error(kafka):
    assert BAD[kafka]
    for vec in BAD[kafka]:
        codec = codec_for(vec, kafka)
        with pytest.raises(kproto.DecodeError) as info:
            codec.decode(bytes.fromhex(vec["hex"]), vec["version"])
        err = info.value
        assert err.what == f"{codec.name} v{vec['version']}", vec
        assert err.offset is not None and 0 <= err.offset <= len(vec["hex"]) // 2
