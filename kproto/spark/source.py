"""The ``kafka-segments`` PySpark data source: planning on the driver's Python worker
(:func:`kproto.storage.plan_splits`, then :func:`kproto.storage.reader.balance` into tasks),
and each split read on an executor into Arrow record batches (:func:`kproto.storage.read_split`)
handed to Spark as they are.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from kproto.problems import Problem, Problems
from kproto.storage.internal import decode_internal_batch, internal_arrow_schema
from kproto.storage.reader import (HEADER_TYPE, Split, arrow_schema, balance, plan_splits,
                                   read_split)
from kproto.spark.scan import AUTO_TASKS, ScanSpec, auto_split_bytes, parse_options
from kproto.spark.stream import KafkaSegmentsStreamReader, without_stream_options

NAME = "kafka-segments"
log = logging.getLogger("kproto.spark")


def spark_schema() -> StructType:
    """The source's Spark schema: :func:`kproto.storage.arrow_schema` in Spark types."""
    return from_arrow_schema(arrow_schema())


def internal_spark_schema() -> StructType:
    """Columns of ``.option("decode", "internal")``:
    :func:`kproto.storage.internal.internal_arrow_schema` in Spark types."""
    return from_arrow_schema(internal_arrow_schema())


#: Spark's Kafka source's columns (``columns=kafka``) and the columns they are read from.
#: Spark's own declares every one nullable; these say which are, as :func:`arrow_schema` does.
KAFKA_COLUMNS = (("key", "key"), ("value", "value"), ("topic", "topic"),
                 ("partition", "partition"), ("offset", "offset"), ("timestamp", "timestamp"),
                 ("timestampType", "timestamp_type"), ("headers", "headers"))


def kafka_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The columns of ``columns=kafka``: those of Spark's Kafka source (format ``kafka``),
    names and types (``timestampType`` an int; ``headers`` only with ``includeHeaders``, null
    when a record has none)."""
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string(), False), pa.field("partition", pa.int32(), False),
              pa.field("offset", pa.int64(), False),
              pa.field("timestamp", pa.timestamp("ms", tz="UTC"), False),
              pa.field("timestampType", pa.int32(), False)]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def kafka_spark_schema(include_headers: bool = False) -> StructType:
    """:func:`kafka_arrow_schema` in Spark types: the same names and types as Spark's Kafka
    source, so a query over one runs over the other unchanged."""
    return from_arrow_schema(kafka_arrow_schema(include_headers))


def _as_kafka(rb: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """``columns`` of Spark's Kafka source from a batch of :func:`kproto.storage.arrow_schema`."""
    source = dict(KAFKA_COLUMNS)
    arrays = []
    for name in columns:
        array = rb.column(source[name])
        if name == "headers":  # Spark's source gives null, not [], for a record without any
            array = pc.if_else(pc.equal(pc.list_value_length(array), 0),
                               pa.scalar(None, array.type), array)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


DAMAGE_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("file", pa.string(), False), pa.field("position", pa.int64(), False),
    pa.field("kind", pa.string(), False), pa.field("reason", pa.string(), False),
    pa.field("bytes_skipped", pa.int64(), False),
])


def damage_spark_schema() -> StructType:
    """Columns of ``.option("output", "damage")``: one row per :class:`kproto.Problem` a read
    meets (``kind``: crc, corrupt, torn-tail, index, file, gap, limit; ``file``: its source;
    ``position``: byte position in ``file``; ``bytes_skipped``: log bytes not read because of
    it), with its topic and partition."""
    return from_arrow_schema(DAMAGE_SCHEMA)


def _damage_batch(damage: Iterable[Problem], target: pa.Schema) -> pa.RecordBatch:
    """The damage rows of ``damage``: topic and partition are the records' own."""
    rows = list(damage)
    return pa.RecordBatch.from_arrays([
        pa.array([d.topic for d in rows], pa.string()),
        pa.array([d.partition for d in rows], pa.int32()),
        pa.array([d.source for d in rows], pa.string()),
        pa.array([d.position for d in rows], pa.int64()),
        pa.array([d.kind for d in rows], pa.string()),
        pa.array([d.reason for d in rows], pa.string()),
        pa.array([d.bytes_skipped for d in rows], pa.int64()),
    ], schema=DAMAGE_SCHEMA).select(target.names).cast(target)


