"""The codec engine: schema + version in, specialised encoder and decoder out (generated
Python, and a program for the C decoder and encoder), compiled on first use and cached per version; the
registry of messages by name, API key and metadata record type."""
from __future__ import annotations

import gc
import importlib
import struct
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import kproto.codecs.generator as _gen
from kproto.codecs.json_convention import build_plan, struct_from_json, struct_to_json
from kproto.codecs.objects import MessageObject, build_classes
from kproto.codecs.program import compile_program
from kproto.codecs.primitives import INT8, INT16, INT32, Buffer, Uuid, read_uvarint, uvarint
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schemas._index import ALIASES, KAFKA_VERSION, RELEASES, SCHEMAS
from kproto.schemas.model import Message

__all__ = ["MessageCodec", "message", "request", "response", "messages", "schema", "Uuid",
           "MessageObject", "KAFKA_VERSION", "RELEASES", "metadata_record", "coordinator_record",
           "api_keys"]


class _Fail(Exception):
    """Raised by checked decoders; carries the reason and the byte offset."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


_ARR_CACHE: Dict[Tuple[str, int], struct.Struct] = {}


def _arr(code: str, n: int) -> struct.Struct:
    key = (code, n)
    st = _ARR_CACHE.get(key)
    if st is None:
        st = struct.Struct(f">{n}{code}")
        if n <= 4096:
            _ARR_CACHE[key] = st
    return st


def _write_tags(w: Callable[[Any], Any], tags: List[Tuple[int, Any]]) -> None:
    tags.sort(key=lambda t: t[0])
    w(uvarint(len(tags)))
    for tag, data in tags:
        w(uvarint(tag))
        w(uvarint(len(data)))
        w(data)


def _as_bytes(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return v
    if hasattr(v, "__bytes__"):
        return bytes(v)
    raise EncodeError(f"expected bytes, got {type(v).__name__}")


def _ruv(buf: Buffer, pos: int) -> Tuple[int, int]:
    try:
        return read_uvarint(buf, pos)
    except DecodeError as exc:
        raise _Fail(exc.reason, exc.offset if exc.offset is not None else pos) from None


def _utf8(buf: Buffer, pos: int, n: int) -> str:
    try:
        return str(buf[pos:pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise _Fail(f"invalid UTF-8: {exc.reason}", pos + exc.start) from None


_gc_isenabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
_UV_BYTES = tuple(bytes([i]) for i in range(128))
_ARRAY_CODES = ("b", "h", "i", "q")
_SMALL_ARRAYS = {code: [struct.Struct(f">{n}{code}") for n in range(256)] for code in _ARRAY_CODES}

_BASE_NS = {
    "_UV": _UV_BYTES, "_join": b"".join, "_memoryview": memoryview,
    "_utf8": _utf8,
    "_new": object.__new__, "_bnew": bytes.__new__, "_Uuid": Uuid, "_str": str,
    "_I8": INT8, "_I16": INT16, "_I32": INT32, "_arr": _arr, "_ruv": _ruv, "_uv": uvarint,
    "_Fail": _Fail, "_EncodeError": EncodeError, "_Unsupported": UnsupportedVersionError,
    "_write_tags": _write_tags, "_as_bytes": _as_bytes,
    "_B_ZERO": b"\x00", "_B_NULL": b"\xff", "_B_ONE": b"\x01",
}
for _code in _ARRAY_CODES:
    _BASE_NS["_AU" + _code] = tuple(st.unpack_from for st in _SMALL_ARRAYS[_code])
    _BASE_NS["_AP" + _code] = tuple(st.pack for st in _SMALL_ARRAYS[_code])

# Exceptions through which malformed bytes surface in the fast decoders.
_DECODE_FAULTS = (struct.error, IndexError, ValueError, TypeError, OverflowError, MemoryError,
                  UnicodeDecodeError, _Fail, DecodeError)
_ENCODE_FAULTS = (struct.error, AttributeError, TypeError, ValueError, OverflowError, UnicodeEncodeError,
                  IndexError, KeyError)


class _Compiled:
    """The generated functions of one version (checked ones built on first failure)."""

    __slots__ = ("decode", "decode_py", "decode_c", "decode_whole_c", "encode", "encode_c", "encode_parts_c",
                 "decode_checked", "encode_checked", "json_plan", "source")

    def __init__(self) -> None:
        self.decode: Any = None      # decode_c when the C decoder is built, else decode_py
        self.decode_py: Any = None
        self.decode_c: Any = None
        self.decode_whole_c: Any = None  # the C program's decode_whole(buf) -> obj, where built
        self.encode: Any = None      # the generated Python encoder encode(obj, write): the reference
        self.encode_c: Any = None    # the C program's encode(obj) -> bytes, where built
        self.encode_parts_c: Any = None  # ... and its encode_parts(obj, parts)
        self.source = ""
        self.decode_checked: Any = None
        self.encode_checked: Any = None
        self.json_plan: Any = None


class MessageCodec:
    """Encoder, decoder and JSON converter of one message, for each of its versions."""

    def __init__(self, schema: Message) -> None:
        self.schema = schema
        self.name: str = schema.name
        self.kind: str = schema.kind
        self.api_key: Optional[int] = schema.api_key
        self.valid_versions: range = schema.versions
        fr = schema.flexible_range
        hi = self.valid_versions.stop - 1
        self.flexible_versions: range = range(fr.lo, hi + 1) if not fr.empty and fr.lo <= hi else range(0)
        dr = schema.deprecated_range
        self.deprecated_versions: range = (
            range(dr.lo, (dr.hi if dr.hi is not None else hi) + 1) if schema.deprecated and not dr.empty
            else range(0))
        self.aliases: Tuple[str, ...] = tuple(schema.aliases)
        #: (versions, Kafka release) runs in version order: which release's spec defines each version
        self.releases: List[Tuple[range, str]] = sorted(
            ((range(r.lo, (r.hi if r.hi is not None else hi) + 1), name)
             for r, name in schema.release_ranges), key=lambda x: x[0].start)
        self.classes: Dict[str, type] = build_classes(schema)
        self.cls: Any = self.classes[schema.name]  # generated: nested classes are attributes
        self._compiled: Dict[int, _Compiled] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"<MessageCodec {self.name} api_key={self.api_key} "
                f"versions={self.valid_versions.start}-{self.valid_versions.stop - 1}>")

    def release(self, version: int) -> str:
        """The Kafka release whose spec defines ``version`` (``"3.9"``, ``"4.3.1"``): the newest
        release that has it; versions a newer release dropped keep their older definition."""
        self._check_version(version)
        name = self.schema.release(version)
        assert name is not None, (self.name, version)
        return name

    # -- compilation --------------------------------------------------------------------------
    def _check_version(self, version: int) -> None:
        if version not in self.valid_versions:
            raise UnsupportedVersionError(
                f"{self.name} has no version {version} (valid: {self.valid_versions.start}-"
                f"{self.valid_versions.stop - 1})")

    def _get(self, version: int) -> _Compiled:
        c = self._compiled.get(version)
        if c is None:
            self._check_version(version)
            with self._lock:
                c = self._compiled.get(version)
                if c is None:
                    c = _Compiled()
                    gen = _gen.CodeGen(self.schema, version, self.classes, checked=False)
                    src = gen.gen_decoder() + "\n" + gen.gen_encoder()
                    ns = dict(_BASE_NS)
                    ns.update(gen.ns)
                    exec(compile(src, f"<kproto {self.name} v{version}>", "exec"), ns)
                    c.decode_py, c.encode, c.source = ns["decode"], ns["encode"], src
                    prog = compile_program(self.schema, version, self.classes)
                    if prog is not None:
                        c.decode_c, c.decode_whole_c = prog.decode, prog.decode_whole
                        c.encode_c, c.encode_parts_c = prog.encode, prog.encode_parts
                    c.decode = c.decode_c or c.decode_py  # the C decoder where built
                    self._compiled[version] = c
        return c

    def _get_checked(self, version: int) -> _Compiled:
        c = self._get(version)
        if c.decode_checked is None:
            gen = _gen.CodeGen(self.schema, version, self.classes, checked=True)
            src = gen.gen_decoder() + "\n" + gen.gen_encoder()
            ns = dict(_BASE_NS)
            ns.update(gen.ns)
            exec(compile(src, f"<kproto {self.name} v{version} checked>", "exec"), ns)
            c.encode_checked = ns["encode_checked"]
            c.decode_checked = ns["decode_checked"]
        return c

    def source(self, version: int) -> str:
        """The generated Python source of this version's fast decoder and encoder."""
        return self._get(version).source

    # -- binary -------------------------------------------------------------------------------
    def decode(self, data: Buffer, version: int, lazy: bool = True) -> Any:
        """Decode a whole message body; every byte must be consumed.

        ``records`` fields (and the spec's zeroCopy fields) are memoryview slices of ``data``, as
        Kafka's own decoder slices its buffer; other ``bytes`` fields are copies. With the C
        decoder and a read-only buffer, arrays of structs are checked now and built on first
        read unless ``lazy=False`` (see :meth:`decode_from`).
        Raises :class:`kproto.DecodeError` on malformed input.
        """
        c = self._compiled.get(version) or self._get(version)
        if c.decode_whole_c is not None:
            try:
                return c.decode_whole_c(data) if lazy else c.decode_whole_c(data, False)
            except _DECODE_FAULTS:
                pass   # malformed, or bytes left over: the path below says which
        if c.decode_c is not None or len(data) <= 4096:   # the C decoder pauses the GC itself
            try:
                obj, pos = c.decode(data, 0) if lazy or c.decode_c is None else c.decode_c(data, 0, False)
            except _DECODE_FAULTS:
                raise self._explain_decode(data, 0, version) from None
        else:
            obj, pos = self.decode_from(data, 0, version, lazy)
        if pos != len(data):
            raise DecodeError(f"{len(data) - pos} trailing bytes after the message",
                              what=f"{self.name} v{version}", offset=pos)
        return obj

    def decode_from(self, data: Buffer, pos: int, version: int, lazy: bool = True) -> Tuple[Any, int]:
        """Decode one message starting at ``pos``; return (object, position after it).

        With the C decoder and a read-only buffer, arrays of structs are checked whole but built
        on first read (:func:`kproto.codecs.program.pending_fields`); ``lazy=False`` builds them
        now, which is cheaper for a caller that reads every field (one walk of the bytes, not two)."""
        c = self._get(version)
        # A large message makes thousands of objects, all alive at the end: collecting garbage
        # among them halfway is wasted work (about 15% of a 2,000-partition MetadataResponse).
        # The C decoder pauses the collector itself.
        pause_gc = c.decode_c is None and len(data) - pos > 4096 and _gc_isenabled()
        if pause_gc:
            _gc_disable()
        try:
            if lazy or c.decode_c is None:
                return c.decode(data, pos)
            return c.decode_c(data, pos, False)
        except _DECODE_FAULTS:
            pass
        finally:
            if pause_gc:
                _gc_enable()
        raise self._explain_decode(data, pos, version)

    def _explain_decode(self, data: Buffer, pos: int, version: int) -> DecodeError:
        c = self._get_checked(version)
        trail: List[Any] = []
        what = f"{self.name} v{version}"
        try:
            c.decode_checked(data, pos, trail)
        except _Fail as exc:
            return DecodeError(exc.reason, what=what, path=_path(trail), offset=exc.offset)
        except DecodeError as exc:
            return DecodeError(exc.reason, what=what, path=_path(trail), offset=exc.offset)
        except (struct.error, IndexError) as exc:
            off = trail[-1][1] if trail and trail[-1] else pos
            return DecodeError(f"data ends inside the field ({len(data) - off} bytes left)", what=what,
                               path=_path(trail), offset=off)
        except (UnicodeDecodeError, ValueError, OverflowError, MemoryError, TypeError) as exc:
            off = trail[-1][1] if trail and trail[-1] else pos
            return DecodeError(f"{type(exc).__name__}: {exc}", what=what, path=_path(trail), offset=off)
        return DecodeError("malformed data", what=what, offset=pos)

    def encode(self, obj: Any, version: int) -> bytes:
        """Encode ``obj`` at ``version``: the bytes of the body exactly as Apache Kafka writes them."""
        c = self._compiled.get(version) or self._get(version)
        if c.encode_c is not None:
            try:
                return c.encode_c(obj)
            except Exception:   # whatever C declines (or rejects) the Python encoder decides
                pass
        parts: List[Any] = []
        self._encode_py(c, obj, version, parts)
        return b"".join(parts)

    def encode_parts(self, obj: Any, version: int, parts: List[Any]) -> None:
        """Append the encoding of ``obj`` to the list ``parts`` as a sequence of bytes-like pieces.

        Joining them gives :meth:`encode`'s result; large ``bytes``/``records`` values (1 KiB or
        more) are appended as they are, not copied: a zero-copy send for ``socket.sendmsg`` or
        ``writelines``, as Kafka's ``Send`` writes records.
        """
        c = self._compiled.get(version) or self._get(version)
        if c.encode_parts_c is not None:
            try:
                c.encode_parts_c(obj, parts)
                return
            except Exception:   # whatever C declines (or rejects) the Python encoder decides
                pass
        self._encode_py(c, obj, version, parts)

    def _encode_py(self, c: _Compiled, obj: Any, version: int, parts: List[Any]) -> None:
        """The generated Python encoder, and the checked one to explain its failures."""
        mark = len(parts)
        try:
            c.encode(obj, parts.append)
            return
        except EncodeError:
            del parts[mark:]
            raise
        except _ENCODE_FAULTS as exc:
            del parts[mark:]
            first = exc
        c = self._get_checked(version)
        trail: List[Any] = []
        try:
            c.encode_checked(obj, [].append, trail)
        except EncodeError as exc:
            raise type(exc)(f"{self.name} v{version}, field {_path(trail)}: {exc}") from None
        except _ENCODE_FAULTS as exc:
            raise EncodeError(f"{self.name} v{version}, field {_path(trail)}: {type(exc).__name__}: {exc}") from None
        raise EncodeError(f"{self.name} v{version}: {type(first).__name__}: {first}")

    # -- JSON ---------------------------------------------------------------------------------
    def json_plan(self, version: int):
        """The JSON converter's plan of this version (fields, key names, order, tagged
        defaults): what :meth:`to_json` follows, for writers of Kafka's JSON form."""
        c = self._get(version)
        if c.json_plan is None:
            c.json_plan = build_plan(self.schema, version, self.classes)
        return c.json_plan

    def to_json(self, obj: Any, version: int) -> Dict[str, Any]:
        """The message as Kafka's JSON converter writes it (records as base64 of their bytes)."""
        return struct_to_json(obj, self.json_plan(version))

    def from_json(self, doc: Dict[str, Any], version: int) -> Any:
        """Build a message object from a document in Kafka's JSON convention."""
        return struct_from_json(doc, self.json_plan(version))

    def __call__(self, **kwargs: Any) -> Any:
        """Construct a message object (same as ``codec.cls(**kwargs)``)."""
        return self.cls(**kwargs)


