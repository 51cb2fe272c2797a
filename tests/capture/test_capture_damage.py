"""Damaged traffic: reordering, duplicates, loss, garbage, unknown API keys and versions."""
from __future__ import annotations

import random

import kproto
from hypothesis import given, settings, strategies as st

from kproto.capture import CaptureDecoder
from kproto.capture.tcp import StreamData, StreamGap, TcpStream
from pcapgen import Conversation, packets_of, request_frame, response_frame

PORT = 9092


def _metadata_body(n_topics: int, tag: str):
    codec = kproto.request(3)
    topic = codec.classes["MetadataRequestTopic"]
    return codec.cls(topics=[topic(name=f"{tag}-{i}") for i in range(n_topics)])


def _conversation(n: int = 12, mss: int = 300, pipelined: bool = True) -> tuple[Conversation, list]:
    """n Metadata v1 requests of various sizes (several per segment, some split), then answers."""
    conv = Conversation()
    reqs = [request_frame(3, 1, 100 + i, _metadata_body(i % 5 * 20, f"t{i}")) for i in range(n)]
    resps = [response_frame(3, 1, 100 + i) for i in range(n)]
    if pipelined:
        conv.send(True, b"".join(reqs), mss)
        conv.send(False, b"".join(resps), mss)
    else:
        for q, r in zip(reqs, resps):
            conv.send(True, q, mss)
            conv.send(False, r, mss)
    conv.close()
    return conv, reqs


def _run(frames, ports=(PORT,)):
    dec = CaptureDecoder(ports)
    return dec.feed_all(packets_of(frames)), dec


def _ok(exchanges):
    return sorted((e.correlation_id, e.request_data, e.response_data) for e in exchanges
                  if not e.problems)


def test_clean_conversation():
    conv, reqs = _conversation()
    got, _ = _run(conv.frames())
    assert len(_ok(got)) == len(reqs) == len(got)
    assert [e.request_data for e in sorted(got, key=lambda e: e.correlation_id)] == [r[4:] for r in reqs]


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 6), st.integers(0, 4))
def test_reordered_and_duplicated_segments_change_nothing(rnd, window, dups):
    conv, reqs = _conversation()
    frames = conv.frames()
    want = _ok(_run(frames)[0])
    head, body = frames[:3], frames[3:]
    # shuffle inside small windows (what capture reordering does) and repeat a few packets
    out = []
    for i in range(0, len(body), window):
        chunk = body[i:i + window]
        rnd.shuffle(chunk)
        out.extend(chunk)
    for _ in range(dups):
        j = rnd.randrange(len(out))
        out.insert(j + 1, out[j])
    got, _ = _run(head + out)
    assert _ok(got) == want and len(got) == len(reqs)


def test_lost_segment_inside_a_request_damages_only_it():
    conv = Conversation()
    big = request_frame(3, 1, 1, _metadata_body(400, "big"))
    conv.send(True, big, 1000)
    conv.send(False, response_frame(3, 1, 1), 1000)
    seg_idx = conv.send(True, request_frame(3, 1, 2, _metadata_body(3, "x")), 1000)
    conv.send(False, response_frame(3, 1, 2), 1000)
    conv.close()
    frames = conv.frames()
    del frames[4]  # the second data segment of the big request (its ACK follows later)
    got, _ = _run(frames)
    by = {e.correlation_id: e for e in got}
    assert by[1].request_data is None and any("1000 of" in p for p in by[1].problems.reasons())
    assert by[1].response_data is not None  # the answer itself is intact and paired
    assert not by[2].problems and by[2].request is None  # no BodyDecoder here: framing only
    assert len(seg_idx) == 1


def test_lost_frame_boundary_resynchronises():
    """A hole swallowing the end of one request and the start of the next: resync after it."""
    conv = Conversation()
    frames_sent = [request_frame(3, 1, 10 + i, _metadata_body(2, f"r{i}")) for i in range(6)]
    stream = b"".join(frames_sent)
    idx = conv.send(True, stream, 50, ack=False)
    conv._pkt(False, conv.bseq, conv.cseq, 0x10)  # the broker acknowledges all of it
    conv.send(False, b"".join(response_frame(3, 1, 10 + i) for i in range(6)), 1000)
    conv.close()
    cut = len(frames_sent[0]) + len(frames_sent[1]) // 2  # inside request 1
    lost = [i for i in idx if cut <= (idx.index(i) * 50) < cut + 60]
    frames = [f for i, f in enumerate(conv.frames()) if i not in lost]
    got, _ = _run(frames)
    by = {e.correlation_id: e for e in got if e.correlation_id is not None}
    assert not by[10].problems
    assert any("not captured" in p for p in by[11].problems.reasons())
    # requests whose start was lost are gone, but every later one is found again and paired
    later = [c for c in range(12, 16) if c in by and by[c].response_data is not None
             and by[c].request_data is not None]
    assert later and later[-1] == 15 and set(range(later[0], 16)) <= set(later)
    notes = " ".join(p for e in got for p in e.problems.reasons())
    assert "resynchronise" in notes or "missing from the capture" in notes


