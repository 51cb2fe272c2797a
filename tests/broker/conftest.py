"""The broker tests use kproto.testing's fixture as users do; sans-I/O tests run on a fake clock."""
import pytest

from kproto.broker.timer import FakeClock
from kproto.testing import kafka_broker, kafka_cluster, pytest_configure  # noqa: F401  (fixtures, markers)
from kproto.testing import _apache_kafka_pool, apache_kafka_cluster  # noqa: F401  (Apache Kafka's)
from kproto.testing import pytest_runtest_makereport  # noqa: F401  (server logs of failed tests)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)
