"""The suite's ``pytest -n 2 --dist loadgroup`` keeps a group in one worker: the session JVMs
(Apache Kafka, Spark) start once and a page's Spark blocks share one process only if it does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

_TESTS = '''
import os, pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open(os.environ["GROUPING_OUT"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_a_group_runs_in_one_worker(tmp_path: Path):
    (tmp_path / "test_grouped.py").write_text(_TESTS)
    out = tmp_path / "workers.txt"
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
                        "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path / "test_grouped.py")],
                       cwd=tmp_path, env={**os.environ, "GROUPING_OUT": str(out)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    workers = out.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
