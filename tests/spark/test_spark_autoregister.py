"""``pyspark_kafka_segments`` registers the source with no call: Spark finds top-level
``pyspark_*`` modules on the workers' path. Runs its own SparkSession in a subprocess (the
shared one has the source registered already)."""
from __future__ import annotations

import os
import subprocess
import sys

import pyspark_kafka_segments
from kproto.spark import KafkaSegmentsDataSource

from spark_expected import LOGDIRS, expected_rows

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
print("COUNT", spark.read.format("kafka-segments").load(sys.argv[1]).count())
spark.stop()
"""


def test_default_source_module():
    assert pyspark_kafka_segments.DefaultSource is KafkaSegmentsDataSource
    assert KafkaSegmentsDataSource.name() == "kafka-segments"


def test_found_without_registration(tmp_path):
    part = "broker1-clean/users-0"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, os.path.join(LOGDIRS, part)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"COUNT {len(expected_rows(part, 'read_uncommitted', False))}" in out.stdout.splitlines()
