"""Building blocks of a Kafka client, sans-I/O where possible.

- :mod:`kproto.client.partitioner`: murmur2 and the Java producer's built-in (sticky) partitioner.
- :mod:`kproto.client.assignors`: the range, round-robin, sticky and cooperative-sticky assignors.
- :mod:`kproto.client.consumer_protocol`: consumer-group subscription/assignment bytes.
- :mod:`kproto.client.sasl`: SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER client state machines.
- :mod:`kproto.client.transactions`: the transactional producer's state machine.
- :mod:`kproto.client.protocol`: one connection's protocol state (framing, correlation,
  pipelining, version negotiation over ``CLIENT_VERSIONS``, the versions the client code
  writes and reads per API) and the broker's errors.
- :mod:`kproto.client.accumulator`: the producer's batching and sequence numbering.
- :mod:`kproto.client.connection`, :mod:`kproto.client.cluster`: asyncio connections (TLS,
  SASL) and the cluster's metadata and coordinators.
- :mod:`kproto.client.producer`, :mod:`kproto.client.consumer`, :mod:`kproto.client.admin`: the
  asyncio producer (idempotent, transactional), group consumer and admin client on top.
- :mod:`kproto.client.share_membership`, :mod:`kproto.client.share_session` (sans-I/O) and
  :mod:`kproto.client.share_consumer` (asyncio): the share consumer of KIP-932 share groups.
"""
from __future__ import annotations

from typing import Any

__all__ = ["ShareConsumer"]


def __getattr__(name: str) -> Any:
    # imported on first use: importing one building block must not load the asyncio clients
    if name == "ShareConsumer":
        from kproto.client.share_consumer import ShareConsumer
        return ShareConsumer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
