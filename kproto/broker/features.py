"""Feature flags (KIP-584) as kproto's brokers and controllers advertise, finalize and update
them, sans-I/O.

:data:`FEATURES` holds every feature Apache Kafka 4.4.0 knows: the range a 4.4.0 node supports
and the level a freshly formatted 4.4.0 KRaft node finalizes, beside kproto's own range and
level. kproto finalizes only levels whose behaviour it implements, so several differ from
Kafka's (each entry says why). A feature kproto supports only at level 0 is neither advertised
nor finalized, as Kafka's ``BrokerFeatures`` leaves out a feature whose highest level is 0.

:func:`update_features` is Kafka 4.4's ``FeatureControlManager.updateFeatures``: the checks of an
UpdateFeatures request, in Kafka's order and with its messages, and the FeatureLevelRecords
(name -> level) to write; :func:`update_features_response` builds the answer as Kafka's
controller does. The single broker applies the levels itself; the cluster's controller writes
them to the metadata log.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["FeatureSpec", "FEATURES", "FEATURES_FILE", "METADATA_VERSION", "KRAFT_VERSION", "GROUP_VERSION",
           "TRANSACTION_VERSION", "SHARE_VERSION", "STREAMS_VERSION",
           "ELIGIBLE_LEADER_REPLICAS_VERSION", "METADATA_VERSION_3_9", "METADATA_VERSION_4_4_IV2",
           "TRANSACTION_VERSION_LEVEL", "UPGRADE", "SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE",
           "supported_features", "default_levels", "FeatureUpdates", "update_features",
           "requested_updates", "update_features_response", "set_api_versions_features"]

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"

#: metadata.version 3.9-IV0: the form of the records kproto's controller writes.
METADATA_VERSION_3_9 = 21
#: where the single broker of older kproto versions kept its finalized levels (migrated into
#: its metadata log once, see kproto.broker.cluster.migration)
FEATURES_FILE = "kproto-features.json"
#: metadata.version 4.4-IV2 (Kafka 4.4.0's latest): from it on controllers can be unregistered.
METADATA_VERSION_4_4_IV2 = 33
#: The newest transaction.version the broker implements, and a new broker's or cluster's level:
#: 2 is KIP-890 part 2 (EndTxn v5's epoch bump, partitions added by Produce v12 and
#: TxnOffsetCommit v5+, the transaction log written as TransactionLogValue v1); 0 and 1
#: transactions as before it. A broker formatted at a lower level (``transaction_version``)
#: or downgraded with UpdateFeatures serves that level's protocol.
TRANSACTION_VERSION_LEVEL = 2

#: UpdateFeatures upgrade types (Kafka's ``FeatureUpdate.UpgradeType``).
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True)
class FeatureSpec:
    """One feature: kproto's supported range and new-cluster level, and Apache Kafka 4.4.0's."""

    name: str
    supported: tuple[int, int]
    level: int
    kafka_supported: tuple[int, int]
    kafka_level: int
    why: str = ""


FEATURES: dict[str, FeatureSpec] = {f.name: f for f in (
    FeatureSpec(METADATA_VERSION, (METADATA_VERSION_3_9, METADATA_VERSION_3_9), METADATA_VERSION_3_9,
                (7, METADATA_VERSION_4_4_IV2), METADATA_VERSION_4_4_IV2,
                "the metadata log's records are written as Kafka 3.9's (3.9-IV0)"),
    FeatureSpec(KRAFT_VERSION, (0, 0), 0, (0, 1), 1,
                "the controller quorum's voters are static (no KIP-853 voter records)"),
    FeatureSpec(GROUP_VERSION, (0, 1), 1, (0, 1), 1),
    FeatureSpec(TRANSACTION_VERSION, (0, TRANSACTION_VERSION_LEVEL), TRANSACTION_VERSION_LEVEL,
                (0, 2), 2),
    FeatureSpec(SHARE_VERSION, (0, 2), 2, (0, 2), 2),
    FeatureSpec(STREAMS_VERSION, (0, 0), 0, (0, 1), 1, "streams groups are not implemented"),
    FeatureSpec(ELIGIBLE_LEADER_REPLICAS_VERSION, (0, 0), 0, (0, 1), 1,
                "ELR needs metadata.version 4.0-IV1, above kproto's"),
)}


def supported_features() -> dict[str, tuple[int, int]]:
    """What a kproto node (single broker, or a node of a cluster) advertises as supported:
    name -> (min, max), max above 0."""
    return {f.name: f.supported for f in FEATURES.values() if f.supported[1] > 0}


def default_levels() -> dict[str, int]:
    """The finalized levels of a new kproto broker or cluster, name -> level above 0."""
    return {f.name: f.level for f in FEATURES.values() if f.level > 0}


def _range_text(lo: int, hi: int) -> str:
    # Kafka's VersionRange.toString
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _not_supported(level: int, what: str, rng: tuple[int, int]) -> Optional[str]:
    # Kafka's QuorumFeatures.reasonNotSupported
    if rng[0] <= level <= rng[1]:
        return None
    if rng[1] == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {_range_text(*rng)}"


def _java_hash_order(keys: Iterable[str]) -> list[str]:
    """``keys`` in the iteration order of a Java HashMap they were put into (the order in which
    Kafka's controller checks a request's updates, so the first failing one is Kafka's)."""
    keys = list(dict.fromkeys(keys))
    cap = 16
    while len(keys) > cap * 3 // 4:
        cap *= 2

    def bucket(s: str) -> int:
        raw = s.encode("utf-16-be")
        h = 0
        for i in range(0, len(raw), 2):  # Java's String.hashCode over UTF-16 units
            h = (31 * h + int.from_bytes(raw[i:i + 2], "big")) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)
    return sorted(keys, key=bucket)  # stable: a bucket keeps the insertion order


