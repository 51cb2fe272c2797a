"""kproto.problems: the one record of what a reader stepped over and the one collector every
reader reports into (issue 13)."""
from __future__ import annotations

import pickle

import kproto
from kproto.problems import Problem, Problems


def test_report_fills_the_collectors_context():
    found = Problems(source="a.log", topic="orders", partition=2)
    p = found.report("crc", "CRC mismatch", position=61, bytes_skipped=70)
    assert p == Problem("crc", "CRC mismatch", source="a.log", position=61, bytes_skipped=70,
                        topic="orders", partition=2)
    # what the call says wins over the context
    q = found.report("index", "bad", source="a.index", partition=3)
    assert (q.source, q.topic, q.partition) == ("a.index", "orders", 3)
    assert list(found) == [p, q] and len(found) == 2 and found[1] is q and found[-1] is q


def test_a_scope_reports_into_its_parent_with_more_context():
    found = Problems()
    part = found.scope(topic="events", partition=1)
    seg = part.scope(source="events-1/00000000000000000000.log")
    seg.report("torn-tail", "partial batch: 9 bytes", position=100, bytes_skipped=9)
    part.report("file", "index files without a .log", source="events-1/1.index")
    found.report("file", "meta.properties: bad", source="meta.properties")
    assert [(p.kind, p.source, p.topic, p.partition) for p in found] == [
        ("torn-tail", "events-1/00000000000000000000.log", "events", 1),
        ("file", "events-1/1.index", "events", 1),
        ("file", "meta.properties", None, None)]
    assert len(part) == len(seg) == len(found) == 3  # one collection


def test_add_completes_what_a_record_leaves_unknown():
    found = Problems(topic="t", partition=0)
    known = Problem("crc", "x", source="f.log", topic="u", partition=5)
    unknown = Problem("crc", "y", source="g.log")
    assert found.add(known) is known  # nothing to fill: the very record
    assert found.add(unknown) == Problem("crc", "y", source="g.log", topic="t", partition=0)
    other = Problems()
    other.extend(found)
    assert list(other) == list(found)
    assert Problems(found).reasons() == ["x", "y"]


def test_notes_are_the_same_record_flagged_informational():
    notes = Problems(note=True)
    n = notes.report("unread", "4 bytes after the end of the body", bytes_skipped=4)
    assert n.note and n.kind == "unread" and not Problem("unread", "z").note
    assert notes.add(Problem("version", "newer")).note


def test_empty_collector_is_false_and_take_empties_it():
    found = Problems()
    assert not found and found.reasons() == [] and found.to_json() == []
    found.report("gap", "5 bytes missing", bytes_skipped=5)
    assert found
    assert [p.reason for p in found.take()] == ["5 bytes missing"] and not found


def test_json_form_of_logdir_damage():
    p = Problem("torn-tail", "partial batch: 12 bytes", source="/d/events-1/0.log",
                position=4096, bytes_skipped=12, topic="events", partition=1, index=3)
    assert p.to_json() == {"file": "/d/events-1/0.log", "position": 4096, "kind": "torn-tail",
                           "reason": "partial batch: 12 bytes", "bytes_skipped": 12}
    assert Problems([p]).to_json() == [p.to_json()]
    assert str(p) == "torn-tail: /d/events-1/0.log at 4096: partial batch: 12 bytes (12 bytes skipped)"


def test_records_travel_pickled_and_the_names_are_at_the_top():
    p = Problem("corrupt", "bad magic", source="x.log", position=7, topic="t", partition=0,
                index=1, fatal=True)
    assert pickle.loads(pickle.dumps(p)) == p  # Spark ships planning damage to a task
    assert kproto.Problem is Problem and kproto.Problems is Problems
