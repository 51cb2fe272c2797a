#!/usr/bin/env python3
"""Regenerate ``kproto/schemas`` from the message specs of one or more Apache Kafka releases.

Each argument is one release's specs, oldest first (the newest last), in one of two forms:

* a folder holding Kafka's spec folders (``message/``, ``metadata/``, ``group-coordinator/``, ...),
  each with ``*.json`` specs (JSON with ``//`` and ``/* */`` comments); the release name is the
  folder's name without a leading ``kafka-``;
* the release's own jars, as Maven Central has them: comma-separated ``.jar`` paths, or a folder
  holding them (what ``mvn dependency:copy`` writes). Each jar's specs go to the spec folder of its
  artifact (``kafka-clients``: ``message/``, ``kafka-metadata``: ``metadata/``, ...: see
  ``JAR_FOLDERS``); the release name is the jars' version (``kafka-clients-4.4.0.jar``: 4.4.0).

Either way the name can be given after ``=`` (``PATH=4.3.1``). Adding a release is one more
argument; the three releases of the committed schemas::

    python tools/import_schemas.py ../shared/reference/kafka-3.9 ../shared/reference/kafka-4.3.1 \
        $(ls ~/.m2/repository/org/apache/kafka/*/4.4.0/*-4.4.0.jar | paste -sd,)

The releases are merged into ONE schema set covering the union of their versions:

* every (message, version) is defined by the newest release that has it; where two releases define
  the same version differently (early-access messages redefined), the newest stands. Requests and
  responses are the same message across releases by API key (a renamed one takes the newest name;
  the older names are kept as aliases); other messages by name.
* versions a newer release dropped (Kafka 4.0 narrowed ``validVersions`` and emptied the
  ZooKeeper-era keys) keep their older definition. The merge is field by field: a field that only
  old versions have stays in the merged tree with its old version range, and every version range
  (a field's, its nullability, taggedness, a field-level flexible override, the message's
  flexible and deprecated versions) is recomputed so that each version means exactly what its
  release says. The tool checks this for every (message, version) before writing anything.
* coordinator records (``__consumer_offsets``, ``__transaction_state``): before Kafka 4.0 a key's
  "version" was its record type; 4.x declares keys as ``coordinator-key`` at version 0 with the
  record type as ``apiKey`` (values as ``coordinator-value``). An older key that a newer release
  declares this way is the same bytes at version 0 (checked); an older key no newer release has is
  re-expressed the same way, so every coordinator record is found by its record type.

Each spec becomes one module ``kproto/schemas/<folder>/<snake_name>.py`` stating its facts in
kproto's declarative form (:mod:`kproto.schemas.model`), with ``releases``: which release defines
which versions. Documentation prose is not carried over. ``kproto/schemas/_index.py`` lists them
all and ``kproto/schemas/api_keys.py`` names the API keys.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kproto.codecs.objects import build_classes, stub_source  # noqa: E402
from kproto.schemas.model import Message, Versions, snake_case  # noqa: E402

FOLDERS = ["message", "metadata", "group-coordinator", "transaction-coordinator", "share-coordinator",
           "raft", "streams", "storage"]
COORDINATOR_FOLDERS = {"group-coordinator", "transaction-coordinator", "share-coordinator"}
FIELD_KEYS = {"name", "type", "versions", "about", "fields", "default", "entityType", "ignorable",
              "nullableVersions", "mapKey", "taggedVersions", "tag", "zeroCopy", "flexibleVersions"}
TOP_KEYS = {"type", "name", "validVersions", "flexibleVersions", "fields", "apiKey", "listeners",
            "deprecatedVersions", "commonStructs", "latestVersionUnstable"}
# Where a release's jars keep their specs: artifact -> (folder inside the jar, spec folder here).
# Jars of other artifacts (kafka-server, kafka-tools, ...) hold no specs and are skipped.
JAR_FOLDERS = {
    "kafka-clients": ("common/message", "message"),
    "kafka-metadata": ("common/metadata", "metadata"),
    "kafka-group-coordinator": ("common/message", "group-coordinator"),
    "kafka-transaction-coordinator": ("common/message", "transaction-coordinator"),
    "kafka-share-coordinator": ("common/message", "share-coordinator"),
    "kafka-raft": ("common/message", "raft"),
    "kafka-streams": ("common/message", "streams"),
    "kafka-storage": ("message", "storage"),
}
PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string",
              "bytes", "records", "uuid"}

Spec = Dict[str, Any]


class MergeError(ValueError):
    """The releases cannot be merged into one field tree (the tool writes nothing)."""


def strip_comments(text: str) -> str:
    """Remove ``//`` and ``/* */`` comments outside string literals."""
    out = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_spec(text: str) -> Spec:
    return json.loads(strip_comments(text))


