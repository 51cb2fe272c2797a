"""The I/O side of the reports: reads captures and log dirs with kproto's own readers and
feeds the sans-I/O aggregations (:mod:`kproto.report.capture`, :mod:`kproto.report.logdir`)."""
from __future__ import annotations

import os
from typing import Any, Iterable, Optional

from kproto.problems import Problems
from kproto.report.capture import CaptureReport
from kproto.report.logdir import LogdirReport

__all__ = ["read_capture", "read_logdir", "write_page"]


def read_capture(paths: Iterable[str | os.PathLike], ports: Optional[Iterable[int]] = None
                 ) -> CaptureReport:
    """A report of the exchanges of capture files (each decoded on its own)."""
    from kproto.capture.api import iter_exchanges

    report = CaptureReport()
    for path in paths:
        report.update(iter_exchanges(path, ports))
    return report


def read_logdir(path_or_doc: str | dict[str, Any]) -> LogdirReport:
    """A report of a log dir or partition folder, or of its
    :func:`kproto.storage.summary.summarize` document (the partitions are read again, batch
    headers only)."""
    from kproto.storage.partition import Partition
    from kproto.storage.summary import summarize

    doc = summarize(os.fspath(path_or_doc)) if not isinstance(path_or_doc, dict) else path_or_doc
    report = LogdirReport()
    report.add_summary(doc)
    for p in doc["partitions"]:
        # damage is already in the summary: what cannot be read is skipped quietly here
        batches = Partition.open(p["path"]).batches(problems=Problems())
        report.update(p["topic"], p["partition"], (b for _, b in batches))
    return report


def write_page(page: str, path: str | os.PathLike) -> None:
    """Write a rendered page (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
