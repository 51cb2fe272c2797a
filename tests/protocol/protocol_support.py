"""Shared helpers of the protocol tests: where the vectors and the reference specs are, the
schemas of one Kafka release alone, strict JSON comparison, strategies."""
from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict

from hypothesis import strategies as st

import kproto
from kproto.codecs import RELEASES, MessageCodec, Uuid
from kproto.codecs.objects import parse_default
from kproto.schemas.model import Message

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors"))
# the folder of Kafka's specs, one folder per release the schemas are imported from
REFERENCE = Path(os.environ.get("KPROTO_REFERENCE", REPO.parent / "shared" / "reference"))

# The golden vector sets, each written by one Kafka release's own classes: its folder, and the
# release (of kproto.codecs.RELEASES) whose specs it follows. The 4.4 set was written from the 4.4
# branch head (its lines say 4.4.0-SNAPSHOT), whose spec files are byte for byte the 4.4.0
# release's (test_release_specs_equal_the_snapshot's).
VECTOR_SETS = {"3.9.1": (VECTORS, "3.9"), "4.3.1": (VECTORS / "kafka-4.3", "4.3.1"),
               "4.4": (VECTORS / "kafka-4.4", "4.4.0")}

# Vectors of a (message, version) that a newer release renamed: same bytes, other JSON names
# (old key -> new key, at any depth), by vector set. kproto follows the newest release there, so
# these are compared on bytes and on their JSON with the names mapped.
RENAMED = {
    "3.9.1": {  # renamed in 4.3.1 (TxnOffsetCommitRequest v3-4 in 4.4.0)
        ("VoteRequest", 0): {"candidateEpoch": "replicaEpoch", "candidateId": "replicaId"},
        ("VoteRequest", 1): {"candidateEpoch": "replicaEpoch", "candidateId": "replicaId",
                             "candidateDirectoryId": "replicaDirectoryId"},
        ("ListClientMetricsResourcesResponse", 0): {"clientMetricsResources": "configResources",
                                                    "name": "resourceName"},
        ("TxnOffsetCommitRequest", 3): {"generationId": "generationIdOrMemberEpoch"},
        ("TxnOffsetCommitRequest", 4): {"generationId": "generationIdOrMemberEpoch"},
    },
    "4.3.1": {  # renamed in 4.4.0
        ("TxnOffsetCommitRequest", 3): {"generationId": "generationIdOrMemberEpoch"},
        ("TxnOffsetCommitRequest", 4): {"generationId": "generationIdOrMemberEpoch"},
        ("TxnOffsetCommitRequest", 5): {"generationId": "generationIdOrMemberEpoch"},
        ("StreamsGroupHeartbeatResponse", 0): {"acceptableRecoveryLag": "acceptableRecoveryLagLegacy"},
    },
}
# 3.9.1 vectors of a (message, version) that Kafka 4.3.1 redefined (early access in 3.9, other
# bytes in 4.3.1): kproto follows 4.3.1; the 3.9 bytes are checked with 3.9's schema alone.
REDEFINED = {("ReadShareGroupStateSummaryResponse", 0)}


@lru_cache(maxsize=None)
def load_vectors(name: str, kafka: str = "3.9.1") -> tuple:
    path = VECTOR_SETS[kafka][0] / name
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh)


def good_vectors(kafka: str) -> tuple:
    return load_vectors("messages.jsonl.gz", kafka) + load_vectors("messages-edge.jsonl.gz", kafka)


