"""Kafka's compression codecs, byte-compatible with what Apache Kafka writes and reads.

Codec ids are the values of the record-batch attribute bits 0-2: 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd.

* gzip: a standard gzip stream, header laid out as Java's ``GZIPOutputStream`` writes it.
* snappy: snappy-java's xerial framing (``\\x82SNAPPY\\0`` magic, 32 KiB blocks, each prefixed
  with its big-endian compressed length); raw snappy blocks are also accepted on read.
* lz4: the LZ4 frame format with 64 KiB independent blocks as Kafka's ``KafkaLZ4BlockOutputStream``
  writes it. ``legacy_lz4=True`` selects the variant of magic 0 message sets, whose frame header
  checksum was computed over the magic number too.
* zstd: a streaming frame without a content size.

Decompression is capped: ``max_size`` bounds the output, and a stream that would produce more
raises :class:`DecompressionLimitError` before the excess is allocated.
"""
from __future__ import annotations

import functools
import struct
import zlib
from typing import Callable

import lz4.block as _lz4_block
import snappy as _snappy
import zstandard as _zstd

from kproto.codecs.primitives import read_uvarint
from kproto.errors import DecodeError, EncodeError

__all__ = [
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES", "CODEC_IDS", "DEFAULT_MAX_SIZE",
    "DecompressionBudget",
    "DEFAULT_LEVELS", "DecompressionLimitError", "compress", "decompress", "codec_id",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES: dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4",
                               ZSTD: "zstd"}
CODEC_IDS: dict[str, int] = {v: k for k, v in CODEC_NAMES.items()}
# Kafka's defaults (CompressionType.*.defaultLevel()); snappy has no level.
DEFAULT_LEVELS: dict[int, int] = {GZIP: 6, LZ4: 9, ZSTD: 3}
# Default ceiling on one decompressed payload; Kafka's own limit is the heap, ours is explicit.
DEFAULT_MAX_SIZE = 256 * 1024 * 1024
# Default budget of one read, across its payloads (see DecompressionBudget).
DEFAULT_BUDGET_FLOOR = 16 * 1024 * 1024
DEFAULT_BUDGET_RATIO = 64

Buffer = bytes | bytearray | memoryview


class DecompressionLimitError(DecodeError):
    """Decompressed output would exceed the configured ``max_size``."""


def codec_id(codec: int | str) -> int:
    """Normalise a codec given by id (0-4) or name (``"lz4"``) to its id."""
    if isinstance(codec, str):
        try:
            return CODEC_IDS[codec.lower()]
        except KeyError:
            raise ValueError(f"unknown compression codec {codec!r}") from None
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression codec id {codec!r}")
    return codec


def _limit(what: str, max_size: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"decompressed data exceeds the limit of {max_size} bytes",
                                   what=what)


# ---------------------------------------------------------------------------------------- gzip
# Java's GZIPOutputStream header: no flags, mtime 0, XFL 0, OS 255 (JDK 16+).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    # Kafka accepts 1..9 and Deflater.DEFAULT_COMPRESSION (-1), which zlib runs as level 6.
    lvl = DEFAULT_LEVELS[GZIP] if level is None or level == -1 else level
    if not (1 <= lvl <= 9):
        raise EncodeError(f"gzip level must be in 1..9 (or -1), got {lvl}")
    co = zlib.compressobj(lvl, zlib.DEFLATED, -15, 8)
    body = co.compress(data) + co.flush()
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return b"".join((_GZIP_HEADER, body, trailer))


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = bytes(data) if not isinstance(data, bytes) else data
    while True:
        d = zlib.decompressobj(31)  # gzip wrapper, header and trailer CRC checked by zlib
        try:
            chunk = d.decompress(rest, max_size - total + 1)
        except zlib.error as e:
            raise DecodeError(f"corrupt gzip stream: {e}", what="gzip") from None
        total += len(chunk)
        out.append(chunk)
        if total > max_size or d.unconsumed_tail:
            raise _limit("gzip", max_size)
        if not d.eof:
            raise DecodeError("truncated gzip stream", what="gzip")
        # Java's GZIPInputStream reads concatenated members; stray bytes after one are ignored.
        rest = d.unused_data
        if len(rest) < 10 or rest[:2] != b"\x1f\x8b":
            return b"".join(out)


# -------------------------------------------------------------------------------------- snappy
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_I32BE = struct.Struct(">i")


def _snappy_block(block: Buffer, budget: int, max_size: int) -> bytes:
    # A raw block starts with its uncompressed length: check it before allocating anything.
    try:
        declared = read_uvarint(block, 0)[0]
    except DecodeError:
        raise DecodeError("bad snappy length prefix", what="snappy") from None
    if declared > budget:
        raise _limit("snappy", max_size)
    try:
        return _snappy.uncompress(block)
    except Exception as e:  # cramjam/snappy raise their own error types
        raise DecodeError(f"corrupt snappy block: {e}", what="snappy") from None


