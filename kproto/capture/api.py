"""Python API of traffic decoding: exchanges from a capture file or from packets, as objects or JSON.

>>> from kproto.capture import iter_exchanges
>>> for ex in iter_exchanges("client.pcapng"):                     # doctest: +SKIP
...     print(ex.api_name, ex.api_version, ex.latency_ms, ex.response.error_code)
"""
from __future__ import annotations

import os
from typing import Any, BinaryIO, Iterable, Iterator, Optional, Union, cast

from kproto.capture import bodies
from kproto.capture.decoder import CaptureDecoder
from kproto.capture.exchange import UNREAD_KEPT, Exchange, exchange_to_json
from kproto.error_codes import error_name
from kproto.capture.pcap import Packet, read_capture, stream_packets
from kproto.capture.sessions import FetchSessionView
from kproto.capture.topics import TopicNames, topic_ids
from kproto.errors import DecodeError
from kproto.problems import Problem
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = ["BodyDecoder", "iter_exchanges", "exchange_to_json"]

#: Responses that name topic ids: Metadata (v10+), CreateTopics (v7+), DescribeTopicPartitions.
_NAMES_IDS = frozenset({ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS})
# the keys compared with every exchange's, as plain ints (an enum member's lookup is slower)
_PRODUCE, _FETCH = int(ApiKey.PRODUCE), int(ApiKey.FETCH)
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)


