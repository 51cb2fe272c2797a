"""API versions of the newest Kafka release are decoded exactly; a version newer than the schemas
is read best effort with the newest layout kproto knows. librdkafka 2.16 speaks Kafka 4.x's
Metadata v13: its exchanges with librdkafka's mock broker are read with the v13 layout (Kafka
4.4.0's, as 4.3.1's) without a problem; the same exchanges relabelled v14 (newer than the schemas, with a
field appended to the answer) are read with the v13 layout, what it leaves reported."""
from __future__ import annotations


import kproto
import pytest

from capture_support import ALL, CAPTURES, decode_pcap_cli, decoded, truth, tshark_summary
from kproto.capture import BodyDecoder, CaptureDecoder
from pcapgen import Conversation, packets_of, write_pcap

MOCK = "ck_mock3_all.pcap"
METADATA = 3
_REQ_HEADER, _RESP_HEADER = kproto.message("RequestHeader"), kproto.message("ResponseHeader")
NEWER_FIELD = b"\x00\x2a\x00\x00\x00\x07"   # what a v14 might add at the end of the answer


def _reasons(items) -> list:
    """The texts of an exchange's problems or notes."""
    return [getattr(p, "reason", p) for p in items]


def _body(data: bytes, header, header_version: int) -> bytes:
    return data[header.decode_from(data, 0, header_version)[1]:]


def _v13():
    assert MOCK in ALL
    exchanges, _ = decoded(MOCK)
    v13 = [e for e in exchanges if e.api_key == METADATA and e.api_version == 13]
    want = [x["in_stream"] for x in tshark_summary(MOCK)["by_api"]
            if x["direction"] == "request" and (x["api_key"], x["version"]) == (METADATA, 13)]
    assert len(v13) == sum(want) > 0
    return v13


def test_mock_metadata_v13_decoded_exactly():
    assert kproto.request(METADATA).release(13) == "4.4.0"
    ports = set(truth(MOCK)["kafka_ports"])
    cluster_ids = set()
    for e in _v13():
        assert e.decoded_as is None and not e.problems
        assert not any("newer" in n for n in _reasons(e.notes))
        # the request is read and written back byte for byte, up to the 3 bytes librdkafka
        # writes after a v13 body asking for every topic (a note, kept)
        body = _body(e.request_data, _REQ_HEADER, 2)
        off = len(body)
        if "request" in e.unread:
            assert e.request.topics is None and e.unread["request"] == (4, 3, b"\x01\x00\x00")
            off = 4
        assert kproto.request(METADATA).encode(e.request, 13) == body[:off]
        # the answer too, but for one byte the mock writes after the v13 body (a note, kept)
        assert {b.port for b in e.response.brokers} == ports and e.response.error_code == 0
        cluster_ids.add(e.response.cluster_id)
        body = _body(e.response_data, _RESP_HEADER, 1)
        assert e.unread["response"] == (len(body) - 1, 1, b"\x00")
        assert kproto.response(METADATA).encode(e.response, 13) == body[:-1]
        doc = e.to_json()
        assert doc["decoded_as"] is None and doc["response"]["clusterId"] == e.response.cluster_id
        assert doc["response"]["errorCode"] == 0 and not doc["problems"]
    assert len(cluster_ids) == 1 and cluster_ids.pop()


