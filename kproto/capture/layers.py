"""Link layer, IPv4/IPv6 and TCP header parsing (sans-I/O): a captured frame in, a TCP segment out."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["TcpSegment", "parse_tcp", "tcp_fields", "format_ip", "link_parses", "LINKTYPES"]

# Link types understood (pcap LINKTYPE_* numbers).
LINKTYPES = {
    0: "BSD null/loopback", 1: "Ethernet", 12: "raw IP", 14: "raw IP", 101: "raw IP",
    108: "OpenBSD loopback", 113: "Linux cooked v1", 228: "raw IPv4", 229: "raw IPv6",
    276: "Linux cooked v2",
}

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

_ETH_VLAN = (0x8100, 0x88A8, 0x9100)
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_TCP = struct.Struct("!HHIIBB")  # ports, seq, ack, data offset, flags
# version and header length, total length, fragment field, protocol, addresses
_IPV4 = struct.Struct("!BxH2xH1xB2x4s4s")
_IPV6_EXT = (0, 43, 60, 51)  # hop-by-hop, routing, destination options, AH


@dataclass(slots=True)
class TcpSegment:
    """A TCP segment with its addresses; ``src``/``dst`` are packed IP addresses (4 or 16 bytes)."""

    src: bytes
    sport: int
    dst: bytes
    dport: int
    seq: int
    ack: int
    flags: int
    payload: memoryview
    ts: float
    index: int


def _link_payload(linktype: int, data: memoryview) -> tuple[int, int]:
    """Return (ethertype-like protocol, offset of the network header); protocol 0 if unusable."""
    n = len(data)
    if linktype == 1:  # Ethernet II, possibly with (stacked) VLAN tags
        if n < 14:
            return 0, 0
        etype, off = _U16.unpack_from(data, 12)[0], 14
        while etype in _ETH_VLAN and off + 4 <= n:
            etype, off = _U16.unpack_from(data, off + 2)[0], off + 4
        return etype, off
    if linktype == 113:  # Linux cooked v1: protocol at bytes 14-15
        return (_U16.unpack_from(data, 14)[0], 16) if n >= 16 else (0, 0)
    if linktype == 276:  # Linux cooked v2: protocol at bytes 0-1, 20-byte header
        return (_U16.unpack_from(data, 0)[0], 20) if n >= 20 else (0, 0)
    if linktype in (0, 108):  # 4-byte address family: host order for null, network order for loop
        if n < 4:
            return 0, 0
        fam = struct.unpack_from("<I" if linktype == 0 else "!I", data, 0)[0]
        if linktype == 0 and fam > 0xFFFF:  # written by a big-endian host
            fam = struct.unpack_from("!I", data, 0)[0]
        if fam == 2:
            return 0x0800, 4
        if fam in (10, 24, 28, 30):  # AF_INET6 on Linux, BSDs, macOS
            return 0x86DD, 4
        return 0, 0
    if linktype in (12, 14, 101, 228, 229):
        if n < 1:
            return 0, 0
        return (0x0800, 0) if data[0] >> 4 == 4 else (0x86DD, 0) if data[0] >> 4 == 6 else (0, 0)
    return 0, 0


# Protocols other than IP a link carries in ordinary captures (ethertype numbers; below 0x0600
# is an 802.3 length field: LLC frames such as spanning tree)
_OTHER_PROTOCOLS = frozenset((0x0806, 0x8035, 0x88CC, 0x888E, 0x8847, 0x8848, 0x8863, 0x8864,
                              0x88E5, 0x88F7, 0x8809, 0x22F0, 0x9000))


def link_parses(linktype: int, data: Union[bytes, memoryview]) -> bool:
    """Whether a packet that is not TCP still parses under ``linktype``: its link header is
    whole and carries an IP header of the version it names, or a protocol links ordinarily
    carry besides IP. Most packets of a capture failing it mean a wrong link type."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    proto, off = _link_payload(linktype, mv)
    if proto in (0x0800, 0x86DD):
        need = 20 if proto == 0x0800 else 40
        return off + need <= len(mv) and mv[off] >> 4 == (4 if proto == 0x0800 else 6)
    return proto != 0 and (proto < 0x0600 or proto in _OTHER_PROTOCOLS)


def parse_tcp(linktype: int, data: Union[bytes, memoryview], ts: float = 0.0,
              index: int = 0) -> Optional[TcpSegment]:
    """Parse one captured frame down to TCP; None when it is not (a complete header of) TCP.

    The payload is trimmed to the IP length (Ethernet pads short frames) and to what was captured.
    IP fragments are not reassembled (TCP stacks avoid fragmentation; their payload is ignored).
    """
    fields = tcp_fields(linktype, data)
    return None if fields is None else TcpSegment(*fields, ts, index)


TcpFields = tuple[bytes, int, bytes, int, int, int, int, memoryview]


def tcp_fields(linktype: int, data: Union[bytes, memoryview]) -> Optional[TcpFields]:
    """:func:`parse_tcp` without the object: (src, sport, dst, dport, seq, ack, flags,
    payload), or None."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    proto, off = _link_payload(linktype, mv)
    n = len(mv)
    if proto == 0x0800:
        if off + 20 > n:
            return None
        vihl, total, frag, ipproto, src, dst = _IPV4.unpack_from(mv, off)
        ihl = (vihl & 0x0F) * 4
        if vihl >> 4 != 4 or ihl < 20 or ipproto != 6:
            return None
        if frag & 0x3FFF:  # more-fragments flag or fragment offset
            return None
        end = min(n, off + total) if total >= ihl else n  # total 0: TSO-captured, trust caplen
        off += ihl
    elif proto == 0x86DD:
        if off + 40 > n or mv[off] >> 4 != 6:
            return None
        plen = _U16.unpack_from(mv, off + 4)[0]
        nxt = mv[off + 6]
        src, dst = bytes(mv[off + 8:off + 24]), bytes(mv[off + 24:off + 40])
        end = min(n, off + 40 + plen) if plen else n  # 0: jumbogram / TSO
        off += 40
        while nxt in _IPV6_EXT:
            if off + 8 > end:
                return None
            hlen = (mv[off + 1] + 2) * 4 if nxt == 51 else (mv[off + 1] + 1) * 8
            nxt = mv[off]
            off += hlen
        if nxt != 6:
            return None
    else:
        return None
    if off + 20 > end:
        return None
    sport, dport, seq, ack, doff, flags = _TCP.unpack_from(mv, off)
    hlen = (doff >> 4) * 4
    if hlen < 20 or off + hlen > end:
        return None
    return src, sport, dst, dport, seq, ack, flags, mv[off + hlen:end]


def format_ip(addr: bytes) -> str:
    """Text form of a packed IPv4/IPv6 address."""
    if len(addr) == 4:
        return "%d.%d.%d.%d" % tuple(addr)
    import ipaddress

    return str(ipaddress.IPv6Address(addr))
