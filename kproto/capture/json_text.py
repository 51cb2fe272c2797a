"""Message bodies straight to JSON text: what ``json.dumps(codec.to_json(obj, version),
ensure_ascii=False)`` gives (after :func:`~kproto.capture.exchange.exchange_to_json`'s naming
of topic ids), without the dicts in between.

One function is generated per struct of a message version's JSON plan (the codec's own plan:
the same fields, order, tagged defaults and key names), writing each value as Python's JSON
encoder writes what the codec's converter makes of it: ints as ``int(v)``, floats as
``float(v)`` (``NaN``/``Infinity`` as ``json`` writes them), bools as ``bool(v)``, strings
escaped by the encoder's own function, bytes and records in base64, UUIDs in Kafka's text form.
A value of any other type, or any error, sends the whole body to the reference path (the
caller's ``reference``), which writes it or raises; a plan this module does
not handle exactly (a key twice in a struct, a topic id beside a ``topicName`` key or a
``name``/``topic`` that is not a string) is always written by the reference path.

Where the C accelerator is built (``kproto.capture._jsontext``, see
:mod:`kproto.accelerators`), a C writer compiled from the same plan takes the generated
functions' place: the same text, the same refusals (:data:`accelerated` False: the Python
functions).
"""
from __future__ import annotations

import binascii
import functools
import json
from typing import Any, Callable, Mapping, Optional

from kproto.accelerators import load
from kproto.codecs.primitives import Uuid

__all__ = ["body_text", "json_dumps", "float_text", "string_text"]

#: Python's JSON encoder with the settings of every capture JSON output
json_dumps: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode
#: a str as that encoder writes it (quotes included)
string_text: Callable[[str], str] = json.encoder.encode_basestring
_b2a = binascii.b2a_base64
_INF = float("inf")
_INTS = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})
_NAMED_BY = ("name", "topic")  # keys that name a topic in its own struct (no topicName then)

BodyWriter = Callable[[Any, Mapping[str, str], list[str]], None]


def float_text(v: float) -> str:
    """A float as Python's JSON encoder writes it (``allow_nan``: ``NaN``, ``Infinity``)."""
    if v != v:
        return "NaN"
    if v == _INF:
        return "Infinity"
    if v == -_INF:
        return "-Infinity"
    return float.__repr__(v)


@functools.lru_cache(maxsize=65536)
def _uuid_text(v: bytes) -> str:
    return str(Uuid(v))


def _b64(v: Any) -> str:
    return _b2a(v, newline=False).decode("ascii")


def body_text(codec: Any, obj: Any, version: int, names: Mapping[str, str],
              reference: Callable[[], str], out: Optional[list[str]] = None) -> str:
    """JSON text of ``obj`` (a message of ``codec`` at ``version``) with ``topicName`` beside
    each ``topicId`` that ``names`` names (in a struct without a name of its own);
    ``reference()`` gives the same by the dicts, and is called when this path cannot.
    With ``out``, the text is appended to it in pieces (and "" returned): a caller joining a
    longer text copies big values (records) once."""
    pieces = [] if out is None else out
    mark = len(pieces)
    fn = _compiled(codec, version)
    try:
        if fn is None:
            raise _OddValue("a plan this module does not write")
        fn(obj, names, pieces)
    except Exception:  # an odd value: the reference path writes it or raises as it does
        del pieces[mark:]
        pieces.append(reference())
    return "".join(pieces) if out is None else ""


def _compiled(codec: Any, version: int) -> Optional[BodyWriter]:
    key = (codec, version, accelerated)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    plan = codec.json_plan(version)
    fn = _Generator(plan).function()
    if fn is not None and accelerated and _jsontext is not None:
        fn = _jsontext.Writer(_spec(plan))  # the same writer, in C
    _CACHE[key] = fn
    return fn