@dataclass
class FeatureUpdates:
    """The outcome of an UpdateFeatures request: the error (the first update that failed) and
    the levels to finalize (empty on error or when only validating)."""

    error_code: int = ErrorCode.NONE
    error_message: Optional[str] = None
    levels: dict[str, int] = field(default_factory=dict)


def requested_updates(version: int, body: Any) -> list[tuple[str, int, int]]:
    """(feature, level, upgrade type) of each update of an UpdateFeatures request. Kafka 4.4
    reads no downgrade from v0's allow_downgrade: a v0 update is an upgrade (the field's
    default type)."""
    return [(u.feature, u.max_version_level, u.upgrade_type if version >= 1 else UPGRADE)
            for u in body.feature_updates]


def update_features(updates: Sequence[tuple[str, int, int]], finalized: Mapping[str, int], *,
                    node_id: int, validate_only: bool = False,
                    brokers: Mapping[int, Mapping[str, tuple[int, int]]] = {},
                    controllers: Mapping[int, Mapping[str, tuple[int, int]]] = {},
                    quorum: Sequence[int] = ()) -> FeatureUpdates:
    """Check ``updates`` against the ``finalized`` levels as Kafka 4.4's controller does.
    ``brokers``/``controllers``: the supported ranges of the registered nodes (controllers:
    besides this one, ``node_id``); ``quorum``: the voter ids, each of which must have
    registered."""
    wanted: dict[str, tuple[int, int]] = {}
    for name, level, kind in updates:  # a map: the last update of a feature counts
        wanted[name] = (level, kind)
    records: dict[str, int] = {}
    for name in _java_hash_order(wanted):
        level, kind = wanted[name]
        reason = _check(name, level, kind, finalized, node_id, brokers, controllers, quorum)
        if reason is not None:
            return FeatureUpdates(
                ErrorCode.INVALID_UPDATE_VERSION,
                "The update failed for all features since the following feature had an error: "
                f"Invalid update version {level} for feature {name}. {reason}")
        if name != KRAFT_VERSION:  # Kafka writes a NoOpRecord for kraft.version
            records[name] = level
    return FeatureUpdates(levels={} if validate_only else records)


def _check(name: str, level: int, kind: int, finalized: Mapping[str, int], node_id: int,
           brokers: Mapping[int, Mapping[str, tuple[int, int]]],
           controllers: Mapping[int, Mapping[str, tuple[int, int]]], quorum: Sequence[int]) -> Optional[str]:
    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "The controller does not support the given upgrade type."
    current = finalized.get(name, 0)
    if level < 0:
        return "A feature version cannot be less than 0."
    spec = FEATURES.get(name)
    reason = _not_supported(level, f"Local controller {node_id}", spec.supported if spec else (0, 0))
    if reason is not None:
        return reason
    for b, ranges in sorted(brokers.items()):
        reason = _not_supported(level, f"Broker {b}", ranges.get(name, (0, 0)))
        if reason is not None:
            return reason
    for c, ranges in sorted(controllers.items()):
        if c != node_id:
            reason = _not_supported(level, f"Controller {c}", ranges.get(name, (0, 0)))
            if reason is not None:
                return reason
    for c in quorum:
        if c != node_id and c not in controllers:
            return f"controller {c} has not registered, and may not support this feature"
    if level < current and kind == UPGRADE:
        return ("Can't downgrade the version of this feature without setting the upgrade type "
                "to either safe or unsafe downgrade.")
    if level > current and kind != UPGRADE:
        return "Can't downgrade to a newer version."
    if name == KRAFT_VERSION:
        return None if kind == UPGRADE else "Can't downgrade the version of this feature."
    if spec is None:  # level 0 of a feature nobody knows
        return f"Feature {name} not found."
    return None


def update_features_response(version: int, updates: Sequence[tuple[str, int, int]],
                             outcome: FeatureUpdates) -> Any:
    """The UpdateFeatures answer as Kafka's controller builds it: on error only the top-level
    error; else (v0-1) a result per update of the request."""
    cls = response_codec(ApiKey.UPDATE_FEATURES).cls
    if outcome.error_code:
        return cls(error_code=outcome.error_code, error_message=outcome.error_message)
    results = [cls.UpdatableFeatureResult(feature=name, error_code=0, error_message="NONE")
               for name, _, _ in updates] if version <= 1 else []
    return cls(error_code=0, error_message=None, results=results)


def set_api_versions_features(resp: Any, version: int, finalized: Mapping[str, int], epoch: int) -> None:
    """Fill an ApiVersions answer's features (v3+ tagged fields): kproto's supported ranges,
    the ``finalized`` levels and their epoch. Below v4 a supported range starting at 0 is
    left out, as Kafka does (clients before 3.9 cannot read one)."""
    cls = type(resp)
    resp.supported_features = [cls.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
                               for n, (lo, hi) in supported_features().items() if lo > 0 or version >= 4]
    resp.finalized_features = [cls.FinalizedFeatureKey(name=n, max_version_level=v, min_version_level=v)
                               for n, v in finalized.items() if v > 0]
    resp.finalized_features_epoch = epoch
