"""Client side of KIP-227: which partitions each FetchRequest carries, and what a response means.

A sans-I/O port of Kafka 3.9's ``org.apache.kafka.clients.FetchSessionHandler``: the caller adds
the partitions it wants to a :class:`FetchSessionHandler.Builder`, sends what :meth:`build`
returns (see :func:`kproto.fetch_session.messages.build_fetch_request`), and feeds the answer (or
the failure) back with :meth:`FetchSessionHandler.handle_response` /
:meth:`FetchSessionHandler.handle_error`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Any, Mapping, Optional

from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session.model import (
    INVALID_SESSION_ID,
    ZERO_UUID,
    FetchMetadata,
    PartitionData,
    TopicIdPartition,
    TopicPartition,
)


@dataclass(frozen=True)
class FetchRequestData:
    """What :meth:`FetchSessionHandler.Builder.build` returns (Kafka's ``FetchRequestData``).

    ``to_send`` holds the partitions to list in the request, in order: for a full request every
    wanted partition; for an incremental one the added partitions, then the altered and
    replaced ones. ``to_forget`` are partitions removed from the session and ``to_replace``
    partitions whose topic id changed (both carry the id the session had). ``session_partitions``
    is the whole session after this build.
    """

    to_send: dict[TopicPartition, PartitionData]
    to_forget: list[TopicIdPartition]
    to_replace: list[TopicIdPartition]
    session_partitions: dict[TopicPartition, PartitionData]
    metadata: FetchMetadata
    can_use_topic_ids: bool

    @property
    def is_full(self) -> bool:
        return self.metadata.is_full


class FetchSessionHandler:
    """The fetch session state a client keeps for one broker (one instance per node)."""

    def __init__(self, node: int = -1) -> None:
        self.node = node
        #: Metadata the next request will carry.
        self.next_metadata: FetchMetadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
        #: The partitions in the session, in session order.
        self.session_partitions: dict[TopicPartition, PartitionData] = {}
        #: Topic id -> name for the session's topics; empty unless the session uses topic ids.
        self.session_topic_names: dict[Uuid, str] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def session_topic_partitions(self) -> list[TopicPartition]:
        return list(self.session_partitions)

    def new_builder(self, copy_session_partitions: bool = True) -> "FetchSessionHandler.Builder":
        """Start the next request. With ``copy_session_partitions`` False the result's
        ``session_partitions`` is the live session map (Kafka's replica-fetcher shortcut)."""
        return FetchSessionHandler.Builder(self, copy_session_partitions)

    class Builder:
        """Collects the partitions wanted for the next request; :meth:`build` diffs them
        against the session."""

        __slots__ = ("_handler", "_next", "_topic_names", "_without_ids", "_copy")

        def __init__(self, handler: "FetchSessionHandler", copy_session_partitions: bool) -> None:
            self._handler = handler
            # Insertion order matters: a full response favours early partitions, and build()
            # relies on it to find the newly added ones.
            self._next: Optional[dict[TopicPartition, PartitionData]] = {}
            self._topic_names: dict[Uuid, str] = {}
            self._without_ids = 0
            self._copy = copy_session_partitions

        def add(self, topic_partition: TopicPartition, data: PartitionData) -> None:
            """Mark that the next fetch wants this partition."""
            if self._next is None:
                raise RuntimeError("builder already built")
            self._next[topic_partition] = data
            if data.topic_id == ZERO_UUID:
                self._without_ids += 1
            else:
                assert topic_partition.topic is not None  # a fetcher names what it asks for
                self._topic_names.setdefault(data.topic_id, topic_partition.topic)

        def build(self) -> FetchRequestData:
            """Diff the wanted partitions against the session; updates the handler's session."""
            nxt = self._next
            if nxt is None:
                raise RuntimeError("builder already built")
            self._next = None
            h = self._handler
            can_use_topic_ids = self._without_ids == 0
            metadata = h.next_metadata

            if metadata.is_full:
                h.session_partitions = nxt
                h.session_topic_names = self._topic_names if can_use_topic_ids else {}
                to_send = dict(nxt)
                return FetchRequestData(to_send, [], [], to_send, metadata, can_use_topic_ids)

            session = h.session_partitions
            removed: list[TopicIdPartition] = []
            replaced: list[TopicIdPartition] = []
            pop = nxt.pop
            for tp, prev in list(session.items()):
                data = pop(tp, None)
                if data is None:
                    del session[tp]
                    removed.append(TopicIdPartition(prev.topic_id, tp.topic, tp.partition))
                    if prev.topic_id == ZERO_UUID:
                        can_use_topic_ids = False
                elif data != prev:
                    # Re-adding moves the partition to the end of `nxt`, after the new ones;
                    # assigning to `session` keeps its place there (LinkedHashMap.setValue).
                    nxt[tp] = data
                    session[tp] = data
                    if (prev.topic_id != data.topic_id and prev.topic_id != ZERO_UUID
                            and data.topic_id != ZERO_UUID):
                        replaced.append(TopicIdPartition(prev.topic_id, tp.topic, tp.partition))
            # The partitions left at the front of `nxt` are the new ones; the first one already
            # in the session marks the start of the re-added (altered/replaced) block.
            for tp, data in nxt.items():
                if tp in session:
                    break
                session[tp] = data

            h.session_topic_names = self._topic_names if can_use_topic_ids else {}
            session_view = dict(session) if self._copy else session
            return FetchRequestData(nxt, removed, replaced, session_view, metadata, can_use_topic_ids)

    # -- responses -------------------------------------------------------------------------

    def handle_response(self, response: Any, version: int) -> bool:
        """Apply a FetchResponse (a message object from ``kproto.response(1)``, or anything with
        the same attributes) received for a request of ``version``. Returns False when the
        response could not be used: a top-level error, or partitions missing or unexpected;
        the next request is then a full one."""
        error_code = response.error_code
        if error_code != ErrorCode.NONE:
            return self._handle_error_code(error_code)
        partitions = response_data(response, version, self.session_topic_names).keys()
        return self._handle_ok(partitions, response_topic_ids(response), response.throttle_time_ms,
                               response.session_id, version)

    def _handle_error_code(self, error_code: int) -> bool:
        if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.next_metadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
        else:
            self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
        return False

    def _handle_ok(self, partitions: AbstractSet[TopicPartition], ids: set[Uuid], throttle_time_ms: int,
                   session_id: int, version: int) -> bool:
        session = self.session_partitions.keys()
        extra_ids = version >= 13 and not self.session_topic_names.keys() >= ids
        extra = not session >= partitions
        if self.next_metadata.is_full:
            if not partitions and throttle_time_ms > 0:
                # KIP-219: an empty full response with a throttle time is not an error, but it
                # cannot be used either.
                self.next_metadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
                return False
            omitted = not session <= partitions
            if omitted or extra or extra_ids:
                self.next_metadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
            else:
                self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True
        if extra or extra_ids:
            self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            self.next_metadata = FetchMetadata.INITIAL  # type: ignore[attr-defined]
        else:
            self.next_metadata = self.next_metadata.next_incremental()
        return True

    def notify_close(self) -> None:
        """Make the next request close the session (epoch FINAL) without opening another."""
        self.next_metadata = self.next_metadata.next_close_existing()

    def handle_error(self, exc: Optional[BaseException] = None) -> None:
        """The request failed without a response (e.g. disconnect): the next request closes this
        session and asks for a new one."""
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()


def response_data(response: Any, version: int, topic_names: Mapping[Uuid, str]) -> dict[TopicPartition, Any]:
    """The partitions of a FetchResponse by (topic, partition), in response order (Kafka's
    ``FetchResponse.responseData``). From v13 topics are named by id: a topic whose id is not in
    ``topic_names`` (the handler's ``session_topic_names``) is left out. Keys are plain
    ``(name, partition)`` tuples, equal to and hashed like :class:`TopicPartition`."""
    data: dict[Any, Any] = {}
    by_name = version < 13
    for topic in response.responses:
        name = topic.topic if by_name else topic_names.get(topic.topic_id)
        if name is not None:
            for p in topic.partitions:
                data[(name, p.partition_index)] = p
    return data


def response_topic_ids(response: Any) -> set[Uuid]:
    """The non-zero topic ids a FetchResponse names (``FetchResponse.topicIds``)."""
    return {t.topic_id for t in response.responses if t.topic_id is not None and t.topic_id != ZERO_UUID}