class BodyDecoder:
    """Decode the bodies of finished exchanges in place (the ``decode`` hook of CaptureDecoder).

    Never raises on bad bytes: what cannot be decoded becomes a problem on the exchange. Also
    follows fetch sessions per connection, remembers SASL mechanisms for redaction, and names
    topic ids (Fetch v13+, Produce v13, ...) from the capture's Metadata responses, per cluster
    (see :mod:`kproto.capture.topics`): :attr:`Exchange.topic_names` holds the names found, and
    an id no response named so far gets a note.

    ``best_effort``: an API version newer than the schemas is decoded with the highest version
    they define when the header versions agree (see :attr:`Exchange.decoded_as`); False leaves
    such bodies undecoded, with a problem.
    """

    def __init__(self, *, best_effort: bool = True) -> None:
        self.best_effort = best_effort
        self.topics = TopicNames()
        self._sessions: dict[tuple, FetchSessionView] = {}
        self._mechanisms: dict[tuple, str] = {}
        self._versions: dict[tuple, dict[int, int]] = {}  # connection -> API key -> version

    def __call__(self, ex: Exchange) -> None:
        if ex.kind == "sasl":
            self._raw_sasl(ex)
            return
        if ex.kind != "kafka":
            return
        if ex.api_key is None:
            if ex.request_bytes == 0 and ex.response_data is not None:
                self._orphan(ex)
            return
        key, ver = ex.api_key, ex.api_version
        assert ver is not None  # the decoder sets api_key and api_version together
        versions = bodies.api_versions(key)
        if ex.request_bytes and versions is not None and ver in versions:
            used = self._versions.get((ex.client, ex.broker))
            if used is None:
                used = self._versions[(ex.client, ex.broker)] = {}
            used[key] = ver
        if versions is None:
            ex.problems.report("decode", f"unknown API key {key}: body not decoded")
            return
        if ver not in versions:
            newer = self.best_effort and bodies.best_effort_version(key, ver) is not None
            if not newer:
                ex.problems.report("decode", f"{_not_defined(key, ver, versions)}: body not decoded")
                return
            self._decode_newer(ex, versions)
        else:
            self._decode_known(ex, key, ver)
        if key == _PRODUCE and ex.request is not None and ex.request.acks == 0:
            ex.expects_response = False  # acks=0: the broker never answers
        if ex.response is not None:
            ex.errors = [error_name(c) for c in bodies.response_error_codes(ex.response)]
        self._name_topics(ex)
        if key == _FETCH and ex.request is not None:
            conn = (ex.client, ex.broker)
            view = self._sessions.get(conn)
            if view is None:
                view = self._sessions[conn] = FetchSessionView(self.topics.for_broker(ex.broker))
            ex.fetch_session = view.request(ex.request, ver if ex.decoded_as is None else ex.decoded_as)
            if ex.response is not None:
                view.response(ex.response, ex.fetch_session, ex.problems)
        elif key in _NAMES_IDS and ex.response is not None:
            self.topics.learn(ex.broker, ex.response)
        elif key == _SASL_HANDSHAKE and ex.request is not None:
            self._mechanisms[(ex.client, ex.broker)] = ex.request.mechanism
        elif key == _SASL_AUTHENTICATE and ex.request is not None:
            ex.sasl = _describe_token(self._mechanisms.get((ex.client, ex.broker)),
                                      ex.request.auth_bytes)

    def _name_topics(self, ex: Exchange) -> None:
        """Names of the topic ids the bodies use without a name, as far as the capture says."""
        ver = ex.api_version if ex.decoded_as is None else ex.decoded_as
        ids = [] if ex.request is None else topic_ids(ex.request, ver)
        if ex.response is not None:  # each id once, the request's first
            more = topic_ids(ex.response, ver if ex.response_version is None
                             else ex.response_version)
            if more:
                ids = list(dict.fromkeys(ids + more)) if ids else more
        if not ids:
            return
        unknown = []
        for tid in ids:
            name = self.topics.name(ex.broker, tid)
            if name is None:
                unknown.append(tid)
            else:
                ex.topic_names[tid] = name
        if unknown:
            ex.notes.report("topic", f"topic id{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)} not resolved: no Metadata response seen so "
                            "far in the capture names "
                            f"{'them' if len(unknown) > 1 else 'it'}")

    def _orphan(self, ex: Exchange) -> None:
        """A response whose request is not in the capture: decode it when one reading is
        certain, i.e. exactly one (API, version) that the connection's other requests use reads
        the whole body; failing those, exactly one of every (API, version) does."""
        assert ex.response_data is not None  # checked by the caller
        data = ex.response_data
        used = sorted(self._versions.get((ex.client, ex.broker), {}).items())
        fits = [kv for kv in used if _read_whole(data, *kv)]
        how = "the only API version its connection uses that reads the whole body"
        if not fits:
            fits = [(k, v) for k in sorted(bodies._api_names()) for v in bodies.api_versions(k) or ()
                    if _read_whole(data, k, v)]
            how = "the only API version of all that reads the whole body"
        if len({k for k, _ in fits}) == 1 and len(fits) > 1:
            # versions of one API that read these bytes into the same message are one reading
            key = fits[0][0]
            objs = [_read_whole(data, key, v).body for _, v in fits]  # type: ignore[union-attr]
            if all(o == objs[0] for o in objs):
                how = (f"v{fits[0][1]}-v{fits[-1][1]} read it alike; " + how.replace(
                    "API version", "API"))
                fits = fits[-1:]
        if len(fits) != 1:
            if fits:
                ex.notes.report("pairing", f"orphan response not decoded: {len(fits)} API versions "
                                "read its whole body")
            return
        (key, ver), = fits
        got = _read_whole(data, key, ver)
        assert got is not None  # it is one of the fits
        ex.response_header, ex.response = got.header, got.body
        ex.api_key, ex.api_version = key, ver
        ex.notes.report("pairing", f"orphan response decoded as {bodies.api_name(key)} v{ver}: {how}")
        ex.errors = [error_name(c) for c in bodies.response_error_codes(ex.response)]

    def _decode_known(self, ex: Exchange, key: int, ver: int) -> None:
        """Bodies of a version the schemas define. Bytes after a complete body do not lose it:
        they are kept in ``unread`` and noted (brokers ignore them too)."""
        data = ex.request_data
        if data is not None:
            try:
                got = bodies.decode_request_as(data, key, ver, ver)
            except DecodeError as e:
                ex.problems.report("decode", f"request: {e}")
            else:
                ex.request_header, ex.request = got.header, got.body
                if got.unread:
                    self._unread_known(ex, "request", data, got, key, ver)
        data = ex.response_data
        if data is not None:
            try:
                got = bodies.decode_response_as(data, key, ver, ver)
            except DecodeError as e:
                self._bad_response(ex, e)
                return
            if got.unread and key == ApiKey.API_VERSIONS:
                if self._apiversions_v0(ex):
                    return
                if got.body.error_code == ErrorCode.UNSUPPORTED_VERSION:
                    # the answer to a version the peer does not support must be a v0 body:
                    # a longer body read in the newer layout is not a complete one
                    self._bad_response(ex, DecodeError(f"{got.unread} bytes left over"))
                    return
            ex.response_header, ex.response = got.header, got.body
            if got.unread:
                self._unread_known(ex, "response", data, got, key, ver)

    @staticmethod
    def _unread_known(ex: Exchange, side: str, data: bytes, got: bodies.BestEffort, key: int,
                      ver: int) -> None:
        """Bytes after a complete body of a known version: kept in ``unread``, and a note."""
        offset = len(data) - got.body_start - got.unread
        tail = got.tail(data)
        ex.unread[side] = (offset, got.unread, tail[:UNREAD_KEPT])
        why = ""
        if side == "request" and key == ApiKey.API_VERSIONS and ver == 0 and tail == bytes(4):
            why = " (old librdkafka's empty int32 array, which brokers ignore)"
        ex.notes.report("unread", f"{side}: {got.unread} bytes after the end of the "
                        f"{bodies.api_name(key)} v{ver} body{why}; body decoded, "
                        "the extra bytes kept in unread", bytes_skipped=got.unread)

    def _decode_newer(self, ex: Exchange, versions: range) -> None:
        """Bodies of a version newer than the schemas, read with the highest one they define."""
        key, ver = ex.api_key, ex.api_version
        assert key is not None and ver is not None  # checked by __call__
        as_ver = ex.decoded_as = bodies.best_effort_version(key, ver)
        assert as_ver is not None  # __call__ decodes a newer version only when there is one
        newer = _newer(key, ver, versions)
        full = []
        for side, data in (("request", ex.request_data), ("response", ex.response_data)):
            if data is None:
                continue
            try:
                if side == "request":
                    got = bodies.decode_request_as(data, key, ver, as_ver)
                    ex.request_header, ex.request = got.header, got.body
                else:
                    got = bodies.decode_response_as(data, key, ver, as_ver)
                    if got.unread and self._apiversions_v0(ex):
                        continue
                    ex.response_header, ex.response = got.header, got.body
            except DecodeError as e:
                why = f"{newer}; decoding with the v{as_ver} layout failed"
                if side == "request":
                    ex.problems.report("decode", f"request: {why}: {e}")
                else:
                    self._bad_response(ex, e, why)
                continue
            if not got.unread:
                full.append(side)
                continue
            offset = len(data) - got.body_start - got.unread
            ex.unread[side] = (offset, got.unread, got.tail(data)[:UNREAD_KEPT])
            ex.problems.report("unread", f"{side}: {got.unread} bytes at body offset {offset} not "
                               f"understood: {newer}, and the v{as_ver} layout explains only the "
                               "bytes before them", position=offset, bytes_skipped=got.unread)
        if full:
            ex.notes.report("version", f"{newer}; {' and '.join(full)} decoded with the "
                            f"v{as_ver} layout")

    def _apiversions_v0(self, ex: Exchange) -> bool:
        """A broker that does not support the requested ApiVersions version answers with a v0
        body and UNSUPPORTED_VERSION (KIP-511): decode it so, if that is what it is."""
        assert ex.response_data is not None  # called only for a captured response
        if (ex.api_key != ApiKey.API_VERSIONS or not ex.api_version
                or len(ex.response_data) < 6):
            return False
        if int.from_bytes(ex.response_data[4:6], "big", signed=True) != ErrorCode.UNSUPPORTED_VERSION:
            return False
        try:
            header, body, version = bodies.decode_response_version(
                ex.response_data, ApiKey.API_VERSIONS, ex.api_version)
        except DecodeError:
            return False
        if version != 0:  # a whole body of the version asked: not the KIP-511 answer
            return False
        ex.response_header, ex.response = header, body
        ex.response_version = 0  # normal: the broker lists its versions, client retries
        return True

    def _bad_response(self, ex: Exchange, err: DecodeError, why: str = "") -> None:
        assert ex.response_data is not None  # called only for a captured response
        if ex.api_key == ApiKey.API_VERSIONS and len(ex.response_data) >= 6:
            hdr_code = int.from_bytes(ex.response_data[4:6], "big", signed=True)
            if hdr_code == ErrorCode.UNSUPPORTED_VERSION and ex.api_version != 0:
                if self._apiversions_v0(ex):
                    return
                ex.errors = [error_name(hdr_code)]
                as_ = "" if ex.decoded_as is None else f" (read with the v{ex.decoded_as} layout)"
                ex.problems.report(
                    "decode", f"peer sent a malformed ApiVersions v{ex.api_version} response: neither a "
                    f"v{ex.api_version}{as_} nor a v0 body ({err}); what could be read: error_code "
                    f"{hdr_code} ({error_name(hdr_code)}), then {len(ex.response_data) - 6} bytes "
                    f"{ex.response_data[6:].hex()}")
                return
        ex.problems.report("decode", f"response: {why}: {err}" if why else f"response: {err}")

    def _raw_sasl(self, ex: Exchange) -> None:
        mech = (ex.sasl or {}).get("mechanism")
        info = _describe_token(mech, ex.request_data or b"")
        info["server_token_bytes"] = None if ex.response_data is None else len(ex.response_data)
        ex.sasl = info


