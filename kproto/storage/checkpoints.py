"""The small text files of a log directory (sans-I/O: bytes in, objects out, and back).

* ``leader-epoch-checkpoint`` and the root ``*-offset-checkpoint`` files: Kafka's CheckpointFile
  format, ``version\\ncount\\n`` then one space-separated entry per line;
* ``partition.metadata``: ``version: 0\\ntopic_id: <base64url uuid>`` (no final newline);
* ``meta.properties``: a Java properties file;
* ``.kafka_cleanshutdown``: every form Kafka has written (see :class:`CleanShutdown`).

Kafka creates checkpoint files empty and reads an empty file (or one holding only the version
line) as "no entries"; so do we.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Mapping

from kproto.errors import DecodeError
from kproto.javahash import concurrent_hashmap_capacity, java_hash_order, java_string_hash

ROOT_CHECKPOINTS = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                    "log-start-offset-checkpoint", "cleaner-offset-checkpoint")
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
QUORUM_STATE = "quorum-state"


def _text(data: bytes | memoryview | str, what: str, encoding: str = "utf-8") -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode(encoding)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not {encoding} text", what=what, offset=exc.start) from None


def _int(token: str, what: str, path: str) -> int:
    # Java's Integer/Long.parseLong: optional sign and ASCII digits only
    body = token[1:] if token[:1] in "+-" else token
    if not body or not body.isascii() or not body.isdigit():
        raise DecodeError(f"not an integer: {token[:40]!r}", what=what, path=path)
    return int(token)


def _parse_checkpoint(data: bytes | memoryview | str, what: str, arity: int
                      ) -> tuple[int, list[list[str]]]:
    """Version and the entry lines (each split into ``arity`` tokens) of a CheckpointFile.

    As Kafka's ``CheckpointFile`` reader: an empty file, or one that ends after the version
    line, has no entries (version 0 when there is no version line)."""
    lines = _text(data, what).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return 0, []
    version = _int(lines[0].strip(), what, "version")
    if len(lines) == 1:
        return version, []
    count = _int(lines[1].strip(), what, "count")
    rows = []
    for i, line in enumerate(lines[2:]):
        tokens = line.split()
        if len(tokens) != arity:
            raise DecodeError(f"malformed line {line[:80]!r}", what=what, path=f"entries[{i}]")
        rows.append(tokens)
    if count != len(rows):
        raise DecodeError(f"expected {count} entries but found {len(rows)}", what=what,
                          path="count")
    return version, rows


def _encode_checkpoint(version: int, rows: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in [str(version), str(len(rows)), *rows]).encode()


@dataclass(frozen=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


@dataclass(frozen=True)
class LeaderEpochCheckpoint:
    """``leader-epoch-checkpoint``: where each leader epoch starts."""

    entries: list[EpochEntry] = field(default_factory=list)
    version: int = 0

    @classmethod
    def parse(cls, data: bytes | memoryview | str) -> LeaderEpochCheckpoint:
        """Parse the file's bytes; DecodeError if malformed."""
        version, rows = _parse_checkpoint(data, LEADER_EPOCH_CHECKPOINT, 2)
        if version != 0:
            raise DecodeError(f"unknown version {version}", what=LEADER_EPOCH_CHECKPOINT)
        return cls([EpochEntry(_int(e, LEADER_EPOCH_CHECKPOINT, f"entries[{i}].epoch"),
                               _int(o, LEADER_EPOCH_CHECKPOINT, f"entries[{i}].start_offset"))
                    for i, (e, o) in enumerate(rows)], version)

    def encode(self) -> bytes:
        """The file's bytes, as the broker writes them."""
        return _encode_checkpoint(self.version, [f"{e.epoch} {e.start_offset}" for e in self.entries])

    def epoch_for(self, offset: int) -> int:
        """Leader epoch in force at ``offset`` (-1 if before the first entry)."""
        epoch = -1
        for e in self.entries:
            if e.start_offset > offset:
                break
            epoch = e.epoch
        return epoch

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return {"version": self.version,
                "entries": [{"epoch": e.epoch, "start_offset": e.start_offset} for e in self.entries]}


@dataclass(frozen=True)
class OffsetCheckpoint:
    """A root ``*-offset-checkpoint`` file: an offset per topic partition."""

    entries: list[tuple[str, int, int]] = field(default_factory=list)  # topic, partition, offset
    version: int = 0

    @classmethod
    def parse(cls, data: bytes | memoryview | str, what: str = "offset-checkpoint") -> OffsetCheckpoint:
        """Parse the file's bytes; DecodeError if malformed."""
        version, rows = _parse_checkpoint(data, what, 3)
        if version != 0:
            raise DecodeError(f"unknown version {version}", what=what)
        return cls([(t, _int(p, what, f"entries[{i}].partition"), _int(o, what, f"entries[{i}].offset"))
                    for i, (t, p, o) in enumerate(rows)], version)

    def encode(self) -> bytes:
        """The file's bytes, as the broker writes them."""
        return _encode_checkpoint(self.version, [f"{t} {p} {o}" for t, p, o in self.entries])

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return {"version": self.version, "count": len(self.entries),
                "entries": [{"topic": t, "partition": p, "offset": o} for t, p, o in self.entries]}


