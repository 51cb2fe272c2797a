"""Index lookups against the expected entries, and Kafka's index-entry rules (IndexBuilder)
against the indexes the broker wrote for the fixture segments."""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import struct

import numpy as np
import pytest

from kproto.errors import EncodeError
from kproto.storage.indexes import (AbortedTxn, IndexBuilder, OffsetIndex, TimeIndex,
                                    collect_aborted, preallocated_size)

from storage_fixtures import expected_files, load_expected, read_bytes, source_of

INDEXES = expected_files("*/*/*.index.jsonl")
TIMEINDEXES = expected_files("*/*/*.timeindex.jsonl")
LOGS = expected_files("*/*/*.log.jsonl")


def _targets(values: list[int], lo: int, hi: int, rng: random.Random) -> list[int]:
    out = {lo - 1, lo, hi, hi + 1}
    for v in values:
        out |= {v - 1, v, v + 1}
    out |= {rng.randint(lo, hi) for _ in range(50)}
    return sorted(out)


@pytest.mark.parametrize("rel", INDEXES)
def test_offset_lookup(rel):
    head, *entries = load_expected(rel)
    base = head["base_offset"]
    idx = OffsetIndex.parse(read_bytes(source_of(rel)), base)
    assert not idx.problems()
    rng = random.Random(rel)
    offs = [e["offset"] for e in entries]
    for target in _targets(offs, base, (offs[-1] if offs else base) + 100, rng):
        below = [e for e in entries if e["offset"] <= target]
        want = (below[-1]["offset"], below[-1]["position"]) if below else (base, 0)
        assert idx.lookup(target) == want, target


@pytest.mark.parametrize("rel", TIMEINDEXES)
def test_time_lookup(rel):
    head, *entries = load_expected(rel)
    base = head["base_offset"]
    idx = TimeIndex.parse(read_bytes(source_of(rel)), base)
    assert not idx.problems()
    rng = random.Random(rel)
    ts = [e["timestamp"] for e in entries]
    for target in _targets(ts, (ts[0] if ts else 0) - 10, (ts[-1] if ts else 0) + 10, rng):
        below = [e for e in entries if e["timestamp"] <= target]
        want = (below[-1]["timestamp"], below[-1]["offset"]) if below else (-1, base)
        assert idx.lookup(target) == want, target


def _batches(rel: str) -> list[dict]:
    return [x for x in load_expected(rel) if x["type"] == "batch"]


def _is_active(rel: str) -> bool:
    """A segment still active when the broker stopped was never closed (no final time-index
    entry); its indexes are the preallocated ones."""
    return load_expected(rel.replace(".log.", ".index."))[0]["preallocated"]


@pytest.mark.parametrize("rel", LOGS)
def test_index_builder_reproduces_broker_indexes(rel):
    base = int(os.path.basename(rel).split(".")[0])
    b = IndexBuilder(base)
    for x in _batches(rel):
        b.append(x["position"], x["size_in_bytes"], x["last_offset"],
                 [(x["max_timestamp"], x["last_offset"])])
    if not _is_active(rel):
        b.close()
    want_idx = [(e["offset"], e["position"]) for e in load_expected(rel.replace(".log.", ".index."))[1:]]
    want_time = [(e["timestamp"], e["offset"])
                 for e in load_expected(rel.replace(".log.", ".timeindex."))[1:]]
    if "users-0" in rel and b.offset_entries != want_idx:
        # compacted replication appends several batches at once: each entry still maps the
        # last offset of some append to the position of that append's first batch
        starts = {x["position"]: x for x in _batches(rel)}
        for off, pos in want_idx:
            assert pos in starts and off >= starts[pos]["last_offset"]
        return
    assert b.offset_entries == want_idx
    assert b.time_entries == want_time
    encoded = b.offset_index().encode()
    assert OffsetIndex.parse(encoded, base).lookup(10**12)[1] == (want_idx[-1][1] if want_idx else 0)


def test_preallocated_tail_and_encode_padding():
    idx = OffsetIndex.from_entries(100, [(150, 4100), (180, 8300)])
    size = preallocated_size(8, 131072)
    data = idx.encode(size)
    assert len(data) == 131072 and data[16:] == bytes(len(data) - 16)
    back = OffsetIndex.parse(data, 100)
    assert len(back) == 2 and back.preallocated and back.slots == 16384
    assert back.lookup(179) == (150, 4100)
    t = TimeIndex.from_entries(100, [(5, 101)]).encode(preallocated_size(12, 131072))
    assert len(t) == 131064 and len(TimeIndex.parse(t, 100)) == 1
    with pytest.raises(EncodeError):
        idx.encode(8)
    with pytest.raises(EncodeError):
        OffsetIndex.from_entries(0, [(2**31, 1)]).encode()


