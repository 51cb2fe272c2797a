"""The broker tests use kproto.testing's fixture as users do; sans-I/O tests run on a fake clock."""
import pytest

from kproto.broker.timer import FakeClock
from kproto.testing import (_apache_kafka_pool, apache_kafka, apache_kafka_cluster,  # noqa: F401  (fixtures,
                            kafka_broker, kafka_cluster, pytest_configure,  # markers, Apache Kafka's logs
                            pytest_runtest_makereport)  # in failed reports)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)
