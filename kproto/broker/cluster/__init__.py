"""A KRaft cluster: the metadata quorum, replication, and brokers driven by the metadata log.

- :mod:`~kproto.broker.cluster.raft`: the Raft replica of ``__cluster_metadata``;
  :mod:`~kproto.broker.cluster.snapshots`: its snapshot files.
- :mod:`~kproto.broker.cluster.controller`: the quorum controller;
  :mod:`~kproto.broker.cluster.controller_node`: one controller on a socket.
- :mod:`~kproto.broker.cluster.combined`: the single broker's own one-voter quorum (a one-node
  combined KRaft node); :mod:`~kproto.broker.cluster.migration`: older kproto's state files
  moved into the metadata log.
- :mod:`~kproto.broker.cluster.replica`: partition replication between brokers.
- :mod:`~kproto.broker.cluster.broker`: a broker of the cluster (sans-I/O).
- :mod:`~kproto.broker.cluster.network`: the nodes' connections, where faults are injected.
- :mod:`~kproto.broker.cluster.local`: :class:`Cluster`, all nodes in one process.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers see the real names; at run time they load on first use
    from kproto.broker.cluster.local import CONTROLLER_ID_BASE, Cluster, ClusterBroker

__all__ = ["CONTROLLER_ID_BASE", "Cluster", "ClusterBroker"]


def __getattr__(name: str) -> object:  # the control client needs none of the cluster
    if name not in __all__:
        raise AttributeError(f"module 'kproto.broker.cluster' has no attribute {name!r}")
    from kproto.broker.cluster import local

    value = getattr(local, name)
    globals()[name] = value
    return value