_CACHE: dict[tuple[Any, int, bool], Optional[BodyWriter]] = {}
#: the C writer (kproto/capture/_jsontext.c), None where it is not built
_jsontext = load("kproto.capture._jsontext")
if _jsontext is not None:
    _jsontext.setup(string_text, _uuid_text)
#: bodies are written by the C writer where it is built (False: the generated Python writers)
accelerated = True
# the C writer's kinds of values (see _jsontext.c)
_KINDS = {**{t: 0 for t in _INTS}, "string": 1, "bool": 2, "float64": 3, "bytes": 4,
          "records": 4, "uuid": 5}


def _spec(plan: Any) -> tuple:
    """The C writer's spec of a struct plan the Python generator writes (same checks passed):
    ``(named_by, entries)``, see ``_jsontext.c``."""
    tid = [f for f, _t, _d, _s in plan.entries if f.json_key == "topicId" and not f.is_array]
    named_by = tuple((f.attr, bool(tagged), default) for f, tagged, default, _s in plan.entries
                     if tid and f.json_key in _NAMED_BY)
    entries = tuple(((string_text(f.json_key) + ": ").encode(), f.attr,
                     6 if sub is not None else _KINDS[f.element_type], bool(f.is_array),
                     bool(tagged), default, None if sub is None else _spec(sub),
                     bool(tid) and f is tid[0])
                    for f, tagged, default, sub in plan.entries)
    return named_by, entries


class _Unsupported(Exception):
    """A plan whose JSON this module cannot write exactly."""


