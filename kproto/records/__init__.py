"""Record batches: magic v2 ``RecordBatch`` and legacy magic 0/1 message sets, read lazily
over bytes/memoryview/mmap, decoded per record or in bulk into columns, and built for
producers.

* :func:`iter_batches` / :class:`BatchReader`: the batches of a buffer, with damage reported
  into a :class:`~kproto.problems.Problems` collector.
* :class:`RecordBatch` (v2) and :class:`LegacyMessage` (magic 0/1): header fields without
  decompressing; ``.records()`` iterates :class:`Record` objects; ``.columns()`` decodes in bulk.
* :func:`decode_columns`: every record of a byte range as numpy columns, ready for Arrow
  (see :mod:`kproto.records.columns`); :func:`to_arrow` makes a ``pyarrow.RecordBatch``.
* :class:`RecordBatchBuilder` / :class:`LegacyMessageBuilder`: write batches as Kafka does.
* :func:`decode_control`: control records (transaction markers, KRaft records).
"""
from typing import TYPE_CHECKING

from kproto.records.batch import RecordBatch
from kproto.records.builder import LegacyMessageBuilder, RecordBatchBuilder
from kproto.records.control import ControlRecord, decode_control
from kproto.records.legacy import LegacyMessage, LegacyRecord
from kproto.records.reader import (Batch, BatchReader, decode_columns, iter_batches,
                                   iter_column_batches)
from kproto.records.record import Header, Record

if TYPE_CHECKING:
    from kproto.records.columns import BatchColumns, RecordColumns, decode_batches, to_arrow

__all__ = [
    "Batch", "BatchColumns", "BatchReader", "ControlRecord", "Header",
    "LegacyMessage", "LegacyMessageBuilder", "LegacyRecord", "Record", "RecordBatch",
    "RecordBatchBuilder", "RecordColumns", "decode_batches", "decode_columns", "decode_control",
    "iter_batches", "iter_column_batches", "to_arrow",
]

_COLUMNS = {"BatchColumns", "RecordColumns", "decode_batches", "to_arrow"}


def __getattr__(name: str):
    # the bulk columnar decoder needs numpy: imported when first asked for, so that building
    # and framing batches (a producer) does not load it
    if name in _COLUMNS:
        from kproto.records import columns
        return getattr(columns, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
