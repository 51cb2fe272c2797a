"""Spark's own Kafka source (format ``kafka``, ``spark-sql-kafka-0-10``) for a local
SparkSession, to put ``kafka-segments`` beside it: the jars tools/setup.sh
(``tools/kafka/fetch.sh``) caches for the installed pyspark.

    from pyspark.sql import SparkSession
    from kproto.testing.spark import kafka_source_jars

    spark = (SparkSession.builder.master("local[2]")
             .config("spark.jars", ",".join(kafka_source_jars())).getOrCreate())
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "orders").load())

Maven Central serves no ``spark-sql-kafka-0-10`` for some pyspark releases; the cache then
holds the newest release before it (:func:`kafka_source_version` says which).
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Optional

from kproto.testing.apache import KafkaNotAvailable, cache_dir

__all__ = ["kafka_source_jars", "kafka_source_version", "unavailable"]


def _folder(pyspark: Optional[str]) -> Path:
    version = pyspark or importlib.metadata.version("pyspark")
    return cache_dir() / f"spark-kafka-{version}"


def kafka_source_jars(pyspark: Optional[str] = None) -> list[str]:
    """The jars of Spark's Kafka source for pyspark ``pyspark`` (default: the installed one):
    spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2,
    for ``spark.jars``. :class:`~kproto.testing.apache.KafkaNotAvailable` when they are not
    cached (run tools/setup.sh)."""
    folder = _folder(pyspark)
    jars = sorted(str(p) for p in (folder / "libs").glob("*.jar")) \
        if (folder / ".complete").is_file() else []
    if not jars:
        raise KafkaNotAvailable(f"Spark's Kafka source is not in {folder}: run tools/setup.sh "
                                "(Maven fetches it from Maven Central)")
    return jars


def kafka_source_version(pyspark: Optional[str] = None) -> str:
    """The release of ``spark-sql-kafka-0-10`` cached for pyspark ``pyspark`` (default: the
    installed one); it differs when Maven Central has none of that exact release."""
    kafka_source_jars(pyspark)
    return (_folder(pyspark) / "version").read_text().strip()


def unavailable(pyspark: Optional[str] = None) -> Optional[str]:
    """Why Spark's Kafka source cannot be loaded here (pyspark or the jars missing), or None."""
    try:
        kafka_source_jars(pyspark)
    except (KafkaNotAvailable, importlib.metadata.PackageNotFoundError) as exc:
        return str(exc) or "pyspark is not installed"
    return None
