"""From packets to :class:`Exchange` objects (sans-I/O): connections, pairing, SASL, port choice.

Feed :class:`~kproto.capture.pcap.Packet` objects (or anything with ``ts``, ``linktype``,
``data``) in capture order to :meth:`CaptureDecoder.feed`; it returns the exchanges completed so
far. :meth:`CaptureDecoder.finish` returns the rest (requests never answered, streams cut short).
"""
from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Literal, Optional, Union, cast

from kproto.capture import bodies
from kproto.capture.exchange import Endpoint, Exchange
from kproto.capture.frames import DEFAULT_MAX_FRAME, Frame, FrameCutter, RequestRule, ResponseRule
from kproto.capture.layers import (ACK, FIN, LINKTYPES, RST, SYN, TcpSegment, link_parses,
                                   tcp_fields)
from kproto.capture.bulk import tcp_rows
from kproto.capture.pcap import (_PCAP_HEADER_SIZE, _PCAP_MAGICS, _PCAPNG_SHB, Packet,
                                 _iter_pcap, _pcapng_block, _PcapngWalk, packets_of)
from kproto.capture.tcp import TcpStream
from kproto.accelerators import load
from kproto.errors import KprotoError
from kproto.problems import Problem, Problems
from kproto.schemas.api_keys import ApiKey

__all__ = ["CaptureDecoder", "TcpConnection"]

_I32 = struct.Struct(">i")
_CLASSIFY_LIMIT = 8  # payload segments looked at before calling a connection "not Kafka"
_MAX_EARLY = 256     # responses kept per connection while waiting for their request
_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)  # (an enum member's lookup: slower, per exchange)

ExchangeHook = Callable[[Exchange], None]
_NONE: list[Exchange] = []  # (never appended to)
#: the C packet loop over classic pcap files (kproto/capture/_segments.c), None where not built
_segments = load("kproto.capture._segments")
if _segments is not None:
    _segments.setup(RequestRule, ResponseRule, Frame, Problems)


class TcpConnection:
    """One TCP connection between a client and a Kafka broker, and its pairing state."""

    def __init__(self, client: Endpoint, broker: Endpoint, request_rule: RequestRule,
                 max_frame: int) -> None:
        self.client = client
        self.broker = broker
        self.c2b = TcpStream()
        self.b2c = TcpStream()
        self.pending: dict[int, Exchange] = {}     # correlation id -> exchange awaiting response
        self.early: dict[int, Frame] = {}          # responses seen before their request
        # in sync from the start; _segment unsyncs a direction whose SYN was not captured
        self.requests = FrameCutter(request_rule)
        self.responses = FrameCutter(ResponseRule(self.pending, max_frame))
        self.sasl_raw: Optional[str] = None        # SASL mechanism while raw tokens flow (v0)
        self.sasl_token: Optional[Exchange] = None  # client token waiting for the server's
        self.ticks = 0
        self.last_ts = 0.0
        self.closed = False                       # FIN or RST seen

    def __repr__(self) -> str:
        return f"TcpConnection({self.client} -> {self.broker})"


