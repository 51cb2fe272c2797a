"""Message object classes, one per struct of a schema, built once per message.

A class carries the union of its struct's fields over all versions as ``__slots__`` with snake_case
names, a keyword constructor filled with the schema's defaults, equality, a readable repr and type
annotations. Unknown tagged fields read from the wire live in ``_unknown_tagged_fields`` (a list of
``(tag, bytes)``) and are written back unchanged.

Where the C decoder is built, a field whose default is a struct or an empty list reads through a
``LazyDefault``: the C decoder leaves it empty when the field is not on the wire (a FetchResponse
partition has three such tagged structs) or is an empty array, and the first read makes the
default. Every array of structs reads through one too: decoding a read-only buffer checks such an
array's bytes whole but leaves its elements to be built on the field's first read (see
:func:`kproto.codecs.program.pending_fields`). The instances are freed by a plain slot-dropping
function instead of CPython's generic one.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from kproto.accelerators import load
from kproto.codecs.primitives import Uuid
from kproto.schemas.model import Field, Message, Struct

_MISSING = object()
_decoder = load("kproto.codecs._decoder")   # optional: LazyDefault

_PY_TYPES = {
    "bool": "bool", "int8": "int", "int16": "int", "uint16": "int", "int32": "int", "uint32": "int",
    "int64": "int", "float64": "float", "string": "str", "bytes": "bytes", "records": "bytes | memoryview",
    "uuid": "Uuid",
}


class MessageObject:
    """Base class of every generated message and struct class."""

    __slots__ = ("_unknown_tagged_fields",)
    _unknown_tagged_fields: Optional[List[Tuple[int, bytes]]]
    _fields: Tuple[str, ...] = ()
    _schema_struct: Optional[Struct] = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self._fields:
            if getattr(self, name) != getattr(other, name):
                return False
        return (self._unknown_tagged_fields or None) == (other._unknown_tagged_fields or None)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = [f"{n}={getattr(self, n)!r}" for n in self._fields]
        if self._unknown_tagged_fields:
            parts.append(f"_unknown_tagged_fields={self._unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a plain dict (nested structs converted too), snake_case keys."""
        def conv(v: Any) -> Any:
            if isinstance(v, MessageObject):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v
        return {n: conv(getattr(self, n)) for n in self._fields}

    def copy(self, **changes: Any) -> "MessageObject":
        """A shallow copy with some fields replaced."""
        new = object.__new__(type(self))
        for n in self._fields:
            setattr(new, n, changes.pop(n, getattr(self, n)))
        new._unknown_tagged_fields = self._unknown_tagged_fields
        if changes:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(changes)}")
        return new


def parse_default(f: Field, classes: Dict[str, type]) -> Tuple[Any, Optional[type]]:
    """Return (value, factory): an immutable default value, or a factory for a mutable one
    (``list``, or the class of a struct)."""
    d = f.default
    if f.is_array:
        if d == "null":
            return None, None
        return _MISSING, list
    t = f.type
    if f.is_struct_type:
        if d == "null":
            return None, None
        cls = classes[t]
        return _MISSING, cls
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return (int(d, 0) if d not in (None, "") else 0), None
    if t == "float64":
        return (float(d) if d not in (None, "") else 0.0), None
    if t == "bool":
        return (d == "true"), None
    if t == "string":
        if d == "null":
            return None, None
        return (d or ""), None
    if t in ("bytes", "records"):
        return (None if d == "null" else b""), None
    if t == "uuid":
        return (Uuid(d) if d not in (None, "", "null") else Uuid.ZERO), None
    raise ValueError(f"no default rule for type {t}")


