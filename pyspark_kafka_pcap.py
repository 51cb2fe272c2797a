"""Auto-registration of the ``kafka-pcap`` data source: Spark imports every top-level
``pyspark_*`` module and registers its one ``DefaultSource`` under that source's name, so the
second source of kproto needs a module of its own (see ``pyspark_kafka_segments``)."""
from kproto.spark.pcap import KafkaPcapDataSource as DefaultSource

__all__ = ["DefaultSource"]