class CaptureDecoder:
    """Turn captured packets into request/response :class:`Exchange` objects.

    ``ports``: Kafka broker ports; None to guess per connection from the first bytes each side
    sends (``chosen_ports`` then says what was chosen and why). ``decode``: a callable applied
    to each finished exchange before it is returned (body decoding, records, fetch sessions;
    see :mod:`kproto.capture.api`), or None to only frame and pair.
    """

    #: bytes that arrive in order go from the segment straight to the frame cutter, whole
    #: frames in one segment are cut from it (False: every segment through the reassembler's
    #: events and the cutter's buffer, the reference path the tests compare with)
    fast_paths = True
    #: with :attr:`fast_paths`, the packets of a classic pcap file (and the Enhanced Packet
    #: Blocks of a pcapng file) go through the C packet loop (``kproto.capture._segments``)
    #: where it is built (False: bulk's rows, in Python; pcapng by the walker, packet by packet)
    accelerated = True

    def __init__(self, ports: Optional[Iterable[int]] = None, *, max_frame: int = DEFAULT_MAX_FRAME,
                 decode: Optional[ExchangeHook] = None) -> None:
        self.ports = set(ports) if ports else None
        self.max_frame = max_frame
        self.decode = decode
        self.request_rule = RequestRule(bodies.api_versions, max_frame)
        self.connections: dict[tuple, Optional[TcpConnection]] = {}
        self._unclassified: dict[tuple, list[TcpSegment]] = {}
        self.chosen_ports: dict[int, str] = {}   # broker port -> why it was taken for Kafka
        self.problems = Problems()  # capture-level: file damage (capture), link types not read
        self.packets = 0
        self.bytes = 0
        self.non_tcp = 0
        self.unknown_links: dict[int, int] = {}   # link type -> packets that could not be read
        self.unparsed: dict[int, int] = {}   # known link type -> packets that do not parse as it
        self.last_ts = 0.0
        self._out: list[Exchange] = []

    # -- input -----------------------------------------------------------------------------------

    def feed(self, packet: Union[Packet, Problem, TcpSegment]) -> list[Exchange]:
        """Process one packet (or a capture problem from the reader); return finished exchanges."""
        if isinstance(packet, Problem):
            self.problems.add(packet)
            return []
        if isinstance(packet, TcpSegment):
            s = packet
            return self._tcp(s.src, s.sport, s.dst, s.dport, s.seq, s.ack, s.flags, s.payload,
                             s.ts, s.index)
        self.packets += 1
        data = packet.data
        self.bytes += len(data)
        fields = tcp_fields(packet.linktype, data)
        if fields is None:
            self.non_tcp += 1
            lt = packet.linktype
            if lt not in LINKTYPES:
                self.unknown_links[lt] = self.unknown_links.get(lt, 0) + 1
            elif not link_parses(lt, data):
                self.unparsed[lt] = self.unparsed.get(lt, 0) + 1
            return []
        return self._tcp(*fields, packet.ts, getattr(packet, "index", 0))

    def _tcp(self, src: bytes, sport: int, dst: bytes, dport: int, seq: int, ack: int,
             flags: int, payload: memoryview, ts: float, index: int) -> list[Exchange]:
        """A TCP segment (fields of :class:`TcpSegment`, no object on the way)."""
        self.last_ts = ts
        key = (src, sport, dst, dport)
        conn: Union[TcpConnection, None, Literal[False]] = self.connections.get(key, False)
        if conn and conn.closed and flags & SYN and not flags & ACK:
            # the same addresses and ports again after a close: a new connection
            self._close(conn)
            for k in [k for k, c in self.connections.items() if c is conn]:
                del self.connections[k]
            conn = False
        if conn is False:
            conn = self._classify(key, TcpSegment(src, sport, dst, dport, seq, ack, flags,
                                                  payload, ts, index))
            if conn is False:
                return self._take()
        if conn is not None:
            self._segment(conn, src, sport, seq, ack, flags, payload, ts)
        return self._take()

    def feed_capture(self, data: bytes, source: str = "") -> Iterator[Exchange]:
        """The exchanges the packets of a capture file's bytes complete, as feeding each packet
        of :func:`~kproto.capture.pcap.packets_of` gives them (problems' ``source``:
        ``source``), a classic pcap's plain TCP packets read many at a time (by the C packet
        loop, :data:`accelerated`, else by :mod:`~kproto.capture.bulk`), a pcapng's by the C
        loop too where it is built. Several files in a
        row are one capture; call :meth:`finish` after the last."""
        if not self.fast_paths:
            for p in packets_of(data, source):
                yield from self.feed(p)
            return
        mv = memoryview(data)
        classic = _classic_pcap(mv) if _segments is not None and self.accelerated else None
        if classic is not None:
            yield from self._feed_classic(mv, source, *classic)
            return
        if (_segments is not None and self.accelerated and len(mv) >= 4
                and struct.unpack_from("<I", mv, 0)[0] == _PCAPNG_SHB):
            yield from self._feed_pcapng(mv, source)
            return
        for rows in tcp_rows(data, source):
            for row in rows:
                if row.__class__ is tuple:
                    yield from self._row(mv, row)
                else:
                    out = self.feed(cast(Union[Packet, Problem], row))
                    if out:
                        yield from out

    def _row(self, mv: memoryview, row: tuple) -> list[Exchange]:
        """A packet read by :mod:`~kproto.capture.bulk` (its row)."""
        ts, index, n, src, sport, dst, dport, seq, ack, flags, start, end = row
        self.packets += 1
        self.bytes += n
        conn = self.connections.get((src, sport, dst, dport))
        if conn is not None and not (conn.closed and flags & SYN):
            # a segment of a Kafka connection: what _tcp does, without its list of
            # exchanges per segment
            self.last_ts = ts
            self._segment(conn, src, sport, seq, ack, flags, mv[start:end], ts)
            return self._take() if self._out else _NONE
        return self._tcp(src, sport, dst, dport, seq, ack, flags, mv[start:end], ts, index)

    def _feed_classic(self, mv: memoryview, source: str, big_endian: bool, nanos: bool,
                      linktype: int) -> Iterator[Exchange]:
        """:meth:`feed_capture` of a classic pcap file by the C packet loop: it consumes the
        packets that only update state and hands back the others, which take the usual path."""
        assert _segments is not None  # chosen only when the accelerator is there
        scan, connections, scanned = _segments.scan, self.connections, self._scanned
        pos, index, end = _PCAP_HEADER_SIZE, 0, len(mv)
        while True:
            pos, index, *result = scan(self, connections, mv, pos, index, big_endian, nanos, linktype)
            out = scanned(mv, index, linktype, *result)
            if out is None:
                break
            if out:
                yield from out
        if pos < end:  # a truncated record: the walker says what is wrong, as it would have
            for p in _iter_pcap(mv, ">" if big_endian else "<", nanos, index, 0, source, pos):
                yield from self.feed(p)

    def _scanned(self, mv: memoryview, index: int, linktype: int, packets: int, size: int,
                 last_ts: Optional[float], kind: int, item: Any) -> Optional[Iterable[Exchange]]:
        """Account for what one call of the C packet loop consumed and take the packet it
        stopped at: a frame row (kind 1), a packet for the usual path (2; a pcapng packet names
        its link type), frames already queued (3); None when it stopped without one."""
        self.packets += packets
        self.bytes += size
        if last_ts is not None:
            self.last_ts = last_ts
        if kind == 1:
            return self._row(mv, item)
        if kind == 2:
            ts, start, n, orig, *own = item
            return self.feed(Packet(ts, own[0] if own else linktype, mv[start:start + n], orig, index))
        if kind == 3:  # its frames went to _request_frame/_response_frame
            return self._take() if self._out else _NONE
        return None

    def _feed_pcapng(self, mv: memoryview, source: str) -> Iterator[Exchange]:
        """:meth:`feed_capture` of a pcapng file by the C packet loop: its Enhanced Packet
        Blocks as :meth:`_feed_classic` takes a classic file's records; every other block (and
        any the loop does not take whole) is read by the Python walker, one at a time."""
        assert _segments is not None  # chosen only when the accelerator is there
        scan, connections, scanned = _segments.scan_ng, self.connections, self._scanned
        walk = _PcapngWalk()
        pos, end = 0, len(mv)
        while pos < end:
            pos, walk.index, *result = scan(
                self, connections, mv, pos, walk.index, walk.order == ">", tuple(walk.ifaces))
            out = scanned(mv, walk.index, -1, *result)  # its packets name their link type
            if out:
                yield from out
            elif out is None:
                if pos >= end:
                    break
                # a block the loop does not take: the walker reads it
                items, pos = _pcapng_block(mv, pos, walk, 0, source)
                for p in items:
                    yield from self.feed(p)
                if pos < 0:  # damage ends the walk
                    return

    def feed_all(self, packets: Iterable[Union[Packet, Problem]]) -> list[Exchange]:
        """Feed every packet and finish; return all exchanges."""
        out: list[Exchange] = []
        for p in packets:
            out.extend(self.feed(p))
        out.extend(self.finish())
        return out

    def finish(self) -> list[Exchange]:
        """End of capture: flush streams, emit unanswered requests and leftover problems."""
        self._unclassified.clear()  # connections that never looked like Kafka
        for linktype, n in sorted(self.unknown_links.items()):
            self.problems.report("link", f"link type {linktype} is not one kproto reads: {n} "
                                 "packets not read")
        self.unknown_links.clear()
        # a few runts are ordinary; most packets failing is a capture labelled with a wrong link
        if sum(self.unparsed.values()) * 2 > self.packets:
            for linktype, n in sorted(self.unparsed.items()):
                self.problems.report("link", f"{n} of {self.packets} packets do not parse under "
                                     f"link type {linktype} ({LINKTYPES[linktype]}): is it the "
                                     "capture's link type?")
        self.unparsed.clear()
        seen = set()
        for conn in self.connections.values():
            if conn is not None and id(conn) not in seen:
                seen.add(id(conn))
                self._close(conn)
        return self._take()

    def _close(self, conn: TcpConnection) -> None:
        """Flush a connection: held bytes, partial frames, unanswered requests, leftover notes."""
        ts = conn.last_ts
        for ev in conn.c2b.flush(ts):
            self._request_event(conn, ev)
        for ev in conn.b2c.flush(ts):
            self._response_event(conn, ev)
        for frame in conn.requests.finish(ts):
            self._request_frame(conn, frame)
        for frame in conn.responses.finish(ts):
            self._response_frame(conn, frame)
        for corr, frame in conn.early.items():
            self._emit(self._orphan_response(conn, frame, corr))
        conn.early.clear()
        if conn.sasl_token is not None:
            self._emit(conn.sasl_token)
            conn.sasl_token = None
        for ex in list(conn.pending.values()):
            self._emit(ex, unanswered="the connection was closed" if conn.closed
                       else "the capture ended with the connection still open")
        conn.pending.clear()
        left = Problems(replace(p, reason=f"{side}: {p.reason}")
                        for side, cutter in (("client->broker", conn.requests),
                                             ("broker->client", conn.responses))
                        for p in cutter.take_pending())
        if left:
            self._emit(Exchange(conn.client, conn.broker, kind="stream", ts=ts, problems=left))

    # -- connections -----------------------------------------------------------------------------

    def _classify(self, key: tuple, seg: TcpSegment) -> Union[TcpConnection, None, Literal[False]]:
        """Find or create the connection of a segment; False while still undecided."""
        src, sport, dst, dport = key
        rkey = (dst, dport, src, sport)
        if self.ports is not None:
            if dport in self.ports:
                client, broker = (src, sport), (dst, dport)
            elif sport in self.ports:
                client, broker = (dst, dport), (src, sport)
            else:
                self.connections[key] = self.connections[rkey] = None
                return None
            return self._open(client, broker)
        # Guess: the side that sends something shaped like a Kafka request is the client.
        segs = self._unclassified.setdefault(_canon(key), [])
        segs.append(seg)
        payload = bytes(seg.payload[:64])
        if payload and len(payload) >= 14 and self.request_rule.plausible(payload, 0):
            size, api_key, version, corr = struct.unpack_from(">ihhi", payload, 0)
            why = (f"{Endpoint(src, sport)} -> {Endpoint(dst, dport)} starts with a plausible "
                   f"{bodies.api_name(api_key) or f'api key {api_key}'} v{version} request "
                   f"({size} bytes, correlation id {corr})")
            self.chosen_ports.setdefault(dport, why)
            del self._unclassified[_canon(key)]
            conn = self._open((src, sport), (dst, dport))
            for s in segs:
                self._segment(conn, s.src, s.sport, s.seq, s.ack, s.flags, s.payload, s.ts)
            return False
        if sum(1 for s in segs if len(s.payload)) >= _CLASSIFY_LIMIT or (seg.flags & (FIN | RST)):
            del self._unclassified[_canon(key)]
            self.connections[key] = self.connections[rkey] = None
        return False

    def _open(self, client: tuple, broker: tuple) -> TcpConnection:
        conn = TcpConnection(Endpoint(*client), Endpoint(*broker), self.request_rule, self.max_frame)
        conn.requests.direct = conn.responses.direct = self.fast_paths
        c, b = client, broker
        self.connections[(c[0], c[1], b[0], b[1])] = conn
        self.connections[(b[0], b[1], c[0], c[1])] = conn
        return conn

    def _segment(self, conn: TcpConnection, src: bytes, sport: int, seq: int, ack: int,
                 flags: int, payload: memoryview, ts: float) -> None:
        conn.ticks += 1
        conn.last_ts = ts
        from_client = sport == conn.client.port and src == conn.client.ip
        mine, other = (conn.c2b, conn.b2c) if from_client else (conn.b2c, conn.c2b)
        if flags & (FIN | RST):
            conn.closed = True
        taken = False  # by the frame cutter straight away
        if payload:
            if mine.next_seq is None and not flags & SYN:
                # No SYN seen for this direction: bytes may start mid-frame.
                cutter = conn.requests if from_client else conn.responses
                cutter.synced = False
                cutter.start_unsure = True
            elif (self.fast_paths and not flags & (SYN | FIN | RST)
                  and mine.in_order(seq, len(payload))):
                # the bytes expected next, nothing held: straight to the frame cutter
                taken = True
                if from_client:
                    for frame in conn.requests.data(payload, ts):
                        self._request_frame(conn, frame)
                else:
                    for frame in conn.responses.data(payload, ts):
                        self._response_frame(conn, frame)
        if not taken and (payload or flags & (SYN | FIN) or mine.acked_past is not None
                          or not self.fast_paths):
            # (an empty segment changes nothing unless an acknowledgement is outstanding)
            events = mine.segment(seq, payload, ts, syn=bool(flags & SYN), fin=bool(flags & FIN),
                                  tick=conn.ticks)
            handle_mine = self._request_event if from_client else self._response_event
            for ev in events:
                handle_mine(conn, ev)
        nxt = other.next_seq
        if flags & ACK and (nxt is not None and (other.acked_past is not None
                                                 or 0 < (ack - nxt) & 0xFFFFFFFF < 1 << 31)
                            or not self.fast_paths):
            # (what TcpStream.acked checks first: nothing acknowledged past the bytes seen
            # and nothing outstanding is the usual acknowledgement, which changes nothing)
            handle_other = self._response_event if from_client else self._request_event
            for ev in other.acked(ack, conn.ticks, ts):
                handle_other(conn, ev)

    # -- frames ----------------------------------------------------------------------------------

    def _request_event(self, conn: TcpConnection, ev) -> None:
        for frame in conn.requests.feed(ev):
            self._request_frame(conn, frame)

    def _response_event(self, conn: TcpConnection, ev) -> None:
        for frame in conn.responses.feed(ev):
            self._response_frame(conn, frame)

    def _request_frame(self, conn: TcpConnection, frame: Frame) -> None:
        ex = Exchange(conn.client, conn.broker, ts=frame.ts_start, request_end=frame.ts_end,
                      request_bytes=frame.size + 4, problems=Problems(frame.problems))
        if conn.sasl_raw is not None and not self._looks_like_request(frame):
            ex.kind = "sasl"
            ex.request_data = frame.data
            ex.sasl = {"mechanism": conn.sasl_raw}
            if conn.sasl_token is not None:
                self._emit(conn.sasl_token)
            conn.sasl_token = ex
            return
        if conn.sasl_raw is not None:
            conn.sasl_raw = None
            conn.requests.raw = conn.responses.raw = False
        try:
            # with a hole in the frame, only the bytes before it are where they belong
            key, ver, corr, cid = bodies.read_request_header(
                frame.data if frame.intact < 0 else frame.data[:frame.intact])
        except ValueError as e:
            if frame.intact >= 0:
                ex.problems.report("gap", "request header lost in a capture gap")
            else:
                ex.problems.report("decode", str(e))
            ex.kind = "stream"
            self._emit(ex)
            return
        ex.api_key, ex.api_version, ex.correlation_id, ex.client_id = key, ver, corr, cid
        if frame.missing:
            ex.problems.report("gap", f"request incomplete: {frame.missing} of {frame.size} bytes "
                               "not captured", bytes_skipped=frame.missing)
        elif frame.truncated:
            ex.problems.report("gap", "request cut off by the end of the capture")
        else:
            ex.request_data = frame.data
        if corr in conn.pending:
            old = conn.pending.pop(corr)
            old.problems.report("pairing", f"correlation id {corr} reused before a response was "
                                "seen")
            self._emit(old)
        early = conn.early.pop(corr, None)
        if early is not None:  # held behind a hole in the request stream, or capture reordering
            self._pair(conn, ex, early)
            return
        conn.pending[corr] = ex

    def _response_frame(self, conn: TcpConnection, frame: Frame) -> None:
        ex: Optional[Exchange]
        if conn.sasl_raw is not None and conn.sasl_token is not None:
            ex = conn.sasl_token
            conn.sasl_token = None
            ex.response_data = frame.data
            ex.response_start, ex.response_end = frame.ts_start, frame.ts_end
            ex.response_bytes = frame.size + 4
            ex.problems.extend(frame.problems)
            self._emit(ex)
            return
        if len(frame.data) < 4 or 0 <= frame.intact < 4:
            ex = Exchange(conn.client, conn.broker, kind="stream", ts=frame.ts_start,
                          problems=Problems(frame.problems))
            ex.problems.report("pairing", f"response frame of {frame.size} bytes has no "
                               "correlation id")
            self._emit(ex)
            return
        corr = _I32.unpack_from(frame.data, 0)[0]
        ex = conn.pending.pop(corr, None)
        if ex is None:
            # Its request may still be held behind a hole or come later in a reordered capture;
            # a capture that starts mid-connection leaves many such: keep a bounded number.
            conn.early[corr] = frame
            if len(conn.early) > _MAX_EARLY:
                old = next(iter(conn.early))
                self._emit(self._orphan_response(conn, conn.early.pop(old), old))
            return
        self._pair(conn, ex, frame)

    def _pair(self, conn: TcpConnection, ex: Exchange, frame: Frame) -> None:
        ex.response_start, ex.response_end = frame.ts_start, frame.ts_end
        ex.response_bytes = frame.size + 4
        if frame.problems:
            ex.problems.extend(frame.problems)
        if frame.missing:
            ex.problems.report("gap", f"response incomplete: {frame.missing} of {frame.size} bytes "
                               "not captured", bytes_skipped=frame.missing)
        elif frame.truncated:
            ex.problems.report("gap", "response cut off by the end of the capture")
        else:
            ex.response_data = frame.data
        if ex.api_key == _SASL_HANDSHAKE and ex.api_version == 0 and ex.response_data is not None:
            mechanism = _sasl_v0_success(ex)
            if mechanism is not None:
                # SaslHandshake v0 succeeded: raw, size-prefixed SASL tokens follow (KIP-43).
                conn.sasl_raw = mechanism
                conn.requests.raw = conn.responses.raw = True
        self._emit(ex)

    def _orphan_response(self, conn: TcpConnection, frame: Frame, corr: int) -> Exchange:
        ex = Exchange(conn.client, conn.broker, correlation_id=corr, ts=frame.ts_start,
                      response_start=frame.ts_start, response_end=frame.ts_end,
                      response_bytes=frame.size + 4,
                      response_data=None if frame.missing or frame.truncated else frame.data,
                      problems=Problems(frame.problems))
        ex.problems.report("pairing", f"orphan response ({frame.size + 4} bytes, correlation id "
                           f"{corr}): matches no request in the capture")
        return ex

    def _looks_like_request(self, frame: Frame) -> bool:
        head = struct.pack(">i", frame.size) + frame.data[:64]
        return len(head) >= 14 and self.request_rule.plausible(head, 0)

    def _emit(self, ex: Exchange, unanswered: str = "") -> None:
        if self.decode is not None:
            self.decode(ex)  # may clear expects_response (a Produce with acks=0)
        if unanswered and ex.expects_response:
            ex.problems.report("pairing", f"no response: {unanswered}")
        self._out.append(ex)

    def _take(self) -> list[Exchange]:
        out, self._out = self._out, []
        return out


