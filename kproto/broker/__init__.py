"""A Kafka broker and cluster in Python, for tests, built from Kafka's own designs.

- :mod:`~kproto.broker.timer`: hierarchical timing wheel (``TimingWheel``/``SystemTimer``).
- :mod:`~kproto.broker.purgatory`: delayed operations (``DelayedOperationPurgatory``).
- :mod:`~kproto.broker.log`: partition logs in Kafka's layout through :mod:`kproto.storage`.
- :mod:`~kproto.broker.group`: the classic group coordinator over ``__consumer_offsets``.
- :mod:`~kproto.broker.txn`: the transaction coordinator over ``__transaction_state``.
- :mod:`~kproto.broker.core`: the sans-I/O request handling (:class:`BrokerCore`).
- :mod:`~kproto.broker.server`: the asyncio TCP layer, :class:`Broker`.
- :mod:`~kproto.broker.raft`, :mod:`~kproto.broker.controller`: the KRaft quorum and controller;
  :mod:`~kproto.broker.replica`: replication; :mod:`~kproto.broker.cluster_broker`: a broker of
  a cluster; :mod:`~kproto.broker.cluster`: :class:`Cluster`, nodes and faults in one process.

    async with Broker(data_dir) as broker:       # port 0: a free port on 127.0.0.1
        ... broker.bootstrap ...
    async with Cluster(brokers=3, controllers=1, data_dir=d) as cluster:
        ... cluster.bootstrap, cluster.leader("t", 0), await cluster.stop(1, abrupt=True) ...
"""
from __future__ import annotations

from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore, ControlHandle, Intercept
from kproto.broker.log import LogConfig
from kproto.broker.server import Broker
from kproto.broker.cluster import Cluster  # noqa: E402  (after Broker, which it builds on)

__all__ = ["Broker", "BrokerConfig", "BrokerCore", "Cluster", "ControlHandle", "Intercept", "LogConfig"]
