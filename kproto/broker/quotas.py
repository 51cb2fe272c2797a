"""Client quotas, sans-I/O: what is configured, how requests are checked against it, and how
long a client that went over is throttled, as Kafka's broker does.

- :class:`QuotaStore`: the configured quotas, entity -> {key: value}, changed one
  ``ClientQuotaRecord`` at a time (:meth:`QuotaStore.apply`); the records themselves are in the
  metadata log (the single broker's own, a cluster's), the store is its image's view.
- :func:`alter_client_quotas` and :func:`describe_client_quotas`: the two APIs' answers (Kafka's
  controller validation and its metadata image's filter).
- :class:`SampledRate` and :class:`ClientQuotaManager`: Kafka's quota sensors (``quota.window.num``
  = 11 samples of ``quota.window.size.seconds`` = 1 s) and its throttle time,
  ``(observed - quota) / quota * window``; :class:`QuotaManagers` holds the produce and fetch
  byte-rate managers and the request-time (percentage) one.

Quotas are looked up in Kafka's order of precedence: user and client id, user and default
client id, user, default user and client id, default user and default client id, default
user, client id, default client id. Clients that match the same configured entity share one
sensor (Kafka's metric tags).

- :class:`TokenBucket` and :class:`ControllerMutationQuotaManager`: KIP-599's
  ``controller_mutation_rate``, partitions created or deleted per second with a burst of
  rate x ``controller.quota.window.num`` x ``controller.quota.window.size.seconds``; a request
  gets a :class:`MutationQuota`, strict from CreateTopics v6, CreatePartitions v3 and
  DeleteTopics v5 (a topic over it is answered THROTTLING_QUOTA_EXCEEDED), permissive before
  (done, and the answer throttled).

- :class:`ConnectionQuotas`: Kafka's ConnectionQuotas, what a listener does with a new
  connection: ``max.connection.creation.rate`` and ``max.connections`` hold the acceptor back
  (the connection waits), an address over its ``connection_creation_rate`` quota has its
  connection held unread and closed after the throttle time, one over
  ``max.connections.per.ip`` (or its override) is closed at once.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import math
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

from kproto.broker.log import replace_file
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["USER", "CLIENT_ID", "IP", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE", "REQUEST_PERCENTAGE",
           "CONTROLLER_MUTATION_RATE", "CONNECTION_CREATION_RATE", "Entity", "QuotaStore",
           "alter_client_quotas", "alter_error", "quota_record", "describe_client_quotas", "describe_error", "SampledRate",
           "ClientQuotaManager", "QuotaManagers", "THROTTLE_EXEMPT", "TokenBucket", "MutationQuota",
           "ControllerMutationQuotaManager", "MUTATION_STRICT_FROM", "ConnectionQuotas"]

log = logging.getLogger("kproto.broker")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: The single broker's quotas, beside meta.properties (a file Kafka ignores).

#: the keys each kind of entity takes and their config type (Kafka's QuotaConfigs): users and
#: client ids (alone or together) take the first four, ip addresses the connection rate
_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
                CONTROLLER_MUTATION_RATE: "DOUBLE"}
_IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}

#: An entity: (type, name) pairs sorted by type, a None name the default entity.
Entity = tuple[tuple[str, Optional[str]], ...]

#: APIs never throttled by the request quota (Kafka's exempt ones: what a client needs before it
#: can be identified, and what brokers and controllers send each other)
THROTTLE_EXEMPT = frozenset({
    ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS,
    ApiKey.ENVELOPE, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
    ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
    ApiKey.FETCH_SNAPSHOT, ApiKey.UNREGISTER_BROKER, ApiKey.CONTROLLER_REGISTRATION,
})


def _java_hash(s: Optional[str]) -> int:
    """Java's String.hashCode (0 for null), as a signed 32-bit int."""
    h = 0
    for unit in (s or "").encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_order(items: list[Any], hash_of: Callable[[Any], int]) -> list[Any]:
    """``items`` in the iteration order of a java.util.HashMap they were put in, in this order
    (Kafka answers its quota maps in that order)."""
    cap = 16
    while len(items) > cap * 3 // 4:
        cap *= 2

    def bucket(item: Any) -> int:
        h = hash_of(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)
    return [x for _, _, x in sorted((bucket(x), i, x) for i, x in enumerate(items))]


def _entity_hash(entity: Entity) -> int:
    return sum(_java_hash(t) ^ _java_hash(n) for t, n in entity) & 0xFFFFFFFF


