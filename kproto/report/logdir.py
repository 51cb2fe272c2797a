"""The numbers behind a log-dir report's charts (sans-I/O): fed with the
:func:`kproto.storage.summary.summarize` document (:meth:`LogdirReport.add_summary`) and the
batches of each partition as :mod:`kproto.storage.partition` scans them
(:meth:`LogdirReport.add_batch`; nothing is decompressed), gives plain data per chart
(:meth:`LogdirReport.data`) for :mod:`kproto.report.html` to draw."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.records.reader import Batch
from kproto.storage.partition import batch_max_timestamp
from kproto.report.timeline import Timeline

__all__ = ["LogdirReport", "batch_records"]


def batch_records(batch: Batch) -> int:
    """Records in a batch: the v2 header's count; for a legacy entry the offsets it spans
    (one for a plain message, the inner messages of a wrapper whose offsets are known)."""
    if isinstance(batch, RecordBatch):
        return batch.count
    try:
        return batch.last_offset - batch.base_offset + 1
    except DecodeError:  # a wrapper that does not decompress: its offsets are unknown
        return 1


class LogdirReport:
    """Accumulates a log dir's summary and batches; :meth:`data` returns the charts' numbers.

    ``target``: about how many time buckets the time charts get."""

    def __init__(self, target: int = 100) -> None:
        self.target = target
        self.doc: dict[str, Any] | None = None
        # partition name -> [(max timestamp ms, records, bytes)] of batches with a timestamp
        self._batches: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self._records: dict[str, int] = defaultdict(int)
        # partition name -> [[first offset, end offset, leader epoch], ...]: runs of batches
        self._epochs: dict[str, list[list[int]]] = defaultdict(list)

    def add_summary(self, doc: dict[str, Any]) -> None:
        """The :func:`kproto.storage.summary.summarize` document of the log dir."""
        self.doc = doc

    def add_batch(self, topic: str | None, partition: int, batch: Batch) -> None:
        """One batch of ``topic``-``partition``, in log order."""
        name = f"{topic}-{partition}"
        n = batch_records(batch)
        self._records[name] += n
        ts = batch_max_timestamp(batch)
        if ts >= 0:  # magic 0 has no time; -1 is Kafka's "none"
            self._batches[name].append((ts, n, batch.size_in_bytes))
        # legacy messages carry no leader epoch: -1, as Kafka reads them
        end = batch.last_offset + 1
        first, epoch = ((batch.base_offset, batch.partition_leader_epoch)
                        if isinstance(batch, RecordBatch) else (end - n, -1))
        runs = self._epochs[name]
        if runs and runs[-1][2] == epoch:
            runs[-1][1] = end
        else:
            runs.append([first, end, epoch])

    def update(self, topic: str | None, partition: int, batches: Iterable[Batch]) -> "LogdirReport":
        """:meth:`add_batch` each batch of one partition."""
        for b in batches:
            self.add_batch(topic, partition, b)
        return self

    def data(self) -> dict[str, Any]:
        """The charts' numbers, JSON-able. Times are bucket starts in milliseconds since the
        epoch (Kafka's timestamps); batches are placed by their max timestamp.

        - ``records``/``bytes``: partition -> ``{"t", "count"}`` (every bucket)
        - ``segments``: ``[{"partition", "segment", "base_offset", "size", "batches"}]``
        - ``leader_epochs``: partition -> ``{"batches": [[first offset, end offset, epoch]],
          "checkpoint": [[start offset, epoch]]}`` (runs of batches of one epoch; the
          partition's ``leader-epoch-checkpoint``)
        - ``summary``: one row per partition
        """
        out: dict[str, Any] = {"bucket_ms": None, "start": None, "records": {}, "bytes": {},
                               "segments": [], "leader_epochs": {}, "summary": self._summary()}
        times = [t for rows in self._batches.values() for t, _, _ in rows]
        if times:
            tl = Timeline(min(times), max(times), self.target, smallest=1)
            out["bucket_ms"], out["start"] = tl.width, tl.start
            starts = tl.starts()
            for name in sorted(self._batches):
                records, size = [0] * tl.count, [0] * tl.count
                for t, n, b in self._batches[name]:
                    i = tl.index(t)
                    records[i] += n
                    size[i] += b
                out["records"][name] = {"t": starts, "count": records}
                out["bytes"][name] = {"t": starts, "count": size}
        for p in (self.doc or {}).get("partitions", []):
            name = f"{p['topic']}-{p['partition']}"
            for s in p["segments"]:
                out["segments"].append({"partition": name, "segment": s["segment"],
                                        "base_offset": s["base_offset"], "size": s["size"],
                                        "batches": s["batches"]})
            out["leader_epochs"][name] = {
                "batches": self._epochs.get(name, []),
                "checkpoint": [[e["start_offset"], e["epoch"]] for e in p["leader_epochs"] or []]}
        return out

    def _summary(self) -> list[dict[str, Any]]:
        rows = []
        for p in (self.doc or {}).get("partitions", []):
            name = f"{p['topic']}-{p['partition']}"
            rows.append({"partition": name, "offsets": p["offsets"],
                         "log_start_offset": p["log_start_offset"],
                         "segments": len(p["segments"]), "size": p["size"],
                         "batches": p["batches"], "records": self._records.get(name, 0),
                         "leader_epochs": len(p["leader_epochs"] or []),
                         "damage": len(p["damage"])})
        return rows
