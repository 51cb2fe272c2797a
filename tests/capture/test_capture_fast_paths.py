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
from kproto.capture.bulk import tcp_rows
from kproto.capture.exchange import exchange_to_json_text
from kproto.capture.frames import FrameCutter, RequestRule, ResponseRule
from kproto.capture.layers import tcp_fields
from kproto.capture.pcap import Packet, packets_of as packets_of_bytes
from kproto.capture.tcp import StreamData, StreamGap, TcpStream
from kproto.problems import Problem
from pcapgen import (ACK, FIN, PSH, SYN, ipv4, ipv6, link, packets_of, request_frame,
                     response_frame, tcp, write_pcap)

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


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
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


def _reference_rows(data: bytes) -> list:
    """What tcp_rows must give, from the reference walker and tcp_fields, packet by packet."""
    out = []
    for p in packets_of_bytes(data, "f"):
        if isinstance(p, Problem):
            out.append(("problem", p))
            continue
        fields = tcp_fields(p.linktype, p.data)
        out.append((p.ts, p.index, len(p.data), p.linktype, bytes(p.data), p.orig_len,
                    None if fields is None else (*fields[:7], bytes(fields[7]))))
    return out


def _bulk_rows(data: bytes) -> list:
    out = []
    mv = memoryview(data)
    for rows in tcp_rows(data, "f"):
        for r in rows:
            if isinstance(r, Problem):
                out.append(("problem", r))
            elif isinstance(r, tuple):  # read by the vector code: plain TCP
                ts, index, n, src, sport, dst, dport, seq, ack, flags, start, end = r
                p = [p for p in packets_of_bytes(data, "f")
                     if isinstance(p, Packet) and p.index == index][0]
                out.append((ts, index, n, p.linktype, bytes(p.data), p.orig_len,
                            (src, sport, dst, dport, seq, ack, flags, bytes(mv[start:end]))))
            else:
                out.append((r.ts, r.index, len(r.data), r.linktype, bytes(r.data), r.orig_len,
                            None if tcp_fields(r.linktype, r.data) is None else
                            (*tcp_fields(r.linktype, r.data)[:7],
                             bytes(tcp_fields(r.linktype, r.data)[7]))))
    return out


# (offset in the IPv4 packet, byte): version and header length, total length, fragment
# flags and offset, protocol, TCP data offset
_EDITS = [(0, v) for v in (0x46, 0x44, 0x4F, 0x55, 0x65)] + [(2, v) for v in (0, 1, 0xFF)] + [
    (3, v) for v in (0, 19, 20, 21, 40, 0xFF)] + [(6, v) for v in (0, 0x20, 0x60, 0x80, 0x01)] + [
    (7, 1), (9, 17), (9, 0)] + [(32, v) for v in (0x40, 0x60, 0x80, 0xF0, 0x00)]


@st.composite
def pcap_files(draw):
    """Classic pcap files of TCP packets with damaged headers, other protocols, VLAN tags,
    IPv6, every link type the decoder reads, and a cut end."""
    linktype = draw(st.sampled_from([1, 1, 113, 276, 101, 228, 0, 108, 147]))
    frames = []
    for i in range(draw(st.integers(0, 12))):
        payload = draw(st.binary(max_size=60))
        seg = tcp(draw(st.integers(0, 65535)), 9092, draw(st.integers(0, 2**32 - 1)),
                  draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 255)), payload)
        ip = bytearray(ipv4(b"\x0a\x00\x00" + bytes([draw(st.integers(0, 3))]), b"\x0a\x00\x00\x09", seg))
        if draw(st.integers(0, 3)) == 0:  # a header field changed
            at, value = draw(st.sampled_from(_EDITS))
            ip[at] = value
        kind = draw(st.sampled_from(["v4", "v4", "v6", "vlan", "cut", "junk"]))
        if kind == "v6":
            frame = link(linktype if linktype in (1, 113, 276, 0, 108) else 1,
                         ipv6(b"\x00" * 15 + b"\x01", b"\x00" * 15 + b"\x02", seg))
        elif kind == "vlan" and linktype == 1:
            frame = link(1, bytes(ip), (7,))
        elif kind == "junk":
            frame = draw(st.binary(max_size=80))
        else:
            frame = link(linktype, bytes(ip)) if linktype not in (147, 228) else bytes(ip)
            if kind == "cut":
                frame = frame[:draw(st.integers(0, len(frame)))]
        frames.append((1_700_000_000 + i * 0.000_001 * draw(st.integers(0, 10**6)), frame))
    data = write_pcap(frames, linktype, nanos=draw(st.booleans()), big_endian=draw(st.booleans()))
    if draw(st.booleans()):
        data = data[:draw(st.integers(24, len(data)))]  # a record cut off
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pcap_files())
def test_bulk_rows_are_the_packets_and_their_tcp_fields(data):
    assert _bulk_rows(data) == _reference_rows(data)


def test_bulk_reads_real_captures_as_the_walker(monkeypatch):
    files = [CAPTURES / n for n in ALL] + sorted(EXTERNAL.rglob("*.pcap*"))
    fast = 0
    for path in files:
        data = path.read_bytes()
        got = []
        for fast_paths in (True, False):
            monkeypatch.setattr(CaptureDecoder, "fast_paths", fast_paths)
            decoder = CaptureDecoder(decode=BodyDecoder())
            exchanges = list(decoder.feed_capture(data, str(path))) + decoder.finish()
            got.append(([exchange_to_json_text(ex) for ex in exchanges], decoder.packets,
                         decoder.bytes, decoder.non_tcp, decoder.unknown_links,
                         decoder.problems.reasons()))
        assert got[0] == got[1], path.name
        fast += sum(isinstance(r, tuple) for rows in tcp_rows(data) for r in rows)
    assert fast > 10000  # most packets were read by the vector code