def entity_text(entity: Entity) -> str:
    """As Kafka's ClientQuotaEntity prints itself (its error messages)."""
    pairs = _java_order(list(entity), lambda p: _java_hash(p[0]))
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in pairs) + "})"


def make_entity(pairs: Iterable[tuple[str, Optional[str]]]) -> Entity:
    """An entity from (type, name) pairs; a type given twice keeps its last name (as Kafka's
    map of them does)."""
    return tuple(sorted(dict(pairs).items()))


# ------------------------------------------------------------------ the store
class QuotaStore:
    """The configured client quotas: entity -> {key: value}, as the metadata log's
    ClientQuotaRecords leave them.

    This is the one interface the broker reads and changes quotas through: :meth:`apply` takes
    one ClientQuotaRecord's content, :attr:`entries` is what is configured."""

    def __init__(self) -> None:
        self.entries: dict[Entity, dict[str, float]] = {}
        #: bumped on every change (the managers look their quotas up again)
        self.version = 0

    def apply(self, entity: Entity, key: str, value: Optional[float]) -> None:
        """One change (a ClientQuotaRecord): set ``key`` of ``entity`` to ``value``, or remove
        it (None); an entity left without keys is gone."""
        if value is None:
            values = self.entries.get(entity)
            if values is not None:
                values.pop(key, None)
                if not values:
                    del self.entries[entity]
        else:
            self.entries.setdefault(entity, {})[key] = float(value)
        self.version += 1

    def replace(self, entries: Mapping[Entity, Mapping[str, float]]) -> None:
        """Every quota at once (from a metadata image)."""
        self.entries = {ent: dict(values) for ent, values in entries.items()}
        self.version += 1


# ------------------------------------------------------------------ AlterClientQuotas
_LIMITS = {"LONG": (2**63 - 1, "a LONG"), "INT": (2**31 - 1, "an INT")}


def _is_resolvable(host: Optional[str]) -> bool:
    """Kafka's InetAddress.getByName check of an ip entity's name (null: the default)."""
    if host is None:
        return True
    try:
        ipaddress.ip_address(host)
        return True  # an address: no name lookup
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None)  # a name: looked up as Kafka does (blocking, as there)
        return True
    except (OSError, UnicodeError, ValueError):
        return False


def _entity_problem(data: list[Any]) -> Optional[str]:
    """What is wrong with a request's entity (Kafka's checks, in the request's order), or None."""
    if not data:
        return "Invalid empty client quota entity"
    for d in data:
        if d.entity_type not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {d.entity_type}"
        if d.entity_name == "":
            return f"Empty {d.entity_type} not supported"
    types = {d.entity_type for d in data}
    if IP in types and len(types) > 1:
        return "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
    if IP in types:
        host = [d.entity_name for d in data if d.entity_type == IP][-1]
        if not _is_resolvable(host):
            return f"{host} is not a valid IP or resolvable host."
    return None


def _value_problem(keys: Mapping[str, str], key: str, value: float) -> Optional[str]:
    kind = keys.get(key)
    if kind is None:
        return f"Invalid configuration key {key}"
    if not value > 0:
        return f"Quota {key} must be greater than 0"
    if kind in _LIMITS:
        if math.isinf(value) or value != math.floor(value):
            return f"{key} cannot be a fractional value."
        limit, name = _LIMITS[kind]
        if value > limit:
            return f"Proposed value for {key} is too large for {name}."
    return None


