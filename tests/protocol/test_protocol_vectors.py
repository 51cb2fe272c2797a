"""Every golden vector written by Apache Kafka's own classes: bytes and JSON must match exactly."""
from __future__ import annotations

from collections import defaultdict

import pytest

import kproto
from protocol_support import assert_json_equal, load_vectors


def _grouped(files):
    groups = defaultdict(list)
    for fname in files:
        for vec in load_vectors(fname):
            groups[(vec["name"], vec["version"])].append(vec)
    return groups


GOOD = _grouped(["messages.jsonl.gz", "messages-edge.jsonl.gz"])
BAD = load_vectors("messages-bad.jsonl.gz")


def test_vector_files_cover_every_message_version():
    assert len(GOOD) == len({(v["name"], v["version"]) for f in ["messages.jsonl.gz"] for v in load_vectors(f)})
    # every (message, version) of a vector exists in our schemas and vice versa for its messages
    names = {n for n, _ in GOOD}
    for name in names:
        assert set(kproto.message(name).valid_versions) == {v for n, v in GOOD if n == name}


@pytest.mark.parametrize("key", sorted(GOOD), ids=lambda k: f"{k[0]}-v{k[1]}")
def test_good_vectors(key):
    name, version = key
    codec = kproto.message(name)
    for vec in GOOD[key]:
        assert vec["api_key"] == codec.api_key and vec["kind"] == codec.kind
        assert vec["flexible"] == (version in codec.flexible_versions)
        obj = codec.from_json(vec["json"], version)
        assert codec.encode(obj, version).hex() == vec["hex"], vec.get("case")
        data = bytes.fromhex(vec["hex"])
        decoded = codec.decode(data, version)
        assert_json_equal(codec.to_json(decoded, version), vec["json"])
        assert decoded == obj
        # zero-copy input gives the same message
        assert codec.decode(memoryview(data), version) == decoded


@pytest.mark.parametrize("vec", BAD, ids=lambda v: f"{v['name']}-v{v['version']}")
def test_bad_vectors_raise_decode_error(vec):
    codec = kproto.message(vec["name"])
    with pytest.raises(kproto.DecodeError) as info:
        codec.decode(bytes.fromhex(vec["hex"]), vec["version"])
    err = info.value
    assert err.what == f"{vec['name']} v{vec['version']}"
    assert err.offset is not None and 0 <= err.offset <= len(vec["hex"]) // 2
