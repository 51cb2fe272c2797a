"""The ``kafka-pcap`` source: every capture of ../shared/captures and
../shared/external/captures, read in one DataFrame, gives exactly the exchanges of
``kproto decode-pcap --format jsonl`` (same count, order and fields); with
``expand=records`` the Produce/Fetch records the captures' truth files say were produced and
consumed; the reader plans whole files, grouping small ones."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys

import pytest

from kproto.capture.table import capture_files
from kproto.cli.main import main as cli_main
from kproto.spark import KafkaPcapReader, parse_pcap_options, pcap_spark_schema

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("capture", "external"):
    if os.path.join(_TESTS, _sub) not in sys.path:
        sys.path.append(os.path.join(_TESTS, _sub))

import capture_support  # noqa: E402
import external_support  # noqa: E402
from test_capture_real_captures import _truth_tuple  # noqa: E402  (aborted records' rule)

DIRS = [str(capture_support.CAPTURES), str(external_support.CAPTURES)]
_OPTIONAL = ("fetch_session", "sasl")  # keys a JSON line has only when set


@functools.lru_cache(maxsize=None)
def cli_lines(path: str) -> tuple[dict, ...]:
    """What ``kproto decode-pcap PATH --format jsonl`` prints, one dict per line."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["decode-pcap", path, "--format", "jsonl", "--no-progress"])
    return tuple(json.loads(line) for line in out.getvalue().splitlines())


def as_line(row: dict) -> dict:
    """A Spark row back in the JSON line's form."""
    doc = {k: v for k, v in row.items() if k not in ("file", "index")}
    ts = doc["ts"]
    doc["ts"] = None if ts is None else ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for k in ("request", "response", "unread", "fetch_session", "sasl"):
        doc[k] = None if doc[k] is None else json.loads(doc[k])
    for k in _OPTIONAL:
        if doc[k] is None:
            del doc[k]
    return doc


def by_file(table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in sorted(table.to_pylist(), key=lambda r: (r["file"], r["index"])):
        out.setdefault(row["file"], []).append(row)
    return out


@pytest.fixture(scope="module")
def files() -> list[str]:
    found = [f for f, _ in capture_files(DIRS)]
    # both directories are there and hold captures: a missing fixture must not pass
    for d in DIRS:
        assert any(f.startswith(d + os.sep) for f in found), f"no captures under {d}"
    return found


def assert_as_decode_pcap(table, files: list[str]) -> None:
    """``table`` (a collected ``kafka-pcap`` read of ``files``) holds exactly the exchanges
    ``kproto decode-pcap --format jsonl`` prints for each file, in order."""
    got = by_file(table)
    for path in files:
        want = list(cli_lines(path))
        rows = got.get(path, [])
        assert len(rows) == len(want), path
        assert [r["index"] for r in rows] == list(range(len(want)))
        for row, line in zip(rows, want):
            if line["ts"] is not None and not line["ts"].endswith("Z"):
                assert row["ts"] is None  # a damaged header's time: no timestamp
                line = {**line, "ts": None}
            assert as_line(row) == line, (path, row["index"])
    assert set(got) == set(files)
    assert sum(len(cli_lines(p)) for p in files) > 1000  # the whole material was compared


def test_every_capture_as_decode_pcap_jsonl(spark, files):
    df = spark.read.format("kafka-pcap").load(DIRS)
    assert df.schema == pcap_spark_schema()
    assert_as_decode_pcap(df.toArrow(), files)


def _produced_key(r: dict) -> tuple:
    topic, partition, key, value, headers = _truth_tuple(r)
    return topic, partition, key, value, tuple(tuple(h) for h in headers)


def _row_key(r: dict) -> tuple:
    dec = (lambda b: None if b is None else b.decode())
    return (r["topic"], r["partition"], dec(r["key"]), dec(r["value"]),
            tuple((h["key"], dec(h["value"])) for h in r["headers"]))


def test_expand_records_are_what_clients_produced_and_consumed(spark, files):
    # a glob pattern and a list of paths; the truth files list what the clients did
    names = [n for n in capture_support.capture_names() if "lossy" not in n]
    df = spark.read.format("kafka-pcap").option("expand", "records") \
        .load([str(capture_support.CAPTURES / "*.pcap*")])
    assert df.schema == pcap_spark_schema("records")
    got = by_file(df.toArrow())
    checked = 0
    for name in names:
        truth = capture_support.truth(name)
        rows = got.get(str(capture_support.CAPTURES / name), [])
        produced = [r for r in rows if r["api_name"] == "Produce"]
        fetched = [r for r in rows if r["api_name"] == "Fetch"]
        have = {_row_key(r) + (r["offset"],) for r in produced}
        have_any = {_row_key(r) for r in produced}
        for rec in truth.get("records_produced") or []:
            if "value_len" in rec:  # the 1.5 MiB record: its truth is a hash
                continue
            if rec.get("offset") is not None:
                assert _produced_key(rec) + (rec["offset"],) in have, (name, rec)
            else:
                assert _produced_key(rec) in have_any, (name, rec)
            checked += 1
        by_offset = {(r["topic"], r["partition"], r["offset"]): _row_key(r) for r in fetched}
        for group in truth.get("records_consumed") or []:
            for rec in group["records"]:
                assert (r := by_offset.get((rec["topic"], rec["partition"], rec["offset"]))) \
                    is not None and r[2:4] == (rec["key"], rec["value"]), (name, rec)
                checked += 1
        # the exchange's columns are those of its exchange row
        lines = cli_lines(str(capture_support.CAPTURES / name))
        for r in produced + fetched:
            line = lines[r["index"]]
            assert (r["api_key"], r["correlation_id"], r["client_id"], r["client"]) == \
                (line["api_key"], line["correlation_id"], line["client_id"], line["client"])
    assert checked > 500


def test_tasks_are_whole_files_grouped_to_the_budget(files):
    spec = parse_pcap_options({"paths": json.dumps(DIRS), "splitSize": "1m"})
    tasks = KafkaPcapReader(spec, pcap_spark_schema()).partitions()
    planned = [f for t in tasks for f in t.files]
    assert planned == files  # every file once, in order
    sizes = {f: n for f, n in capture_files(DIRS)}
    for t in tasks:
        assert len(t.files) == 1 or sum(sizes[f] for f in t.files) <= 1 << 20
    assert any(len(t.files) > 1 for t in tasks)  # small files share a task
    assert len(tasks) < len(files)
    one = KafkaPcapReader(parse_pcap_options({"path": DIRS[1], "splitSize": "1g"}),
                          pcap_spark_schema()).partitions()
    assert len(one) == 1


def test_bad_options_and_paths():
    with pytest.raises(ValueError, match="expand"):
        parse_pcap_options({"path": DIRS[0], "expand": "batches"})
    with pytest.raises(ValueError, match="unknown option"):
        parse_pcap_options({"path": DIRS[0], "isolation": "read_committed"})
    with pytest.raises(FileNotFoundError):
        capture_files([os.path.join(DIRS[0], "no-such-*.pcap")])


def test_record_columns_join_kafka_segments_columns():
    from kproto.spark import spark_schema

    segments = {f.name: f.dataType for f in spark_schema().fields}
    shared = [f for f in pcap_spark_schema("records").fields if f.name in segments]
    assert {f.name for f in shared} >= {"topic", "partition", "offset", "timestamp", "key",
                                        "value", "headers", "timestamp_type", "producer_id"}
    for f in shared:
        assert f.dataType == segments[f.name], f.name
