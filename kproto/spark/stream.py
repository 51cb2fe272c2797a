"""``spark.readStream.format("kafka-segments")``: a live log directory tailed in micro-batches.

    q = (spark.readStream.format("kafka-segments").option("isolation", "read_committed")
         .load("/var/lib/kafka/data")
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(processingTime="5 seconds").start(out))

Each micro-batch reads, per partition, the records from where the previous one stopped to
what may be read now (:mod:`kproto.storage.tail`: the high watermark or the log end,
``bound``; for read_committed the last stable offset as of it, so that no batch ends inside an
open transaction). Offsets are ``{"topic": {"partition": next offset}}`` in Spark's
checkpoint: a query restarted from it resumes exactly there. New partitions and topics are read
from their log start offset; offsets below a partition's log start offset (segments deleted
before they were read) are logged as ``gap`` warnings of the ``kproto.spark`` logger and
reading resumes at the log start. Planning and reading are the batch source's
(:func:`kproto.storage.plan_splits`, :func:`kproto.storage.read_split`), on local paths only.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kproto.problems import Problems
from kproto.storage.reader import Split, balance
from kproto.storage.tail import (BOUNDS, PartitionTail, advance, locate, offsets_from_json,
                                 offsets_to_json, plan_ranges, rate_limit, split_options,
                                 stream_ranges, tail_log_dirs)
from kproto.spark.scan import AUTO_TASKS, ScanSpec, auto_split_bytes, parse_options

try:  # Spark 4.2+: Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - older Spark runs the other triggers only
    class _AvailableNow:  # type: ignore[no-redef]
        pass

try:  # Spark 4.2+: admission control (maxOffsetsPerTrigger)
    from pyspark.sql.streaming.datasource import ReadMaxRows as _ReadMaxRows
except ImportError:  # pragma: no cover - older Spark reads all there is at each trigger
    _ReadMaxRows = None  # type: ignore[assignment,misc]

log = logging.getLogger("kproto.spark")

#: options of streaming reads only (lower-cased): see :class:`KafkaSegmentsStreamReader`
STREAM_OPTIONS = ("bound", "startingoffsets", "maxoffsetspertrigger")
#: batch options a stream cannot honour
_NOT_STREAMED = ("endingoffsets", "startingtimestamp", "endingtimestamp")
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class StreamSpec:
    """A streaming read: the batch source's :class:`~kproto.spark.scan.ScanSpec` (paths,
    partition selection, isolation...), the ``bound`` and where a new query starts
    (``earliest``, ``latest``, or positions)."""

    scan: ScanSpec
    bound: str = "auto"
    starting: str | dict[TopicPartition, int] = "earliest"
    #: ``maxOffsetsPerTrigger``: at most this many offsets per micro-batch (None: all there is)
    max_offsets: int | None = None


def without_stream_options(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` without the streaming-only ones (what the batch parser knows)."""
    return {k: v for k, v in options.items() if k.lower() not in STREAM_OPTIONS}


def parse_stream_options(options: Mapping[str, str]) -> StreamSpec:
    """A :class:`StreamSpec` from the source's options; ``ValueError`` names a bad one,
    ``NotImplementedError`` a batch option streams do not support."""
    opts = {k.lower(): v for k, v in options.items()}
    unsupported = sorted(k for k in _NOT_STREAMED if k in opts
                         and not (k == "endingoffsets" and opts[k].lower() == "latest"))
    if unsupported:
        raise NotImplementedError(f"kafka-segments: streaming reads do not support "
                                  f"{unsupported} (use startingOffsets)")
    scan = parse_options(without_stream_options(opts))
    if scan.output != "records":
        raise NotImplementedError("kafka-segments: streaming reads return records only "
                                  "(output=damage is for batch reads)")
    bound = opts.get("bound", "auto").lower()
    if bound not in BOUNDS:
        raise ValueError(f"kafka-segments: bound must be one of {BOUNDS}, not {bound!r}")
    start = opts.get("startingoffsets", "earliest").strip()
    starting: str | dict[TopicPartition, int]
    if start.lower() in ("earliest", "latest"):
        starting = start.lower()
    else:
        try:
            starting = offsets_from_json(json.loads(start))
        except ValueError as exc:
            raise ValueError(f"kafka-segments: startingOffsets of a stream must be earliest, "
                             f"latest or JSON like {{\"topic\": {{\"0\": 42}}}}: {exc}") from None
    max_offsets = None
    if "maxoffsetspertrigger" in opts:
        try:
            max_offsets = int(opts["maxoffsetspertrigger"])
        except ValueError:
            max_offsets = 0
        if max_offsets <= 0:
            raise ValueError(f"kafka-segments: maxOffsetsPerTrigger must be a positive integer, "
                             f"not {opts['maxoffsetspertrigger']!r}")
    return StreamSpec(scan, bound, starting, max_offsets)


