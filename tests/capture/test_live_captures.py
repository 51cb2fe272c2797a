"""The captures test_live_apache.py recorded (today's clients against Apache Kafka 4.4.0 over
SASL/SCRAM, tests/capture/data/live_apache), kept as regression tests that need no Kafka: each
decodes without problems (but requests in flight when a client closed its connection), names every topic id, holds every record its client had acknowledged
(the truth file's ``records_produced``, written from the clients' own acknowledgements) in a
Produce request and a Fetch response, and shows the same exchanges, API by API and version by
version, as when it was recorded.

Recorded again with ``KPROTO_KEEP_LIVE_CAPTURES=tests/capture/data/live_apache python -m pytest
tests/capture/test_live_apache.py``.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from capture_live_checks import check_capture, check_scram_refused

DATA = Path(__file__).with_name("data") / "live_apache"
NAMES = sorted(p.name[:-len(".truth.json")] for p in DATA.glob("*.truth.json"))


def test_every_client_has_a_capture():
    assert NAMES == ["aiokafka", "confluent_kafka", "java_client", "kafka_python", "kcat_scram_refused",
                     "kproto_client"]
    assert sum((DATA / f"{n}.pcap").stat().st_size for n in NAMES) < 500_000


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
                              apis=apis, mechanisms=truth["mechanisms"])
    kafka = [e for e in exchanges if e.kind == "kafka"]
    got = Counter(f"{e.api_key}:{e.api_name}:v{e.api_version}" for e in kafka)
    assert dict(got) == truth["api_keys"]
    assert {r[0] for r in records} == set(truth["topics"])
