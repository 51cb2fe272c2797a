"""The unit of decoded traffic: one request paired with its response on one connection."""
from __future__ import annotations

import base64
import datetime as _dt
import functools
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import kproto.codecs as codecs
from kproto.capture.bodies import api_name
from kproto.capture import json_text
from kproto.capture.json_text import body_text, float_text, json_dumps, string_text
from kproto.capture.layers import format_ip
from kproto.problems import Problems
from kproto.schemas.api_keys import ApiKey

__all__ = ["Endpoint", "Exchange", "UNREAD_KEPT", "body_json_text", "exchange_to_json",
           "exchange_to_json_text"]

UNREAD_KEPT = 64  # bytes kept (and shown in hex) of a body's unread tail: enough to recognise a field


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An IP address (packed, 4 or 16 bytes) and TCP port."""

    ip: bytes
    port: int

    def __str__(self) -> str:
        text = format_ip(self.ip)
        return f"[{text}]:{self.port}" if len(self.ip) == 16 else f"{text}:{self.port}"


@dataclass(slots=True, repr=False)
class Exchange:
    """A request and its response (either may be missing), with timings and problems.

    ``kind`` is ``"kafka"`` for protocol messages, ``"sasl"`` for raw SASL tokens exchanged after
    a SaslHandshake v0, and ``"stream"`` for problems of a connection that belong to no request
    (bytes lost or skipped where no frame could be found). ``request``/``response`` are message
    objects of kproto's codec (None when absent or not decodable); ``*_bytes`` are frame sizes
    including the 4-byte size prefix. Times are capture timestamps in seconds.

    An ``api_version`` newer than kproto's schemas is decoded, best effort, with the highest
    version they define: ``decoded_as`` says which, ``notes`` says so, and bytes that layout
    does not explain are in ``unread`` and reported as a problem.

    ``problems`` and ``notes`` (informational: ``note`` set) are
    :class:`~kproto.problems.Problems` of :class:`~kproto.problems.Problem` records (kinds
    ``gap``, ``resync``, ``pairing``, ``decode``, ``unread``, ``session``, ``version``, and the
    note ``topic``); the exchange is where they are, so their ``source`` is empty.

    ``topic_names``: topic id (Kafka's base64 text) -> name for the ids its bodies use without a
    name (Fetch v13+, Produce v13, ...), as the capture's Metadata responses named them; the
    JSON form shows each as ``topicName`` beside its ``topicId``. An id no response named is in
    a ``topic`` note instead.
    """

    client: Endpoint
    broker: Endpoint
    kind: str = "kafka"
    api_key: Optional[int] = None
    api_version: Optional[int] = None
    correlation_id: Optional[int] = None
    client_id: Optional[str] = None
    request: Any = None
    response: Any = None
    request_header: Any = None
    response_header: Any = None
    response_version: Optional[int] = None  # set when the body is not of the request's version
    # the schema version the bodies were read with when api_version is newer than the schemas
    decoded_as: Optional[int] = None
    request_bytes: int = 0
    response_bytes: int = 0
    ts: Optional[float] = None              # first byte of the request captured
    request_end: Optional[float] = None     # last byte of the request captured
    response_start: Optional[float] = None
    response_end: Optional[float] = None
    expects_response: bool = True
    problems: Problems = field(default_factory=Problems)
    notes: Problems = field(default_factory=lambda: Problems(note=True))  # not problems
    errors: list[str] = field(default_factory=list)
    # "request"/"response" -> bytes a best-effort decode left unread: (offset in the body, count,
    # the first UNREAD_KEPT of them)
    unread: dict[str, tuple[int, int, bytes]] = field(default_factory=dict)
    fetch_session: Optional[dict] = None
    topic_names: dict[str, str] = field(default_factory=dict)
    sasl: Optional[dict] = None
    # raw frames (without size prefix), kept for lazy body decoding and re-export
    request_data: Optional[bytes] = None
    response_data: Optional[bytes] = None

    @property
    def api_name(self) -> Optional[str]:
        return api_name(self.api_key)

    @property
    def latency_ms(self) -> Optional[float]:
        """From the request's last byte to the response's last byte; None without both."""
        if self.request_end is None or self.response_end is None:
            return None
        return (self.response_end - self.request_end) * 1000.0

    @property
    def complete(self) -> bool:
        """Request and (when one is expected) response both present and free of problems."""
        return (self.request_data is not None and (self.response_data is not None
                                                   or not self.expects_response)
                and not self.problems)

    def to_json(self, *, records: Any = None) -> dict:
        """This exchange as one JSON object (see :func:`exchange_to_json`)."""
        return exchange_to_json(self, records=records)

    def __repr__(self) -> str:
        as_ = "" if self.decoded_as is None else f" (as v{self.decoded_as})"
        what = (f"{self.api_name or self.api_key} v{self.api_version}{as_} corr={self.correlation_id}"
                if self.kind == "kafka" else self.kind)
        lat = "" if self.latency_ms is None else f" {self.latency_ms:.3f}ms"
        extra = f" errors={self.errors}" if self.errors else ""
        extra += f" problems={len(self.problems)}" if self.problems else ""
        return f"<Exchange {what} {self.client}->{self.broker}{lat}{extra}>"


def _iso(ts: Optional[float]) -> Optional[str]:
    if ts is None:
        return None
    if ts.__class__ is float and 0.0 <= ts < 253402300799.0:  # within year 9999
        # datetime.fromtimestamp's microseconds: the fraction rounded half to even (so a
        # round up can carry into the second); the text of the second is cached, as a
        # capture's packets share their seconds
        frac, whole = math.modf(ts)
        us = round(frac * 1e6)
        if us >= 1000000:
            whole += 1.0
            us -= 1000000
        try:
            second = _SECONDS[whole]
        except KeyError:
            if len(_SECONDS) > 4096:
                _SECONDS.clear()
            second = _SECONDS[whole] = _dt.datetime.fromtimestamp(
                whole, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{second}{us:06d}Z"
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, ValueError, OSError):
        # a damaged packet header's time is still data: shown as seconds since the epoch
        return f"{ts}s"


_SECONDS: dict[float, str] = {}  # whole seconds since the epoch -> their ISO text, up to the dot


def exchange_to_json(ex: Exchange, *, records: Any = None) -> dict:
    """One JSON object for an exchange (the ``--format jsonl`` line).

    Bodies follow Kafka's JSON convention, at ``decoded_as`` when the version is newer than the
    schemas (``unread`` then gives, per body, the offset, count and first bytes in hex of what that
    layout left unread; null when nothing was). ``records``: a callable turning the bytes of a
    ``records`` field into a JSON value (see :mod:`kproto.capture.records_view`), or None for base64.
    A topic named only by id gets ``topicName`` beside its ``topicId`` where the capture named it
    (:attr:`Exchange.topic_names`).
    """
    request = response = None
    if ex.request is not None:
        request = _body_json(*_request_body(ex), records, ex.topic_names)
    if ex.response is not None:
        response = _body_json(*_response_body(ex), records, ex.topic_names)
    if _redacted(ex) and request is not None:
        request["authBytes"] = "<redacted>"
    return {**_head(ex), "request": request, "response": response, **_tail(ex)}


def exchange_to_json_text(ex: Exchange, end: str = "") -> str:
    """``json.dumps(exchange_to_json(ex), ensure_ascii=False)``, the ``--format jsonl`` line,
    with the bodies written as text directly (:mod:`kproto.capture.json_text`); ``end`` is
    appended (a newline: one text to write per line)."""
    head = None if _c_head is None else _c_head(ex)  # None: a value the C head leaves here
    out = [_head_text(ex) if head is None else head, ', "request": ']
    # each body by its writer straight away (what body_json_text does, without its steps);
    # a body the writer refuses, and a redacted one, go through body_json_text
    key, as_ = ex.api_key, ex.decoded_as
    version = ex.api_version if as_ is None else as_
    plain = key.__class__ is int and version.__class__ is int  # (else body_json_text says why)
    obj = ex.request
    if obj is None:  # (json_dumps(None))
        out.append("null")
    else:
        fn = _writer(key, version, True) if plain else None
        mark = len(out)
        try:
            if fn is None or (ex.sasl and key == _SASL_AUTHENTICATE):
                raise _Refused
            fn(obj, ex.topic_names, out)
        except Exception:  # the reference path writes it, or raises as it does
            del out[mark:]
            body_json_text(ex, "request", out)
    out.append(', "response": ')
    obj = ex.response
    if obj is None:
        out.append("null")
    else:
        if ex.response_version is not None:
            version = ex.response_version
        fn = _writer(key, version, False) if plain and version.__class__ is int else None
        mark = len(out)
        try:
            if fn is None:
                raise _Refused
            fn(obj, ex.topic_names, out)
        except Exception:
            del out[mark:]
            body_json_text(ex, "response", out)
    if (ex.errors or ex.problems or ex.notes or ex.unread or ex.fetch_session is not None
            or ex.sasl is not None):
        out += [", ", json_dumps(_tail(ex))[1:], end]
    else:  # the usual line: nothing went wrong, nothing to add
        out.append(_EMPTY_TAIL + end if end else _EMPTY_TAIL)
    return "".join(out)


class _Refused(Exception):
    """A body the writer does not take (see exchange_to_json_text)."""


def _writer(key: Any, version: Any, request: bool) -> Any:
    """The body writer of :mod:`~kproto.capture.json_text` for an API key's request or
    response at ``version`` (cached), None where that module has none."""
    wkey = (key, version, request, json_text.accelerated)
    try:
        return _WRITERS[wkey]
    except KeyError:
        pass
    codec = _request_codec(key) if request else _response_codec(key)
    fn = _WRITERS[wkey] = json_text._compiled(codec, version)
    return fn


_WRITERS: dict[tuple, Any] = {}


def _value_text(v: Any) -> str:
    """``json_dumps(v)``, quicker for the scalars of a line's head."""
    cls = v.__class__
    if cls is str:
        return string_text(v)
    if v is None:
        return "null"
    if cls is int:
        return int.__repr__(v)
    if cls is float:
        return float_text(v)
    return json_dumps(v)


def body_json_text(ex: Exchange, side: str, out: Optional[list[str]] = None) -> str:
    """The JSON text of the exchange's ``request`` or ``response`` body (``null`` when
    absent), as :func:`exchange_to_json` has it (without ``records=``); with ``out``,
    appended to it in pieces instead (see :func:`kproto.capture.json_text.body_text`)."""
    obj = ex.request if side == "request" else ex.response
    if obj is None or (side == "request" and _redacted(ex)):
        text = json_dumps(None if obj is None else exchange_to_json(ex)["request"])
        if out is None:
            return text
        out.append(text)
        return ""
    codec, obj, version = _request_body(ex) if side == "request" else _response_body(ex)
    return body_text(codec, obj, version, ex.topic_names,
                     lambda: json_dumps(_body_json(codec, obj, version, None, ex.topic_names)),
                     out)


def _request_body(ex: Exchange) -> tuple[Any, Any, int]:
    """(codec, message, version) of a decoded request."""
    key, body_ver = ex.api_key, ex.api_version if ex.decoded_as is None else ex.decoded_as
    assert key is not None and body_ver is not None  # a decoded body has a key and version
    return _request_codec(key), ex.request, body_ver


def _response_body(ex: Exchange) -> tuple[Any, Any, int]:
    """(codec, message, version) of a decoded response."""
    key, body_ver = ex.api_key, ex.api_version if ex.decoded_as is None else ex.decoded_as
    assert key is not None and body_ver is not None
    rver = body_ver if ex.response_version is None else ex.response_version
    return _response_codec(key), ex.response, rver


# the codecs of an API key's bodies, looked up once (they are made once and never change)
_request_codec = functools.lru_cache(maxsize=None)(codecs.request)
_response_codec = functools.lru_cache(maxsize=None)(codecs.response)


def latency_json(ex: Exchange) -> Optional[float]:
    """``latency_ms`` of the JSON line: rounded to the microsecond."""
    latency = ex.latency_ms
    return None if latency is None else round(latency, 3)


def unread_json(ex: Exchange) -> Optional[dict]:
    """``unread`` of the JSON line: per body, where and what a decode left unread."""
    return {side: {"offset": off, "length": n, "hex": head.hex()}
            for side, (off, n, head) in ex.unread.items()} or None


def _redacted(ex: Exchange) -> bool:
    """A SaslAuthenticate request whose token is shown as ``<redacted>``."""
    return bool(ex.sasl) and ex.api_key == _SASL_AUTHENTICATE


_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)  # (an enum member's lookup: slower)