@lru_cache(maxsize=None)
def import_tool() -> Any:
    """``tools/import_schemas.py`` as a module."""
    spec = importlib.util.spec_from_file_location("import_schemas", REPO / "tools" / "import_schemas.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod     # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


# Kafka's jars on Maven Central, where a release's specs are read from its own jars
M2_KAFKA = Path(os.environ.get("KPROTO_M2_KAFKA", Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka"))
# releases taken from their jars; without the jars, from the snapshot folder of the same specs
FROM_JARS = {"4.4.0": "kafka-4.4-snapshot"}


def release_jars(release: str) -> list:
    """The release's jars in the local Maven repository that hold specs ([] if not there)."""
    tool = import_tool()
    jars = [M2_KAFKA / a / release / f"{a}-{release}.jar" for a in tool.JAR_FOLDERS]
    return jars if all(j.is_file() for j in jars) else []


def release_folder(release: str) -> str:
    """The import tool's argument for one release's specs: its reference folder, or its jars."""
    if release in FROM_JARS:
        jars = release_jars(release)
        if jars:
            return ",".join(map(str, jars)) + f"={release}"
        return f"{REFERENCE / FROM_JARS[release]}={release}"
    return str(REFERENCE / f"kafka-{release}")


@lru_cache(maxsize=None)
def release_schemas(release: str) -> Dict[str, Message]:
    """Every schema as the import tool makes it from ONE release's specs (no merge), by name."""
    tool = import_tool()
    path, name = tool.release_arg(release_folder(release))
    rel = tool.load_release(path, name)
    out = {}
    for m in tool.merge_releases([rel]):
        ns: Dict[str, Any] = {}
        exec(compile(tool.module_source(m, [release]), f"<{release} {m.name}>", "exec"), ns)
        out[m.name] = ns["SCHEMA"]
    return out


@lru_cache(maxsize=None)
def release_codec(release: str, name: str) -> MessageCodec:
    """The codec of a message from one release's specs alone."""
    return MessageCodec(release_schemas(release)[name])


def codec_for(vec: dict, kafka: str) -> MessageCodec:
    """The codec that gives a vector its meaning: kproto's, except for a pair 4.3.1 redefined,
    read as the release that wrote the vector defines it."""
    if (vec["name"], vec["version"]) in REDEFINED and kafka == "3.9.1":
        return release_codec(VECTOR_SETS[kafka][1], vec["name"])
    return kproto.message(vec["name"])



def assert_json_equal(got, want, path="$"):
    """Equality that also checks JSON types: 1 != 1.0 != true, -0.0 != 0.0."""
    if isinstance(want, bool) or isinstance(got, bool):
        assert got is want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, float):
        assert isinstance(got, float), f"{path}: {got!r} is not a float"
        assert got == want and math.copysign(1, got) == math.copysign(1, want), f"{path}: {got!r} != {want!r}"
    elif isinstance(want, int):
        assert type(got) is int and got == want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: {got!r} is not an object"
        assert set(got) == set(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_json_equal(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_json_equal(g, w, f"{path}[{i}]")
    else:
        assert got == want and type(got) is type(want), f"{path}: {got!r} != {want!r}"


_INTS = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
         "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
         "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1)}


def objects(codec, version: int, max_list: int = 3):
    """A hypothesis strategy of message objects valid at ``version``, from the schema alone."""
    schema = codec.schema
    structs = schema.structs()
    flexible = version in schema.flexible_range

    def value(f, elem=False):
        t = f.element_type
        if t in _INTS:
            s = st.integers(*_INTS[t])
        elif t == "bool":
            s = st.booleans()
        elif t == "float64":
            s = st.floats(allow_nan=False)
        elif t == "string":
            s = st.text(max_size=12)
        elif t in ("bytes", "records"):
            s = st.binary(max_size=24)
        elif t == "uuid":
            s = st.binary(min_size=16, max_size=16).map(Uuid)
        else:
            s = struct_of(t)
        return s

    def field_value(f):
        s = value(f)
        if f.is_array:
            s = st.lists(s, max_size=max_list)
        if version in f.nullable_range:
            s = st.none() | s
        return s

    def struct_of(name):
        cls = codec.classes[name]
        kwargs = {f.attr: field_value(f) for f in structs[name].fields if version in f.version_range}
        unknown = st.just(None)
        if flexible:
            known = {f.tag for f in structs[name].fields if f.tag is not None}
            tags = st.integers(0, 300).filter(lambda t: t not in known)
            unknown = st.none() | st.lists(st.tuples(tags, st.binary(max_size=6)), max_size=2,
                                           unique_by=lambda t: t[0]).map(
                lambda xs: sorted(xs) or None)
        return st.builds(lambda kw, u: cls(**kw, _unknown_tagged_fields=u), st.fixed_dictionaries(kwargs), unknown)

    return struct_of(schema.name)


def all_message_versions():
    for name in kproto.codecs.messages():
        codec = kproto.message(name)
        for v in codec.valid_versions:
            yield name, v
