"""The conformance kit's sans-I/O parts on synthetic answers: trees, normalisation,
comparison, deviations, the report and the transcript matching."""
from __future__ import annotations

import pytest

from kproto.codecs import Uuid, response
from kproto.conformance import Deviations, Diff, Normaliser, Report, build, compare, to_tree
from kproto.conformance.deviations import UNSUPPORTED
from kproto.conformance.normalise import generic_path
from kproto.conformance.report import CallResult
from kproto.conformance.runner import _Outcome, _record, parse_address
from kproto.conformance.scenario import Scenario
from kproto.conformance.scenarios import SCENARIOS, batch
from kproto.schemas.api_keys import ApiKey

MD = response(ApiKey.METADATA).cls
TID1, TID2 = Uuid(b"\x01" * 16), Uuid(b"\x02" * 16)
T0 = 1_800_000_000_000


def metadata(topic_ids=(TID1,), node=7, host="h1", port=9092, cluster="c1", throttle=0):
    c = MD
    return c(throttle_time_ms=throttle, cluster_id=cluster, controller_id=node,
             brokers=[c.MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)],
             topics=[c.MetadataResponseTopic(
                 error_code=0, name=f"t{i}", topic_id=tid, is_internal=False,
                 partitions=[c.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=node,
                                                         leader_epoch=0, replica_nodes=[node], isr_nodes=[node],
                                                         offline_replicas=[])])
                     for i, tid in enumerate(topic_ids)])


def test_tree_has_only_the_fields_of_the_version():
    assert "cluster_id" not in to_tree(ApiKey.METADATA, 1, metadata())
    assert to_tree(ApiKey.METADATA, 2, metadata())["cluster_id"] == "c1"
    assert "topic_id" in to_tree(ApiKey.METADATA, 10, metadata())["topics"]["t0"]


def test_tree_sorts_map_arrays_by_their_key():
    c = response(ApiKey.API_VERSIONS).cls
    a = c(error_code=0, api_keys=[c.ApiVersion(api_key=3, min_version=0, max_version=1),
                                  c.ApiVersion(api_key=0, min_version=0, max_version=2)])
    assert [x["api_key"] for x in to_tree(ApiKey.API_VERSIONS, 3, a)["api_keys"].values()] == [0, 3]


def test_keyed_arrays_are_compared_as_maps():
    c = response(ApiKey.DESCRIBE_CONFIGS).cls

    def answer(*names):
        return to_tree(ApiKey.DESCRIBE_CONFIGS, 4, c(results=[c.DescribeConfigsResult(
            resource_name="t", configs=[c.DescribeConfigsResourceResult(name=n, value="1") for n in names])]))
    assert compare(answer("a", "b"), answer("b", "a")) == []
    assert compare(answer("a", "b"), answer("b", "c")) == [
        Diff("results[t].configs[a]", "<present>", "<absent>"),
        Diff("results[t].configs[c]", "<absent>", "<present>")]
    assert generic_path("results[t].configs[a.b].value") == "results[].configs[].value"


def test_tree_decodes_record_batches():
    c = response(ApiKey.FETCH).cls
    r = c(responses=[c.FetchableTopicResponse(topic="t", partitions=[c.PartitionData(
        partition_index=0, high_watermark=2, records=batch(T0, 2))])])
    recs = to_tree(ApiKey.FETCH, 4, r)["responses"]["t"]["partitions"]["0"]["records"]
    assert recs[0]["count"] == 2 and recs[0]["records"][1]["value"] == b"v1-xxxxx".hex()


def test_normaliser_replaces_named_fields_and_keeps_identity():
    a = Normaliser().apply("Metadata", to_tree(ApiKey.METADATA, 12, metadata((TID1, TID1, TID2), node=7)))
    b = Normaliser().apply("Metadata", to_tree(ApiKey.METADATA, 12, metadata((TID2, TID2, TID1), node=1,
                                                                               host="h2", port=1, cluster="c2",
                                                                               throttle=50)))
    assert compare(a, b) == []
    assert [t["topic_id"] for t in a["topics"].values()] == ["<topic_ids#1>", "<topic_ids#1>", "<topic_ids#2>"]
    assert a["topics"]["t0"]["partitions"]["0"]["replica_nodes"] == ["<node_ids#1>"]