def alter_client_quotas(configured: Mapping[Entity, Mapping[str, float]], body: Any, version: int
                        ) -> tuple[Any, list[tuple[Entity, str, Optional[float]]]]:
    """AlterClientQuotas' answer and the changes it makes (records to apply; none when
    ``validate_only``) over the ``configured`` quotas, as Kafka 4.4 answers: each entry's entity and keys checked (known
    entity types, no empty names, ip alone, the keys of its kind, positive values, whole
    numbers for the byte and connection rates); an entry that fails changes nothing. One
    answer per distinct entity: an entity given twice, or a key given twice in an entry, is
    answered INVALID_REQUEST (the first entry of a twice-given entity is applied all the same,
    as Kafka's controller does)."""
    cls = response_codec(ApiKey.ALTER_CLIENT_QUOTAS).cls
    results: dict[Entity, tuple[int, Optional[str], list[tuple[str, Optional[str]]]]] = {}
    changes: list[tuple[Entity, str, Optional[float]]] = []
    for entry in body.entries:
        ent = make_entity((d.entity_type, d.entity_name) for d in entry.entity)
        as_given = [(d.entity_type, d.entity_name) for d in entry.entity]
        ordered = _java_order(list(ent), lambda p: _java_hash(p[0]))
        ops: dict[str, Optional[float]] = {}
        duplicate = ent in results
        for op in entry.ops:
            duplicate = duplicate or op.key in ops
            ops[op.key] = None if op.remove else op.value
        if duplicate:
            results[ent] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_text(ent)}", ordered)
            continue
        problem = _entity_problem(entry.entity)
        if problem is None:
            keys = _IP_KEYS if IP in dict(ent) else _CLIENT_KEYS
            problem = next((p for k, v in ops.items() if v is not None
                            for p in [_value_problem(keys, k, v)] if p is not None), None)
        if problem is not None:
            results[ent] = (ErrorCode.INVALID_REQUEST, problem, as_given)
            continue
        current = configured.get(ent, {})
        for key, value in ops.items():
            if (value is None and key in current) or (value is not None and current.get(key) != value):
                changes.append((ent, key, value))
        results[ent] = (ErrorCode.NONE, None, ordered)
    entries = [cls.EntryData(error_code=code, error_message=message,
                             entity=[cls.EntityData(entity_type=t, entity_name=n) for t, n in pairs])
               for code, message, pairs in (results[e] for e in _java_order(list(results), _entity_hash))]
    return cls(throttle_time_ms=0, entries=entries), ([] if body.validate_only else changes)


def alter_error(body: Any, code: int, message: Optional[str]) -> Any:
    """An AlterClientQuotas answer with ``code`` for every entry (its entity as asked)."""
    cls = response_codec(ApiKey.ALTER_CLIENT_QUOTAS).cls
    return cls(throttle_time_ms=0, entries=[cls.EntryData(error_code=code, error_message=message, entity=[
        cls.EntityData(entity_type=d.entity_type, entity_name=d.entity_name) for d in e.entity])
        for e in body.entries])


def quota_record(entity: Entity, key: str, value: Optional[float]) -> Any:
    """The ClientQuotaRecord of one change (None: the key removed)."""
    from kproto.codecs import metadata_record

    record = metadata_record(14)
    return record(entity=[record.cls.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                  key=key, value=0.0 if value is None else value, remove=value is None)


# ------------------------------------------------------------------ DescribeClientQuotas
class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _filter(body: Any) -> tuple[dict[str, Optional[str]], set[str]]:
    exact: dict[str, Optional[str]] = {}
    typed: set[str] = set()
    for c in body.components:
        t = c.entity_type
        if t == "":
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if t in exact or t in typed:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Entity type {t} cannot appear more than once in the filter.")
        if t not in (IP, USER, CLIENT_ID):
            raise _Refused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {t}")
        if c.match_type == 0:
            if c.match is None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[t] = c.match
        elif c.match_type == 1:
            if c.match is not None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[t] = None
        elif c.match_type == 2:
            if c.match is not None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(t)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
    if IP in exact or IP in typed:
        if USER in exact or USER in typed or CLIENT_ID in exact or CLIENT_ID in typed:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination. IP filter "
                           "component should not be used with user or clientId filter component.")
    return exact, typed


def describe_error(code: int, message: Optional[str]) -> Any:
    """A DescribeClientQuotas answer that failed as a whole."""
    cls = response_codec(ApiKey.DESCRIBE_CLIENT_QUOTAS).cls
    return cls(throttle_time_ms=0, error_code=code, error_message=message, entries=None)


def describe_client_quotas(entries: Mapping[Entity, Mapping[str, float]], body: Any) -> Any:
    """DescribeClientQuotas' answer over ``entries`` (Kafka's metadata image filter: exact
    names, default entities, any name of a type; ``strict`` leaves out entities with types
    the filter does not name; no components and not strict: everything)."""
    cls = response_codec(ApiKey.DESCRIBE_CLIENT_QUOTAS).cls
    try:
        exact, typed = _filter(body)
    except _Refused as exc:
        return describe_error(exc.code, exc.message)
    found: list[Entity] = []
    for ent in entries:
        names = dict(ent)
        if not exact and not typed:
            if body.strict:
                continue
        elif any(t not in names or names[t] != n for t, n in exact.items()) or any(t not in names for t in typed):
            continue
        elif body.strict and len(names) != len(exact) + len(typed):
            continue
        found.append(ent)
    out = []
    for ent in _java_order(found, _entity_hash):
        values = entries[ent]
        out.append(cls.EntryData(
            entity=[cls.EntityData(entity_type=t, entity_name=n)
                    for t, n in _java_order(list(ent), lambda p: _java_hash(p[0]))],
            values=[cls.ValueData(key=k, value=values[k]) for k in _java_order(list(values), _java_hash)]))
    return cls(throttle_time_ms=0, error_code=0, error_message="", entries=out)  # Kafka: "", not null