class SplitPartition(InputPartition):
    """A Spark partition: consecutive :class:`kproto.storage.Split` s (byte ranges of
    segments, see :func:`kproto.storage.reader.balance`)."""

    def __init__(self, splits: tuple[Split, ...], problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(splits)
        self.splits = splits
        self.problems = problems  # found while planning, reported by this task (damage output)

    def __repr__(self) -> str:
        return "SplitPartition(" + ", ".join(
            f"{s.topic}-{s.partition}/{os.path.basename(s.path)}[{s.start}:{s.end}]"
            for s in self.splits) + ")"


class _PushFilters:
    """``pushFilters`` of :class:`KafkaSegmentsReader`, set on each instance.

    With ``spark.sql.python.filterPushdown.enabled`` Spark's planner calls
    ``reader.pushFilters(filters)``; without it, the other planner refuses any reader whose
    ``reader.pushFilters.__func__`` is not ``DataSourceReader.pushFilters`` (a guard for
    sources that depend on their own filtering), and nothing tells a reader which planner
    asks: the setting is not passed to Python sources. This source only narrows its scan with
    the filters and Spark evaluates every filter not reported as handled, so one reader can
    serve both: the call finds this instance attribute, while the guard finds the inherited
    method on the class, or through ``__func__`` below on the instance (Spark 4.1-4.3 look
    there). This replaces looking for the pushdown planner's file in the call stack. Should a
    later guard test something else, reads with pushdown off would fail loudly (the
    ``pushdown-off`` tests), never return wrong rows.
    """

    __func__ = staticmethod(getattr(DataSourceReader, "pushFilters", lambda self, f: f))

    def __init__(self, reader: KafkaSegmentsReader) -> None:
        self.reader = reader

    def __call__(self, filters: list) -> list:
        self.reader.spec, rest = self.reader.spec.push(filters)
        return rest


class KafkaSegmentsReader(DataSourceReader):
    """Batch reader of a ``kafka-segments`` read; takes Spark's filters on topic, partition,
    offset and timestamp when pushdown is on (see :class:`_PushFilters`)."""

    def __init__(self, spec: ScanSpec, schema: StructType, tasks: int = AUTO_TASKS) -> None:
        self.spec = spec
        self.tasks = tasks
        self.columns = schema.fieldNames()
        # exactly the Arrow schema Spark checks every batch against
        self.target = to_arrow_schema(schema, timezone="UTC")
        known = DAMAGE_SCHEMA if spec.output == "damage" else (
            internal_arrow_schema() if spec.decode == "internal" else
            kafka_arrow_schema(spec.include_headers) if spec.columns == "kafka" else
            arrow_schema())
        unknown = set(self.columns) - set(known.names)
        if unknown:
            raise ValueError(f"kafka-segments: unknown column(s) {sorted(unknown)}")
        self.pushFilters = _PushFilters(self)  # type: ignore[method-assign]  # on purpose: see _PushFilters

    def partitions(self) -> Sequence[InputPartition]:
        """Tasks over the selected partition folders, in offset order, of about ``splitSize``
        bytes each (default :func:`~kproto.spark.scan.auto_split_bytes`)."""
        spec = self.spec
        if spec.empty:
            return []
        damage = Problems()
        storage = dict(spec.storage_options)
        own = dict(spec.partition_offsets)  # partitions with offsets of their own: planned alone
        splits = [s for path in spec.paths
                  for s in plan_splits(path, topics=spec.topics, partitions=spec.partitions,
                                       options=spec.read, problems=damage,
                                       storage_options=storage)
                  if spec.keeps(s) and (s.topic, s.partition) not in own]
        for path in spec.paths:
            for topic, partition in own:
                if spec.selects(topic, partition):
                    splits += plan_splits(path, topics=[topic], partitions=[partition],
                                          options=spec.read_for(topic, partition),
                                          problems=damage, storage_options=storage)
        target = spec.split_bytes or auto_split_bytes(sum(s.size for s in splits), self.tasks)
        if spec.pushed:
            log.info("kafka-segments: filters pushed into the scan: %s", ", ".join(spec.pushed))
        tasks = [SplitPartition(group) for group in balance(splits, target)]
        if spec.output == "damage":
            # the first task reports what planning found (a task even when nothing is read)
            first = tasks[0].splits if tasks else ()
            return [SplitPartition(first, tuple(damage))] + tasks[1:]
        for d in damage:
            log.warning("kafka-segments: %s", d)
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of the partition's splits, as Arrow batches of the Spark schema."""
        # () for Spark's placeholder partition of an empty scan
        splits = getattr(partition, "splits", ())
        if self.spec.output == "damage":
            yield from self._read_damage(splits, Problems(getattr(partition, "problems", ())))
            return
        damage = Problems()
        internal = self.spec.decode == "internal"
        kafka = self.spec.columns == "kafka"
        full = self.columns == (internal_arrow_schema() if internal else arrow_schema()).names
        for split in splits:
            for rb in read_split(split, self.spec.read_for(split.topic, split.partition),
                                 problems=damage,
                                 storage_options=dict(self.spec.storage_options)):
                if internal:
                    rb = decode_internal_batch(rb)
                if kafka:
                    rb = _as_kafka(rb, self.columns)
                elif not full:
                    rb = rb.select(self.columns)
                yield rb.cast(self.target)
        for d in damage:
            log.warning("kafka-segments: %s", d)

    def _read_damage(self, splits: Sequence[Split],
                     damage: Problems) -> Iterator[pa.RecordBatch]:
        """The damage a records read of ``splits`` meets, read in full (records that do
        not decode are found only by decoding them) and dropped."""
        for split in splits:
            for _ in read_split(split, self.spec.read_for(split.topic, split.partition),
                                problems=damage,
                                storage_options=dict(self.spec.storage_options)):
                pass
        if damage:
            yield _damage_batch(damage, self.target)


class KafkaSegmentsDataSource(DataSource):
    """``spark.read.format("kafka-segments").load(path)``: every record of a Kafka log
    directory (or partition folder) with the columns of :func:`kproto.storage.arrow_schema`.

    Options (case-insensitive): ``topics`` / ``partitions`` (comma-separated),
    ``startingOffsets`` / ``endingOffsets`` (``[start, end)``: ``earliest`` / ``latest``, an
    offset for every partition, or Spark's JSON ``{"topic": {"0": 42, "1": -2}}`` with -2 the
    earliest and -1 the latest, unlisted partitions from the earliest / to the latest),
    ``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch, ``[start, end)``),
    ``isolation`` (``read_uncommitted`` or ``read_committed``), ``includeControl``,
    ``includeDeleted`` (also the records below a partition's log start offset, which
    ``log-start-offset-checkpoint`` says DeleteRecords or retention removed), ``verifyCrc`` (skip batches whose CRC does not match), ``splitSize`` (bytes per task, e.g.
    ``64m``; segments are cut at batch boundaries found through their ``.index``; default:
    what is read over ``tasks`` tasks, see :func:`kproto.spark.register`), ``output``
    (``records``, or ``damage``: instead of the records, one row per damage a read with the
    same options meets, columns :func:`damage_spark_schema`), ``decode`` (``none``, or
    ``internal``: only ``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``
    and ``__cluster_metadata``, one typed row per record, columns
    :func:`internal_spark_schema`; with ``output=damage`` the damage rows are returned),
    ``fs.<name>`` (for ``s3://``, ``gs://``, ``hdfs://``... paths: the filesystem's
    arguments, e.g. ``fs.endpoint_override``, ``fs.access_key``; see
    :mod:`kproto.storage.fs`), ``columns`` (``kproto``, or ``kafka``: the columns of Spark's
    Kafka source, :func:`kafka_spark_schema`, with its ``includeHeaders``). Spark's Kafka
    source's ``subscribe`` and ``kafka.isolation.level`` are taken for ``topics`` and
    ``isolation``, and its ``subscribePattern`` (topics the regular expression matches in
    full) and ``assign`` (``{"topic": [0, 1]}``) too, so its queries run here with
    ``load(path)`` for the broker's address.
    """

    tasks: int = AUTO_TASKS  # tasks per read without splitSize

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        spec = parse_options(without_stream_options(self.options))
        if spec.output == "damage":
            return damage_spark_schema()
        if spec.columns == "kafka":
            return kafka_spark_schema(spec.include_headers)
        return internal_spark_schema() if spec.decode == "internal" else spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaSegmentsReader(parse_options(self.options), schema, self.tasks)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("kafka-segments")``: see :mod:`kproto.spark.stream`."""
        return KafkaSegmentsStreamReader(self.options, schema, self.tasks, KafkaSegmentsReader)


#: Earlier name of the reader used with pushdown on; every reader takes filters now.
KafkaSegmentsPushdownReader = KafkaSegmentsReader
