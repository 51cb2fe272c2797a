"""One local SparkSession (``local[2]``) for the whole test session, with the source
registered; executors run this interpreter (which has kproto and pyarrow). Spark's own Kafka
source is on its class path when tools/setup.sh has cached it (kproto.testing.spark), and the
``kafka-segments-jvm`` jar when a JDK is there to build it (a Python process holds one
SparkContext, and jars join it only when it starts: tests/spark/test_spark_jvm.py uses this
session, and builds the jar again to say why when it is missing)."""
from __future__ import annotations

import os
import sys

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def _jvm_jar() -> list[str]:
    from kproto.spark import jvm

    try:
        return [jvm.jar()]
    except RuntimeError:  # no JDK: the other Spark tests run without it
        return []


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import kproto.spark
    from kproto.testing import spark as spark_kafka

    # jars only join a SparkContext when it starts: one session serves every module
    jars = ([] if spark_kafka.unavailable() else spark_kafka.kafka_source_jars()) + _jvm_jar()
    builder = SparkSession.builder.config("spark.jars", ",".join(jars)) if jars else SparkSession.builder
    session = (builder.master("local[2]").appName("kproto-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kproto.spark.register(session)
    yield session
    session.stop()
