"""KIP-227 incremental fetch sessions, sans-I/O, behaving like Apache Kafka 3.9.

- :class:`FetchSessionHandler` (client side): builds full and incremental FetchRequests and
  interprets the responses, falling back to full requests on session errors.
- :class:`FetchSessionCache` (broker side): creates, updates and evicts sessions and decides which
  partitions an incremental response carries.
- :mod:`kproto.fetch_session.messages`: conversion to and from FetchRequest/FetchResponse
  message objects of kproto's codec.
- :mod:`kproto.fetch_session.sim`: a fetcher and a broker built from these, for bandwidth
  measurements (``kproto fetch-session-sim``).

Client side, one handler per broker::

    handler = FetchSessionHandler(node_id)
    builder = handler.new_builder()
    for tp, data in wanted.items():           # TopicPartition -> PartitionData
        builder.add(tp, data)
    built = builder.build()                   # full or incremental, decided by the session
    version = 17 if built.can_use_topic_ids else 12
    request = messages.build_fetch_request(built, version)
    ...                                       # send, receive `response` (a decoded FetchResponse)
    if handler.handle_response(response, version):
        for tp, part in response_data(response, version, handler.session_topic_names).items(): ...
    # on a failed send: handler.handle_error(exc)

Broker side: see :class:`FetchSessionCache` and :func:`messages.request_fetch_data`.
"""
from __future__ import annotations

from kproto.fetch_session.cache import (
    CachedPartition,
    FetchContext,
    FetchContextResponse,
    FetchSession,
    FetchSessionCache,
    FetchSessionCacheShard,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
)
from kproto.fetch_session.handler import FetchRequestData, FetchSessionHandler, response_data, response_topic_ids
from kproto.fetch_session.model import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_UUID,
    FetchMetadata,
    PartitionData,
    TopicIdPartition,
    TopicPartition,
    next_epoch,
)

__all__ = [
    "CachedPartition", "FetchContext", "FetchContextResponse", "FetchSession", "FetchSessionCache",
    "FetchSessionCacheShard", "FullFetchContext", "IncrementalFetchContext", "SessionErrorContext",
    "SessionlessFetchContext", "FetchRequestData", "FetchSessionHandler", "response_data",
    "response_topic_ids",
    "FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "ZERO_UUID",
    "FetchMetadata", "PartitionData", "TopicIdPartition", "TopicPartition",
    "next_epoch",
]
