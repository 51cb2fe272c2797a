"""Every atheris target of ``fuzz/`` (what ``.ci/fuzz_smoke.py`` runs) over hypothesis-generated
bytes, so the suite exercises them all without a fuzzing run; the per-area tests add seeded and
mutated inputs for their own targets.

Each target's docstring names what the code under test may raise (mostly DecodeError) and the
target catches exactly that, so, as under atheris, any exception out of TestOneInput fails.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_support import NAMES, load

EXAMPLES = 300  # per target; the whole module stays within a few seconds
MAX_SIZE = 600

# Found by the glob, so a new target is covered without an edit here; this list only makes a
# target that disappears or is renamed fail loudly instead of silently dropping out.
KNOWN = {
    "fuzz_broker_request", "fuzz_capture_file", "fuzz_capture_stream",
    "fuzz_client_assignors", "fuzz_client_io", "fuzz_client_protocol", "fuzz_client_sasl",
    "fuzz_decompress", "fuzz_fetch_session",
    "fuzz_protocol_c_decoder", "fuzz_protocol_headers", "fuzz_protocol_request",
    "fuzz_protocol_response",
    "fuzz_records", "fuzz_storage_files", "fuzz_storage_log",
}


def drive(test_one_input) -> None:
    """Feed ``test_one_input`` random bytes; whatever it raises propagates (after shrinking)."""

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.binary(max_size=MAX_SIZE))
    def run(data: bytes) -> None:
        test_one_input(data)

    run()


def test_every_known_target_is_driven():
    assert KNOWN <= set(NAMES), sorted(KNOWN - set(NAMES))


@pytest.mark.parametrize("name", NAMES)
def test_fuzz_target_random_inputs(name):
    drive(load(name).TestOneInput)


def test_an_escaping_exception_fails():
    """The harness must not swallow what a broken target raises."""

    def broken(data: bytes) -> None:
        if len(data) > 3:
            raise ValueError("escaped")

    with pytest.raises(ValueError, match="escaped"):
        drive(broken)
