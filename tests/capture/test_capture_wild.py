"""What real clients and real captures do that a tidy conversation does not: bytes after a
complete body (old librdkafka's ApiVersions v0 request), and captures that start mid-connection
with the broker's answers to requests that were never captured."""
from __future__ import annotations

import struct

import kproto
from kproto.capture import BodyDecoder, CaptureDecoder

from pcapgen import Conversation, packets_of, request_frame, response_frame, simple_exchange

PORT = 9092


def _decode(frames, ports=(PORT,)):
    dec = CaptureDecoder(ports, decode=BodyDecoder())
    return dec.feed_all(packets_of(frames)) + dec.finish()


def _with_tail(frame: bytes, tail: bytes) -> bytes:
    size = struct.unpack_from(">i", frame)[0] + len(tail)
    return struct.pack(">i", size) + frame[4:] + tail


def test_librdkafka_apiversions_v0_request_keeps_its_body():
    # librdkafka before 1.x sends ApiVersions v0 with an empty int32 array after the header
    conv = Conversation()
    conv.send(True, _with_tail(request_frame(18, 0, 1, client_id="rdkafka"), bytes(4)))
    conv.send(False, response_frame(18, 0, 1))
    conv.close()
    (ex,) = _decode(conv.frames())
    assert not ex.problems
    assert ex.request is not None and ex.request_header.client_id == "rdkafka"
    assert ex.unread["request"] == (0, 4, bytes(4))
    assert len(ex.notes) == 1
    assert "4 bytes after the end of the ApiVersions v0 body" in ex.notes[0].reason
    assert "librdkafka" in ex.notes[0].reason
    assert ex.to_json()["request"] == {}


def test_bytes_after_a_complete_response_body_are_noted_and_the_body_kept():
    body = kproto.response(12).cls(error_code=27)
    conv = Conversation()
    conv.send(True, request_frame(12, 1, 5))
    conv.send(False, _with_tail(response_frame(12, 1, 5, body), b"\x01\x02\x03"))
    conv.close()
    (ex,) = _decode(conv.frames())
    assert not ex.problems and ex.response.error_code == 27
    assert ex.errors == ["REBALANCE_IN_PROGRESS"]
    assert ex.unread["response"] == (6, 3, b"\x01\x02\x03")
    assert "3 bytes after the end of the Heartbeat v1 body" in ex.notes[0].reason


def test_capture_starting_with_the_brokers_answer_keeps_framing():
    # the capture begins after the client's Metadata request: the first bytes are its answer
    conv = Conversation()
    simple_exchange(conv, 3, 12, 7)
    simple_exchange(conv, 18, 3, 8)
    simple_exchange(conv, 3, 12, 9)
    conv.close()
    frames = conv.frames()[5:]  # no handshake, no first request (and its ACK)
    got = _decode(frames)
    by_corr = {e.correlation_id: e for e in got}
    assert sorted(by_corr) == [7, 8, 9]
    assert not by_corr[8].problems and not by_corr[9].problems  # nothing skipped
    orphan = by_corr[7]
    assert orphan.problems.reasons() == ["orphan response (21 bytes, correlation id 7): matches "
                                         "no request in the capture"]
    assert orphan.request is None and orphan.response_bytes == 21
    # Metadata v12 is what the connection's later requests use, and it reads the whole body
    assert (orphan.api_key, orphan.api_version) == (3, 12)
    assert orphan.response is not None and "decoded as Metadata v12" in orphan.notes[0].reason


def test_orphan_response_decoded_when_its_body_is_unambiguous():
    resp = kproto.response(18)
    body = resp.cls(error_code=0, api_keys=[resp.classes["ApiVersion"](api_key=k, min_version=0,
                                                                         max_version=9)
                                            for k in range(4)])
    conv = Conversation()
    conv.send(True, request_frame(18, 0, 3))
    conv.send(False, response_frame(18, 0, 3, body))
    conv.close()
    (ex,) = _decode(conv.frames()[5:])  # only the answer was captured
    assert (ex.api_key, ex.api_version) == (18, 0) and ex.response == body
    assert "the only API version of all" in ex.notes[0].reason


def test_orphan_response_left_undecoded_when_ambiguous():
    # an empty Metadata v12 answer: several API versions read those 17 bytes
    conv = Conversation()
    simple_exchange(conv, 3, 12, 7)
    conv.close()
    (ex,) = _decode(conv.frames()[5:])
    assert ex.api_key is None and ex.response is None and ex.response_bytes == 21
    assert "orphan response not decoded" in ex.notes[0].reason
    assert "matches no request" in ex.problems[0].reason


def test_stream_starting_mid_frame_still_resynchronises():
    # the first captured bytes of the broker's side are the middle of a frame: not a boundary
    conv = Conversation()
    big = kproto.response(3).cls(brokers=[kproto.response(3).classes["MetadataResponseBroker"](
        node_id=i, host=f"broker-{i}.example", port=9092) for i in range(40)])
    conv.send(True, request_frame(3, 1, 1))
    conv.send(False, response_frame(3, 1, 1, big), mss=200)
    simple_exchange(conv, 18, 0, 2)
    conv.close()
    frames = conv.frames()
    first_answer = next(i for i, (_, f) in enumerate(frames) if i > 5 and len(f) > 200)
    got = _decode(frames[first_answer + 1:])  # from the second segment of the big answer on
    (ex,) = got
    assert (ex.api_key, ex.correlation_id) == (18, 2) and ex.response is not None
    # the rest of the big answer is not mistaken for frames: it is skipped, and said so
    assert len(ex.problems) == 1 and ex.problems[0].reason.startswith("skipped ")
    assert "to resynchronise" in ex.problems[0].reason
