"""Hostile log directories (issue 19): what a crashed broker or a careless copy leaves behind.
The contract for every reader: a damage record (or the documented DecodeError), the rest of the
data still read, memory and time bounded. Built by mutating copies of the shared fixtures; the
allocation-heavy cases run in a subprocess under an address-space limit."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import kproto.storage as ks
from kproto.problems import Problems

from fuzz_support import zstd_bomb
from storage_fixtures import LOGDIRS, run_cli

CLEAN = os.path.join(LOGDIRS, "broker1-clean")
GIB = 1 << 30


@pytest.fixture()
def logdir(tmp_path):
    root = tmp_path / "logs"
    shutil.copytree(CLEAN, root)
    for dirpath, _, files in os.walk(root):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return str(root)


def _rows(path, **kw):
    damage = Problems()
    table = ks.read_arrow(path, problems=damage, **kw)
    return table.num_rows, damage


FULL_ROWS = _rows(CLEAN)[0]
GARBAGE = b"\xff\xfe not kafka \x00\x01" * 3

# (file under the log dir, what the damage says); every one is Kafka's, every one mangled
METADATA_FILES = [
    "payments-0/00000000000000000594.snapshot",
    "payments-0/00000000000000001203.txnindex",
    "orders-0/00000000000000000633.index",
    "orders-0/00000000000000000633.timeindex",
    "orders-0/leader-epoch-checkpoint",
    "orders-0/partition.metadata",
    "recovery-point-offset-checkpoint",
    "meta.properties",
    ".kafka_cleanshutdown",
]


@pytest.mark.parametrize("rel", METADATA_FILES)
def test_one_bad_metadata_file_is_reported_and_the_rest_read(logdir, rel):
    with open(os.path.join(logdir, rel), "wb") as f:
        f.write(GARBAGE)
    name = os.path.basename(rel)
    rc, out = run_cli(["logdir", logdir])
    assert rc == 1 and name in out and ("DAMAGE" in out or "PROBLEM" in out)
    assert out.count("offsets [") >= 8  # every partition still summarised
    rc, out = run_cli(["dump-log", "--format", "jsonl", logdir])
    lines = [json.loads(x) for x in out.splitlines()]
    errors = [x for x in lines if x.get("type") == "error"]
    assert rc == 1 and errors and all(name in x.get("path", "") + x.get("error", "")
                                      for x in errors)
    assert sum(1 for x in lines if x.get("type") == "summary") >= 12  # every segment dumped
    rows, damage = _rows(logdir)
    assert rows == FULL_ROWS
    if rel.endswith((".index", ".timeindex", ".txnindex")):
        assert [d.kind for d in damage] == ["index"] and damage[0].source.endswith(name)
        topic, partition = rel.split("/")[0].rsplit("-", 1)  # the record says whose it is
        assert (damage[0].topic, damage[0].partition) == (topic, int(partition))


def _limited(code: str, limit: int = 2 * GIB, timeout: float = 60,
             data_only: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose address space (``data_only``: its data, the
    heap and private mappings, so files may be mapped) is ``limit`` bytes above what importing
    kproto's storage and records layers takes."""
    which, field = ("RLIMIT_DATA", 5) if data_only else ("RLIMIT_AS", 0)
    prelude = textwrap.dedent(f"""
        import resource, kproto.storage, kproto.storage.reader, kproto.storage.summary
        import kproto.records.columns, kproto.cli.main
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[{field}]) * resource.getpagesize()
        resource.setrlimit(resource.{which}, (used + {limit}, used + {limit}))
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout)


def test_sparse_3gib_index_is_damage_not_memory(logdir):
    path = os.path.join(logdir, "orders-0", "00000000000000000633.index")
    with open(path, "r+b") as f:
        f.truncate(3 * GIB)  # sparse: no disk used, but any read of it is 3 GiB
    proc = _limited(f"""
        import json, io, contextlib
        from kproto.cli.main import main
        d = kproto.Problems()
        t = kproto.storage.read_arrow({logdir!r}, problems=d)
        print(json.dumps([t.num_rows, [x.kind for x in d]]))
        for argv in (["logdir", {logdir!r}], ["dump-log", "--format", "jsonl", {logdir!r}]):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = main(argv)
            print(json.dumps([rc, "implausible size" in buf.getvalue()]))
    """, limit=GIB)
    assert proc.returncode == 0, proc.stderr[-2000:]
    arrow, logdir_cli, dump_cli = map(json.loads, proc.stdout.splitlines())
    assert arrow == [FULL_ROWS, ["index"]]
    assert logdir_cli == [1, True] and dump_cli == [1, True]


def test_decompression_bombs_are_cut_and_reported(logdir):
    part = os.path.join(logdir, "bombs-0")
    os.mkdir(part)
    bombs = b"".join(zstd_bomb(255 if i == 0 else 8, i * 10**8) for i in range(10))
    with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
        f.write(bombs)
    proc = _limited(f"""
        import json, time
        from kproto.errors import DecodeError
        from kproto.records.batch import RecordBatch
        from kproto.records.reader import decode_columns
        data = open({os.path.join(part, "00000000000000000000.log")!r}, "rb").read()
        out = []
        for fn in (lambda: decode_columns(data), lambda: RecordBatch(data).record_list()):
            t = time.monotonic()
            try:
                fn()
                out.append("decoded")
            except DecodeError as exc:
                out.append(type(exc).__name__)
            out.append(time.monotonic() - t < 5)
        d = kproto.Problems()
        t = time.monotonic()
        table = kproto.storage.read_arrow({logdir!r}, problems=d)
        out += [table.num_rows, sorted({{x.kind for x in d}}), len(d), time.monotonic() - t < 30]
        print(json.dumps(out))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got[:4] == ["DecompressionLimitError", True, "DecompressionLimitError", True]
    rows, kinds, n, fast = got[4:]
    # the split's budget (16 MiB + 64 x compressed) lets two 8 MiB bombs through: their
    # records are valid records; the 255 MiB one and the seven others are reported, not read
    assert rows == FULL_ROWS + 2 * ((8 << 20) // 7)
    assert kinds == ["limit"] and n == 8 and fast


def test_ten_bombs_in_a_segment_take_little_time(tmp_path):
    data = b"".join(zstd_bomb(8, i * 10**7) for i in range(10))
    from kproto.records.reader import iter_batches

    t = time.process_time()  # CPU time: the work the bombs cost, whatever else the machine runs
    done = cut = 0
    for batch in iter_batches(data):
        try:
            batch.record_list()
            done += 1
        except Exception as exc:  # noqa: BLE001 - the type is what is checked
            assert type(exc).__name__ == "DecompressionLimitError"
            cut += 1
    # the read's budget (16 MiB + 64 x compressed) lets two 8 MiB batches through, no more
    assert (done, cut) == (2, 8) and time.process_time() - t < 10


def test_timestamps_past_any_calendar_are_printed_as_numbers(logdir):
    from kproto.records.builder import RecordBatchBuilder

    part = os.path.join(logdir, "far-0")
    os.mkdir(part)
    b = RecordBatchBuilder(base_offset=0)
    b.append(2**63 - 2, b"k", b"v")
    with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
        f.write(b.build())
    rc, out = run_cli(["logdir", part])
    assert rc == 0 and f"{2**63 - 2}ms" in out


def test_base_offset_outside_the_crc_is_damage(logdir):
    path = os.path.join(logdir, "orders-0", "00000000000000000633.log")
    with open(path, "r+b") as f:
        head = f.read(12)
        second = struct.unpack(">i", head[8:12])[0] + 12
        f.seek(second)
        f.write(struct.pack(">q", 2**63 - 1))  # the CRC does not cover the base offset
    rows, damage = _rows(logdir)
    assert [(d.kind, d.position) for d in damage] == [("corrupt", second)]
    assert "out of place" in damage[0].reason and damage[0].bytes_skipped > 0
    assert rows < FULL_ROWS
    rc, out = run_cli(["logdir", os.path.dirname(path)])
    assert rc == 1 and "out of place" in out


def test_emptied_middle_segment_is_a_gap(logdir):
    path = os.path.join(logdir, "orders-0", "00000000000000000633.log")
    open(path, "wb").close()  # the indexes still say what it held
    rows, damage = _rows(logdir, topics=["orders"])
    kinds = sorted(d.kind for d in damage)
    assert "gap" in kinds and rows < _rows(CLEAN, topics=["orders"])[0]
    gap = next(d for d in damage if d.kind == "gap")
    assert gap.source == path and "records (from offset 633 on) are lost" in gap.reason
    assert (gap.topic, gap.partition) == ("orders", 0)


def test_lone_sparse_index_is_dumped_from_its_entries_only(tmp_path):
    from kproto.storage.dump import dump_file
    from kproto.storage.indexes import OffsetIndex

    path = tmp_path / "00000000000000000100.index"  # no .log beside it
    entries = OffsetIndex.from_entries(100, [(105, 0), (140, 4096)]).encode()
    with open(path, "wb") as f:
        f.write(entries)
        f.truncate(1536 << 20)  # preallocated far beyond anything, sparse
    t = time.monotonic()
    head, *lines = dump_file(str(path))
    assert time.monotonic() - t < 2
    assert head["slots"] == (1536 << 20) // 8 and head["entries"] == 2 and head["preallocated"]
    assert [x["offset"] for x in lines] == [105, 140]


# every kind of file a log dir holds that is read whole (segments are mapped and indexes read
# within what their segment can index); a KRaft snapshot and quorum-state are added by the test
HUGE_FILES = [rel for rel in METADATA_FILES if not rel.endswith((".index", ".timeindex"))] + [
    "log-start-offset-checkpoint", "__cluster_metadata-0/quorum-state",
    "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"]


def test_huge_sparse_metadata_files_are_damage_not_memory(logdir):
    for rel in HUGE_FILES:
        with open(os.path.join(logdir, rel), "a+b") as f:
            f.truncate(3 * GIB)  # sparse: no disk used, but a whole read of it is 3 GiB
    paths = [os.path.join(logdir, rel) for rel in HUGE_FILES]
    proc = _limited(f"""
        import json, io, contextlib
        from kproto.cli.main import main
        d = kproto.Problems()
        t = kproto.storage.read_arrow({logdir!r}, problems=d)
        print(json.dumps(t.num_rows))
        for argv in (["logdir", {logdir!r}], ["dump-log", "--format", "jsonl"] + {paths!r}):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = main(argv)
            print(json.dumps([rc, buf.getvalue()]))
    """, limit=GIB)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, (rc_logdir, out_logdir), (rc_dump, out_dump) = map(json.loads, proc.stdout.splitlines())
    assert rows == FULL_ROWS
    assert rc_logdir == 1 and out_logdir.count("offsets [") >= 8
    assert rc_dump == 1
    errors = [json.loads(x) for x in out_dump.splitlines() if '"error"' in x]
    for rel in HUGE_FILES:
        name = os.path.basename(rel)
        if not rel.endswith(".checkpoint"):  # logdir lists a KRaft snapshot, it does not read it
            assert f"{name}" in out_logdir and "implausible size 3221225472" in out_logdir
        assert any(name in e["path"] and "implausible size 3221225472" in e["error"]
                   for e in errors), name


def test_sparse_segment_and_kraft_snapshot_cost_what_their_batches_hold(logdir):
    seg = os.path.join(logdir, "orders-0", "00000000000000000000.log")
    snap = os.path.join(logdir, "__cluster_metadata-0",
                        "00000000000000000000-0000000000.checkpoint")
    with open(seg, "r+b") as f:
        f.truncate(2**31 - 1)  # Kafka's largest segment: a hole after its batches
    with open(snap, "a+b") as f:
        f.truncate(GIB)
    proc = _limited(f"""
        import json, io, contextlib
        from kproto.cli.main import main
        d = kproto.Problems()
        t = kproto.storage.read_arrow({logdir!r}, problems=d)
        print(json.dumps([t.num_rows, sorted({{x.kind for x in d}})]))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["logdir", {logdir!r}])
        print(json.dumps([rc, buf.getvalue()]))
    """, limit=GIB, data_only=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rows, kinds), (rc, out) = map(json.loads, proc.stdout.splitlines())
    assert rows == FULL_ROWS and kinds == ["corrupt"]  # the hole, reported
    assert rc == 1 and out.count("offsets [") >= 8 and "bytes skipped" in out.replace(
        "bytes_skipped", "bytes skipped")


def test_segment_past_kafkas_limit_is_read_up_to_it_and_the_rest_reported(logdir):
    """A segment grown past what Kafka's FileRecords opens (2 GiB - 1): its batches (all in the
    first bytes) are still read, the bytes past the limit are damage, named, never mapped in,
    by read_arrow, the Spark splits and the scans alike."""
    seg = os.path.join(logdir, "orders-0", "00000000000000000000.log")
    before = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.truncate(3 * GIB)  # sparse
    rows, damage = _rows(logdir)
    assert rows == FULL_ROWS
    past = [d for d in damage if d.kind == "file" and "implausible size 3221225472" in d.reason]
    assert len(past) == 1 and past[0].bytes_skipped == 3 * GIB - (2**31 - 1)
    # the hole below the limit is the ordinary damage of a sparse tail, reported once
    hole = [d for d in damage if d.kind == "corrupt"]
    assert hole and hole[0].position == before
    splits = ks.plan_splits(logdir, topics=["orders"], partitions=[0])
    assert max(s.end for s in splits) <= 2**31 - 1
