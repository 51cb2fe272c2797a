"""Run the capture fuzz targets' TestOneInput over real captures' heads with flipped bytes, cuts
and splices (random bytes for every target: tests/test_fuzz_targets_all.py)."""
from __future__ import annotations

import random

import pytest

from capture_support import ALL, CAPTURES

TARGETS = ["fuzz_capture_file", "fuzz_capture_stream"]


def _inputs(n: int, seed: int) -> list[bytes]:
    """Real captures' heads with flipped bytes, cuts and splices."""
    rnd = random.Random(seed)
    heads = [(CAPTURES / name).read_bytes()[:rnd.choice([600, 3000, 12000])] for name in ALL]
    out = []
    while len(out) < n:
        b = bytearray(rnd.choice(heads))
        for _ in range(rnd.randrange(0, 12)):
            op = rnd.random()
            if op < 0.6 and b:
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            elif op < 0.8:
                cut = rnd.randrange(len(b) + 1)
                del b[cut:cut + rnd.randrange(1, 200)]
            else:
                at = rnd.randrange(len(b) + 1)
                b[at:at] = rnd.randbytes(rnd.randrange(1, 64))
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("name", TARGETS)
def test_target_survives_mutated_captures(name, fuzz_target):
    target = fuzz_target(name)
    for data in _inputs(150, seed=len(name)):
        target.TestOneInput(data)