# ------------------------------------------------------------------ rates and throttling
@dataclass
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    count: int = 0

    def reset(self, now: int) -> None:
        self.start_ms = self.last_event_ms = now
        self.value, self.count = 0.0, 0


@dataclass
class SampledRate:
    """Kafka's ``Rate`` over a ``WindowedSum``: the total of the last ``samples`` windows of
    ``window_ms`` (one more kept while the oldest still overlaps), divided by the time they
    span, counted as at least ``samples - 1`` full windows (so a first burst is not taken for
    a huge rate)."""

    samples: int = 11
    window_ms: int = 1000
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def _now_sample(self, now: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now, now))
        return self._samples[self._current]

    def record(self, value: float, now: int) -> None:
        s = self._now_sample(now)
        if now - s.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                s = _Sample(now, now)
                self._samples.append(s)
            else:
                s = self._samples[self._current]
                s.reset(now)
        s.value += value
        s.count += 1
        s.last_event_ms = now

    def _purge(self, now: int) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now - s.last_event_ms >= expire:
                s.reset(now)

    def window_size_ms(self, now: int) -> int:
        self._purge(now)
        if not self._samples:
            self._samples.append(_Sample(now, now))
        elapsed = now - min(s.start_ms for s in self._samples)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now: int) -> float:
        """Per second."""
        self._purge(now)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now) / 1000.0)

    def unrecord(self, value: float, now: int) -> None:
        """Take back a value recorded at ``now`` (Kafka records a throttled fetch's bytes, then
        removes them: the client gets an empty answer)."""
        self._now_sample(now).value -= value


class ClientQuotaManager:
    """One quota type (``key``: producer_byte_rate, consumer_byte_rate or request_percentage)
    enforced per sensor: :meth:`record` adds a value for a client and answers how long it must
    be throttled (0: within its quota), as Kafka's ClientQuotaManager."""

    def __init__(self, key: str, store: QuotaStore, samples: int = 11, window_s: int = 1) -> None:
        self.key, self.store = key, store
        self.samples, self.window_ms = samples, window_s * 1000
        self._sensors: dict[tuple[str, str], SampledRate] = {}
        self._lookup: dict[tuple[str, str], tuple[Optional[float], tuple[str, str]]] = {}
        self._lookup_version = -1

    def quota(self, user: str, client_id: str) -> tuple[Optional[float], tuple[str, str]]:
        """The quota that applies (None: none) and the sensor it is counted in (Kafka's metric
        tags: the user and client id of the level that matched)."""
        if self._lookup_version != self.store.version:
            self._lookup.clear()
            self._lookup_version = self.store.version
        got = self._lookup.get((user, client_id))
        if got is None:
            got = self._lookup[(user, client_id)] = self._resolve(user, client_id)
        return got

    def _resolve(self, user: str, client_id: str) -> tuple[Optional[float], tuple[str, str]]:
        entries = self.store.entries
        levels: list[tuple[Entity, tuple[str, str]]] = [
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        ]
        for ent, tags in levels:
            value = entries.get(ent, {}).get(self.key)
            if value is not None:
                return value, tags
        return None, ("", "")

    def enabled_for(self, user: str, client_id: str) -> bool:
        return self.quota(user, client_id)[0] is not None

    def _sensor(self, tags: tuple[str, str]) -> SampledRate:
        s = self._sensors.get(tags)
        if s is None:
            s = self._sensors[tags] = SampledRate(self.samples, self.window_ms)
        return s

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client at ``now_ms``; the throttle time in ms."""
        bound, tags = self.quota(user, client_id)
        if bound is None:
            return 0
        sensor = self._sensor(tags)
        sensor.record(value, now_ms)
        observed = sensor.measure(now_ms)
        if observed <= bound:
            return 0
        if bound <= 0:
            return self.samples * self.window_ms  # nothing allowed: the whole window
        return int(round((observed - bound) / bound * sensor.window_size_ms(now_ms)))

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        bound, tags = self.quota(user, client_id)
        if bound is not None:
            self._sensor(tags).unrecord(value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> Optional[float]:
        """What the quota lets through in the samples before the current one (Kafka caps a
        consumer's fetch with it); None: no quota."""
        bound = self.quota(user, client_id)[0]
        return None if bound is None else bound * (self.samples - 1) * self.window_ms / 1000.0


#: the first version of each API whose topics over the controller mutation quota are refused
#: (THROTTLING_QUOTA_EXCEEDED); older versions are served and only throttled (KIP-599)
MUTATION_STRICT_FROM: dict[int, int] = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}


