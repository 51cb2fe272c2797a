"""Topic ids (Fetch v13+, Produce v13) named from the Metadata responses of the capture: per
cluster, across connections, shown as ``topicName`` beside ``topicId``; an id nothing named is a
note, not a problem. Checked on the real captures against their truth files, and on exchanges
built here."""
from __future__ import annotations

import base64
import json
from collections import Counter

import pytest

import kproto
from capture_support import ALL, decoded, truth
from kproto.capture import BodyDecoder
from kproto.capture.api import exchange_to_json
from kproto.capture.exchange import Endpoint, Exchange
from kproto.capture.records_view import records_json
from kproto.codecs.primitives import Uuid

pytestmark = pytest.mark.skipif(not ALL, reason="unreachable: test_captures_present fails instead")

#: The captures whose clients fetch by topic id (Fetch v13+): librdkafka 2.16 (v16) and the
#: Java client 3.9.1 (v17). None of them produces by id (Produce v13).
BY_ID = ["ck_group_admin_tansu.pcapng", "ck_idempotent_txn_tansu.pcap", "ck_mock3_all.pcap",
         "java_tansu.pcapng"]


def _kafka(name):
    return [e for e in decoded(name)[0] if e.kind == "kafka"]


def test_which_captures_fetch_by_id():
    by_id = sorted(n for n in ALL if any(e.api_key in (0, 1) and e.api_version >= 13
                                         for e in _kafka(n)))
    assert by_id == BY_ID
    assert not [e for n in ALL for e in _kafka(n) if e.api_key == 0 and e.api_version >= 13]


def _topics(doc):
    if not doc:
        return []
    return (doc.get("topics") or []) + (doc.get("responses") or []) + \
        (doc.get("forgottenTopicsData") or [])


@pytest.mark.parametrize("name", BY_ID)
def test_fetch_by_id_shows_names_equal_to_truth(name):
    t = truth(name)
    produced = {(r["topic"], r["partition"], r["offset"]): r for r in t["records_produced"]}
    fetched: Counter = Counter()
    named = 0
    for e in _kafka(name):
        if e.api_key != 1:
            continue
        assert e.api_version >= 13
        assert not [n for n in e.notes if n.kind == "topic"], e.notes.reasons()
        assert not [p for p in e.problems if p.kind == "topic"]
        doc = exchange_to_json(e, records=records_json)
        topics = [(side, tp) for side in ("request", "response") for tp in _topics(doc[side])]
        named += len(topics)  # an empty fetch (a Java client's long poll) names no topic
        for side, tp in topics:
            keys = list(tp)
            assert keys[keys.index("topicId") + 1] == "topicName"  # beside the id
            assert tp["topicName"] == e.topic_names[tp["topicId"]]
            assert tp["topicName"] in {r["topic"] for r in t["records_produced"]}
            if side != "response":
                continue
            for p in tp["partitions"]:
                batches = p["records"]["batches"]
                for rec in p["records"]["records"]:
                    if batches[rec["batch_index"]]["is_control"]:
                        continue  # a transaction marker
                    want = produced.get((tp["topicName"], p["partitionIndex"], rec["offset"]))
                    value = base64.b64decode(rec["value"]).decode()
                    if want is not None:
                        assert value == want["value"]
                    else:  # a record of an aborted transaction or of a producer without offsets
                        assert any(r["value"] == value and r["topic"] == tp["topicName"]
                                   for r in t["records_produced"])
                    fetched[tp["topicName"]] += 1
    assert named and fetched  # records were fetched, each from a named topic
    for group in t.get("records_consumed") or []:
        assert {r["topic"] for r in group["records"]} <= set(fetched)