def _read_whole(data: bytes, key: int, ver: int) -> Optional[bodies.BestEffort]:
    """The response read as (key, ver) when that reads every byte of it, else None."""
    try:
        got = bodies.decode_response_as(data, key, ver, ver)
    except DecodeError:
        return None
    return None if got.unread else got


def _not_defined(key: int, ver: int, versions: range) -> str:
    return (f"{bodies.api_name(key)} v{ver} is not a version Kafka {bodies.schemas_release()} defines "
            f"(valid {versions.start}-{versions.stop - 1})")


def _newer(key: int, ver: int, versions: range) -> str:
    return (f"{bodies.api_name(key)} v{ver} is newer than kproto's schemas (Kafka "
            f"{bodies.schemas_release()}, v{versions.start}-{versions.stop - 1})")


def _describe_token(mechanism: Optional[str], token: bytes) -> dict:
    """What a SASL client token says, without secrets (PLAIN passwords, bearer tokens, proofs)."""
    info: dict[str, Any] = {"mechanism": mechanism, "client_token_bytes": len(token)}
    token = bytes(token)
    if mechanism == "PLAIN":
        parts = token.split(b"\x00")
        if len(parts) == 3:
            info["user"] = parts[1].decode("utf-8", "replace")
    elif mechanism and mechanism.startswith("SCRAM"):
        for item in token.decode("utf-8", "replace").split(","):
            if item.startswith("n="):
                info["user"] = item[2:]
    return info


