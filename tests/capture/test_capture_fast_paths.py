"""The decoder's fast paths (bytes in order straight from the segment to the frame cutter,
whole frames cut from the segment that holds them) give what the reference path gives (every
segment through the reassembler's events and the cutter's buffer): the same exchanges,
timings, problems and bytes, on the real captures and on generated TCP conversations with
segments reordered, retransmitted, overlapping, lost, acknowledged past what was captured, a
start without the handshake, frames coalesced and split anywhere."""
from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_support import ALL, CAPTURES
from kproto import codecs
from kproto.capture import BodyDecoder, CaptureDecoder, read_packets
from kproto.capture.bodies import api_versions
from kproto.capture.exchange import exchange_to_json_text
from kproto.capture.frames import FrameCutter, RequestRule, ResponseRule
from kproto.capture.tcp import StreamData, StreamGap, TcpStream
from pcapgen import ACK, PSH, FIN, SYN, ipv4, link, packets_of, request_frame, response_frame, tcp

EXTERNAL = CAPTURES.parent / "external" / "captures"


def _outcome(packets, fast: bool, monkeypatch) -> tuple:
    """Everything a decode gives, with the fast paths on or off: each exchange with the
    packet after which it came out."""
    monkeypatch.setattr(CaptureDecoder, "fast_paths", fast)
    decoder = CaptureDecoder(decode=BodyDecoder())
    out = []
    for i, p in enumerate(packets):
        out += [(i, ex) for ex in decoder.feed(p)]
    out += [(-1, ex) for ex in decoder.finish()]
    return ([(i, exchange_to_json_text(ex), ex.ts, ex.request_end, ex.response_start,
              ex.response_end, ex.request_data, ex.response_data) for i, ex in out],
            decoder.problems.reasons(), decoder.chosen_ports)


def test_real_captures(monkeypatch):
    files = [CAPTURES / n for n in ALL] + sorted(EXTERNAL.rglob("*.pcap*"))
    assert len(files) > 20
    for path in files:
        fast = _outcome(read_packets(path), True, monkeypatch)
        assert fast == _outcome(read_packets(path), False, monkeypatch), path.name
        assert fast[0] or "arkime" in str(path)  # exchanges were compared


B = (b"\x0a\x00\x00\x02", 9092)


@st.composite
def conversations(draw, port: int = 40000):
    """(from client, seq, ack, flags, payload) segments of one connection, perturbed."""
    produce = codecs.request(0).cls
    n = draw(st.integers(1, 4))
    requests, responses = b"", b""
    for corr in range(n):
        records = draw(st.binary(max_size=3000))
        body = produce(acks=1, timeout_ms=100, topic_data=[produce.TopicProduceData(
            name="t", partition_data=[produce.PartitionProduceData(
                index=0, records=records)])])
        requests += request_frame(0, 9, corr, body)
        responses += response_frame(0, 9, corr)
    if draw(st.booleans()):
        responses += draw(st.binary(max_size=40))  # garbage after the last response

    def cut(stream: bytes) -> list[tuple[int, bytes]]:
        out, pos = [], 0
        while pos < len(stream):
            size = draw(st.integers(1, 3000) | st.integers(1, 100))
            out.append((pos, stream[pos:pos + size]))
            pos += size
        return out

    isn = {True: draw(st.integers(0, 2**32 - 1)), False: draw(st.integers(0, 2**32 - 1))}
    segs = {True: cut(requests), False: cut(responses)}
    # interleave the two directions, each in its own order
    order = draw(st.permutations([True] * len(segs[True]) + [False] * len(segs[False])))
    taken = {True: 0, False: 0}
    sent: list[tuple[bool, int, bytes]] = []
    for side in order:
        off, data = segs[side][taken[side]]
        taken[side] += 1
        sent.append((side, off, data))
    for _ in range(draw(st.integers(0, 3))):  # a segment overtaken by the next of its direction
        i = draw(st.integers(0, len(sent) - 1))
        later = [j for j in range(i + 1, len(sent)) if sent[j][0] == sent[i][0]]
        if later:
            sent[i], sent[later[0]] = sent[later[0]], sent[i]
    packets: list[tuple[bool, int, int, int, bytes]] = []  # (from client, seq, ack, flags, data)
    if draw(st.booleans()):  # the handshake was captured
        packets += [(True, isn[True], 0, SYN, b""), (False, isn[False], isn[True] + 1, SYN | ACK, b"")]
    high = {True: 0, False: 0}
    for side, off, data in sent:
        high[side] = max(high[side], off + len(data))  # acknowledged: what was sent
        packets.append((side, isn[side] + 1 + off, isn[not side] + 1 + high[not side], ACK | PSH, data))
        kind = draw(st.sampled_from(["none"] * 4 + ["ack", "ack-ahead", "retransmit", "overlap",
                                                     "drop"]))
        if kind == "ack":
            packets.append((not side, isn[not side] + 1 + high[not side], isn[side] + 1 + high[side], ACK, b""))
        elif kind == "ack-ahead":  # the receiver has bytes the capture has not (yet)
            extra = draw(st.integers(1, 5000))
            packets.append((not side, isn[not side] + 1 + high[not side],
                            isn[side] + 1 + high[side] + extra, ACK, b""))
        elif kind == "retransmit":
            packets.append(packets[-1])
        elif kind == "overlap" and len(data) > 2:
            k = draw(st.integers(1, len(data) - 1))
            packets[-1] = (side, isn[side] + 1 + off, packets[-1][2], ACK | PSH, data[:k + 1])
            packets.append((side, isn[side] + 1 + off + k, packets[-1][2], ACK | PSH, data[k:]))
        elif kind == "drop":
            packets.pop()
    for _ in range(draw(st.integers(0, 3))):  # reordered by the capture
        if len(packets) > 1:
            i = draw(st.integers(0, len(packets) - 2))
            packets[i], packets[i + 1] = packets[i + 1], packets[i]
    if draw(st.booleans()):
        packets.append((True, isn[True] + 1 + high[True], isn[False] + 1 + high[False], FIN | ACK, b""))
    client = (b"\x0a\x00\x00\x01", port)
    return [(client, *p) for p in packets]