def _path(trail: List[Any]) -> Optional[str]:
    parts = []
    for entry in trail:
        if entry is None:
            continue
        name = entry[0] if isinstance(entry, tuple) else entry
        parts.append(name)
    return ".".join(parts) or None


_codecs: Dict[str, MessageCodec] = {}
# requests and responses by (kind, API key); records by (spec folder, kind, record type), as
# record types are numbered per folder (metadata/ and storage/ both have a type 0)
_by_key: Dict[Tuple[Any, ...], str] = {}
for _name, (_mod, _kind, _key, _valid, _flex, _source) in SCHEMAS.items():
    if _key is not None:
        _by_key[(_kind, _key) if _kind in ("request", "response") else (_source, _kind, _key)] = _name
_reg_lock = threading.Lock()


def schema(name: str) -> Message:
    """The declarative schema of a message by name (or a name an older release gave it)."""
    try:
        mod = SCHEMAS[ALIASES.get(name, name)][0]
    except KeyError:
        raise KeyError(f"unknown message {name!r}") from None
    return importlib.import_module(mod).SCHEMA


def message(name: str) -> MessageCodec:
    """The codec of a message by its spec name (``"ProduceRequest"``, ``"RequestHeader"``, ...);
    a name an older Kafka release used (``"ListClientMetricsResourcesRequest"``) gives the
    message under its newest name."""
    c = _codecs.get(name)
    if c is None:
        with _reg_lock:
            c = _codecs.get(name)
            if c is None:
                c = _codecs.get(ALIASES.get(name, name)) or MessageCodec(schema(name))
                _codecs[name] = _codecs[c.name] = c
    return c


