"""The broker tests use kproto.testing's fixture as users do; sans-I/O tests run on a fake clock."""
import pytest

from kproto.broker.timer import FakeClock
# kproto.testing's fixtures, markers and hooks come from tests/conftest.py (pytest_plugins)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)
