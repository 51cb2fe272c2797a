"""The Apache Kafka harness's fixtures, imported as a user's conftest would."""
from kproto.testing import (apache_kafka_pool, apache_kafka, apache_kafka_cluster,  # noqa: F401
                            pytest_configure, pytest_runtest_makereport)
