"""State brokers once kept in JSON files, moved into the metadata log.

Before the controller kept them as records, a broker (of a kproto cluster, or the single
broker) held dynamic configs in ``kproto-configs.json``, ACLs and SCRAM credentials in
``kproto-security.json`` and (the single broker) its feature levels in ``kproto-features.json``
in its data dir. A cluster or a single broker started over such a directory reads them once:
:func:`read_legacy_state` gathers the files of every broker, :func:`migration_records` turns
what the metadata image lacks into ConfigRecords, AccessControlEntryRecords,
UserScramCredentialRecords and FeatureLevelRecords for the active controller to write, and
:func:`retire_files` renames the files to ``*.migrated`` once those are committed.
"""
from __future__ import annotations

import json
import os
from dataclasses import astuple, dataclass, field
from typing import Any, Callable, Iterable, Optional

from kproto.broker.configs import CONFIGS_FILE, TOPIC_CONFIGS, broker_config_def
from kproto.broker.features import FEATURES_FILE
from kproto.broker.log import BrokerError
from kproto.broker.security.acl import SECURITY_FILE, AclBinding, SecurityFile
from kproto.broker.security.auth import SCRAM_MECHANISM_IDS, ScramCredential, scram_records
from kproto.codecs import metadata_record
from kproto.codecs.primitives import Uuid
from kproto.storage.metadata_image import (BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage,
                                           RecordType)

__all__ = ["LegacyState", "read_legacy_state", "migration_records", "retire_files", "MIGRATED_SUFFIX"]

#: what a migrated file is renamed to (its name plus this)
MIGRATED_SUFFIX = ".migrated"


@dataclass
class LegacyState:
    """What the brokers' JSON files held (later brokers' values win where they differ)."""

    #: topic name -> (topic id as the file has it, configs)
    topic_configs: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    #: broker resource name ("" = cluster default) -> dynamic configs
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    acls: set[AclBinding] = field(default_factory=set)
    #: (SCRAM mechanism name, user) -> credential
    scram: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)
    #: every (SCRAM mechanism name, user) the files name, deleted ones too
    scram_keys: set[tuple[str, str]] = field(default_factory=set)
    #: finalized feature levels (name -> level; None: no features file)
    features: Optional[dict[str, int]] = None
    #: the files read (renamed by retire_files)
    files: list[str] = field(default_factory=list)
    #: files or entries that could not be read, and why
    problems: list[str] = field(default_factory=list)


def read_legacy_state(data_dirs: Iterable[str]) -> LegacyState:
    """The state kept in the JSON files of these broker data dirs (missing files: nothing)."""
    out = LegacyState()
    for d in data_dirs:
        path = os.path.join(d, CONFIGS_FILE)
        if os.path.exists(path):
            out.files.append(path)
            _read_configs(path, out)
        path = os.path.join(d, SECURITY_FILE)
        if os.path.exists(path):
            out.files.append(path)
            sf = SecurityFile(d)
            acls, scram = sf.load()
            out.problems += sf.load_problems
            out.acls.update(acls)
            # None: a credential of the static users deleted (a cluster has no static ones)
            out.scram.update({k: c for k, c in scram.items() if c is not None})
            out.scram_keys.update(scram)
        path = os.path.join(d, FEATURES_FILE)
        if os.path.exists(path):
            out.files.append(path)
            try:
                with open(path, "rb") as f:
                    doc = json.loads(f.read())
                out.features = {str(k): int(v) for k, v in doc["features"].items()}
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                out.problems.append(f"{path}: {exc!r}")
    return out


def _read_configs(path: str, out: LegacyState) -> None:
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        topics, broker = doc.get("topics", {}), doc.get("broker", {})
        for name, entry in topics.items():
            configs = {str(k): str(v) for k, v in entry.get("configs", {}).items()}
            out.topic_configs[name] = (str(entry.get("topic_id")), configs)
        for key, configs in broker.items():
            out.broker_configs.setdefault(str(key), {}).update(
                {str(k): str(v) for k, v in configs.items()})
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        out.problems.append(f"{path}: {exc!r}")


def migration_records(state: LegacyState, image: MetadataImage,
                      new_acl_id: Callable[[], Uuid]) -> list[tuple[Any, int]]:
    """The records that bring into ``image`` what ``state`` has and it lacks: the configs of
    topics that still exist under the same id (values checked as CreateTopics checks them)
    and dynamic broker configs, ACLs not there yet, SCRAM credentials of users without one
    for the mechanism, the levels of a features file where the image's differ. Entries the
    image already has are left as it has them; ``new_acl_id`` gives each ACL its id (the
    controller's)."""
    config = metadata_record(RecordType.CONFIG)
    out: list[tuple[Any, int]] = []
    for name, (topic_id, configs) in sorted(state.topic_configs.items()):
        t = image.topics.get(name)
        if t is None or str(t.topic_id) != topic_id:
            continue  # deleted, or made again under the same name since
        have = image.configs.get((TOPIC_RESOURCE, name), {})
        for key, value in sorted(configs.items()):
            d = TOPIC_CONFIGS.get(key)
            if d is None or key in have:
                continue
            try:
                value = d.check(value)
            except BrokerError as exc:
                state.problems.append(f"{name}: {exc.message}")
                continue
            out.append((config(resource_type=TOPIC_RESOURCE, resource_name=name, name=key,
                               value=value), 0))
    for resource, configs in sorted(state.broker_configs.items()):
        have = image.configs.get((BROKER_RESOURCE, resource), {})
        out += [(config(resource_type=BROKER_RESOURCE, resource_name=resource, name=k, value=v), 0)
                for k, v in sorted(configs.items()) if broker_config_def(k) is not None and k not in have]
    present = {AclBinding(*astuple(e)) for e in image.acls.values()}
    acl = metadata_record(RecordType.ACCESS_CONTROL_ENTRY)
    for b in sorted(state.acls - present):
        out.append((acl(id=new_acl_id(), resource_type=b.resource_type, resource_name=b.resource_name,
                        pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                        operation=b.operation, permission_type=b.permission), 0))
    out += scram_records({(mech, user): c for (mech, user), c in sorted(state.scram.items())
                          if (SCRAM_MECHANISM_IDS.get(mech), user) not in image.scram})
    if state.features is not None:
        feature = metadata_record(RecordType.FEATURE_LEVEL)
        levels = {n: 0 for n in image.features} | state.features
        out += [(feature(name=n, feature_level=lv), 0) for n, lv in sorted(levels.items())
                if image.features.get(n, 0) != lv]
    return out


def retire_files(state: LegacyState) -> None:
    """Rename the files read to ``<name>.migrated`` (kept as a record, never read again)."""
    for path in state.files:
        if os.path.exists(path):
            os.replace(path, path + MIGRATED_SUFFIX)