_HEAD = ("ts", "client", "broker", "kind", "api_key", "api_name", "api_version", "decoded_as",
         "correlation_id", "client_id", "latency_ms", "request_bytes", "response_bytes")
# each key of the head as it starts its member in the JSON text (the first without a comma)
_EMPTY_TAIL = ', "errors": [], "problems": [], "notes": [], "unread": null}'


def _head(ex: Exchange) -> dict:
    """The JSON line's fields before the bodies."""
    return dict(zip(_HEAD, _head_values(ex)))


def _head_values(ex: Exchange) -> tuple:
    """The values of :data:`_HEAD`, in that order."""
    return (_iso(ex.ts), _endpoint_text(ex.client), _endpoint_text(ex.broker), ex.kind,
            ex.api_key, api_name(ex.api_key), ex.api_version, ex.decoded_as,
            ex.correlation_id, ex.client_id, latency_json(ex), ex.request_bytes or None,
            ex.response_bytes or None)


def _head_text(ex: Exchange) -> str:
    """``json_dumps(_head(ex))`` without its closing brace, written directly."""
    client, broker, V = ex.client, ex.broker, _value_text
    last = _LAST_PAIR[0]  # a connection's exchanges mostly come one after another
    if last[0] is client and last[1] is broker:
        pair = last[2]
    else:
        pair = f'"client": {_endpoint_json(client)}, "broker": {_endpoint_json(broker)}, '
        _LAST_PAIR[0] = (client, broker, pair)  # (one tuple: read and replaced whole)
    key, ver, corr, as_ = ex.api_key, ex.api_version, ex.correlation_id, ex.decoded_as
    kind, req, resp = ex.kind, ex.request_bytes, ex.response_bytes
    try:
        key_text = _KEY_TEXT[key]  # the API key and its name, which make one piece
    except (KeyError, TypeError):
        key_text = _key_text(key)
    start, end = ex.request_end, ex.response_end  # latency_ms, rounded to the microsecond
    if start is None or end is None:
        latency = "null"
    else:
        ms = round((end - start) * 1000.0, 3)
        # a finite float as the encoder writes it (ms - ms is NaN for inf and NaN)
        latency = float.__repr__(ms) if ms.__class__ is float and ms - ms == 0.0 else V(ms)
    ts = _iso(ex.ts)
    return (f'{{"ts": {"null" if ts is None else string_text(ts)}, {pair}'
            f'"kind": {_KIND_TEXT[kind] if kind in _KIND_TEXT else V(kind)}, '
            f'{key_text}'
            f'"api_version": {int.__repr__(ver) if ver.__class__ is int else V(ver)}, '
            f'"decoded_as": {"null" if as_ is None else V(as_)}, '
            f'"correlation_id": {int.__repr__(corr) if corr.__class__ is int else V(corr)}, '
            f'"client_id": {V(ex.client_id)}, '
            f'"latency_ms": {latency}, '
            f'"request_bytes": {int.__repr__(req) if req.__class__ is int and req else V(req or None)}, '
            f'"response_bytes": '
            f'{int.__repr__(resp) if resp.__class__ is int and resp else V(resp or None)}')


