"""The kit run over sockets: kproto's broker against kproto's broker must give no difference
at all; a difference injected into one of them must be found, and explained by a deviation."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from kproto.broker.core import Intercept
from kproto.cli.main import main
from kproto.conformance import Deviations, SCENARIOS, parse_address, run_conformance
from kproto.schemas.api_keys import ApiKey
from kproto.testing import TEST_DEFAULTS, BrokerThread



@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    a = BrokerThread(tmp_path_factory.mktemp("target"), **TEST_DEFAULTS).start()
    b = BrokerThread(tmp_path_factory.mktemp("reference"), **TEST_DEFAULTS).start()
    yield a, b
    a.stop()
    b.stop()


def test_kproto_against_itself_has_no_difference(brokers):
    a, b = brokers
    t0 = time.monotonic()
    report = asyncio.run(run_conformance(parse_address(a.bootstrap), parse_address(b.bootstrap)))
    elapsed = time.monotonic() - t0
    assert report.findings() == [], report.text()
    assert report.text().splitlines()[-1] == "0 unexplained"
    # skipped: the ACL scenarios (no authorizer), and those of APIs kproto's broker does not
    # advertise (the reference here is kproto's broker too)
    assert set(report.skipped) == {s.name for s in SCENARIOS
                                   if s.needs_authorizer or s.api_key not in report.reference_versions}
    assert "authorizer" in report.skipped["DescribeAcls.describe_acls"]
    assert "UnregisterController.unregister_controller_unknown" in report.skipped
    ran = {r.scenario for r in report.results}
    assert ran == {s.name for s in SCENARIOS} - set(report.skipped)
    # every version both advertise: e.g. all of Metadata's and JoinGroup's
    cells = {(r.api_key, r.version) for r in report.results}
    assert {v for k, v in cells if k == ApiKey.METADATA} == set(range(0, 14))
    assert {v for k, v in cells if k == ApiKey.JOIN_GROUP} == set(range(0, 10))
    assert any(rule == "topic_ids" for rule, _, _ in report.normalised)
    assert elapsed < 60


def test_an_injected_difference_is_found_and_can_be_explained(brokers, tmp_path):
    a, b = brokers
    other, own = tmp_path / "other.toml", tmp_path / "own.toml"
    other.write_text('[[deviation]]\napi = "Metadata"\npath = "*"\nreason = "unrelated"\n')
    own.write_text('[[deviation]]\napi = "DescribeCluster"\npath = "*"\nreason = "injected by the test"\n')
    hook = a.control(ApiKey.DESCRIBE_CLUSTER, Intercept(error=58), times=None)
    try:
        report = asyncio.run(run_conformance(parse_address(a.bootstrap), parse_address(b.bootstrap),
                                             select=["DescribeCluster.*"]))
        explained = asyncio.run(run_conformance(
            parse_address(a.bootstrap), parse_address(b.bootstrap), select=["DescribeCluster.*"],
            deviations=Deviations.parse('[[deviation]]\napi = "DescribeCluster"\npath = "*"\n'
                                        'reason = "injected by the test"\n')))
        rc = main(["conformance", "--target", a.bootstrap, "--reference", b.bootstrap,
                   "--scenario", "DescribeCluster.*"])
        # --deviations is repeatable: every file counts, not only the last
        rc_explained = main(["conformance", "--target", a.bootstrap, "--reference", b.bootstrap,
                             "--scenario", "DescribeCluster.*", "--deviations", str(own),
                             "--deviations", str(other)])
    finally:
        hook.remove()
    assert rc == 1  # the command fails while a difference is unexplained
    assert rc_explained == 0
    # an error answer: the code, and the brokers and ids it leaves out
    found = {f.path: f for f in report.unexplained}
    assert {f.api for f in report.unexplained} == {"DescribeCluster"}
    assert {"error_code", "brokers.#"} <= set(found)
    assert (found["error_code"].example.target, found["error_code"].example.reference) == (58, 0)
    assert explained.unexplained == [] and explained.findings()
    assert "error_code (explained)" in explained.table()


def test_cli(brokers, tmp_path, capsys):
    a, b = brokers
    out = tmp_path / "r.json"
    rc = main(["conformance", "--target", a.bootstrap, "--reference", b.bootstrap,
               "--scenario", "ListOffsets.*", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and text.rstrip().endswith("0 unexplained")
    assert "| ListOffsets (2) | 9 | same |" in text
    doc = json.loads(out.read_text())
    assert doc["unexplained"] == 0 and doc["api_versions"]["2"]["target"] == [1, 11]
    assert main(["conformance", "--list"]) == 0
    assert "Produce.produce_idempotent" in capsys.readouterr().out


def test_the_run_waits_until_the_leader_serves_the_new_topics(brokers):
    """Apache Kafka's Metadata shows a new partition's leader a moment before that broker
    serves it (Produce, Fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER until then): the
    run waits, so a scenario's first batch is not lost on one side only."""
    a, b = brokers
    state = {"probes": 0}

    def until_probed(header, body):
        if header.request_api_key == ApiKey.LIST_OFFSETS and state["probes"] < 3:
            state["probes"] += 1
            return Intercept(error=6)  # NOT_LEADER_OR_FOLLOWER
        return None if state["probes"] >= 3 else Intercept(error=6)
    hooks = [b.control(key, until_probed, times=None) for key in (ApiKey.LIST_OFFSETS, ApiKey.PRODUCE)]
    try:
        report = asyncio.run(run_conformance(parse_address(a.bootstrap), parse_address(b.bootstrap),
                                             select=["Produce.produce_idempotent"]))
    finally:
        for h in hooks:
            h.remove()
    assert state["probes"] == 3
    assert report.results and report.findings() == [], report.text()


def test_the_set_up_takes_producer_id_0_before_any_scenario(tmp_path):
    """A fresh broker hands out producer id 0 first, and 0 is also what Kafka answers as a
    default (DescribeTransactions of an unknown id): the set-up takes it, so no scenario's
    producer id can be confused with that default on one side only."""
    seen = []

    def record(header, body):
        seen.append(body.transactional_id)
        return None
    with BrokerThread(tmp_path / "a", **TEST_DEFAULTS) as a, BrokerThread(tmp_path / "b", **TEST_DEFAULTS) as b:
        hook = a.control(ApiKey.INIT_PRODUCER_ID, record, times=None)
        report = asyncio.run(run_conformance(parse_address(a.bootstrap), parse_address(b.bootstrap),
                                             select=["DescribeTransactions.*"]))
        hook.remove()
    assert report.findings() == [], report.text()
    assert seen[0] is None and len(seen) > 1 and all(t is not None for t in seen[1:])
