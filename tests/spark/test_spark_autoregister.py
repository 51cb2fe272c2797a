"""``pyspark_kafka_segments`` and ``pyspark_kafka_pcap`` register their sources with no call:
Spark finds top-level ``pyspark_*`` modules on the workers' path. Runs its own SparkSession in a
subprocess (the shared one has the sources registered already), one for both sources."""
from __future__ import annotations

import os
import subprocess
import sys

import pyspark_kafka_pcap
import pyspark_kafka_segments
from kproto.capture.table import capture_files
from kproto.spark import KafkaPcapDataSource, KafkaSegmentsDataSource

from spark_expected import LOGDIRS, expected_rows
from test_spark_pcap import cli_lines, external_support

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
for fmt, path in zip(sys.argv[1::2], sys.argv[2::2]):
    print("COUNT", fmt, spark.read.format(fmt).load(path).count())
spark.stop()
"""


def test_default_source_modules():
    assert pyspark_kafka_segments.DefaultSource is KafkaSegmentsDataSource
    assert KafkaSegmentsDataSource.name() == "kafka-segments"
    assert pyspark_kafka_pcap.DefaultSource is KafkaPcapDataSource
    assert KafkaPcapDataSource.name() == "kafka-pcap"


def test_found_without_registration(tmp_path):
    part = "broker1-clean/users-0"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    captures = str(external_support.CAPTURES)
    out = subprocess.run([sys.executable, "-c", SCRIPT, "kafka-segments", os.path.join(LOGDIRS, part),
                          "kafka-pcap", captures],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert f"COUNT kafka-segments {len(expected_rows(part, 'read_uncommitted', False))}" in lines
    assert f"COUNT kafka-pcap {sum(len(cli_lines(f)) for f, _ in capture_files([captures]))}" in lines