def _frame(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _relabelled_v14(tmp_path=None):
    """The mock's Metadata v13 exchanges as v14: the request's version changed, a field appended
    to each answer; decoded, and written to a pcap when ``tmp_path`` is given."""
    top = kproto.request(METADATA).valid_versions[-1]
    assert top == 13
    v13 = _v13()
    conv = Conversation()
    for corr, e in enumerate(v13, 1):     # one connection: correlation ids made unique
        c = corr.to_bytes(4, "big")
        req = e.request_data[:2] + (top + 1).to_bytes(2, "big") + c + e.request_data[8:]
        conv.send(True, _frame(bytes(req)))
        conv.send(False, _frame(c + bytes(e.response_data[4:]) + NEWER_FIELD))
    conv.close()
    dec = CaptureDecoder([9092], decode=BodyDecoder())
    got = [e for e in dec.feed_all(packets_of(conv.frames())) if e.api_key == METADATA]
    path = None
    if tmp_path is not None:
        path = tmp_path / "metadata_v14.pcap"
        path.write_bytes(write_pcap(conv.frames()))
    return v13, got, path


def test_newer_metadata_decoded_with_the_newest_layout():
    top = kproto.request(METADATA).valid_versions[-1]
    v13, v14, _ = _relabelled_v14()
    assert len(v14) == len(v13)
    ports = set(truth(MOCK)["kafka_ports"])
    for old, e in zip(v13, v14):
        assert e.api_version == top + 1 and e.decoded_as == top
        assert e.request is not None and e.response is not None
        # the request: what the v13 layout read is the body, byte for byte, up to any unread tail
        body = _body(e.request_data, _REQ_HEADER, 2)
        assert e.request == old.request
        if "request" in e.unread:
            off, n, head = e.unread["request"]
            assert off + n == len(body) and head == body[off:off + 64]
            assert f"request: {n} bytes at body offset {off} not understood" in \
                " ".join(_reasons(e.problems))
        else:
            off = len(body)
            assert any(f"Metadata v{top + 1} is newer" in x and "request" in x
                       for x in _reasons(e.notes))
        assert kproto.request(METADATA).encode(e.request, top) == body[:off]
        # the answer keeps what the known layout reads; the bytes after it are reported
        assert {b.port for b in e.response.brokers} == ports and e.response == old.response
        body = _body(e.response_data, _RESP_HEADER, 1)
        off, n, head = e.unread["response"]
        assert n == 1 + len(NEWER_FIELD) and off + n == len(body) and head == b"\x00" + NEWER_FIELD
        assert f"response: {n} bytes at body offset {off} not understood" in " ".join(_reasons(e.problems))
        doc = e.to_json()
        assert doc["decoded_as"] == top and doc["response"]["clusterId"] == e.response.cluster_id
        assert doc["unread"]["response"] == {"offset": off, "length": n, "hex": head.hex()}


def _metadata_row(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Metadata(3)"))


@pytest.mark.parametrize("best_effort", [True, False])
def test_cli_summary_shows_the_layout_used(tmp_path, best_effort):
    switch = [] if best_effort else ["--no-best-effort"]
    # the mock's Metadata v13: Kafka 4.4.0's layout (as 4.3.1's), no problem either way
    row = _metadata_row(decode_pcap_cli(tmp_path, str(CAPTURES / MOCK), "--summary", *switch))
    n = len(_v13())
    assert f"v13×{n}" in row and "(as" not in row
    assert row.split()[6] == "0"      # the problems column
    # relabelled v14: read as v13 with best effort, left undecoded without
    _, _, pcap = _relabelled_v14(tmp_path)
    row = _metadata_row(decode_pcap_cli(tmp_path, str(pcap), "--port", "9092", "--summary", *switch))
    assert (f"v14 (as v13)×{n}" in row) is best_effort
    assert (f"v14×{n}" in row) is not best_effort


def test_kafka_4_4_only_requests_in_a_capture_are_decoded():
    """Traffic only Kafka 4.4 speaks (ApiVersions v5 naming a cluster and node, UnregisterController
    v0, DeleteGroups v3 with a per-group message), framed into a synthetic capture: every exchange
    decoded, without a problem, to the bodies that were sent."""
    from pcapgen import request_frame, response_frame
    api_versions = kproto.request(18).cls(client_software_name="kproto", client_software_version="1",
                                          cluster_id="c-44", node_id=3)
    unregister = kproto.request(94).cls(controller_id=3000)
    dg = kproto.response(42).cls
    deleted = dg(results=[dg.DeletableGroupResult(group_id="g", error_code=69, error_message="Group g not found.")])
    sent = [(18, 5, api_versions, kproto.response(18).cls(error_code=129)),
            (94, 0, unregister, kproto.response(94).cls(error_code=136, error_message="no such controller")),
            (42, 3, kproto.request(42).cls(groups_names=["g"]), deleted)]
    conv = Conversation()
    for corr, (key, ver, req, resp) in enumerate(sent, 1):
        conv.send(True, request_frame(key, ver, corr, req))
        conv.send(False, response_frame(key, ver, corr, resp))
    conv.close()
    got = {e.correlation_id: e for e in CaptureDecoder([9092], decode=BodyDecoder(best_effort=False))
           .feed_all(packets_of(conv.frames()))}
    assert sorted(got) == [1, 2, 3]
    for corr, (key, ver, req, resp) in enumerate(sent, 1):
        e = got[corr]
        assert not e.problems, e.problems
        assert (e.api_key, e.api_version, e.request, e.response) == (key, ver, req, resp)
