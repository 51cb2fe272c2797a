"""kproto's broker judged by Apache Kafka: the whole corpus against a single Apache Kafka node
(``apache_kafka`` fixture), every difference either gone or explained in deviations.toml.

    python -m pytest tests/conformance -m apache_kafka
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kproto.conformance import Deviations, parse_address, run_conformance
from kproto.conformance.deviations import UNSUPPORTED
from kproto.testing import BrokerThread
from kproto.testing.apache import TEST_CONFIG

DEVIATIONS = Path(__file__).with_name("deviations.toml")


@pytest.mark.apache_kafka(fresh=True)  # a node no other test has written to: its answers are the scenarios' alone
def test_kproto_against_apache_kafka(apache_kafka, tmp_path):
    deviations = Deviations.load(DEVIATIONS)
    # the same departure from Kafka's defaults as the Apache Kafka harness: groups form at once
    assert TEST_CONFIG["group.initial.rebalance.delay.ms"] == "0"
    # and its consumer and share groups' heartbeat intervals (their heartbeats answer them,
    # a share group's DescribeConfigs lists its own)
    interval = int(TEST_CONFIG["group.consumer.heartbeat.interval.ms"])
    share_interval = int(TEST_CONFIG["group.share.heartbeat.interval.ms"])
    with BrokerThread(tmp_path / "kproto", group_initial_rebalance_delay_ms=0,
                      group_consumer_heartbeat_interval_ms=interval,
                      group_share_heartbeat_interval_ms=share_interval) as kproto:
        t0 = time.monotonic()
        report = asyncio.run(run_conformance(parse_address(kproto.bootstrap),
                                             parse_address(apache_kafka.bootstrap),
                                             deviations=deviations))
        elapsed = time.monotonic() - t0
    assert report.unexplained == [], report.text()
    # the comparison did happen: many API x version cells, most of them the same
    cells = report.cells()
    same = [k for k, fs in cells.items() if not fs]
    assert len(cells) > 150 and len(same) > len(cells) // 2, report.table()
    # every deviation still describes something (a fixed difference must leave the file)
    stale = report.unused_deviations()
    assert stale == [], f"deviations that no longer match anything: {stale}"
    assert any(f.path == UNSUPPORTED for f in report.findings())
    assert elapsed < 60
