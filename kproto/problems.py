"""What a reader of untrusted bytes stepped over: one record, :class:`Problem`, and one
collector, :class:`Problems`, for every reader (record batches, segments and log directories,
captures).

A reader takes ``problems: Problems | None`` (or holds one: a segment, a partition, an exchange,
a capture decoder) and reports into it; the caller reads it afterwards::

    found = Problems()
    table = kproto.storage.read_arrow(path, problems=found)
    for p in found:
        print(p.kind, p.source, p.position, p.reason, p.bytes_skipped, p.topic, p.partition)

Inner code does not need to know where it reads: :meth:`Problems.scope` gives a child that
reports into the same collection with more context (a file, a topic and partition), filled into
every record that does not say otherwise.

Kinds. Storage: ``crc`` (checksum mismatch; the batch is still readable and is skipped only with
CRC verification), ``corrupt`` (unparseable bytes, skipped up to the next batch boundary the
offset index knows, or to the end; or a batch whose records do not decode, skipped),
``torn-tail`` (a partial last batch, as a crash leaves it; not data), ``index`` (an index file
that cannot be used; rebuilt by scanning), ``file`` (a metadata file that cannot be parsed),
``record`` (an internal-topic record that does not decode), ``gap`` (records the indexes know of
that the log no longer holds), ``limit`` (a batch not decompressed: the read's decompression
budget was spent). Capture: ``capture`` (the capture file itself is damaged), ``link`` (packets
of a link type not read), ``gap`` (bytes the capture lost), ``resync`` (bytes skipped that are no
Kafka frame), ``pairing`` (a response without its request, a request without its response, a
reused correlation id), ``decode`` (a header or body that cannot be decoded), ``unread`` (bytes a
decoded body leaves unexplained), ``session`` (a fetch session that does not add up), ``version``
(a version newer than the schemas, read best effort).

A *note* (``note=True``) is informational, not a problem: a capture's exchange keeps its notes
(``Exchange.notes``) apart from its problems, both :class:`Problems` of this one record type.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

__all__ = ["Problem", "Problems"]


@dataclass(frozen=True)
class Problem:
    """Something wrong that a reader reported and stepped over.

    ``kind``: what (see the module's list); ``reason``: why, in words. Where: ``source`` (a file
    path, or empty when the holder says where, as an exchange does), ``position`` (byte position
    in it), ``topic``/``partition`` when known, ``index`` (the batch's number in a buffer of
    batches, or the packet's number in a capture). ``bytes_skipped``: bytes not read because of
    it. ``fatal``: the read stopped there. ``note``: informational only.
    """

    kind: str
    reason: str
    source: str = ""
    position: int = 0
    bytes_skipped: int = 0
    topic: str | None = None
    partition: int | None = None
    index: int | None = None
    fatal: bool = False
    note: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON form of ``kproto logdir --format json`` (``damage`` and ``problems``)."""
        return {"file": self.source, "position": self.position, "kind": self.kind,
                "reason": self.reason, "bytes_skipped": self.bytes_skipped}

    def __str__(self) -> str:
        where = self.source or (f"{self.topic}-{self.partition}" if self.topic is not None else "")
        at = f"{where} at {self.position}" if where else f"at {self.position}"
        skipped = f" ({self.bytes_skipped} bytes skipped)" if self.bytes_skipped else ""
        return f"{self.kind}: {at}: {self.reason}{skipped}"


class Problems:
    """An ordered collection of :class:`Problem` records that readers report into.

    ``Problems(items, source=..., topic=..., partition=..., note=...)``: the records it starts
    with, and the context :meth:`report` and :meth:`add` fill into records that leave those
    fields unknown (empty source, no topic or partition, not a note). Iterable, sized, indexable;
    false when empty. :meth:`scope` makes a child collector with more context that reports into
    the same collection.
    """

    __slots__ = ("_items", "_context")

    def __init__(self, items: Iterable[Problem] = (), *, source: str | None = None,
                 topic: str | None = None, partition: int | None = None,
                 note: bool | None = None) -> None:
        self._items: list[Problem] = list(items)
        if source is None and topic is None and partition is None:  # (most collectors)
            self._context = _NONE if note is None else _NOTES if note else _NOT_NOTES
        else:
            self._context = _context(source, topic, partition, note)

    # -- reporting --------------------------------------------------------------------------------

    def report(self, kind: str, reason: str, *, position: int = 0, bytes_skipped: int = 0,
               index: int | None = None, fatal: bool = False, source: str | None = None,
               topic: str | None = None, partition: int | None = None,
               note: bool | None = None) -> Problem:
        """Record a problem (with this collector's context where an argument is not given)."""
        ctx = self._context
        problem = Problem(
            kind, reason,
            source if source is not None else ctx.get("source", ""),
            position, bytes_skipped,
            topic if topic is not None else ctx.get("topic"),
            partition if partition is not None else ctx.get("partition"),
            index, fatal,
            note if note is not None else ctx.get("note", False))
        self._items.append(problem)
        return problem

    def add(self, problem: Problem) -> Problem:
        """Record an existing problem, completed with this collector's context."""
        if self._context:
            problem = self._complete(problem)
        self._items.append(problem)
        return problem

    def extend(self, problems: Iterable[Problem]) -> None:
        """:meth:`add` each of ``problems``."""
        for p in problems:
            self.add(p)

    def scope(self, *, source: str | None = None, topic: str | None = None,
              partition: int | None = None, note: bool | None = None) -> Problems:
        """A child collector that reports into this one's collection, with this context and
        the given one (which wins)."""
        child = Problems.__new__(Problems)
        child._items = self._items
        child._context = {**self._context, **_context(source, topic, partition, note)}
        return child

    def take(self) -> list[Problem]:
        """The records so far, removed from the collection."""
        items = self._items[:]
        self._items.clear()
        return items

    def _complete(self, p: Problem) -> Problem:
        ctx = self._context
        changes: dict[str, Any] = {}
        if not p.source and "source" in ctx:
            changes["source"] = ctx["source"]
        if p.topic is None and "topic" in ctx:
            changes["topic"] = ctx["topic"]
        if p.partition is None and "partition" in ctx:
            changes["partition"] = ctx["partition"]
        if not p.note and ctx.get("note"):
            changes["note"] = True
        return replace(p, **changes) if changes else p

    # -- reading ----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Problem]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __getitem__(self, i: int) -> Problem:
        return self._items[i]

    def __repr__(self) -> str:
        return f"Problems({self._items!r})"

    def reasons(self) -> list[str]:
        """The ``reason`` of each record, in order (the form of capture's JSON output)."""
        return [p.reason for p in self._items]

    def to_json(self) -> list[dict[str, Any]]:
        """:meth:`Problem.to_json` of each record, in order."""
        return [p.to_json() for p in self._items]


_NONE: dict[str, Any] = {}  # no context (shared: a context is never changed in place)
_NOTES: dict[str, Any] = {"note": True}      # notes only (an exchange's notes), shared too
_NOT_NOTES: dict[str, Any] = {"note": False}


def _context(source: str | None, topic: str | None, partition: int | None,
             note: bool | None) -> dict[str, Any]:
    ctx: dict[str, Any] = {}
    if source is not None:
        ctx["source"] = source
    if topic is not None:
        ctx["topic"] = topic
    if partition is not None:
        ctx["partition"] = partition
    if note is not None:
        ctx["note"] = note
    return ctx
