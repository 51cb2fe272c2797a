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
from their log start offset. Offsets lost before they were read (below a partition's log start
offset: segments deleted by retention or DeleteRecords; past its log end: a log truncated or
created again; a partition gone) fail the query, as Spark's Kafka source does, unless
``failOnDataLoss`` is false: then they are logged as ``gap`` warnings of the ``kproto.spark``
logger and reading goes on at the log start (or the log end). Planning and reading are the
batch source's (:func:`kproto.storage.plan_splits`, :func:`kproto.storage.read_split`), on
local paths and URIs alike (``s3://``, ``gs://``...: :mod:`kproto.storage.fs`, ``fs.*``
options): each step lists the folders, reads the checkpoints and, per partition, the last
offset-index entry and the log's new bytes in ranged reads.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from kproto.problems import Problem, Problems
from kproto.storage.reader import Split, balance
from kproto.storage.tail import (BOUNDS, PartitionTail, advance, locate, offsets_for_times,
                                 offsets_from_json, offsets_to_json, plan_ranges, rate_limit,
                                 split_options, stream_ranges, tail_log_dirs)
from kproto.spark.scan import (AUTO_TASKS, EARLIEST, LATEST, ScanSpec, _bool, auto_split_bytes,
                               parse_options)

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
STREAM_OPTIONS = ("bound", "startingoffsets", "maxoffsetspertrigger", "minoffsetspertrigger",
                  "maxtriggerdelay", "startingtimestamp", "startingoffsetsbytimestamp",
                  "startingoffsetsbytimestampstrategy", "failondataloss")
