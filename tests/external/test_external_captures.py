"""Real captures from other projects' repositories ($KPROTO_EXTERNAL/captures): every request
and response whose bytes are captured is decoded, and the problems reported are the ones really
there. The facts were checked by hand against the raw TCP payloads (size, API key, version and
correlation id at the head of each segment) and the sources' descriptions."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from kproto.capture import iter_exchanges
from kproto.capture.records_view import records_json
from kproto.cli.main import main

from external_support import CAPTURES

FILES = sorted(str(p.relative_to(CAPTURES)) for p in CAPTURES.rglob("*.pcap*"))

_NO_SESSION = "incremental fetch on session {} whose creation was not captured: partition set incomplete"

# (kind, API, version, correlation id, client id, errors, problems) per exchange, capture order
FACTS = {
    "arkime/kafka.pcap": [
        # one ListOffsets v0 request on a VLAN; the broker's 71-byte answer was acknowledged
        # by the client but is not in the capture
        ("kafka", "ListOffsets", 0, 0, "", [], ["no response: the connection was closed"]),
        ("stream", None, None, None, None, [],
         ["broker->client: 71 bytes missing from the capture (acknowledged but not captured); "
          "looking for the next frame"]),
    ],
    "deepflow/00-produce-v2.pcap": [
        ("kafka", "Produce", 2, 1, "console-producer", [], [])],
    "deepflow/00-produce-v7-sw8.pcap": [
        ("kafka", "Produce", 7, 1, "kafka-python-producer-1", [], [])],
    "deepflow/00-produce-v9.pcap": [
        ("kafka", "Produce", 9, 47, "console-producer", [], [])],
    "deepflow/01-fetch-v12-ok.pcap": [
        ("kafka", "Fetch", 12, 15603, "consumer-console-consumer-8919-1", [],
         [_NO_SESSION.format(791048645)])],
    "deepflow/01-fetch-v12-perf.pcap": [
        ("kafka", "Fetch", 12, 20, "consumer-console-consumer-84107-1", [],
         [_NO_SESSION.format(43854734)])],
    "deepflow/01-fetch-v12-unknown.pcap": [
        # the same exchange with an error code no Kafka release defines
        ("kafka", "Fetch", 12, 20, "consumer-console-consumer-84107-1", ["UNKNOWN_ERROR_5120"],
         [_NO_SESSION.format(43854734)])],
    "deepflow/11-join-group-v7.pcap": [
        ("kafka", "JoinGroup", 7, 120, "consumer-zzzz12-1", ["UNKNOWN_SERVER_ERROR"], [])],
    "deepflow/13-leave-group-v4.pcap": [
        ("kafka", "LeaveGroup", 4, 201, "consumer-zzzz12-1", [], [])],
    "deepflow/14-sync-group-v5.pcap": [
        ("kafka", "SyncGroup", 5, 120, "consumer-zzzz12-1", ["UNKNOWN_SERVER_ERROR"], [])],
    "deepflow/18-api-versions-v3.pcap": [
        ("kafka", "ApiVersions", 3, 2, "adminclient-1", [], [])],
    "deepflow/mixed-with-unsupported.pcap": [
        ("kafka", "OffsetCommit", 8, 15551977, "consumer-frauddetectionservice-1", [], []),
        ("kafka", "Heartbeat", 4, 15551978, "consumer-frauddetectionservice-1", [], []),
        ("kafka", "Fetch", 13, 15551976, "consumer-frauddetectionservice-1", [],
         [_NO_SESSION.format(1191256040)]),
    ],
    "deepflow/produce-v9.old-b3b9b608.pcap": [
        ("kafka", "Produce", 9, 5, "console-producer", [],
         ["no response: the capture ended with the connection still open"])],
    "go-sniffer/kafka.pcap": [
        # Linux cooked capture, kafka-python with magic 0 message sets
        ("kafka", "Metadata", 0, 1, "kafka-python-producer-1", [], []),
        ("kafka", "Produce", 1, 1, "kafka-python-producer-1", [], []),
    ],
}


def test_every_external_capture_has_facts():
    assert FILES == sorted(FACTS)


@pytest.mark.parametrize("name", FILES)
def test_exchanges(name):
    got = list(iter_exchanges(str(CAPTURES / name)))
    assert [(e.kind, e.api_name, e.api_version, e.correlation_id, e.client_id, e.errors,
             e.problems.reasons()) for e in got] == FACTS[name]
    for e in got:
        if e.kind != "kafka":
            continue
        assert e.request is not None and not e.notes  # every request captured is decoded
        if e.response_bytes:
            assert e.response is not None
            assert e.latency_ms is not None and e.latency_ms >= 0


@pytest.mark.parametrize("name", FILES)
def test_records_inside_produce_requests_decode(name):
    for e in iter_exchanges(str(CAPTURES / name)):
        if e.api_name != "Produce":
            continue
        doc = e.to_json(records=records_json)
        for topic in doc["request"]["topicData"]:
            for part in topic["partitionData"]:
                recs = part["records"]
                assert recs["batches"] and recs["records"], recs
                assert "errors" not in recs and "notes" not in recs
                assert all(b["is_valid"] for b in recs["batches"])


@pytest.mark.parametrize("name", FILES)
def test_decode_pcap_cli(name):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["decode-pcap", "--format", "jsonl", "--no-progress", str(CAPTURES / name)])
    assert rc == 0
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert len(lines) == len(FACTS[name])
