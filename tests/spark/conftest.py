"""One local SparkSession (``local[2]``) for the whole test session, with the source
registered; executors run this interpreter (which has kproto and pyarrow)."""
from __future__ import annotations

import os
import sys

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import kproto.spark

    session = (SparkSession.builder.master("local[2]").appName("kproto-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    kproto.spark.register(session)
    yield session
    session.stop()
