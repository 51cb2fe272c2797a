"""The package type-checks: kproto ships ``py.typed``, so its annotations are part of the API."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_errors_in_kproto(tmp_path):
    # settings from pyproject's [tool.mypy]; a fresh cache so the result never depends on the past
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
