"""kproto.testing.history_checker: each finding kind caught on a synthetic history, a clean history
valid, History safe under concurrent appends, and a property over random histories."""
from __future__ import annotations

import itertools
import sys
import threading

import pytest
from hypothesis import given, settings, strategies as st

from kproto.testing.history_checker import ERROR_KINDS, WARNING_KINDS, CheckResult, History, check

NODES = ("b1", "b2", "b3")


def clean(sends: int = 12, partitions: int = 2, producers: int = 2, *, reads: bool = True):
    """A valid history: producers take turns, each send acknowledged at the next offset of
    partition ``i % partitions``; returns (history, {partition: [(offset, value)]})."""
    history = History()
    logs: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    for i in range(sends):
        producer = f"p{i % producers}"
        value = f"{producer}-{i}".encode()
        op = history.invoke_send(producer, b"k", value)
        partition = i % partitions
        offset = len(logs[partition])
        logs[partition].append((offset, value))
        history.ok_send(op, partition, offset)
        if reads:
            history.read(f"c{partition}", partition, offset, b"k", value)
    return history, logs


def record_logs(history: History, logs, nodes=NODES) -> None:
    for partition, records in logs.items():
        for node in nodes:
            history.replica_log(node, partition, records)


def kinds(result: CheckResult) -> set[str]:
    return {f.kind for f in result.findings}


def only(result: CheckResult, kind: str):
    found = [f for f in result.findings if f.kind == kind]
    assert len(found) == 1, result.summary()
    return found[0]


def test_clean_history_is_valid():
    history, logs = clean()
    record_logs(history, logs)
    result = check(history)
    print(result.summary())
    assert result.valid and result.findings == []
    assert (result.acknowledged, result.present, result.lost) == (12, 12, 0)
    assert (result.partitions, result.log_records, result.reads, result.unread) == (2, 12, 12, 0)
    assert result.summary().splitlines()[0] == "valid: yes (0 errors, 0 warnings)"


def test_every_kind_has_one_severity():
    assert not set(ERROR_KINDS) & set(WARNING_KINDS)


def test_lost_acknowledged_send():
    history, logs = clean(reads=False)
    lost_offset, lost_value = logs[1].pop()  # the last send: no later send of p1 to leave a gap
    record_logs(history, logs)
    result = check(history)
    print(result.summary())
    assert not result.valid and kinds(result) == {"lost"}
    finding = only(result, "lost")
    assert (finding.partition, finding.offset, finding.value) == (1, lost_offset, lost_value)
    assert finding.severity == "error"
    assert (result.lost, result.present) == (1, 11)


def test_gap_when_a_later_send_of_the_producer_is_present():
    history, logs = clean(reads=False)
    del logs[0][1]  # p0's second send to partition 0 (p0 sends every even i to partition 0)
    record_logs(history, logs)
    result = check(history)
    assert kinds(result) == {"lost", "gap"}
    gap = only(result, "gap")
    assert (gap.partition, gap.offset, gap.value) == (0, 1, b"p0-2")


def test_replica_divergence_gives_first_differing_offset():
    history, logs = clean(reads=False)
    history.replica_log("b1", 0, logs[0])
    history.replica_log("b2", 0, logs[0][:3] + [(3, b"other")] + logs[0][4:])
    history.replica_log("b1", 1, logs[1])
    result = check(history)
    finding = only(result, "replica-divergence")
    assert (finding.partition, finding.offset) == (0, 3)
    assert "b1" in finding.detail and "b2" in finding.detail
    assert "unexpected" not in kinds(result)  # the reference log is b1's


def test_lagging_replica_is_incomplete_not_divergent():
    history, logs = clean(reads=False)
    record_logs(history, logs)
    history.replica_log("b3", 0, logs[0][:4])
    result = check(history)
    assert kinds(result) == {"replica-incomplete"}
    finding = only(result, "replica-incomplete")
    assert (finding.partition, finding.offset) == (0, 4)
    assert "b3" in finding.detail


