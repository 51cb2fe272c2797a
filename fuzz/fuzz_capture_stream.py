"""Fuzz TCP reassembly and Kafka framing: the input becomes the segments of one connection
(direction, sequence jitter, payload chunks, drops and repeats all chosen by the fuzzer), fed to
the decoder with body decoding and JSON. Nothing may raise, every exchange must be well formed.

Run: ``python fuzz/fuzz_capture_stream.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.capture import BodyDecoder, CaptureDecoder, exchange_to_json
    from kproto.capture.layers import ACK, FIN, SYN, TcpSegment
    from kproto.capture.records_view import records_json

CLIENT, BROKER = (b"\x7f\x00\x00\x01", 40000), (b"\x7f\x00\x00\x01", 9092)


def segments(fdp: "atheris.FuzzedDataProvider") -> list[TcpSegment]:
    seq = {True: fdp.ConsumeIntInRange(0, 0xFFFFFFFF), False: fdp.ConsumeIntInRange(0, 0xFFFFFFFF)}
    out = []
    ts = 1.0
    if fdp.ConsumeBool():  # handshake, or a capture that starts mid-connection
        for c in (True, False):
            src, dst = (CLIENT, BROKER) if c else (BROKER, CLIENT)
            out.append(TcpSegment(src[0], src[1], dst[0], dst[1], seq[c], seq[not c], SYN | ACK,
                                  memoryview(b""), ts, 0))
            seq[c] += 1
    for _ in range(fdp.ConsumeIntInRange(0, 40)):
        c = fdp.ConsumeBool()
        payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300))
        jitter = fdp.ConsumeIntInRange(-8, 8) if fdp.ConsumeProbability() < 0.2 else 0
        src, dst = (CLIENT, BROKER) if c else (BROKER, CLIENT)
        flags = ACK | (FIN if fdp.ConsumeProbability() < 0.02 else 0)
        ts += fdp.ConsumeProbability()
        seg = TcpSegment(src[0], src[1], dst[0], dst[1], (seq[c] + jitter) & 0xFFFFFFFF,
                         seq[not c] + fdp.ConsumeIntInRange(-2, 64), flags, memoryview(payload), ts, 0)
        seq[c] = (seq[c] + len(payload)) & 0xFFFFFFFF
        if fdp.ConsumeProbability() < 0.1:
            continue  # lost
        out.append(seg)
        if fdp.ConsumeProbability() < 0.05:
            out.append(seg)  # retransmitted
    return out


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    dec = CaptureDecoder([9092], decode=BodyDecoder())
    for ex in dec.feed_all(segments(fdp)):
        doc = exchange_to_json(ex, records=lambda b: records_json(b, 1 << 16))
        assert isinstance(doc["problems"], list) and isinstance(doc["errors"], list)
        assert ex.request_data is None or ex.request_bytes >= len(ex.request_data) + 4


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
