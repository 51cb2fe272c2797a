"""The merged schema set against each release's own: tools/import_schemas.py merges Kafka 3.9's,
4.3.1's and 4.4.0's specs into one field tree per message, and for every (message, version) the per-version
plan (kproto.codecs.plan, what the encoders, the C decoder's programs and the JSON converter
follow) must be the plan of the release that defines that version, imported alone. Where both
releases define a version and disagree, the difference is named here."""
from __future__ import annotations

from pathlib import Path

import pytest

import kproto
from kproto.codecs import RELEASES, messages, schema
from kproto.codecs.plan import VersionPlan
from kproto.schemas.model import Message
from protocol_support import import_tool, release_schemas

_PLAN = ("name", "type", "nullable", "compact", "tag", "default", "zero_copy")


def plan_of(msg: Message, version: int, *, names: bool = True, zero_copy: bool = True,
            skip_tagged: frozenset = frozenset()) -> tuple:
    """Everything ``VersionPlan`` says about ``msg`` at ``version``: per struct, the regular
    fields in wire order, the tagged ones in tag order, and the JSON (declaration) order; each
    field with its type, nullability, compactness, tag, default and zeroCopy, structs expanded."""
    plan = VersionPlan(msg, version)

    def one(f, tagged):
        sub = struct(plan.struct_fields(f)) if f.is_struct_type else None
        t = ("[]" if f.is_array else "") + ("struct" if f.is_struct_type else f.element_type)
        return ((f.name if names else None), t, plan.nullable(f), plan.field_flexible(f),
                f.tag if tagged else None, f.default, f.zero_copy if zero_copy else None, sub)

    def struct(fields):
        regular, tagged, _ = plan.present(fields)
        tagged = [f for f in tagged if f.name not in skip_tagged]
        return (tuple(one(f, False) for f in regular), tuple(one(f, True) for f in tagged),
                tuple((f.name if names else None, t) for f, t in plan.in_order(fields)
                      if f.name not in skip_tagged or not t))

    return (plan.flexible, struct(msg.fields))


def ignorable_of(msg: Message, version: int) -> dict:
    """(struct path, field name) -> ignorable, of every field absent at ``version``."""
    plan = VersionPlan(msg, version)
    out = {}

    def walk(fields, path):
        regular, tagged, absent = plan.present(fields)
        for f in absent:
            out[(path, f.name)] = f.ignorable
        for f in regular + tagged:
            if f.is_struct_type:
                walk(plan.struct_fields(f), f"{path}.{f.name}")

    walk(msg.fields, "")
    return out


def _their_version(merged: Message, theirs: Message, version: int) -> int:
    """Coordinator keys: before 4.0 a key's version was its record type (kproto's version 0)."""
    if merged.kind == "coordinator-key" and theirs.kind == "data":
        assert version == 0
        return merged.api_key
    return version


def _release_schema(release: str, merged: Message) -> Message:
    ours = release_schemas(release)
    for name in (merged.name, *merged.aliases):
        if name in ours:
            return ours[name]
    raise KeyError(f"{merged.name} is not in {release}")


ALL = [(name, v) for name in messages() for v in kproto.message(name).valid_versions]


def test_pairs_by_release():
    count = {r: 0 for r in RELEASES}
    for name, v in ALL:
        count[kproto.message(name).release(v)] += 1
    # 121 pairs only 3.9 defines (Kafka 4.0 dropped them): Produce 0-2, ..., the ZooKeeper-era
    # keys, early-access v0 of the share-group APIs, and ShareGroupPartitionMetadataKey/Value
    # and 4.4.0 defines every pair of 4.3.1 (739) and 16 new ones
    assert count == {"3.9": 121, "4.3.1": 0, "4.4.0": 755}


