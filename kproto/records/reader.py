"""Iterate the batches of a buffer of concatenated batches (a ``.log`` segment, a Fetch
response's records), any magic, over bytes/memoryview/mmap without copying.

Framing follows Kafka's ``ByteBufferLogInputStream``: fewer than 12 bytes left, or a batch
that does not fit, ends the iteration as a torn tail (``trailing_bytes``); a size below the
minimum or an unknown magic is corruption that stops it (``stopped_by``). With
``verify_crc=True`` a batch whose checksum fails is reported and skipped. Damage is reported
into a :class:`~kproto.problems.Problems` collector (kinds ``corrupt``, fatal, and ``crc``).
"""
from __future__ import annotations

import mmap
import struct
from typing import TYPE_CHECKING, Iterable, Iterator, Union

from kproto.records.compression import DEFAULT_MAX_SIZE, DecompressionBudget
from kproto.errors import DecodeError
from kproto.records.batch import MAX_CODEC, RecordBatch, header_problem
from kproto.records.record import LOG_OVERHEAD
from kproto.records.legacy import LegacyMessage
from kproto.problems import Problems

if TYPE_CHECKING:  # numpy, which columns needs, is imported on first bulk decode
    from kproto.records.columns import RecordColumns

__all__ = ["Batch", "BatchReader", "iter_batches", "decode_columns",
           "iter_column_batches"]

Batch = Union[RecordBatch, LegacyMessage]
_SIZE = struct.Struct(">i")  # the batch length field, at +8
MIN_RECORD_SIZE = 14  # LegacyRecord.RECORD_OVERHEAD_V0, Kafka's first sanity bound


class BatchReader:
    """Iterator of the batches in ``buf[start:end]``; after (or during) iteration,
    ``valid_bytes``, ``trailing_bytes``, ``stopped_by``, ``skipped`` (batches reported and
    stepped over) and ``problems`` describe the scan.

    ``problems``: where damage is reported (a :class:`~kproto.problems.Problem` with the
    position, ``index``: the batch's number, and ``fatal`` when it stopped the iteration); when
    None, damage raises :class:`~kproto.errors.DecodeError` instead. ``budget``: what the
    batches may decompress in all (default: a fresh
    :class:`~kproto.records.compression.DecompressionBudget`).
    """

    def __init__(self, buf: bytes | bytearray | memoryview | mmap.mmap, start: int = 0,
                 end: int | None = None, *, verify_crc: bool = False,
                 max_decompressed: int = DEFAULT_MAX_SIZE,
                 problems: Problems | None = None,
                 budget: DecompressionBudget | None = None) -> None:
        self.buffer = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        # one budget for everything this read decompresses (see DecompressionBudget)
        self.budget = budget if budget is not None else DecompressionBudget()
        self.start = start
        self.end = len(self.buffer) if end is None else min(end, len(self.buffer))
        self.verify_crc = verify_crc
        self.max_decompressed = max_decompressed
        self.problems = problems
        self.position = start
        self.count = 0
        self.skipped = 0  # batches reported and not yielded (the iteration went on)
        self.stopped_by: str | None = None

    @property
    def valid_bytes(self) -> int:
        """Bytes covered by complete batches so far."""
        return self.position - self.start

    @property
    def trailing_bytes(self) -> int:
        return self.end - self.position

    def _report(self, kind: str, reason: str, fatal: bool,
                exc: DecodeError | None = None, bytes_skipped: int = 0) -> None:
        if self.problems is None:
            if exc is not None:
                raise exc
            raise DecodeError(reason, what="log", offset=self.position)
        self.problems.report(kind, reason, position=self.position, index=self.count, fatal=fatal,
                             bytes_skipped=bytes_skipped)

    def __iter__(self) -> Iterator[Batch]:
        buf, end = self.buffer, self.end
        while self.stopped_by is None and end - self.position >= LOG_OVERHEAD:
            pos = self.position
            size = _SIZE.unpack_from(buf, pos + 8)[0]
            if size < MIN_RECORD_SIZE:
                self.stopped_by = f"batch size {size} is below the minimum {MIN_RECORD_SIZE}"
                self._report("corrupt", self.stopped_by, True)
                return
            if LOG_OVERHEAD + size > end - pos:
                return  # torn tail: a partial batch, as at the end of an active segment
            magic = buf[pos + 16]
            bad = None
            try:
                if magic == 2:
                    v2 = RecordBatch(buf[:end], pos, max_decompressed=self.max_decompressed,
                                     budget=self.budget)
                    # what Kafka refuses in a framed batch is damage here, once for every
                    # reader: never a batch skipped unseen (as a control batch) or misread
                    if v2.attributes & 7 > MAX_CODEC or not v2.count:  # header_problem's
                        bad = header_problem(v2.attributes, v2.count, v2.size_in_bytes)
                    batch: Batch = v2
                elif magic in (0, 1):
                    batch = LegacyMessage(buf[:end], pos, max_decompressed=self.max_decompressed,
                                          budget=self.budget)
                else:
                    raise DecodeError(f"unknown magic {magic if magic < 128 else magic - 256}",
                                      what="log", offset=pos + 16)
            except DecodeError as e:
                self.stopped_by = e.reason
                self._report("corrupt", e.reason, True, e)
                return
            index = self.count
            if bad is not None:
                self._report("corrupt", bad, False, bytes_skipped=batch.size_in_bytes)
                self.position, self.count = pos + batch.size_in_bytes, index + 1
                self.skipped += 1
                continue
            self.position = pos + batch.size_in_bytes
            self.count += 1
            if self.verify_crc and not batch.is_valid():
                self.position, self.count = pos, index  # report at the batch's own place
                self._report("crc", f"CRC mismatch: stored {batch.crc}, computed "
                             f"{batch.compute_crc()}", False)
                self.position, self.count = pos + batch.size_in_bytes, index + 1
                self.skipped += 1
                continue
            yield batch