# -- version sets -------------------------------------------------------------------------------

def vset(text: Optional[str], domain: Iterable[int]) -> Set[int]:
    """The versions of ``domain`` that the range ``text`` ("0+", "3-5", "none") holds."""
    r = Versions.parse(text)
    return {v for v in domain if v in r}


def span(versions: Iterable[int]) -> List[Tuple[int, int]]:
    """Contiguous runs of a set of versions: [(lo, hi), ...]."""
    out: List[Tuple[int, int]] = []
    for v in sorted(versions):
        if out and out[-1][1] == v - 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def range_text(lo: int, hi: Optional[int]) -> str:
    return str(Versions(lo, hi))


def fit_range(want: Set[int], domain: Set[int], candidates: Sequence[Optional[str]], what: str,
              open_end: bool = True) -> str:
    """A range text whose versions within ``domain`` are exactly ``want``: the first candidate (the
    specs' own texts, newest first) that fits, else the tightest one."""
    for c in candidates:
        if c is not None and vset(c, domain) == want:
            return c
    if not want:
        return "none"
    runs = span(want)
    lo, hi = runs[0][0], runs[-1][1]
    for text in ([range_text(lo, None)] if open_end else []) + [range_text(lo, hi)]:
        if vset(text, domain) == want:
            return text
    raise MergeError(f"{what}: versions {sorted(want)} are not one range within {sorted(domain)}")


# -- releases -----------------------------------------------------------------------------------

@dataclass
class Release:
    """One Kafka release's specs: name -> (folder, spec), normalised."""

    name: str
    path: Path
    specs: Dict[str, Tuple[str, Spec]] = field(default_factory=dict)


_JAR_NAME = re.compile(r"(?P<artifact>.+?)-(?P<version>\d+(?:\.\d+)*(?:-[A-Za-z0-9.]+)?)\.jar")


def release_jars(path: str) -> List[Path]:
    """The jars of a release argument: comma-separated ``.jar`` paths, or the ``.jar`` files of a
    folder that has no spec folders; [] for a spec folder."""
    if "," in path or path.endswith(".jar"):
        return [Path(p) for p in path.split(",") if p]
    p = Path(path)
    if p.is_dir() and not any((p / f).is_dir() for f in FOLDERS):
        return sorted(p.glob("*.jar"))
    return []


def release_arg(text: str) -> Tuple[Path, str]:
    """``PATH`` or ``PATH=NAME``: the specs (a folder, or jars: see the module's docstring) and the
    release name (folder ``kafka-4.3.1`` -> ``4.3.1``, jar ``kafka-clients-4.4.0.jar`` -> ``4.4.0``)."""
    path, sep, name = text.partition("=")
    jars = release_jars(path)
    if not sep and jars:
        versions = {m.group("version") for m in map(_JAR_NAME.fullmatch, (j.name for j in jars)) if m}
        if len(versions) != 1:
            raise argparse.ArgumentTypeError(f"jars of {len(versions)} versions in {text!r}: name the release")
        name = versions.pop()
    elif not sep:
        name = re.sub(r"^kafka[-_]", "", Path(path).resolve().name)
    if not name:
        raise argparse.ArgumentTypeError(f"no release name for {text!r}")
    return Path(path), name


def jar_specs(jars: Sequence[Path]) -> Iterable[Tuple[str, str, str]]:
    """(spec folder, file name, text) of every spec in a release's jars (by ``JAR_FOLDERS``)."""
    for jar in jars:
        m = _JAR_NAME.fullmatch(jar.name)
        where = JAR_FOLDERS.get(m.group("artifact") if m else "")
        if where is None:
            continue
        inside, folder = where
        with zipfile.ZipFile(jar) as z:
            for entry in sorted(z.namelist()):
                head, _, fname = entry.rpartition("/")
                if head == inside and fname.endswith(".json"):
                    yield folder, fname, z.read(entry).decode("utf-8")


def _normalise_fields(fields: List[Spec], where: str) -> None:
    for f in fields:
        unknown = set(f) - FIELD_KEYS
        if unknown:
            raise ValueError(f"{where}.{f.get('name')}: unknown keys {sorted(unknown)}")
        if "versions" not in f:
            if "taggedVersions" not in f:
                raise ValueError(f"{where}.{f.get('name')}: no versions")
            f["versions"] = f["taggedVersions"]     # a tagged field exists where it is tagged
        f.pop("about", None)
        if "fields" in f:
            _normalise_fields(f["fields"], f"{where}.{f['name']}")


