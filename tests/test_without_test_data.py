"""Without the test data folder (``../shared``) the suite skips what needs it, with the reason,
instead of stopping at collection errors."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# modules that read the test data when they are imported
NEEDS_DATA = ["tests/storage/test_storage_layout.py", "tests/protocol/test_protocol_vectors.py",
              "tests/client/test_client_partitioner.py"]


def pytest_without_data(tmp_path: Path, *args: str) -> str:
    """pytest ARGS with every part of the test data pointed at a folder that does not exist."""
    empty = tmp_path / "nothing-here"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("KPROTO_VECTORS", "KPROTO_FIXTURES", "KPROTO_CAPTURES", "KPROTO_PEERS",
                "KPROTO_REFERENCE", "KPROTO_EXTERNAL"):
        env[var] = str(empty / var.lower())
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return r.stdout + r.stderr


def test_modules_needing_missing_data_are_skipped_with_the_reason(tmp_path):
    out = pytest_without_data(tmp_path, "--collect-only", *NEEDS_DATA)
    assert "error" not in out.lower(), out[-3000:]
    assert out.count("SKIPPED") == len(NEEDS_DATA), out[-3000:]
    assert "the test data is missing: KPROTO_VECTORS" in out


def test_a_test_reading_missing_data_is_skipped_with_the_reason(tmp_path):
    out = pytest_without_data(tmp_path, "tests/capture/test_capture_cli.py::test_summary_table")
    assert out.count("SKIPPED [1]") == 1 and "FAILED" not in out, out[-3000:]
    assert "the test data is missing: KPROTO_VECTORS" in out