@dataclass
class TokenBucket:
    """Kafka's ``TokenBucket`` stat: credits refilled at the quota per second up to a burst,
    taken by what is recorded (they may go below zero: that much is owed). A new bucket is
    full, as Kafka's is (its first refill counts from the epoch)."""

    tokens: Optional[float] = None
    last_ms: int = 0

    def measure(self, quota: float, burst: float, now_ms: int) -> float:
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms
        return self.tokens

    def record(self, value: float, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.measure(quota, burst, now_ms) - value)


def _java_round(x: float) -> int:
    return math.floor(x + 0.5)


class MutationQuota:
    """One request's controller mutation quota (Kafka's Strict/PermissiveControllerMutationQuota):
    :meth:`record` each topic's partitions as it is created, deleted or grown."""

    def __init__(self, bucket: Optional[TokenBucket], quota: float, burst: float, strict: bool,
                 clock: Callable[[], int]) -> None:
        self.bucket, self.quota, self.burst, self.strict, self.clock = bucket, quota, burst, strict, clock
        self._throttle_ms = 0
        self._at_ms = 0

    def _violated(self, tokens: float, now: int) -> None:
        self._throttle_ms = _java_round(-tokens / self.quota * 1000)
        self._at_ms = now

    def record(self, partitions: int) -> bool:
        """Count ``partitions`` mutations; False (nothing counted) when the quota is strict and
        already exhausted: the topic is answered THROTTLING_QUOTA_EXCEEDED. A strict quota
        takes any number while some credit is left; a permissive one takes everything."""
        if self.bucket is None:
            return True
        now = self.clock()
        if self.strict:
            tokens = self.bucket.measure(self.quota, self.burst, now)
            if tokens < 0:
                self._violated(tokens, now)
                return False
            self.bucket.record(partitions, self.quota, self.burst, now)
            return True
        self.bucket.record(partitions, self.quota, self.burst, now)
        tokens = self.bucket.measure(self.quota, self.burst, now)
        if tokens < 0:
            self._violated(tokens, now)
        return True

    def throttle_time_ms(self) -> int:
        """How long the client is to wait: until the bucket is back at zero, less the time
        since that was measured."""
        if not self._throttle_ms:
            return 0
        return max(0, self._throttle_ms - (self.clock() - self._at_ms))


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate``: a token bucket per sensor (the same users and client ids
    share one as for the other quotas), as Kafka's ControllerMutationQuotaManager."""

    def __init__(self, store: QuotaStore, samples: int = 11, window_s: int = 1) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, store, samples, window_s)
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def quota_for(self, user: str, client_id: str, api_key: int, version: int,
                  clock: Callable[[], int]) -> MutationQuota:
        """The quota of one request: strict from the API's :data:`MUTATION_STRICT_FROM`
        version, permissive before; unbounded for a client without a quota."""
        bound, tags = self.quota(user, client_id)
        strict = version >= MUTATION_STRICT_FROM[api_key]
        if bound is None:
            return MutationQuota(None, 0.0, 0.0, strict, clock)
        bucket = self._buckets.setdefault(tags, TokenBucket())
        return MutationQuota(bucket, bound, bound * self.samples * self.window_ms / 1000.0, strict, clock)


class QuotaManagers:
    """A broker's quota managers over one :class:`QuotaStore`: ``produce`` and ``fetch`` bytes
    per second, ``request`` handler time in percent of one thread, ``mutation`` partitions
    created and deleted per second."""

    def __init__(self, store: QuotaStore, samples: int = 11, window_s: int = 1,
                 mutation_samples: int = 11, mutation_window_s: int = 1) -> None:
        self.store = store
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, store, samples, window_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, store, samples, window_s)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, store, samples, window_s)
        self.mutation = ControllerMutationQuotaManager(store, mutation_samples, mutation_window_s)

    @property
    def any(self) -> bool:
        """Whether any quota is configured (nothing to do for any request otherwise)."""
        return bool(self.store.entries)