#: the client and broker members of the last head written, with their endpoints
_LAST_PAIR: list[tuple[Any, Any, str]] = [(None, None, "")]


_KIND_TEXT = {k: string_text(k) for k in ("kafka", "sasl", "stream")}


def _key_text(key: Any) -> str:
    """The ``api_key`` and ``api_name`` members of the head (cached per key)."""
    text = f'"api_key": {_value_text(key)}, "api_name": {_value_text(api_name(key))}, '
    if key is None or key.__class__ is int:
        _KEY_TEXT[key] = text
    return text


_KEY_TEXT: dict[Optional[int], str] = {}


def _endpoint_json(endpoint: Endpoint) -> str:
    """``json_dumps(str(endpoint))``, cached."""
    try:
        return _ENDPOINT_JSON[endpoint]
    except KeyError:
        if len(_ENDPOINT_JSON) > 4096:
            _ENDPOINT_JSON.clear()
        text = _ENDPOINT_JSON[endpoint] = string_text(str(endpoint))
        return text


_ENDPOINT_JSON: dict[Endpoint, str] = {}
#: the head in C (kproto/capture/_jsontext.c): the same text as :func:`_head_text` for the
#: usual values, None for any other; None where the accelerator is not built
_c_head = None if json_text._jsontext is None else json_text._jsontext.head
if json_text._jsontext is not None:
    json_text._jsontext.setup_head(_endpoint_json, _KEY_TEXT)