def _snappy_compress(data: Buffer, level: int | None) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(mv), _XERIAL_BLOCK):
        c = _snappy.compress(mv[i:i + _XERIAL_BLOCK])
        parts.append(_I32BE.pack(len(c)))
        parts.append(c)
    return b"".join(parts)


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    mv = memoryview(data)
    if mv[:8] != _XERIAL_MAGIC:
        return _snappy_block(mv, max_size, max_size)
    if len(mv) < 16:
        raise DecodeError("truncated xerial snappy header", what="snappy")
    pos, end = 16, len(mv)
    out: list[bytes] = []
    total = 0
    while pos < end:
        # snappy-java accepts a new stream header after a complete one (concatenated streams).
        if mv[pos:pos + 8] == _XERIAL_MAGIC and end - pos >= 16:
            pos += 16
            continue
        if end - pos < 4:
            raise DecodeError("truncated xerial block length", what="snappy", offset=pos)
        n = _I32BE.unpack_from(mv, pos)[0]
        pos += 4
        if n < 0 or n > end - pos:
            raise DecodeError(f"xerial block length {n} exceeds the {end - pos} bytes left",
                              what="snappy", offset=pos - 4)
        chunk = _snappy_block(mv[pos:pos + n], max_size - total, max_size)
        pos += n
        total += len(chunk)
        out.append(chunk)
    return b"".join(out)


