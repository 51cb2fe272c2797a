"""Auto-registration of the ``kafka-segments`` data source: Spark imports top-level
``pyspark_*`` modules exposing ``DefaultSource`` on first use of a Python data source, so
``spark.read.format("kafka-segments")`` works without calling ``kproto.spark.register``."""
from kproto.spark.source import KafkaSegmentsDataSource as DefaultSource

__all__ = ["DefaultSource"]