#: batch options a stream cannot honour (Spark's Kafka source has them for batch reads only)
_NOT_STREAMED = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
#: what a stream starting at a timestamp does with a partition without a record at or after
#: it (Spark's ``startingOffsetsByTimestampStrategy``): fail, or start at its latest offset
TIMESTAMP_STRATEGIES = ("error", "latest")
TopicPartition = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets a stream had still to read are gone (``failOnDataLoss``, true by default)."""

    def __init__(self, lost: Sequence[Problem]) -> None:
        super().__init__(
            "kafka-segments: offsets the stream had not read yet are lost: "
            + "; ".join(f"{p.topic}-{p.partition}: {p.reason}" for p in lost)
            + ". Some data may have been lost because they are not available any more "
              "(retention, DeleteRecords, a log truncated or deleted). If you want the stream "
              "to go on from the data that is left, set the source option failOnDataLoss to "
              "false.")
        self.lost = tuple(lost)


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
    #: ``startingTimestamp`` (an int, every partition) or ``startingOffsetsByTimestamp``
    #: (per partition): where a new query starts instead of ``starting``
    starting_times: int | dict[TopicPartition, int] | None = None
    #: ``startingOffsetsByTimestampStrategy``: a partition without a record that late
    timestamp_strategy: str = "error"
    #: ``failOnDataLoss``: offsets lost before they were read fail the query (else: logged)
    fail_on_data_loss: bool = True
    #: ``minOffsetsPerTrigger``: a trigger with fewer new offsets is skipped, unless
    #: ``maxTriggerDelay`` (ms) has passed since the last micro-batch
    min_offsets: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000


#: Spark's time units (``JavaUtils.timeStringAsMs``): a number alone is milliseconds
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}


def _duration_ms(name: str, value: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if not m or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise ValueError(f"kafka-segments: {name} must be a duration like 15m, 30s or 500ms, "
                         f"not {value!r}")
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        n = int(opts[key])
    except ValueError:
        n = 0
    if n <= 0:
        raise ValueError(f"kafka-segments: {name} must be a positive integer, not {opts[key]!r}")
    return n


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
        raise NotImplementedError(
            f"kafka-segments: streaming reads do not support {unsupported}: a stream has no "
            f"end (as in Spark's Kafka source, ending offsets are for batch reads: "
            f"spark.read, or Trigger.AvailableNow to stop at what is there)")
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
        bad = sorted(f"{t}-{p}: {o}" for (t, p), o in starting.items() if o < EARLIEST)
        if bad:
            raise ValueError(f"kafka-segments: startingOffsets must be offsets, -2 (earliest) or "
                             f"-1 (latest): {', '.join(bad)}")
    max_offsets = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_offsets = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise ValueError(f"kafka-segments: minOffsetsPerTrigger ({min_offsets}) can't be greater "
                         f"than maxOffsetsPerTrigger ({max_offsets})")
    delay = _duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", "15m"))
    times: int | dict[TopicPartition, int] | None = None
    if "startingoffsetsbytimestamp" in opts:  # Spark's order: it wins over startingTimestamp
        try:
            times = offsets_from_json(json.loads(opts["startingoffsetsbytimestamp"]))
        except ValueError as exc:
            raise ValueError(f"kafka-segments: startingOffsetsByTimestamp must be JSON like "
                             f"{{\"topic\": {{\"0\": 1700000000000}}}} (ms since the epoch): "
                             f"{exc}") from None
    elif "startingtimestamp" in opts:
        try:
            times = int(opts["startingtimestamp"])
        except ValueError:
            raise ValueError(f"kafka-segments: startingTimestamp must be ms since the epoch, "
                             f"not {opts['startingtimestamp']!r}") from None
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise ValueError(f"kafka-segments: startingOffsetsByTimestampStrategy must be one of "
                         f"{TIMESTAMP_STRATEGIES}, not {strategy!r}")
    fail = _bool(opts, "failondataloss", "true")
    return StreamSpec(scan, bound, starting, max_offsets, times, strategy, fail, min_offsets, delay)


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
    """Stream reader of ``kafka-segments``. Options: those of the batch source (paths, local
    or URIs with their ``fs.*`` options, ``topics``, ``partitions``, ``isolation``,
    ``includeControl``, ``includeDeleted``, ``verifyCrc``, ``splitSize``, ``decode``), and
    ``bound`` (``auto``, ``hw``, ``end``: see :mod:`kproto.storage.tail`), where a new query
    starts: ``startingOffsets`` (``earliest``, the default: every partition from its log
    start; ``latest``: what may be read when the query first starts; or
    ``{"topic": {"0": 42}}``, unlisted partitions from their log start),
    ``startingTimestamp`` (ms since the epoch: in every partition, the first offset whose
    record is that late, Kafka's ListOffsets by timestamp) or ``startingOffsetsByTimestamp``
    (``{"topic": {"0": ms}}``, unlisted partitions from their log start), these two taking
    precedence as in Spark's Kafka source, with ``startingOffsetsByTimestampStrategy``
    (``error``, the default: a partition without such a record fails the query's start;
    ``latest``: it starts at what may be read then); ``maxOffsetsPerTrigger``;
    ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (default 15m: a trigger with fewer new
    offsets is skipped until that long after the last micro-batch); and
    ``failOnDataLoss`` (default true: offsets lost before they were read fail the query;
    false: they are logged and the stream goes on). A restarted query resumes from its
    checkpoint, whatever the starting options say. ``endingOffsets``, ``endingTimestamp``
    and ``output=damage`` raise ``NotImplementedError``.

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
        self._last_trigger: float | None = None  # when the last micro-batch was let through
        self._clock = time.monotonic

    # ---------------------------------------------------------------------- driver side
    def _tails(self, caps: Mapping[TopicPartition, int] | None = None,
               positions: Mapping[TopicPartition, int] | None = None
               ) -> dict[TopicPartition, PartitionTail]:
        scan = self.spec.scan
        if scan.empty:
            return {}
        found = Problems()
        tails = tail_log_dirs(scan.paths, topics=scan.topics, partitions=scan.partitions,
                              bound=self.spec.bound, isolation=scan.read.isolation,
                              include_deleted=scan.read.include_deleted, caps=caps,
                              positions=positions, problems=found,
                              storage_options=dict(scan.storage_options))
        for p in found:
            log.warning("kafka-segments: %s", p)
        return {tp: t for tp, t in tails.items() if scan.selects(*tp)}

    def initialOffset(self) -> dict:
        """Where a new query starts (``startingOffsetsByTimestamp``, ``startingTimestamp``,
        ``startingOffsets``, in that order)."""
        if self.spec.starting_times is not None:
            return offsets_to_json(self._by_timestamp(self.spec.starting_times))
        starting = self.spec.starting
        if starting == "earliest":
            return {}  # every partition from its log start offset
        if starting == "latest":
            return offsets_to_json(advance({}, self._tails()))
        assert isinstance(starting, dict)
        # Spark's -2 (earliest): from the log start, as a partition not listed; -1: the latest
        out = {tp: o for tp, o in starting.items() if o >= 0}
        if any(o == LATEST for o in starting.values()):
            latest = advance({}, self._tails())
            out.update({tp: latest[tp] for tp, o in starting.items()
                        if o == LATEST and tp in latest})
        return offsets_to_json(out)

    def _by_timestamp(self, times: int | Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Each partition's first offset at or after its starting timestamp; one without a
        record that late fails (strategy ``error``) or starts at what may be read now
        (``latest``)."""
        scan = self.spec.scan
        if scan.empty:
            return {}
        found = Problems()
        hits = offsets_for_times(scan.paths, times, topics=scan.topics,
                                 partitions=scan.partitions,
                                 include_deleted=scan.read.include_deleted, problems=found,
                                 storage_options=dict(scan.storage_options))
        for p in found:
            log.warning("kafka-segments: %s", p)
        hits = {tp: o for tp, o in hits.items() if scan.selects(*tp)}
        missing = sorted(tp for tp, o in hits.items() if o is None)
        if missing and self.spec.timestamp_strategy == "error":
            raise ValueError(
                f"kafka-segments: no record at or after the starting timestamp in "
                f"{', '.join(f'{t}-{p}' for t, p in missing)} (set "
                f"startingOffsetsByTimestampStrategy to latest to start those at their end)")
        out = {tp: o for tp, o in hits.items() if o is not None}
        if missing:
            latest = advance({}, self._tails())
            out.update({tp: latest[tp] for tp in missing if tp in latest})
        return out

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
        tails = self._until_cut(self._tails(positions=begin))
        if self._delayed(begin, tails):
            return offsets_to_json(begin)
        max_rows = getattr(limit, "max_rows", None)  # ReadMaxRows; ReadAllAvailable has none
        if max_rows is not None:
            caps = rate_limit(begin, tails, int(max_rows))
            result = dict(tails)
            while caps:
                capped = self._until_cut(self._tails(caps, begin))
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

    def _delayed(self, begin: Mapping[TopicPartition, int],
                 tails: Mapping[TopicPartition, PartitionTail]) -> bool:
        """``minOffsetsPerTrigger``, as Spark's Kafka source applies it: skip this trigger while
        fewer offsets than that are new and ``maxTriggerDelay`` has not passed since the last
        micro-batch (the first trigger is never skipped; Trigger.AvailableNow is not delayed)."""
        if self.spec.min_offsets is None or self._until is not None:
            return False
        now = self._clock()
        if self._last_trigger is None or (now - self._last_trigger) * 1000 >= self.spec.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        new = sum(max(0, t.readable - begin.get(tp, t.log_start)) for tp, t in tails.items())
        if new < self.spec.min_offsets:
            return True
        self._last_trigger = now
        return False

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
        options = dict(scan.storage_options)
        where = locate(scan.paths, topics=scan.topics, partitions=scan.partitions,
                       include_deleted=scan.read.include_deleted, problems=found,
                       storage_options=options)
        where = {tp: w for tp, w in where.items() if scan.selects(*tp)}
        lost = Problems()
        ranges = stream_ranges(offsets_from_json(start), offsets_from_json(end),
                               {tp: first for tp, (_, first) in where.items()}, lost)
        if lost and self.spec.fail_on_data_loss:
            raise DataLossError(list(lost))
        splits = plan_ranges(ranges, {tp: folder for tp, (folder, _) in where.items()},
                             scan.read, found, options)
        for p in [*lost, *found]:
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
                lost = Problem("gap", f"{split.path} was deleted before offsets [{frm}, {to}) "
                               f"were read from it", source=split.path, topic=split.topic,
                               partition=split.partition)
                if self.spec.fail_on_data_loss:
                    raise DataLossError([lost]) from None
                log.warning("kafka-segments: %s", lost)


__all__ = ["STREAM_OPTIONS", "DataLossError", "KafkaSegmentsStreamReader", "StreamPartition", "StreamSpec",
           "parse_stream_options", "without_stream_options"]
