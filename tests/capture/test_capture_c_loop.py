"""The C packet loop over classic pcap files (``kproto.capture._segments``, used by
:meth:`CaptureDecoder.feed_capture`) gives what the Python loop over bulk's rows gives: the
same exchanges in the same order, timings, bytes, problems and counters, on every shared
capture, on generated conversations (segments reordered, retransmitted, overlapping, lost,
acknowledged ahead, frames split anywhere) and on damaged files."""
from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_support import ALL, CAPTURES
from kproto.capture import BodyDecoder, CaptureDecoder
from kproto.capture import decoder as decoder_module
from kproto.capture.exchange import exchange_to_json_text
from kproto.capture.tcp import TcpStream
from pcapgen import _block, write_pcap, write_pcapng
from test_capture_fast_paths import captures, pcap_files

EXTERNAL = CAPTURES.parent / "external" / "captures"
FILES = [CAPTURES / n for n in ALL] + sorted(EXTERNAL.rglob("*.pcap*"))
needs_c = pytest.mark.skipif(decoder_module._segments is None,
                             reason="the C packet loop is not built (KPROTO_PURE)")


def _outcome(data: bytes, accelerated: bool, monkeypatch) -> tuple:
    """Everything a decode of a file's bytes gives, each exchange with how many exchanges
    came out before it in the same step (the order of the output)."""
    monkeypatch.setattr(CaptureDecoder, "accelerated", accelerated)
    decoder = CaptureDecoder(decode=BodyDecoder())
    out = [ex for ex in decoder.feed_capture(data, "f")] + decoder.finish()
    return ([(exchange_to_json_text(ex), ex.ts, ex.request_end, ex.response_start,
              ex.response_end, ex.request_data, ex.response_data) for ex in out],
            decoder.packets, decoder.bytes, decoder.last_ts, decoder.non_tcp,
            decoder.unknown_links, decoder.unparsed, decoder.problems.reasons(),
            decoder.chosen_ports)


def test_c_loop_is_built_and_used(monkeypatch):
    # CI builds it from pyproject.toml; KPROTO_PURE=1 leaves it out (the Python loop runs)
    from kproto import accelerators

    assert accelerators.PURE is False and decoder_module._segments is not None
    consumed = []
    scan = decoder_module._segments.scan

    def counting(*args):
        got = scan(*args)
        consumed.append(got[2])
        return got
    monkeypatch.setattr(decoder_module, "_segments", type("M", (), {"scan": staticmethod(counting)}))
    decoder = CaptureDecoder(decode=BodyDecoder())
    path = CAPTURES / "hard_stream_tansu.pcap"
    exchanges = list(decoder.feed_capture(path.read_bytes(), str(path))) + decoder.finish()
    assert len(exchanges) == len(_outcome(path.read_bytes(), False, monkeypatch)[0]) > 300
    # acknowledgements and the segments of long frames but their last never reach Python
    assert sum(consumed) > decoder.packets * 0.7


@needs_c
def test_real_captures_alike(monkeypatch):
    assert len(FILES) > 20
    for path in FILES:
        data = path.read_bytes()
        c = _outcome(data, True, monkeypatch)
        assert c == _outcome(data, False, monkeypatch), path.name
        assert c[0] or "arkime" in str(path)  # exchanges were compared


