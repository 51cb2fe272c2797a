"""Messages <-> JSON in Apache Kafka's own convention (its generated ``*JsonConverter`` classes).

Keys are spec names with the first letter lower-cased; fields absent from the version are left out;
tagged fields appear only when they differ from their default; bytes and records are standard
base64; UUIDs are Kafka's URL-safe base64 form.
"""
from __future__ import annotations

import base64
import binascii
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from kproto.codecs.objects import parse_default
from kproto.codecs.plan import VersionPlan
from kproto.codecs.primitives import Uuid
from kproto.errors import EncodeError
from kproto.schemas.model import Field, Message

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
}


class _Plan:
    """What to do for each field of one struct at one version."""

    __slots__ = ("cls", "entries")

    def __init__(self, cls: type, entries: List[tuple]) -> None:
        self.cls = cls
        self.entries = entries   # (field, tagged, default, sub_plan)


def build_plan(message: Message, version: int, classes: Dict[str, type]) -> _Plan:
    plan = VersionPlan(message, version)
    cache: Dict[str, _Plan] = {}

    def plan_for(name: str) -> _Plan:
        if name in cache:
            return cache[name]
        entries: List[tuple] = []
        out = cache[name] = _Plan(classes[name], entries)
        for f, tagged in plan.in_order(plan.structs[name].fields):
            value, factory = parse_default(f, classes)
            default = factory() if factory is not None else value
            sub = plan_for(f.element_type) if f.is_struct_type else None
            entries.append((f, tagged, default, sub))
        return out

    return plan_for(message.name)


def _b64(v: Any) -> str:
    return base64.b64encode(v).decode("ascii")


def _value_to_json(f: Field, et: str, v: Any, sub: Optional[_Plan]) -> Any:
    if v is None:
        return None
    if sub is not None:
        return struct_to_json(v, sub)
    if et in ("bytes", "records"):
        return _b64(v)
    if et == "uuid":
        return str(Uuid(v))
    if et == "float64":
        return float(v)
    if et == "bool":
        return bool(v)
    if et in _INT_RANGES:
        return int(v)
    return v


def struct_to_json(obj: Any, plan: _Plan) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f, tagged, default, sub in plan.entries:
        v = getattr(obj, f.attr)
        if tagged and v == default:
            continue
        et = f.element_type
        if f.is_array and v is not None:
            out[f.json_key] = [_value_to_json(f, et, x, sub) for x in v]
        else:
            out[f.json_key] = _value_to_json(f, et, v, sub)
    return out


def _value_from_json(f: Field, et: str, v: Any, sub: Optional[_Plan], path: str) -> Any:
    if v is None:
        return None
    if sub is not None:
        if not isinstance(v, dict):
            raise EncodeError(f"{path}: expected a JSON object")
        return struct_from_json(v, sub, path)
    try:
        if et in ("bytes", "records"):
            return base64.b64decode(v, validate=True)
        if et == "uuid":
            return Uuid(v)
        if et == "string":
            if not isinstance(v, str):
                raise TypeError(f"expected a string, got {type(v).__name__}")
            return v
        if et == "bool":
            if not isinstance(v, bool):
                raise TypeError(f"expected true/false, got {v!r}")
            return v
        if et == "float64":
            if isinstance(v, str):   # Kafka's converter also reads "NaN"/"Infinity" this way
                return float(v)
            return float(v)
        if et in _INT_RANGES:
            if isinstance(v, bool) or not isinstance(v, int):
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                elif isinstance(v, str):
                    v = int(v)
                else:
                    raise TypeError(f"expected an integer, got {v!r}")
            lo, hi = _INT_RANGES[et]
            if not lo <= v <= hi:
                raise ValueError(f"{v} out of range for {et}")
            return v
    except (TypeError, ValueError, binascii.Error) as exc:
        raise EncodeError(f"{path}: {exc}") from None
    raise EncodeError(f"{path}: unsupported type {et}")


def struct_from_json(doc: Dict[str, Any], plan: _Plan, path: str = "") -> Any:
    kwargs: Dict[str, Any] = {}
    for f, tagged, default, sub in plan.entries:
        if f.json_key not in doc:
            continue
        v = doc[f.json_key]
        p = f"{path}.{f.json_key}" if path else f.json_key
        et = f.element_type
        if f.is_array and v is not None:
            if not isinstance(v, list):
                raise EncodeError(f"{p}: expected a JSON array")
            kwargs[f.attr] = [_value_from_json(f, et, x, sub, f"{p}[{i}]") for i, x in enumerate(v)]
        else:
            kwargs[f.attr] = _value_from_json(f, et, v, sub, p)
    return plan.cls(**kwargs)
