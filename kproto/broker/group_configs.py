"""Group configs (KIP-848/KIP-932's dynamic per-group settings, Kafka's ``GroupConfig``), sans-I/O.

IncrementalAlterConfigs and DescribeConfigs of resource type GROUP (32) set and show them; the
share-group coordinator and share-partitions read theirs through :meth:`GroupConfigs.value`,
which falls back to the broker's ``group.*`` setting. The names, defaults, types and checks are
Apache Kafka 4.4.0's (its DescribeConfigs of a group lists the same 21).

They are kept as Kafka keeps them: ConfigRecords of resource type GROUP in the cluster metadata
log. :class:`GroupConfigs` reads them from and writes them through a :class:`GroupConfigStore`
(the single broker's metadata log); :func:`group_config_records` makes the records of a change
and :func:`group_configs_of` reads every group's configs out of a metadata image's configs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

from kproto.broker.configs import BOOLEAN, INT, LIST, STRING, ConfigEntry
from kproto.broker.log import BrokerError
from kproto.codecs import metadata_record
from kproto.error_codes import ErrorCode
from kproto.storage.metadata_image import RecordType

__all__ = ["GROUP_RESOURCE", "GROUP_CONFIGS", "GroupConfigs", "GroupConfigStore", "DYNAMIC_GROUP_CONFIG",
           "group_config_records", "group_configs_of"]

#: ConfigResource type GROUP, and DescribeConfigs' source of a group's own value.
GROUP_RESOURCE, DYNAMIC_GROUP_CONFIG = 32, 8
_DEFAULT_CONFIG, _STATIC_BROKER = 5, 4


def _at_least(low: int) -> Callable[[str], Optional[str]]:
    def check(v: str) -> Optional[str]:
        try:
            n = int(v)
        except ValueError:
            return f"Invalid value {v} for configuration {{name}}: Not a number of type INT"
        return None if n >= low else f"Invalid value {v} for configuration {{name}}: Value must be at least {low}"
    return check


def _one_of(*allowed: str) -> Callable[[str], Optional[str]]:
    def check(v: str) -> Optional[str]:
        return None if v in allowed else (f"Invalid value {v} for configuration {{name}}: String must be one "
                                          f"of: {', '.join(allowed)}")
    return check


def _offset_reset(v: str) -> Optional[str]:
    if v in ("earliest", "latest") or v.startswith("by_duration:"):
        return None
    return (f"Invalid value {v} for configuration {{name}}: Invalid value `{v}` for configuration "
            "{name}. The value must be either 'earliest', 'latest' or of the format "
            "'by_duration:<PnDTnHnMn.nS>'.")


def _boolean(v: str) -> Optional[str]:
    return None if v.lower() in ("true", "false") else \
        f"Invalid value {v} for configuration {{name}}: Expected value to be either true or false"


@dataclass(frozen=True)
class GroupConfigDef:
    """One group config: its default, the broker setting it falls back to, type and check."""

    name: str
    default: str
    type: int
    broker: Optional[str] = None  # BrokerConfig attribute of the broker-wide default
    check: Optional[Callable[[str], Optional[str]]] = None
    #: the broker config it falls back to, as DescribeConfigs names the synonym ("" for none:
    #: the group config's own name)
    synonym: str = "group."

    @property
    def synonym_name(self) -> str:
        if self.synonym == "group.":
            return "group." + self.name
        return self.synonym or self.name


GROUP_CONFIGS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef("consumer.session.timeout.ms", "45000", INT, "group_consumer_session_timeout_ms", _at_least(1)),
    GroupConfigDef("consumer.heartbeat.interval.ms", "5000", INT, "group_consumer_heartbeat_interval_ms",
                   _at_least(1)),
    GroupConfigDef("consumer.assignment.interval.ms", "1000", INT, "group_consumer_assignment_interval_ms",
                   _at_least(0)),
    GroupConfigDef("share.session.timeout.ms", "45000", INT, "group_share_session_timeout_ms", _at_least(1)),
    GroupConfigDef("share.heartbeat.interval.ms", "5000", INT, "group_share_heartbeat_interval_ms", _at_least(1)),
    GroupConfigDef("share.assignment.interval.ms", "1000", INT, "group_share_assignment_interval_ms",
                   _at_least(0)),
    GroupConfigDef("share.record.lock.duration.ms", "30000", INT, "group_share_record_lock_duration_ms",
                   _at_least(1000)),
    GroupConfigDef("share.delivery.count.limit", "5", INT, "group_share_delivery_count_limit", _at_least(2)),
    GroupConfigDef("share.partition.max.record.locks", "2000", INT, "group_share_partition_max_record_locks",
                   _at_least(100)),
    GroupConfigDef("share.auto.offset.reset", "latest", STRING, "share_auto_offset_reset", _offset_reset, ""),
    GroupConfigDef("share.isolation.level", "read_uncommitted", STRING, None,
                   _one_of("read_committed", "read_uncommitted"), ""),
    GroupConfigDef("share.renew.acknowledge.enable", "true", BOOLEAN, None, _boolean, ""),
    GroupConfigDef("errors.deadletterqueue.copy.record.enable", "false", BOOLEAN, None, _boolean, ""),
    GroupConfigDef("errors.deadletterqueue.topic.name", "", STRING, None, None, ""),
    GroupConfigDef("streams.session.timeout.ms", "45000", INT, None, _at_least(1)),
    GroupConfigDef("streams.heartbeat.interval.ms", "5000", INT, None, _at_least(1)),
    GroupConfigDef("streams.num.standby.replicas", "0", INT, None, _at_least(0)),
    GroupConfigDef("streams.initial.rebalance.delay.ms", "3000", INT, None, _at_least(0)),
    GroupConfigDef("streams.assignment.interval.ms", "1000", INT, None, _at_least(0)),
    GroupConfigDef("streams.assignor.name", "sticky", STRING, None, None, "group.streams.assignors"),
    GroupConfigDef("streams.rack.aware.assignment.tags", "", LIST),
)}


def group_config_records(group_id: str, old: Mapping[str, str], new: Mapping[str, str]) -> list[tuple[Any, int]]:
    """The ConfigRecords (record, version) that take group ``group_id``'s configs from ``old``
    to ``new``: one per name whose value changes, a null value for a name removed."""
    record = metadata_record(RecordType.CONFIG)
    return [(record(resource_type=GROUP_RESOURCE, resource_name=group_id, name=n, value=new.get(n)), 0)
            for n in sorted(set(old) | set(new)) if old.get(n) != new.get(n)]


def group_configs_of(configs: Mapping[tuple[int, str], Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Every group's configs among a metadata image's configs (keyed by resource type and name)."""
    return {name: dict(c) for (kind, name), c in configs.items() if kind == GROUP_RESOURCE and c}