def test_normaliser_sees_a_changed_identity():
    a = Normaliser().apply("Metadata", to_tree(ApiKey.METADATA, 12, metadata((TID1, TID1))))
    b = Normaliser().apply("Metadata", to_tree(ApiKey.METADATA, 12, metadata((TID1, TID2))))
    assert [d.path for d in compare(a, b)] == ["topics[t1].topic_id"]


def test_normaliser_keeps_sentinels_and_records_what_it_touched():
    n = Normaliser()
    tree = n.apply("Metadata", to_tree(ApiKey.METADATA, 12, metadata(node=-1)))
    assert tree["controller_id"] == -1 and tree["brokers"][0]["node_id"] == -1
    assert ("cluster_id", "Metadata", "cluster_id") in n.touched
    assert ("topic_ids", "Metadata", "topics[].topic_id") in n.touched
    assert ("hosts_ports", "Metadata", "brokers[].host") in n.touched
    assert not any(rule == "node_ids" for rule, _, _ in n.touched)


def test_control_batches_carry_the_brokers_clock():
    from kproto.records import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=5, producer_epoch=0, transactional=True, control=True)
    b.append_end_txn_marker(True, 0, timestamp=123456)
    c = response(ApiKey.FETCH).cls
    r = c(responses=[c.FetchableTopicResponse(topic="t", partitions=[c.PartitionData(
        partition_index=0, records=batch(T0, 1) + b.build())])])
    n = Normaliser()
    data, marker = n.apply("Fetch", to_tree(ApiKey.FETCH, 4, r))["responses"]["t"]["partitions"]["0"]["records"]
    assert data["first_timestamp"] == T0  # a producer's timestamp stays
    assert marker["first_timestamp"] == marker["records"][0]["timestamp"] == "<timestamps>"
    assert ("timestamps", "Fetch", "responses[].partitions[].records[].max_timestamp") in n.touched


def test_normaliser_keeps_whether_an_error_message_is_set():
    n = Normaliser()
    assert n.apply("X", {"error_message": None}) == {"error_message": None}
    assert n.apply("X", {"error_message": "boom"}) == {"error_message": "<error_messages>"}


def test_compare_paths_and_lengths():
    diffs = compare({"a": [{"b": 1}, {"b": 2}], "c": 3}, {"a": [{"b": 1}, {"b": 5}, {"b": 6}], "c": 3})
    assert diffs == [Diff("a[1].b", 2, 5), Diff("a.#", 2, 3)]
    assert compare({"x": 1}, {"x": True}) == [Diff("x", 1, True)]
    assert generic_path("a[1].b[22].c") == "a[].b[].c"


DEVS = '''
[[deviation]]
api = "Metadata"
versions = "10-"
path = "topics[].error_code"
reason = "known"

[[deviation]]
api = "19"
path = "<unsupported>"
reason = "not implemented"
'''


def test_deviations_match_api_versions_and_path():
    d = Deviations.parse(DEVS)
    assert d.explain("Metadata", 3, 10, "s", "topics[].error_code").reason == "known"
    assert d.explain("Metadata", 3, 9, "s", "topics[].error_code") is None
    assert d.explain("Metadata", 3, 12, "s", "topics[].name") is None
    assert d.explain("CreateTopics", 19, 3, "*", UNSUPPORTED) is not None


@pytest.mark.parametrize("text", ['[[deviation]]\napi = "X"\npath = "*"\n',
                                  '[[deviation]]\napi = "X"\npath = "*"\nreason = "r"\nwhy = 1\n',
                                  '[[deviation]]\napi = "X"\npath = "*"\nreason = "r"\nversions = "a"\n',
                                  '[[deviation]\n'])
def test_malformed_deviations_are_refused(text):
    with pytest.raises(ValueError):
        Deviations.parse(text)


def _report(devs=""):
    r = Report("a:1", "b:2", {3: range(0, 13)}, {3: range(0, 14), 19: range(0, 8)},
               deviations=Deviations.parse(devs))
    r.results = [CallResult("Metadata.s", 3, 10, "Metadata", [Diff("topics[0].error_code", 3, 0),
                                                               Diff("topics[1].error_code", 3, 0)]),
                 CallResult("Metadata.s", 3, 9, "Metadata", [])]
    r.unsupported = [(3, 13), (19, 2)]
    return r