def request_percentage(nanos: int) -> float:
    """Handler time as Kafka's request quota counts it: percent of one thread over a second."""
    return nanos * 100.0 / 1e9


# ------------------------------------------------------------------ connections
class ConnectionQuotas:
    """A listener's connection limits, sans-I/O, as Kafka's ConnectionQuotas: ``setting``
    answers the broker's current value of a config (they change at run time); the ip quotas
    (``connection_creation_rate``) are in ``store``. The socket layer calls
    :meth:`accept_delay`, waits until :meth:`slot_available`, then :meth:`admit` and, for an
    admitted connection, :meth:`closed` when it ends."""

    def __init__(self, store: QuotaStore, setting: Callable[[str], str], samples: int = 11,
                 window_s: int = 1, listener: str = "PLAINTEXT") -> None:
        """``listener``: the listener's name (its own limits are
        ``listener.name.<listener>.max.connections`` and ``.max.connection.creation.rate``)."""
        self.store, self.setting = store, setting
        self.samples, self.window_ms = samples, window_s * 1000
        self.listener = listener
        #: open connections by client address, and in all (the broker has this one listener)
        self.counts: dict[str, int] = {}
        self.total = 0
        self._broker_rate = SampledRate(samples, self.window_ms)
        self._listener_rate = SampledRate(samples, self.window_ms)
        self._ip_rates: dict[str, SampledRate] = {}

    def _listener_setting(self, key: str) -> str:
        return self.setting(f"listener.name.{self.listener.lower()}.{key}")

    def _record(self, rate: SampledRate, bound: float, now_ms: int) -> int:
        """Kafka's recordAndGetThrottleTimeMs: one more connection; the time it must wait for
        the rate to come back to ``bound``, at most one window (quota.window.size.seconds)."""
        rate.record(1.0, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        return min(_java_round((observed - bound) / bound * rate.window_size_ms(now_ms)), self.window_ms)

    def accept_delay(self, now_ms: int) -> int:
        """The broker-wide and the listener's ``max.connection.creation.rate``: the connection
        is counted in both and the acceptor waits this long (ms), the longer of the two,
        before it takes it."""
        key = "max.connection.creation.rate"
        return max(self._record(self._broker_rate, int(self.setting(key)), now_ms),
                   self._record(self._listener_rate, int(self._listener_setting(key)), now_ms))

    def slot_available(self) -> bool:
        """Whether ``max.connections``, broker-wide and the listener's, leaves room for one
        more (else the acceptor waits for a connection to end)."""
        return self.total < min(int(self.setting("max.connections")),
                                int(self._listener_setting("max.connections")))

    def ip_rate(self, ip: str) -> Optional[float]:
        """The ``connection_creation_rate`` quota of ``ip``: its own, else the default ip
        entity's; None: no quota."""
        entries = self.store.entries
        for entity in (((IP, ip),), ((IP, None),)):
            value = entries.get(entity, {}).get(CONNECTION_CREATION_RATE)
            if value is not None:
                return value
        return None

    def max_for(self, ip: str) -> int:
        """``max.connections.per.ip``, or this address's entry of its overrides."""
        for item in self.setting("max.connections.per.ip.overrides").split(","):
            host, _, count = item.strip().rpartition(":")
            if host.strip() == ip and count.strip().isdigit():  # (checked when set)
                return int(count)
        return int(self.setting("max.connections.per.ip"))

    def admit(self, ip: str, now_ms: int) -> tuple[str, int]:
        """A connection from ``ip`` the acceptor takes: ("ok", 0), counted open; ("throttle",
        ms): over its address's connection_creation_rate, held unread and closed after ms (not
        counted, in no rate either); ("refuse", max): the address already has ``max``
        connections, closed at once."""
        bound = self.ip_rate(ip)
        if bound is not None:
            rate = self._ip_rates.setdefault(ip, SampledRate(self.samples, self.window_ms))
            throttle = self._record(rate, bound, now_ms)
            if throttle > 0:
                for counted in (rate, self._broker_rate, self._listener_rate):
                    counted.unrecord(1.0, now_ms)
                return "throttle", throttle
        count, most = self.counts.get(ip, 0), self.max_for(ip)
        if count >= most:
            return "refuse", most
        self.counts[ip] = count + 1
        self.total += 1
        return "ok", 0

    def closed(self, ip: str) -> None:
        """An admitted connection ended."""
        left = self.counts.get(ip, 0) - 1
        if left > 0:
            self.counts[ip] = left
        else:
            self.counts.pop(ip, None)
        self.total -= 1