def _classic_pcap(mv: memoryview) -> Optional[tuple[bool, bool, int]]:
    """(big-endian, nanosecond timestamps, link type) of a classic pcap file's header; None
    for anything else (pcapng, damaged, not a capture)."""
    if len(mv) < _PCAP_HEADER_SIZE:
        return None
    magic = struct.unpack_from("<I", mv, 0)[0]
    if magic not in _PCAP_MAGICS:
        return None
    order, nanos = _PCAP_MAGICS[magic]
    linktype = struct.unpack_from(order + "I", mv, 20)[0] & 0x0FFFFFFF
    return order == ">", nanos, linktype


def _canon(key: tuple) -> tuple:
    a, b = (key[0], key[1]), (key[2], key[3])
    return (a, b) if a <= b else (b, a)


def _sasl_v0_success(ex: Exchange) -> Optional[str]:
    """The mechanism of a successful SaslHandshake v0 exchange, else None."""
    if ex.request_data is None or ex.response_data is None:
        return None
    try:
        _, req = bodies.decode_request(ex.request_data)
        _, resp, _ = bodies.decode_response_version(ex.response_data, ApiKey.SASL_HANDSHAKE, 0)
    except (KprotoError, KeyError, TypeError):
        return None
    return req.mechanism if resp.error_code == 0 else None
