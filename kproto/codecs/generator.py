"""Generate specialised Python source for one (message, version): a decoder and an encoder.

Kafka's own generator turns specs into Java classes; this does the same at run time, once per
(message, version), into straight-line Python: consecutive fixed-width fields (and the length prefix
that follows them) are read and written with one precompiled ``struct.Struct``, nested structs are
inlined, no field is looked up in a schema while bytes are moving.

Each function exists in two flavours built from the same emitter:

* fast (``checked=False``): no bookkeeping; malformed input surfaces as some Python exception;
* checked (``checked=True``): tracks the field path and offset and raises precise errors. It runs
  only after the fast flavour failed, to explain why.

Where the C decoder is built, :mod:`kproto.codecs.program` walks the schema the same way (``present``,
``field_flexible``, ``nullable``) into a program for it, and the fast Python decoder becomes the
reference it is tested against.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from kproto.codecs.objects import parse_default
from kproto.codecs.plan import VersionPlan
from kproto.schemas.model import Field, Message

FIXED = {  # type -> (struct code, size)
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2),
    "int32": ("i", 4), "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8),
    "uuid": ("16s", 16),
}


class _Src:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def __call__(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class CodeGen:
    """Emit the decoder and encoder of ``message`` at ``version``."""

    def __init__(self, message: Message, version: int, classes: Dict[str, type], checked: bool) -> None:
        self.m = message
        self.v = version
        self.classes = classes
        self.checked = checked
        self.plan = VersionPlan(message, version)
        self.ns: Dict[str, Any] = {}
        self._consts: Dict[Any, str] = {}
        self._n = 0
        self.tag_field: Optional[Field] = None  # the tagged field being read or written

    # -- helpers ------------------------------------------------------------------------------
    def const(self, value: Any, hint: str = "k") -> str:
        key = (hint, repr(value), type(value).__name__) if not callable(value) else (hint, id(value))
        name = self._consts.get(key)
        if name is None:
            name = f"_{hint}{len(self._consts)}"
            self._consts[key] = name
            self.ns[name] = value
        return name

    def tmp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"


    def default_expr(self, f: Field) -> str:
        value, factory = parse_default(f, self.classes)
        if factory is None:
            return self.const(value, "d")
        if factory is list:
            return "[]"
        make = factory._make_default  # type: ignore[attr-defined]  # set by build_classes
        return self.const(make, "f") + "()"

    def differs_from_default(self, f: Field, expr: str) -> str:
        """A Python expression true when ``expr`` (the value of ``f``) is not ``f``'s default.

        Same answer as ``expr != default``, without MessageObject.__eq__'s generic loop: a
        FetchResponse partition has three tagged struct fields to test, which made that loop a
        third of its encoding time.
        """
        value, factory = parse_default(f, self.classes)
        if factory is None:
            return f"{expr} is not None" if value is None else f"{expr} != {self.const(value, 'd')}"
        if factory is list:
            return f"{expr} != []"
        cls = self.const(factory, "C")
        parts = [f"type({expr}) is not {cls}"]
        for sub in factory._schema_struct.fields:  # type: ignore[attr-defined]
            parts.append(self.differs_from_default(sub, f"{expr}.{sub.attr}"))
        parts.append(f"{expr}._unknown_tagged_fields")
        return "(" + " or ".join(parts) + ")"

    # -- decoder ------------------------------------------------------------------------------
    def gen_decoder(self) -> str:
        s = _Src()
        fn = "decode_checked" if self.checked else "decode"
        s(0, f"def {fn}(buf, pos, _t):" if self.checked else f"def {fn}(buf, pos):")
        s(1, "blen = len(buf)")
        self.uses_view = False
        self.dec_struct(s, 1, self.m.fields, self.m.name, "o0", 0)
        if self.uses_view:
            s.lines.insert(2, "    mv = buf if type(buf) is _memoryview else _memoryview(buf)")
        s(1, "return o0, pos")
        return s.text()

    def _fail(self, s: _Src, d: int, reason_expr: str) -> None:
        s(d, f"raise _Fail({reason_expr}, pos)")

    def _read_uvarint(self, s: _Src, d: int, var: str, two_byte: bool = False) -> None:
        s(d, f"{var} = buf[pos]")
        s(d, "pos += 1")
        self._uvarint_rest(s, d, var, two_byte)

    def _uvarint_rest(self, s: _Src, d: int, var: str, two_byte: bool) -> None:
        """``var`` holds the varint's first byte and ``pos`` points past it: finish reading it."""
        s(d, f"if {var} > 127:")
        if two_byte:   # lengths of 128..16383 bytes are common: read them without a call
            b2 = self.tmp("b")
            s(d + 1, f"{b2} = buf[pos]")
            s(d + 1, f"if {b2} < 128:")
            s(d + 2, f"{var} = ({var} & 127) | ({b2} << 7)")
            s(d + 2, "pos += 1")
            s(d + 1, "else:")
            s(d + 2, f"{var}, pos = _ruv(buf, pos - 1)")
        else:
            s(d + 1, f"{var}, pos = _ruv(buf, pos - 1)")

    def dec_struct(self, s: _Src, d: int, fields, sname: str, target: str, depth: int) -> None:
        cls = self.const(self.classes[sname], "C")
        s(d, f"{target} = _new({cls})")
        if self.checked:
            s(d, "_t.append(None)")
        regular, tagged, absent = self.plan.present(fields)
        tags_prefix = None
        for f in absent + tagged:
            s(d, f"{target}.{f.attr} = {self.default_expr(f)}")
        i = 0
        while i < len(regular):
            f = regular[i]
            if self.checked:
                s(d, f"_t[-1] = ({f.attr!r}, pos)")
            if f.type in FIXED and not self.checked:
                group = []
                while i < len(regular) and regular[i].type in FIXED:
                    group.append(regular[i])
                    i += 1
                # the length prefix of the next field joins the group when it has a fixed width
                prefix = None
                if i < len(regular):
                    prefix = self._fixed_prefix(regular[i], speculative=True)
                elif self.plan.flexible:
                    prefix = ("B", 1)   # first byte of the tagged-field count
                fmt = ">" + "".join(FIXED[g.type][0] for g in group)
                size = sum(FIXED[g.type][1] for g in group)
                targets = []
                post = []
                for g in group:
                    if g.type == "uuid":
                        tv = self.tmp("u")
                        targets.append(tv)
                        post.append(f"{target}.{g.attr} = _bnew(_Uuid, {tv})")
                    else:
                        targets.append(f"{target}.{g.attr}")
                pvar = None
                if prefix is not None:
                    fmt += prefix[0]
                    size += prefix[1]
                    pvar = self.tmp("n")
                    targets.append(pvar)
                st = self.const(struct.Struct(fmt), "S")
                s(d, f"{', '.join(targets)}, = {st}.unpack_from(buf, pos)")
                s(d, f"pos += {size}")
                for p in post:
                    s(d, p)
                if pvar is not None and i < len(regular):
                    self.dec_field(s, d, regular[i], target, depth, prefix_var=pvar)
                    i += 1
                elif pvar is not None:
                    tags_prefix = pvar
                continue
            self.dec_field(s, d, f, target, depth)
            i += 1
        if self.plan.flexible:
            self.dec_tags(s, d, tagged, target, depth, prefix_var=tags_prefix)
        else:
            s(d, f"{target}._unknown_tagged_fields = None")
        if self.checked:
            s(d, "_t.pop()")

    def _fixed_prefix(self, f: Field, speculative: bool = False) -> Optional[Tuple[str, int]]:
        """The struct code of a field's length/count/null prefix when it has a fixed width.

        With ``speculative``, a compact (varint) prefix is read as its first byte ("B"): when that
        byte is below 128 it is the whole varint, otherwise the reader goes back for the rest.
        """
        compact = ("B", 1) if speculative else None
        if f.is_array or f.type in ("bytes", "records"):
            return compact if self.plan.field_flexible(f) else ("i", 4)
        if f.type == "string":
            return compact if self.plan.field_flexible(f) else ("h", 2)
        if f.is_struct_type and self.plan.nullable(f):
            return ("b", 1)
        return None

    def _read_len(self, s: _Src, d: int, f: Field, var: str, prefix_var: Optional[str]) -> None:
        """Read a length/count into ``var`` as a signed int (-1 = null)."""
        if prefix_var is not None:
            s(d, f"{var} = {prefix_var}")
            if self.plan.field_flexible(f):
                self._uvarint_rest(s, d, var, two_byte=True)
                s(d, f"{var} -= 1")
            return
        if self.plan.field_flexible(f):
            self._read_uvarint(s, d, var, two_byte=True)
            s(d, f"{var} -= 1")
        else:
            code = "_I16" if (f.type == "string" and not f.is_array) else "_I32"
            s(d, f"{var}, = {code}.unpack_from(buf, pos)")
            s(d, f"pos += {2 if code == '_I16' else 4}")

    def _read_len_or_null(self, s: _Src, d: int, f: Field, dest: str, prefix_var: Optional[str]) -> str:
        """Read the length of ``f`` into a new variable (returned) and open an ``if`` on a
        negative one: null where ``f`` is nullable, an error where not."""
        n = self.tmp("n")
        self._read_len(s, d, f, n, prefix_var)
        s(d, f"if {n} < 0:")
        if self.plan.nullable(f):
            s(d + 1, f"{dest} = None")
        else:
            self._fail(s, d + 1, repr(f"non-nullable field {f.name} was serialized as null"))
        return n

    def dec_field(self, s: _Src, d: int, f: Field, target: str, depth: int, prefix_var: Optional[str] = None,
                  assign: Optional[str] = None) -> None:
        dest = assign or f"{target}.{f.attr}"
        t = f.type
        if f.is_array:
            n = self._read_len_or_null(s, d, f, dest, prefix_var)
            s(d, f"elif {n} > blen - pos:")
            self._fail(s, d + 1, f"'array of ' + str({n}) + ' elements but only ' + str(blen - pos) + ' bytes left'")
            s(d, "else:")
            et = f.element_type
            if et in FIXED and et not in ("uuid", "bool"):
                code, size = FIXED[et]
                s(d + 1, f"{dest} = list(_AU{code}[{n}](buf, pos) if {n} < 256 else _arr({code!r}, {n}).unpack_from(buf, pos))")
                s(d + 1, f"pos += {n} * {size}")
                return
            lst = self.tmp("L")
            s(d + 1, f"{lst} = []")
            idx = self.tmp("i")
            s(d + 1, f"for {idx} in range({n}):")
            if f.is_struct_type:
                sub = f"o{depth + 1}"
                if self.checked:
                    s(d + 2, f"_t[-1] = ({f.attr!r} + '[' + str({idx}) + ']', pos)")
                self.dec_struct(s, d + 2, self.plan.struct_fields(f), et, sub, depth + 1)
                s(d + 2, f"{lst}.append({sub})")
            else:
                ev = self.tmp("e")
                elem = Field(f.name, et, f.versions, nullable=None, flexible=f.flexible)
                self.dec_field(s, d + 2, elem, target, depth, assign=ev)
                s(d + 2, f"{lst}.append({ev})")
            s(d + 1, f"{dest} = {lst}")
            return
        if t in FIXED:
            code, size = FIXED[t]
            tv = self.tmp("x")
            s(d, f"{tv}, = {self.const(struct.Struct('>' + code), 'S')}.unpack_from(buf, pos)")
            s(d, f"pos += {size}")
            s(d, f"{dest} = _bnew(_Uuid, {tv})" if t == "uuid" else f"{dest} = {tv}")
            return
        if t in ("string", "bytes", "records"):
            n = self._read_len_or_null(s, d, f, dest, prefix_var)
            if t == "string":
                s(d, f"elif {n} > 32767:")
                self._fail(s, d + 1, repr(f"string field {f.name} had invalid length ") + f" + str({n})")
            s(d, f"elif {n} > blen - pos:")
            self._fail(s, d + 1, f"'length ' + str({n}) + ' but only ' + str(blen - pos) + ' bytes left'")
            s(d, "else:")
            if t == "string" and self.checked:
                s(d + 1, f"{dest} = _utf8(buf, pos, {n})")
            elif t == "string":
                s(d + 1, f"{dest} = _str(buf[pos:pos + {n}], 'utf-8')")
            elif t == "records" or f.zero_copy:
                # Kafka reads these as slices of the request buffer (zeroCopy): so do we
                self.uses_view = True
                s(d + 1, f"{dest} = mv[pos:pos + {n}]")
            else:
                s(d + 1, f"{dest} = buf[pos:pos + {n}]")
            s(d + 1, f"pos += {n}")
            return
        if f.is_struct_type:
            sub = f"o{depth + 1}"
            if self.plan.nullable(f):
                if prefix_var is not None:
                    mk = prefix_var
                else:
                    mk = self.tmp("m")
                    s(d, f"{mk}, = _I8.unpack_from(buf, pos)")
                    s(d, "pos += 1")
                # Kafka writes a null tagged struct as the byte 0 (a regular one as -1)
                s(d, f"if {mk} {'<=' if f is self.tag_field else '<'} 0:")
                s(d + 1, f"{dest} = None")
                s(d, "else:")
                self.dec_struct(s, d + 1, self.plan.struct_fields(f), t, sub, depth + 1)
                s(d + 1, f"{dest} = {sub}")
            else:
                self.dec_struct(s, d, self.plan.struct_fields(f), t, sub, depth + 1)
                s(d, f"{dest} = {sub}")
            return
        raise ValueError(f"unsupported type {t}")

    def dec_tags(self, s: _Src, d: int, tagged: List[Field], target: str, depth: int,
                 prefix_var: Optional[str] = None) -> None:
        nt = self.tmp("nt")
        if self.checked:
            s(d, f"_t[-1] = ('<tagged fields>', pos)")
        if prefix_var is not None:
            nt = prefix_var
        else:
            s(d, f"{nt} = buf[pos]")
            s(d, "pos += 1")
        # the usual case, no tagged field, costs one test
        s(d, f"if {nt}:")
        s(d + 1, f"if {nt} > 127:")
        s(d + 2, f"{nt}, pos = _ruv(buf, pos - 1)")
        s(d + 1, f"{target}._unknown_tagged_fields = None")
        s(d + 1, f"for _ in range({nt}):")
        tg, sz, end = self.tmp("tag"), self.tmp("sz"), self.tmp("end")
        self._read_uvarint(s, d + 2, tg)
        self._read_uvarint(s, d + 2, sz)
        s(d + 2, f"{end} = pos + {sz}")
        s(d + 2, f"if {end} > blen:")
        self._fail(s, d + 3, f"'tagged field ' + str({tg}) + ' of ' + str({sz}) + ' bytes but only ' + str(blen - pos) + ' left'")
        kw = "if"
        for f in tagged:
            s(d + 2, f"{kw} {tg} == {f.tag}:")
            if self.checked:
                s(d + 3, f"_t[-1] = ({f.attr!r}, pos)")
            # tagged fields are always in their flexible form
            self.tag_field = f
            self.dec_field(s, d + 3, f, target, depth)
            self.tag_field = None
            s(d + 3, f"if pos != {end}:")
            self._fail(s, d + 4, f"'tagged field {f.name} should span ' + str({sz}) + ' bytes, read ' + str(pos - {end} + {sz})")
            kw = "elif"
        s(d + 2, "else:" if tagged else "if True:")
        s(d + 3, f"if {target}._unknown_tagged_fields is None:")
        s(d + 4, f"{target}._unknown_tagged_fields = []")
        s(d + 3, f"{target}._unknown_tagged_fields.append(({tg}, bytes(buf[pos:{end}])))")
        s(d + 3, f"pos = {end}")
        s(d, "else:")
        s(d + 1, f"{target}._unknown_tagged_fields = None")

    # -- encoder ------------------------------------------------------------------------------
    def gen_encoder(self) -> str:
        s = _Src()
        fn = "encode_checked" if self.checked else "encode"
        s(0, f"def {fn}(o0, w, _t):" if self.checked else f"def {fn}(o0, w):")
        s(1, "pass")
        self.enc_struct(s, 1, self.m.fields, "o0", 0, "w")
        return s.text()

    def _efail(self, s: _Src, d: int, reason_expr: str, exc: str = "_EncodeError") -> None:
        s(d, f"raise {exc}({reason_expr})")

    def enc_struct(self, s: _Src, d: int, fields, obj: str, depth: int, w: str) -> None:
        regular, tagged, absent = self.plan.present(fields)
        if self.checked:
            s(d, "_t.append(None)")
            s(d, f"if not isinstance({obj}, {self.const(self.classes_for(fields), 'C')}):")
            self._efail(s, d + 1, f"'expected a ' + {self.const(self.classes_for(fields), 'C')}.__qualname__ + ', got ' + type({obj}).__name__")
        for f in absent:
            if f.ignorable:
                continue
            s(d, f"if {self.differs_from_default(f, f'{obj}.{f.attr}')}:")
            msg = f"Attempted to write a non-default {f.name} at version {self.v}"
            self._efail(s, d + 1, repr(msg), "_Unsupported")
        i = 0
        while i < len(regular):
            f = regular[i]
            if self.checked:
                s(d, f"_t[-1] = {f.attr!r}")
            if f.type in FIXED and f.type != "uuid" and not self.checked:
                group = []
                while i < len(regular) and regular[i].type in FIXED and regular[i].type != "uuid":
                    group.append(regular[i])
                    i += 1
                args = [f"{obj}.{g.attr}" for g in group]
                fmt = ">" + "".join(FIXED[g.type][0] for g in group)
                nxt = regular[i] if i < len(regular) else None
                prefix = self._fixed_prefix(nxt) if nxt is not None else None
                if prefix is not None and nxt is not None:
                    # compute the next field's payload first so its length joins this pack
                    pl = self.enc_prepare(s, d, nxt, obj, depth, w)
                    args.append(pl[0])
                    fmt += prefix[0]
                    s(d, f"{w}({self.const(struct.Struct(fmt), 'S')}.pack({', '.join(args)}))")
                    self.enc_finish(s, d, nxt, obj, depth, w, pl)
                    i += 1
                else:
                    s(d, f"{w}({self.const(struct.Struct(fmt), 'S')}.pack({', '.join(args)}))")
                continue
            pl = self.enc_prepare(s, d, f, obj, depth, w)
            self.enc_write_len(s, d, f, w, pl)
            self.enc_finish(s, d, f, obj, depth, w, pl)
            i += 1
        if self.plan.flexible:
            self.enc_tags(s, d, tagged, obj, depth, w)
        if self.checked:
            s(d, "_t.pop()")

    def classes_for(self, fields) -> type:
        for name, st in self.plan.structs.items():
            if st.fields is fields:
                return self.classes[name]
        raise KeyError("struct not found")

    def enc_prepare(self, s: _Src, d: int, f: Field, obj: str, depth: int, w: str,
                    value: Optional[str] = None) -> tuple:
        """Emit code computing what precedes the length prefix; return (len expr, payload var, kind)."""
        v = self.tmp("v")
        s(d, f"{v} = {value if value is not None else obj + '.' + f.attr}")
        t = f.type
        null_ok = self.plan.nullable(f)
        if self.checked and t not in FIXED and not null_ok:
            s(d, f"if {v} is None:")
            self._efail(s, d + 1, repr(f"non-nullable field {f.name} was serialized as null"))
        ln = self.tmp("ln")
        if f.is_array:
            if null_ok:
                s(d, f"{ln} = -1 if {v} is None else len({v})")
            else:
                s(d, f"{ln} = len({v})")
            return (ln, v, "array")
        if t == "string":
            if self.checked:
                s(d, f"if {v} is not None and not isinstance({v}, str):")
                self._efail(s, d + 1, f"'expected str, got ' + type({v}).__name__")
            if null_ok:
                s(d, f"if {v} is None:")
                s(d + 1, f"{ln} = -1")
                s(d, "else:")
                s(d + 1, f"{v} = {v}.encode('utf-8')")
                s(d + 1, f"{ln} = len({v})")
            else:
                s(d, f"{v} = {v}.encode('utf-8')")
                s(d, f"{ln} = len({v})")
            s(d, f"if {ln} > 32767:")
            self._efail(s, d + 1, f"'string field {f.name} had invalid length ' + str({ln})")
            return (ln, v, "bytes")
        if t in ("bytes", "records"):
            if self.checked:
                s(d, f"if {v} is not None:")
                s(d + 1, f"{v} = _as_bytes({v})")
            if null_ok:
                s(d, f"{ln} = -1 if {v} is None else len({v})")
            else:
                s(d, f"{ln} = len({v})")
            return (ln, v, "bytes")
        if f.is_struct_type:
            if null_ok:
                s(d, f"{ln} = -1 if {v} is None else 1")
            else:
                s(d, f"{ln} = 1")
            return (ln, v, "struct")
        return (None, v, "fixed")

    def enc_write_len(self, s: _Src, d: int, f: Field, w: str, pl: tuple) -> None:
        ln, v, kind = pl
        if kind == "fixed":
            return
        if kind == "struct":
            if self.plan.nullable(f):
                null = "_B_ZERO" if f is self.tag_field else "_B_NULL"
                s(d, f"{w}({null} if {ln} < 0 else _B_ONE)")
            return
        if self.plan.field_flexible(f):
            s(d, f"{w}(_UV[{ln} + 1] if {ln} < 127 else _uv({ln} + 1))")
        elif f.type == "string" and not f.is_array:
            s(d, f"{w}(_I16.pack({ln}))")
        else:
            s(d, f"{w}(_I32.pack({ln}))")

    def enc_finish(self, s: _Src, d: int, f: Field, obj: str, depth: int, w: str, pl: tuple) -> None:
        ln, v, kind = pl
        t = f.type
        if kind == "fixed":
            code, _ = FIXED[t]
            if t == "uuid":
                s(d, f"if len({v}) != 16:")
                self._efail(s, d + 1, repr(f"uuid field {f.name} must be 16 bytes"))
                s(d, f"{w}({v})")
            else:
                s(d, f"{w}({self.const(struct.Struct('>' + code), 'S')}.pack({v}))")
            return
        if kind == "bytes":
            s(d, f"if {ln} > 0:")
            s(d + 1, f"{w}({v})")
            return
        if kind == "struct":
            sub = f"o{depth + 1}"
            if self.plan.nullable(f):
                s(d, f"if {ln} > 0:")
                s(d + 1, f"{sub} = {v}")
                self.enc_struct(s, d + 1, self.plan.struct_fields(f), sub, depth + 1, w)
            else:
                s(d, f"{sub} = {v}")
                self.enc_struct(s, d, self.plan.struct_fields(f), sub, depth + 1, w)
            return
        # arrays
        et = f.element_type
        s(d, f"if {ln} > 0:")
        if et in FIXED and et not in ("uuid", "bool"):
            code, _ = FIXED[et]
            s(d + 1, f"{w}(_AP{code}[{ln}](*{v}) if {ln} < 256 else _arr({code!r}, {ln}).pack(*{v}))")
            return
        sub = f"o{depth + 1}"
        idx = self.tmp("i")
        s(d + 1, f"for {idx}, {sub} in enumerate({v}):" if self.checked else f"for {sub} in {v}:")
        if self.checked:
            s(d + 2, f"_t[-1] = {f.attr!r} + '[' + str({idx}) + ']'")
        if f.is_struct_type:
            self.enc_struct(s, d + 2, self.plan.struct_fields(f), sub, depth + 1, w)
        else:
            elem = Field(f.name, et, f.versions, nullable=None, flexible=f.flexible)
            epl = self.enc_prepare(s, d + 2, elem, obj, depth, w, value=sub)
            self.enc_write_len(s, d + 2, elem, w, epl)
            self.enc_finish(s, d + 2, elem, obj, depth, w, epl)

    def enc_tags(self, s: _Src, d: int, tagged: List[Field], obj: str, depth: int, w: str) -> None:
        unk = self.tmp("unk")
        s(d, f"{unk} = {obj}._unknown_tagged_fields")
        if not tagged:
            s(d, f"if {unk}:")
            s(d + 1, f"_write_tags({w}, list({unk}))")
            s(d, "else:")
            s(d + 1, f"{w}(_B_ZERO)")
            return
        tl = self.tmp("tl")
        s(d, f"{tl} = list({unk}) if {unk} else []")
        for f in tagged:
            s(d, f"if {self.differs_from_default(f, f'{obj}.{f.attr}')}:")
            if self.checked:
                s(d + 1, f"_t[-1] = {f.attr!r}")
            b = self.tmp("b")
            s(d + 1, f"{b} = []")
            wb = self.tmp("w")
            s(d + 1, f"{wb} = {b}.append")
            pl = self.enc_prepare(s, d + 1, f, obj, depth, wb)
            self.tag_field = f
            self.enc_write_len(s, d + 1, f, wb, pl)
            self.tag_field = None
            self.enc_finish(s, d + 1, f, obj, depth, wb, pl)
            s(d + 1, f"{tl}.append(({f.tag}, _join({b})))")
        s(d, f"if {tl}:")
        s(d + 1, f"_write_tags({w}, {tl})")
        s(d, "else:")
        s(d + 1, f"{w}(_B_ZERO)")