class _Generator:
    """Python source of one function per struct plan, exec'd together. Each appends its
    struct's JSON text to a list in pieces: ``{``, then per field ``, "key": `` and the value
    (the first field's separator is cut off at the end), then ``}``."""

    def __init__(self, plan: Any) -> None:
        self.top = plan
        self.ns: dict[str, Any] = {"E": string_text, "B": _b64, "F": float_text, "U": _uuid_text,
                                   "J": _odd, "float": float, "str": str}
        self.names: dict[int, str] = {}   # id(plan) -> function name
        self.lines: list[str] = []

    def function(self) -> Optional[BodyWriter]:
        try:
            name = self._struct(self.top)
        except _Unsupported:
            return None
        exec("\n".join(self.lines) + "\n", self.ns)
        return self.ns[name]

    def _const(self, value: Any, prefix: str) -> str:
        name = f"{prefix}{len(self.ns)}"
        self.ns[name] = value
        return name

    def _struct(self, plan: Any) -> str:
        if id(plan) in self.names:
            return self.names[id(plan)]
        fname = self.names[id(plan)] = f"s{len(self.names)}"
        keys = [f.json_key for f, _t, _d, _s in plan.entries]
        if len(set(keys)) != len(keys):
            raise _Unsupported("a key twice")
        tid = [e for e in plan.entries if e[0].json_key == "topicId" and not e[0].is_array]
        named_by = [e for e in plan.entries if e[0].json_key in _NAMED_BY]
        if tid and ("topicName" in keys or tid[0][0].element_type != "uuid" or any(
                f.is_array or f.element_type != "string" for f, _t, _d, _s in named_by)):
            raise _Unsupported("topic naming not as a uuid beside string names")
        # the first field's separator is cut off after the fields, unless it is always there
        static = bool(plan.entries) and not plan.entries[0][1]
        body = [f"def {fname}(o, names, p):", "    a = p.append"]
        if not static:
            body += ["    s = len(p)", "    a('{')"]
        if tid:
            # the reference names the id unless the struct's JSON has a true name or topic
            body.append("    unnamed = bool(names)")
            for f, tagged, default, _s in named_by:
                d = self._const(default, "d")
                cond = f"not (o.{f.attr} == {d}) and o.{f.attr}" if tagged else f"o.{f.attr}"
                body.append(f"    if unnamed and ({cond}):\n        unnamed = False")
        run: list[tuple[str, str]] = []  # (key, local) of scalar fields written as one piece

        def flush(closing: str = "") -> None:
            if run:
                text = "".join(k.replace("{", "{{").replace("}", "}}") + "{" + t + "}"
                               for k, t in run) + closing
                body.append(f"    a(f{text!r})")
                run.clear()
        for i, (f, tagged, default, sub) in enumerate(plan.entries):
            key = ("{" if static and not i else ", ") + string_text(f.json_key) + ": "
            value = self._value(f, sub)
            if value is not None and not tagged and not (tid and f is tid[0][0]):
                body += [f"    v = o.{f.attr}", f"    t{i} = {value}"]
                run.append((key, f"t{i}"))
                continue
            flush()
            put = self._field(f, sub, key)
            if tid and f is tid[0][0]:
                put += ["if unnamed and v is not None:",
                        "    t = U(v)",
                        "    if t in names:",
                        "        a(', \"topicName\": ' + E(names[t]))"]
            body.append(f"    v = o.{f.attr}")
            indent = "    "
            if tagged:  # written when it differs from its default
                body.append(f"    if not (v == {self._const(default, 'd')}):")
                indent = "        "
            body.extend(indent + line for stmt in put for line in stmt.split("\n"))
        if static and run:
            flush("}}")
        else:
            flush()
            if not static:
                body += ["    if len(p) > s + 1:", "        p[s + 1] = p[s + 1][2:]"]
            body.append("    a('}')")
        self.lines.extend(body)
        return fname

    def _field(self, f: Any, sub: Any, key: str) -> list[str]:
        """Statements appending ``key`` and the value ``v`` of field ``f``."""
        et = f.element_type
        if sub is not None:
            fn = self._struct(sub)
            if not f.is_array:
                return [f"if v is None:\n    a({key + 'null'!r})",
                        f"else:\n    a({key!r})\n    {fn}(v, names, p)"]
            return [f"if v is None:\n    a({key + 'null'!r})",
                    "else:",
                    f"    a({key + '['!r})",
                    "    for i, x in enumerate(v):",
                    "        if i:\n            a(', ')",
                    f"        if x is None:\n            a('null')\n        else:\n            {fn}(x, names, p)",
                    "    a(']')"]
        if et in ("bytes", "records") and not f.is_array:  # base64 of any size: not copied again
            return [f"if v is None:\n    a({key + 'null'!r})",
                    f"else:\n    a({key + chr(34)!r})\n    a(B(v))\n    a('\"')"]
        return [f"a({key!r} + ({self._value(f, sub)}))"]

    def _value(self, f: Any, sub: Any) -> Optional[str]:
        """An expression writing the value ``v`` of field ``f`` in one piece; None for a struct
        or a single bytes/records value (written in several pieces)."""
        et = f.element_type
        if sub is not None or (et in ("bytes", "records") and not f.is_array):
            return None
        value = self._scalar(et, "x" if f.is_array else "v")
        if f.is_array:
            value = f"'null' if v is None else '[' + ', '.join([{value} for x in v]) + ']'"
        return value

    def _scalar(self, et: str, v: str) -> str:
        """An expression writing the value ``v`` of type ``et``; ``J(v)`` raises for a type
        the codec's converter would treat otherwise."""
        if et in _INTS:
            return f"str({v}) if {v}.__class__ is int else 'null' if {v} is None else J({v})"
        if et == "string":
            return f"E({v}) if {v}.__class__ is str else 'null' if {v} is None else J({v})"
        if et == "bool":
            return f"'null' if {v} is None else 'true' if {v} else 'false'"
        if et == "float64":
            return f"'null' if {v} is None else F(float({v}))"
        if et in ("bytes", "records"):
            return f"'null' if {v} is None else '\"' + B({v}) + '\"'"
        if et == "uuid":
            return f"'null' if {v} is None else '\"' + U({v}) + '\"'"
        raise _Unsupported(f"type {et}")


class _OddValue(Exception):
    """A value not of its field's usual type (None included, where that is not checked)."""


def _odd(v: Any) -> str:
    raise _OddValue(type(v).__name__)