def _check_uuid(text: str, what: str) -> None:
    """Kafka's ``Uuid.fromString``: 22 base64url characters (no padding) for 16 bytes."""
    from kproto.codecs.primitives import Uuid

    try:
        if len(text) != 22:
            raise ValueError
        Uuid(text)
    except (ValueError, TypeError):
        raise DecodeError(f"{text[:40]!r} is not a base64url uuid", what=what) from None


@dataclass(frozen=True)
class PartitionMetadata:
    """``partition.metadata``: the topic id of the partition."""

    topic_id: str
    version: int = 0

    @classmethod
    def parse(cls, data: bytes | memoryview | str) -> PartitionMetadata:
        """Parse the file's bytes; DecodeError if malformed."""
        what = PARTITION_METADATA
        lines = _text(data, what).split("\n")
        if len(lines) < 2:
            raise DecodeError("expected version and topic_id lines", what=what)
        fields = []
        for name, line in zip(("version", "topic_id"), lines):
            key, sep, value = line.partition(": ")
            if key != name or not sep:
                raise DecodeError(f"malformed line {line[:80]!r}", what=what, path=name)
            fields.append(value.strip())
        version = _int(fields[0], what, "version")
        if version != 0:
            raise DecodeError(f"unknown version {version}", what=what, path="version")
        _check_uuid(fields[1], what)
        return cls(fields[1], version)

    def encode(self) -> bytes:
        """The file's bytes, as the broker writes them."""
        return f"version: {self.version}\ntopic_id: {self.topic_id}".encode()

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return {"version": self.version, "topic_id": self.topic_id}


@dataclass(frozen=True)
class QuorumState:
    """``quorum-state`` of ``__cluster_metadata-0``: the KRaft election state (JSON, kept as
    read: ``leaderId``, ``leaderEpoch``, ``votedId``, ``currentVoters``, ``data_version``...)."""

    fields: dict

    @classmethod
    def parse(cls, data: bytes | memoryview | str) -> QuorumState:
        """Parse the file's bytes; DecodeError if malformed."""
        what = QUORUM_STATE
        try:
            doc = json.loads(_text(data, what))
        except json.JSONDecodeError as exc:
            raise DecodeError(f"not JSON: {exc.msg}", what=what, offset=exc.pos) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("leaderEpoch"), int):
            raise DecodeError("expected an object with leaderEpoch", what=what)
        voters = doc.get("currentVoters") or []
        if not isinstance(voters, list) or not all(isinstance(v, dict) for v in voters) \
                or not isinstance(doc.get("leaderId", -1), int):
            raise DecodeError("currentVoters must be a list of {voterId} objects and leaderId "
                              "an integer", what=what)
        return cls(doc)

    @property
    def leader_id(self) -> int:
        """The leader's node id (-1 when unknown)."""
        return self.fields.get("leaderId", -1)

    @property
    def leader_epoch(self) -> int:
        """The epoch of the last election."""
        return self.fields["leaderEpoch"]

    def to_json(self) -> dict:
        """The file's JSON object."""
        return dict(self.fields)


# -- Java properties -------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_properties(data: bytes | memoryview | str) -> dict[str, str]:
    """``java.util.Properties.load`` (ISO-8859-1 bytes): comments, ``=``/``:``/space separators,
    backslash escapes and line continuations."""
    text = data if isinstance(data, str) else bytes(data).decode("latin-1")
    props: dict[str, str] = {}
    logical, pending = [], ""
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(" \t\f")  # continuation lines lose their indent too
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        i, n = 0, len(line)
        while i < n and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = line[:i]
        while i < n and line[i] in " \t\f":
            i += 1
        if i < n and line[i] in "=:":
            i += 1
        while i < n and line[i] in " \t\f":
            i += 1
        props[_unescape(key)] = _unescape(line[i:])
    return props


