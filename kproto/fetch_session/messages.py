"""Between fetch-session state and FetchRequest/FetchResponse message objects of kproto's codec.

- :func:`build_fetch_request`: what the handler built -> a FetchRequest object, as Kafka's
  ``FetchRequest.Builder.build`` lays it out (consecutive partitions of a topic share a topic
  entry; forgotten partitions grouped by topic; replaced partitions forgotten only from v13).
- :func:`request_fetch_data`: a received FetchRequest -> what :meth:`FetchSessionCache.new_context`
  takes (``FetchRequest.fetchData`` / ``forgottenTopics`` / ``isFromFollower``).
- :func:`build_fetch_response`: a context's answer -> a FetchResponse object
  (``FetchResponse.toMessage``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from kproto.codecs.primitives import Uuid
from kproto.fetch_session.cache import FetchContextResponse
from kproto.fetch_session.handler import FetchRequestData
from kproto.fetch_session.model import (
    ZERO_UUID,
    FetchMetadata,
    PartitionData,
    TopicIdPartition,
)
from kproto.schemas.api_keys import ApiKey

_INT32_MAX = 2**31 - 1
#: ``fetch.max.bytes`` default of Kafka's consumer.
DEFAULT_FETCH_MAX_BYTES = 52_428_800


def _codecs() -> tuple[Any, Any]:
    from kproto.codecs import request, response

    return request(ApiKey.FETCH), response(ApiKey.FETCH)


def _epoch(value: Optional[int]) -> int:
    return -1 if value is None else value


def _optional_epoch(raw: int) -> Optional[int]:
    return None if raw < 0 else raw


def build_fetch_request(data: FetchRequestData, version: int, *, replica_id: int = -1,
                        replica_epoch: int = -1, max_wait_ms: int = 500, min_bytes: int = 1,
                        max_bytes: int = DEFAULT_FETCH_MAX_BYTES, isolation_level: int = 0,
                        rack_id: str = "") -> Any:
    """The FetchRequest message object for ``data`` at ``version``.

    ``version`` must be 7 or more to carry the session, and 13 or more only when
    ``data.can_use_topic_ids``. Defaults are the Java consumer's (``replica_id`` -1); a follower
    passes its broker id (and epoch from v15), which makes its session privileged.
    """
    if version >= 13 and not data.can_use_topic_ids:
        # Kafka's client caps the version at 12 then; v13+ names topics by id only.
        raise ValueError("Fetch v13+ needs a topic id for every partition (can_use_topic_ids is False)")
    req_codec, _ = _codecs()
    cls = req_codec.cls
    FetchTopic, FetchPartition, ForgottenTopic = cls.FetchTopic, cls.FetchPartition, cls.ForgottenTopic

    forgotten: dict[Optional[str], Any] = {}
    to_forget: Iterable[TopicIdPartition] = data.to_forget
    if version >= 13:
        # Below v13 a replaced partition is not forgotten: the name alone would also drop the
        # re-added partition on the broker.
        to_forget = list(data.to_forget) + list(data.to_replace)
    for tip in to_forget:
        ft = forgotten.get(tip.topic)
        if ft is None:
            ft = forgotten[tip.topic] = ForgottenTopic(topic=tip.topic, topic_id=tip.topic_id, partitions=[])
        ft.partitions.append(tip.partition)

    topics: list[Any] = []
    current = None
    for tp, pd in data.to_send.items():
        if current is None or current.topic != tp.topic:
            current = FetchTopic(topic=tp.topic, topic_id=pd.topic_id, partitions=[])
            topics.append(current)
        current.partitions.append(FetchPartition(
            partition=tp.partition, current_leader_epoch=_epoch(pd.current_leader_epoch),
            last_fetched_epoch=_epoch(pd.last_fetched_epoch), fetch_offset=pd.fetch_offset,
            log_start_offset=pd.log_start_offset, partition_max_bytes=pd.max_bytes))

    kwargs: dict[str, Any] = dict(
        max_wait_ms=max_wait_ms, min_bytes=min_bytes,
        max_bytes=_INT32_MAX if version < 3 else max_bytes, isolation_level=isolation_level,
        session_id=data.metadata.session_id, session_epoch=data.metadata.epoch,
        topics=topics, forgotten_topics_data=list(forgotten.values()), rack_id=rack_id)
    if version < 15:
        kwargs["replica_id"] = replica_id
    else:
        kwargs["replica_state"] = cls.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch)
    return cls(**kwargs)


def request_metadata(request: Any) -> FetchMetadata:
    return FetchMetadata(request.session_id, request.session_epoch)


def request_replica_id(request: Any, version: int) -> int:
    """The fetcher's replica id: -1 for consumers, the broker id for followers."""
    if version < 15:
        return request.replica_id
    state = request.replica_state
    return -1 if state is None else state.replica_id


def request_fetch_data(request: Any, version: int, topic_names: Mapping[Uuid, str]
                       ) -> tuple[dict[TopicIdPartition, PartitionData], list[TopicIdPartition]]:
    """A decoded FetchRequest's partitions and forgotten partitions, keyed as the broker sees
    them. From v13 topics are named by id and resolved through ``topic_names`` (the broker's
    metadata); an unknown id gives a None name, which the broker answers with UNKNOWN_TOPIC_ID."""
    fetch_data: dict[TopicIdPartition, PartitionData] = {}
    for topic in request.topics:
        tid = topic.topic_id if version >= 13 else ZERO_UUID
        name = topic.topic if version < 13 else topic_names.get(tid)
        for p in topic.partitions:
            fetch_data[TopicIdPartition(tid, name, p.partition)] = PartitionData(
                tid, p.fetch_offset, p.log_start_offset, p.partition_max_bytes,
                _optional_epoch(p.current_leader_epoch), _optional_epoch(p.last_fetched_epoch))
    to_forget: list[TopicIdPartition] = []
    for ft in request.forgotten_topics_data or ():
        tid = ft.topic_id if version >= 13 else ZERO_UUID
        name = ft.topic if version < 13 else topic_names.get(tid)
        to_forget.extend(TopicIdPartition(tid, name, p) for p in ft.partitions)
    return fetch_data, to_forget


def build_fetch_response(answer: FetchContextResponse, version: int) -> Any:
    """The FetchResponse message object for a context's answer. The answer's partition values
    must be FetchResponse ``PartitionData`` objects; their ``partition_index`` is set here (as
    Kafka does). Consecutive partitions of a topic share one topic entry."""
    _, resp_codec = _codecs()
    cls = resp_codec.cls
    Topic = cls.FetchableTopicResponse
    topics: list[Any] = []
    current = None
    current_key: Any = None
    by_id = version >= 13
    for tip, pd in answer.partitions.items():
        pd.partition_index = tip.partition
        key = tip.topic_id if by_id else tip.topic
        if current is None or key != current_key:
            current_key = key
            if version >= 13:
                current = Topic(topic="", topic_id=tip.topic_id, partitions=[])
            else:
                current = Topic(topic=tip.topic, topic_id=ZERO_UUID, partitions=[])
            topics.append(current)
        current.partitions.append(pd)
    return cls(throttle_time_ms=answer.throttle_time_ms, error_code=answer.error_code,
               session_id=answer.session_id, responses=topics)
