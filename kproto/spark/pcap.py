"""The ``kafka-pcap`` PySpark data source: Kafka traffic of pcap/pcapng captures as a
DataFrame, one row per exchange (what ``kproto decode-pcap --format jsonl`` prints, typed) or,
with ``.option("expand", "records")``, one row per record of the Produce requests and Fetch
responses. The decoding is :mod:`kproto.capture` (rows: :mod:`kproto.capture.table`); this
module only plans tasks (whole files, small ones grouped up to a byte budget: a capture is
decoded from its start, as TCP streams must be) and hands the Arrow batches to Spark.

    import kproto.spark
    kproto.spark.register(spark)               # registers kafka-segments and kafka-pcap
    df = spark.read.format("kafka-pcap").load("captures/*.pcap*")
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from kproto.capture.api import BodyDecoder
from kproto.capture.decoder import CaptureDecoder
from kproto.capture.table import (EXCHANGE_SCHEMA, RECORD_SCHEMA, capture_exchanges,
                                  capture_files, exchange_batches, group_files, record_batches)
from kproto.spark.scan import AUTO_TASKS, FS_PREFIX, _bool, _size, fs_options, option_paths
from kproto.storage import fs

NAME = "kafka-pcap"
log = logging.getLogger("kproto.spark")

#: options (lower-cased, as Spark hands them over)
OPTIONS = ("path", "paths", "expand", "ports", "besteffort", "splitsize")
#: values of ``expand``: a row per exchange, or per record of Produce/Fetch
EXPANDS = ("exchanges", "records")
# a task's bytes without splitSize: the files over `tasks` tasks, within these bounds (a
# capture decodes at a few MB/s: smaller tasks than kafka-segments' still pay their overhead)
MIN_TASK_BYTES = 1 << 20
MAX_TASK_BYTES = 64 << 20


@dataclass(frozen=True)
class PcapSpec:
    """What a ``kafka-pcap`` read asks for."""

    paths: tuple[str, ...]
    expand: str = "exchanges"
    ports: tuple[int, ...] | None = None  # None: guessed per connection, as decode-pcap does
    best_effort: bool = True
    split_bytes: int | None = None
    storage_options: tuple[tuple[str, str], ...] = ()  # the fs.* options (remote paths)


def parse_pcap_options(options: Mapping[str, str]) -> PcapSpec:
    """A :class:`PcapSpec` from the source's options; ``ValueError`` names a bad one."""
    opts = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in set(opts) - set(OPTIONS) if not k.startswith(FS_PREFIX))
    if unknown:
        raise ValueError(f"{NAME}: unknown option(s) {unknown}; known: {list(OPTIONS)}")
    expand = opts.get("expand", "exchanges").lower()
    if expand not in EXPANDS:
        raise ValueError(f"{NAME}: expand must be one of {EXPANDS}, not {expand!r}")
    ports = None
    if opts.get("ports"):
        try:
            ports = tuple(int(p) for p in opts["ports"].split(",") if p.strip())
        except ValueError:
            raise ValueError(f"{NAME}: ports must be integers: {opts['ports']!r}") from None
    return PcapSpec(tuple(option_paths(opts, NAME)), expand, ports,
                    _bool(opts, "besteffort", "true", NAME), _size(opts.get("splitsize"), NAME),
                    fs_options(opts))


def pcap_spark_schema(expand: str = "exchanges") -> StructType:
    """Columns of a ``kafka-pcap`` read: :data:`kproto.capture.table.EXCHANGE_SCHEMA`, or
    :data:`~kproto.capture.table.RECORD_SCHEMA` with ``expand="records"``."""
    return from_arrow_schema(RECORD_SCHEMA if expand == "records" else EXCHANGE_SCHEMA)


class FilesPartition(InputPartition):
    """A task: whole capture files."""

    def __init__(self, files: tuple[str, ...]) -> None:
        super().__init__(files)
        self.files = files


class KafkaPcapReader(DataSourceReader):
    """Batch reader of a ``kafka-pcap`` read."""

    def __init__(self, spec: PcapSpec, schema: StructType, tasks: int = AUTO_TASKS) -> None:
        self.spec = spec
        self.tasks = tasks
        self.target = to_arrow_schema(schema, timezone="UTC")
        known = RECORD_SCHEMA if spec.expand == "records" else EXCHANGE_SCHEMA
        unknown = set(schema.fieldNames()) - set(known.names)
        if unknown:
            raise ValueError(f"{NAME}: unknown column(s) {sorted(unknown)}")
        self.schema = pa.schema([known.field(n) for n in schema.fieldNames()])

    def partitions(self) -> Sequence[InputPartition]:
        """One task per file, or per run of small files up to ``splitSize`` bytes (default:
        the files' bytes over ``tasks``, within 1-64 MiB)."""
        files = capture_files(self.spec.paths, dict(self.spec.storage_options))
        total = sum(n for _, n in files)
        budget = self.spec.split_bytes or min(MAX_TASK_BYTES, max(
            MIN_TASK_BYTES, -(-total // max(1, self.tasks))))
        return [FilesPartition(tuple(g)) for g in group_files(files, budget)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of the task's files, file by file, in each file's exchange order."""
        rows = record_batches if self.spec.expand == "records" else exchange_batches
        for path in getattr(partition, "files", ()):
            fs.configure(path, dict(self.spec.storage_options))
            decoder = CaptureDecoder(self.spec.ports,
                                     decode=BodyDecoder(best_effort=self.spec.best_effort))
            for rb in rows(capture_exchanges(path, decoder), path, schema=self.schema):
                yield rb.cast(self.target)
            for problem in decoder.problems:  # damage of the file itself, as decode-pcap says
                log.warning("%s: %s: %s", NAME, path, problem.reason)


class KafkaPcapDataSource(DataSource):
    """``spark.read.format("kafka-pcap").load(paths)``: the Kafka exchanges of capture files
    (files, glob patterns, directories; a list with ``.load([a, b])``).

    Options (case-insensitive): ``expand`` (``exchanges``: a row per exchange, columns of
    :func:`pcap_spark_schema`; ``records``: a row per Produce/Fetch record), ``ports``
    (comma-separated broker ports; default guessed per connection), ``bestEffort`` (decode
    versions newer than the schemas with the newest layout; default true), ``splitSize``
    (bytes of files per task, e.g. ``16m``; a larger file is a task of its own),
    ``fs.<name>`` (for ``s3://``... paths: the filesystem's arguments, as for
    ``kafka-segments``).
    """

    tasks: int = AUTO_TASKS  # tasks per read without splitSize (see kproto.spark.register)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return pcap_spark_schema(parse_pcap_options(self.options).expand)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaPcapReader(parse_pcap_options(self.options), schema, self.tasks)
