"""pcap and pcapng parsing from bytes (sans-I/O), with thin file and stream readers on top.

``iter_packets(buf)`` yields :class:`Packet` objects and, for damaged files, a final
:class:`~kproto.problems.Problem` (kind ``capture``: ``index`` the packet's number, ``position``
the byte offset) instead of raising: a truncated capture still gives every complete packet.
``stream_packets(f)`` does the same for a stream (``tcpdump -w - | kproto decode-pcap -``),
yielding each packet as soon as its record has arrived.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO, Generator, Iterator, Union

import construct as cs

from kproto.problems import Problem

__all__ = ["Packet", "iter_packets", "packets_of", "read_capture", "read_packets", "stream_packets",
           "LINKTYPE_ETHERNET"]

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


def _layouts(order: str) -> tuple[cs.Construct, cs.Construct, cs.Construct]:
    """The headers of a capture file in one byte order, declared (packet records, read for
    every packet, stay plain ``struct`` calls): the pcap file header, a pcapng Interface
    Description Block's body and its options (code, length, value padded to 32 bits)."""
    u16, u32, i32 = ((cs.Int16ul, cs.Int32ul, cs.Int32sl) if order == "<"
                     else (cs.Int16ub, cs.Int32ub, cs.Int32sb))
    file_header = cs.Struct("magic" / u32, "version_major" / u16, "version_minor" / u16,
                            "thiszone" / i32, "sigfigs" / u32, "snaplen" / u32, "network" / u32)
    option = cs.Struct("code" / u16, "length" / u16, "value" / cs.Bytes(cs.this.length),
                       cs.Padding(lambda ctx: -ctx.length % 4))
    interface = cs.Struct("linktype" / u16, "reserved" / u16, "snaplen" / u32,
                          "options" / cs.GreedyRange(option))
    return file_header, interface, option


_LAYOUTS = {order: _layouts(order) for order in "<>"}
_PCAP_HEADER_SIZE = _LAYOUTS["<"][0].sizeof()


@dataclass(slots=True)
class Packet:
    """One captured link-layer frame. ``index`` is 1-based, as in Wireshark."""

    ts: float
    linktype: int
    data: Union[bytes, memoryview]
    orig_len: int = -1
    index: int = 0


def _damage(reason: str, index: int = 0, offset: int = 0, source: str = "") -> Problem:
    """Something wrong with the capture file itself (not with the traffic in it)."""
    return Problem("capture", reason, source, position=offset, index=index)


