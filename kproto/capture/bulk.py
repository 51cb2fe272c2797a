"""Many packets of a classic pcap file at once (sans-I/O): their TCP fields read with numpy, what
:func:`~kproto.capture.pcap.iter_packets` and :func:`~kproto.capture.layers.tcp_fields` give
packet by packet, without a Python object per packet on the way.

:func:`tcp_rows` yields, in capture order, for each packet either a row ``(ts, index, captured
length, src, sport, dst, dport, seq, ack, flags, payload start, payload end)`` (a plain TCP
over IPv4 packet behind an Ethernet, Linux cooked or raw IP header: the fields as
:func:`~kproto.capture.layers.tcp_fields` reads them, the payload as offsets into the buffer)
or, for anything else (VLAN tags, IPv6, options the vector code leaves alone, not TCP), the
:class:`~kproto.capture.pcap.Packet` itself, which the reference path reads; a damaged file
ends with the walker's own problem. pcapng files are walked by the reference walker
(:func:`~kproto.capture.pcap.packets_of`), packet by packet.
"""
from __future__ import annotations

import struct
from typing import Iterator, Union

import numpy as np

from kproto.capture.pcap import (_PCAP_HEADER_SIZE, _PCAP_MAGICS, Packet, _iter_pcap,
                                 packets_of)
from kproto.problems import Problem

__all__ = ["CHUNK", "tcp_rows"]

#: packets read together (bounds the memory of the columns of one step)
CHUNK = 8192

Row = tuple  # (ts, index, captured length, src, sport, dst, dport, seq, ack, flags, start, end)
Item = Union[Row, Packet, Problem]
_RAW_IP = (12, 14, 101, 228, 229)
# link type -> (bytes needed, offset of the protocol field or None for raw IP, network offset)
_LINKS = {1: (14, 12, 14), 113: (16, 14, 16), 276: (20, 0, 20),
          **{lt: (1, None, 0) for lt in _RAW_IP}}


def tcp_rows(data: bytes, source: str = "") -> Iterator[list[Item]]:
    """Lists of rows (or packets, or a final problem) for the packets of a capture file's
    bytes, in order (see the module's documentation)."""
    mv = memoryview(data).cast("B")
    magic = struct.unpack_from("<I", mv, 0)[0] if len(mv) >= _PCAP_HEADER_SIZE else None
    if magic not in _PCAP_MAGICS:  # pcapng, damaged or not a capture: packet by packet
        packets = packets_of(data, source)
        while True:
            chunk: list[Item] = [p for _, p in zip(range(CHUNK), packets)]
            if not chunk:
                return
            yield chunk
    order, nanos = _PCAP_MAGICS[magic]
    linktype = struct.unpack_from(order + "I", mv, 20)[0] & 0x0FFFFFFF
    arr = np.frombuffer(mv, np.uint8)
    size = struct.Struct(order + "I").unpack_from
    pos, end, index = _PCAP_HEADER_SIZE, len(mv), 0
    u32 = np.dtype(order + "u4")
    scale = 1e-9 if nanos else 1e-6
    while True:
        starts: list[int] = []
        while pos + 16 <= end and len(starts) < CHUNK:
            incl = size(mv, pos + 8)[0]
            if pos + 16 + incl > end:
                break
            starts.append(pos)
            pos += 16 + incl
        if starts:
            yield _rows(arr, mv, np.asarray(starts, np.int64), u32, scale, linktype, index)
            index += len(starts)
        if len(starts) < CHUNK:
            break
    if pos < end:  # a truncated record: the walker says what is wrong, as it would have
        rest: list[Item] = list(_iter_pcap(mv, order, nanos, index, 0, source, pos))
        if rest:
            yield rest


def _rows(arr: np.ndarray, mv: memoryview, starts: np.ndarray, u32: np.dtype, scale: float,
          linktype: int, index: int) -> list[Item]:
    n = len(starts)
    head = arr[starts[:, None] + np.arange(16)].view(u32)  # sec, frac, incl, orig
    sec, frac, incl, orig = (head[:, i].astype(np.int64) for i in range(4))
    ts = sec + frac * scale  # as Python computes sec + frac * scale, in float64
    data = starts + 16
    last = len(arr) - 1
    fast = np.zeros(n, bool)
    if linktype in _LINKS:
        need, at, off = _LINKS[linktype]
        ok = incl >= max(need, off + 20)
        if at is None:  # raw IP: the version nibble says
            proto_ok = (arr[np.minimum(data, last)] >> 4) == 4
        else:
            b = arr[np.minimum(data[:, None] + at + np.arange(2), last)].astype(np.int64)
            proto_ok = ((b[:, 0] << 8) | b[:, 1]) == 0x0800
        ip = arr[np.minimum(data[:, None] + off + np.arange(20), last)].astype(np.int64)
        vihl, ipproto = ip[:, 0], ip[:, 9]
        total = (ip[:, 2] << 8) | ip[:, 3]
        frag = (ip[:, 6] << 8) | ip[:, 7]
        src = (ip[:, 12] << 24) | (ip[:, 13] << 16) | (ip[:, 14] << 8) | ip[:, 15]
        dst = (ip[:, 16] << 24) | (ip[:, 17] << 16) | (ip[:, 18] << 8) | ip[:, 19]
        ihl = (vihl & 0x0F) * 4
        ok &= proto_ok & (vihl >> 4 == 4) & (ihl >= 20) & (ipproto == 6) & ((frag & 0x3FFF) == 0)
        # total 0: TSO-captured, trust the captured length
        stop = np.where(total >= ihl, np.minimum(incl, off + total), incl)
        t = off + ihl
        ok &= t + 20 <= stop
        tcp = arr[np.minimum((data + t)[:, None] + np.arange(14), last)].astype(np.int64)
        sport = (tcp[:, 0] << 8) | tcp[:, 1]
        dport = (tcp[:, 2] << 8) | tcp[:, 3]
        seq = (tcp[:, 4] << 24) | (tcp[:, 5] << 16) | (tcp[:, 6] << 8) | tcp[:, 7]
        ack = (tcp[:, 8] << 24) | (tcp[:, 9] << 16) | (tcp[:, 10] << 8) | tcp[:, 11]
        hlen = (tcp[:, 12] >> 4) * 4
        fast = ok & (hlen >= 20) & (t + hlen <= stop)
        addrs, which = np.unique(np.concatenate([src, dst]), return_inverse=True)
        packed = np.array([int(a).to_bytes(4, "big") for a in addrs.tolist()], dtype=object)
        rows: list = list(zip(ts.tolist(), range(index + 1, index + n + 1), incl.tolist(),
                              packed[which[:n]].tolist(), sport.tolist(),
                              packed[which[n:]].tolist(), dport.tolist(), seq.tolist(),
                              ack.tolist(), tcp[:, 13].tolist(), (data + t + hlen).tolist(),
                              (data + stop).tolist()))
    else:
        rows = [None] * n
    for i in np.flatnonzero(~fast).tolist():  # the reference path reads these
        d = int(data[i])
        rows[i] = Packet(float(ts[i]), linktype, mv[d:d + int(incl[i])], int(orig[i]),
                         index + i + 1)
    return rows
