"""A Kafka broker in Python built from Kafka's own designs (issue 16).

Sans-I/O core: :mod:`~kproto.broker.timer` (hierarchical timing wheel),
:mod:`~kproto.broker.purgatory` (delayed operations).
"""
from __future__ import annotations
