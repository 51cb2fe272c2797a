"""Fixtures every test directory can use (the per-directory helpers stay in their folders)."""
from __future__ import annotations

import pytest

# a sibling module: pytest's default (prepend) import mode puts this folder on sys.path
from fuzz_support import load


@pytest.fixture(scope="session")
def fuzz_target():
    """``fuzz_target("fuzz_records")`` -> the loaded ``fuzz/fuzz_records.py`` module."""
    return load