def test_ids_resolved_across_connections():
    """ck_mock3_all: three brokers; Fetch on connections that carried no Metadata response are
    named by Metadata answered on other connections (the same cluster)."""
    ex = _kafka("ck_mock3_all.pcap")
    with_metadata = {(e.client, e.broker) for e in ex if e.api_key == 3 and e.response is not None}
    elsewhere = [e for e in ex if e.api_key == 1 and (e.client, e.broker) not in with_metadata]
    assert elsewhere
    assert all(e.topic_names and set(e.topic_names.values()) == {"ckm-t"} for e in elsewhere)
    brokers = {e.broker for e in elsewhere}
    assert len({e.broker for e in ex if e.api_key == 1}) > 1 and brokers


def test_decode_pcap_cli_shows_topic_names(tmp_path):
    from capture_support import CAPTURES
    from kproto.cli.main import main

    out = tmp_path / "out.jsonl"
    assert main(["decode-pcap", str(CAPTURES / "java_tansu.pcapng"), "--format", "jsonl",
                 "--records", "--api", "Fetch", "--no-progress", "-o", str(out)]) == 0
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert docs and all(tp["topicName"] == "java-t" for d in docs
                        for side in ("request", "response") for tp in _topics(d[side]))


# -- exchanges built here ---------------------------------------------------------------------

A, B, C = (Endpoint(bytes([127, 0, 0, 1]), port) for port in (9092, 9093, 9094))
ID1, ID2 = Uuid(bytes([1] * 16)), Uuid(bytes([2] * 16))


def _exchange(broker, api_key, version, request, response, client_port=50000):
    hdr = kproto.RequestHeader(request_api_key=api_key, request_api_version=version,
                               correlation_id=7, client_id="t")
    req = kproto.encode_request(hdr, request)[4:]
    resp = kproto.encode_response(kproto.ResponseHeader(correlation_id=7), response,
                                  api_key, version)[4:]
    return Exchange(Endpoint(bytes([127, 0, 0, 1]), client_port), broker, api_key=api_key,
                    api_version=version, correlation_id=7, client_id="t", request_data=req,
                    response_data=resp, request_bytes=len(req) + 4, response_bytes=len(resp) + 4)


def _metadata(broker, cluster, topics, brokers=(), client_port=50000):
    rq, rs = kproto.request(3).cls, kproto.response(3).cls
    resp = rs(cluster_id=cluster, brokers=[rs.MetadataResponseBroker(node_id=i, host=h, port=p)
                                           for i, (h, p) in enumerate(brokers)],
              topics=[rs.MetadataResponseTopic(name=n, topic_id=tid) for tid, n in topics])
    return _exchange(broker, 3, 12, rq(topics=None), resp, client_port)


def _fetch(broker, tid, client_port=50001):
    rq, rs = kproto.request(1).cls, kproto.response(1).cls
    req = rq(topics=[rq.FetchTopic(topic_id=tid, partitions=[rq.FetchPartition(partition=0)])])
    resp = rs(responses=[rs.FetchableTopicResponse(topic_id=tid, partitions=[
        rs.PartitionData(partition_index=0)])])
    return _exchange(broker, 1, 16, req, resp, client_port)


def _produce(broker, tid, client_port=50002):
    rq, rs = kproto.request(0).cls, kproto.response(0).cls
    req = rq(acks=-1, topic_data=[rq.TopicProduceData(topic_id=tid, partition_data=[
        rq.PartitionProduceData(index=0, records=None)])])
    resp = rs(responses=[rs.TopicProduceResponse(topic_id=tid, partition_responses=[
        rs.PartitionProduceResponse(index=0)])])
    return _exchange(broker, 0, 13, req, resp, client_port)


def _run(*exchanges):
    dec = BodyDecoder()
    for e in exchanges:
        dec(e)
        assert e.request is not None and e.response is not None and not e.problems, e
    return exchanges


def test_unnamed_id_is_a_note_not_a_problem():
    (f,) = _run(_fetch(A, ID1))
    assert not f.problems and f.topic_names == {}
    assert [n.kind for n in f.notes] == ["topic"]
    assert str(ID1) in f.notes.reasons()[0] and "not resolved" in f.notes.reasons()[0]
    doc = f.to_json()
    assert "topicName" not in doc["request"]["topics"][0] and doc["problems"] == []