@pytest.mark.parametrize("name", sorted(messages()))
def test_every_version_has_the_plan_of_its_release(name):
    merged = schema(name)
    codec = kproto.message(name)
    assert [v for v in codec.valid_versions if codec.release(v) is None] == []
    for v in codec.valid_versions:
        theirs = _release_schema(codec.release(v), merged)
        tv = _their_version(merged, theirs, v)
        assert tv in theirs.versions
        assert plan_of(merged, v) == plan_of(theirs, tv), f"{name} v{v} ({codec.release(v)})"
        # writing a non-default value of a field the version lacks: refused or ignored as the
        # release says (for the fields that release has)
        mine, their = ignorable_of(merged, v), ignorable_of(theirs, tv)
        assert {k: mine[k] for k in their if k in mine} == their, f"{name} v{v}"


# Versions two consecutive releases both define, where the newer says something else than the
# older (kproto follows the newer):
DIFFERENT = {("3.9", "4.3.1"): {
    # other bytes: early-access messages redefined
    ("ReadShareGroupStateSummaryResponse", 0): "redefined",   # + Partitions.LeaderEpoch int32
    ("ShareGroupMetadataValue", 0): "redefined",              # + MetadataHash int64
    # same bytes, other names
    ("VoteRequest", 0): "renamed",                            # Candidate* -> Replica*
    ("VoteRequest", 1): "renamed",
    ("ListConfigResourcesResponse", 0): "renamed",            # was ListClientMetricsResources
    # tagged fields added to an existing version: the older release's bytes read the same
    ("ConsumerGroupCurrentMemberAssignmentValue", 0): "tagged",
    ("ConsumerGroupMetadataValue", 0): "tagged",
    ("ConsumerGroupTargetAssignmentMetadataValue", 0): "tagged",
    ("OffsetCommitValue", 4): "tagged",
    ("TransactionLogValue", 1): "tagged",
    # a bytes field read as a view of the input (zeroCopy): same bytes and values
    ("PushTelemetryRequest", 0): "zero copy",
}, ("4.3.1", "4.4.0"): {
    # same bytes, other names
    ("TxnOffsetCommitRequest", 3): "renamed",                 # GenerationId -> GenerationIdOrMemberEpoch
    ("TxnOffsetCommitRequest", 4): "renamed",
    ("TxnOffsetCommitRequest", 5): "renamed",
    ("StreamsGroupHeartbeatResponse", 0): "renamed",          # AcceptableRecoveryLag -> ...Legacy
    # tagged fields added: StoredDescriptionTopologyEpoch (2), FailedDescriptionTopologyEpoch (3)
    ("StreamsGroupMetadataValue", 0): "tagged",
}}


@pytest.mark.parametrize("old,new", list(zip(RELEASES, RELEASES[1:])))
def test_versions_both_releases_define(old, new):
    found = {}
    for name in messages():
        merged = schema(name)
        try:
            a, b = _release_schema(old, merged), _release_schema(new, merged)
        except KeyError:
            continue
        for v in sorted(set(b.versions)):
            ov = _their_version(merged, a, v)
            if ov not in a.versions:
                continue
            if plan_of(a, ov) == plan_of(b, v):
                continue
            added = frozenset(f.name for f in b.walk_fields() if v in f.tagged_range) - frozenset(
                f.name for f in a.walk_fields() if ov in f.tagged_range)
            if plan_of(a, ov, names=False) == plan_of(b, v, names=False):
                found[(name, v)] = "renamed"
            elif plan_of(a, ov, zero_copy=False) == plan_of(b, v, zero_copy=False):
                found[(name, v)] = "zero copy"
            elif added and plan_of(a, ov) == plan_of(b, v, skip_tagged=added):
                found[(name, v)] = "tagged"
            else:
                found[(name, v)] = "redefined"
    assert found == DIFFERENT.get((old, new), {})


# -- the merge itself, on small specs -----------------------------------------------------------

def _spec(name, valid, fields, flexible="none", **extra):
    return {"type": "request", "apiKey": 99, "name": name, "validVersions": valid,
            "flexibleVersions": flexible, "fields": fields, **extra}


