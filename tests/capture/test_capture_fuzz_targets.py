"""Run each ``fuzz/fuzz_capture*.py`` target's TestOneInput over random and mutated inputs."""
from __future__ import annotations

import glob
import importlib.util
import os
import random

import pytest

from capture_support import ALL, CAPTURES, REPO

TARGETS = sorted(glob.glob(os.path.join(REPO, "fuzz", "fuzz_capture*.py")))


def _load(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(n: int, seed: int) -> list[bytes]:
    """Random bytes, and real captures' heads with flipped bytes, cuts and splices."""
    rnd = random.Random(seed)
    heads = [(CAPTURES / name).read_bytes()[:rnd.choice([600, 3000, 12000])] for name in ALL]
    out = [rnd.randbytes(rnd.randrange(0, 2000)) for _ in range(n // 2)]
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


def test_targets_exist():
    assert [os.path.basename(t) for t in TARGETS] == ["fuzz_capture_file.py", "fuzz_capture_stream.py"]


@pytest.mark.parametrize("path", TARGETS, ids=os.path.basename)
def test_target_survives_inputs(path):
    target = _load(path)
    for data in _inputs(300, seed=len(path)):
        target.TestOneInput(data)
