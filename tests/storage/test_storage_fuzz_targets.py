"""Run every ``fuzz/fuzz_storage*.py`` target's TestOneInput over random and mutated inputs, so
CI exercises them without a fuzzing run."""
from __future__ import annotations

import glob
import importlib.util
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_fixtures import LOGDIRS, REPO

TARGETS = sorted(glob.glob(os.path.join(REPO, "fuzz", "fuzz_storage*.py")))


def _load(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _seeds(logs: bool) -> list[bytes]:
    """Real files of the fixtures as mutation seeds: segment heads for the log target, the
    other (small) files for the file-parser target."""
    out = []
    for path in sorted(glob.glob(os.path.join(LOGDIRS, "*", "**", "*"), recursive=True)):
        if os.path.isfile(path) and path.endswith(".log") == logs:
            with open(path, "rb") as f:
                out.append(f.read(6000 if logs else 4096))
    return out


def test_targets_exist():
    assert TARGETS


@pytest.mark.parametrize("path", TARGETS, ids=os.path.basename)
def test_fuzz_target_random_inputs(path):
    target = _load(path).TestOneInput

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=600))
    def run(data):
        target(data)

    run()


@pytest.mark.parametrize("path", TARGETS, ids=os.path.basename)
def test_fuzz_target_mutated_files(path):
    target = _load(path).TestOneInput
    logs = "log" in os.path.basename(path)
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