def _release(tool, name, *specs):
    rel = tool.Release(name, Path(name))
    for s in specs:
        rel.specs[s["name"]] = ("message", tool.normalise(s))
    return rel


def _merge(*releases):
    tool = import_tool()
    merged = tool.merge_releases(releases)
    tool.check_merge(releases, merged)
    return {m.name: m for m in merged}


def test_merge_keeps_fields_of_dropped_versions():
    tool = import_tool()
    old = _release(tool, "1.0", _spec("XRequest", "0-3", [
        {"name": "A", "type": "int32", "versions": "0+"},
        {"name": "Gone", "type": "string", "versions": "0-1", "nullableVersions": "1"},
        {"name": "Topics", "type": "[]Topic", "versions": "0+", "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "Old", "type": "int8", "versions": "0"}]}]))
    new = _release(tool, "2.0", _spec("XRequest", "2-5", [
        {"name": "A", "type": "int32", "versions": "0+"},
        {"name": "Topics", "type": "[]TopicData", "versions": "0+", "fields": [
            {"name": "Name", "type": "string", "versions": "0-4"},
            {"name": "Id", "type": "uuid", "versions": "5+"}]},
        {"name": "Tagged", "type": "int32", "versions": "3+", "taggedVersions": "3+", "tag": 0}],
        flexible="3+"))
    m = _merge(old, new)["XRequest"]
    assert m.spec["validVersions"] == "0-5" and m.spec["flexibleVersions"] == "3+"
    assert m.releases == [(0, 1, "1.0"), (2, 5, "2.0")]
    f = {x["name"]: x for x in m.spec["fields"]}
    assert [x["name"] for x in m.spec["fields"]] == ["A", "Gone", "Topics", "Tagged"]
    assert f["Gone"]["versions"] == "0-1" and f["Gone"]["nullableVersions"] == "1"
    assert f["Topics"]["type"] == "[]TopicData"          # the newest name of the struct
    inner = {x["name"]: x["versions"] for x in f["Topics"]["fields"]}
    assert inner == {"Name": "0-4", "Old": "0", "Id": "5+"}


def test_merge_newest_stands_for_a_version_both_define():
    tool = import_tool()
    old = _release(tool, "1.0", _spec("XRequest", "0-1", [{"name": "A", "type": "int32", "versions": "0+"}]))
    new = _release(tool, "2.0", _spec("XRequest", "1-2", [
        {"name": "A", "type": "int32", "versions": "0+"},
        {"name": "B", "type": "int64", "versions": "0+"}]))
    m = _merge(old, new)["XRequest"]
    assert m.releases == [(0, 0, "1.0"), (1, 2, "2.0")]
    assert {x["name"]: x["versions"] for x in m.spec["fields"]} == {"A": "0+", "B": "1+"}


def test_merge_renamed_api_takes_the_newest_name():
    tool = import_tool()
    old = _release(tool, "1.0", _spec("OldRequest", "0-1", [{"name": "A", "type": "int32", "versions": "0+"}]))
    new = _release(tool, "2.0", _spec("NewRequest", "1-2", [{"name": "A", "type": "int32", "versions": "0+"}]))
    merged = _merge(old, new)
    assert list(merged) == ["NewRequest"] and merged["NewRequest"].aliases == ["OldRequest"]


def test_merge_refuses_what_one_tree_cannot_say():
    tool = import_tool()
    # the same two fields in another order in the versions each release rules
    old = _release(tool, "1.0", _spec("XRequest", "0-1", [{"name": "A", "type": "int32", "versions": "0+"},
                                                           {"name": "B", "type": "int32", "versions": "0+"}]))
    new = _release(tool, "2.0", _spec("XRequest", "2", [{"name": "B", "type": "int32", "versions": "0+"},
                                                         {"name": "A", "type": "int32", "versions": "0+"}]))
    with pytest.raises(tool.MergeError, match="order"):
        _merge(old, new)
    # a field of another type under the same name
    new = _release(tool, "2.0", _spec("XRequest", "2", [{"name": "A", "type": "int64", "versions": "0+"}]))
    with pytest.raises(tool.MergeError, match="A"):
        _merge(old, new)
    # a field present, absent, present again
    old = _release(tool, "1.0", _spec("XRequest", "0-1", [{"name": "A", "type": "int32", "versions": "0"}]))
    new = _release(tool, "2.0", _spec("XRequest", "2-3", [{"name": "A", "type": "int32", "versions": "3"}]))
    with pytest.raises(tool.MergeError, match="one range"):
        _merge(old, new)


def test_release_arguments():
    tool = import_tool()
    assert tool.release_arg("../shared/reference/kafka-4.3.1") == (Path("../shared/reference/kafka-4.3.1"), "4.3.1")
    assert tool.release_arg("specs=4.4.0") == (Path("specs"), "4.4.0")
    with pytest.raises(SystemExit):       # newest last
        tool.main(["../shared/reference/kafka-4.3.1", "../shared/reference/kafka-3.9"])


def _jar(path, entries):
    import zipfile
    with zipfile.ZipFile(path, "w") as z:
        for name, text in entries.items():
            z.writestr(name, text)
    return path


def test_release_from_its_jars(tmp_path):
    """A release read from its jars: each artifact's specs land in their spec folder, the name
    is the jars' version, jars without specs are skipped; a list or a folder of jars."""
    import argparse
    tool = import_tool()
    spec = ('{"apiKey": 99, "type": "request", "name": "XRequest", "validVersions": "0",\n'
            ' "flexibleVersions": "none", "fields": [\n'
            '  {"name": "A", "type": "int32", "versions": "0+"}\n'
            '  // a comment after the last field, as 4.4.0 writes one\n ]}')
    record = ('{"apiKey": 29, "type": "metadata", "name": "YRecord", "validVersions": "0",'
              ' "flexibleVersions": "0+", "fields": []}')
    d = tmp_path / "jars"
    d.mkdir()
    jars = [_jar(d / "kafka-clients-9.9.0.jar", {"common/message/XRequest.json": spec,
                                                 "common/message/sub/Ignored.json": record}),
            _jar(d / "kafka-metadata-9.9.0.jar", {"common/metadata/YRecord.json": record}),
            _jar(d / "kafka-server-9.9.0.jar", {"common/message/Other.json": "not a spec"})]
    listed = ",".join(map(str, jars))
    assert tool.release_arg(listed) == (Path(listed), "9.9.0")
    assert tool.release_arg(str(d)) == (d, "9.9.0")
    assert tool.release_arg(f"{listed}=9.9") == (Path(listed), "9.9")
    for arg in (listed, str(d)):
        rel = tool.load_release(*tool.release_arg(arg))
        assert {n: f for n, (f, _) in rel.specs.items()} == {"XRequest": "message", "YRecord": "metadata"}
        assert rel.specs["XRequest"][1]["fields"] == [{"name": "A", "type": "int32", "versions": "0+"}]
    _jar(d / "kafka-raft-9.8.0.jar", {})
    with pytest.raises(argparse.ArgumentTypeError, match="versions"):
        tool.release_arg(str(d))


def test_release_specs_equal_the_snapshot():
    """Kafka 4.4.0's jars (when the local Maven repository has them) hold the same specs as the
    4.4 branch head that the reference folder and the kafka-4.4 vectors were made from."""
    from protocol_support import REFERENCE, release_jars
    jars = release_jars("4.4.0")
    if not jars:
        pytest.skip("Kafka 4.4.0's jars are not in the local Maven repository")
    tool = import_tool()
    release = tool.load_release(Path(",".join(map(str, jars))), "4.4.0")
    snapshot = tool.load_release(REFERENCE / "kafka-4.4-snapshot", "4.4.0")
    assert len(release.specs) == 287 and release.specs == snapshot.specs
