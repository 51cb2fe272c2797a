"""Histories a log directory holds, as Spark DataFrames, from ``kafka-segments`` reads: consumer
lag over time (``__consumer_offsets`` against the logs' ends) and partition leadership over time
(``__cluster_metadata``). Plain DataFrame queries over the source; nothing here reads files.

    lag = kproto.spark.consumer_lag(spark, "/var/lib/kafka/data")
    lag.where("group_id = 'billing'").orderBy("commit_time").show()
    kproto.spark.partition_history(spark, "/var/lib/kafka/metadata").show()
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

Paths = Union[str, Sequence[str]]


def _read(spark: Any, paths: Paths, options: Mapping[str, str] | None, **more: str) -> Any:
    reader = spark.read.format("kafka-segments").options(**dict(options or {}), **more)
    return reader.load(paths if isinstance(paths, str) else list(paths))


def consumer_lag(spark: Any, paths: Paths, *, options: Mapping[str, str] | None = None) -> Any:
    """One row per offset commit found in ``paths`` (log directories, a SparkSession with the
    sources registered): ``group_id``, ``topic``, ``partition``, ``commit_time`` (the commit's
    timestamp, else its record's), ``committed_offset``, ``log_end_offset`` (one past the last
    record of the partition with a timestamp at or before ``commit_time``, 0 before any) and
    ``lag`` (the records the group had yet to consume then, never negative).

    Record timestamps stand for append times, so the log end is exact for topics with
    ``message.timestamp.type=LogAppendTime`` and follows the producers' clocks otherwise.
    ``options`` go to both reads (``isolation``, ``includeDeleted``, ``fs.*``, ...); the logs
    of the committed topics are read whole (a group's partitions all in one task each)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    commits = (_read(spark, paths, options, decode="internal")
               .where("record_type in ('OffsetCommit', 'LegacyOffsetCommit') "
                      "and committed_offset is not null")
               .select("group_id", F.col("committed_topic").alias("topic"),
                       F.col("committed_partition").alias("partition"),
                       F.coalesce("commit_timestamp", "timestamp").alias("time"),
                       "committed_offset"))
    committed = [r.topic for r in commits.select("topic").distinct().collect()]
    if not committed:
        ends = commits.select("topic", "partition", "time").limit(0) \
            .withColumn("end", F.lit(None).cast("long"))
    else:
        ends = (_read(spark, paths, options, topics=",".join(committed))
                .groupBy("topic", "partition", F.col("timestamp").alias("time"))
                .agg((F.max("offset") + 1).alias("end")))
    # commits and log ends on one time line per partition; the running end at each commit
    # (ends first at equal times: a record stamped with the commit's millisecond was there)
    events = ends.select("topic", "partition", "time", "end", F.lit(0).alias("kind"),
                         F.lit(None).cast("string").alias("group_id"),
                         F.lit(None).cast("long").alias("committed_offset")) \
        .unionByName(commits.select("topic", "partition", "time", F.lit(None).cast("long").alias("end"),
                                    F.lit(1).alias("kind"), "group_id", "committed_offset"))
    upto = Window.partitionBy("topic", "partition").orderBy("time", "kind") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    log_end = F.coalesce(F.max("end").over(upto), F.lit(0))
    return (events.withColumn("log_end_offset", log_end).where("kind = 1")
            .select("group_id", "topic", "partition", F.col("time").alias("commit_time"),
                    "committed_offset", "log_end_offset",
                    F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0))
                    .alias("lag")))


def partition_history(spark: Any, paths: Paths, *, options: Mapping[str, str] | None = None) -> Any:
    """Leadership and replicas of every partition over time, from the ``__cluster_metadata`` of
    ``paths`` (a KRaft controller's or broker's metadata log directory): one row per
    PartitionRecord or PartitionChangeRecord, with ``time``, ``offset`` (in the metadata log),
    ``topic`` (by its TopicRecord; null for a topic created before the log's start),
    ``topic_id``, ``partition``, ``change`` (the record type) and the partition's state after it:
    ``leader`` (-1: none), ``leader_epoch`` (as of the last PartitionRecord, each leader change
    after it adds one, as Kafka's controller counts), ``replicas`` and ``isr``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    records = _read(spark, paths, options, decode="internal", topics="__cluster_metadata")
    names = (records.where("record_type = 'TopicRecord'")
             .groupBy("topic_id").agg(F.last("topic_name").alias("topic")))
    changes = records.where("record_type in ('PartitionRecord', 'PartitionChangeRecord')").select(
        "timestamp", "offset", "topic_id", "partition_id", "record_type", "leader", "leader_epoch",
        "replicas", "isr")
    upto = Window.partitionBy("topic_id", "partition_id").orderBy("offset") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # a PartitionRecord starts (or restarts) the state; a change leaves unchanged fields null
    start = F.max(F.when(F.col("record_type") == "PartitionRecord", F.col("offset"))).over(upto)
    since = Window.partitionBy("topic_id", "partition_id", "start").orderBy("offset") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    leader = F.last("leader", ignorenulls=True).over(since)
    # Kafka's controller adds one to the leader epoch with every leader change
    changed = F.when((F.col("record_type") == "PartitionChangeRecord") & F.col("leader").isNotNull(), 1) \
        .otherwise(0)
    return (changes.withColumn("start", start)
            .withColumn("bumps", F.sum(changed).over(since))
            .select(F.col("timestamp").alias("time"), "offset", "topic_id",
                    F.col("partition_id").alias("partition"), F.col("record_type").alias("change"),
                    leader.alias("leader"),
                    (F.first("leader_epoch", ignorenulls=True).over(since) + F.col("bumps"))
                    .cast("int").alias("leader_epoch"),
                    F.last("replicas", ignorenulls=True).over(since).alias("replicas"),
                    F.last("isr", ignorenulls=True).over(since).alias("isr"))
            .join(names, "topic_id", "left")
            .select("time", "offset", "topic", "topic_id", "partition", "change", "leader",
                    "leader_epoch", "replicas", "isr"))
