"""The client side of the Kafka protocol on one connection, sans-I/O: request objects in,
frames out; bytes in, responses out, in correlation order; version negotiation
(:class:`ApiVersionTable` over :data:`CLIENT_VERSIONS`), SASL settings, and the errors a broker
answers with. The asyncio :class:`~kproto.client.connection.Connection` drives it."""
from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from kproto.client.sasl import OAuthBearerClient, PlainClient, ScramClient, sasl_client
from kproto.codecs import message as _message_codec
from kproto.codecs import request as _request_codec
from kproto.codecs import response as _response_codec
from kproto.codecs.primitives import INT16, INT32
from kproto.error_codes import error_name
from kproto.errors import DecodeError, KprotoError
from kproto.errors import UnsupportedVersionError as _CodecUnsupportedVersionError
from kproto.framing import (DEFAULT_MAX_FRAME, FrameBuffer, RequestHeader, decode_response,
                            encode_request, response_header_version)
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = [
    "KafkaConnectionError", "ConnectionClosedError", "RequestTimeoutError", "BrokerError",
    "NoCommonVersionError", "UnsupportedVersionError", "ApiVersionTable", "ClientProtocol",
    "SaslConfig", "raise_for_error", "CLIENT_VERSIONS", "CLIENT_THROTTLES_FROM",
]

_INT32_MAX = 2**31 - 1
_RESPONSE_HEADER = _message_codec("ResponseHeader")


class KafkaConnectionError(KprotoError):
    """The connection to a broker failed; requests in flight on it are lost."""


class ConnectionClosedError(KafkaConnectionError):
    """The connection was closed (by us, by the broker, or after an error)."""


class RequestTimeoutError(KafkaConnectionError):
    """No response within the request timeout; the connection was closed."""


