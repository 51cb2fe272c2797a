"""Option parsing and filter translation of the ``kafka-segments`` source (no Spark session):
every pushed filter must select exactly the values Spark's own comparison would."""
from __future__ import annotations

import datetime as dt
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    IsNull, LessThan, LessThanOrEqual, StringContains,
                                    StringStartsWith)

from kproto.spark.scan import (AUTO_TASKS, MAX_SPLIT_BYTES, MIN_SPLIT_BYTES, ScanSpec, auto_split_bytes,
                               parse_options)
from kproto.storage.reader import ReadOptions, Split, balance

OPS = {EqualTo: operator.eq, GreaterThan: operator.gt, GreaterThanOrEqual: operator.ge,
       LessThan: operator.lt, LessThanOrEqual: operator.le}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def test_options_parsed():
    spec = parse_options({"path": "/x", "topics": "a, b", "partitions": "0,2",
                          "startingoffsets": "5", "endingoffsets": "latest",
                          "startingtimestamp": "1000", "endingtimestamp": "2000",
                          "isolation": "READ_COMMITTED", "includecontrol": "true",
                          "verifycrc": "1", "splitsize": "8m"})
    assert spec.paths == ("/x",)
    assert spec.topics == {"a", "b"} and spec.partitions == {0, 2}
    assert spec.read == ReadOptions(start_offset=5, end_offset=None, start_timestamp=1000,
                                    end_timestamp=2000, isolation="read_committed",
                                    include_control=True, verify_crc=True)
    assert spec.split_bytes == 8 << 20 and not spec.empty
    assert parse_options({"paths": '["/a", "/b"]'}).paths == ("/a", "/b")
    default = parse_options({"path": "/x"})
    assert default.read == ReadOptions() and default.split_bytes is None
    assert parse_options({"path": "/x", "startingoffsets": "7", "endingoffsets": "7"}).empty


@pytest.mark.parametrize("options, message", [
    ({}, "no path"),
    ({"path": "/x", "isolation": "dirty"}, "isolation"),
    ({"path": "/x", "startingOffset": "1"}, "unknown option"),
    ({"path": "/x", "partitions": "a"}, "partitions"),
    ({"path": "/x", "endingoffsets": "soon"}, "endingoffsets"),
    ({"path": "/x", "includecontrol": "maybe"}, "includecontrol"),
    ({"path": "/x", "splitsize": "12q"}, "splitSize"),
    ({"path": "/x", "splitsize": "0"}, "splitSize"),
])
def test_bad_options_rejected(options, message):
    with pytest.raises(ValueError, match=message):
        parse_options(options)


def _split(topic: str, partition: int) -> Split:
    return Split("/x/00000000000000000000.log", topic, partition, 0, 0, 100)


def test_topic_and_partition_filters_select_splits():
    base = ScanSpec(("/x",))
    fs = [EqualTo(("topic",), "orders"), In(("partition",), (0, 2, 5)), IsNotNull(("offset",)),
          GreaterThan(("partition",), 0)]
    spec, rest = base.push(fs)
    assert rest == []
    kept = [(t, p) for t in ("orders", "users") for p in range(6) if spec.keeps(_split(t, p))]
    assert kept == [("orders", 2), ("orders", 5)]
    spec, rest = base.push([StringStartsWith(("topic",), "__"), StringContains(("topic",), "x"),
                            IsNull(("key",))])
    assert [type(f) for f in rest] == [StringContains, IsNull]
    assert spec.keeps(_split("__consumer_offsets", 0)) and not spec.keeps(_split("orders", 0))
    spec, _ = base.push([EqualTo(("topic",), "a"), EqualTo(("topic",), "b")])
    assert spec.empty
    spec, rest = base.push([EqualTo(("partition",), "1"), EqualTo(("headers", "key"), "k")])
    assert len(rest) == 2 and spec == base  # wrong literal type, nested column: left to Spark


def test_offset_in_prunes_but_stays_with_spark():
    f = In(("offset",), (7, 3, 12))
    spec, rest = ScanSpec(("/x",)).push([f])
    assert rest == [f]
    assert (spec.read.start_offset, spec.read.end_offset) == (3, 13)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(OPS, key=lambda c: c.__name__)),
       st.integers(-10, 10), st.lists(st.integers(-12, 12), min_size=1, max_size=5))
def test_offset_bounds_are_exact(cls, v, offsets):
    spec, rest = ScanSpec(("/x",)).push([cls(("offset",), v)])
    assert rest == []
    lo = spec.read.start_offset if spec.read.start_offset is not None else -(1 << 62)
    hi = spec.read.end_offset if spec.read.end_offset is not None else 1 << 62
    for x in offsets:
        assert (lo <= x < hi and not spec.empty) == OPS[cls](x, v)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(OPS, key=lambda c: c.__name__)),
       st.integers(-5000, 5000), st.lists(st.integers(-6, 6), min_size=1, max_size=5),
       st.booleans())