def test_report_counts_each_api_version_path_once():
    r = _report()
    assert [(f.version, f.path) for f in r.unexplained] == [(10, "topics[].error_code"), (13, UNSUPPORTED),
                                                             (2, UNSUPPORTED)]
    text = r.text()
    assert text.splitlines()[-1] == "3 unexplained"
    assert "| Metadata (3) | 9 | same |" in text
    assert "| Metadata (3) | 10 | differs: topics[].error_code |" in text
    assert "| 19 | CreateTopics | - | 0-7 |" in text


def test_report_applies_the_deviations():
    r = _report(DEVS)
    assert r.unused_deviations() == []
    assert _report(DEVS + '[[deviation]]\napi = "Fetch"\npath = "*"\nreason = "r"\n').unused_deviations()[0].api == "Fetch"
    assert _report(DEVS + '[[deviation]]\napi = "Fetch"\npath = "*"\nreason = "r"\nintermittent = true\n'
                   ).unused_deviations() == []
    assert [(f.api_key, f.version) for f in r.unexplained] == [(3, 13)]
    assert "differs: topics[].error_code (explained)" in r.table()
    assert r.to_json()["unexplained"] == 1


def _o(label, tree, compare=True, key=3, ver=10):
    return _Outcome(label, key, ver, compare, tree)


def test_transcripts_are_matched_call_by_call():
    s = Scenario("Metadata.s", 3, lambda ctx: iter(()))
    r = Report("a", "b", {}, {})
    _record(r, s, 10, [_o("Metadata", {"x": 1}), _o("Metadata 2", {"x": 1})],
            [_o("Metadata", {"x": 2}), _o("Metadata 2", {"x": 1})])
    assert [(c.label, [d.path for d in c.diffs]) for c in r.results] == [
        ("Metadata.s", []), ("Metadata", ["x"]), ("Metadata 2", [])]


def test_a_failed_call_ends_the_comparison():
    s = Scenario("Metadata.s", 3, lambda ctx: iter(()))
    r = Report("a", "b", {}, {})
    _record(r, s, 10, [_o("setup", {"<error>": "ConnectionClosedError"}, compare=False)],
            [_o("setup", {"ok": 1}, compare=False), _o("Metadata", {"x": 1})])
    assert [d for c in r.results for d in c.diffs] == [Diff("<error setup>", "ConnectionClosedError", "answered")]
    r = Report("a", "b", {}, {})
    _record(r, s, 10, [_o("Metadata", {"x": 1})], [_o("Metadata", {"x": 1}), _o("Metadata 2", {"x": 1})])
    assert [d.path for c in r.results for d in c.diffs] == ["<sequence>[1]"]


def test_build_makes_nested_structs_and_refuses_unknown_fields():
    req = build(ApiKey.METADATA, topics=[{"name": "a"}], allow_auto_topic_creation=False)
    assert req.topics[0].name == "a" and type(req.topics[0]).__name__ == "MetadataRequestTopic"
    with pytest.raises(TypeError):
        build(ApiKey.METADATA, topics=[{"nmae": "a"}])


def test_scenario_names_are_unique_and_documented():
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names))
    assert all(s.doc for s in SCENARIOS)


def test_parse_address():
    assert parse_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_address("[::1]:1") == ("::1", 1)
    with pytest.raises(ValueError):
        parse_address("localhost")


def test_build_drops_the_fields_a_version_does_not_have():
    req = build(ApiKey.FIND_COORDINATOR, 3, key="g", key_type=0, coordinator_keys=["g"])
    assert req.key == "g" and req.coordinator_keys == []
    req = build(ApiKey.FIND_COORDINATOR, 4, key="g", key_type=0, coordinator_keys=["g"])
    assert req.key == "" and req.coordinator_keys == ["g"]


def test_a_kit_error_is_a_difference_even_when_both_sides_agree():
    from kproto.conformance.runner import KIT_ERROR
    s = Scenario("Metadata.s", 3, lambda ctx: iter(()))
    r = Report("a", "b", {}, {})
    err = {KIT_ERROR: "EncodeError: no"}
    _record(r, s, 10, [_o("Metadata", err)], [_o("Metadata", err)])
    assert [d.path for c in r.results for d in c.diffs] == [f"{KIT_ERROR}[0]"]


