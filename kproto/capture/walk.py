"""Walks over decoded message objects that look only where the schema says a wanted field can
be (sans-I/O): one function per class and kind of leaf, generated from the message's schema,
for what the capture package collects from every body (error codes, topic ids).

A :class:`Leaf` says which fields are wanted and what to do with one (statements run with the
object as ``o``, the field's value as ``v`` and the walk's collection as ``out``). The walker of
a class visits, in field order, its wanted fields and the struct fields (single or lists)
whose schema can hold one somewhere below; a class not made from the schemas gets the leaf's
``generic`` walk (every field looked at).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

__all__ = ["Leaf", "walker"]

Walk = Callable[[Any, Any], None]


class Leaf:
    """A kind of field to collect: ``wanted(schema field)`` says which (struct fields are
    walked into), ``code`` what to do with one (statements with ``o``, ``v`` its value and
    ``out``, using ``names``), ``generic`` the walk of objects outside the schemas."""

    __slots__ = ("wanted", "code", "generic", "names")

    def __init__(self, wanted: Callable[[Any], bool], code: str, generic: Walk,
                 **names: Any) -> None:
        self.wanted, self.code, self.generic, self.names = wanted, code, generic, names


def walker(cls: type, leaf: Leaf) -> Walk:
    """The walk of ``cls`` objects for ``leaf`` (made once per class and leaf)."""
    return _walker(cls, leaf)


@functools.lru_cache(maxsize=None)
def _walker(cls: type, leaf: Leaf) -> Walk:
    struct_of = _schema_structs(cls)
    if struct_of is None:
        return leaf.generic
    lines = ["def walk(o, out):"]
    for f in struct_of[cls.__name__].fields:
        if f.is_struct_type:
            if not _holds(f.element_type, struct_of, leaf, set()):
                continue
            lines.append(f"    v = o.{f.attr}")
            if f.is_array:  # the objects of a list are looked into, as a generic walk does
                lines.append("    if v and hasattr(v[0], '_fields'):\n"
                             "        for x in v:\n"
                             "            W(x.__class__, L)(x, out)")
            else:
                lines.append("    if hasattr(v, '_fields'):\n        W(v.__class__, L)(v, out)")
        elif leaf.wanted(f):
            lines.append(f"    v = o.{f.attr}")
            lines.extend("    " + line for line in leaf.code.split("\n"))
    ns: dict[str, Any] = {"W": _walker, "L": leaf, **leaf.names}
    exec("\n".join(lines + ["    return None"]) + "\n", ns)
    return ns["walk"]


def _schema_structs(cls: type) -> Optional[dict[str, Any]]:
    """Struct name -> schema struct of the message ``cls`` belongs to, or None."""
    import kproto.codecs as codecs

    if getattr(cls, "_schema_struct", None) is None:
        return None
    try:
        codec = codecs.message(cls.__qualname__.split(".")[0])
    except KeyError:
        return None
    if codec.classes.get(cls.__name__) is not cls:
        return None
    return codec.schema.structs()


def _holds(struct: str, struct_of: dict[str, Any], leaf: Leaf, seen: set) -> bool:
    """Can a ``struct`` object hold a wanted field, itself or below? (An unknown struct: yes.)"""
    if struct not in struct_of:
        return True
    if struct in seen:
        return False  # its other paths decide
    seen.add(struct)
    return any(_holds(f.element_type, struct_of, leaf, seen) if f.is_struct_type else leaf.wanted(f)
               for f in struct_of[struct].fields)