@st.composite
def captures(draw):
    """(ts, Ethernet frame) packets of one or two connections, interleaved."""
    conns = [draw(conversations(40000 + i)) for i in range(draw(st.integers(1, 2)))]
    order = draw(st.permutations([i for i, c in enumerate(conns) for _ in c]))
    taken = [0] * len(conns)
    frames = []
    for n, i in enumerate(order):
        client, side, seq, ack, flags, data = conns[i][taken[i]]
        taken[i] += 1
        (src, sp), (dst, dp) = (client, B) if side else (B, client)
        frames.append((1_700_000_000 + n * 0.001,
                       link(1, ipv4(src, dst, tcp(sp, dp, seq, ack, flags, data)))))
    return frames


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(captures(), st.sampled_from([32, 0, 1, 3]))
def test_generated_conversations(monkeypatch, frames, grace):
    # a short grace: holes acknowledged past are declared lost within these few packets
    monkeypatch.setitem(TcpStream.__init__.__kwdefaults__, "ack_grace", grace)
    fast = _outcome(packets_of(frames), True, monkeypatch)
    assert fast == _outcome(packets_of(frames), False, monkeypatch)


def _frames(cutter: FrameCutter, events) -> list[tuple]:
    out = []
    for ev in events:
        out += cutter.feed(ev)
    out += cutter.finish(99.0)
    return [(f.data, f.size, f.ts_start, f.ts_end, f.offset, f.missing, f.truncated, f.intact,
             [(p.kind, p.reason, p.bytes_skipped) for p in f.problems]) for f in out] + [
        [(p.kind, p.reason) for p in cutter.take_pending()], cutter.base]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_frame_cutter_direct_cuts_as_the_buffer(data):
    """Frames (sane or not), garbage and gaps in chunks cut anywhere: the same frames,
    offsets, times and problems with and without cutting from the chunk directly."""
    requests = data.draw(st.booleans())
    parts = []
    for corr in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["frame", "frame", "garbage", "insane"]))
        if kind == "frame":
            body = data.draw(st.binary(max_size=300))
            frame = (request_frame(0, 9, corr) if requests else response_frame(0, 9, corr))
            parts.append(frame + (body if not requests else b""))
        elif kind == "garbage":
            parts.append(data.draw(st.binary(min_size=1, max_size=40)))
        else:  # a size prefix no rule takes
            parts.append(struct.pack(">i", data.draw(st.sampled_from([-5, 0, 3, 1 << 30]))))
    stream = b"".join(parts)
    # a response's size prefix covers what follows in this stream (a body of random bytes)
    events, pos, t = [], 0, 0.0
    while pos < len(stream):
        n = data.draw(st.integers(1, 400))
        t += 1.0
        if data.draw(st.integers(0, 9)) == 0:
            events.append(StreamGap(n, t, pos, "lost"))
        else:
            events.append(StreamData(stream[pos:pos + n], t, pos))
        pos += n
    rule = RequestRule(api_versions) if requests else ResponseRule(set(range(6)))
    synced = data.draw(st.booleans())
    got = []
    for direct in (True, False):
        cutter = FrameCutter(rule, synced=synced)
        cutter.direct = direct
        cutter.start_unsure = not synced and data.draw(st.booleans())
        got.append(_frames(cutter, events))
    assert got[0] == got[1]