def test_lag_beyond_acknowledged_records_is_fine():
    history, logs = clean(reads=False)
    op = history.invoke_send("p0", None, b"late")
    history.info_send(op, TimeoutError("timed out"))
    history.replica_log("b1", 0, logs[0] + [(6, b"late")])
    history.replica_log("b2", 0, logs[0])
    history.replica_log("b1", 1, logs[1])
    result = check(history)
    assert result.valid, result.summary()
    assert result.recovered == 1


def test_isr_names_the_replicas_checked():
    history, logs = clean(reads=False)
    record_logs(history, logs, nodes=("b1", "b2"))
    history.replica_log("b3", 0, [])  # out of sync: ignored
    isr = {0: {"b1", "b2"}, 1: {"b1", "b2"}}
    assert check(history, isr=isr).valid
    assert "replica-incomplete" in kinds(check(history))
    missing = only(check(history, isr={0: {"b1", "b9"}, 1: {"b1"}}), "replica-incomplete")
    assert missing.partition == 0 and "b9" in missing.detail


def test_duplicate_in_log():
    history, logs = clean(reads=False)
    logs[0].append((6, logs[0][2][1]))
    record_logs(history, logs)
    result = check(history)
    assert kinds(result) == {"duplicate"}
    finding = only(result, "duplicate")
    assert (finding.partition, finding.offset, finding.value) == (0, 6, logs[0][2][1])
    assert result.duplicates == 1


def test_duplicate_across_partitions():
    history, logs = clean(reads=False)
    logs[1].append((6, logs[0][0][1]))
    record_logs(history, logs)
    finding = only(check(history), "duplicate")
    assert (finding.partition, finding.offset) == (1, 6)


def test_offset_mismatch():
    history = History()
    op = history.invoke_send("p0", None, "v0")
    history.ok_send(op, 0, 5)
    op = history.invoke_send("p0", None, "v1")
    history.ok_send(op, 1, 0)
    history.replica_log("b1", 0, [(6, "v0"), (7, "v1")])
    history.replica_log("b1", 1, [])
    result = check(history)
    assert kinds(result) == {"offset-mismatch"}
    found = sorted((f.partition, f.offset, f.value) for f in result.findings)
    assert found == [(0, 5, b"v0"), (1, 0, b"v1")]
    assert result.misplaced == 2 and result.present == 0


def test_reorder_of_one_producers_sends():
    history, logs = clean(reads=False)
    records = logs[0]
    records[1], records[2] = (1, records[2][1]), (2, records[1][1])  # p0-2 and p0-4
    record_logs(history, logs)
    result = check(history)
    assert kinds(result) == {"offset-mismatch", "reorder"}
    finding = only(result, "reorder")
    assert (finding.partition, finding.offset, finding.value) == (0, 1, b"p0-4")


def test_swap_between_producers_is_no_reorder():
    history, logs = clean(sends=8, partitions=1, reads=False)  # p0, p1 alternate
    records = logs[0]
    records[0], records[1] = (0, records[1][1]), (1, records[0][1])
    record_logs(history, logs)
    assert kinds(check(history)) == {"offset-mismatch"}


def test_unexpected_value():
    history, logs = clean(reads=False)
    logs[1].append((6, b"phantom"))
    record_logs(history, logs)
    result = check(history)
    finding = only(result, "unexpected")
    assert (finding.partition, finding.offset, finding.value) == (1, 6, b"phantom")
    assert kinds(result) == {"unexpected"} and result.unexpected == 1


def test_indeterminate_sends_are_fine_either_way():
    history, logs = clean(reads=False)
    written = history.invoke_send("p0", None, b"written")
    history.info_send(written, "timed out")
    gone = history.invoke_send("p0", None, b"gone")
    history.info_send(gone, "timed out")
    history.invoke_send("p1", None, b"never-completed")
    logs[0].append((6, b"written"))
    record_logs(history, logs)
    result = check(history)
    assert result.valid, result.summary()
    assert (result.indeterminate, result.recovered, result.lost_indeterminate) == (3, 1, 2)


