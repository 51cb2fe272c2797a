"""Fixtures every test directory can use (the per-directory helpers stay in their folders)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# a sibling module: pytest's default (prepend) import mode puts this folder on sys.path
from fuzz_support import load

# kproto's fixtures (kafka_broker, kafka_cluster, apache_kafka, apache_kafka_cluster, any_broker)
# for every folder, as users load them; registered once here, so the session's shared Apache
# Kafka clusters are shared by all folders' tests
pytest_plugins = ["kproto.testing"]

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
#: The test data the suite reads from outside the repository (docs/development.md): each part's
#: variable and its default place in the ``shared`` folder beside the checkout.
SHARED_DATA = {"KPROTO_VECTORS": "vectors", "KPROTO_FIXTURES": "fixtures",
               "KPROTO_CAPTURES": "captures", "KPROTO_PEERS": "peers",
               "KPROTO_REFERENCE": "reference", "KPROTO_EXTERNAL": "external"}


def missing_test_data() -> dict[str, list[str]]:
    """The parts of the test data that are not there: ``VARIABLE (path)`` -> the strings a
    path into that part shows in an error message (the path, and ``shared/<part>`` as tests
    spell it relative to the checkout)."""
    out = {}
    for var, sub in SHARED_DATA.items():
        path = Path(os.environ.get(var, SHARED / sub))
        if not path.is_dir():
            out[f"{var} ({path})"] = [str(path), f"shared{os.sep}{sub}"]
    return out


_MISSING = missing_test_data()


def _missing_reason() -> str:
    what = (f"the test data folder {SHARED} is missing" if len(_MISSING) == len(SHARED_DATA)
            and not any(v in os.environ for v in SHARED_DATA)
            else "the test data is missing: " + ", ".join(_MISSING))
    return f"Skipped: {what} (the folder 'shared' beside the checkout, see docs/development.md)"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Without the test data, a test module that reads it at import is skipped with the reason
    instead of failing the collection (the rest of the suite runs)."""
    outcome = yield
    report = outcome.get_result()
    if _MISSING and report.failed and isinstance(collector, pytest.Module):
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, _missing_reason())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Likewise a test that fails on a missing file of the missing test data."""
    outcome = yield
    report = outcome.get_result()
    if _MISSING and report.failed and call.excinfo is not None:
        text = str(call.excinfo.value)
        if any(mark in text for marks in _MISSING.values() for mark in marks):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, _missing_reason())


#: What ``python -m pytest -m "not slow"`` leaves out, by what makes a test slow rather than by
#: a list of tests (new tests of these kinds are marked without a change here): a Spark
#: session (a JVM and Python workers), a multi-node cluster, Apache Kafka's Java classes or
#: client, a browser, a standalone Spark master and worker, a fuzz campaign. Every test
#: folder keeps quick tests (the Spark sources' planning and option parsing, the broker's
#: single-node and sans-I/O parts, the controller and Raft units).
SLOW_FIXTURES = {"spark", "kafka_cluster",
                 # Apache Kafka's JVMs (a node starts in seconds, a cluster in tens of seconds)
                 "apache_kafka", "apache_kafka_cluster", "apache_kafka_pool", "any_broker",
                 # other brokers started as processes for the client's interop tests
                 "tansu", "rdkafka_mock", "peer"}
SLOW_MODULES = ("test_cluster*.py", "test_*java*.py", "test_spark_standalone.py",
                "test_report_browser.py", "test_fuzz_campaign.py", "test_*_interop*.py",
                "test_controller_node.py",  # KRaft controller quorums of processes' worth
                # Apache Kafka writes log dirs and its DumpLogSegments JVMs read them (35 s)
                "test_storage_vs_kafka.py")
#: Single tests that --durations found long (tens of seconds to minutes on a busy 2-core
#: machine): randomised campaigns (faults, objects, messages, bodies, mutated captures), the
#: broker's warm-up and its command-line start/stop/recovery in a subprocess, Spark started
#: in a subprocess to find the sources unregistered, mypy over the whole package.
SLOW_TESTS = {"test_safety_under_random_faults",
              "test_warm_up_compiles_the_hot_codecs_before_the_first_client",
              "test_cli_broker_listens_stops_on_sigterm_and_recovers",
              "test_a_crash_leaves_a_torn_tail_that_the_next_start_truncates",
              "test_log_dir_is_a_kafka_log_dir",
              "test_broken_objects_agree", "test_random_objects_encode_the_same",
              "test_random_messages", "test_random_bodies_are_the_reference",
              "test_objects_made_and_freed_are_tracked_and_untracked_by_the_garbage_collector",
              "test_target_survives_mutated_captures", "test_found_without_registration",
              "test_mypy_finds_no_errors_in_kproto_or_in_user_code",
              # an Apache Kafka node started by the harness's command line (25 s)
              "test_cli_start_prints_listening_on_and_stops_on_sigterm"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the slow tests (see :data:`SLOW_FIXTURES`, :data:`SLOW_MODULES`,
    :data:`SLOW_TESTS`) and group them for ``pytest -n``.

    First of the hooks: pytest-xdist's worker turns each test's ``xdist_group`` marks into its
    scheduling group in its own ``pytest_collection_modifyitems``, and a mark added after that
    one ran groups nothing (each test was then scheduled alone: every worker started its own
    Spark session, Apache Kafka nodes and module fixtures)."""
    from fnmatch import fnmatch

    for item in items:
        name = item.path.name
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) \
                or any(fnmatch(name, pattern) for pattern in SLOW_MODULES) \
                or getattr(item, "originalname", item.name) in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        # under ``pytest -n``: a module runs in one worker (its module fixtures start once, its
        # tests keep their order), and every test of one kind of session JVM in the same worker;
        # a test that names its own group keeps it
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_jvm_group(item) or item.nodeid.split("::")[0]))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # the scheduler hands groups out in collection order (``--no-loadscope-reorder`` in
        # pyproject.toml): the two JVM groups first (each several minutes, one per worker), then
        # the groups holding slow tests, the quick ones last to fill in; a long group handed
        # out last left one worker running alone for minutes
        rank: dict[str, int] = {}
        for item in items:
            group = _group_of(item)
            slow = item.get_closest_marker("slow") is not None
            rank[group] = min(rank.get(group, 2), 0 if group in ("apache", "spark") else 1 if slow else 2)
        items.sort(key=lambda item: rank[_group_of(item)])  # stable: a group keeps its order


