"""Run the storage fuzz targets' TestOneInput over mutations of the fixtures' real files (random
bytes: tests/test_fuzz_targets_all.py)."""
from __future__ import annotations

import glob
import os
import random

import pytest

from storage_fixtures import LOGDIRS

TARGETS = ["fuzz_storage_files", "fuzz_storage_log"]


def _seeds(logs: bool) -> list[bytes]:
    """Real files of the fixtures as mutation seeds: segment heads for the log target, the
    other (small) files for the file-parser target."""
    out = []
    for path in sorted(glob.glob(os.path.join(LOGDIRS, "*", "**", "*"), recursive=True)):
        if os.path.isfile(path) and path.endswith(".log") == logs:
            with open(path, "rb") as f:
                out.append(f.read(6000 if logs else 4096))
    return out


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_target_mutated_files(name, fuzz_target):
    target = fuzz_target(name).TestOneInput
    logs = name == "fuzz_storage_log"
    rng = random.Random(1)
    seeds = _seeds(logs)
    for i in range(300):
        data = bytearray(seeds[i % len(seeds)])
        for _ in range(rng.randint(0, 4)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if data and rng.random() < 0.3:
            del data[rng.randrange(len(data)):]
        # the log target reads (flags, index length, index bytes, segment); the file target
        # (kind, file bytes)
        prefix = bytes([i % 256, 0]) if logs else bytes([i % 256])
        target(prefix + bytes(data))