def normalise(spec: Spec) -> Spec:
    """What 4.x specs leave out made explicit (``flexibleVersions``: none, ``fields``: empty, a
    tagged field's ``versions``: its ``taggedVersions``); documentation dropped."""
    unknown = set(spec) - TOP_KEYS
    if unknown:
        raise ValueError(f"{spec.get('name')}: unknown keys {sorted(unknown)}")
    spec = copy.deepcopy(spec)
    spec.setdefault("flexibleVersions", "none")
    spec.setdefault("fields", [])
    _normalise_fields(spec["fields"], spec["name"])
    for cs in spec.get("commonStructs", []):
        cs.pop("about", None)
        _normalise_fields(cs["fields"], f"{spec['name']}.{cs['name']}")
    return spec


def load_release(path: Path, name: str) -> Release:
    """One release's specs from a spec folder or from its jars (see :func:`release_jars`)."""
    rel = Release(name, path)
    jars = release_jars(str(path))
    if jars:
        texts = sorted(jar_specs(jars), key=lambda t: (FOLDERS.index(t[0]), t[1]))
    else:
        texts = [(folder, p.name, p.read_text(encoding="utf-8")) for folder in FOLDERS
                 for p in (sorted((path / folder).glob("*.json")) if (path / folder).is_dir() else [])]
    for folder, _, text in texts:
        spec = normalise(parse_spec(text))
        if spec["name"] in rel.specs:
            raise ValueError(f"{name}: two specs named {spec['name']}")
        rel.specs[spec["name"]] = (folder, spec)
    if not rel.specs:
        raise ValueError(f"{path}: no specs found (expected {', '.join(FOLDERS)} folders or "
                         f"the jars {', '.join(JAR_FOLDERS)})")
    return rel


def valid_set(spec: Spec) -> Set[int]:
    r = Versions.parse(spec["validVersions"])
    if r.empty:
        return set()
    if r.hi is None:
        raise ValueError(f"{spec['name']}: open-ended validVersions")
    return set(range(r.lo, r.hi + 1))


# -- per-version layout (the tool's own check of the merge) ------------------------------------

def layout(spec: Spec, version: int) -> tuple:
    """Everything about ``spec`` at ``version`` that decides bytes, objects and JSON: per struct,
    the fields present in declaration order with name, type, nullability, compactness, tag,
    default and zeroCopy, nested structs expanded."""
    flexible = version in Versions.parse(spec["flexibleVersions"])
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}

    def struct(fields: List[Spec]) -> tuple:
        out = []
        for f in fields:
            if version not in Versions.parse(f["versions"]):
                continue
            t = f["type"]
            elem = t[2:] if t.startswith("[]") else t
            sub = None
            if elem not in PRIMITIVES:
                sub = struct(f["fields"] if "fields" in f else common[elem])
                t = "[]struct" if t.startswith("[]") else "struct"
            tagged = flexible and version in Versions.parse(f.get("taggedVersions"))
            compact = (version in Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f
                       else flexible)
            out.append((f["name"], t, version in Versions.parse(f.get("nullableVersions")), compact,
                        f.get("tag") if tagged else None, _default(f), bool(f.get("zeroCopy")), sub))
        return tuple(out)

    return struct(spec["fields"])


def _default(f: Spec) -> Optional[str]:
    d = f.get("default")
    if isinstance(d, bool):
        return "true" if d else "false"
    return None if d is None else str(d)


# -- merging ------------------------------------------------------------------------------------

@dataclass
class Contribution:
    """What one release says about one struct: its fields, at the versions it defines there."""

    rank: int                    # release index (higher is newer)
    fields: List[Spec]
    present: Set[int]            # versions at which the struct is present and this release rules
    common: Dict[str, List[Spec]]
    flexible: Set[int]           # the message's flexible versions in this release
    valid: Set[int]              # the message's valid versions in this release


