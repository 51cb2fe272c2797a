"""The ``kafka-segments`` PySpark data source: planning on the driver's Python worker
(:func:`kproto.storage.plan_splits`, then :func:`kproto.spark.scan.balance` into tasks),
and each split read on an executor into Arrow record batches (:func:`kproto.storage.read_split`)
handed to Spark as they are.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from kproto.storage.partition import Damage
from kproto.storage.reader import Split, arrow_schema, plan_splits, read_split
from kproto.spark.scan import AUTO_TASKS, ScanSpec, auto_split_bytes, balance, parse_options

NAME = "kafka-segments"
log = logging.getLogger("kproto.spark")


def spark_schema() -> StructType:
    """The source's Spark schema: :func:`kproto.storage.arrow_schema` in Spark types."""
    return from_arrow_schema(arrow_schema())


class SplitPartition(InputPartition):
    """A Spark partition: consecutive :class:`kproto.storage.Split` s (byte ranges of
    segments, see :func:`kproto.spark.scan.balance`)."""

    def __init__(self, splits: tuple[Split, ...]) -> None:
        super().__init__(splits)
        self.splits = splits

    def __repr__(self) -> str:
        return "SplitPartition(" + ", ".join(
            f"{s.topic}-{s.partition}/{os.path.basename(s.path)}[{s.start}:{s.end}]"
            for s in self.splits) + ")"


class KafkaSegmentsReader(DataSourceReader):
    """Batch reader without filter pushdown (Spark refuses a reader that defines
    ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is off)."""

    def __init__(self, spec: ScanSpec, schema: StructType, tasks: int = AUTO_TASKS) -> None:
        self.spec = spec
        self.tasks = tasks
        self.columns = schema.fieldNames()
        # exactly the Arrow schema Spark checks every batch against
        self.target = to_arrow_schema(schema, timezone="UTC")
        unknown = set(self.columns) - set(arrow_schema().names)
        if unknown:
            raise ValueError(f"kafka-segments: unknown column(s) {sorted(unknown)}")

    def partitions(self) -> Sequence[InputPartition]:
        """Tasks over the selected partition folders, in offset order, of about ``splitSize``
        bytes each (default :func:`~kproto.spark.scan.auto_split_bytes`)."""
        spec = self.spec
        if spec.empty:
            return []
        damage: list[Damage] = []
        splits = [s for path in spec.paths
                  for s in plan_splits(path, topics=spec.topics, partitions=spec.partitions,
                                       options=spec.read, split_bytes=1 << 62, damage=damage)
                  if spec.keeps(s)]  # whole segments (the ranges the bounds leave of them)
        target = spec.split_bytes or auto_split_bytes(sum(s.size for s in splits), self.tasks)
        for d in damage:
            log.warning("kafka-segments: %s", d)
        if spec.pushed:
            log.info("kafka-segments: filters pushed into the scan: %s", ", ".join(spec.pushed))
        return [SplitPartition(group) for group in balance(splits, target)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of the partition's splits, as Arrow batches of the Spark schema."""
        # () for Spark's placeholder partition of an empty scan
        splits = getattr(partition, "splits", ())
        damage: list[Damage] = []
        full = self.columns == arrow_schema().names
        for split in splits:
            for rb in read_split(split, self.spec.read, damage=damage):
                if not full:
                    rb = rb.select(self.columns)
                yield rb.cast(self.target)
        for d in damage:
            log.warning("kafka-segments: %s", d)


class KafkaSegmentsPushdownReader(KafkaSegmentsReader):
    """Batch reader taking Spark's filters on topic, partition, offset and timestamp."""

    def pushFilters(self, filters: list) -> list:
        self.spec, rest = self.spec.push(filters)
        return rest


def _planning_with_pushdown() -> bool:
    """Whether Spark's filter-pushdown planner (run only when
    ``spark.sql.python.filterPushdown.enabled`` is on) is the caller. The reader must define
    ``pushFilters`` only then: the plain planner rejects such a reader, and nothing else tells
    a data source which of the two is asking."""
    frame = sys._getframe(2)
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) == "data_source_pushdown_filters.py":
            return True
        frame = frame.f_back
    return False


class KafkaSegmentsDataSource(DataSource):
    """``spark.read.format("kafka-segments").load(path)``: every record of a Kafka log
    directory (or partition folder) with the columns of :func:`kproto.storage.arrow_schema`.

    Options (case-insensitive): ``topics`` / ``partitions`` (comma-separated),
    ``startingOffsets`` / ``endingOffsets`` (``[start, end)``, or ``earliest`` / ``latest``),
    ``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch, ``[start, end)``),
    ``isolation`` (``read_uncommitted`` or ``read_committed``), ``includeControl``,
    ``verifyCrc`` (skip batches whose CRC does not match), ``splitSize`` (bytes per task, e.g.
    ``64m``; segments are cut at batch boundaries found through their ``.index``; default:
    what is read over ``tasks`` tasks, see :func:`kproto.spark.register`).
    """

    tasks: int = AUTO_TASKS  # tasks per read without splitSize

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        spec = parse_options(self.options)
        cls = KafkaSegmentsPushdownReader if _planning_with_pushdown() else KafkaSegmentsReader
        return cls(spec, schema, self.tasks)
