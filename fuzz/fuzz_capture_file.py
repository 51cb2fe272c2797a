"""Fuzz capture-file decoding end to end: bytes as a pcap/pcapng file, through TCP reassembly,
framing, pairing, body decoding and JSON (with the records view), and through the fast paths
(``feed_capture``, the JSON lines as text, the ``kafka-pcap`` rows), which must give the same
lines and problems. Nothing may raise.

An input starting with a zero byte is the file itself (also read as a stream, which must give
the same packets and problems); any other input drives a structured
conversation (well-formed frames with fuzzed bodies, fuzzed segmenting), so the fuzzer reaches
framing, pairing and body decoding without a seed corpus. Run:
``python fuzz/fuzz_capture_file.py -runs=2000``.
"""
from __future__ import annotations

import io
import json
import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the tests' pcap builders: structured inputs reach past the file and TCP layers
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "capture"))
import pcapgen  # noqa: E402

with atheris.instrument_imports():
    from kproto.capture import BodyDecoder, CaptureDecoder, exchange_to_json, iter_packets
    from kproto.capture.exchange import exchange_to_json_text
    from kproto.capture.pcap import Packet, packets_of, stream_packets
    from kproto.capture.table import exchange_batches, record_batches
    from kproto.capture.records_view import records_json

#: (api key, version) pairs whose well-formed frames start a structured conversation
_STARTS = [(18, 3), (3, 12), (0, 9), (1, 12), (8, 8), (11, 9), (22, 4), (36, 2), (60, 1)]


def _conversation(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A capture of one connection whose payloads are well-formed frames, fuzzed frames and
    fuzzed bytes, in either direction, cut at fuzzed segment sizes."""
    conv = pcapgen.Conversation()
    for corr in range(fdp.ConsumeIntInRange(1, 4)):
        key, ver = _STARTS[fdp.ConsumeIntInRange(0, len(_STARTS) - 1)]
        req, resp = pcapgen.request_frame(key, ver, corr), pcapgen.response_frame(key, ver, corr)
        mode = fdp.ConsumeIntInRange(0, 3)
        tail = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
        if mode == 1:    # the request body replaced
            req = req[:4 + 8] + tail
            req = len(req[4:]).to_bytes(4, "big") + req[4:]
        elif mode == 2:  # the response body replaced
            resp = resp[:8] + tail
            resp = len(resp[4:]).to_bytes(4, "big") + resp[4:]
        elif mode == 3:  # raw bytes in one direction
            req = tail
        mss = fdp.ConsumeIntInRange(1, 1400)
        conv.send(True, req, mss)
        conv.send(False, resp, mss)
    if fdp.ConsumeBool():
        conv.close()
    frames = conv.frames()
    if fdp.ConsumeBool():
        return pcapgen.write_pcapng(frames)
    return pcapgen.write_pcap(frames)


def _norm(items) -> list:
    return [(x.ts, x.linktype, bytes(x.data), x.orig_len, x.index) if isinstance(x, Packet)
            else (x.reason, x.index, x.position) for x in items]


def TestOneInput(data: bytes) -> None:
    if data[:1] == b"\x00":  # raw capture-file bytes; read as a stream they must give the same
        capture = data[1:]
        if capture:
            streamed, whole = _norm(stream_packets(io.BytesIO(capture))), _norm(iter_packets(capture))
            # a length over MAX_STREAM_RECORD ends a stream at once: whole bytes say truncated
            assert streamed == whole or (streamed[:-1] == whole[:-1]
                                         and "plausible" in streamed[-1][0]), (streamed, whole)
    else:
        capture = _conversation(atheris.FuzzedDataProvider(data))
    for ports in (None, [9092]):
        dec = CaptureDecoder(ports, decode=BodyDecoder())
        exchanges = dec.feed_all(packets_of(capture, ""))
        for ex in exchanges:
            exchange_to_json(ex, records=lambda b: records_json(b, 1 << 16))
        # the file's bytes through the fast paths: the same lines, and the kafka-pcap rows
        fast = CaptureDecoder(ports, decode=BodyDecoder())
        got = list(fast.feed_capture(capture)) + fast.finish()
        assert [exchange_to_json_text(ex) for ex in got] == [
            json.dumps(exchange_to_json(ex), ensure_ascii=False) for ex in exchanges]
        assert fast.problems.reasons() == dec.problems.reasons()
        for _ in exchange_batches(got, "f"):
            pass
        for _ in record_batches(got, "f"):
            pass


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