def test_deviation_paths_take_brackets_literally():
    d = Deviations.parse('[[deviation]]\napi = "Fetch"\npath = "responses[].partitions[].*"\nreason = "r"\n')
    assert d.explain("Fetch", 1, 4, "s", "responses[].partitions[].high_watermark")
    assert not d.explain("Fetch", 1, 4, "s", "responses[].high_watermark")
    assert not d.explain("Fetch", 1, 4, "s", "responsesX.partitions[].high_watermark")


def test_summary_table_groups_versions_per_api():
    r = _report(DEVS)
    r.results.append(CallResult("Metadata.s", 3, 8, "Metadata", []))
    rows = r.summary_table().splitlines()
    assert "| Metadata (3) | 8-9 | 10 | 13 | topics[].error_code (explained) |" in rows
    assert "| CreateTopics (19) |  |  | 2 |  |" in rows


# -- cluster mode --------------------------------------------------------------------------------
def test_cluster_normaliser_compares_node_ids_by_role():
    a = {"brokers": [{"node_id": 7}], "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 7, "replica_nodes": [7, 9, 8], "isr_nodes": [9, 7]}]}]}
    b = {"brokers": [{"node_id": 2}], "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "leader_id": 3, "replica_nodes": [1, 2, 3], "isr_nodes": [3, 1]}]}]}
    na, nb = Normaliser(cluster=True), Normaliser(cluster=True)
    ta, tb = na.apply("Metadata", a), nb.apply("Metadata", b)
    assert ta == tb
    part = ta["topics"][0]["partitions"][0]
    assert part["leader_id"] == "<leader>"
    assert part["replica_nodes"] == ["<follower>", "<follower>", "<leader>"]
    assert ta["brokers"][0]["node_id"] == "<broker>"
    assert ("node_roles", "Metadata", "topics[].partitions[].replica_nodes") in na.touched
    # a leader that is not in the ISR is seen, where numbering by first appearance hides it
    c = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "leader_id": 3, "replica_nodes": [1, 2, 3],
                                                  "isr_nodes": [1, 2]}]}]}
    assert compare(Normaliser(cluster=True).apply("Metadata", c), tb) != []
    # FindCoordinator's node is the coordinator
    assert Normaliser(cluster=True).apply("FindCoordinator", {"node_id": 5})["node_id"] == "<coordinator>"
    # single-node mode keeps numbering ids
    assert Normaliser().apply("Metadata", a)["brokers"][0]["node_id"] == "<node_ids#1>"


def test_cluster_routing_plan():
    import asyncio

    from kproto.conformance.runner import _Side
    from kproto.conformance.scenario import Call

    side = _Side("x", ("127.0.0.1", 1), 1, 1.0, cluster=True)
    side.nodes = {1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}
    side.leaders = {"t": 2}
    side.coordinators = {(0, "g1"): 1, (0, "g2"): 3, (1, "tx"): 3}

    def plan(api_key, version, **fields):
        return asyncio.run(side.plan(Call(api_key, version, build(api_key, version, **fields))))

    assert plan(ApiKey.PRODUCE, 9, acks=-1, timeout_ms=1, topic_data=[{"name": "t", "partition_data": []}])[0][0][0] == 2
    assert plan(ApiKey.JOIN_GROUP, 5, group_id="g2", protocol_type="consumer")[0][0][0] == 3
    assert plan(ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="tx")[0][0][0] == 3
    # AddOffsetsToTxn names a group but goes to the transaction coordinator
    assert plan(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", group_id="g1")[0][0][0] == 3
    # a request for two groups with two coordinators is split, the answers merged
    parts, merge = plan(ApiKey.DESCRIBE_GROUPS, 5, groups=["g1", "g2"])
    assert sorted((n, list(b.groups)) for n, b in parts) == [(1, ["g1"]), (3, ["g2"])] and merge == "groups"
    parts, merge = plan(ApiKey.LIST_GROUPS, 4)
    assert [n for n, _ in parts] == [1, 2, 3] and merge == "groups"
    # admin requests and unknown topics go to the bootstrap broker
    assert plan(ApiKey.METADATA, 12, topics=[])[0][0][0] is None
    assert plan(ApiKey.LIST_OFFSETS, 7, topics=[{"name": "other", "partitions": []}])[0][0][0] is None