def test_failed_but_written_is_a_warning():
    history, logs = clean(reads=False)
    op = history.invoke_send("p0", None, b"failed")
    history.fail_send(op, RuntimeError("not leader"))
    logs[0].append((6, b"failed"))
    record_logs(history, logs)
    result = check(history)
    finding = only(result, "failed-but-written")
    assert finding.severity == "warning" and "not leader" in finding.detail
    assert result.valid and result.failed_written == 1
    assert "(0 errors, 1 warnings)" in result.summary()


def test_failed_and_absent_is_fine():
    history, logs = clean(reads=False)
    op = history.invoke_send("p0", None, b"failed")
    history.fail_send(op, "bad")
    record_logs(history, logs)
    result = check(history)
    assert result.valid and result.findings == [] and result.failed == 1


def test_duplicate_read():
    history, logs = clean()
    history.read("c9", 0, 2, b"k", logs[0][2][1])
    record_logs(history, logs)
    result = check(history)
    finding = only(result, "duplicate-read")
    assert (finding.partition, finding.offset, finding.value) == (0, 2, logs[0][2][1])
    assert "c0" in finding.detail and "c9" in finding.detail
    assert kinds(result) == {"duplicate-read"} and result.duplicate_reads == 1


def test_read_not_in_log_and_at_wrong_offset():
    history, logs = clean()
    history.read("c0", 0, 9, None, b"nowhere")
    history.read("c1", 1, 9, None, logs[1][0][1])
    record_logs(history, logs)
    result = check(history)
    assert only(result, "read-not-in-log").value == b"nowhere"
    mismatch = only(result, "read-offset-mismatch")
    assert (mismatch.partition, mismatch.offset) == (1, 9)
    assert kinds(result) == {"read-not-in-log", "read-offset-mismatch", "duplicate-read"}


def test_unread_committed_records():
    history, logs = clean(reads=False)
    for offset, value in logs[0][:-1]:
        history.read("c0", 0, offset, None, value)
    record_logs(history, logs)
    # an uncommitted record (on the leader only) need not be read
    op = history.invoke_send("p0", None, b"uncommitted")
    history.info_send(op, "timed out")
    history.replica_log("b1", 0, logs[0] + [(6, b"uncommitted")])
    result = check(history)
    finding = only(result, "unread")  # partition 1 had no reads: not checked for unread
    assert (finding.partition, finding.offset, finding.value) == (0, 5, logs[0][5][1])
    assert result.unread == 1


def test_partitions_limit_the_check():
    history, logs = clean(reads=False)
    record_logs(history, {0: logs[0]})
    assert kinds(check(history)) == {"lost"}
    result = check(history, partitions=[0])
    assert result.valid and result.acknowledged == 6 and result.partitions == 1


def test_topic_partition_names_and_str_values():
    history = History()
    op = history.invoke_send("p", "k", "v0")
    history.ok_send(op, ("orders", 0), 0)
    history.read("c", ("orders", 0), 0, b"k", b"v0")
    history.replica_log(1, ("orders", 0), [(0, b"v0")])
    history.replica_log("b2", ("orders", 0), [(0, "v0")])  # mixed node names still order
    assert check(history).valid


def test_history_refuses_misuse():
    history = History()
    op = history.invoke_send("p", None, b"v")
    with pytest.raises(ValueError):
        history.invoke_send("q", None, "v")  # the same value as bytes
    with pytest.raises(ValueError):
        history.invoke_send("p", None, None)  # type: ignore[arg-type]
    history.ok_send(op, 0, 0)
    with pytest.raises(ValueError):
        history.info_send(op, "again")
    with pytest.raises(ValueError):
        history.fail_send(op + 1, "no such op")
    with pytest.raises(ValueError):
        history.replica_log("b1", 0, [(0, b"v"), (0, b"w")])
    with pytest.raises(TypeError):
        history.invoke_send("p", None, 5)  # type: ignore[arg-type]


def test_summary_lists_a_limited_number_of_findings():
    history, logs = clean(sends=40, partitions=1, reads=False)
    record_logs(history, {0: logs[0][:2]})
    result = check(history)
    text = result.summary(limit=3)
    print(text)
    assert text.splitlines()[0].startswith("valid: no (")
    assert "  lost (error): 38" in text
    assert "    ... and 35 more" in text
    assert "acknowledged: 2 present, 38 lost, 0 at another offset" in text


