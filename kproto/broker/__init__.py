"""A Kafka broker and cluster in Python, for tests, built from Kafka's own designs.

One node's core:

- :mod:`~kproto.broker.timer`: hierarchical timing wheel (``TimingWheel``/``SystemTimer``).
- :mod:`~kproto.broker.purgatory`: delayed operations (``DelayedOperationPurgatory``).
- :mod:`~kproto.broker.log`: partition logs in Kafka's layout through :mod:`kproto.storage`.
- :mod:`~kproto.broker.configs`, :mod:`~kproto.broker.context`, :mod:`~kproto.broker.retention`,
  :mod:`~kproto.broker.admin`: configs, what the coordinators share, retention, admin APIs.
- :mod:`~kproto.broker.core`: the sans-I/O request handling (:class:`BrokerCore`).
- :mod:`~kproto.broker.share_partition`, :mod:`~kproto.broker.share_fetch`: share groups'
  in-flight records, share sessions, ShareFetch and ShareAcknowledge (KIP-932);
  :mod:`~kproto.broker.group_configs`: groups' own configs.
- :mod:`~kproto.broker.server`: the asyncio TCP layer, :class:`Broker`.

Its parts: :mod:`~kproto.broker.coordinators` (groups, share groups, transactions),
:mod:`~kproto.broker.security` (SASL, ACLs, authorization), and :mod:`~kproto.broker.cluster`
(KRaft quorum, controller, replication, :class:`Cluster`: nodes and faults in one process).

    async with Broker(data_dir) as broker:       # port 0: a free port on 127.0.0.1
        ... broker.bootstrap ...
    async with Cluster(brokers=3, controllers=1, data_dir=d) as cluster:
        ... cluster.bootstrap, cluster.leader("t", 0), await cluster.stop(1, abrupt=True) ...
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers see the real names; at run time they load on first use
    from kproto.broker.cluster import Cluster
    from kproto.broker.configs import BrokerConfig
    from kproto.broker.core import BrokerCore, ControlHandle, Intercept
    from kproto.broker.log import LogConfig
    from kproto.broker.server import Broker

# importing one part (kproto.broker.timer, or kproto.broker.cluster.control for a shell's
# control command) does not load the whole broker
_LAZY = {
    "Broker": "kproto.broker.server", "BrokerConfig": "kproto.broker.configs",
    "BrokerCore": "kproto.broker.core", "ControlHandle": "kproto.broker.core",
    "Intercept": "kproto.broker.core", "LogConfig": "kproto.broker.log",
    "Cluster": "kproto.broker.cluster.local",
}

__all__ = ["Broker", "BrokerConfig", "BrokerCore", "Cluster", "ControlHandle", "Intercept", "LogConfig"]


def __getattr__(name: str) -> object:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kproto.broker' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
