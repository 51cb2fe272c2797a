"""The broker tests use kproto.testing's fixture as users do; sans-I/O tests run on a fake clock."""
import pytest

from kproto.broker.timer import FakeClock
from kproto.testing import (_apache_kafka_pool, any_broker, apache_kafka,  # noqa: F401  (fixtures,
                            apache_kafka_cluster, kafka_broker, kafka_cluster,  # markers, Apache
                            pytest_configure, pytest_runtest_makereport)  # Kafka's logs in failed reports)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)
