"""Apache Kafka fixtures (the reference broker of the conformance run) and their markers."""
from kproto.testing import (_apache_kafka_pool, apache_kafka, pytest_configure,  # noqa: F401
                            pytest_runtest_makereport)
