"""Fixtures every test directory can use (the per-directory helpers stay in their folders)."""
from __future__ import annotations

import importlib.util
import os

import pytest

# a sibling module: pytest's default (prepend) import mode puts this folder on sys.path
from fuzz_support import load

# kproto's fixtures (kafka_broker, kafka_cluster, apache_kafka, apache_kafka_cluster, any_broker)
# for every folder, as users load them; registered once here, so the session's shared Apache
# Kafka clusters are shared by all folders' tests
pytest_plugins = ["kproto.testing"]


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
