"""Topic ids named from the traffic itself (sans-I/O).

Fetch v13+, Produce v13 and other 4.x requests name topics by id only. The capture's own
Metadata responses (and CreateTopics v7+ / DescribeTopicPartitions responses, which name ids as
well) say which name each id has. Ids are learnt per cluster: the broker that answered and the
brokers a Metadata response lists (by address and port) belong to its ``cluster_id``, so a
Metadata answer on one connection names the ids used on any connection to the same cluster.
A broker whose cluster is not known (its address is advertised by host name, say) falls back to
every cluster seen, when they agree on the id's name.
"""
from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any, Optional

from kproto.capture.exchange import Endpoint
from kproto.capture.walk import Leaf, walker
from kproto.codecs import message
from kproto.codecs.objects import MessageObject
from kproto.schemas.model import Versions

__all__ = ["TopicNames", "topic_ids"]

_ZERO = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID in Kafka's base64 form


class TopicNames:
    """Topic id (Kafka's base64 text) -> name, per cluster, fed with decoded responses."""

    def __init__(self) -> None:
        self.clusters: dict[Optional[str], dict[str, str]] = {}  # cluster id -> id -> name
        self.cluster_of: dict[Endpoint, Optional[str]] = {}      # broker -> its cluster id

    def learn(self, broker: Endpoint, response: Any) -> None:
        """Remember what a Metadata, CreateTopics or DescribeTopicPartitions response names."""
        cluster = getattr(response, "cluster_id", None)
        if cluster is not None or broker not in self.cluster_of:
            self.cluster_of[broker] = cluster
        cluster = self.cluster_of[broker]
        for b in getattr(response, "brokers", None) or []:
            try:
                ip = _packed_ip(b.host)
            except (AttributeError, TypeError):  # no host, or one that cannot be looked up
                continue
            if ip is None:
                continue  # a host name: its address is not in the capture
            self.cluster_of.setdefault(Endpoint(ip, b.port), cluster)
        names = self.clusters.setdefault(cluster, {})
        for t in getattr(response, "topics", None) or []:
            tid, name = getattr(t, "topic_id", None), getattr(t, "name", None)
            if tid is not None and name:
                text = str(tid)
                if text != _ZERO:
                    names[text] = name

    def name(self, broker: Endpoint, topic_id: str) -> Optional[str]:
        """The name of a topic id used on a connection to ``broker``, or None."""
        if broker in self.cluster_of:
            found = self.clusters.get(self.cluster_of[broker], {}).get(topic_id)
            if found is not None:
                return found
        seen = {n[topic_id] for n in self.clusters.values() if topic_id in n}
        return seen.pop() if len(seen) == 1 else None

    def for_broker(self, broker: Endpoint) -> Mapping[str, str]:
        """A read-only mapping id -> name as seen from connections to ``broker``."""
        return _BrokerView(self, broker)


@functools.lru_cache(maxsize=4096)  # a capture's Metadata responses list the same brokers
def _packed_ip(host: Any) -> Optional[bytes]:
    """The packed address of an IP address's text; None for anything else (a host name)."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return None


class _BrokerView(Mapping[str, str]):
    def __init__(self, names: TopicNames, broker: Endpoint) -> None:
        self._names, self._broker = names, broker

    def __getitem__(self, topic_id: str) -> str:
        found = self._names.name(self._broker, topic_id)
        if found is None:
            raise KeyError(topic_id)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter({t for n in self._names.clusters.values() for t in n if t in self})

    def __len__(self) -> int:
        return sum(1 for _ in self)


def topic_ids(obj: Any, version: Optional[int] = None) -> list[str]:
    """Every non-zero topic id (text) of a message object that names its topic by id only (no
    ``name``/``topic`` beside it), in field order, each once. ``version``: the body's, when
    known (bodies whose version cannot name a topic by id alone are not walked)."""
    if not _may_name_ids(type(obj).__name__, version):
        return []  # most bodies: no walk over their objects
    out: dict[str, None] = {}
    walker(type(obj), _TOPIC_IDS)(obj, out)
    return list(out)


@functools.lru_cache(maxsize=None)
def _may_name_ids(message_name: str, version: Optional[int]) -> bool:
    """Whether a message (at ``version``, or at any) can name a topic by id alone: a struct of
    its schema has a TopicId and its name field (Name or Topic) is missing or nullable."""
    try:
        schema = message(message_name).schema
    except KeyError:
        return True

    def present(spec: Optional[str]) -> bool:
        if spec is None:
            return False
        r = Versions.parse(spec)
        return not r.empty if version is None else version in r

    structs = ([schema.fields] + [c.fields for c in schema.common_structs]
               + [f.fields for f in schema.walk_fields() if f.fields])
    for fields in structs:
        # by attribute: coordinator records spell their fields camelCase (topicId)
        if not any(f.attr == "topic_id" and present(f.versions) for f in fields):
            continue
        named = [f for f in fields if f.attr in ("name", "topic") and present(f.versions)]
        if not named or present(named[0].nullable) or version is None:
            return True
    return False


def _walk(obj: Any, out: dict[str, None]) -> None:
    for attr in obj._fields:
        v = getattr(obj, attr)
        if isinstance(v, list):
            if v and isinstance(v[0], MessageObject):
                for item in v:
                    _walk(item, out)
        elif isinstance(v, MessageObject):
            _walk(v, out)
        elif attr == "topic_id" and v is not None:
            text = str(v)
            if text != _ZERO and not (getattr(obj, "name", None) or getattr(obj, "topic", None)):
                out[text] = None


_TOPIC_IDS = Leaf(lambda f: f.attr == "topic_id" and not f.is_array,
                  "if v is not None:\n"
                  "    text = str(v)\n"
                  "    if text != ZERO and not (getattr(o, 'name', None) or getattr(o, 'topic', None)):\n"
                  "        out[text] = None", _walk, ZERO=_ZERO)
