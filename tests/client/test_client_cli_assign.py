"""``kproto partition`` and ``kproto assign`` end to end."""
from __future__ import annotations

import json

from kproto.cli.main import main

from _client_vectors import load_jsonl

MURMUR = load_jsonl("murmur2.jsonl.gz")
SCENARIOS = load_jsonl("assignors.jsonl.gz")


def test_partition_hex_keys(capsys):
    sample = MURMUR[::250]
    assert main(["partition", "-p", "1000", "--hex", "--json", *[v["key_hex"] or "" for v in sample]]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["partition"] for d in lines] == [v["partitions"]["1000"] for v in sample]
    assert [d["murmur2"] for d in lines] == [v["murmur2"] for v in sample]


def test_partition_text_key(capsys):
    v = next(v for v in MURMUR if v["kind"] == "utf8")
    assert main(["partition", "-p", "7", v["key_text"]]) == 0
    assert capsys.readouterr().out.split("\t")[0] == str(v["partitions"]["7"])
    assert main(["partition", "-p", "7", "--hex", "zz"]) == 2


def _group_file(tmp_path, sc):
    doc = {"topics": {t["topic"]: t["replica_racks"] or t["partitions"] for t in sc["topics"]},
           "members": {m["member_id"]: {k: m[k] for k in ("topics", "owned_partitions", "generation",
                                                        "rack", "group_instance_id")}
                       for m in sc["members"]}}
    path = tmp_path / f"group-{sc['scenario']}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_assign_matches_kafka(tmp_path, capsys):
    for sc in SCENARIOS[:40]:
        path = _group_file(tmp_path, sc)
        assert main(["assign", path]) == 0
        got = json.loads(capsys.readouterr().out)
        for name in ("range", "roundrobin", "sticky", "cooperative-sticky"):
            assert got[name] == sc["assignments"][name]
        assert main(["assign", path, "-a", "range", "--bytes", "2"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got == {m: b["2"] for m, b in sc["assignment_bytes"]["range"].items()}


def test_assign_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["assign", str(bad)]) == 2
    assert main(["assign", str(tmp_path / "missing.json")]) == 2
    bad.write_text('{"topics": {}}')
    assert main(["assign", str(bad)]) == 2