# ----------------------------------------------------------------------------------------- lz4
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK = 64 * 1024
_U32LE = struct.Struct("<I")
_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (frame headers only, so no 16-byte stripe loop is needed)."""
    n = len(data)
    if n >= 16:  # never the case for an LZ4 frame header (at most 15 bytes)
        raise ValueError("_xxh32 handles inputs shorter than 16 bytes")
    h = (seed + _P5 + n) & _M32
    i = 0
    while i + 4 <= n:
        h = (h + _U32LE.unpack_from(data, i)[0] * _P3) & _M32
        h = (((h << 17) | (h >> 15)) & _M32) * _P4 & _M32
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M32
        h = (((h << 11) | (h >> 21)) & _M32) * _P1 & _M32
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    h ^= h >> 16
    return h


@functools.lru_cache(maxsize=64)
def _header_checksum(header: bytes) -> int:
    """The frame header checksum byte; a producer writes the same few headers every time."""
    return (_xxh32(header) >> 8) & 0xFF


def _lz4_header(legacy: bool) -> bytes:
    # FLG: version 01, independent blocks, no checksums, no content size; BD: 64 KiB blocks.
    head = _U32LE.pack(_LZ4_MAGIC) + b"\x60\x40"
    hc = (_xxh32(head if legacy else head[4:]) >> 8) & 0xFF
    return head + bytes((hc,))


_LZ4_HEADERS = {False: _lz4_header(False), True: _lz4_header(True)}


def _lz4_compress(data: Buffer, level: int | None, legacy: bool = False) -> bytes:
    lvl = DEFAULT_LEVELS[LZ4] if level is None else level
    if not (1 <= lvl <= 17):
        raise EncodeError(f"lz4 level must be in 1..17, got {lvl}")
    # Kafka uses lz4-java's fast compressor at the default level 9, the HC compressor otherwise.
    kw = {"mode": "default"} if lvl == DEFAULT_LEVELS[LZ4] else {"mode": "high_compression",
                                                               "compression": lvl}
    mv = memoryview(data)
    parts = [_LZ4_HEADERS[legacy]]
    for i in range(0, len(mv), _LZ4_BLOCK):
        raw = mv[i:i + _LZ4_BLOCK]
        c = _lz4_block.compress(raw, store_size=False, **kw)
        if len(c) >= len(raw):  # incompressible: stored raw, flagged by the high bit
            parts.append(_U32LE.pack(len(raw) | 0x80000000))
            parts.append(bytes(raw))
        else:
            parts.append(_U32LE.pack(len(c)))
            parts.append(c)
    parts.append(b"\0\0\0\0")
    return b"".join(parts)


def _lz4_decompress(data: Buffer, max_size: int, legacy: bool = False) -> bytes:
    mv = memoryview(data)
    end = len(mv)
    if end < 7:
        raise DecodeError("truncated lz4 frame header", what="lz4")
    if _U32LE.unpack_from(mv, 0)[0] != _LZ4_MAGIC:
        raise DecodeError("bad lz4 frame magic", what="lz4", offset=0)
    flg, bd = mv[4], mv[5]
    if flg >> 6 != 1:
        raise DecodeError(f"unsupported lz4 frame version {flg >> 6}", what="lz4", offset=4)
    if flg & 0x03 or bd & 0x8F:
        raise DecodeError("reserved lz4 frame bits set", what="lz4", offset=4)
    if not flg & 0x20:
        raise DecodeError("dependent lz4 blocks are unsupported (as in Kafka)", what="lz4",
                          offset=4)
    block_max = _BLOCK_SIZES.get((bd >> 4) & 7)
    if block_max is None:
        raise DecodeError("bad lz4 block size code", what="lz4", offset=5)
    block_checksum = bool(flg & 0x10)
    pos = 6 + (8 if flg & 0x08 else 0)  # an optional content size, skipped as Kafka does
    if end < pos + 1:
        raise DecodeError("truncated lz4 frame header", what="lz4")
    hc_data = bytes(mv[0:pos]) if legacy else bytes(mv[4:pos])
    if mv[pos] != _header_checksum(hc_data):
        raise DecodeError("lz4 frame header checksum mismatch", what="lz4", offset=pos)
    pos += 1
    out: list[bytes] = []
    total = 0
    while True:
        if end - pos < 4:
            raise DecodeError("truncated lz4 frame (no end mark)", what="lz4", offset=pos)
        n = _U32LE.unpack_from(mv, pos)[0]
        pos += 4
        if n == 0:
            return b"".join(out)
        stored = n & 0x80000000
        n &= 0x7FFFFFFF
        if n > block_max or n > end - pos:
            raise DecodeError(f"lz4 block of {n} bytes exceeds the block size or the input",
                              what="lz4", offset=pos - 4)
        block = mv[pos:pos + n]
        pos += n + (4 if block_checksum else 0)
        budget = max_size - total
        if stored:
            if n > budget:
                raise _limit("lz4", max_size)
            chunk = bytes(block)
        else:
            try:
                chunk = _lz4_block.decompress(block, uncompressed_size=min(block_max, budget + 1))
            except _lz4_block.LZ4BlockError:
                if budget < block_max:  # may merely not fit the remaining budget
                    try:
                        _lz4_block.decompress(block, uncompressed_size=block_max)
                    except _lz4_block.LZ4BlockError:
                        pass
                    else:
                        raise _limit("lz4", max_size) from None
                raise DecodeError("corrupt lz4 block", what="lz4", offset=pos - n) from None
            if len(chunk) > budget:
                raise _limit("lz4", max_size)
        total += len(chunk)
        out.append(chunk)


# ---------------------------------------------------------------------------------------- zstd
_ZSTD_DCTX = _zstd.ZstdDecompressor()
_ZSTD_CHUNK = 1 << 20
_ZSTD_BLOCK_MAX = 128 * 1024


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    lvl = DEFAULT_LEVELS[ZSTD] if level is None else level
    if not (-131072 <= lvl <= 22):
        raise EncodeError(f"zstd level must be in -131072..22, got {lvl}")
    # Kafka streams through zstd-jni's ZstdOutputStream: no content size, no checksum, and its
    # close() flushes (ending the block) before ending the frame with an empty last block.
    co = _zstd.ZstdCompressor(level=lvl, write_content_size=False).compressobj()
    return (co.compress(data) + co.flush(_zstd.COMPRESSOBJ_FLUSH_BLOCK)
            + co.flush(_zstd.COMPRESSOBJ_FLUSH_FINISH))


def _zstd_check_frames(data: Buffer) -> int:
    """Walk the frame and block headers: zstandard's streaming reader returns a truncated
    frame's partial output without complaint, so completeness is checked here. Returns an
    upper bound of the decompressed size (a block regenerates at most 128 KiB)."""
    mv = memoryview(data)
    pos, end = 0, len(mv)
    bound = 0
    while pos < end:
        if end - pos < 4:
            raise DecodeError("truncated zstd frame", what="zstd", offset=pos)
        magic = _U32LE.unpack_from(mv, pos)[0]
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if end - pos < 8:
                raise DecodeError("truncated zstd skippable frame", what="zstd", offset=pos)
            pos += 8 + _U32LE.unpack_from(mv, pos + 4)[0]
            continue
        if magic != 0xFD2FB528:
            raise DecodeError("bad zstd frame magic", what="zstd", offset=pos)
        if end - pos < 5:
            raise DecodeError("truncated zstd frame header", what="zstd", offset=pos)
        fhd = mv[pos + 4]
        single = (fhd >> 5) & 1
        fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        while True:
            if end - pos < 3:
                raise DecodeError("truncated zstd block", what="zstd", offset=pos)
            h = mv[pos] | mv[pos + 1] << 8 | mv[pos + 2] << 16
            kind = (h >> 1) & 3
            pos += 3 + (1 if kind == 1 else h >> 3)
            bound += h >> 3 if kind < 2 else _ZSTD_BLOCK_MAX
            if h & 1:
                break
        pos += 4 if fhd & 4 else 0
        if pos > end:
            raise DecodeError("truncated zstd frame", what="zstd", offset=end)
    return bound


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    bound = _zstd_check_frames(data)
    chunk_size = min(bound + 1, max_size + 1, _ZSTD_CHUNK)  # usually one read does it all
    out: list[bytes] = []
    total = 0
    try:
        reader = _ZSTD_DCTX.stream_reader(data, read_across_frames=True)
        while True:
            # Reads are bounded so a bomb costs at most max_size + one chunk of memory.
            chunk = reader.read(min(chunk_size, max_size - total + 1))
            if not chunk:
                break
            total += len(chunk)
            if total > max_size:
                raise _limit("zstd", max_size)
            out.append(chunk)
    except _zstd.ZstdError as e:
        raise DecodeError(f"corrupt zstd stream: {e}", what="zstd") from None
    return out[0] if len(out) == 1 else b"".join(out)


# ----------------------------------------------------------------------------------------- API
_COMPRESS: dict[int, Callable[[Buffer, int | None], bytes]] = {
    GZIP: _gzip_compress, SNAPPY: _snappy_compress, LZ4: _lz4_compress, ZSTD: _zstd_compress,
}
_DECOMPRESS: dict[int, Callable[[Buffer, int], bytes]] = {
    GZIP: _gzip_decompress, SNAPPY: _snappy_decompress, LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def compress(codec: int | str, data: Buffer, level: int | None = None, *,
             legacy_lz4: bool = False) -> bytes:
    """Compress ``data`` as Kafka's producer would with ``codec`` (id or name) and ``level``
    (None: Kafka's default). ``legacy_lz4`` writes the broken frame header checksum of magic 0."""
    cid = codec_id(codec)
    if cid == NONE:
        return bytes(data)
    if cid == LZ4:
        return _lz4_compress(data, level, legacy_lz4)
    return _COMPRESS[cid](data, level)


class DecompressionBudget:
    """What one read (a segment, a records field, a buffer of batches) may decompress in all:
    ``floor`` bytes plus ``ratio`` times the compressed bytes it has read. Real data stays far
    below it; a decompression bomb (kilobytes that expand to hundreds of MiB of tiny records)
    spends it at once, and what it stops is reported as a ``limit``. Raise it when a read of
    legitimate, extremely compressible data is cut; :meth:`unlimited` has no bound."""

    __slots__ = ("floor", "ratio", "compressed", "decompressed")

    def __init__(self, floor: int = DEFAULT_BUDGET_FLOOR, ratio: int = DEFAULT_BUDGET_RATIO) -> None:
        self.floor = floor
        self.ratio = ratio
        self.compressed = 0
        self.decompressed = 0

    @classmethod
    def unlimited(cls) -> DecompressionBudget:
        """A budget that never runs out (each payload is still capped by its ``max_size``)."""
        return cls(1 << 62, 0)

    def allowance(self, compressed: int) -> int:
        """Bytes that ``compressed`` more bytes may decompress to."""
        return self.floor + self.ratio * (self.compressed + compressed) - self.decompressed

    def __repr__(self) -> str:
        return (f"DecompressionBudget({self.floor} + {self.ratio} x compressed; spent "
                f"{self.decompressed} of {self.floor + self.ratio * self.compressed})")


def decompress(codec: int | str, data: Buffer, *, max_size: int = DEFAULT_MAX_SIZE,
               legacy_lz4: bool = False, budget: DecompressionBudget | None = None) -> bytes:
    """Decompress a Kafka-compressed payload, raising :class:`DecodeError` on corrupt input and
    :class:`DecompressionLimitError` if the output would exceed ``max_size`` bytes or what is
    left of ``budget`` (which is charged with what was decompressed)."""
    if budget is None:
        return _decompress(codec, data, max_size, legacy_lz4)
    allowed = budget.allowance(len(data))
    if allowed >= max_size:
        out = _decompress(codec, data, max_size, legacy_lz4)
    else:
        try:
            out = _decompress(codec, data, max(allowed, 0), legacy_lz4)
        except DecompressionLimitError:
            raise DecompressionLimitError(
                f"the read's decompression budget is spent ({budget.decompressed} bytes from "
                f"{budget.compressed} compressed; allowed {budget.floor} + {budget.ratio} x "
                "compressed): not decompressed", what="decompression budget") from None
    budget.compressed += len(data)
    budget.decompressed += len(out)
    return out


def _decompress(codec: int | str, data: Buffer, max_size: int, legacy_lz4: bool) -> bytes:
    cid = codec_id(codec)
    if cid == NONE:
        if len(data) > max_size:
            raise _limit("none", max_size)
        return bytes(data)
    if cid == LZ4:
        return _lz4_decompress(data, max_size, legacy_lz4)
    return _DECOMPRESS[cid](data, max_size)