def test_garbage_on_the_kafka_port_is_reported_and_skipped():
    conv = Conversation()
    conv.send(True, b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n" + request_frame(18, 0, 5), 1400)
    conv.send(False, response_frame(18, 0, 5), 1400)
    conv.send(True, b"\x00\x00\x00\x09\xff\xff\xff\xff\x00" + request_frame(18, 1, 6), 1400)
    conv.send(False, response_frame(18, 1, 6), 1400)
    conv.close()
    got, _ = _run(conv.frames())
    paired = {e.correlation_id: e for e in got if e.response_data is not None}
    assert sorted(paired) == [5, 6]
    notes = [p for e in got for p in e.problems]
    assert any("implausible frame header" in p.reason and p.kind == "resync" for p in notes)
    assert any("skipped" in p.reason and p.kind == "resync" for p in notes)


def test_unknown_api_key_and_version_are_reported_and_decoding_goes_on():
    from kproto.capture import BodyDecoder

    conv = Conversation()
    weird_key = b"\x00\x03\x00\x00" + (0x7F00).to_bytes(2, "big")[0:0] + \
        (200).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff\xff" + b"abc"
    weird_key = (len(weird_key) - 4).to_bytes(4, "big") + weird_key[4:]
    weird_ver = request_frame(18, 0, 2)
    weird_ver = weird_ver[:6] + (77).to_bytes(2, "big") + weird_ver[8:]
    for i, frame in enumerate([weird_key, weird_ver, request_frame(18, 0, 3)], 1):
        conv.send(True, frame)
        conv.send(False, (8).to_bytes(4, "big") + i.to_bytes(4, "big") + b"\0\0\0\0" if i < 3
                  else response_frame(18, 0, 3))
    conv.close()
    dec = CaptureDecoder([PORT], decode=BodyDecoder())
    got = {e.correlation_id: e for e in dec.feed_all(packets_of(conv.frames()))}
    assert "unknown API key 200" in got[1].problems[0].reason
    # v77 is above the schemas: tried with the v5 layout, which cannot read this v0-shaped frame
    assert "v77 is newer than kproto's schemas" in got[2].problems[0].reason
    assert "v5 layout failed" in got[2].problems[0].reason and got[2].request is None
    assert not got[3].problems and got[3].response.api_keys == []
    dec = CaptureDecoder([PORT], decode=BodyDecoder(best_effort=False))
    got = {e.correlation_id: e for e in dec.feed_all(packets_of(conv.frames()))}
    assert got[2].problems.reasons() == ["ApiVersions v77 is not a version Kafka 4.4.0 defines "
                                         "(valid 0-5): body not decoded"]


def test_reassembler_overlap_retransmission_and_gaps():
    s = TcpStream()
    out = s.segment(100, b"", 0.0, syn=True)
    out += s.segment(101, b"abcd", 1.0)
    out += s.segment(103, b"cdef", 2.0)          # overlap: only "ef" is new
    out += s.segment(101, b"abcdef", 3.0)        # pure retransmission
    out += s.segment(111, b"klm", 4.0)           # out of order: held
    assert b"".join(e.data for e in out if isinstance(e, StreamData)) == b"abcdef"
    out = s.segment(107, b"ghij", 5.0)           # fills the hole: releases "klm"
    assert b"".join(e.data for e in out) == b"ghijklm"
    out = s.segment(120, b"xyz", 6.0)            # 6 bytes never captured (114..119)
    assert out == []
    out = s.flush(7.0)
    assert isinstance(out[0], StreamGap) and out[0].size == 6 and out[0].offset == 13
    assert out[1].data == b"xyz" and out[1].offset == 19
    assert s.retransmitted_bytes == 8


def test_reassembler_ack_past_hole_declares_the_gap_after_grace():
    s = TcpStream(ack_grace=3)
    s.segment(0, b"", 0.0, syn=True)
    s.segment(1, b"aaaa", 0.0, tick=1)
    s.segment(9, b"cccc", 0.0, tick=2)
    assert s.acked(13, tick=3) == []            # maybe just reordered: wait
    out = s.acked(13, tick=7)
    assert [type(e).__name__ for e in out] == ["StreamGap", "StreamData"]
    assert out[0].size == 4 and out[1].data == b"cccc"


def test_sequence_numbers_wrap():
    s = TcpStream()
    isn = 0xFFFFFFF0
    s.segment(isn, b"", 0.0, syn=True)
    data = bytes(range(64))
    got = []
    for i in range(0, 64, 8):
        got += s.segment((isn + 1 + i) & 0xFFFFFFFF, data[i:i + 8], 0.0)
    assert b"".join(e.data for e in got) == data


def test_random_loss_never_crashes_and_keeps_later_exchanges():
    rnd = random.Random(5)
    for trial in range(20):
        conv, reqs = _conversation(n=10, mss=90, pipelined=bool(trial % 2))
        frames = conv.frames()
        drop = set(rnd.sample(range(3, len(frames) - 3), 2))
        got, _ = _run([f for i, f in enumerate(frames) if i not in drop])
        assert all(e.problems or e.response_data is not None for e in got)
        assert _ok(got)  # something survives every time


def test_capture_starting_mid_connection_finds_the_first_whole_frame():
    conv, reqs = _conversation(n=8, mss=120, pipelined=False)
    frames = conv.frames()
    start = 3 + 5  # no handshake, and the first request's middle
    got, _ = _run(frames[start:])
    ok = {e.correlation_id for e in got if not e.problems}
    assert ok and max(ok) == 107 and set(range(min(ok), 108)) == ok


def test_apiversions_answered_with_v0_body_like_kafka_does():
    from kproto.capture import BodyDecoder

    resp = kproto.response(18)
    key = resp.classes["ApiVersion"](api_key=18, min_version=0, max_version=3)
    body = resp.cls(error_code=35, api_keys=[key])
    conv = Conversation()
    conv.send(True, request_frame(18, 4, 1))
    conv.send(False, response_frame(18, 0, 1, body))  # header v0 + v0 body, as Kafka answers v4
    conv.close()
    dec = CaptureDecoder([PORT], decode=BodyDecoder())
    (ex,) = dec.feed_all(packets_of(conv.frames()))
    assert not ex.problems and ex.response_version == 0 and ex.errors == ["UNSUPPORTED_VERSION"]
    assert ex.to_json()["response"]["apiKeys"] == [{"apiKey": 18, "minVersion": 0, "maxVersion": 3}]


def test_port_reuse_starts_a_new_connection():
    a, _ = _conversation(n=2)
    b = Conversation(t0=1_700_000_100.0, isn=(777, 999))
    b.send(True, request_frame(18, 0, 100))  # same correlation id as a's first request
    b.send(False, response_frame(18, 0, 100))
    b.close()
    got, _ = _run(a.frames() + b.frames())
    assert [(e.api_key, e.correlation_id, e.problems.reasons()) for e in got] == \
        [(3, 100, []), (3, 101, []), (18, 100, [])]


def test_responses_without_requests_are_reported():
    conv = Conversation()
    conv.send(False, b"".join(response_frame(18, 0, 500 + i) for i in range(300)))
    conv.send(True, request_frame(18, 0, 1))
    conv.send(False, response_frame(18, 0, 1))
    conv.close()
    got, _ = _run(conv.frames())
    orphans = [e for e in got if e.request_bytes == 0]
    assert len(orphans) == 300
    assert all("matches no request" in e.problems[-1].reason for e in orphans)
    assert [e.correlation_id for e in got if not e.problems] == [1]


def test_produce_with_acks_0_expects_no_answer():
    from kproto.capture import BodyDecoder

    conv = Conversation()
    conv.send(True, request_frame(0, 9, 1, kproto.request(0).cls(acks=0, timeout_ms=100)))
    conv.send(True, request_frame(0, 9, 2, kproto.request(0).cls(acks=1, timeout_ms=100)))
    conv.close()
    dec = CaptureDecoder([PORT], decode=BodyDecoder())
    got = {e.correlation_id: e for e in dec.feed_all(packets_of(conv.frames()))}
    assert not got[1].problems and not got[1].expects_response and got[1].latency_ms is None
    assert got[2].problems.reasons() == ["no response: the connection was closed"]