def _group_of(item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


#: Fixtures whose JVMs are started once per session (per worker under ``pytest -n``): the tests
#: using them run in one worker, so the session starts each JVM once. Apache Kafka's and
#: Spark's are separate groups, so the two kinds of JVM run beside each other in two workers.
APACHE_FIXTURES = {"apache_kafka", "apache_kafka_cluster", "apache_kafka_pool", "any_broker"}
SPARK_FIXTURES = {"spark"}


def _jvm_group(item) -> str | None:
    """``"apache"`` for a test of Apache Kafka (by fixture, or by a parameter that names it: the
    tests that take their broker with ``request.getfixturevalue``), ``"spark"`` for a test of a
    Spark session, else None."""
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    params = [v for v in callspec.params.values() if isinstance(v, str)] if callspec else []
    if APACHE_FIXTURES & names or any("apache" in p.lower() for p in params):
        return "apache"
    return "spark" if SPARK_FIXTURES & names else None


@pytest.fixture(scope="session")
def fuzz_target():
    """``fuzz_target("fuzz_records")`` -> the loaded ``fuzz/fuzz_records.py`` module."""
    return load


@pytest.fixture(scope="session")
def speedups(tmp_path_factory):
    """The records layer's C helper (``kproto.records._speedups``): the installed one, else
    compiled here from its source. It is code under test, so a machine without a compiler
    fails here rather than passing vacuously."""
    from kproto.records import columns

    if columns._speedups is not None:
        return columns._speedups
    from setuptools import Extension
    from setuptools.command.build_ext import build_ext
    from setuptools.dist import Distribution

    source = os.path.join(os.path.dirname(columns.__file__), "_speedups.c")
    out = tmp_path_factory.mktemp("speedups")
    dist = Distribution({"name": "kproto-speedups", "ext_modules": [
        Extension("_speedups", [source], extra_compile_args=["-O2"])]})
    cmd = build_ext(dist)
    cmd.build_lib, cmd.build_temp = str(out), str(out / "tmp")
    cmd.ensure_finalized()
    cmd.run()
    spec = importlib.util.spec_from_file_location("_speedups", next(out.glob("_speedups*.so")))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(params=["numpy", "c"])
def engine(request, monkeypatch):
    """Runs the test with each engine of the records layer's bulk decoder: the numpy one and
    the C helper (:func:`speedups`)."""
    from kproto.records import columns

    mod = None if request.param == "numpy" else request.getfixturevalue("speedups")
    monkeypatch.setattr(columns, "_speedups", mod)
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With KPROTO_TEST_TIMELINE=FILE, each test's worker, start and end (setup to teardown) are
    appended to FILE as JSON lines: where a ``pytest -n 2`` run spends its time, worker by
    worker (the long pole of a run whose groups each stay in one worker)."""
    path = os.environ.get("KPROTO_TEST_TIMELINE")
    if not path:
        yield
        return
    import json
    import time

    start = time.time()
    yield
    with open(path, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                            "group": next((m.args[0] if m.args else m.kwargs.get("name")
                                           for m in item.iter_markers("xdist_group")), None),
                            "start": start, "end": time.time()}) + "\n")