def test_problems_detected():
    bad = OffsetIndex.from_entries(0, [(10, 500), (5, 600)])
    assert bad.problems()
    assert OffsetIndex.from_entries(0, [(10, 500)]).problems(log_size=400)
    assert OffsetIndex.parse(bytes(12), 0).problems() == ["size 12 is not a multiple of 8"]
    assert TimeIndex.from_entries(0, [(10, 1), (9, 2)]).problems()


def test_collect_aborted_matches_kafka_rule():
    entries = [AbortedTxn(1, 10, 20, 0), AbortedTxn(2, 30, 40, 0)]
    assert list(collect_aborted(entries, 21)) == entries[1:]
    assert list(collect_aborted(entries, 0, 30)) == entries[:1]
    assert list(collect_aborted(entries, 20, 31)) == entries


def test_lookup_random_against_bruteforce():
    rng = np.random.default_rng(7)
    rel = np.cumsum(rng.integers(1, 50, 200))
    pos = np.cumsum(rng.integers(1, 9000, 200))
    idx = OffsetIndex.from_entries(1000, zip((rel + 1000).tolist(), pos.tolist()))
    for t in rng.integers(900, int(rel[-1]) + 1100, 300).tolist():
        hit = [(int(o) + 1000, int(p)) for o, p in zip(rel, pos) if o + 1000 <= t]
        assert idx.lookup(t) == (hit[-1] if hit else (1000, 0))


# Kafka 4.4.0's DumpLogSegments --index-sanity-check said these of the same bytes
@pytest.mark.parametrize("kind,body,verdict", [
    ("index", struct.pack(">ii", 5, 100) + struct.pack(">ii", 2, 50), None),
    ("index", struct.pack(">ii", 5, 100) + struct.pack(">ii", -3, 200),
     "Corrupt index found, index file P has non-zero size but the last offset is 97 which is "
     "less than the base offset 100"),
    ("index", struct.pack(">ii", 5, 100) + b"\0\0\0",
     "Index file P is corrupt, found 11 bytes which is neither positive nor a multiple of 8"),
    ("timeindex", struct.pack(">qi", 1000, 5) + struct.pack(">qi", 1000, 2)
     + struct.pack(">qi", 3000, 7), None),
    ("timeindex", b"\0" * 24, None),
    ("timeindex", struct.pack(">qi", 1000, 5) + struct.pack(">qi", 500, 6),
     "Corrupt time index found, time index file (P) has non-zero size but the last timestamp "
     "is 500 which is less than the first timestamp 1000"),
    ("timeindex", struct.pack(">qi", 1000, 5) + b"\0" * 12,   # preallocated after an entry
     "Corrupt time index found, time index file (P) has non-zero size but the last timestamp "
     "is 0 which is less than the first timestamp 1000"),
    ("timeindex", struct.pack(">qi", 1000, 5) + struct.pack(">qi", 2000, -1),
     "Corrupt time index found, time index file (P) has non-zero size but the last offset is "
     "99 which is less than the first offset 100"),
    ("timeindex", struct.pack(">qi", 1000, 5) + b"\0" * 5,
     "Time index file P is corrupt, found 17 bytes which is neither positive nor a multiple "
     "of 12"),
])
def test_kafka_sanity_check_is_kafkas_verdict(kind, body, verdict):
    from kproto.storage.indexes import kafka_sanity_check

    size = 8 if kind == "index" else 12
    whole = len(body) - len(body) % size
    first, last = (body[:size], body[whole - size:whole]) if whole else (b"", b"")
    assert kafka_sanity_check(first, last, len(body), 100, kind, "P") == verdict


def test_dump_log_index_sanity_check_lines_and_status(tmp_path):
    from kproto.cli.dump_log import run

    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000100.index").write_bytes(struct.pack(">ii", 5, 100))
    (part / "00000000000000000100.timeindex").write_bytes(struct.pack(">qi", 1000, 5) + b"\0" * 12)
    args = argparse.Namespace(files=[str(part)], format="jsonl", batches_only=False, verify=False,
                              decode_internal=False, index_sanity_check=True, no_progress=True,
                              max_decompressed=1 << 20)
    out = io.StringIO()
    assert run(args, out) == 1
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    sanity = [x for x in lines if x["type"] == "index_sanity"]
    assert [(x["kind"], x["entries"], x["passed"]) for x in sanity] == \
        [("index", 1, True), ("timeindex", 2, False)]
    assert "last timestamp is 0" in sanity[1]["problem"]