def _endpoint_text(endpoint: Endpoint) -> str:
    """``str(endpoint)``, cached: a connection's endpoints are on each of its lines."""
    try:
        return _ENDPOINTS[endpoint]
    except KeyError:
        if len(_ENDPOINTS) > 4096:
            _ENDPOINTS.clear()
        text = _ENDPOINTS[endpoint] = str(endpoint)
        return text


_ENDPOINTS: dict[Endpoint, str] = {}


def _tail(ex: Exchange) -> dict:
    """The JSON line's fields after the bodies."""
    doc = {
        "errors": ex.errors,
        "problems": ex.problems.reasons(),
        "notes": ex.notes.reasons(),
        "unread": unread_json(ex),
    }
    if ex.fetch_session is not None:
        doc["fetch_session"] = ex.fetch_session
    if ex.sasl is not None:
        doc["sasl"] = ex.sasl
    return doc


def _body_json(codec: Any, obj: Any, version: int, records: Any,
               topic_names: Mapping[str, str]) -> dict:
    doc = codec.to_json(obj, version)
    if records is not None:
        _replace_records(doc, records)
    if topic_names:
        doc = _name_topics(doc, topic_names)
    return doc


def _name_topics(doc: Any, names: Mapping[str, str]) -> Any:
    """``doc`` with ``topicName`` after every ``topicId`` that ``names`` knows, in an object
    that has no name of its own (``name``/``topic``)."""
    if isinstance(doc, list):
        return [_name_topics(v, names) if isinstance(v, (dict, list)) else v for v in doc]
    if not isinstance(doc, dict):
        return doc
    named = "topicId" in doc and doc["topicId"] in names and not (doc.get("name")
                                                                  or doc.get("topic"))
    out = {}
    for k, v in doc.items():
        out[k] = _name_topics(v, names) if isinstance(v, (dict, list)) and k != "records" else v
        if named and k == "topicId":
            out["topicName"] = names[v]
    return out


def _replace_records(doc: Any, convert: Any) -> None:
    """Replace every ``records`` value (base64 in Kafka's JSON) by ``convert(bytes)``."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "records" and isinstance(v, str):
                doc[k] = convert(base64.b64decode(v))
            elif isinstance(v, (dict, list)):
                _replace_records(v, convert)
    elif isinstance(doc, list):
        for v in doc:
            if isinstance(v, (dict, list)):
                _replace_records(v, convert)
