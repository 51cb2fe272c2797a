"""The declarative form of a Kafka message schema.

A schema is a tree of :class:`Field` under a :class:`Message`. It states facts only (names, types,
version ranges, nullability, tags, defaults); the codec engine in :mod:`kproto.codecs` turns a
schema and a version into specialised encoders and decoders.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, Mapping, Optional, Sequence, Tuple

PRIMITIVE_TYPES = frozenset({
    "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64",
    "string", "bytes", "records", "uuid",
})


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; ``hi`` None means open-ended, an empty range is ``none``."""

    lo: int
    hi: Optional[int]

    @classmethod
    def parse(cls, text: Optional[str]) -> "Versions":
        if text is None or text == "none":
            return NONE
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.hi < self.lo

    def intersect(self, other: "Versions") -> "Versions":
        lo = max(self.lo, other.lo)
        if self.hi is None:
            hi = other.hi
        elif other.hi is None:
            hi = self.hi
        else:
            hi = min(self.hi, other.hi)
        return Versions(lo, hi)

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        if self.hi == self.lo:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"

    def __repr__(self) -> str:
        return f"Versions({str(self)!r})"


NONE = Versions(0, -1)


def snake_case(name: str) -> str:
    """``ThrottleTimeMs`` -> ``throttle_time_ms``; ``IsKRaftController`` -> ``is_kraft_controller``."""
    name = name.replace("KRaft", "Kraft")
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    if keyword.iskeyword(s) or s.startswith("_"):
        s += "_"
    return s


def json_name(name: str) -> str:
    """Kafka's JSON key: the spec name with its first letter lower-cased."""
    return name[:1].lower() + name[1:]


@dataclass(eq=False)
class Field:
    """One field of a struct, as the spec states it."""

    name: str
    type: str
    versions: str
    nullable: Optional[str] = None
    default: Optional[str] = None
    tagged: Optional[str] = None
    tag: Optional[int] = None
    ignorable: bool = False
    flexible: Optional[str] = None       # field-level override of the message's flexible versions
    entity: Optional[str] = None
    map_key: bool = False
    zero_copy: bool = False
    fields: Optional[Sequence["Field"]] = None   # inline struct definition

    def __post_init__(self) -> None:
        self.attr = snake_case(self.name)
        self.json_key = json_name(self.name)
        self.version_range = Versions.parse(self.versions)
        self.nullable_range = Versions.parse(self.nullable)
        self.tagged_range = Versions.parse(self.tagged)
        self.flexible_range = Versions.parse(self.flexible) if self.flexible is not None else None
        t = self.type
        self.is_array = t.startswith("[]")
        self.element_type = t[2:] if self.is_array else t
        self.is_struct_type = self.element_type not in PRIMITIVE_TYPES

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {self.versions!r})"


@dataclass(eq=False)
class Struct:
    """A named struct: the message itself, an inline struct, or a common struct."""

    name: str
    fields: Sequence[Field]
    versions: str = "0+"

    def __post_init__(self) -> None:
        self.version_range = Versions.parse(self.versions)


@dataclass(eq=False)
class Message:
    """A whole message spec: a request, response, header, data message or internal record."""

    name: str
    kind: str                      # request | response | header | data | metadata
    valid: str
    flexible: str
    fields: Sequence[Field]
    api_key: Optional[int] = None
    deprecated: Optional[str] = None
    listeners: Sequence[str] = ()
    latest_version_unstable: bool = False
    common_structs: Sequence[Struct] = field(default_factory=tuple)
    source: str = ""               # e.g. "message", "metadata", "group-coordinator"
    # which Kafka release defines which versions: version range -> release ("0-2": "3.9")
    releases: Mapping[str, str] = field(default_factory=dict)
    aliases: Sequence[str] = ()    # names older releases gave this message

    def __post_init__(self) -> None:
        self.valid_range = Versions.parse(self.valid)
        self.flexible_range = Versions.parse(self.flexible)
        self.deprecated_range = Versions.parse(self.deprecated)
        self.release_ranges: Tuple[Tuple[Versions, str], ...] = tuple(
            (Versions.parse(r), name) for r, name in self.releases.items())
        self._structs: Optional[dict] = None

    def release(self, version: int) -> Optional[str]:
        """The Kafka release whose spec defines ``version`` (None if no release does)."""
        for r, name in self.release_ranges:
            if version in r:
                return name
        return None

    @property
    def versions(self) -> range:
        r = self.valid_range
        return range(r.lo, (r.hi if r.hi is not None else r.lo) + 1)

    def structs(self) -> dict:
        """Every struct of the message by name (the message itself under its own name)."""
        if self._structs is None:
            out = {self.name: Struct(self.name, self.fields, self.valid)}
            common = {s.name: s for s in self.common_structs}

            def walk(fields: Sequence[Field]) -> None:
                for f in fields:
                    if f.fields is not None:
                        out[f.element_type] = Struct(f.element_type, f.fields, f.versions)
                        walk(f.fields)

            walk(self.fields)
            for s in self.common_structs:
                out[s.name] = s
                walk(s.fields)
            for f in self.walk_fields():
                if f.is_struct_type and f.element_type not in out and f.element_type not in common:
                    raise ValueError(f"{self.name}: unknown type {f.type} of field {f.name}")
            self._structs = out
        return self._structs

    def walk_fields(self) -> Iterator[Field]:
        def walk(fields: Sequence[Field]) -> Iterator[Field]:
            for f in fields:
                yield f
                if f.fields is not None:
                    yield from walk(f.fields)

        yield from walk(self.fields)
        for s in self.common_structs:
            yield from walk(s.fields)
