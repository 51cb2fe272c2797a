"""Run the record and decompressor fuzz targets' ``TestOneInput`` over random inputs, so CI
exercises them without atheris."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, FUZZ / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TARGETS = {name: _load(name) for name in ("fuzz_records", "fuzz_decompress")}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_random_inputs(name):
    target = TARGETS[name].TestOneInput
    rnd = random.Random(1234)
    for _ in range(300):
        target(rnd.randbytes(rnd.randrange(0, 400)))


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=600))
def test_hypothesis_inputs(name, data):
    TARGETS[name].TestOneInput(data)
