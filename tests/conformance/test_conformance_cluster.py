"""kproto's cluster judged by Apache Kafka's: the corpus in cluster mode (requests routed to
partition leaders and coordinators, node ids compared by role) between ``kafka_cluster`` and
``apache_kafka_cluster`` (3 brokers + 1 controller each), every difference explained in
deviations-cluster.toml or, where the single nodes differ too, deviations.toml.

    python -m pytest tests/conformance/test_conformance_cluster.py
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kproto.conformance import Deviations, parse_address, run_conformance

HERE = Path(__file__).parent


@pytest.mark.apache_kafka
def test_kproto_cluster_against_apache_kafka_cluster(kafka_cluster, apache_kafka_cluster):
    own = Deviations.load(HERE / "deviations-cluster.toml")
    single = Deviations.load(HERE / "deviations.toml")
    deviations = Deviations(own.items + single.items)
    t0 = time.monotonic()
    report = asyncio.run(run_conformance(parse_address(kafka_cluster.bootstrap),
                                         parse_address(apache_kafka_cluster.bootstrap),
                                         deviations=deviations, cluster=True))
    elapsed = time.monotonic() - t0
    assert report.unexplained == [], report.text()
    cells = report.cells()
    same = [k for k, fs in cells.items() if not fs]
    assert len(cells) > 150 and len(same) > len(cells) // 2, report.table()
    # node ids were compared by role, not by number
    assert any(rule == "node_roles" for rule, _api, _path in report.normalised)
    stale = [d for d in report.unused_deviations() if any(d is o for o in own.items)]
    assert stale == [], f"cluster deviations that no longer match anything: {stale}"
    assert elapsed < 90
