"""A history checker in the style of Jepsen's, for Kafka produce/consume histories.

Test code records what its clients did in a :class:`History` (sends as invoke/completion pairs,
the consumer group's deliveries, and each in-sync replica's log after the run); :func:`check`
then judges the history and returns a :class:`CheckResult` whose :meth:`~CheckResult.summary`
the test prints::

    history = History()
    op = history.invoke_send("p1", b"k", b"p1-0")
    history.ok_send(op, partition=0, offset=0)          # from the delivery callback
    history.read("c1", 0, 0, b"k", b"p1-0")             # from the group's consumers
    history.replica_log("broker-1", 0, [(0, b"p1-0")])  # from the broker's data dir
    result = check(history)
    print(result.summary())
    assert result.valid

Values identify sends: every send carries a value no other send has (the test encodes the
producer's name and a sequence number). A producer's send order is the order of its
:meth:`History.invoke_send` calls. Values are compared as bytes; a str is taken as its UTF-8
encoding. Partitions and nodes are any hashable names (``0``, ``("orders", 0)``, ``"broker-1"``).
Replica logs hold data records only (the test leaves out transaction markers).

Transactions: :meth:`History.end_txn` names the sends of one transaction and how it ended. The
replica logs and the group's reads are then read_committed views (records of aborted
transactions left out): a committed transaction's sends must all be there, an aborted one's
none, and one whose outcome the producer could not learn all or none.

Pure Python and sans-I/O: nothing here talks to a broker.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Optional, Union

__all__ = ["History", "Finding", "CheckResult", "check", "ERROR_KINDS", "WARNING_KINDS"]

Value = Union[bytes, str]

#: Finding kinds that make a history invalid.
ERROR_KINDS = (
    "lost",                 # an acknowledged send absent from the partition's log
    "offset-mismatch",      # an acknowledged send found elsewhere than where it was acknowledged
    "duplicate",            # a value at more than one place in the logs
    "reorder",              # one producer's acknowledged sends in a partition out of send order
    "gap",                  # an acknowledged send absent while a later one of its producer is present
    "unexpected",           # a value in a log that no producer sent
    "replica-divergence",   # two in-sync replicas hold different records at one offset
    "replica-incomplete",   # an in-sync replica lacks acknowledged records (or no log was recorded)
    "duplicate-read",       # the group read a value more than once
    "read-not-in-log",      # the group read a value that no log holds
    "read-offset-mismatch", # the group read a value at another place than the log holds it
    "unread",               # a committed record the group never read
    "aborted-visible",      # a send of an aborted transaction in a log or read by the group
    "torn-transaction",     # a transaction of unknown outcome partly present
)
#: Finding kinds that are reported but leave the history valid.
WARNING_KINDS = (
    "failed-but-written",   # a send that completed with an error is in the log anyway
)

_SEVERITY = {**{kind: "error" for kind in ERROR_KINDS},
             **{kind: "warning" for kind in WARNING_KINDS}}
_KIND_ORDER = {kind: i for i, kind in enumerate(ERROR_KINDS + WARNING_KINDS)}

_INVOKED, _OK, _FAIL, _INFO, _ABORTED = "invoked", "ok", "fail", "info", "aborted"


def _as_bytes(value: Optional[Value]) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a value must be bytes or str, not {type(value).__name__}")


def _ordered(items: Iterable[Hashable]) -> list[Hashable]:
    """Names in their natural order when they have one, else by repr (mixed types)."""
    items = list(items)
    try:
        return sorted(items)  # type: ignore[type-var]
    except TypeError:
        return sorted(items, key=repr)


class _Send:
    __slots__ = ("producer", "seq", "key", "value", "status", "partition", "offset", "error",
                 "txn")

    def __init__(self, producer: Hashable, seq: int, key: Optional[bytes], value: bytes) -> None:
        self.producer = producer
        self.seq = seq
        self.key = key
        self.value = value
        self.status = _INVOKED
        self.partition: Hashable = None
        self.offset: Optional[int] = None
        self.error: object = None
        #: the index of its transaction in ``History._txns`` (None: not in one)
        self.txn: Optional[int] = None


class History:
    """The operations of one test run, appended from any thread.

    A send is invoked once and completed at most once: :meth:`ok_send` (acknowledged),
    :meth:`fail_send` (definitely not written) or :meth:`info_send` (indeterminate, e.g. timed
    out). A send never completed counts as indeterminate, as in Jepsen.
    """

    def __init__(self) -> None:
        # delivery callbacks of confluent-kafka and the Java client run on their own threads
        self._lock = threading.Lock()
        self._sends: list[_Send] = []
        self._send_by_value: dict[bytes, int] = {}
        self._next_seq: dict[Hashable, int] = defaultdict(int)
        self._reads: list[tuple[Hashable, Hashable, int, Optional[bytes], Optional[bytes]]] = []
        self._replica_logs: dict[Hashable, dict[Hashable, dict[int, Optional[bytes]]]] = \
            defaultdict(dict)
        #: each transaction's sends and outcome (True committed, False aborted, None unknown)
        self._txns: list[tuple[list[int], Optional[bool]]] = []

    def __len__(self) -> int:
        """Sends invoked plus reads recorded."""
        with self._lock:
            return len(self._sends) + len(self._reads)

    def invoke_send(self, producer: Hashable, key: Optional[Value], value: Value) -> int:
        """Record that ``producer`` is about to send ``value``; returns the op id to complete."""
        data = _as_bytes(value)
        if data is None:
            raise ValueError("a send needs a value that identifies it")
        key_bytes = _as_bytes(key)
        with self._lock:
            if data in self._send_by_value:
                raise ValueError(f"value {data!r} was already sent; every send needs its own")
            op = len(self._sends)
            seq = self._next_seq[producer]
            self._next_seq[producer] = seq + 1
            self._sends.append(_Send(producer, seq, key_bytes, data))
            self._send_by_value[data] = op
            return op

    def ok_send(self, op: int, partition: Hashable, offset: int) -> None:
        """The send ``op`` was acknowledged at ``offset`` of ``partition``."""
        self._complete(op, _OK, partition, offset, None)

    def fail_send(self, op: int, error: object) -> None:
        """The send ``op`` definitely was not written (e.g. a non-retriable error)."""
        self._complete(op, _FAIL, None, None, error)

    def info_send(self, op: int, error: object) -> None:
        """The send ``op`` may or may not have been written (e.g. a timeout)."""
        self._complete(op, _INFO, None, None, error)

    def _complete(self, op: int, status: str, partition: Hashable, offset: Optional[int],
                  error: object) -> None:
        with self._lock:
            if not 0 <= op < len(self._sends):
                raise ValueError(f"no send has op id {op}")
            send = self._sends[op]
            if send.status != _INVOKED:
                raise ValueError(f"send {op} was already completed ({send.status})")
            send.status, send.partition, send.offset, send.error = status, partition, offset, error

    def end_txn(self, ops: Iterable[int], committed: Optional[bool]) -> None:
        """The sends ``ops`` were one transaction, which ended committed (True), aborted
        (False) or with an outcome the producer could not learn (None). Its sends are
        completed as usual (an acknowledgement in an aborted transaction is no promise)."""
        ops = list(ops)
        with self._lock:
            for op in ops:
                if not 0 <= op < len(self._sends):
                    raise ValueError(f"no send has op id {op}")
                if self._sends[op].txn is not None:
                    raise ValueError(f"send {op} already ended in a transaction")
            for op in ops:
                self._sends[op].txn = len(self._txns)
            self._txns.append((ops, committed))

    def read(self, consumer: Hashable, partition: Hashable, offset: int,
             key: Optional[Value], value: Optional[Value]) -> None:
        """A member of the consumer group was delivered the record at ``offset``."""
        entry = (consumer, partition, offset, _as_bytes(key), _as_bytes(value))
        with self._lock:
            self._reads.append(entry)

    def replica_log(self, node: Hashable, partition: Hashable,
                    records: Iterable[tuple[int, Optional[Value]]]) -> None:
        """What ``node``'s log of ``partition`` holds after the run, as ``(offset, value)``
        pairs; a later call for the same node and partition replaces the earlier one."""
        log: dict[int, Optional[bytes]] = {}
        for offset, value in records:
            if offset in log:
                raise ValueError(f"offset {offset} appears twice in {node}'s log of {partition}")
            log[offset] = _as_bytes(value)
        with self._lock:
            self._replica_logs[partition][node] = dict(sorted(log.items()))


@dataclass(frozen=True)
class Finding:
    """One thing the checker found wrong; ``partition``/``offset``/``value`` locate it when
    they apply (for a send: where it was acknowledged, else where it was found)."""

    kind: str
    partition: Hashable
    offset: Optional[int]
    value: Optional[bytes]
    detail: str

    @property
    def severity(self) -> str:
        """``"error"`` (the history is invalid) or ``"warning"``."""
        return _SEVERITY[self.kind]

    def __str__(self) -> str:
        where = []
        if self.partition is not None:
            where.append(f"partition {self.partition}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.value is not None:
            where.append(f"value {_show(self.value)}")
        return f"{self.kind}: {', '.join(where)}: {self.detail}" if where else \
            f"{self.kind}: {self.detail}"


def _show(value: Optional[bytes]) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class CheckResult:
    """What :func:`check` found: the findings and the counts behind them."""

    findings: list[Finding] = field(default_factory=list)
    #: sends by how they completed (never completed counts as indeterminate)
    acknowledged: int = 0
    indeterminate: int = 0
    failed: int = 0
    #: acknowledged sends found exactly where they were acknowledged
    present: int = 0
    lost: int = 0
    misplaced: int = 0
    #: indeterminate sends found in a log, and not found
    recovered: int = 0
    lost_indeterminate: int = 0
    failed_written: int = 0
    #: the checked partitions and the records their logs hold
    partitions: int = 0
    log_records: int = 0
    duplicates: int = 0
    unexpected: int = 0
    #: the consumer group's reads
    reads: int = 0
    duplicate_reads: int = 0
    unread: int = 0
    #: transactions by outcome, and the sends of aborted ones found in a log or read
    committed_txns: int = 0
    aborted_txns: int = 0
    unknown_txns: int = 0
    aborted_visible: int = 0

    @property
    def valid(self) -> bool:
        """True iff no finding is an error."""
        return not any(f.severity == "error" for f in self.findings)

    def summary(self, limit: int = 10) -> str:
        """A readable report: verdict, counts, then up to ``limit`` findings of each kind."""
        errors = sum(1 for f in self.findings if f.severity == "error")
        warnings = len(self.findings) - errors
        lines = [
            f"valid: {'yes' if self.valid else 'no'} ({errors} errors, {warnings} warnings)",
            f"sends: {self.acknowledged + self.indeterminate + self.failed} invoked; "
            f"{self.acknowledged} acknowledged, {self.indeterminate} indeterminate, "
            f"{self.failed} failed",
            f"acknowledged: {self.present} present, {self.lost} lost, "
            f"{self.misplaced} at another offset",
            f"indeterminate: {self.recovered} present (recovered), "
            f"{self.lost_indeterminate} absent",
            f"failed: {self.failed_written} written anyway",
            f"logs: {self.partitions} partitions, {self.log_records} records; "
            f"{self.duplicates} duplicates, {self.unexpected} unexpected",
            f"reads: {self.reads} by the group; {self.duplicate_reads} duplicate, "
            f"{self.unread} unread",
        ]
        if self.committed_txns or self.aborted_txns or self.unknown_txns:
            lines.append(f"transactions: {self.committed_txns} committed, {self.aborted_txns} "
                         f"aborted, {self.unknown_txns} unknown; {self.aborted_visible} records "
                         f"of aborted ones visible")
        by_kind: dict[str, list[Finding]] = defaultdict(list)
        for finding in self.findings:
            by_kind[finding.kind].append(finding)
        if by_kind:
            lines.append("findings:")
        for kind in sorted(by_kind, key=_KIND_ORDER.__getitem__):
            found = by_kind[kind]
            lines.append(f"  {kind} ({_SEVERITY[kind]}): {len(found)}")
            lines.extend(f"    {f}" for f in found[:limit])
            if len(found) > limit:
                lines.append(f"    ... and {len(found) - limit} more")
        return "\n".join(lines)


def check(history: History, *, partitions: Optional[Iterable[Hashable]] = None,
          isr: Optional[dict[Hashable, set[Hashable]]] = None) -> CheckResult:
    """Judge ``history``: every acknowledged send present exactly once, in its producer's order,
    where it was acknowledged, on every in-sync replica; the group read each record once.

    ``partitions`` limits the check to those partitions (default: every partition the history
    names). ``isr`` names each partition's in-sync replicas (default: every node whose log of
    the partition was recorded); logs of other nodes are ignored.
    """
    with history._lock:
        return _Checker(history, partitions, isr).run()


class _Checker:
    def __init__(self, history: History, partitions: Optional[Iterable[Hashable]],
                 isr: Optional[dict[Hashable, set[Hashable]]]) -> None:
        self.history = history
        self.isr = isr or {}
        self.result = CheckResult()
        if partitions is None:
            named: set[Hashable] = set(history._replica_logs) | set(self.isr)
            named.update(s.partition for s in history._sends if s.status == _OK)
            named.update(r[1] for r in history._reads)
            partitions = named
        self.partitions = _ordered(set(partitions))
        # per partition: the reference log (the longest in-sync replica's) and the committed
        # end (the shortest in-sync replica's end, which is at most the high watermark)
        self.logs: dict[Hashable, dict[int, Optional[bytes]]] = {}
        self.committed_end: dict[Hashable, int] = {}
        # every place each value is found, in partition then offset order
        self.places: dict[Optional[bytes], list[tuple[Hashable, int]]] = defaultdict(list)

    def add(self, kind: str, partition: Hashable, offset: Optional[int],
            value: Optional[bytes], detail: str) -> None:
        self.result.findings.append(Finding(kind, partition, offset, value, detail))

    def run(self) -> CheckResult:
        acked_values = {s.value for s in self.history._sends if s.status == _OK}
        for partition in self.partitions:
            self.check_replicas(partition, acked_values)
        self.result.partitions = len(self.partitions)
        for partition in self.partitions:
            for offset, value in self.logs[partition].items():
                self.places[value].append((partition, offset))
        self.check_log_values()
        self.check_sends()
        self.check_producer_order()
        self.check_reads()
        self.check_txns()
        return self.result

    def status(self, send: _Send) -> str:
        """How a send completed, as its transaction's outcome has it: an aborted one's sends
        are judged by :meth:`check_txns`, an unknown one's are indeterminate."""
        if send.txn is None:
            return send.status
        outcome = self.history._txns[send.txn][1]
        return send.status if outcome else _ABORTED if outcome is False else _INFO

    def check_replicas(self, partition: Hashable, acked_values: set[bytes]) -> None:
        recorded = self.history._replica_logs.get(partition, {})
        nodes = _ordered(self.isr[partition] if partition in self.isr else recorded)
        logs = {}
        for node in nodes:
            if node in recorded:
                logs[node] = recorded[node]
            else:
                self.add("replica-incomplete", partition, None, None,
                         f"no log was recorded for in-sync replica {node}")
        if not logs:
            self.logs[partition], self.committed_end[partition] = {}, 0
            return
        ends = {node: _end(log) for node, log in logs.items()}
        reference_node = max(logs, key=ends.__getitem__)  # the first of the longest
        reference = logs[reference_node]
        self.logs[partition] = reference
        self.committed_end[partition] = min(ends.values())
        self.result.log_records += len(reference)
        for node, log in logs.items():
            if node == reference_node:
                continue
            self.compare_replicas(partition, reference_node, reference, node, log)
            missing = [o for o in reference if o >= ends[node] and reference[o] in acked_values]
            if missing:
                self.add("replica-incomplete", partition, missing[0], reference[missing[0]],
                         f"in-sync replica {node}'s log ends at offset {ends[node]}, without "
                         f"{len(missing)} acknowledged records that {reference_node} holds")

    def compare_replicas(self, partition: Hashable, ref_node: Hashable,
                         ref: dict[int, Optional[bytes]], node: Hashable,
                         log: dict[int, Optional[bytes]]) -> None:
        # compare where both hold records: a higher log start is retention, a lower end is lag
        low = max(_start(ref), _start(log))
        high = min(_end(ref), _end(log))
        differing = sorted(o for o in set(ref) | set(log)
                           if low <= o < high and (o not in ref or o not in log or
                                                   ref[o] != log[o]))
        if differing:
            first = differing[0]
            self.add("replica-divergence", partition, first, ref.get(first),
                     f"in-sync replicas {ref_node} and {node} differ at {len(differing)} offsets "
                     f"below {high}; at {first}: {_held(ref, first)} vs {_held(log, first)}")

    def check_log_values(self) -> None:
        sends, by_value = self.history._sends, self.history._send_by_value
        for value, places in self.places.items():
            if len(places) > 1:
                op = by_value.get(value) if value is not None else None
                send = sends[op] if op is not None else None
                kept = (send.partition, send.offset) if send and send.status == _OK else None
                if kept not in places:
                    kept = places[0]
                extra = [p for p in places if p != kept]
                self.result.duplicates += len(extra)
                for partition, offset in extra:
                    self.add("duplicate", partition, offset, value,
                             f"held {len(places)} times; also at partition {kept[0]} "
                             f"offset {kept[1]}")
            if value is None or value not in by_value:
                self.result.unexpected += len(places)
                for partition, offset in places:
                    self.add("unexpected", partition, offset, value, "no producer sent it")

    def check_sends(self) -> None:
        r, checked = self.result, set(self.partitions)
        for send in self.history._sends:
            places = self.places.get(send.value, ())
            status = self.status(send)
            if status == _ABORTED:
                continue  # judged by check_txns
            if status == _OK:
                if send.partition not in checked:
                    continue
                r.acknowledged += 1
                where = (send.partition, send.offset)
                if where in places:
                    r.present += 1
                elif not places:
                    r.lost += 1
                    self.add("lost", send.partition, send.offset, send.value,
                             f"acknowledged to {send.producer}, absent from the log")
                else:
                    r.misplaced += 1
                    found = ", ".join(f"partition {p} offset {o}" for p, o in places)
                    self.add("offset-mismatch", send.partition, send.offset, send.value,
                             f"acknowledged to {send.producer} here, found at {found}")
            elif status == _FAIL:
                r.failed += 1
                if places:
                    r.failed_written += 1
                    partition, offset = places[0]
                    self.add("failed-but-written", partition, offset, send.value,
                             f"{send.producer}'s send failed ({send.error!r}) but is in the log")
            else:
                r.indeterminate += 1
                if places:
                    r.recovered += 1
                else:
                    r.lost_indeterminate += 1

    def check_producer_order(self) -> None:
        # per (producer, partition), in send order: where each send's value is in that partition
        found: dict[tuple[Hashable, Hashable], list[tuple[_Send, Optional[int]]]] = \
            defaultdict(list)
        checked = set(self.partitions)
        for send in self.history._sends:
            places = self.places.get(send.value, ())
            status = self.status(send)
            if status == _ABORTED:
                continue
            if status == _OK and send.partition in checked:
                offset = next((o for p, o in places if p == send.partition), None)
                found[send.producer, send.partition].append((send, offset))
            elif status != _FAIL:
                # an indeterminate send in the log still proves later sends got through
                for partition, offset in places[:1]:
                    found[send.producer, partition].append((send, offset))
        for (producer, partition), sends in found.items():
            last_present = max((s.seq for s, o in sends if o is not None), default=-1)
            before: Optional[tuple[_Send, int]] = None
            for send, offset in sends:
                if self.status(send) != _OK:
                    continue
                if offset is None:
                    if send.seq < last_present:
                        self.add("gap", partition, send.offset, send.value,
                                 f"{producer}'s send #{send.seq} is absent while its later "
                                 f"send #{last_present} is in the partition")
                    continue
                if before is not None and offset < before[1]:
                    self.add("reorder", partition, offset, send.value,
                             f"{producer}'s send #{send.seq} is at offset {offset}, before its "
                             f"earlier send #{before[0].seq} at offset {before[1]}")
                if before is None or offset > before[1]:
                    before = (send, offset)

    def check_reads(self) -> None:
        r, checked = self.result, set(self.partitions)
        read_by_value: dict[Optional[bytes], list[tuple[Hashable, Hashable, int]]] = \
            defaultdict(list)
        read_partitions = set()
        for consumer, partition, offset, _key, value in self.history._reads:
            if partition not in checked:
                continue
            r.reads += 1
            read_partitions.add(partition)
            read_by_value[value].append((consumer, partition, offset))
            log = self.logs[partition]
            if offset in log and log[offset] == value:
                continue
            places = self.places.get(value)
            if places:
                found = ", ".join(f"partition {p} offset {o}" for p, o in places)
                self.add("read-offset-mismatch", partition, offset, value,
                         f"{consumer} read it here; the log holds it at {found}")
            else:
                self.add("read-not-in-log", partition, offset, value,
                         f"{consumer} read a value no log holds")
        for value, reads in read_by_value.items():
            if len(reads) > 1:
                r.duplicate_reads += len(reads) - 1
                by = "; ".join(f"{c} at partition {p} offset {o}" for c, p, o in reads)
                for _consumer, partition, offset in reads[1:]:
                    self.add("duplicate-read", partition, offset, value,
                             f"read {len(reads)} times: {by}")
        for partition in self.partitions:
            if partition not in read_partitions:
                continue
            end = self.committed_end[partition]
            for offset, value in self.logs[partition].items():
                if offset < end and value not in read_by_value:
                    r.unread += 1
                    self.add("unread", partition, offset, value,
                             "committed, never read by the group")


    def check_txns(self) -> None:
        r, sends = self.result, self.history._sends
        read_values: dict[Optional[bytes], tuple[Hashable, Hashable, int]] = {}
        for consumer, partition, offset, _key, value in self.history._reads:
            read_values.setdefault(value, (consumer, partition, offset))
        for ops, committed in self.history._txns:
            if committed:
                r.committed_txns += 1
                continue
            if committed is None:
                r.unknown_txns += 1
                found = [op for op in ops if self.places.get(sends[op].value)]
                if found and len(found) < len(ops):
                    first = sends[found[0]]
                    partition, offset = self.places[first.value][0]
                    self.add("torn-transaction", partition, offset, first.value,
                             f"{len(found)} of the {len(ops)} sends of {first.producer}'s "
                             f"transaction of unknown outcome are present")
                continue
            r.aborted_txns += 1
            for op in ops:
                send = sends[op]
                places = self.places.get(send.value, ())
                for partition, offset in places:
                    self.add("aborted-visible", partition, offset, send.value,
                             f"{send.producer}'s transaction aborted, yet the log holds it")
                read = read_values.get(send.value)
                if read is not None and read[1:] not in places:
                    self.add("aborted-visible", read[1], read[2], send.value,
                             f"{send.producer}'s transaction aborted, yet {read[0]} read it")
                if places or read is not None:
                    r.aborted_visible += 1


def _start(log: dict[int, Optional[bytes]]) -> int:
    return next(iter(log), 0)


def _end(log: dict[int, Optional[bytes]]) -> int:
    return next(reversed(log), -1) + 1


def _held(log: dict[int, Optional[bytes]], offset: int) -> str:
    return _show(log[offset]) if offset in log else "nothing"
