"""Locations of the shared log-dir fixtures (read at run time, never copied into the repo)."""
from __future__ import annotations

import base64

import glob
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.environ.get("KPROTO_FIXTURES", os.path.join(REPO, "..", "shared", "fixtures"))
LOGDIRS = os.path.join(FIXTURES, "logdirs")
EXPECTED = os.path.join(FIXTURES, "expected")


def expected_files(pattern: str) -> list[str]:
    """Expected files matching ``pattern`` (relative to ``expected/``), as relative paths.
    Fails loudly when the fixtures are missing: a missing fixture must not pass silently."""
    found = sorted(os.path.relpath(p, EXPECTED)
                   for p in glob.glob(os.path.join(EXPECTED, pattern), recursive=True))
    if not found:
        raise RuntimeError(f"no fixture files match {pattern!r} under {EXPECTED} "
                           "(set KPROTO_FIXTURES)")
    return found


def source_of(rel: str) -> str:
    """The log-dir file an expected file describes."""
    path = os.path.join(LOGDIRS, rel)
    for suffix in (".decoded.jsonl", ".jsonl", ".json"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    head, base = os.path.split(path)
    if base == "kafka_cleanshutdown":
        path = os.path.join(head, ".kafka_cleanshutdown")
    return path


def load_expected(rel: str) -> list[dict]:
    """An expected file as a list of JSON objects (a ``.json`` file is one object)."""
    path = os.path.join(EXPECTED, rel)
    with open(path) as f:
        if rel.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return [json.load(f)]


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def partition_dirs() -> list[str]:
    """Relative paths (``broker/topic-partition``) of every partition in the fixtures."""
    return sorted(os.path.dirname(p) for p in expected_files("*/*/partition.json"))


TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1, "NoTimestampType": -1}


def expected_records(part_rel: str) -> list[dict]:
    """Every record line of a partition's expected segments, in file order, merged with the
    fields of its batch line and the segment name."""
    out = []
    for rel in expected_files(os.path.join(part_rel, "*.log.jsonl")):
        segment = os.path.basename(rel)[: -len(".jsonl")]
        batches = {}
        for line in load_expected(rel):
            if line["type"] == "batch":
                batches[line["index"]] = line
            elif line["type"] == "record":
                out.append({**line, "batch": batches[line["batch_index"]], "segment": segment})
    return out


def expected_batches(part_rel: str) -> list[dict]:
    out = []
    for rel in expected_files(os.path.join(part_rel, "*.log.jsonl")):
        out += [x for x in load_expected(rel) if x["type"] == "batch"]
    return out


def expected_aborted(part_rel: str) -> list[dict]:
    found = [p for p in glob.glob(os.path.join(EXPECTED, part_rel, "*.txnindex.jsonl"))]
    return [e for p in sorted(found) for e in load_expected(os.path.relpath(p, EXPECTED))]


def expected_lso(part_rel: str) -> int | None:
    """First offset of a transaction with no COMMIT/ABORT marker by the end of the log."""
    ongoing: dict[int, int] = {}
    for b in expected_batches(part_rel):
        if not b["is_transactional"]:
            continue
        if b["is_control"]:
            ongoing.pop(b["producer_id"], None)
        else:
            ongoing.setdefault(b["producer_id"], b["base_offset"])
    return min(ongoing.values()) if ongoing else None


COLUMNS = ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
           "headers", "leader_epoch", "producer_id", "producer_epoch", "base_sequence",
           "is_transactional", "is_control", "compression", "segment", "position"]


def _b64(v):
    return None if v is None else base64.b64decode(v)


def want_row(r: dict, topic: str, partition: int) -> dict:
    """The read_arrow row an expected record line stands for."""
    b = r["batch"]
    return {
        "topic": topic, "partition": partition, "offset": r["offset"],
        "timestamp": r["timestamp"], "timestamp_type": TIMESTAMP_TYPES[b["timestamp_type"]],
        "key": _b64(r["key"]), "value": _b64(r["value"]),
        "headers": [{"key": h["key"], "value": _b64(h["value"])} for h in r["headers"]],
        "leader_epoch": b["partition_leader_epoch"], "producer_id": b["producer_id"],
        "producer_epoch": b["producer_epoch"], "base_sequence": b["base_sequence"],
        "is_transactional": b["is_transactional"], "is_control": b["is_control"],
        "compression": b["compression"], "segment": r["segment"], "position": b["position"],
    }


def committed_rows(rows: list[dict], part: str, include_control: bool) -> list[dict]:
    """The rows a read_committed consumer sees (aborted transactions and the open tail removed)."""
    aborted = expected_aborted(part)
    lso = expected_lso(part)

    def aborted_record(r):
        return r["is_transactional"] and not r["is_control"] and any(
            a["producer_id"] == r["producer_id"] and a["first_offset"] <= r["offset"] <= a["last_offset"]
            for a in aborted)

    return [r for r in rows if (lso is None or r["offset"] < lso) and not aborted_record(r)
            and (include_control or not r["is_control"])]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``kproto ARGV`` in-process: (exit status, what it printed)."""
    import io
    from contextlib import redirect_stdout

    from kproto.cli.main import main

    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def same_as_kafka_json(want, got) -> bool:
    """Kafka's JSON form (camelCase, base64 bytes) against a typed row (snake_case, bytes)."""
    from kproto.schemas.model import snake_case

    if isinstance(want, dict):
        return isinstance(got, dict) and all(same_as_kafka_json(v, got[snake_case(k)])
                                             for k, v in want.items())
    if isinstance(want, list):
        return (isinstance(got, list) and len(want) == len(got)
                and all(map(same_as_kafka_json, want, got)))
    if isinstance(got, bytes):
        return base64.b64decode(want) == got
    return want == got
