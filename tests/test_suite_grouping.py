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


def _run_in_two_workers(test_file: Path) -> str:
    """Run ``test_file`` with ``pytest -n 2 --dist loadgroup``; what its tests wrote to
    GROUPING_OUT."""
    out = test_file.parent / "workers.txt"
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
                        "-p", "no:cacheprovider", "-o", "addopts=", str(test_file)],
                       cwd=test_file.parent, env={**os.environ, "GROUPING_OUT": str(out)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out.read_text()


def test_a_group_runs_in_one_worker(tmp_path: Path):
    (tmp_path / "test_grouped.py").write_text(_TESTS)
    workers = _run_in_two_workers(tmp_path / "test_grouped.py").split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


_SUITE_CONFTEST = '''
import importlib.util, os, sys, pytest
sys.path.insert(0, {tests!r})
_spec = importlib.util.spec_from_file_location("kproto_suite_conftest", {conftest!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_collection_modifyitems = _suite.pytest_collection_modifyitems  # with its hookimpl order

@pytest.fixture
def spark():
    return None

@pytest.fixture
def apache_kafka():
    return None
'''

_SUITE_TESTS = '''
import os, pytest

def _record(kind):
    with open(os.environ["GROUPING_OUT"], "a") as f:
        f.write(kind + " " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_spark(spark, i):
    _record("spark")

@pytest.mark.parametrize("i", range(6))
def test_apache(apache_kafka, i):
    _record("apache")

@pytest.mark.parametrize("i", range(12))
def test_free(i):
    pass
'''


def test_the_suites_own_groups_reach_the_scheduler(tmp_path: Path):
    """The groups tests/conftest.py gives (a session JVM's tests, a module's) are the ones
    pytest-xdist schedules by: its hook must run before xdist's worker reads the marks."""
    tests = Path(__file__).resolve().parent
    (tmp_path / "conftest.py").write_text(_SUITE_CONFTEST.format(tests=str(tests),
                                                                 conftest=str(tests / "conftest.py")))
    (tmp_path / "test_suite_kinds.py").write_text(_SUITE_TESTS)
    seen: dict[str, set[str]] = {}
    for line in _run_in_two_workers(tmp_path / "test_suite_kinds.py").splitlines():
        kind, worker = line.split()
        seen.setdefault(kind, set()).add(worker)
    assert sorted(seen) == ["apache", "spark"]
    assert all(len(workers) == 1 for workers in seen.values()), seen