class BrokerError(KprotoError):
    """A broker answered with a non-zero error code."""

    def __init__(self, code: int, what: str = "", message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.what = what
        detail = f" ({message})" if message else ""
        super().__init__(f"{what + ': ' if what else ''}{self.name} [{code}]{detail}")


class NoCommonVersionError(KprotoError):
    """The broker and kproto share no version of an API."""


class UnsupportedVersionError(NoCommonVersionError, _CodecUnsupportedVersionError):
    """No version of an API is both advertised by the broker and implemented by kproto's client
    (:data:`CLIENT_VERSIONS`), e.g. a broker whose lowest version is above what the client
    writes: raised before anything is sent, instead of a request the broker would refuse (or,
    worse, read differently). Kafka's client throws ``UnsupportedVersionException`` here; this
    is also a :class:`kproto.UnsupportedVersionError` (the codec's "not at this version")."""


def raise_for_error(code: int, what: str = "", message: str | None = None) -> None:
    """Raise :class:`BrokerError` unless ``code`` is 0 (NONE)."""
    if code:
        raise BrokerError(code, what, message)


#: The versions kproto's client code (cluster, producer, consumer, admin, transactions, SASL)
#: builds and reads, per API key: each request it sends is at the highest version in both this
#: range and the broker's (and the codec's), never simply the newest version of the schemas, so
#: that a schema regeneration never changes what the client sends. Raise a top only together
#: with the code that writes and reads the new version. Where a version changes meaning, the
#: top is where kproto stops:
#:
#: - Produce 3-13: record batches (magic 2) need v3; v13 names topics by id (the producer falls
#:   back to 12 while a topic's id is unknown); a transactional producer stops at 11, as Kafka's
#:   does without transaction version 2 (v12 within a transaction means KIP-890 part 2).
#: - Fetch 7-18: fetch sessions (KIP-227) need v7; v13+ name topics by id (12 while an id is
#:   unknown).
#: - OffsetCommit/OffsetFetch 0-10: v10 names topics by id only (KIP-848), used when the
#:   metadata has the id of every topic asked about (9 otherwise, and for "every topic").
#: - TxnOffsetCommit up to 4 and EndTxn up to 4: v5 of each is transaction version 2 (KIP-890
#:   part 2: implicit AddOffsetsToTxn, an epoch bump at every EndTxn), which the transaction
#:   manager does not do. AddPartitionsToTxn up to 3: v4+ is the brokers' batched form.
#: - DeleteGroups 0-3 (v3: a message with each group's error).
#: - ApiVersions 0-5 (v5: the cluster id and node id the connection is meant for, once known).
#: - SaslHandshake: the client sends v1 only (KIP-152: SaslAuthenticate frames the tokens).
#: - UpdateFeatures 0-2 (v0 has neither validate_only nor downgrades, v2 no per-feature results).
#: - ElectLeaders 0-2, AlterPartitionReassignments 0-1, ListPartitionReassignments 0 and
#:   DescribeTopicPartitions 0 (the admin client's partition administration).
#: - ConsumerGroupHeartbeat 0-1 (KIP-848; v1: the member id is the client's own, and
#:   SubscribedTopicRegex; a pattern subscription needs v1) and ConsumerGroupDescribe 0-1.
#: - the delegation token APIs at Kafka 4.4's versions (CreateDelegationToken v3 names an owner).
#: - ShareGroupHeartbeat 1, ShareFetch 1-2 and ShareAcknowledge 1-2 (KIP-932 share groups as
#:   Kafka 4.1+ has them; v0 was the early-access form of Kafka 3.9, which no later broker takes).
CLIENT_VERSIONS: Mapping[int, range] = MappingProxyType({
    ApiKey.PRODUCE: range(3, 14),
    ApiKey.FETCH: range(7, 19),
    ApiKey.LIST_OFFSETS: range(0, 12),
    ApiKey.METADATA: range(0, 14),
    ApiKey.OFFSET_COMMIT: range(0, 11),
    ApiKey.OFFSET_FETCH: range(0, 11),
    ApiKey.FIND_COORDINATOR: range(0, 7),
    ApiKey.JOIN_GROUP: range(0, 10),
    ApiKey.HEARTBEAT: range(0, 5),
    ApiKey.LEAVE_GROUP: range(0, 6),
    ApiKey.SYNC_GROUP: range(0, 6),
    ApiKey.DESCRIBE_GROUPS: range(0, 7),
    ApiKey.LIST_GROUPS: range(0, 6),
    ApiKey.SASL_HANDSHAKE: range(1, 2),
    ApiKey.API_VERSIONS: range(0, 6),
    ApiKey.CREATE_TOPICS: range(0, 8),
    ApiKey.DELETE_TOPICS: range(0, 7),
    ApiKey.DELETE_RECORDS: range(0, 3),
    ApiKey.INIT_PRODUCER_ID: range(0, 7),
    ApiKey.ADD_PARTITIONS_TO_TXN: range(0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: range(0, 5),
    ApiKey.END_TXN: range(0, 6),
    ApiKey.TXN_OFFSET_COMMIT: range(0, 7),
    ApiKey.DESCRIBE_ACLS: range(0, 4),
    ApiKey.CREATE_ACLS: range(0, 4),
    ApiKey.DELETE_ACLS: range(0, 4),
    ApiKey.DESCRIBE_CONFIGS: range(0, 5),
    ApiKey.SASL_AUTHENTICATE: range(0, 3),
    ApiKey.CREATE_PARTITIONS: range(0, 4),
    ApiKey.DELETE_GROUPS: range(0, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: range(0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: range(0, 2),
    ApiKey.ALTER_CLIENT_QUOTAS: range(0, 2),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: range(0, 2),
    ApiKey.CONSUMER_GROUP_DESCRIBE: range(0, 2),
    ApiKey.UPDATE_FEATURES: range(0, 3),
    ApiKey.ELECT_LEADERS: range(0, 3),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: range(0, 2),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: range(0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: range(0, 1),
    ApiKey.SHARE_GROUP_HEARTBEAT: range(1, 2),
    ApiKey.SHARE_FETCH: range(1, 3),
    ApiKey.SHARE_ACKNOWLEDGE: range(1, 3),
    ApiKey.CREATE_DELEGATION_TOKEN: range(1, 4),
    ApiKey.RENEW_DELEGATION_TOKEN: range(1, 3),
    ApiKey.EXPIRE_DELEGATION_TOKEN: range(1, 3),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: range(1, 4),
})


def _overlap(a: range, b: range) -> range:
    return range(max(a.start, b.start), min(a.stop, b.stop))


class ApiVersionTable:
    """The versions a broker advertised, and the version to use per API: the highest one the
    broker, kproto's client (:data:`CLIENT_VERSIONS`) and the codec all have (Kafka's
    ``NodeApiVersions.latestUsableVersion`` over the client's own ``ApiKeys`` ranges).

    ``caps`` (API key -> highest version to use) works around brokers that advertise versions
    they do not handle correctly. ``client`` replaces :data:`CLIENT_VERSIONS` (tests).
    """

    def __init__(self, ranges: dict[int, range], caps: Optional[dict[int, int]] = None,
                 client: Mapping[int, range] = CLIENT_VERSIONS,
                 finalized: Optional[dict[str, int]] = None) -> None:
        #: API key -> versions the broker supports
        self.broker = ranges
        self.caps = dict(caps or {})
        self.client = client
        #: feature name -> finalized level (ApiVersions v3+; ``transaction.version`` decides
        #: a transactional producer's protocol, KIP-890)
        self.finalized = dict(finalized or {})

    @classmethod
    def from_response(cls, resp: Any, caps: Optional[dict[int, int]] = None) -> "ApiVersionTable":
        return cls({a.api_key: range(a.min_version, a.max_version + 1) for a in resp.api_keys}, caps,
                   finalized={f.name: f.max_version_level for f in resp.finalized_features})

    def ours(self, api_key: int, wanted: range | None = None) -> range:
        """The versions kproto can send of ``api_key``: the client's table (or, for an API the
        client code does not send, ``wanted``, the caller's own range) within the codec's."""
        try:
            codec = _request_codec(api_key).valid_versions
        except KeyError:
            return range(0)
        mine = self.client.get(api_key)
        if mine is None:
            mine = wanted if wanted is not None else range(0)
        elif wanted is not None:
            mine = _overlap(mine, wanted)
        return _overlap(mine, codec)

    def supported(self, api_key: int, wanted: range | None = None) -> range:
        """Versions both sides support (may be empty), within ``wanted`` when given."""
        theirs = self.broker.get(api_key, range(0))
        both = _overlap(self.ours(api_key, wanted), theirs)
        return range(both.start, min(both.stop, self.caps.get(api_key, _INT32_MAX) + 1))

    def pick(self, api_key: int, wanted: range | None = None) -> int:
        """The highest common version, within ``wanted`` when given; raises
        :class:`UnsupportedVersionError` when there is none."""
        both = self.supported(api_key, wanted)
        if not both:
            client = self.client.get(api_key)
            raise UnsupportedVersionError(
                f"{_api_name(api_key)} (API key {api_key}): broker supports "
                f"{_fmt(self.broker.get(api_key))}, kproto's client "
                + (_fmt(_overlap(client, _request_codec(api_key).valid_versions))
                   if client is not None and _known(api_key) else "implements none")
                + (f", wanted {_fmt(wanted)}" if wanted is not None else "")
                + (f", capped at {self.caps[api_key]}" if api_key in self.caps else ""))
        return both[-1]


def _known(api_key: int) -> bool:
    try:
        _request_codec(api_key)
        return True
    except KeyError:
        return False


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return "unknown API"


def _fmt(r: range | None) -> str:
    return "none" if not r else f"{r.start}-{r[-1]}"


@dataclass
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    token: Any


#: KIP-219: the first version of each API whose answer's throttle_time_ms the client must wait
#: out itself before its next request to that broker (the broker answered at once and muted the
#: connection; older versions were answered late instead). APIs not listed: every version.
CLIENT_THROTTLES_FROM: Mapping[int, int] = MappingProxyType({
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4, ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2, ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2, ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2,
    ApiKey.DELETE_RECORDS: 1, ApiKey.INIT_PRODUCER_ID: 1, ApiKey.OFFSET_FOR_LEADER_EPOCH: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1, ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_ACLS: 1, ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.ALTER_CONFIGS: 1, ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1, ApiKey.SASL_AUTHENTICATE: 1, ApiKey.DELETE_GROUPS: 1,
})


class ClientProtocol:
    """Sans-I/O request/response bookkeeping for one connection.

    :meth:`encode` assigns the next correlation id and returns the frame to write;
    :meth:`feed` takes received bytes and returns ``(token, result)`` pairs in request order,
    where ``result`` is the decoded response body or the :class:`DecodeError` met decoding it.
    A response whose correlation id is not the oldest outstanding one breaks the stream
    (:attr:`broken`): the connection must be dropped.
    """

    def __init__(self, client_id: str | None = "kproto", max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.client_id = client_id
        self._next_id = 0
        self._frames = FrameBuffer(max_frame)
        self.in_flight: deque[_InFlight] = deque()
        #: The error that made the byte stream unusable, once one did.
        self.broken: Optional[DecodeError] = None
        #: The longest throttle (ms) answers asked the client to wait out since :meth:`take_throttle`.
        self.throttle_ms = 0

    def take_throttle(self) -> int:
        """How long (ms) the client must now wait before its next request (KIP-219), and reset."""
        ms, self.throttle_ms = self.throttle_ms, 0
        return ms

    def encode(self, body: Any, version: int, token: Any = None, expect_response: bool = True) -> bytes:
        """The size-prefixed frame of ``body`` at ``version``; ``token`` comes back with the answer."""
        cid = self._next_id
        self._next_id = 0 if cid == _INT32_MAX else cid + 1
        header = RequestHeader(request_api_key=body.API_KEY, request_api_version=version,
                               correlation_id=cid, client_id=self.client_id)
        frame = encode_request(header, body)
        if expect_response:
            self.in_flight.append(_InFlight(cid, body.API_KEY, version, token))
        return frame

    def feed(self, data: bytes) -> list[tuple[Any, Any]]:
        """Received bytes -> ``(token, response body or DecodeError)`` for each complete frame.

        A frame that breaks the stream (bad size, unexpected correlation id) sets :attr:`broken`;
        the responses before it are still returned, and any later call raises that error.
        """
        if self.broken is not None:
            raise self.broken
        out = []
        try:
            self._frames.feed(data)
            for frame in self._frames.frames():
                out.append(self._match(frame))
        except DecodeError as e:
            self.broken = e
        return out

    def _match(self, frame: bytes) -> tuple[Any, Any]:
        if len(frame) < 4:
            raise DecodeError("response frame shorter than a correlation id", what="response")
        cid, = INT32.unpack_from(frame, 0)
        if not self.in_flight:
            raise DecodeError(f"response with correlation id {cid} but no request in flight",
                              what="response")
        head = self.in_flight[0]
        if cid != head.correlation_id:
            raise DecodeError(f"response correlation id {cid}, expected {head.correlation_id}",
                              what="response")
        self.in_flight.popleft()
        try:
            body = self._decode(frame, head)
        except DecodeError as e:
            return head.token, e
        throttle = getattr(body, "throttle_time_ms", 0)
        if throttle and throttle > 0 and head.version >= CLIENT_THROTTLES_FROM.get(head.api_key, 0):
            self.throttle_ms = max(self.throttle_ms, throttle)
        return head.token, body

    @staticmethod
    def _decode(frame: bytes, head: _InFlight) -> Any:
        if head.api_key == ApiKey.API_VERSIONS and head.version > 0 and len(frame) >= 6 \
                and INT16.unpack_from(frame, 4)[0] == ErrorCode.UNSUPPORTED_VERSION:
            # A broker answers an ApiVersions version it does not know in v0 form (KIP-511), and
            # some (librdkafka's mock) in a malformed one: read what v0 can, else just the error.
            try:
                return decode_response(frame, ApiKey.API_VERSIONS, 0, size_prefix=False)[1]
            except DecodeError:
                return _response_codec(ApiKey.API_VERSIONS).cls(error_code=ErrorCode.UNSUPPORTED_VERSION)
        # Bytes after the body are ignored, as Kafka's clients ignore them (librdkafka's mock
        # appends a stray byte to some flexible responses).
        _, pos = _RESPONSE_HEADER.decode_from(frame, 0, response_header_version(head.api_key, head.version))
        codec = _response_codec(head.api_key)
        try:
            return codec.decode_from(frame, pos, head.version, lazy=False)[0]  # read whole
        except DecodeError:
            if head.api_key != ApiKey.SYNC_GROUP or head.version > 3:
                raise
            # librdkafka's mock answers every SyncGroup error with a null assignment, which
            # the field does not allow (Kafka's own classes refuse it too); librdkafka reads
            # the error and rejoins. Keep the error, only when there is one.
            at = pos + (4 if head.version >= 1 else 0)
            if len(frame) != at + 6 or INT16.unpack_from(frame, at)[0] == 0 \
                    or INT32.unpack_from(frame, at + 2)[0] != -1:
                raise
            throttle = INT32.unpack_from(frame, pos)[0] if head.version >= 1 else 0
            return codec.cls(throttle_time_ms=throttle, error_code=INT16.unpack_from(frame, at)[0],
                             assignment=b"")


@dataclass
class SaslConfig:
    """SASL credentials: ``mechanism`` is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with
    ``username`` and ``password``), or OAUTHBEARER (with ``token``, or ``token_provider``, a
    callable asked for a fresh token at each authentication, as Kafka's login callback handler
    is; and optional ``extensions``). ``token_auth``: SCRAM with a delegation token (KIP-48),
    the token id as ``username`` and its HMAC in base64 as ``password`` (the client-first
    message carries ``tokenauth=true``); :meth:`delegation_token` makes one."""

    mechanism: str
    username: str = ""
    password: str = ""
    token: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)
    token_provider: Optional[Callable[[], str]] = None
    token_auth: bool = False

    @classmethod
    def delegation_token(cls, token_id: str, hmac: bytes, mechanism: str = "SCRAM-SHA-512") -> SaslConfig:
        """SCRAM credentials of a delegation token (CreateDelegationToken's ``token_id`` and
        ``hmac``), as Kafka's clients take them (``tokenauth=true``)."""
        return cls(mechanism, token_id, base64.b64encode(hmac).decode("ascii"), token_auth=True)

    def __post_init__(self) -> None:
        if self.token_auth and self.mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError("token_auth needs a SCRAM mechanism (delegation tokens authenticate with SCRAM)")
        if self.mechanism == "OAUTHBEARER" and self.token_provider is not None:
            if self.token is not None:
                raise ValueError("OAUTHBEARER takes a token or a token_provider, not both")
            return  # the provider is asked when connecting, not now
        self.client()  # checks the mechanism and its credentials now, not after connecting

    def client(self) -> PlainClient | ScramClient | OAuthBearerClient:
        """A fresh state machine for one exchange."""
        if self.mechanism == "OAUTHBEARER":
            token = self.token if self.token_provider is None else self.token_provider()
            if token is None:
                raise ValueError("OAUTHBEARER needs a token or a token_provider")
            return sasl_client(self.mechanism, token=token, extensions=self.extensions)
        if self.token_auth:
            return sasl_client(self.mechanism, self.username, self.password,
                               extensions={"tokenauth": "true"})
        return sasl_client(self.mechanism, self.username, self.password)
