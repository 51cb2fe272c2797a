"""Run fuzz/fuzz_client_io.py's TestOneInput over valid response streams for each choice of
requests in flight and their mutations (random bytes: tests/test_fuzz_targets_all.py)."""
from __future__ import annotations

import random

import kproto
from kproto.framing import ResponseHeader, encode_response


def valid_stream(mod, selector: int) -> bytes:
    """The answers a well-behaved broker would send to the requests ``selector`` puts in flight."""
    frames = []
    for cid, (key, version) in enumerate(mod.in_flight(selector)):
        body = kproto.response(key).cls()
        frames.append(encode_response(ResponseHeader(correlation_id=cid), body, key,
                                      0 if key == 18 and version > 0 and selector % 2 else version))
    return b"".join(frames)


def test_fuzz_client_io_target(fuzz_target):
    mod = fuzz_target("fuzz_client_io")
    rng = random.Random("kproto-fuzz-client-io")
    seeds = [bytes([sel, step]) + valid_stream(mod, sel) for sel in range(30) for step in (0, 3, 15)]
    inputs = list(seeds)
    for seed in seeds:
        for _ in range(4):
            b = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                op = rng.randrange(3)
                pos = rng.randrange(2, len(b)) if len(b) > 2 else 2
                if op == 0 and len(b) > 2:
                    b[pos] = rng.randrange(256)
                elif op == 1:
                    b[pos:pos] = rng.randbytes(rng.randint(1, 8))
                else:
                    del b[pos:pos + rng.randint(1, 8)]
            inputs.append(bytes(b))
    for data in inputs:
        mod.TestOneInput(data)
    # the seeds really exercise decoding: a valid stream yields every response
    proto = mod.ClientProtocol()
    for key, version in mod.in_flight(4):
        proto.encode(kproto.request(key).cls(), version, token=key)
    results = proto.feed(valid_stream(mod, 4))
    assert [t for t, _ in results] == [k for k, _ in mod.in_flight(4)]
    assert not any(isinstance(r, Exception) for _, r in results)
