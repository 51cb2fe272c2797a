"""pcap and pcapng parsing from bytes (sans-I/O), with a thin file reader on top.

``iter_packets(buf)`` yields :class:`Packet` objects and, for damaged files, a final
:class:`CaptureProblem` instead of raising: a truncated capture still gives every complete packet.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator, Union

__all__ = ["Packet", "CaptureProblem", "iter_packets", "read_packets", "LINKTYPE_ETHERNET"]

LINKTYPE_ETHERNET = 1

_PCAP_MAGICS = {
    # magic as read little-endian -> (byte order, nanosecond timestamps)
    0xA1B2C3D4: ("<", False),
    0xD4C3B2A1: (">", False),
    0xA1B23C4D: ("<", True),
    0x4D3CB2A1: (">", True),
}
_PCAPNG_SHB = 0x0A0D0D0A
_BYTE_ORDER_MAGIC = 0x1A2B3C4D


@dataclass(slots=True)
class Packet:
    """One captured link-layer frame. ``index`` is 1-based, as in Wireshark."""

    ts: float
    linktype: int
    data: Union[bytes, memoryview]
    orig_len: int = -1
    index: int = 0


@dataclass(slots=True)
class CaptureProblem:
    """Something wrong with the capture file itself (not with the traffic in it)."""

    message: str
    index: int = 0
    offset: int = 0


def iter_packets(buf: Union[bytes, bytearray, memoryview]) -> Iterator[Union[Packet, CaptureProblem]]:
    """Yield the packets of a pcap or pcapng capture held in ``buf`` (zero-copy slices)."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf.cast("B")
    if len(mv) < 4:
        yield CaptureProblem("file too short to be a capture", 0, 0)
        return
    magic = struct.unpack_from("<I", mv, 0)[0]
    if magic == _PCAPNG_SHB:
        yield from _iter_pcapng(mv)
    elif magic in _PCAP_MAGICS:
        yield from _iter_pcap(mv, *_PCAP_MAGICS[magic])
    else:
        yield CaptureProblem(f"not a pcap or pcapng file (magic 0x{magic:08x})", 0, 0)


def _iter_pcap(mv: memoryview, order: str, nanos: bool) -> Iterator[Union[Packet, CaptureProblem]]:
    if len(mv) < 24:
        yield CaptureProblem("pcap file header truncated", 0, len(mv))
        return
    linktype = struct.unpack_from(order + "I", mv, 20)[0] & 0x0FFFFFFF
    rec = struct.Struct(order + "IIII")
    scale = 1e-9 if nanos else 1e-6
    pos, end, index = 24, len(mv), 0
    while pos < end:
        index += 1
        if pos + 16 > end:
            yield CaptureProblem(f"packet {index}: record header truncated ({end - pos} of 16 bytes)",
                                 index, pos)
            return
        sec, frac, incl, orig = rec.unpack_from(mv, pos)
        pos += 16
        if pos + incl > end:
            yield CaptureProblem(f"packet {index}: truncated ({end - pos} of {incl} bytes present)",
                                 index, pos - 16)
            return
        yield Packet(sec + frac * scale, linktype, mv[pos:pos + incl], orig, index)
        pos += incl


def _iter_pcapng(mv: memoryview) -> Iterator[Union[Packet, CaptureProblem]]:
    pos, end, index = 0, len(mv), 0
    order = "<"
    # per interface: (linktype, seconds per timestamp unit, timestamp offset)
    ifaces: list[tuple[int, float, int]] = []
    while pos < end:
        if pos + 12 > end:
            yield CaptureProblem(f"pcapng block header truncated at byte {pos}", index + 1, pos)
            return
        btype = struct.unpack_from("<I", mv, pos)[0]
        if btype == _PCAPNG_SHB:
            bom = struct.unpack_from("<I", mv, pos + 8)[0]
            if bom == _BYTE_ORDER_MAGIC:
                order = "<"
            elif bom == 0x4D3C2B1A:
                order = ">"
            else:
                yield CaptureProblem(f"pcapng section header with bad byte-order magic at byte {pos}",
                                     index + 1, pos)
                return
            ifaces = []
        else:
            btype = struct.unpack_from(order + "I", mv, pos)[0]
        blen = struct.unpack_from(order + "I", mv, pos + 4)[0]
        if blen < 12 or blen % 4:
            yield CaptureProblem(f"pcapng block at byte {pos} has invalid length {blen}", index + 1, pos)
            return
        if pos + blen > end:
            yield CaptureProblem(f"pcapng block at byte {pos} truncated ({end - pos} of {blen} bytes)",
                                 index + 1, pos)
            return
        body = mv[pos + 8:pos + blen - 4]
        if btype == 1:  # Interface Description Block
            if len(body) < 8:
                yield CaptureProblem(f"pcapng interface block at byte {pos} too short", index + 1, pos)
                return
            linktype = struct.unpack_from(order + "H", body, 0)[0]
            ifaces.append((linktype, *_idb_time(body[8:], order)))
        elif btype in (6, 2):  # Enhanced Packet Block, obsolete Packet Block
            if len(body) < 20:
                yield CaptureProblem(f"pcapng packet block at byte {pos} too short", index + 1, pos)
                return
            if btype == 6:
                iface, hi, lo, incl, orig = struct.unpack_from(order + "IIIII", body, 0)
            else:
                iface, _drops, hi, lo, incl, orig = struct.unpack_from(order + "HHIIII", body, 0)
            index += 1
            if iface >= len(ifaces):
                yield CaptureProblem(f"packet {index}: unknown interface {iface}", index, pos)
            elif 20 + incl > len(body):
                yield CaptureProblem(f"packet {index}: captured length {incl} exceeds its block", index, pos)
            else:
                linktype, unit, offset = ifaces[iface]
                yield Packet(((hi << 32) | lo) * unit + offset, linktype, body[20:20 + incl], orig, index)
        elif btype == 3:  # Simple Packet Block: no timestamp, interface 0
            if len(body) < 4 or not ifaces:
                yield CaptureProblem(f"pcapng simple packet block at byte {pos} unusable", index + 1, pos)
            else:
                index += 1
                orig = struct.unpack_from(order + "I", body, 0)[0]
                yield Packet(0.0, ifaces[0][0], body[4:4 + min(orig, len(body) - 4)], orig, index)
        pos += blen


def _idb_time(options: memoryview, order: str) -> tuple[float, int]:
    """Timestamp unit (if_tsresol, default microseconds) and offset (if_tsoffset) of an interface."""
    unit, offset, pos = 1e-6, 0, 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(order + "HH", options, pos)
        if code == 0:
            break
        value = options[pos + 4:pos + 4 + length]
        if code == 9 and length >= 1:
            r = value[0]
            unit = 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
        elif code == 14 and length >= 8:
            offset = struct.unpack_from(order + "q", value, 0)[0]
        pos += 4 + length + (-length % 4)
    return unit, offset


def read_packets(path: Union[str, os.PathLike]) -> Iterator[Union[Packet, CaptureProblem]]:
    """Yield the packets of a capture file (read whole; packet data are views into it)."""
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        yield CaptureProblem("empty file", 0, 0)
        return
    yield from iter_packets(data)
