"""Fetch sessions (KIP-227) followed from traffic, and SASL handshakes / raw tokens."""
from __future__ import annotations

import kproto

from kproto.capture import BodyDecoder, CaptureDecoder
from pcapgen import Conversation, packets_of, request_frame, response_frame

FREQ, FRESP = kproto.request(1), kproto.response(1)


def _fetch(session_id, epoch, parts, forgotten=()):
    topic, part, forget = (FREQ.classes[n] for n in ("FetchTopic", "FetchPartition", "ForgottenTopic"))
    topics = [topic(topic="t", partitions=[part(partition=p, fetch_offset=10 * p) for p in parts])] if parts else []
    gone = [forget(topic="t", partitions=list(forgotten))] if forgotten else []
    return FREQ.cls(session_id=session_id, session_epoch=epoch, topics=topics,
                    forgotten_topics_data=gone, max_wait_ms=500)


def _answer(session_id, parts, error=0):
    topic, part = FRESP.classes["FetchableTopicResponse"], FRESP.classes["PartitionData"]
    return FRESP.cls(error_code=error, session_id=session_id, responses=[
        topic(topic="t", partitions=[part(partition_index=p, high_watermark=100 + p) for p in parts])]
        if parts else [])


def _decode(conv):
    conv.close()
    dec = CaptureDecoder([9092], decode=BodyDecoder())
    return dec.feed_all(packets_of(conv.frames()))


def test_incremental_fetch_shows_the_whole_session():
    conv = Conversation()
    steps = [
        (_fetch(0, 0, [0, 1]), _answer(55, [0, 1])),                 # full: creates session 55
        (_fetch(55, 1, [2], forgotten=[0]), _answer(55, [2])),       # add t-2, forget t-0
        (_fetch(55, 2, []), _answer(55, [])),                        # nothing changed
        (_fetch(55, 4, []), _answer(0, [], error=71)),               # skipped an epoch
        (_fetch(77, 1, [5]), _answer(0, [], error=70)),              # unknown session
        (_fetch(0, -1, [3]), _answer(0, [3])),                       # sessionless full fetch
    ]
    for corr, (req, resp) in enumerate(steps, 1):
        conv.send(True, request_frame(1, 12, corr, req))
        conv.send(False, response_frame(1, 12, corr, resp))
    got = {e.correlation_id: e for e in _decode(conv)}
    s = {c: got[c].fetch_session for c in got}
    assert s[1]["kind"] == "full" and s[1]["created_session_id"] == 55
    assert s[1]["partitions"] == ["t-0", "t-1"]
    assert s[2]["kind"] == "incremental" and s[2]["partitions"] == ["t-1", "t-2"]
    assert s[2]["forgotten"] == ["t-0"] and s[2]["added_or_changed"] == ["t-2"]
    assert s[2]["high_watermarks"] == {"t-1": 101, "t-2": 102}
    assert s[3]["partitions"] == ["t-1", "t-2"] and s[3]["response_partitions"] == 0
    assert not got[3].problems
    assert "expected 3" in " ".join(got[4].problems.reasons())
    assert "not the one the broker expects" in s[4]["error"]
    assert got[4].errors == ["INVALID_FETCH_SESSION_EPOCH"]
    assert "does not know session 77" in s[5]["error"]
    assert "creation was not captured" in " ".join(got[5].problems.reasons())
    assert s[6]["kind"] == "sessionless" and s[6]["partitions"] == ["t-3"]


def test_sasl_handshake_v0_then_raw_tokens_then_kafka_again():
    conv = Conversation()
    hs = kproto.request(17).cls(mechanism="PLAIN")
    conv.send(True, request_frame(17, 0, 1, hs))
    conv.send(False, response_frame(17, 0, 1, kproto.response(17).cls(mechanisms=["PLAIN"])))
    token = b"\x00alice\x00s3cret"
    conv.send(True, len(token).to_bytes(4, "big") + token)
    conv.send(False, b"\x00\x00\x00\x00")  # empty server token: success
    conv.send(True, request_frame(18, 0, 2))
    conv.send(False, response_frame(18, 0, 2))
    got = _decode(conv)
    kinds = [(e.kind, e.api_key, e.correlation_id) for e in got]
    assert kinds == [("kafka", 17, 1), ("sasl", None, None), ("kafka", 18, 2)]
    sasl = got[1].sasl
    assert sasl == {"mechanism": "PLAIN", "client_token_bytes": len(token), "user": "alice",
                    "server_token_bytes": 0}
    assert all(not e.problems for e in got)


def test_sasl_authenticate_is_decoded_and_redacted_in_json():
    from kproto.capture import exchange_to_json

    conv = Conversation()
    conv.send(True, request_frame(17, 1, 1, kproto.request(17).cls(mechanism="PLAIN")))
    conv.send(False, response_frame(17, 1, 1))
    auth = kproto.request(36).cls(auth_bytes=b"\x00bob\x00hunter2")
    conv.send(True, request_frame(36, 2, 2, auth))
    conv.send(False, response_frame(36, 2, 2))
    got = _decode(conv)
    doc = exchange_to_json(got[1])
    assert doc["api_name"] == "SaslAuthenticate" and doc["sasl"]["user"] == "bob"
    assert "hunter2" not in str(doc) and doc["request"]["authBytes"] == "<redacted>"