@needs_c
def test_real_captures_cut_and_damaged_alike(monkeypatch):
    """Each shared capture (pcap and pcapng) cut short, and with bytes of its packets (and
    of the blocks around them) overwritten."""
    import random

    rnd = random.Random(7)
    for path in FILES:
        data = path.read_bytes()
        variants = [data[:rnd.randrange(24, len(data) + 1)] for _ in range(2)]
        for _ in range(3):
            mutated = bytearray(data)
            for _ in range(max(1, len(data) // 2000)):
                mutated[rnd.randrange(24, len(data))] = rnd.randrange(256)
            variants.append(bytes(mutated))
        for v in variants:
            assert _outcome(v, True, monkeypatch) == _outcome(v, False, monkeypatch), path.name


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(captures(), st.sampled_from([32, 0, 1, 3]), st.booleans(), st.booleans())
def test_generated_conversations_alike(monkeypatch, frames, grace, nanos, big_endian):
    monkeypatch.setitem(TcpStream.__init__.__kwdefaults__, "ack_grace", grace)
    data = write_pcap(frames, 1, nanos=nanos, big_endian=big_endian)
    assert _outcome(data, True, monkeypatch) == _outcome(data, False, monkeypatch)


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(pcap_files())
def test_damaged_files_alike(monkeypatch, data):
    assert _outcome(data, True, monkeypatch) == _outcome(data, False, monkeypatch)


@needs_c
def test_c_loop_reads_pcapng(monkeypatch):
    """A pcapng file's Enhanced Packet Blocks go through the C loop too (scan_ng); only the
    other blocks and the packets it hands back reach the Python walker."""
    consumed = []
    scan_ng = decoder_module._segments.scan_ng

    def counting(*args):
        got = scan_ng(*args)
        consumed.append(got[2])
        return got
    monkeypatch.setattr(decoder_module, "_segments",
                        type("M", (), {"scan_ng": staticmethod(counting)}))
    decoder = CaptureDecoder(decode=BodyDecoder())
    path = CAPTURES / "java_tansu.pcapng"
    exchanges = list(decoder.feed_capture(path.read_bytes(), str(path))) + decoder.finish()
    assert len(exchanges) == len(_outcome(path.read_bytes(), False, monkeypatch)[0]) > 50
    assert sum(consumed) > decoder.packets * 0.5


@st.composite
def pcapng_files(draw):
    """pcapng files of generated conversations (microsecond or nanosecond or binary
    timestamps, an offset, either byte order) with other blocks among the packets: more
    interfaces (another link type), a new section, simple and obsolete packet blocks, blocks
    of unknown types, and damage (a bad length, an unknown interface, a cut end)."""
    frames = draw(captures())
    big = draw(st.booleans())
    o = ">" if big else "<"
    tsresol = draw(st.sampled_from([6, 9, 0x80 | 20]))
    offset = draw(st.sampled_from([0, 0, 3, -7]))
    opts = (struct.pack(o + "HH", 9, 1) + bytes([tsresol]) + b"\x00" * 3
            + (struct.pack(o + "HHq", 14, 8, offset) if offset else b"") + struct.pack(o + "HH", 0, 0))

    def shb(order: str) -> bytes:
        return _block(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)

    def idb(linktype: int) -> bytes:
        return _block(1, struct.pack(o + "HHI", linktype, 0, 0) + opts, o)

    unit = 2.0 ** -(tsresol & 0x7F) if tsresol & 0x80 else 10.0 ** -tsresol
    out = bytearray(shb(o) + idb(1))
    ifaces = 1
    for ts, data in frames:
        extra = draw(st.sampled_from(["", "", "", "", "idb", "unknown", "spb", "pb", "badiface",
                                      "badlen", "section"]))
        if extra == "idb":
            out += idb(draw(st.sampled_from([1, 113, 101])))
            ifaces += 1
        elif extra == "unknown":
            out += _block(draw(st.sampled_from([4, 5, 0x0BAD])), draw(st.binary(max_size=12)), o)
        elif extra == "spb":
            out += _block(3, struct.pack(o + "I", len(data)) + data, o)
            continue
        elif extra == "section":  # a new section: interfaces start over
            out += shb(o) + idb(1)
            ifaces = 1
        t = round((ts - offset) / unit)
        iface = draw(st.integers(0, ifaces - 1)) if ifaces > 1 else 0
        if extra == "badiface":
            iface = ifaces + 1
        if extra == "pb":
            body = struct.pack(o + "HHIIII", iface, 0, t >> 32, t & 0xFFFFFFFF, len(data),
                               len(data)) + data
            out += _block(2, body, o)
            continue
        block = _block(6, struct.pack(o + "IIIII", iface, t >> 32, t & 0xFFFFFFFF, len(data),
                                      len(data)) + data, o)
        if extra == "badlen":
            block = block[:4] + struct.pack(o + "I", draw(st.sampled_from([8, 30, 33, 1 << 30]))) + block[8:]
        out += block
    if draw(st.integers(0, 4)) == 0:
        out = out[:draw(st.integers(0, len(out)))]
    return bytes(out)


@needs_c
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(pcapng_files())
def test_generated_pcapng_alike(monkeypatch, data):
    assert _outcome(data, True, monkeypatch) == _outcome(data, False, monkeypatch)


@needs_c
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(captures(), st.sampled_from([6, 9]), st.booleans())
def test_generated_pcapng_conversations_alike(monkeypatch, frames, tsresol, big_endian):
    data = write_pcapng(frames, 1, tsresol=tsresol, big_endian=big_endian)
    assert _outcome(data, True, monkeypatch) == _outcome(data, False, monkeypatch)
