"""Shared helpers of the protocol tests: where the vectors are, strict JSON comparison, strategies."""
from __future__ import annotations

import gzip
import json
import math
import os
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

import kproto
from kproto.codecs import Uuid
from kproto.codecs.objects import parse_default

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors"))


@lru_cache(maxsize=None)
def load_vectors(name: str) -> tuple:
    path = VECTORS / name
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh)


def assert_json_equal(got, want, path="$"):
    """Equality that also checks JSON types: 1 != 1.0 != true, -0.0 != 0.0."""
    if isinstance(want, bool) or isinstance(got, bool):
        assert got is want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, float):
        assert isinstance(got, float), f"{path}: {got!r} is not a float"
        assert got == want and math.copysign(1, got) == math.copysign(1, want), f"{path}: {got!r} != {want!r}"
    elif isinstance(want, int):
        assert type(got) is int and got == want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: {got!r} is not an object"
        assert set(got) == set(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for k in want:
            assert_json_equal(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_json_equal(g, w, f"{path}[{i}]")
    else:
        assert got == want and type(got) is type(want), f"{path}: {got!r} != {want!r}"


_INTS = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
         "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
         "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1)}


def objects(codec, version: int, max_list: int = 3):
    """A hypothesis strategy of message objects valid at ``version``, from the schema alone."""
    schema = codec.schema
    structs = schema.structs()
    flexible = version in schema.flexible_range

    def value(f, elem=False):
        t = f.element_type
        if t in _INTS:
            s = st.integers(*_INTS[t])
        elif t == "bool":
            s = st.booleans()
        elif t == "float64":
            s = st.floats(allow_nan=False)
        elif t == "string":
            s = st.text(max_size=12)
        elif t in ("bytes", "records"):
            s = st.binary(max_size=24)
        elif t == "uuid":
            s = st.binary(min_size=16, max_size=16).map(Uuid)
        else:
            s = struct_of(t)
        return s

    def field_value(f):
        s = value(f)
        if f.is_array:
            s = st.lists(s, max_size=max_list)
        if version in f.nullable_range:
            s = st.none() | s
        return s

    def struct_of(name):
        cls = codec.classes[name]
        kwargs = {f.attr: field_value(f) for f in structs[name].fields if version in f.version_range}
        unknown = st.just(None)
        if flexible:
            known = {f.tag for f in structs[name].fields if f.tag is not None}
            tags = st.integers(0, 300).filter(lambda t: t not in known)
            unknown = st.none() | st.lists(st.tuples(tags, st.binary(max_size=6)), max_size=2,
                                           unique_by=lambda t: t[0]).map(
                lambda xs: sorted(xs) or None)
        return st.builds(lambda kw, u: cls(**kw, _unknown_tagged_fields=u), st.fixed_dictionaries(kwargs), unknown)

    return struct_of(schema.name)


def all_message_versions():
    for name in kproto.codecs.messages():
        codec = kproto.message(name)
        for v in codec.valid_versions:
            yield name, v