class GroupConfigStore(Protocol):
    """Where group configs are kept (the metadata log)."""

    def stored_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's configs, as stored."""
        ...

    def store_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Keep ``configs`` as the group's (empty: none)."""
        ...


class GroupConfigs:
    """Every group's own configs, over the broker's defaults; read from ``store`` at start and
    written through it on every change."""

    def __init__(self, broker_config: Any, store: Optional[GroupConfigStore] = None) -> None:
        self.broker_config = broker_config
        self.store = store
        self.groups: dict[str, dict[str, str]] = store.stored_group_configs() if store is not None else {}

    def _broker_default(self, d: GroupConfigDef) -> tuple[str, int]:
        if d.broker is not None and hasattr(self.broker_config, d.broker):
            v = str(getattr(self.broker_config, d.broker))
            return v, _DEFAULT_CONFIG if v == d.default else _STATIC_BROKER
        return d.default, _DEFAULT_CONFIG

    def value(self, group_id: str, name: str) -> str:
        """The group's value of ``name``: its own, else the broker's default."""
        own = self.groups.get(group_id, {}).get(name)
        return own if own is not None else self._broker_default(GROUP_CONFIGS[name])[0]

    def validate(self, group_id: str, wanted: Mapping[str, Optional[str]]) -> dict[str, str]:
        """The group's configs after a change (None: back to the default), checked as Kafka's
        ``GroupConfig.validate``; :class:`BrokerError` INVALID_CONFIG/INVALID_REQUEST."""
        if not group_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        out: dict[str, str] = {}
        for name, v in wanted.items():
            d = GROUP_CONFIGS.get(name)
            if d is None:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
            if v is None:
                continue
            why = d.check(v) if d.check is not None else None
            if why is not None:
                raise BrokerError(ErrorCode.INVALID_CONFIG, why.replace("{name}", name))
            out[name] = v
        return out

    def current(self, group_id: str) -> dict[str, str]:
        return dict(self.groups.get(group_id, {}))

    def set(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Make ``configs`` the group's own (empty: back to the defaults), and store them."""
        if self.store is not None:
            self.store.store_group_configs(group_id, configs)
        if configs:
            self.groups[group_id] = dict(configs)
        else:
            self.groups.pop(group_id, None)

    def entries(self, group_id: str, synonyms: bool = True) -> list[ConfigEntry]:
        """DescribeConfigs of a group: every group config, its own value (source 8) or the default."""
        own = self.groups.get(group_id, {})
        out = []
        for d in GROUP_CONFIGS.values():
            default, source = self._broker_default(d)
            # Kafka's synonyms: the group's own value, the broker's setting, the default
            syn = [(d.synonym_name, d.default, _DEFAULT_CONFIG)]
            if source == _STATIC_BROKER:
                syn.insert(0, (d.synonym_name, default, _STATIC_BROKER))
            if d.name in own:
                syn.insert(0, (d.name, own[d.name], DYNAMIC_GROUP_CONFIG))
            value, src = (own[d.name], DYNAMIC_GROUP_CONFIG) if d.name in own else (default, source)
            out.append(ConfigEntry(d.name, value, src, synonyms=tuple(syn), type=d.type))
        return out
