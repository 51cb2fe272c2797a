"""PySpark data sources ``kafka-segments``, a Kafka log directory as a Spark DataFrame, read
offline from the segment files (no broker); tasks are byte ranges of segments cut at batch
boundaries the ``.index`` knows, so one huge segment still spreads over many tasks.

    import kproto.spark
    kproto.spark.register(spark)                     # once per SparkSession
    df = spark.read.format("kafka-segments").option("isolation", "read_committed").load(path)

With kproto installed, ``pyspark_kafka_segments`` also registers the source automatically on
first use (Spark looks for top-level ``pyspark_*`` modules), though without the task count
``register`` derives from the session's parallelism. Executors need kproto and pyarrow
in the interpreter ``PYSPARK_PYTHON`` names. Columns: :func:`spark_schema`; options:
:class:`KafkaSegmentsDataSource`. Filters on topic, partition, offset and timestamp are pushed
into the scan when ``spark.sql.python.filterPushdown.enabled`` is true (Spark 4.1+); without it
Spark filters the rows itself. Damage found (torn tails, CRC mismatches) is logged as warnings
of the ``kproto.spark`` logger; ``.option("output", "damage")`` returns it as rows instead of
the records (columns: :func:`damage_spark_schema`); ``.option("decode", "internal")`` reads
the internal topics, each record decoded into typed columns (:func:`internal_spark_schema`);
``.option("columns", "kafka")`` gives the columns of Spark's own Kafka source
(:func:`kafka_spark_schema`), whose options ``subscribe``, ``subscribePattern``,
``assign``, ``kafka.isolation.level``, ``includeHeaders`` and JSON offsets are understood too.

``kafka-segments-jvm`` (:mod:`kproto.spark.jvm`) reads the same log directories on the JVM,
several times faster, with the columns of Spark's Kafka source and fewer options; its jar,
``kproto.spark.jvm.jar()``, goes into ``spark.jars`` when the session is built.

``kafka-pcap`` (:mod:`kproto.spark.pcap`, registered by the same call, and automatically by
``pyspark_kafka_pcap``) reads capture files: one row per exchange of ``kproto decode-pcap``, or
per Produce/Fetch record with ``.option("expand", "records")``.

``spark.readStream.format("kafka-segments").load(path)`` tails a live log directory in
micro-batches (:mod:`kproto.spark.stream`): offsets in Spark's checkpoint, bounded by the high
watermark or the log end (``bound``), read_committed respected.

:func:`consumer_lag` (offset commits against the logs' ends) and :func:`partition_history`
(leaders, epochs, replicas and ISR from ``__cluster_metadata``) are queries over these reads.
"""
from __future__ import annotations

from typing import Any, cast

from kproto.spark.history import consumer_lag, partition_history
from kproto.spark.pcap import (KafkaPcapDataSource, KafkaPcapReader, PcapSpec,
                               parse_pcap_options, pcap_spark_schema)
from kproto.spark.scan import ScanSpec, auto_split_bytes, parse_options
from kproto.spark.stream import (KafkaSegmentsStreamReader, StreamPartition,
                                  parse_stream_options)
from kproto.spark.source import (NAME, KafkaSegmentsDataSource, KafkaSegmentsPushdownReader,
                                 KafkaSegmentsReader, SplitPartition, damage_spark_schema,
                                 internal_spark_schema, kafka_spark_schema, spark_schema)


def register(spark: Any, *, tasks: int | None = None) -> None:
    """Make ``spark.read.format("kafka-segments")`` and ``format("kafka-pcap")`` available in
    ``spark`` (a SparkSession).

    ``tasks``: how many tasks a read is cut into when it sets no ``splitSize`` (default: the
    session's default parallelism, which Python data sources cannot see themselves)."""
    if tasks is None:
        try:
            # One task per core, as Spark's file sources size theirs (bytes per core): the
            # tasks are cut to equal bytes, and each costs a Python worker round trip (~20 ms
            # of worker CPU here), so twice as many measured 6-11% slower in local[1]/local[2].
            tasks = spark.sparkContext.defaultParallelism
        except Exception:  # Spark Connect has no SparkContext: keep the class default
            tasks = None
    for source in (KafkaSegmentsDataSource, KafkaPcapDataSource):
        if tasks is not None and tasks != source.tasks:
            # a subclass defined here is pickled by value, so the setting reaches the planner
            source = cast("type[Any]", type(source.__name__, (source,),
                                            {"tasks": int(tasks), "__module__": __name__}))
        spark.dataSource.register(source)


__all__ = ["NAME", "KafkaPcapDataSource", "KafkaPcapReader", "KafkaSegmentsDataSource",
           "KafkaSegmentsPushdownReader", "KafkaSegmentsReader", "KafkaSegmentsStreamReader",
           "PcapSpec", "ScanSpec",
           "SplitPartition", "auto_split_bytes", "consumer_lag", "damage_spark_schema",
           "internal_spark_schema", "kafka_spark_schema", "partition_history",
           "parse_options", "parse_pcap_options", "parse_stream_options", "pcap_spark_schema",
           "register", "spark_schema", "StreamPartition"]