def _escape(s: str, is_key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def _properties_order(keys: list[str]) -> list[str]:
    # Properties is backed by a ConcurrentHashMap(8); store() walks it in table order, which is
    # what a broker's meta.properties shows
    return java_hash_order(keys, java_string_hash, concurrent_hashmap_capacity(len(keys)))


def encode_properties(props: Mapping[str, str], when: float | None = None) -> bytes:
    """``Properties.store(out, "")`` as Kafka writes ``meta.properties``: an empty comment, the
    date comment, then ``key=value`` lines in the order Java would iterate them."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(when))
    lines = ["#", f"#{stamp}"]
    lines += [f"{_escape(k, True)}={_escape(props[k], False)}" for k in _properties_order(list(props))]
    return "".join(line + "\n" for line in lines).encode("latin-1")


@dataclass(frozen=True)
class MetaProperties:
    """``meta.properties`` at the root of a log dir (``version``, ``cluster.id``, ``node.id``,
    ``directory.id``; kept as the raw string properties)."""

    properties: dict[str, str]

    @classmethod
    def parse(cls, data: bytes | memoryview | str) -> MetaProperties:
        """Parse the file's bytes; DecodeError without an integer ``version`` (Kafka refuses
        to start on such a file)."""
        props = parse_properties(data)
        version = props.get("version")
        if version is None:
            raise DecodeError("no version property", what=META_PROPERTIES)
        _int(version.strip(), META_PROPERTIES, "version")
        return cls(props)

    def encode(self, when: float | None = None) -> bytes:
        """The file's bytes, as the broker writes them."""
        return encode_properties(self.properties, when)

    @property
    def cluster_id(self) -> str | None:
        """``cluster.id``."""
        return self.properties.get("cluster.id")

    @property
    def node_id(self) -> int | None:
        """``node.id`` (``broker.id`` on ZooKeeper-era brokers) as an int."""
        v = self.properties.get("node.id", self.properties.get("broker.id"))
        return int(v) if v is not None and v.lstrip("-").isdigit() else None

    @property
    def directory_id(self) -> str | None:
        """``directory.id`` (KRaft, JBOD)."""
        return self.properties.get("directory.id")

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files."""
        return dict(sorted(self.properties.items()))


_CLEAN_SHUTDOWN_FORMS = ("empty", "text", "json-strings", "json")


@dataclass(frozen=True)
class CleanShutdown:
    """``.kafka_cleanshutdown``: present after a clean shutdown. ``form`` is how it was written,
    one of every form Kafka has used:

    * ``empty``: brokers before KIP-966 (no broker epoch; ``broker_epoch`` is None);
    * ``text``: ``version: 0\\nbrokerEpoch: N`` (the first KIP-966 handler, in Scala);
    * ``json-strings``: ``{"broker_epoch":"N","version":"0"}`` (a Jackson map of strings);
    * ``json``: ``{"version":0,"brokerEpoch":N}`` (Kafka 3.7 on).

    ``encode`` writes the same form back, byte for byte.
    """

    broker_epoch: int | None
    version: int = 0
    form: str = "json"

    @classmethod
    def parse(cls, data: bytes | memoryview | str) -> CleanShutdown:
        """Parse the file's bytes; DecodeError for contents Kafka has never written."""
        what = CLEAN_SHUTDOWN
        text = _text(data, what)
        if not text.strip():
            return cls(None, 0, "empty")
        if text.lstrip().startswith("{"):
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DecodeError(f"not JSON: {exc.msg}", what=what, offset=exc.pos) from None
            if not isinstance(doc, dict):
                raise DecodeError("expected a JSON object", what=what)
            if isinstance(doc.get("version"), int) and isinstance(doc.get("brokerEpoch"), int):
                return cls(doc["brokerEpoch"], doc["version"], "json")
            if isinstance(doc.get("version"), str) and isinstance(doc.get("broker_epoch"), str):
                return cls(_int(doc["broker_epoch"], what, "broker_epoch"),
                           _int(doc["version"], what, "version"), "json-strings")
            raise DecodeError("expected {version, brokerEpoch} (or {version, broker_epoch} "
                              "as strings)", what=what)
        fields = {}
        for name, line in zip(("version", "brokerEpoch"), text.split("\n")):
            key, sep, value = line.partition(":")
            if key != name or not sep or not value[:1].isspace():
                raise DecodeError(f"not a form Kafka writes: {line[:60]!r}", what=what, path=name)
            fields[name] = _int(value.strip(), what, name)
        if len(fields) != 2:
            raise DecodeError("not a form Kafka writes: missing brokerEpoch line", what=what)
        return cls(fields["brokerEpoch"], fields["version"], "text")

    def encode(self) -> bytes:
        """The file's bytes, as the broker writes them (in this object's ``form``)."""
        if self.form == "empty":
            return b""
        if self.form == "text":
            return f"version: {self.version}\nbrokerEpoch: {self.broker_epoch}".encode()
        if self.form == "json-strings":
            # Jackson writes the java.util.HashMap the handler filled, in its iteration order
            values = {"version": str(self.version), "broker_epoch": str(self.broker_epoch)}
            return json.dumps({k: values[k] for k in java_hash_order(values)},
                              separators=(",", ":")).encode()
        if self.form == "json":
            return json.dumps({"version": self.version, "brokerEpoch": self.broker_epoch},
                              separators=(",", ":")).encode()
        raise ValueError(f"unknown form {self.form!r} (one of {', '.join(_CLEAN_SHUTDOWN_FORMS)})")

    def to_json(self) -> dict:
        """The JSON form used by the fixtures' ``expected/`` files (``form`` added when the
        file is not in Kafka 3.7's JSON form)."""
        doc: dict = {"version": self.version, "brokerEpoch": self.broker_epoch}
        if self.form != "json":
            doc["form"] = self.form
        return doc