def transactions(outcomes, per_txn: int = 3, *, reads: bool = True):
    """Transactions of producer "t" over partitions 0 and 1, one per outcome (True committed,
    False aborted, None unknown), every send acknowledged; the read_committed logs and reads
    hold the committed ones'. Returns (history, logs, values of each transaction)."""
    history = History()
    logs: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
    # the raw offsets, as aborted records keep theirs in the log and a read_committed view skips them
    ends = {0: 0, 1: 0}
    txns = []
    for t, outcome in enumerate(outcomes):
        ops, values = [], []
        for i in range(per_txn):
            value = f"t{t}-{i}".encode()
            op = history.invoke_send("t", None, value)
            partition = i % 2
            history.ok_send(op, partition, ends[partition])
            if outcome:
                logs[partition].append((ends[partition], value))
                if reads:
                    history.read("c", partition, ends[partition], None, value)
            ends[partition] += 1
            ops.append(op)
            values.append(value)
        for partition in ends:
            ends[partition] += 1  # the marker
        history.end_txn(ops, outcome)
        txns.append(values)
    return history, logs, txns


def test_committed_and_aborted_transactions_are_valid():
    history, logs, _ = transactions([True, False, True, False])
    record_logs(history, logs)
    result = check(history)
    print(result.summary())
    assert result.valid and result.findings == []
    assert (result.committed_txns, result.aborted_txns, result.unknown_txns) == (2, 2, 0)
    # the aborted transactions' acknowledged sends are neither acknowledged nor lost
    assert (result.acknowledged, result.present, result.lost, result.aborted_visible) == (6, 6, 0, 0)
    assert "transactions: 2 committed, 2 aborted, 0 unknown; 0 records of aborted ones visible" \
        in result.summary()


def test_aborted_transaction_visible_in_the_log_and_to_the_group():
    history, logs, txns = transactions([True, False])
    leaked = txns[1][0]  # the aborted transaction's first send: partition 0, raw offset 2
    logs[0].append((2, leaked))
    history.read("c", 0, 2, None, leaked)
    record_logs(history, logs)
    result = check(history)
    print(result.summary())
    assert not result.valid and kinds(result) == {"aborted-visible"}
    finding = only(result, "aborted-visible")
    assert (finding.partition, finding.offset, finding.value) == (0, 2, leaked)
    assert result.aborted_visible == 1


def test_aborted_transaction_read_but_in_no_log():
    history, logs, txns = transactions([False])
    history.read("c", 1, 1, None, txns[0][1])
    record_logs(history, logs)
    result = check(history)
    assert kinds(result) == {"aborted-visible", "read-not-in-log"}, result.summary()
    assert "c read it" in only(result, "aborted-visible").detail


def test_committed_transaction_partly_missing_is_lost():
    history, logs, txns = transactions([True], per_txn=2, reads=False)
    logs[1] = []  # the send to partition 1 is lost
    record_logs(history, logs)
    result = check(history)
    assert kinds(result) == {"lost"} and result.lost == 1, result.summary()


def test_transaction_of_unknown_outcome_is_all_or_nothing():
    for present in (True, False):
        history, logs, txns = transactions([None])
        if present:
            logs = {0: [(0, txns[0][0]), (1, txns[0][2])], 1: [(0, txns[0][1])]}
        record_logs(history, logs)
        result = check(history)
        assert result.valid and result.findings == [], result.summary()
        assert result.unknown_txns == 1 and result.indeterminate == 3
        assert result.recovered == (3 if present else 0)
    history, _, txns = transactions([None])
    record_logs(history, {0: [(0, txns[0][0]), (1, txns[0][2])], 1: []})
    result = check(history)
    print(result.summary())
    assert kinds(result) == {"torn-transaction"}, result.summary()
    assert "2 of the 3 sends" in only(result, "torn-transaction").detail


def test_end_txn_refuses_misuse():
    history = History()
    op = history.invoke_send("p", None, b"v")
    history.end_txn([op], True)
    with pytest.raises(ValueError):
        history.end_txn([op], False)  # one transaction per send
    with pytest.raises(ValueError):
        history.end_txn([op + 1], True)  # no such send


