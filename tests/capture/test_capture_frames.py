"""Frame cutting: timestamps of frames spread over segments, resync at the very end of a buffer."""
from __future__ import annotations

from kproto.capture import bodies
from kproto.capture.frames import FrameCutter, RequestRule, ResponseRule
from pcapgen import request_frame, response_frame


def test_frame_timestamps_come_from_first_and_last_chunk():
    cut = FrameCutter(RequestRule(bodies.api_versions))
    a, b = request_frame(18, 0, 1), request_frame(18, 0, 2)
    stream = a + b
    out = []
    for i, ts in zip(range(0, len(stream), 7), range(100, 200)):
        out += cut.data(stream[i:i + 7], float(ts))
    assert [f.data for f in out] == [a[4:], b[4:]]
    assert out[0].ts_start == 100.0 and out[0].ts_end == 100.0 + (len(a) - 1) // 7
    assert out[1].ts_start == 100.0 + len(a) // 7 and out[1].offset == len(a)


def test_resync_finds_a_frame_starting_at_the_last_possible_position():
    cut = FrameCutter(RequestRule(bodies.api_versions), synced=False)
    frame = request_frame(3, 1, 9)
    junk = b"\xee" * 37
    got = cut.data(junk + frame[:14], 1.0)  # exactly the bytes needed to judge the start
    assert got == [] and cut.synced
    got = cut.data(frame[14:], 2.0)
    assert [f.data for f in got] == [frame[4:]] and "skipped 37 bytes" in got[0].problems[0].reason


def test_response_resync_needs_a_pending_correlation_id():
    pending = {41: None}
    cut = FrameCutter(ResponseRule(pending), synced=False)
    other, mine = response_frame(18, 0, 40), response_frame(18, 0, 41)
    got = cut.data(b"\x01\x02" + other + mine, 1.0)
    assert [f.data for f in got] == [mine[4:]]


def test_gap_inside_a_frame_keeps_sync():
    cut = FrameCutter(RequestRule(bodies.api_versions))
    a, b = request_frame(3, 1, 1), request_frame(18, 0, 2)
    got = cut.data(a[:12], 1.0) + cut.gap(5, 1.5) + cut.data(a[17:] + b, 2.0)
    assert got[0].missing == 5 and got[0].size == len(a) - 4 and got[1].data == b[4:]


def test_hole_inside_a_request_header():
    from kproto.capture import CaptureDecoder
    from kproto.capture.tcp import StreamData, StreamGap

    dec = CaptureDecoder([9092])
    conn = dec._open((b"\x7f\0\0\1", 1), (b"\x7f\0\0\1", 9092))
    a, b = request_frame(3, 1, 1, None, "client-a"), request_frame(18, 0, 2)
    dec._request_event(conn, StreamData(a[:9], 1.0, 0))     # size, key, version, 1 corr byte
    dec._request_event(conn, StreamGap(5, 1.1, 9))          # rest of corr id, part of client id
    dec._request_event(conn, StreamData(a[14:] + b, 1.2, 14))
    dec._close(conn)
    out = dec._take()
    assert [(e.kind, e.correlation_id) for e in out] == [("stream", None), ("kafka", 2)]
    assert "request header lost in a capture gap" in out[0].problems.reasons()
