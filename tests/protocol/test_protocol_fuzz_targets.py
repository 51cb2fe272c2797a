"""Drive the protocol fuzz target with hypothesis so CI exercises it on every run."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

_path = Path(__file__).resolve().parents[2] / "fuzz" / "fuzz_protocol.py"
_spec = importlib.util.spec_from_file_location("fuzz_protocol", _path)
fuzz_protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_protocol)


@settings(max_examples=1500, deadline=None, database=None)
@given(st.binary(min_size=3, max_size=200))
def test_fuzz_protocol_target(data):
    fuzz_protocol.TestOneInput(data)
