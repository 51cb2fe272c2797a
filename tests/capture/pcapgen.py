"""Test-side builders: TCP/IP packets, link layers, pcap/pcapng files and Kafka conversations."""
from __future__ import annotations

import struct
from typing import Iterable

import kproto
from kproto.framing import RequestHeader, ResponseHeader

SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08


def tcp(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    # options: 12 bytes (NOP NOP timestamps) so the header length is not the minimum
    opts = b"\x01\x01\x08\x0a" + b"\x00" * 8
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                      ((20 + len(opts)) // 4) << 4, flags, 65535, 0, 0)
    return hdr + opts + payload


def ipv4(src: bytes, dst: bytes, segment: bytes) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(segment), 1, 0x4000, 64, 6, 0,
                       src, dst) + segment


def ipv6(src: bytes, dst: bytes, segment: bytes, hop_by_hop: bool = False) -> bytes:
    if hop_by_hop:  # an extension header before TCP
        ext = bytes([6, 0]) + b"\x01\x04\x00\x00\x00\x00"
        return struct.pack("!IHBB16s16s", 0x60000000, len(ext) + len(segment), 0, 64, src, dst) + ext + segment
    return struct.pack("!IHBB16s16s", 0x60000000, len(segment), 6, 64, src, dst) + segment


def link(linktype: int, ip: bytes, vlans: Iterable[int] = ()) -> bytes:
    """Wrap an IP packet in a link layer (Ethernet with optional VLAN tags, SLL, SLL2, null, loop, raw)."""
    v6 = ip[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if linktype == 1:
        tags = b"".join(struct.pack("!HH", 0x8100, vid) for vid in vlans)
        eth = b"\x02" * 6 + b"\x04" * 6 + tags + struct.pack("!H", etype) + ip
        return eth + b"\x00" * max(0, 60 - len(eth))  # Ethernet pads short frames
    if linktype == 113:
        return struct.pack("!HHH8sH", 0, 772, 6, b"\x00" * 8, etype) + ip
    if linktype == 276:
        return struct.pack("!HHIHBB8s", etype, 0, 1, 772, 0, 6, b"\x00" * 8) + ip
    if linktype == 0:
        return struct.pack("<I", 30 if v6 else 2) + ip
    if linktype == 108:
        return struct.pack("!I", 24 if v6 else 2) + ip
    if linktype in (101, 12):
        return ip
    raise ValueError(linktype)


def write_pcap(packets: list[tuple[float, bytes]], linktype: int = 1, *, nanos: bool = False,
               big_endian: bool = False) -> bytes:
    o = ">" if big_endian else "<"
    out = bytearray(struct.pack(o + "IHHiIII", 0xA1B23C4D if nanos else 0xA1B2C3D4, 2, 4, 0, 0,
                                262144, linktype))
    for ts, data in packets:
        sec = int(ts)
        frac = round((ts - sec) * (1e9 if nanos else 1e6))
        out += struct.pack(o + "IIII", sec, frac, len(data), len(data)) + data
    return bytes(out)


def _block(btype: int, body: bytes, o: str) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(o + "II", btype, n) + body + struct.pack(o + "I", n)


def write_pcapng(packets: list[tuple[float, bytes]], linktype: int = 1, *, tsresol: int = 9,
                 big_endian: bool = False) -> bytes:
    o = ">" if big_endian else "<"
    shb = _block(0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1), o)
    opt = struct.pack(o + "HH", 9, 1) + bytes([tsresol]) + b"\x00" * 3 + struct.pack(o + "HH", 0, 0)
    idb = _block(1, struct.pack(o + "HHI", linktype, 0, 0) + opt, o)
    out = bytearray(shb + idb)
    for ts, data in packets:
        t = round(ts * 10 ** tsresol)
        out += _block(6, struct.pack(o + "IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(data), len(data)) + data, o)
    return bytes(out)


def request_frame(api_key: int, version: int, corr: int, body=None, client_id: str = "gen") -> bytes:
    codec = kproto.request(api_key)
    obj = body if body is not None else codec.cls()
    return kproto.encode_request(RequestHeader(request_api_key=api_key, request_api_version=version,
                                               correlation_id=corr, client_id=client_id), obj)


def response_frame(api_key: int, version: int, corr: int, body=None) -> bytes:
    obj = body if body is not None else kproto.response(api_key).cls()
    return kproto.encode_response(ResponseHeader(correlation_id=corr), obj, api_key, version)


class Conversation:
    """One TCP connection as a list of IP packets: handshake, data both ways with ACKs, close."""

    def __init__(self, client=(b"\x7f\x00\x00\x01", 40000), broker=(b"\x7f\x00\x00\x01", 9092),
                 t0: float = 1_700_000_000.0, v6: bool = False, isn=(1000, 5000)) -> None:
        self.c, self.b = client, broker
        self.v6 = v6
        self.t = t0
        self.cseq, self.bseq = isn
        self.packets: list[tuple[float, bytes]] = []  # (ts, ip packet)
        self._pkt(True, self.cseq, 0, SYN)
        self._pkt(False, self.bseq, self.cseq + 1, SYN | ACK)
        self.cseq += 1
        self.bseq += 1
        self._pkt(True, self.cseq, self.bseq, ACK)

    def _pkt(self, from_client: bool, seq: int, ack: int, flags: int, payload: bytes = b"") -> int:
        self.t += 0.0001
        (src, sp), (dst, dp) = (self.c, self.b) if from_client else (self.b, self.c)
        seg = tcp(sp, dp, seq, ack, flags, payload)
        ip = ipv6(src, dst, seg) if self.v6 else ipv4(src, dst, seg)
        self.packets.append((self.t, ip))
        return len(self.packets) - 1

    def send(self, from_client: bool, data: bytes, mss: int = 1400, ack: bool = True) -> list[int]:
        """Send data in segments of at most mss bytes; returns the packet indexes of the segments."""
        idx = []
        for i in range(0, len(data), mss):
            chunk = data[i:i + mss]
            if from_client:
                idx.append(self._pkt(True, self.cseq, self.bseq, ACK | PSH, chunk))
                self.cseq += len(chunk)
            else:
                idx.append(self._pkt(False, self.bseq, self.cseq, ACK | PSH, chunk))
                self.bseq += len(chunk)
        if ack:
            if from_client:
                self._pkt(False, self.bseq, self.cseq, ACK)
            else:
                self._pkt(True, self.cseq, self.bseq, ACK)
        return idx

    def close(self) -> None:
        self._pkt(True, self.cseq, self.bseq, FIN | ACK)
        self.cseq += 1
        self._pkt(False, self.bseq, self.cseq, FIN | ACK)
        self.bseq += 1
        self._pkt(True, self.cseq, self.bseq, ACK)

    def frames(self, linktype: int = 1, vlans: Iterable[int] = ()) -> list[tuple[float, bytes]]:
        return [(ts, link(linktype, ip, vlans)) for ts, ip in self.packets]


def packets_of(frames: list[tuple[float, bytes]], linktype: int = 1):
    """Packet objects for the decoder's live-packet API."""
    from kproto.capture import Packet

    return [Packet(ts, linktype, data, len(data), i + 1) for i, (ts, data) in enumerate(frames)]


def simple_exchange(conv: Conversation, api_key: int, version: int, corr: int,
                    req=None, resp=None, mss: int = 1400) -> None:
    conv.send(True, request_frame(api_key, version, corr, req), mss)
    conv.send(False, response_frame(api_key, version, corr, resp), mss)
