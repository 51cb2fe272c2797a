"""The captures test_live_apache.py recorded (today's clients against a 3-broker Apache Kafka
4.4.0 over SASL/SCRAM, tests/capture/data/live_apache), kept as regression tests that need no
Kafka: each decodes without problems (but requests in flight when a client closed its
connection), names every topic id, holds every record its client had acknowledged (the truth
file's ``records_produced``, written from the clients' own acknowledgements) in a Produce
request and a Fetch or ShareFetch response, and shows the same exchanges, API by API and
version by version, as when it was recorded.

Recorded again with ``KPROTO_KEEP_LIVE_CAPTURES=tests/capture/data/live_apache python -m pytest
tests/capture/test_live_apache.py``.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path

import pytest

from capture_live_checks import CLOSED, check_capture, check_scram_refused
from capture_support import decode_pcap_cli

DATA = Path(__file__).with_name("data") / "live_apache"
NAMES = sorted(p.name[:-len(".truth.json")] for p in DATA.glob("*.truth.json"))


def test_every_client_has_a_capture():
    assert NAMES == ["aiokafka", "confluent_kafka", "java_client", "java_share", "kafka_python",
                     "kcat_scram_refused", "kproto_client"]
    assert max((DATA / f"{n}.pcap").stat().st_size for n in NAMES) < 300_000
    assert sum((DATA / f"{n}.pcap").stat().st_size for n in NAMES) < 600_000


@pytest.mark.parametrize("name", NAMES)
def test_capture_decodes_as_recorded(name):
    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    if truth.get("scram_refused"):
        # librdkafka before 2.6.1 against Kafka 4: the login refused, the capture says why
        exchanges = check_scram_refused(DATA / truth["capture"], truth["kafka_ports"])
        assert dict(Counter(f"{e.api_key}:{e.api_name}:v{e.api_version}" for e in exchanges
                            if e.kind == "kafka")) == truth["api_keys"]
        return
    records = [(r["topic"], r["partition"], r["offset"], r["value"]) for r in truth["records_produced"]]
    apis = {key.split(":")[1] for key in truth["api_keys"]}
    exchanges = check_capture(DATA / truth["capture"], truth["kafka_ports"], records,
                              apis=apis, mechanisms=truth["mechanisms"], codecs=truth["codecs"])
    kafka = [e for e in exchanges if e.kind == "kafka"]
    got = Counter(f"{e.api_key}:{e.api_name}:v{e.api_version}" for e in kafka)
    assert dict(got) == truth["api_keys"]
    assert {r[0] for r in records} == set(truth["topics"])


@pytest.mark.parametrize("name", NAMES)
def test_decode_pcap_with_records_shows_every_value_and_no_other_problem(name, tmp_path):
    """``kproto decode-pcap --records`` on the capture: one JSON line per exchange, the only
    problems those of requests in flight at a close, every acknowledged value in the records."""
    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    out = decode_pcap_cli(tmp_path, str(DATA / truth["capture"]), "--format", "jsonl", "--records",
                          "--no-progress", *[a for p in truth["kafka_ports"] for a in ("--port", str(p))])
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == sum(truth["api_keys"].values())
    assert {p for x in lines for p in x["problems"]} <= {CLOSED}
    # record values are base64 in the JSON
    values = {rec["value"] for x in lines for side in ("request", "response") if x.get(side)
              for rec in _records_of(x[side])}
    assert {base64.b64encode(r["value"].encode()).decode() for r in truth["records_produced"]} <= values


def _records_of(body):
    """Every record object under the ``records`` fields of a JSON body."""
    if isinstance(body, dict):
        if "records" in body and isinstance(body["records"], dict):
            yield from body["records"].get("records", [])
        for v in body.values():
            yield from _records_of(v)
    elif isinstance(body, list):
        for v in body:
            yield from _records_of(v)
