"""``kproto api-versions | metadata | produce | consume`` against the real peers."""
from __future__ import annotations

import io
import json
import uuid

import pytest

import kproto
from kproto.cli.main import main


def cli(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def caps(peer) -> list[str]:
    return [a for k, v in peer.version_caps.items() for a in ("--version-cap", f"{k}={v}")]


def test_api_versions(peer, capsys):
    code, out, _ = cli(capsys, "api-versions", "--bootstrap", peer.bootstrap, "--json", *caps(peer))
    assert code == 0
    doc = json.loads(out)
    assert doc["broker"] == peer.bootstrap
    apis = {a["api_key"]: a for a in doc["apis"]}
    produce = apis[0]
    assert produce["name"] == "Produce"
    assert produce["usable"] == min(produce["broker"][1], kproto.request(0).valid_versions[-1])
    code, out, _ = cli(capsys, "api-versions", "--bootstrap", peer.bootstrap, *caps(peer))
    assert code == 0 and "Fetch" in out and "ApiVersions" in out


@pytest.mark.apache
def test_produce_metadata_consume(peer, capsys, monkeypatch):
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    create = ["--create-partitions", "2"] if peer.creates_topics else []
    values = [f"line {i}" for i in range(7)]
    code, out, err = cli(capsys, "produce", "--bootstrap", peer.bootstrap, "--topic", topic, "--compression",
                         "gzip", "-v", *create, *caps(peer), stdin="\n".join(values) + "\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert "produced 7 of 7" in err
    placed = [line.split() for line in out.splitlines()]
    assert len(placed) == 7 and all(t == topic for t, _, _ in placed)

    code, out, _ = cli(capsys, "metadata", "--bootstrap", peer.bootstrap, "--topic", topic, "--json", *caps(peer))
    assert code == 0
    [t] = json.loads(out)["topics"]
    assert t["name"] == topic and len(t["partitions"]) == (2 if peer.creates_topics else 4)

    group = f"g-{topic}"
    common = ["--bootstrap", peer.bootstrap, "--topic", topic, "--group", group, "--from-beginning",
              "--idle-timeout", "1", *caps(peer)]
    code, out1, _ = cli(capsys, "consume", *common, "--max-messages", "3")
    assert code == 0 and len(out1.splitlines()) == 3
    code, out2, _ = cli(capsys, "consume", *common)  # the group resumes after what was printed
    assert code == 0
    assert sorted(out1.splitlines() + out2.splitlines()) == sorted(values)
    # read_committed (ListOffsets v2+, Fetch isolation 1): plain records are all committed
    code, out3, _ = cli(capsys, "consume", "--bootstrap", peer.bootstrap, "--topic", topic,
                        "--group", group + "-rc", "--from-beginning", "--idle-timeout", "1",
                        "--isolation", "read_committed", *caps(peer))
    assert code == 0 and sorted(out3.splitlines()) == sorted(values)


def test_cli_reports_unreachable_broker(capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    code, _, err = cli(capsys, "metadata", "--bootstrap", f"127.0.0.1:{port}")
    assert code == 1 and "no broker reachable" in err


@pytest.mark.apache
def test_transactional_produce(peer, capsys):
    topic = f"clitx-{uuid.uuid4().hex[:8]}"
    create = ["--create-partitions", "1"] if peer.creates_topics else []
    base = ["produce", "--bootstrap", peer.bootstrap, "--topic", topic, "--partition", "0", "-v",
            "--transactional-id", "tx-" + topic, *caps(peer)]
    code, out, err = cli(capsys, *base, *create, "one", "two")
    assert code == 0, err
    code, out2, err = cli(capsys, *base, "--abort", "three")
    assert code == 0, err
    # committed 0-1, COMMIT marker at 2, aborted 3, ABORT marker at 4
    assert [line.split()[2] for line in (out + out2).splitlines()] == ["0", "1", "3"]
    assert cli(capsys, *base, "--no-idempotence", "x")[0] == 2
    assert cli(capsys, "produce", "--bootstrap", peer.bootstrap, "--topic", topic, "--abort", "x")[0] == 2


def test_keyed_lines_in_and_json_lines_out(peer, capsys, monkeypatch):
    from kproto.client.partitioner import partition_for_key

    topic = f"clikey-{uuid.uuid4().hex[:8]}"
    create = ["--create-partitions", "4"] if peer.creates_topics else []
    lines = [f"user-{i % 3}\tevent {i}" for i in range(9)]
    code, _, err = cli(capsys, "produce", "--bootstrap", peer.bootstrap, "--topic", topic, "--key-separator",
                       "\t", *create, *caps(peer), stdin="\n".join(lines) + "\n", monkeypatch=monkeypatch)
    assert code == 0 and "produced 9 of 9" in err
    code, out, _ = cli(capsys, "consume", "--bootstrap", peer.bootstrap, "--topic", topic, "--from-beginning",
                       "--idle-timeout", "1", "--format", "jsonl", *caps(peer))
    docs = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(docs) == 9
    assert sorted((d["key"], d["value"]) for d in docs) == sorted(tuple(line.split("\t")) for line in lines)
    for d in docs:
        assert d["topic"] == topic and d["headers"] == [] and d["timestamp"] > 0
        assert d["partition"] == partition_for_key(d["key"].encode(), 4)
    by_partition: dict = {}
    for d in docs:
        by_partition.setdefault(d["partition"], []).append(d["offset"])
    assert all(offs == list(range(len(offs))) for offs in by_partition.values())
    code, _, err = cli(capsys, "produce", "--bootstrap", peer.bootstrap, "--topic", topic, "--key-separator",
                       "=", "no separator here")
    assert code == 2 and "no '=' in line 1" in err


def test_record_json_marks_bytes_that_are_not_text():
    from kproto.cli.client import _record_json
    from kproto.client.consumer import ConsumerRecord

    doc = _record_json(ConsumerRecord("t", 1, 5, 7, b"\xff\x00", None, (("h", b"ok"), ("b", b"\xfe"), ("n", None))))
    assert doc == {"topic": "t", "partition": 1, "offset": 5, "timestamp": 7, "key_base64": "/wA=", "value": None,
                   "headers": [{"key": "h", "value": "ok"}, {"key": "b", "value_base64": "/g=="},
                               {"key": "n", "value": None}]}