def iter_batches(buf: bytes | bytearray | memoryview | mmap.mmap, start: int = 0,
                 end: int | None = None, *, verify_crc: bool = False,
                 max_decompressed: int = DEFAULT_MAX_SIZE,
                 problems: Problems | None = None,
                 budget: DecompressionBudget | None = None) -> Iterator[Batch]:
    """Yield each batch (:class:`RecordBatch` or :class:`LegacyMessage`) of ``buf[start:end]``
    in order; ``batch.position`` is its byte position in ``buf``. See :class:`BatchReader`."""
    return iter(BatchReader(buf, start, end, verify_crc=verify_crc,
                            max_decompressed=max_decompressed, problems=problems,
                            budget=budget))


def decode_columns(buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None,
                   *, verify_crc: bool = False, max_decompressed: int = DEFAULT_MAX_SIZE,
                   budget: DecompressionBudget | None = None) -> RecordColumns:
    """Decode every record of the whole batches in ``buf[start:end]`` into columns. A torn
    tail is ignored; damage raises :class:`~kproto.errors.DecodeError`. ``budget`` as for
    :class:`BatchReader` (a fresh default one)."""
    from kproto.records.columns import decode_batches
    return decode_batches(list(iter_batches(buf, start, end, verify_crc=verify_crc,
                                            max_decompressed=max_decompressed, budget=budget)))


def iter_column_batches(buf, start: int = 0, end: int | None = None, *,
                        batches_per_chunk: int = 64, **kw) -> Iterable[RecordColumns]:
    """Decode a long range in chunks of ``batches_per_chunk`` batches: bounded memory, and
    about twice the throughput of one huge :func:`decode_columns` (the working set stays in
    cache). ``kw`` as for :func:`iter_batches`."""
    from kproto.records.columns import decode_batches
    chunk: list = []
    for b in iter_batches(buf, start, end, **kw):
        chunk.append(b)
        if len(chunk) >= batches_per_chunk:
            yield decode_batches(chunk)
            chunk = []
    if chunk:
        yield decode_batches(chunk)