def build_classes(message: Message) -> Dict[str, type]:
    """Create the classes of every struct of ``message``; the message's own class is under its name."""
    structs = message.structs()
    classes: Dict[str, Any] = {}
    for name, struct in structs.items():
        qual = name if name == message.name else f"{message.name}.{name}"
        attrs = tuple(f.attr for f in struct.fields)
        cls: Any = type(name, (MessageObject,), {"__slots__": attrs, "__qualname__": qual,
                                                 "__module__": "kproto.messages"})
        cls._fields = attrs
        cls._schema_struct = struct
        classes[name] = cls
    for name, struct in structs.items():
        cls = classes[name]
        ns: Dict[str, Any] = {"_MISSING": _MISSING}
        params, body, ann = [], [], {}
        for i, f in enumerate(struct.fields):
            value, factory = parse_default(f, classes)
            if factory is None:
                ns[f"d{i}"] = value
                params.append(f"{f.attr}=d{i}")
                body.append(f"    self.{f.attr} = {f.attr}")
            else:
                ns[f"f{i}"] = factory
                params.append(f"{f.attr}=_MISSING")
                body.append(f"    self.{f.attr} = f{i}() if {f.attr} is _MISSING else {f.attr}")
            py = f.element_type if f.is_struct_type else _PY_TYPES[f.element_type]
            if f.is_array:
                py = f"list[{py}]"
            if f.default == "null" or not f.nullable_range.empty:
                py = f"Optional[{py}]"
            ann[f.attr] = py
        params.append("_unknown_tagged_fields=None")
        body.append("    self._unknown_tagged_fields = _unknown_tagged_fields")
        src = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
        exec(src, ns)
        init = ns["__init__"]
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        cls.__init__ = init
        cmp = " and ".join(f"self.{a} == other.{a}" for a in cls._fields) or "True"
        eq_src = ("def __eq__(self, other):\n"
                  "    if type(other) is not type(self):\n"
                  "        return NotImplemented\n"
                  f"    return {cmp} and (self._unknown_tagged_fields or None) == (other._unknown_tagged_fields or None)\n")
        exec(eq_src, ns)
        ns["__eq__"].__qualname__ = f"{cls.__qualname__}.__eq__"
        cls.__eq__ = ns["__eq__"]
        cls.__annotations__ = ann
        cls.__doc__ = f"{cls.__qualname__} ({message.kind} {message.name}, versions {message.valid})."
    for name, struct in structs.items():
        # the same object as cls() but without keyword parsing: decoders make one per absent
        # or untagged struct field, so this is on the hot path
        cls = classes[name]
        ns = {"_new": object.__new__, "C": cls}
        lines = ["def make_default():", "    o = _new(C)"]
        for i, f in enumerate(struct.fields):
            value, factory = parse_default(f, classes)
            if factory is None:
                ns[f"d{i}"] = value
                lines.append(f"    o.{f.attr} = d{i}")
            elif factory is list:
                lines.append(f"    o.{f.attr} = []")
            else:
                ns[f"f{i}"] = factory
                lines.append(f"    o.{f.attr} = f{i}._make_default()")
        lines += ["    o._unknown_tagged_fields = None", "    return o"]
        exec("\n".join(lines) + "\n", ns)
        cls._make_default = staticmethod(ns["make_default"])
    if _decoder is not None:
        for name, struct in structs.items():
            cls = classes[name]
            _decoder.set_fast_dealloc(cls)
            for f in struct.fields:
                factory = parse_default(f, classes)[1]
                if factory is not None:
                    make = list if factory is list else factory._make_default  # type: ignore[attr-defined]
                    setattr(cls, f.attr, _decoder.LazyDefault(cls.__dict__[f.attr], make))
                elif f.is_array and f.is_struct_type:   # an array built on first read, null by default
                    setattr(cls, f.attr, _decoder.LazyDefault(cls.__dict__[f.attr], None))
    top = classes[message.name]
    top.API_KEY = message.api_key
    top.MESSAGE_KIND = message.kind
    for name, cls in classes.items():
        if cls is not top:
            setattr(top, name, cls)
    return classes


def stub_source(message: Message, classes: Dict[str, type]) -> str:
    """Type-stub text of a message's classes (nested struct classes become nested classes)."""
    top = classes[message.name]

    def qual(ann: str) -> str:
        # names of struct classes inside annotations are qualified with the message class
        for name in classes:
            if name != message.name:
                ann = ann.replace(f"[{name}]", f"[{message.name}.{name}]")
                if ann == name:
                    ann = f"{message.name}.{name}"
        return ann

    def body(cls: type, indent: str) -> List[str]:
        lines = []
        params = []
        for attr, ann in cls.__annotations__.items():
            ann = qual(ann)
            lines.append(f"{indent}{attr}: {ann}")
            params.append(f"{attr}: {ann} = ...")
        params.append("_unknown_tagged_fields: Optional[list[tuple[int, bytes]]] = ...")
        lines.append(f"{indent}def __init__(self, *, {', '.join(params)}) -> None: ...")
        return lines

    out = [f"class {message.name}(MessageObject):", f"    API_KEY: Optional[int]", "    MESSAGE_KIND: str"]
    for name, cls in classes.items():
        if cls is top:
            continue
        out.append(f"    class {name}(MessageObject):")
        out += body(cls, "        ")
    out += body(top, "    ")
    return "\n".join(out) + "\n"
