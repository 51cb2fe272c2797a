"""Drive the protocol fuzz targets with hypothesis so CI exercises them on every run."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"


def _load(name):
    sys.path.insert(0, str(FUZZ))
    spec = importlib.util.spec_from_file_location(name, FUZZ / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("target", ["fuzz_protocol_request", "fuzz_protocol_response", "fuzz_protocol_headers"])
def test_protocol_fuzz_target(target):
    mod = _load(target)

    @settings(max_examples=600, deadline=None, database=None)
    @given(st.binary(max_size=200))
    def run(data):
        mod.TestOneInput(data)

    run()
