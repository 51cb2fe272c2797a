"""Run the fetch-session fuzz target's TestOneInput over mutations of valid FetchRequest and
FetchResponse bodies (random bytes: tests/test_fuzz_targets_all.py)."""
from __future__ import annotations

import random

import pytest

import kproto
from kproto.fetch_session import FetchSessionHandler, PartitionData, TopicPartition
from kproto.fetch_session.messages import build_fetch_request

from fetch_session_vectors import load_traces, response_bytes

TARGETS = ["fuzz_fetch_session"]


def _head(version: int, flag: bool, broker: bool) -> int:
    return ((version - 7) << 2) | (2 if flag else 0) | (1 if broker else 0)


def _seeds() -> list[bytes]:
    """Valid request bodies (full and incremental, every session version) and the vectors'
    response bodies, each behind the selector byte of the target."""
    out = []
    req = kproto.request(1)
    for version in range(7, 18):
        handler = FetchSessionHandler(0)
        tid = kproto.codecs.Uuid(bytes(range(1, 17))) if version >= 13 else kproto.codecs.Uuid.ZERO
        for step in range(3):
            b = handler.new_builder()
            for p in range(step, 4):
                b.add(TopicPartition("t", p), PartitionData(tid, 10 + p + step, -1, 1000,
                                                            1 if version >= 9 else None, None))
            body = req.encode(build_fetch_request(b.build(), version), version)
            out.append(bytes([_head(version, step > 0, True)]) + body)
            handler.next_metadata = handler.next_metadata.new_incremental(1)
    for trace in load_traces()[:20]:
        for step in trace["steps"]:
            if step["response"] is not None:
                body = response_bytes(step["response"], step["version"])
                out.append(bytes([_head(step["version"], step["built"]["epoch"] > 0, False)]) + body)
    return out


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_target_mutated_messages(name, fuzz_target):
    target = fuzz_target(name).TestOneInput
    rng = random.Random(1)
    seeds = _seeds()
    for seed in seeds:
        target(seed)  # the unmutated seeds first
    for i in range(600):
        data = bytearray(seeds[rng.randrange(len(seeds))])
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(1, len(data)) if len(data) > 1 else 0
            op = rng.randrange(4)
            if op == 0:
                data[pos] = rng.randrange(256)
            elif op == 1:
                del data[pos:pos + rng.randint(1, 8)]
            elif op == 2:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            else:
                data[pos] ^= 1 << rng.randrange(8)
        target(bytes(data))