def iter_exchanges(source: Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO,
                                 Iterable[Union[Packet, Problem]]],
                   ports: Optional[Iterable[int]] = None, *, decode: bool = True,
                   best_effort: bool = True,
                   decoder: Optional[CaptureDecoder] = None) -> Iterator[Exchange]:
    """Yield the exchanges of a capture file (path, or its bytes), a binary stream of one (read
    as it arrives, e.g. ``sys.stdin.buffer`` fed by ``tcpdump -w -``) or of packets, as they
    complete.

    ``ports``: Kafka broker ports (None: guessed per connection). ``decode``: decode bodies with
    kproto's codec (False: framing and pairing only). ``best_effort``: decode versions newer than
    the schemas with the highest known one (see :class:`BodyDecoder`). Pass your own ``decoder``
    to read its ``chosen_ports`` and ``problems`` afterwards.
    """
    if decoder is None:
        decoder = CaptureDecoder(ports, decode=BodyDecoder(best_effort=best_effort) if decode else None)
    packets: Iterable[Union[Packet, Problem]]
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        if isinstance(source, (str, os.PathLike)):
            yield from decoder.feed_capture(read_capture(source), os.fsdecode(source))
        else:
            yield from decoder.feed_capture(bytes(source))
        yield from decoder.finish()
        return
    if hasattr(source, "read"):  # a binary stream: packets as they arrive
        packets = stream_packets(cast(BinaryIO, source))
    else:
        packets = cast(Iterable[Union[Packet, Problem]], source)
    for p in packets:
        yield from decoder.feed(p)
    yield from decoder.finish()
