"""``--format text|json`` on every subcommand, and the JSON outcome of those that change
something or serve."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kproto.cli.main import _commands, build_parser, main

REPO = Path(__file__).resolve().parents[2]


def test_every_subcommand_has_a_format_option():
    commands = _commands(build_parser())
    names = {c.prog for c in commands}
    # the ones that change something or serve are walked too
    assert {"kproto topics create", "kproto broker", "kproto cluster", "kproto produce",
            "kproto assign", "kproto acls create", "kproto groups reset"} <= names
    missing = [c.prog for c in commands
               if "--format" not in {o for a in c._actions for o in a.option_strings}]
    assert missing == []


def run(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 0, err
    return status, out


def test_admin_and_produce_outcomes_as_json(kafka_broker, capsys):
    b = ["--bootstrap", kafka_broker.bootstrap]
    _, out = run(capsys, "topics", "create", "fmt", "--partitions", "2", "--config",
                 "retention.ms=777", "--format", "json", *b)
    assert json.loads(out) == {"created": ["fmt"], "validated": [], "partitions": 2,
                               "replication_factor": 1, "configs": {"retention.ms": "777"}}
    _, out = run(capsys, "topics", "create", "fmt-v", "--validate-only", "--format", "json", *b)
    assert json.loads(out)["validated"] == ["fmt-v"] and json.loads(out)["created"] == []
    _, out = run(capsys, "topics", "create", "quiet", *b)
    assert out == ""  # text: nothing to say

    _, out = run(capsys, "produce", "--topic", "fmt", "--partition", "1", "--format", "json", *b,
                 "x", "y")
    doc = json.loads(out)
    assert doc["produced"] == 2 and doc["failed"] == 0
    assert doc["records"] == [{"topic": "fmt", "partition": 1, "offset": 0},
                              {"topic": "fmt", "partition": 1, "offset": 1}]

    _, out = run(capsys, "topics", "alter", "fmt", "--partitions", "3", "--config",
                 "retention.ms=888", "--delete-config", "cleanup.policy", "--format", "json", *b)
    assert json.loads(out) == {"topic": "fmt", "partitions": 3,
                               "configs": {"retention.ms": "888", "cleanup.policy": None}}
    _, out = run(capsys, "topics", "delete-records", "fmt", "--partition", "1", "--before", "1",
                 "--format", "json", *b)
    assert json.loads(out) == [{"topic": "fmt", "partition": 1, "low_watermark": 1}]

    _, out = run(capsys, "groups", "reset", "g", "--topic", "fmt", "--to", "earliest",
                 "--format", "json", *b)
    doc = json.loads(out)
    assert doc["group"] == "g" and doc["dry_run"] is False
    assert [(o["partition"], o["offset"]) for o in doc["offsets"]] == [(0, 0), (1, 1), (2, 0)]
    _, out = run(capsys, "groups", "delete", "g", "--format", "json", *b)
    assert json.loads(out) == {"deleted": ["g"]}
    _, out = run(capsys, "topics", "delete", "fmt", "--format", "json", *b)
    assert json.loads(out) == {"deleted": ["fmt"]}


def test_assign_as_text(tmp_path, capsys):
    group = tmp_path / "g.json"
    group.write_text(json.dumps({"topics": {"t": 3}, "members": {"m1": {"topics": ["t"]},
                                                                 "m2": {"topics": ["t"]}}}))
    _, out = run(capsys, "assign", "-a", "range", "--format", "text", str(group))
    assert out.splitlines() == ["range\tm1\tt-0 t-1", "range\tm2\tt-2"]
    _, out = run(capsys, "assign", "-a", "range", str(group))
    assert json.loads(out) == {"m1": [["t", 0], ["t", 1]], "m2": [["t", 2]]}


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_broker_listening_line(tmp_path, fmt):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "kproto", "broker", "--data", str(tmp_path),
                             "--node-id", "7", "--format", fmt],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(30)
    if fmt == "json":
        doc = json.loads(line)
        assert doc["node_id"] == 7 and doc["listening"].startswith("127.0.0.1:")
    else:
        assert line.startswith("listening on 127.0.0.1:")


@pytest.mark.kafka_broker(authorizer=True, super_users=("User:ANONYMOUS",))
def test_acls_created_as_json(kafka_broker, capsys):
    _, out = run(capsys, "acls", "create", "--resource-type", "topic", "--resource-name", "t",
                 "--principal", "User:alice", "--operation", "read", "--operation", "write",
                 "--format", "json", "--bootstrap", kafka_broker.bootstrap)
    created = json.loads(out)["created"]
    assert sorted(a["operation"] for a in created) == ["read", "write"]
    assert {(a["principal"], a["permission"], a["pattern_type"]) for a in created} == \
        {("User:alice", "allow", "literal")}
    _, out = run(capsys, "acls", "list", "--principal", "User:alice", "--format", "json",
                 "--bootstrap", kafka_broker.bootstrap)
    assert sorted(a["operation"] for a in json.loads(out)) == ["read", "write"]