def test_concurrent_appends():
    threads, per_thread = 8, 1500
    history = History()
    offsets = itertools.count()  # next() on it is atomic in CPython
    acks: list[tuple[int, bytes]] = []
    start = threading.Barrier(threads)

    def produce(name: str) -> None:
        start.wait()
        for i in range(per_thread):
            value = f"{name}-{i}".encode()
            op = history.invoke_send(name, None, value)
            offset = next(offsets)
            acks.append((offset, value))
            history.ok_send(op, 0, offset)
            history.read(name, 0, offset, None, value)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often to provoke races
    try:
        workers = [threading.Thread(target=produce, args=(f"p{n}",)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(old)
    # the log holds each producer's sends in its order only if offsets were taken in order,
    # which they were per thread
    history.replica_log("b1", 0, sorted(acks))
    result = check(history)
    assert len(history) == 2 * threads * per_thread
    assert result.valid, result.summary()
    assert result.acknowledged == result.present == result.reads == threads * per_thread


# a random valid history: sends of several producers interleaved, each to a random partition,
# acknowledged (or indeterminate and then either written or not) in send order
plans = st.lists(st.tuples(st.integers(0, 3),                         # producer
                           st.integers(0, 2),                         # partition
                           st.sampled_from(["ok", "ok", "ok", "info-written", "info-lost"])),
                 min_size=1, max_size=40)


def build(plan):
    history = History()
    logs: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(3)}
    owner: dict[bytes, tuple[str, str]] = {}
    seq: dict[int, int] = {}
    for producer, partition, outcome in plan:
        n = seq[producer] = seq.get(producer, -1) + 1
        value = f"p{producer}-{n}".encode()
        owner[value] = (f"p{producer}", outcome)
        op = history.invoke_send(f"p{producer}", None, value)
        offset = len(logs[partition])
        if outcome != "info-lost":
            logs[partition].append((offset, value))
        if outcome == "ok":
            history.ok_send(op, partition, offset)
        else:
            history.info_send(op, "timed out")
    return history, logs, owner


@settings(max_examples=150, deadline=None)
@given(plan=plans, replicas=st.integers(1, 3))
def test_random_valid_history_is_valid(plan, replicas):
    history, logs, _ = build(plan)
    record_logs(history, logs, NODES[:replicas])
    for partition, records in logs.items():
        for offset, value in records:
            history.read(f"c{partition}", partition, offset, None, value)
    result = check(history)
    assert result.valid, result.summary()
    assert result.present == result.acknowledged == sum(o == "ok" for _, _, o in plan)


@settings(max_examples=150, deadline=None)
@given(plan=plans, replicas=st.integers(1, 3), mutation=st.sampled_from(["remove", "duplicate",
                                                                          "swap"]),
       data=st.data())
def test_one_broken_record_makes_it_invalid(plan, replicas, mutation, data):
    history, logs, owner = build(plan)
    acked = [(p, i) for p, records in logs.items() for i, (_, v) in enumerate(records)
             if owner[v][1] == "ok"]
    if mutation == "swap":
        acked = [(p, i) for p, i in acked if len(logs[p]) > 1]
    if not acked:
        return  # nothing acknowledged to break in this plan
    partition, index = data.draw(st.sampled_from(acked))
    records = logs[partition]
    offset, value = records[index]
    if mutation == "remove":
        del records[index]
        expected = {"lost"}
    elif mutation == "duplicate":
        records.append((records[-1][0] + 1, value))
        expected = {"duplicate"}
    else:
        other = data.draw(st.sampled_from([i for i in range(len(records)) if i != index]))
        other_offset, other_value = records[other]
        records[index], records[other] = (offset, other_value), (other_offset, value)
        expected = {"offset-mismatch"}
        if owner[other_value] == (owner[value][0], "ok"):
            expected.add("reorder")  # two acknowledged sends of one producer swapped
    record_logs(history, logs, NODES[:replicas])
    result = check(history)
    assert not result.valid
    assert expected <= kinds(result), result.summary()
    assert any(f.value == value for f in result.findings if f.kind in expected)