class MergedField:
    """One field of the merged tree: its facts, and per version what each release says."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec                      # the newest contributing release's text
        self.name = spec["name"]
        self.present: Set[int] = set()
        self.nullable: Set[int] = set()
        self.tagged: Set[int] = set()
        self.compact: Set[int] = set()
        self.flex_override = False
        self.texts: Dict[str, List[Optional[str]]] = {"versions": [], "nullableVersions": [],
                                                      "taggedVersions": [], "flexibleVersions": []}
        self.subs: List[Contribution] = []    # for struct-typed fields: the struct's contributions
        self.struct_name: Optional[str] = None
        self.inline = False


def _elem(t: str) -> str:
    return t[2:] if t.startswith("[]") else t


def _static(f: Spec) -> tuple:
    """The facts of a field that are not per version (struct types compare by shape)."""
    t = f["type"]
    shape = ("[]" if t.startswith("[]") else "") + ("struct" if _elem(t) not in PRIMITIVES else _elem(t))
    return (shape, _default(f), bool(f.get("zeroCopy")))


def merge_struct(contribs: List[Contribution], what: str, commons: Dict[str, List[Contribution]]
                 ) -> Tuple[List[Spec], Set[int]]:
    """Merge one struct's field lists (newest contribution first) into one; returns the merged
    field specs and the versions where the struct is present. Struct-typed fields are merged
    recursively; common structs are collected into ``commons`` (merged by the caller)."""
    merged: List[MergedField] = []
    where_present: Set[int] = set()
    # ignorable decides only where a field is absent: name -> flag -> versions where the release
    # that rules them has the field, absent
    absent: Dict[str, Dict[bool, Set[int]]] = {}
    for c in contribs:
        where_present |= c.present
        last = -1
        for f in c.fields:
            here = vset(f["versions"], c.valid) & c.present
            absent.setdefault(f["name"], {}).setdefault(bool(f.get("ignorable")), set()).update(
                c.present - here)
            if not here:
                continue
            pos = next((i for i, m in enumerate(merged) if m.name == f["name"]), None)
            if pos is None:
                m = MergedField(f)
                merged.insert(last + 1, m)
                pos = last + 1
            else:
                m = merged[pos]
                if pos <= last:
                    raise MergeError(f"{what}.{f['name']}: fields in another order than in a newer release")
                if _static(m.spec) != _static(f):
                    raise MergeError(f"{what}.{f['name']}: {_static(f)} here, {_static(m.spec)} in a "
                                     "newer release")
                if m.spec.get("tag") is not None and f.get("tag") is not None and m.spec["tag"] != f["tag"]:
                    raise MergeError(f"{what}.{f['name']}: tag {f['tag']} here, {m.spec['tag']} newer")
            last = pos
            m.present |= here
            m.nullable |= vset(f.get("nullableVersions"), here)
            tagged = vset(f.get("taggedVersions"), here) & c.flexible
            if tagged and m.spec.get("tag") is None:
                m.spec = dict(m.spec, tag=f["tag"])
            m.tagged |= tagged
            if "flexibleVersions" in f:
                m.flex_override = True
                m.compact |= vset(f["flexibleVersions"], here)
            else:
                m.compact |= here & c.flexible
            for key in m.texts:
                m.texts[key].append(f.get(key))
            if _elem(f["type"]) not in PRIMITIVES:
                inline = "fields" in f
                sub_fields = f["fields"] if inline else c.common[_elem(f["type"])]
                if m.struct_name is None:       # the newest release names the struct
                    m.struct_name, m.inline = _elem(f["type"]), inline
                m.subs.append(Contribution(c.rank, sub_fields, here, c.common, c.flexible, c.valid))

    out = []
    for m in merged:
        if m.tagged and m.spec.get("tag") is None:
            raise MergeError(f"{what}.{m.name}: tagged without a tag")
        # one flag must do for every version where the field is absent
        flags = {flag for flag, versions in absent.get(m.name, {}).items() if versions}
        if len(flags) > 1:
            raise MergeError(f"{what}.{m.name}: ignorable in some releases, not in others")
        f = {k: v for k, v in m.spec.items() if k not in ("fields", "versions", "nullableVersions",
                                                        "taggedVersions", "tag", "flexibleVersions",
                                                        "ignorable")}
        if flags.pop() if flags else m.spec.get("ignorable"):
            f["ignorable"] = True
        f["versions"] = fit_range(m.present, where_present, m.texts["versions"], f"{what}.{m.name}")
        if m.nullable or any(t is not None for t in m.texts["nullableVersions"]):
            f["nullableVersions"] = fit_range(m.nullable, m.present, m.texts["nullableVersions"],
                                              f"{what}.{m.name} nullable")
        if m.tagged:
            f["taggedVersions"] = fit_range(m.tagged, m.present & _union_flex(contribs, m.present),
                                            m.texts["taggedVersions"], f"{what}.{m.name} tagged")
            f["tag"] = m.spec["tag"]
        if m.flex_override:
            f["flexibleVersions"] = fit_range(m.compact, m.present, m.texts["flexibleVersions"],
                                              f"{what}.{m.name} flexible")
        if m.struct_name is not None:
            arr = "[]" if m.spec["type"].startswith("[]") else ""
            f["type"] = arr + m.struct_name
            if m.inline:
                f["fields"], _ = merge_struct(m.subs, f"{what}.{m.name}", commons)
            else:
                commons.setdefault(m.struct_name, []).extend(m.subs)
        # keep the spec's key order: name, type, versions first
        ordered = {k: f[k] for k in ("name", "type", "versions") if k in f}
        ordered.update((k, v) for k, v in f.items() if k not in ordered)
        out.append(ordered)
    return out, where_present


def _union_flex(contribs: List[Contribution], versions: Set[int]) -> Set[int]:
    out: Set[int] = set()
    for c in contribs:
        out |= c.flexible & c.present
    return out & versions


@dataclass
class Merged:
    """One message of the merged schema set."""

    name: str
    folder: str
    spec: Spec
    releases: List[Tuple[int, int, str]]          # (lo, hi, release) runs, in version order
    aliases: List[str] = field(default_factory=list)
    reexpressed: List[str] = field(default_factory=list)   # notes on coordinator keys


def _identity(folder: str, spec: Spec) -> tuple:
    if spec.get("type") in ("request", "response"):
        return ("api", spec["type"], spec["apiKey"])
    return ("name", spec["name"])


def _old_style_coordinator(folder: str, spec: Spec) -> bool:
    """A coordinator record spec of the pre-4.0 form (``data``, key versions = record types)."""
    return folder in COORDINATOR_FOLDERS and spec.get("type", "data") == "data"


def _reexpress_key(spec: Spec, record_type: int) -> Spec:
    """An old-style coordinator key at version ``record_type`` as a 4.x ``coordinator-key``."""
    out = {k: v for k, v in spec.items() if k not in ("fields", "validVersions", "type")}
    out = {"apiKey": record_type, "type": "coordinator-key", **out, "validVersions": "0"}
    fields = []
    for f in spec["fields"]:
        if "fields" in f or _elem(f["type"]) not in PRIMITIVES:
            raise MergeError(f"{spec['name']}: a coordinator key with a struct field")
        if record_type in Versions.parse(f["versions"]):
            g = dict(f, versions="0")
            for key in ("nullableVersions", "taggedVersions", "flexibleVersions"):
                if key in g:
                    g[key] = "0" if record_type in Versions.parse(g[key]) else "none"
            fields.append(g)
    out["fields"] = fields
    out["flexibleVersions"] = "0+" if record_type in Versions.parse(spec["flexibleVersions"]) else "none"
    return out


def merge_releases(releases: Sequence[Release]) -> List[Merged]:
    """One merged spec per message over ``releases`` (oldest first)."""
    groups: Dict[tuple, List[Tuple[int, str, Spec]]] = {}
    for rank, rel in enumerate(releases):
        for name, (folder, spec) in rel.specs.items():
            groups.setdefault(_identity(folder, spec), []).append((rank, folder, spec))
    newest = releases[-1]
    new_style = {folder for folder, spec in newest.specs.values()
                 if spec.get("type") in ("coordinator-key", "coordinator-value")}

    # old-style coordinator keys: the record type of each key name, as the newest form says it
    key_types: Dict[str, int] = {}
    for entries in groups.values():
        rank, folder, spec = entries[-1]
        if spec.get("type") == "coordinator-key":
            key_types[spec["name"]] = spec["apiKey"]
    out: List[Merged] = []
    for ident, entries in groups.items():
        entries.sort(key=lambda e: -e[0])                 # newest first
        top_rank, folder, top = entries[0]
        notes: List[str] = []
        if (folder in new_style and _old_style_coordinator(folder, top)
                and top["name"].endswith("Key")):
            # a key no newer release has: re-expressed in the newest form
            types = sorted(valid_set(top))
            if len(types) != 1:
                raise MergeError(f"{top['name']}: a key of several record types")
            top = _reexpress_key(top, types[0])
            key_types[top["name"]] = types[0]
            entries = [(top_rank, folder, top)] + entries[1:]
            notes.append(f"{top['name']}: {releases[top_rank].name} v{types[0]} is record type "
                         f"{types[0]}, version 0")
        if top.get("type") == "coordinator-key":
            kept = [entries[0]]
            for rank, f2, spec in entries[1:]:
                if not _old_style_coordinator(f2, spec):
                    kept.append((rank, f2, spec))
                    continue
                for t in sorted(valid_set(spec)):         # same bytes at version 0, or refuse
                    if layout(spec, t) != layout(top, 0):
                        raise MergeError(f"{spec['name']}: {releases[rank].name} v{t} is not "
                                         f"{releases[top_rank].name}'s v0")
                    notes.append(f"{spec['name']}: {releases[rank].name} v{t} (its record type) has the "
                                 f"bytes of {releases[top_rank].name} v0 (record type {top['apiKey']})")
            entries = kept
        if (folder in new_style and _old_style_coordinator(folder, top)
                and top["name"].endswith("Value")):
            key = top["name"][:-len("Value")] + "Key"
            if key not in key_types:
                raise MergeError(f"{top['name']}: no key {key}")
            top = {"apiKey": key_types[key], **dict(top, type="coordinator-value")}
            entries = [(top_rank, folder, top)] + entries[1:]
        out.append(_merge_message(releases, entries, notes))
    names = [m.name for m in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise MergeError(f"duplicate schema names: {sorted(dupes)}")
    return out


def _merge_message(releases: Sequence[Release], entries: List[Tuple[int, str, Spec]],
                   notes: List[str]) -> Merged:
    top_rank, folder, top = entries[0]
    aliases = sorted({spec["name"] for _, _, spec in entries[1:] if spec["name"] != top["name"]})
    taken: Set[int] = set()
    defining: List[Tuple[int, Spec, Set[int]]] = []        # newest first
    for rank, _, spec in entries:
        mine = valid_set(spec) - taken
        taken |= mine
        if mine:
            defining.append((rank, spec, mine))
    runs: List[Tuple[int, int, str]] = []
    for rank, _, mine in defining:
        runs += [(lo, hi, releases[rank].name) for lo, hi in span(mine)]
    runs.sort()
    if len(defining) <= 1:
        # one release says it all (or nothing: a spec without versions): its text as it is,
        # under the newest name and form
        spec = copy.deepcopy(defining[0][1] if defining else top)
        for key in ("name", "type", "apiKey"):
            if key in top:
                spec[key] = top[key]
        return Merged(top["name"], folder, _ordered(spec), runs, aliases, notes)

    union = set(taken)
    if len(span(union)) != 1:
        raise MergeError(f"{top['name']}: versions {sorted(union)} are not one range")
    contribs = [Contribution(rank, spec["fields"], mine,
                             {c["name"]: c["fields"] for c in spec.get("commonStructs", [])},
                             vset(spec["flexibleVersions"], valid_set(spec)), valid_set(spec))
                for rank, spec, mine in defining]
    spec: Spec = {k: v for k, v in top.items() if k not in ("fields", "commonStructs")}
    spec["validVersions"] = range_text(min(union), max(union))
    flex = set().union(*(c.flexible & c.present for c in contribs))
    spec["flexibleVersions"] = fit_range(flex, union, [s["flexibleVersions"] for _, s, _ in defining],
                                         f"{top['name']} flexibleVersions")
    deprecated = set().union(*(vset(s.get("deprecatedVersions"), mine) for _, s, mine in defining))
    spec.pop("deprecatedVersions", None)
    if deprecated:
        spec["deprecatedVersions"] = fit_range(deprecated, union,
                                               [s.get("deprecatedVersions") for _, s, _ in defining],
                                               f"{top['name']} deprecatedVersions", open_end=False)
    rank_top, spec_top, _ = max(defining, key=lambda d: max(d[2]))
    spec.pop("latestVersionUnstable", None)
    if spec_top.get("latestVersionUnstable"):
        spec["latestVersionUnstable"] = True
    spec.pop("listeners", None)
    if defining[0][1].get("listeners"):
        spec["listeners"] = defining[0][1]["listeners"]
    commons: Dict[str, List[Contribution]] = {}
    spec["fields"], _ = merge_struct(contribs, top["name"], commons)
    merged_common = []
    done: Set[str] = set()
    while len(done) < len(commons):
        for name in sorted(set(commons) - done):
            done.add(name)
            fields, present = merge_struct(commons[name], f"{top['name']}.{name}", commons)
            merged_common.append({"name": name, "versions": _common_versions(name, defining, present),
                                  "fields": fields})
    if merged_common:
        order = [c["name"] for _, s, _ in defining for c in s.get("commonStructs", [])]
        merged_common.sort(key=lambda c: order.index(c["name"]) if c["name"] in order else len(order))
        spec["commonStructs"] = merged_common
    return Merged(top["name"], folder, _ordered(spec), runs, aliases, notes)


def _common_versions(name: str, defining, present: Set[int]) -> str:
    texts = [c["versions"] for _, s, _ in defining for c in s.get("commonStructs", []) if c["name"] == name]
    for t in texts:
        if present <= vset(t, present):
            return t
    return range_text(min(present), None) if present else "none"


_TOP_ORDER = ["apiKey", "type", "name", "validVersions", "deprecatedVersions", "flexibleVersions",
              "latestVersionUnstable", "listeners", "fields", "commonStructs"]


def _ordered(spec: Spec) -> Spec:
    return {k: spec[k] for k in sorted(spec, key=lambda k: _TOP_ORDER.index(k) if k in _TOP_ORDER else 99)}


def check_merge(releases: Sequence[Release], merged: Sequence[Merged]) -> int:
    """Every merged (message, version) has the layout its release gives it; returns the count."""
    by_name: Dict[str, Tuple[str, Spec]] = {}
    n = 0
    for m in merged:
        for lo, hi, rname in m.releases:
            rel = next(r for r in releases if r.name == rname)
            spec = None
            for name in [m.name] + m.aliases:
                if name in rel.specs:
                    spec = rel.specs[name][1]
            assert spec is not None, (m.name, rname)
            for v in range(lo, hi + 1):
                theirs_v = v
                if m.spec.get("type") == "coordinator-key" and _old_style_coordinator(
                        rel.specs[spec["name"]][0], spec):
                    theirs_v = m.spec["apiKey"]          # old keys: version = record type
                if layout(m.spec, v) != layout(spec, theirs_v):
                    raise MergeError(f"{m.name} v{v}: the merged layout is not {rname}'s")
                n += 1
    return n


# -- writing ------------------------------------------------------------------------------------

def _field_src(f: dict, indent: str) -> str:
    args = [repr(f["name"]), repr(f["type"]), repr(f["versions"])]
    default = _default(f)
    tag = int(f["tag"]) if f.get("tag") is not None else None
    opt = [("nullable", f.get("nullableVersions")), ("default", default),
           ("tagged", f.get("taggedVersions")), ("tag", tag),
           ("flexible", f.get("flexibleVersions")), ("entity", f.get("entityType"))]
    for key, val in opt:
        if val is not None:
            args.append(f"{key}={val!r}")
    for key, spec_key in (("ignorable", "ignorable"), ("map_key", "mapKey"), ("zero_copy", "zeroCopy")):
        if f.get(spec_key):
            args.append(f"{key}=True")
    head = f"{indent}F({', '.join(args)}"
    if "fields" in f:
        inner = "".join(_field_src(g, indent + "    ") for g in f["fields"])
        return f"{head}, fields=[\n{inner}{indent}]),\n"
    return head + "),\n"


def releases_text(runs: Sequence[Tuple[int, int, str]]) -> Dict[str, str]:
    return {range_text(lo, hi): name for lo, hi, name in runs}


def module_source(m: Merged, release_names: Sequence[str]) -> str:
    spec = m.spec
    kind = spec.get("type", "data")
    args = [f"name={spec['name']!r}", f"kind={kind!r}", f"source={m.folder!r}"]
    if spec.get("apiKey") is not None:
        args.append(f"api_key={spec['apiKey']!r}")
    args += [f"valid={spec['validVersions']!r}", f"flexible={spec['flexibleVersions']!r}"]
    if spec.get("deprecatedVersions"):
        args.append(f"deprecated={spec['deprecatedVersions']!r}")
    if spec.get("listeners"):
        args.append(f"listeners={tuple(spec['listeners'])!r}")
    if spec.get("latestVersionUnstable"):
        args.append("latest_version_unstable=True")
    args.append(f"releases={releases_text(m.releases)!r}")
    if m.aliases:
        args.append(f"aliases={tuple(m.aliases)!r}")
    which = sorted({r for _, _, r in m.releases}, key=list(release_names).index) or [release_names[-1]]
    lines = [
        f'"""{spec["name"]}: generated by tools/import_schemas.py from the Kafka '
        f'{" and ".join(which)} specs; do not edit."""',
        "from kproto.schemas.model import Field as F, Message, Struct",
        "",
        "SCHEMA = Message(",
    ]
    lines += [f"    {a}," for a in args]
    body = "".join(_field_src(f, "        ") for f in spec.get("fields", []))
    lines.append("    fields=[")
    src = "\n".join(lines) + "\n" + body + "    ],\n"
    if spec.get("commonStructs"):
        src += "    common_structs=[\n"
        for cs in spec["commonStructs"]:
            inner = "".join(_field_src(g, "            ") for g in cs["fields"])
            src += f"        Struct({cs['name']!r}, [\n{inner}        ], versions={cs['versions']!r}),\n"
        src += "    ],\n"
    return src + ")\n"