def test_timestamp_bounds_are_exact(cls, micros, millis, naive):
    """Spark compares the column in µs against a µs literal; the scan bounds are in ms."""
    literal = EPOCH + dt.timedelta(microseconds=micros)
    if naive:
        literal = literal.replace(tzinfo=None)
    spec, rest = ScanSpec(("/x",)).push([cls(("timestamp",), literal)])
    assert rest == []
    r = spec.read
    lo = r.start_timestamp if r.start_timestamp is not None else -(1 << 62)
    hi = r.end_timestamp if r.end_timestamp is not None else 1 << 62
    for ms in millis:
        want = OPS[cls](ms * 1000, micros)
        assert (lo <= ms < hi and not spec.empty) == want


def test_ranges_intersect_with_options():
    base = parse_options({"path": "/x", "startingoffsets": "10", "endingoffsets": "100"})
    spec, rest = base.push([GreaterThan(("offset",), 4), LessThanOrEqual(("offset",), 49),
                            GreaterThanOrEqual(("offset",), 20)])
    assert rest == [] and (spec.read.start_offset, spec.read.end_offset) == (20, 50)
    assert len(spec.pushed) == 3
    spec, _ = base.push([LessThan(("offset",), 10)])
    assert spec.empty


@st.composite
def segment_splits(draw):
    """Whole-segment splits with batch boundaries (resync positions) inside them."""
    out = []
    for i in range(draw(st.integers(0, 8))):
        size = draw(st.integers(1, 400))
        inner = sorted(set(draw(st.lists(st.integers(1, max(1, size - 1)), max_size=20))))
        out.append(Split(f"/x/{i:020d}.log", "t", i % 2, i, 0, size,
                         tuple(p for p in inner if 0 < p < size)))
    return out


@settings(max_examples=300, deadline=None)
@given(segment_splits(), st.integers(1, 300))
def test_balance_covers_everything_once_in_order(splits, target):
    groups = balance(splits, target)
    pieces = [p for g in groups for p in g]
    assert all(groups)
    # the pieces tile each split exactly, in order, cut only at its batch boundaries
    for s in splits:
        mine = [p for p in pieces if p.path == s.path]
        assert mine[0].start == s.start and mine[-1].end == s.end
        for a, b in zip(mine, mine[1:]):
            assert a.end == b.start and a.end in s.resync
        for p in mine:
            assert p.resync == tuple(x for x in s.resync if p.start < x < p.end)
    assert [p.path for p in pieces] == sorted(p.path for p in pieces)
    total = sum(s.size for s in splits)
    if all(set(range(1, s.size)) <= set(s.resync) for s in splits):
        # every byte is a boundary: tasks are exactly target bytes, bar the last
        assert [sum(p.size for p in g) for g in groups[:-1]] == [target] * (len(groups) - 1)
        assert len(groups) == max(1, -(-total // target)) or total == 0


def test_balance_evens_out_two_segments():
    segs = [Split(f"/x/{i}.log", "t", i, 0, 0, 7500, tuple(range(100, 7500, 100)))
            for i in range(2)]
    sizes = [[p.size for p in g] for g in balance(segs, 5000)]
    assert sizes == [[5000], [2500, 2500], [5000]]


@pytest.mark.parametrize("total", [0, 1, MIN_SPLIT_BYTES * 3, 100 << 20, 10 << 30])
def test_auto_split_bytes(total):
    size = auto_split_bytes(total)
    assert MIN_SPLIT_BYTES <= size <= MAX_SPLIT_BYTES
    # as many tasks as the bounds allow, about AUTO_TASKS of them
    assert size in (MIN_SPLIT_BYTES, MAX_SPLIT_BYTES) or -(-total // size) == AUTO_TASKS
    assert auto_split_bytes(total, 3) in (MIN_SPLIT_BYTES, MAX_SPLIT_BYTES) \
        or -(-total // auto_split_bytes(total, 3)) == 3


_KEYS = st.sampled_from(["path", "paths", "topics", "partitions", "startingoffsets",
                         "endingoffsets", "startingtimestamp", "endingtimestamp", "isolation",
                         "includecontrol", "verifycrc", "splitsize", "other"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_KEYS, st.text(max_size=12) | st.sampled_from(["7", "-1", "8m", "true"])))
def test_any_option_map_parses_or_raises_value_error(options):
    try:
        spec = parse_options(options)
    except ValueError as exc:
        assert str(exc).startswith("kafka-segments:")
        return
    assert spec.paths and (spec.split_bytes is None or spec.split_bytes > 0)


_VALUES = (st.integers(-5, 5) | st.booleans() | st.text(max_size=3) | st.none()
           | st.datetimes(timezones=st.none() | st.just(dt.timezone.utc)) | st.lists(st.integers()))
_FILTERS = st.builds(
    lambda cls, col, v, many: cls((col,)) if cls in (IsNotNull, IsNull)
    else cls((col,), tuple(many) if cls is In else v),
    st.sampled_from([*OPS, In, StringStartsWith, IsNotNull, IsNull]),
    st.sampled_from(["topic", "partition", "offset", "timestamp", "key"]), _VALUES,
    st.lists(_VALUES, max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.lists(_FILTERS, max_size=6))
def test_any_filters_push_without_error(filters):
    spec, rest = ScanSpec(("/x",)).push(filters)
    assert all(any(r is f for f in filters) for r in rest)  # Spark requires the same objects
    assert len(spec.pushed) + len(rest) == len(filters)  # each one taken or left to Spark
