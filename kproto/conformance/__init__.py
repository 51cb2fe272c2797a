"""A conformance kit: the same request scenarios against two Kafka-compatible brokers, their
answers compared field by field after a named normalisation, with Apache Kafka as the judge.

- :mod:`~kproto.conformance.scenario`: what a scenario is (a generator of calls), request building.
- :mod:`~kproto.conformance.scenarios`: the corpus (:data:`SCENARIOS`).
- :mod:`~kproto.conformance.normalise`: answers as plain trees, the normalisation rules.
- :mod:`~kproto.conformance.compare`, :mod:`~kproto.conformance.deviations`: differences, and
  the file of explained ones.
- :mod:`~kproto.conformance.report`: the table, the ApiVersions ranges, JSON.
- :mod:`~kproto.conformance.runner`: the only I/O, :func:`run_conformance`.

Everything but the runner is sans-I/O.
"""
from __future__ import annotations

from kproto.conformance.compare import Diff, compare
from kproto.conformance.deviations import Deviation, Deviations
from kproto.conformance.normalise import RULES, Normaliser, to_tree
from kproto.conformance.report import Report
from kproto.conformance.runner import parse_address, run_conformance
from kproto.conformance.scenario import Call, Context, Scenario, TopicSpec, build
from kproto.conformance.scenarios import SCENARIOS

__all__ = ["Call", "Context", "Deviation", "Deviations", "Diff", "Normaliser", "Report", "RULES",
           "SCENARIOS", "Scenario", "TopicSpec", "build", "compare", "parse_address",
           "run_conformance", "to_tree"]
