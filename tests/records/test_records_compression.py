"""Compression codecs: round trips, interoperability with the reference libraries' own
framing, capped output on bombs, clean errors on damage."""
from __future__ import annotations

import gzip
import os
import time

import lz4.frame
import pytest
import snappy
import zstandard

from kproto.records.compression import (CODEC_NAMES, DecompressionLimitError, codec_id, compress,
                                       decompress)
from kproto.errors import DecodeError

CODECS = [1, 2, 3, 4]
SAMPLES = [b"", b"x", b"hello kafka " * 1000, os.urandom(70_000),
           b"".join(i.to_bytes(4, "big") for i in range(50_000))]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("i", range(len(SAMPLES)))
def test_round_trip(codec, i):
    data = SAMPLES[i]
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(CODEC_NAMES[codec], compress(CODEC_NAMES[codec], data)) == data


@pytest.mark.parametrize("codec,levels", [(1, [1, 5, 9]), (3, [1, 9, 12, 17]), (4, [-5, 1, 19])])
def test_levels(codec, levels):
    data = SAMPLES[2] + SAMPLES[4]
    sizes = set()
    for level in levels:
        c = compress(codec, data, level)
        sizes.add(len(c))
        assert decompress(codec, c) == data
    assert len(sizes) > 1  # the level reaches the compressor


def test_legacy_lz4_header_checksum():
    data = SAMPLES[2]
    legacy = compress(3, data, legacy_lz4=True)
    standard = compress(3, data)
    assert legacy[:6] == standard[:6] and legacy[6] != standard[6]
    assert decompress(3, legacy, legacy_lz4=True) == data
    with pytest.raises(DecodeError, match="checksum"):
        decompress(3, legacy)
    with pytest.raises(DecodeError, match="checksum"):
        decompress(3, standard, legacy_lz4=True)


def test_interop_with_reference_libraries():
    data = SAMPLES[2] + SAMPLES[3]
    # Our LZ4 frames are standard frames and standard frames (with checksums) are read.
    assert lz4.frame.decompress(compress(3, data)) == data
    assert decompress(3, lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                            content_checksum=True, block_checksum=True,
                                            block_linked=False, store_size=True)) == data
    assert gzip.decompress(compress(1, data)) == data
    assert decompress(1, gzip.compress(data[:1000]) + gzip.compress(data[1000:])) == data
    assert decompress(2, snappy.compress(data)) == data  # raw (unframed) snappy
    two_frames = zstandard.ZstdCompressor().compress(data[:5]) + compress(4, data[5:])
    assert decompress(4, two_frames) == data


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_is_capped(codec):
    bomb = compress(codec, b"\0" * (64 << 20))
    assert len(bomb) < (4 << 20)
    t = time.perf_counter()
    with pytest.raises(DecompressionLimitError):
        decompress(codec, bomb, max_size=1 << 20)
    assert time.perf_counter() - t < 5
    assert isinstance(DecompressionLimitError("x"), DecodeError)


@pytest.mark.parametrize("codec", CODECS)
def test_exact_cap_is_allowed(codec):
    data = os.urandom(1000)
    assert decompress(codec, compress(codec, data), max_size=1000) == data
    with pytest.raises(DecompressionLimitError):
        decompress(codec, compress(codec, data), max_size=999)


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_and_garbage(codec):
    data = compress(codec, SAMPLES[2] + SAMPLES[3])
    for cut in (1, 5, 11, len(data) // 2, len(data) - 1):
        with pytest.raises(DecodeError):
            decompress(codec, data[:cut])
    with pytest.raises(DecodeError):
        decompress(codec, b"\xff" * 64)


def test_codec_names():
    assert codec_id("ZSTD") == 4 and codec_id(0) == 0
    with pytest.raises(ValueError):
        codec_id("brotli")
    with pytest.raises(ValueError):
        codec_id(5)


@pytest.mark.parametrize("codec,level", [(1, 0), (1, 10), (3, 0), (3, 18), (4, 23)])
def test_levels_out_of_kafka_range_are_rejected(codec, level):
    from kproto.errors import EncodeError
    with pytest.raises(EncodeError):
        compress(codec, b"x", level)


def test_gzip_default_level_alias():
    # Deflater.DEFAULT_COMPRESSION (-1), Kafka's gzip default, is zlib's level 6
    assert compress(1, SAMPLES[2], -1) == compress(1, SAMPLES[2]) == compress(1, SAMPLES[2], 6)
