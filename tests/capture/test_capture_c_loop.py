"""The C packet loop over classic pcap files (``kproto.capture._segments``, used by
:meth:`CaptureDecoder.feed_capture`) gives what the Python loop over bulk's rows gives: the
same exchanges in the same order, timings, bytes, problems and counters, on every shared
capture, on generated conversations (segments reordered, retransmitted, overlapping, lost,
acknowledged ahead, frames split anywhere) and on damaged files."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_support import ALL, CAPTURES
from kproto.capture import BodyDecoder, CaptureDecoder
from kproto.capture import decoder as decoder_module
from kproto.capture.exchange import exchange_to_json_text
from kproto.capture.tcp import TcpStream
from pcapgen import write_pcap
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
    """Each shared classic pcap cut short, and with bytes of its packets overwritten."""
    import random

    rnd = random.Random(7)
    for path in FILES:
        data = path.read_bytes()
        if data[:4] not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                            b"\xa1\xb2\x3c\x4d"):
            continue  # pcapng: the reference walker reads it, packet by packet
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
