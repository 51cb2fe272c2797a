"""Fuzz what a hostile broker can send a kproto connection: a response byte stream, cut into
frames, matched to the requests in flight and decoded (``ClientProtocol.feed``), including the
ApiVersions UNSUPPORTED_VERSION fallback. Nothing may escape: a broken stream is reported in
``ClientProtocol.broken``, a bad response as a DecodeError result for its request.

Run: ``python fuzz/fuzz_client_io.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    import kproto
    from kproto.client.protocol import ClientProtocol
    from kproto.errors import DecodeError

#: (api key, version) pairs the first input byte chooses the requests in flight from
REQUESTS = [(3, 12), (1, 17), (18, 4), (18, 0), (0, 9), (11, 5), (36, 2), (10, 3), (1, 12), (9, 8)]


def in_flight(selector: int) -> list[tuple[int, int]]:
    """One to three requests chosen by ``selector``."""
    count = selector % 3 + 1
    return [REQUESTS[(selector // 3 + i) % len(REQUESTS)] for i in range(count)]


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    proto = ClientProtocol(max_frame=1 << 20)
    for key, version in in_flight(data[0]):
        proto.encode(kproto.request(key).cls(), version, token=(key, version))
    stream, step = data[2:], data[1] % 16 + 1
    for i in range(0, len(stream), step):
        if proto.broken is not None:
            return
        for token, result in proto.feed(stream[i:i + step]):
            assert isinstance(result, DecodeError) or type(result).API_KEY == token[0], result


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