def api_keys_source(entries: list, kafka_version: str) -> str:
    """``kproto/schemas/api_keys.py``: Kafka's ``ApiKeys`` names (the request's name without
    ``Request``, in upper snake case) and numbers, from the request specs."""
    keys = sorted((e["api_key"], snake_case(e["name"][:-len("Request")]).upper()) for e in entries
                  if e["kind"] == "request")
    lines = [f'"""Kafka\'s API keys (``ApiKeys``): generated by tools/import_schemas.py from the Kafka '
             f'{kafka_version} specs; do not edit."""',
             "from enum import IntEnum", "", "", "class ApiKey(IntEnum):",
             '    """An API key by Kafka\'s name for it (``ApiKey.FETCH == 1``)."""', ""]
    lines += [f"    {name} = {key}" for key, name in keys]
    return "\n".join(lines) + "\n"


def write_schemas(releases: Sequence[Release], merged: Sequence[Merged], dest: Path,
                  stub: Optional[Path] = None) -> list:
    names = [r.name for r in releases]
    entries = []
    stubs = []
    by_folder: Dict[str, List[Merged]] = {}
    for m in merged:
        by_folder.setdefault(m.folder, []).append(m)
    for folder in FOLDERS:
        pkg = folder.replace("-", "_")
        out = dest / pkg
        if out.exists():
            shutil.rmtree(out)
        if folder not in by_folder:
            continue
        out.mkdir(parents=True)
        (out / "__init__.py").write_text(f'"""Schemas from Kafka\'s {folder}/ specs (generated)."""\n')
        for m in sorted(by_folder[folder], key=lambda m: m.name):
            mod = snake_case(m.name).rstrip("_")
            text = module_source(m, names)
            ns: dict = {}
            exec(compile(text, str(out / f"{mod}.py"), "exec"), ns)   # validate before writing
            schema: Message = ns["SCHEMA"]
            stubs.append(stub_source(schema, build_classes(schema)))
            (out / f"{mod}.py").write_text(text, encoding="utf-8")
            entries.append({"name": schema.name, "module": f"kproto.schemas.{pkg}.{mod}",
                            "kind": schema.kind, "api_key": schema.api_key, "valid": schema.valid,
                            "flexible": schema.flexible, "source": folder, "aliases": m.aliases})
    lines = [
        '"""Index of every schema: generated by tools/import_schemas.py; do not edit."""',
        "",
        f"KAFKA_VERSION = {names[-1]!r}",
        f"RELEASES = {tuple(names)!r}",
        "",
        "# name: (module, kind, api_key, valid versions, flexible versions, spec folder)",
        "SCHEMAS = {",
    ]
    for e in entries:
        row = (e["module"], e["kind"], e["api_key"], e["valid"], e["flexible"], e["source"])
        lines.append(f"    {e['name']!r}: {row!r},")
    lines.append("}")
    lines.append("")
    lines.append("# names older releases gave a message: old name -> name")
    lines.append("ALIASES = {")
    for e in entries:
        for a in e["aliases"]:
            lines.append(f"    {a!r}: {e['name']!r},")
    lines.append("}")
    (dest / "_index.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (dest / "api_keys.py").write_text(api_keys_source(entries, names[-1]), encoding="utf-8")
    if stub is not None:
        head = ('"""Type stubs of every message class: generated by tools/import_schemas.py; do not edit."""\n'
                "from typing import Optional\n\n"
                "from kproto.codecs.objects import MessageObject\n"
                "from kproto.codecs.primitives import Uuid\n\n\n")
        stub.write_text(head + "\n\n".join(stubs), encoding="utf-8")
    return entries


def import_releases(releases: Sequence[Release], dest: Path, stub: Optional[Path] = None
                    ) -> Tuple[list, List[Merged], int]:
    merged = merge_releases(releases)
    checked = check_merge(releases, merged)
    entries = write_schemas(releases, merged, dest, stub)
    return entries, merged, checked


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("releases", nargs="+", type=release_arg, metavar="PATH[=RELEASE]",
                   help="a release's spec folder (message/, metadata/, ...) or its jars (a.jar,b.jar "
                        "or a folder of jars), oldest first; the release name is the folder name "
                        "without 'kafka-' or the jars' version unless given")
    p.add_argument("--dest", type=Path, default=ROOT / "kproto" / "schemas")
    p.add_argument("--stub", type=Path, default=ROOT / "kproto" / "messages.pyi",
                   help="where to write the type stubs of the message classes")
    args = p.parse_args(argv)
    names = [name for _, name in args.releases]
    if len(set(names)) != len(names):
        p.error(f"a release given twice: {names}")
    numbers = [tuple(int(x) for x in n.split(".")) for n in names if re.fullmatch(r"\d+(\.\d+)*", n)]
    if len(numbers) == len(names) and numbers != sorted(numbers):
        p.error(f"releases go oldest first, the newest last: {names}")
    releases = [load_release(path, name) for path, name in args.releases]
    entries, merged, checked = import_releases(releases, args.dest, args.stub)
    kinds: dict = {}
    for e in entries:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    per_release: Dict[str, int] = {}
    for m in merged:
        for lo, hi, r in m.releases:
            per_release[r] = per_release.get(r, 0) + hi - lo + 1
    print(f"wrote {len(entries)} schemas to {args.dest}: "
          + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
    print(f"{checked} (message, version) pairs, each checked against its release: "
          + ", ".join(f"{per_release.get(n, 0)} from {n}" for n in names))
    for m in merged:
        for a in m.aliases:
            print(f"renamed: {a} -> {m.name}")
        for note in m.reexpressed:
            print(f"coordinator key: {note}")
    from emit_errors import emit as emit_error_codes  # tools/ (this script's folder) is on sys.path
    print(f"wrote {emit_error_codes()} from the error table (tools/kafka_errors.tsv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
