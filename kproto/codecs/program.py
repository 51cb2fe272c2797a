"""Programs for the C decoder and encoder (``kproto.codecs._decoder``), built from the same schema
walk as the generated Python decoders and encoders.

A program is plain nested tuples, compiled once by ``_decoder.Program``:

* struct: ``(cls, unknown_offset, flexible, defaults, ops, ((tag, op, default), ...), guards)``:
  ``guards`` are the defaults of the fields absent at this version that the encoder must find at
  their default (the spec's non-ignorable ones), a tagged field's ``default`` tells the encoder
  when to leave it out
* op: ``(code, slot_offset, flags, sub)``: ``sub`` is the element op of an array or the struct
  program of a struct field
* default: ``(slot_offset, kind, value)``: a constant, an empty list, or a default struct
  ``(cls, unknown_offset, defaults)``; the decoder leaves the slot of a default list or struct
  empty (the field's LazyDefault makes it on first read), and so an array read empty (flag
  ``F_LAZY``), and the encoder takes an empty slot as the default
* an array of structs in a slot (flag ``F_PEND``) read from a read-only buffer is checked whole
  but left pending: the field's LazyDefault, and the encoder, build its list (and the arrays
  nested in it) from the bytes when first needed

Slots are addressed by byte offset, so the C side fills objects without attribute lookups.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from kproto.codecs.plan import VersionPlan
from kproto.accelerators import load
from kproto.codecs.objects import parse_default
from kproto.codecs.primitives import Uuid
from kproto.schemas.model import Field

# optional (see kproto.accelerators): the generated Python decoders are the reference
_decoder = load("kproto.codecs._decoder")
if _decoder is not None:
    _decoder.set_uuid_type(Uuid)

OP_CODES = {"bool": 1, "int8": 2, "int16": 3, "uint16": 4, "int32": 5, "uint32": 6, "int64": 7,
            "float64": 8, "uuid": 9, "string": 10, "bytes": 11, "records": 11}
OP_STRUCT, OP_ARRAY = 12, 13
F_COMPACT, F_NULLABLE, F_VIEW, F_TAGGED, F_LAZY, F_PEND = 1, 2, 4, 8, 16, 32
D_CONST, D_LIST, D_STRUCT = 0, 1, 2


def slot_offset(cls: type, attr: str) -> int:
    """Byte offset of the ``__slots__`` member ``attr`` of ``cls`` (defined on it or a base)."""
    assert _decoder is not None  # programs are built only where the C decoder is
    for klass in cls.__mro__:
        descr = klass.__dict__.get(attr)
        if descr is not None:
            return _decoder.slot_offset(descr)
    raise AttributeError(f"{cls.__qualname__} has no slot {attr}")


class ProgramBuilder:
    """The decoder program of one (message, version); see the module docstring."""

    def __init__(self, message, version: int, classes: Dict[str, type]) -> None:
        self.m = message
        self.classes = classes
        self.plan = VersionPlan(message, version)
        self._defaults: Dict[type, Tuple[Any, ...]] = {}

    def program(self) -> Tuple[Any, ...]:
        return self.struct_program(self.m.name, self.m.fields)

    def struct_program(self, sname: str, fields) -> Tuple[Any, ...]:
        cls = self.classes[sname]
        regular, tagged, absent = self.plan.present(fields)
        defaults = tuple(self.default_entry(cls, f) for f in absent + tagged)
        ops = tuple(self.op(f, slot_offset(cls, f.attr)) for f in regular)
        tags = tuple((f.tag, self.op(f, slot_offset(cls, f.attr), tagged=True), self.default_entry(cls, f))
                     for f in tagged)
        guards = tuple(self.default_entry(cls, f) for f in absent if not f.ignorable)
        return (cls, slot_offset(cls, "_unknown_tagged_fields"), self.plan.flexible, defaults, ops, tags,
                guards)

    def op(self, f: Field, offset: int, tagged: bool = False) -> Tuple[Any, ...]:
        flags = F_COMPACT if self.plan.field_flexible(f) else 0
        if self.plan.nullable(f):
            flags |= F_NULLABLE
        if tagged:
            flags |= F_TAGGED  # a null tagged struct is the byte 0, not -1
        if f.is_array:
            elem = Field(f.name, f.element_type, f.versions, nullable=None, flexible=f.flexible)
            sub: Optional[Tuple[Any, ...]] = self.op(elem, -1)
            if offset >= 0 and parse_default(f, self.classes)[1] is list:
                flags |= F_LAZY   # a LazyDefault slot: the decoder leaves an empty array to it
            if offset >= 0 and f.is_struct_type:
                flags |= F_PEND   # a LazyDefault slot (every array of structs has one): built on first read
            return (OP_ARRAY, offset, flags, sub)
        if f.is_struct_type:
            if offset >= 0 and parse_default(f, self.classes)[1] is not None:
                flags |= F_LAZY   # a LazyDefault slot (kproto.codecs.objects): empty means default
            return (OP_STRUCT, offset, flags, self.struct_program(f.type, self.plan.struct_fields(f)))
        if f.type == "records" or f.zero_copy:
            flags |= F_VIEW   # Kafka reads these as slices of the buffer (zeroCopy): so do we
        return (OP_CODES[f.type], offset, flags, None)

    def default_entry(self, cls: type, f: Field) -> Tuple[int, int, Any]:
        value, factory = parse_default(f, self.classes)
        offset = slot_offset(cls, f.attr)
        if factory is None:
            return (offset, D_CONST, value)
        assert _decoder is not None and isinstance(getattr(cls, f.attr), _decoder.LazyDefault), (cls, f.attr)
        if factory is list:
            return (offset, D_LIST, None)
        return (offset, D_STRUCT, self.default_struct(factory))

    def default_struct(self, cls: type) -> Tuple[Any, ...]:
        """What ``cls._make_default()`` builds: every field of the struct at its default."""
        spec = self._defaults.get(cls)
        if spec is None:
            fields = cls._schema_struct.fields  # type: ignore[attr-defined]
            spec = (cls, slot_offset(cls, "_unknown_tagged_fields"),
                    tuple(self.default_entry(cls, f) for f in fields))
            self._defaults[cls] = spec
        return spec


def pending_fields(obj: Any) -> Tuple[str, ...]:
    """The fields of a decoded message object (not its nested ones) whose arrays of structs are
    still to be built: the C decoder checks such an array whole when it decodes a read-only
    buffer, and builds its list, with every array nested in its elements, on the field's first
    read (or encoding). Until then the object keeps the buffer it was decoded from, as
    ``records`` views do. Empty without the C decoder."""
    if _decoder is None:
        return ()
    cls = type(obj)
    return tuple(name for name in getattr(cls, "_fields", ())
                 if isinstance(d := getattr(cls, name), _decoder.LazyDefault) and d.pending(obj))


def clear_pools() -> None:
    """Free what the C decoder keeps between messages (freed message objects, lists, ints and
    records views for the next decode; the last message of each program decoded whole and freed,
    which the next decode writes into; shared strings and UUIDs); a no-op without it."""
    if _decoder is not None:
        _decoder.clear_pools()


def compile_program(message, version: int, classes: Dict[str, type]) -> Optional[Any]:
    """The C program of this version (``decode(buf, pos)``, ``decode_whole(buf)``, ``encode(obj)``,
    ``encode_parts(obj, parts)``), or None without the C module."""
    if _decoder is None:
        return None
    return _decoder.Program(ProgramBuilder(message, version, classes).program())