class StreamPartition(InputPartition):
    """A micro-batch task: consecutive splits and, per partition, the offsets ``[from, to)``
    the micro-batch reads of it."""

    def __init__(self, splits: tuple[Split, ...],
                 ranges: dict[TopicPartition, tuple[int, int]]) -> None:
        super().__init__(splits)
        self.splits = splits
        self.ranges = ranges

    def __repr__(self) -> str:
        return "StreamPartition(" + ", ".join(
            f"{t}-{p}[{a}:{b}]" for (t, p), (a, b) in sorted(self.ranges.items())) + ")"


class _OneSplit:
    """What a batch reader's ``read`` takes: an object with ``splits``."""

    def __init__(self, split: Split) -> None:
        self.splits = (split,)


class KafkaSegmentsStreamReader(DataSourceStreamReader, _AvailableNow):
    """Stream reader of ``kafka-segments``. Options: those of the batch source (paths,
    ``topics``, ``partitions``, ``isolation``, ``includeControl``, ``includeDeleted``,
    ``verifyCrc``, ``splitSize``, ``decode``), and ``bound`` (``auto``, ``hw``, ``end``: see
    :mod:`kproto.storage.tail`), ``startingOffsets`` (``earliest``, the default: every
    partition from its log start; ``latest``: what may be read when the query first starts;
    or ``{"topic": {"0": 42}}``, unlisted partitions from their log start). A restarted query
    resumes from its checkpoint, whatever ``startingOffsets`` says. ``endingOffsets``,
    ``startingTimestamp``, ``endingTimestamp`` and ``output=damage`` raise
    ``NotImplementedError``.

    ``batch_reader`` reads one split with the batch source's options (the
    :class:`~kproto.spark.source.KafkaSegmentsReader` class, passed in so that this module does
    not import the source's)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, tasks: int = AUTO_TASKS,
                 batch_reader: Any = None) -> None:
        self.spec = parse_stream_options(options)
        self.schema = schema
        self.tasks = tasks
        if batch_reader is None:
            raise TypeError("batch_reader: the batch source's reader class is needed")
        self.batch_reader = batch_reader
        # validate the columns now (the batch reader refuses unknown ones)
        self.batch_reader(self.spec.scan, schema, tasks)
        self._until: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's target

    # ---------------------------------------------------------------------- driver side
    def _tails(self, caps: Mapping[TopicPartition, int] | None = None) -> dict[TopicPartition, PartitionTail]:
        scan = self.spec.scan
        if scan.empty:
            return {}
        found = Problems()
        tails = tail_log_dirs(scan.paths, topics=scan.topics, partitions=scan.partitions,
                              bound=self.spec.bound, isolation=scan.read.isolation,
                              include_deleted=scan.read.include_deleted, caps=caps, problems=found)
        for p in found:
            log.warning("kafka-segments: %s", p)
        return tails

    def initialOffset(self) -> dict:
        """Where a new query starts (``startingOffsets``)."""
        starting = self.spec.starting
        if starting == "earliest":
            return {}  # every partition from its log start offset
        if starting == "latest":
            return offsets_to_json(advance({}, self._tails()))
        assert isinstance(starting, dict)
        return offsets_to_json(starting)

    def getDefaultReadLimit(self) -> Any:
        """``maxOffsetsPerTrigger`` as Spark's read limit (all available without it)."""
        if self.spec.max_offsets is None or _ReadMaxRows is None:
            return super().getDefaultReadLimit()
        return _ReadMaxRows(self.spec.max_offsets)

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        """Every partition's position after the next micro-batch: what may be read now (see
        :mod:`kproto.storage.tail`); with Trigger.AvailableNow, no further than what could be
        read when the query started; with a row limit from Spark (``maxOffsetsPerTrigger``),
        at most that many offsets, shared as Spark's Kafka source shares them. A
        read_committed partition whose open transaction spans its share reads to the end of
        it rather than not at all."""
        begin = offsets_from_json(start)
        tails = self._until_cut(self._tails())
        max_rows = getattr(limit, "max_rows", None)  # ReadMaxRows; ReadAllAvailable has none
        if max_rows is not None:
            caps = rate_limit(begin, tails, int(max_rows))
            result = dict(tails)
            while caps:
                capped = self._until_cut(self._tails(caps))
                stuck = {}
                for tp, cap in caps.items():
                    t, pos = tails[tp], begin.get(tp, tails[tp].log_start)
                    c = capped.get(tp)
                    if c is not None and (c.readable > pos or cap >= t.readable):
                        result[tp] = c
                    elif c is not None:
                        # an open transaction spans the share: widen it until the step ends
                        # past the transaction's marker, rather than never moving
                        stuck[tp] = min(t.readable, pos + 2 * max(1, cap - pos))
                caps = stuck
            tails = result
        return offsets_to_json(advance(begin, tails))

    def _until_cut(self, tails: dict[TopicPartition, PartitionTail]) -> dict[TopicPartition, PartitionTail]:
        if self._until is None:
            return tails
        until = self._until
        return {tp: replace(t, readable=min(t.readable, until[tp])) for tp, t in tails.items() if tp in until}

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what may be read now, then stop."""
        self._until = {tp: t.readable for tp, t in self._tails().items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Tasks reading each partition's records from ``start`` to ``end``, of about
        ``splitSize`` bytes each (as the batch source's)."""
        scan = self.spec.scan
        found = Problems()
        where = locate(scan.paths, topics=scan.topics, partitions=scan.partitions,
                       include_deleted=scan.read.include_deleted, problems=found)
        ranges = stream_ranges(offsets_from_json(start), offsets_from_json(end),
                               {tp: first for tp, (_, first) in where.items()}, found)
        splits = plan_ranges(ranges, {tp: folder for tp, (folder, _) in where.items()},
                             scan.read, found)
        for p in found:
            log.warning("kafka-segments: %s", p)
        if not splits:
            return []
        target = scan.split_bytes or auto_split_bytes(sum(s.size for s in splits), self.tasks)
        return [StreamPartition(group, {(s.topic, s.partition): ranges[(s.topic, s.partition)]
                                        for s in group})
                for group in balance(splits, target)]

    def commit(self, end: dict) -> None:
        """Nothing to release: the log is the broker's, positions are in Spark's checkpoint."""

    # ---------------------------------------------------------------------- executor side
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of the task's splits within their partitions' ranges, as Arrow batches
        of the Spark schema (the batch source's reader, one split at a time)."""
        ranges: dict[TopicPartition, tuple[int, int]] = getattr(partition, "ranges", {})
        scan = self.spec.scan
        for split in getattr(partition, "splits", ()):
            frm, to = ranges[(split.topic, split.partition)]
            reader: DataSourceReader = self.batch_reader(
                replace(scan, read=split_options(scan.read, frm, to)), self.schema, self.tasks)
            try:
                yield from reader.read(_OneSplit(split))  # type: ignore[arg-type]
            except FileNotFoundError:
                # retention removed the segment after planning: its records are gone
                log.warning("kafka-segments: gap: %s was deleted before offsets [%d, %d) of "
                            "%s-%d were read from it", split.path, frm, to, split.topic,
                            split.partition)


__all__ = ["STREAM_OPTIONS", "KafkaSegmentsStreamReader", "StreamPartition", "StreamSpec",
           "parse_stream_options", "without_stream_options"]