def iter_packets(buf: Union[bytes, bytearray, memoryview],
                 source: str = "") -> Iterator[Union[Packet, Problem]]:
    """The packets of a pcap or pcapng capture held in ``buf`` (zero-copy slices), in order, and
    a problem for damage (``source``: the problem's); an iterator."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf.cast("B")
    if len(mv) < 4:
        return iter([_damage("file too short to be a capture", 0, 0, source)])
    return _parse(mv, source=source)


def _parse(mv: memoryview, index: int = 0, shift: int = 0,
           source: str = "") -> Generator[Union[Packet, Problem], None, tuple[int, bool]]:
    """The walker of the capture format in ``mv`` (a generator, not a layer over one: packets
    come straight from it). ``index``: packets before ``mv``; ``shift``: where ``mv`` starts in
    the capture (a stream's records are parsed one by one behind their headers). The walker
    returns the packets counted and whether the parse reached the end (False: it stopped at
    damage)."""
    magic = struct.unpack_from("<I", mv, 0)[0]
    if magic == _PCAPNG_SHB:
        return _iter_pcapng(mv, index, shift, source)
    if magic in _PCAP_MAGICS:
        return _iter_pcap(mv, *_PCAP_MAGICS[magic], index, shift, source)
    return _not_a_capture(magic, index, source)


def _not_a_capture(magic: int, index: int,
                   source: str) -> Generator[Union[Packet, Problem], None, tuple[int, bool]]:
    yield _damage(f"not a pcap or pcapng file (magic 0x{magic:08x})", 0, 0, source)
    return index, False


def _iter_pcap(mv: memoryview, order: str, nanos: bool, index: int = 0, shift: int = 0,
               source: str = "", start: int = _PCAP_HEADER_SIZE
               ) -> Generator[Union[Packet, Problem], None, tuple[int, bool]]:
    """``start``: where the first record to read is (after the file header)."""
    if len(mv) < _PCAP_HEADER_SIZE:
        yield _damage("pcap file header truncated", 0, len(mv), source=source)
        return index, False
    # the upper bits of the link type field carry FCS information (pcap's LINKTYPE_MASK)
    linktype = _LAYOUTS[order][0].parse(mv[:_PCAP_HEADER_SIZE]).network & 0x0FFFFFFF
    rec = struct.Struct(order + "IIII")
    scale = 1e-9 if nanos else 1e-6
    pos, end = start, len(mv)
    while pos < end:
        index += 1
        if pos + 16 > end:
            yield _damage(f"packet {index}: record header truncated ({end - pos} of 16 bytes)",
                          index, pos + shift, source=source)
            return index, False
        sec, frac, incl, orig = rec.unpack_from(mv, pos)
        pos += 16
        if pos + incl > end:
            yield _damage(f"packet {index}: truncated ({end - pos} of {incl} bytes present)",
                          index, pos - 16 + shift, source=source)
            return index, False
        yield Packet(sec + frac * scale, linktype, mv[pos:pos + incl], orig, index)
        pos += incl
    return index, True


def _iter_pcapng(mv: memoryview, index: int = 0, shift: int = 0,
                 source: str = "") -> Generator[Union[Packet, Problem], None, tuple[int, bool]]:
    walk = _PcapngWalk(index)
    pos, end = 0, len(mv)
    while pos < end:
        items, pos = _pcapng_block(mv, pos, walk, shift, source)
        yield from items
        if pos < 0:
            return walk.index, False
    return walk.index, True


class _PcapngWalk:
    """Where a walk over a pcapng file is: the section's byte order (``"<"``/``">"``), its
    interfaces (link type, seconds per timestamp unit, timestamp offset) and the packets so
    far (``index``)."""

    __slots__ = ("order", "ifaces", "index")

    def __init__(self, index: int = 0) -> None:
        self.order = "<"
        self.ifaces: list[tuple[int, float, int]] = []
        self.index = index


def _pcapng_block(mv: memoryview, pos: int, walk: _PcapngWalk, shift: int = 0,
                 source: str = "") -> tuple[list[Union[Packet, Problem]], int]:
    """The packets and problems of the pcapng block at ``pos`` (``walk`` updated), and where
    the next block starts (-1: damage ends the walk). ``shift``: where ``mv`` starts in the
    capture."""
    end = len(mv)
    order = walk.order
    at = pos + shift  # where the block is in the whole capture
    if pos + 12 > end:
        return [_damage(f"pcapng block header truncated at byte {at}",
                        walk.index + 1, at, source=source)], -1
    btype = struct.unpack_from("<I", mv, pos)[0]
    if btype == _PCAPNG_SHB:
        bom = struct.unpack_from("<I", mv, pos + 8)[0]
        if bom == _BYTE_ORDER_MAGIC:
            order = "<"
        elif bom == 0x4D3C2B1A:
            order = ">"
        else:
            return [_damage(f"pcapng section header with bad byte-order magic at byte {at}",
                            walk.index + 1, at, source=source)], -1
        walk.order = order
        walk.ifaces = []
    else:
        btype = struct.unpack_from(order + "I", mv, pos)[0]
    blen = struct.unpack_from(order + "I", mv, pos + 4)[0]
    if blen < 12 or blen % 4:
        return [_damage(f"pcapng block at byte {at} has invalid length {blen}",
                        walk.index + 1, at, source=source)], -1
    if pos + blen > end:
        return [_damage(f"pcapng block at byte {at} truncated ({end - pos} of {blen} bytes)",
                        walk.index + 1, at, source=source)], -1
    body = mv[pos + 8:pos + blen - 4]
    ifaces = walk.ifaces
    out: list[Union[Packet, Problem]] = []
    if btype == 1:  # Interface Description Block
        if len(body) < 8:
            return [_damage(f"pcapng interface block at byte {at} too short",
                            walk.index + 1, at, source=source)], -1
        idb = _LAYOUTS[order][1].parse(body)
        ifaces.append((idb.linktype, *_idb_time(idb.options, order)))
    elif btype in (6, 2):  # Enhanced Packet Block, obsolete Packet Block
        if len(body) < 20:
            return [_damage(f"pcapng packet block at byte {at} too short",
                            walk.index + 1, at, source=source)], -1
        if btype == 6:
            iface, hi, lo, incl, orig = struct.unpack_from(order + "IIIII", body, 0)
        else:
            iface, _drops, hi, lo, incl, orig = struct.unpack_from(order + "HHIIII", body, 0)
        walk.index += 1
        index = walk.index
        if iface >= len(ifaces):
            out.append(_damage(f"packet {index}: unknown interface {iface}",
                               index, at, source=source))
        elif 20 + incl > len(body):
            out.append(_damage(f"packet {index}: captured length {incl} exceeds its block",
                               index, at, source=source))
        else:
            linktype, unit, offset = ifaces[iface]
            out.append(Packet(((hi << 32) | lo) * unit + offset, linktype, body[20:20 + incl],
                              orig, index))
    elif btype == 3:  # Simple Packet Block: no timestamp, interface 0
        if len(body) < 4 or not ifaces:
            out.append(_damage(f"pcapng simple packet block at byte {at} unusable",
                               walk.index + 1, at, source=source))
        else:
            walk.index += 1
            orig = struct.unpack_from(order + "I", body, 0)[0]
            out.append(Packet(0.0, ifaces[0][0], body[4:4 + min(orig, len(body) - 4)], orig,
                              walk.index))
    return out, pos + blen


def _idb_time(options: list, order: str) -> tuple[float, int]:
    """Timestamp unit (if_tsresol, default microseconds) and offset (if_tsoffset) of an
    interface, from its options up to opt_endofopt."""
    unit, offset = 1e-6, 0
    for opt in options:
        if opt.code == 0:
            break
        if opt.code == 9 and opt.length >= 1:
            r = opt.value[0]
            unit = 2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r
        elif opt.code == 14 and opt.length >= 8:
            offset = struct.unpack_from(order + "q", opt.value, 0)[0]
    return unit, offset


def read_packets(path: Union[str, os.PathLike]) -> Iterator[Union[Packet, Problem]]:
    """Yield the packets of a capture file (read whole; packet data are views into it); a
    problem's ``source`` is ``path``."""
    yield from packets_of(read_capture(path), os.fsdecode(path))


def read_capture(path: Union[str, os.PathLike]) -> bytes:
    """The bytes of a capture file (for :func:`packets_of` or
    :meth:`~kproto.capture.decoder.CaptureDecoder.feed_capture`)."""
    with open(path, "rb") as f:
        return f.read()


def packets_of(data: bytes, source: str) -> Iterator[Union[Packet, Problem]]:
    """The packets of a capture file's bytes (an empty file is a problem); a problem's
    ``source`` is ``source``."""
    if not data:
        return iter([_damage("empty file", 0, 0, source)])
    return iter_packets(data, source)


#: A record or block longer than this in a stream is damage, not data (snap lengths are at
#: most 256 KiB; a bad length must not make a reader wait for, or hold, gigabytes).
MAX_STREAM_RECORD = 64 << 20


def stream_packets(f: BinaryIO) -> Iterator[Union[Packet, Problem]]:
    """Yield the packets of a pcap or pcapng stream (a pipe, a socket, a growing file) as
    their records arrive: the same packets and problems as :func:`iter_packets` on the whole
    stream. Each record is parsed with the stream's headers (the pcap file header, or the
    pcapng section and interface blocks) in front of it."""

    def read(n: int) -> bytes:
        parts, got = [], 0
        while got < n:
            chunk = f.read(n - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    head = read(4)
    if len(head) < 4:
        yield from (iter_packets(head) if head else [_damage("empty stream", 0, 0)])
        return
    magic = struct.unpack_from("<I", head, 0)[0]
    index = 0

    def parsed(prefix: bytes, unit: bytes,
               unit_pos: int) -> Generator[Union[Packet, Problem], None, bool]:
        """``unit`` parsed after ``prefix``, numbered and placed as in the whole stream; False
        when the parser stopped at damage, as it would have in the whole stream."""
        nonlocal index
        index, complete = yield from _parse(memoryview(prefix + unit), index, unit_pos - len(prefix))
        return complete

    if magic in _PCAP_MAGICS:
        order = _PCAP_MAGICS[magic][0]
        prefix = head + read(20)
        if len(prefix) < 24:
            yield from iter_packets(prefix)
            return
        pos = 24
        while True:
            unit = read(16)
            if not unit:
                return
            if len(unit) == 16:
                incl = struct.unpack_from(order + "I", unit, 8)[0]
                if incl > MAX_STREAM_RECORD:
                    yield _damage(f"packet {index + 1}: captured length {incl} is not "
                                  "plausible; the stream is damaged", index + 1, pos)
                    return
                unit += read(incl)
            if not (yield from parsed(prefix, unit, pos)):  # a truncated record: the end
                return
            pos += len(unit)
    elif magic == _PCAPNG_SHB:
        prefix, pending, pos, order = b"", head, 0, "<"
        while True:
            hdr = pending + read(8 - len(pending))
            pending = b""
            if not hdr:
                return
            section = len(hdr) >= 4 and struct.unpack_from("<I", hdr, 0)[0] == _PCAPNG_SHB
            if section and len(hdr) == 8:
                hdr += read(4)  # the byte-order magic says how to read the length
                if len(hdr) == 12:
                    bom = struct.unpack_from("<I", hdr, 8)[0]
                    order = ">" if bom == 0x4D3C2B1A else "<"
            block = hdr
            if len(hdr) >= 8:
                blen = struct.unpack_from(order + "I", hdr, 4)[0]
                if blen > MAX_STREAM_RECORD:
                    yield _damage(f"pcapng block at byte {pos} has implausible length "
                                  f"{blen}; the stream is damaged", index + 1, pos)
                    return
                # at least the 12 bytes the parser needs to judge a length (invalid below 12)
                block += read(max(blen, 12) - len(hdr))
            btype = struct.unpack_from(order + "I", block, 0)[0] if len(block) >= 4 else -1
            if not (yield from parsed(b"" if section else prefix, block, pos)):
                return
            if section:
                prefix = block
            elif btype == 1:
                prefix += block
            pos += len(block)
    else:
        yield from iter_packets(head)