def request(api_key: int) -> MessageCodec:
    """The codec of the request with this API key."""
    try:
        return message(_by_key[("request", api_key)])
    except KeyError:
        raise KeyError(f"no request with API key {api_key}") from None


def response(api_key: int) -> MessageCodec:
    """The codec of the response with this API key."""
    try:
        return message(_by_key[("response", api_key)])
    except KeyError:
        raise KeyError(f"no response with API key {api_key}") from None


def metadata_record(record_type: int) -> MessageCodec:
    """The codec of a KRaft metadata record (``__cluster_metadata``) by its type id."""
    try:
        return message(_by_key[("metadata", "metadata", record_type)])
    except KeyError:
        raise KeyError(f"no metadata record type {record_type}") from None


def coordinator_record(source: str, record_type: int) -> Tuple[MessageCodec, MessageCodec]:
    """The (key, value) codecs of a coordinator record by its spec folder and record type (the
    int16 before the key): ``coordinator_record("group-coordinator", 1)`` is OffsetCommitKey and
    OffsetCommitValue. Keys are read at version 0 (Kafka 4's form; before 4.0 the record type
    was called the key's version), values at the int16 version before them."""
    try:
        return (message(_by_key[(source, "coordinator-key", record_type)]),
                message(_by_key[(source, "coordinator-value", record_type)]))
    except KeyError:
        raise KeyError(f"no {source} record type {record_type}") from None


def messages(kind: Optional[str] = None) -> Iterator[str]:
    """Names of every known message, optionally only of one kind (request, response, header,
    data, metadata, coordinator-key, coordinator-value)."""
    for name, (_mod, k, *_rest) in SCHEMAS.items():
        if kind is None or k == kind:
            yield name


def api_keys() -> Dict[int, str]:
    """API key -> API name (the request name without ``Request``)."""
    return {int(k[1]): _by_key[k][: -len("Request")]
            for k in sorted(k for k in _by_key if k[0] == "request")}