def test_metadata_on_one_connection_names_fetch_and_produce_on_another():
    _m, f, p = _run(_metadata(A, "c1", [(ID1, "orders")], [("127.0.0.1", 9092),
                                                         ("127.0.0.1", 9093)]),
                    _fetch(B, ID1), _produce(B, ID1))
    for e, fields in ((f, ("topics", "responses")), (p, ("topicData", "responses"))):
        assert e.topic_names == {str(ID1): "orders"} and not e.notes
        doc = e.to_json()
        for side, field in zip(("request", "response"), fields):
            tp = doc[side][field][0]
            assert list(tp)[:2] == ["topicId", "topicName"] and tp["topicName"] == "orders"
    assert f.fetch_session["partitions"] == ["orders-0"]


def test_ids_are_per_cluster():
    """The same id named differently by two clusters (made up: ids are random) is named per
    cluster; a broker of no known cluster gets no name rather than a guess."""
    _m1, _m2, f1, f2, f3 = _run(
        _metadata(A, "c1", [(ID1, "one")], [("127.0.0.1", 9092)]),
        _metadata(B, "c2", [(ID1, "two"), (ID2, "only")], [("127.0.0.1", 9093)]),
        _fetch(A, ID1), _fetch(B, ID1), _fetch(C, ID1))
    assert f1.topic_names == {str(ID1): "one"} and f2.topic_names == {str(ID1): "two"}
    assert f3.topic_names == {} and [n.kind for n in f3.notes] == ["topic"]
    (f4,) = _run(_fetch(C, ID2))  # a fresh decoder: nothing known
    assert f4.topic_names == {}


def test_unknown_broker_falls_back_to_the_only_name():
    _m, f = _run(_metadata(A, "c1", [(ID2, "only")], [("localhost", 9092)]), _fetch(C, ID2))
    assert f.topic_names == {str(ID2): "only"} and not f.notes


def test_share_fetch_records_are_rows_of_the_record_table():
    """A ShareFetch response names its topic by id only: its records are rows of the record
    table (what ``decode-pcap``'s Arrow output and the pcap data source yield) under the name
    the capture's Metadata gave, at the offsets of their batch."""
    from kproto.capture import table
    from kproto.records.builder import RecordBatchBuilder

    batch = RecordBatchBuilder(base_offset=40)
    for i in range(3):
        batch.append(1_700_000_000_000 + i, f"k{i}".encode(), f"shared-{i}".encode())
    rq, rs = kproto.request(78).cls, kproto.response(78).cls
    req = rq(group_id="g", member_id="m", share_session_epoch=0, topics=[
        rq.FetchTopic(topic_id=ID1, partitions=[rq.FetchPartition(partition_index=2)])])
    resp = rs(responses=[rs.ShareFetchableTopicResponse(topic_id=ID1, partitions=[
        rs.PartitionData(partition_index=2, records=batch.build(), acquired_records=[
            rs.AcquiredRecords(first_offset=40, last_offset=42, delivery_count=1)])])])
    _m, share = _run(_metadata(A, "c1", [(ID1, "queue")], [("127.0.0.1", 9092)]),
                     _exchange(A, 78, 1, req, resp, 50003))
    assert share.topic_names == {str(ID1): "queue"} and not share.notes
    rows = [b.to_pylist() for b in table.record_batches([share], "f")]
    assert [(r["topic"], r["topic_id"], r["partition"], r["offset"], r["value"]) for r in rows[0]] == \
        [("queue", str(ID1), 2, 40 + i, f"shared-{i}".encode()) for i in range(3)]
    assert table.exchange_records(share).column("value").to_pylist() == [r["value"] for r in rows[0]]
