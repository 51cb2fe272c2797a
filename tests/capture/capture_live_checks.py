"""What a capture of clients talking to Apache Kafka must show when kproto.capture reads it:
used by the live test (test_live_apache.py) and by the regression test on the captures it
recorded (test_live_captures.py)."""
from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pytest

from kproto.capture import BodyDecoder, CaptureDecoder, read_packets
from kproto.capture.records_view import iter_records
from kproto.capture.topics import topic_ids
from kproto.capture.tshark import compare, run_tshark
from kproto.records.reader import iter_batches

#: the product of the capture's peer, written into each ground-truth file
PEER = ("Apache Kafka 4.4.0 (3 brokers and a dedicated controller, each broker with a SASL_PLAINTEXT "
        "listener with SCRAM-SHA-256/512)")

Record = tuple[str, int, int, str]  # topic, partition, offset, value
CLOSED = "no response: the connection was closed"


def decode(path: Path, ports: Sequence[int]) -> tuple[list[Any], CaptureDecoder]:
    dec = CaptureDecoder(list(ports), decode=BodyDecoder())
    return list(dec.feed_all(read_packets(path))), dec


def _version(ex: Any, response: bool = False) -> Optional[int]:
    if ex.decoded_as is not None:
        return ex.decoded_as
    return ex.response_version if response and ex.response_version is not None else ex.api_version


def produced(exchanges: Iterable[Any]) -> set[Record]:
    """(topic, partition, offset, value) of every record a Produce request carried and its
    response acknowledged (offsets from the response's base offset)."""
    out: set[Record] = set()
    for ex in exchanges:
        if ex.api_name != "Produce" or ex.request is None or ex.response is None:
            continue
        base: dict[tuple[str, int], int] = {}
        for t in ex.response.responses:
            name = t.name or ex.topic_names[str(t.topic_id)]
            for p in t.partition_responses:
                if p.error_code == 0:
                    base[(name, p.index)] = p.base_offset
        for t in ex.request.topic_data:
            name = t.name or ex.topic_names[str(t.topic_id)]
            for p in t.partition_data:
                first = None
                for batch, rec in iter_records(p.records):
                    first = batch.base_offset if first is None else first
                    if (name, p.index) in base and rec.value is not None:
                        out.add((name, p.index, base[(name, p.index)] + rec.offset - first,
                                 rec.value.decode()))
    return out


def produce_codecs(exchanges: Iterable[Any]) -> set[str]:
    """The compression codecs of the record batches of the Produce requests."""
    return {batch.compression_name for ex in exchanges if ex.api_name == "Produce" and ex.request is not None
            for t in ex.request.topic_data for p in t.partition_data for batch in iter_batches(p.records or b"")}


def fetched(exchanges: Iterable[Any]) -> set[Record]:
    """(topic, partition, offset, value) of every record of the Fetch and ShareFetch responses
    (control batches left out)."""
    out: set[Record] = set()
    for ex in exchanges:
        if ex.api_name not in ("Fetch", "ShareFetch") or ex.response is None:
            continue
        for t in ex.response.responses:
            name = getattr(t, "topic", None) or ex.topic_names[str(t.topic_id)]
            for p in t.partitions:
                for _, rec in iter_records(p.records):
                    if rec.value is not None:
                        out.add((name, p.partition_index, rec.offset, rec.value.decode()))
    return out


def check_capture(path: Path, ports: Sequence[int], acked: Iterable[Sequence[Any]],
                  consumed: Optional[Iterable[str]] = None, *, apis: Iterable[str] = (),
                  mechanisms: Iterable[str] = (), codecs: Iterable[str] = (),
                  user: str = "alice") -> list[Any]:
    """Assert what the decoded capture must show (``codecs``: those of every Produce batch);
    its exchanges."""
    exchanges, dec = decode(path, ports)
    kafka = [e for e in exchanges if e.kind == "kafka"]
    assert kafka, "nothing captured"
    assert not dec.problems, dec.problems.reasons()
    # The one problem real traffic has: a client that closes its connection with requests in
    # flight (a consumer's long-polling Fetch) leaves them unanswered; only a connection's last
    # requests may be so.
    answered_at: dict[Any, float] = {}
    for e in kafka:
        if e.response_bytes:
            conn = (e.client, e.broker)
            answered_at[conn] = max(answered_at.get(conn, e.ts), e.ts)
    problems = [(e.api_name, e.api_version, e.correlation_id, p) for e in exchanges for p in e.problems.reasons()
                if not (p == CLOSED and e.ts > answered_at.get((e.client, e.broker), 0.0))]
    assert not problems, problems
    for e in kafka:
        assert e.api_key is not None and e.request is not None, e
        assert e.response is not None or not e.expects_response or e.problems.reasons() == [CLOSED], e
    # every topic id of every body named from the capture's own responses
    for e in kafka:
        ids = set(topic_ids(e.request, _version(e)))
        if e.response is not None:
            ids |= set(topic_ids(e.response, _version(e, True)))
        assert ids <= set(e.topic_names), (e.api_name, e.api_version, ids - set(e.topic_names))
        assert not [n for n in e.notes.reasons() if "not resolved" in n], e
    seen = {e.api_name for e in kafka}
    assert set(apis) <= seen, sorted(set(apis) - seen)
    # every acknowledged record in a Produce request, value by value, and in a Fetch response
    acked = {(t, int(p), int(o), v) for t, p, o, v in acked}
    assert acked, "no record acknowledged"
    assert acked <= produced(kafka), sorted(acked - produced(kafka))
    assert acked <= fetched(kafka), sorted(acked - fetched(kafka))
    assert produce_codecs(kafka) == set(codecs)
    if consumed is not None:
        assert sorted(consumed) == sorted(v for *_, v in acked)
    # SASL: the handshakes name the mechanisms; SCRAM's exchanges decode, the first names the user
    handshakes = [e for e in kafka if e.api_name == "SaslHandshake"]
    assert {e.request.mechanism for e in handshakes} == set(mechanisms)
    assert all(e.response.error_code == 0 for e in handshakes)
    auth = [e for e in kafka if e.api_name == "SaslAuthenticate"]
    assert auth and all(e.response.error_code == 0 for e in auth if e.response is not None)
    assert all(e.sasl is not None and e.sasl["mechanism"] in set(mechanisms) for e in auth)
    # SCRAM: client-first (names the user), then client-final, on each connection that shook hands
    # (a client giving up a connection mid-login, as librdkafka closes the bootstrap connections
    # it no longer needs once it knows the brokers, sends nothing after its last message)
    for h in handshakes:
        conn = [e for e in kafka if (e.client, e.broker) == (h.client, h.broker)]
        mine = [e for e in conn if e.api_name == "SaslAuthenticate"]
        if not mine:  # the client left right after the handshake: nothing may follow it
            assert conn[-1] is h, h
            continue
        assert mine[0].sasl.get("user") == user, h
        assert len(mine) == 2 or (len(mine) == 1 and conn[-1] is mine[0]), h
    return exchanges


def ground_truth(name: str, exchanges: Sequence[Any], ports: Sequence[int],
                 acked: Iterable[Sequence[Any]], client: str = "") -> dict[str, Any]:
    """The truth file of a recorded capture: what the clients had acknowledged (from the clients
    themselves), the ports, and the decoder's API counts and mechanisms (the regression's part)."""
    kafka = [e for e in exchanges if e.kind == "kafka"]
    records = sorted({(t, int(p), int(o), v) for t, p, o, v in acked})
    return {
        "capture": f"{name}.pcap",
        "peer": PEER,
        "client": client,
        "kafka_ports": list(ports),
        "topics": sorted({r[0] for r in records}),
        "records_produced": [{"topic": t, "partition": p, "offset": o, "value": v} for t, p, o, v in records],
        "mechanisms": sorted({e.request.mechanism for e in kafka if e.api_name == "SaslHandshake"}),
        "codecs": sorted(produce_codecs(kafka)),
        "api_keys": {f"{k}:{n}:v{v}": c for (k, n, v), c in sorted(
            Counter((e.api_key, e.api_name, e.api_version) for e in kafka).items())},
    }


def check_tshark(path: Path, ports: Sequence[int], exchanges: Sequence[Any]) -> Any:
    """Print tshark's reading of the capture beside kproto's, exchange by exchange, and assert
    every request and response tshark read (connection, correlation id, API key and version,
    length) is one of kproto's exchanges; tshark's malformed PDUs and notes are printed as
    information (its dissector stops at older versions than Kafka 4 speaks). Without tshark:
    a note, or a failure under CI, where tools/setup.sh installs it."""
    if shutil.which("tshark") is None:
        if os.environ.get("CI"):
            pytest.fail("tshark is needed under CI (tools/setup.sh installs it with root and apt)",
                        pytrace=False)
        print(f"{path.name}: tshark is not installed, no comparison")
        return None
    comparison = compare(exchanges, run_tshark(str(path), ports))
    print(f"\n{path.name}: kproto decode-pcap beside tshark\n{comparison.table()}")
    assert comparison.tshark_requests, "tshark read no Kafka request"
    assert comparison.agrees, [(p.frame, p.api_key, p.api_version, p.correlation_id)
                               for p in comparison.missed + comparison.missed_responses]
    return comparison


def check_scram_refused(path: Path, ports: Sequence[int], user: str = "alice") -> list[Any]:
    """Assert a capture of SCRAM logins Kafka refused decodes whole and shows why: each
    connection's client-final message carries the client's nonce, then the server's (which
    already begins with the client's: librdkafka before 2.6.1), and is answered
    SASL_AUTHENTICATION_FAILED."""
    exchanges, dec = decode(path, ports)
    kafka = [e for e in exchanges if e.kind == "kafka"]
    assert kafka and not dec.problems, dec.problems.reasons()
    assert not [p for e in exchanges for p in e.problems.reasons() if p != CLOSED]
    assert all(e.request is not None and (e.response is not None or e.problems.reasons() == [CLOSED])
               for e in kafka)
    by_conn: dict[Any, list[Any]] = {}
    for e in kafka:
        if e.api_name == "SaslAuthenticate":
            by_conn.setdefault((e.client, e.broker), []).append(e)
    refused = 0
    for attempt in by_conn.values():
        assert 1 <= len(attempt) <= 2, attempt
        first = attempt[0]
        if len(attempt) == 1:
            # the client gave up on this connection (a timeout under load) before its
            # client-final message: only the first message to check
            assert first.sasl["user"] == user
            continue
        final = attempt[1]
        assert first.sasl["user"] == user and first.response.error_code == 0
        client_nonce = dict(x.split("=", 1) for x in bytes(first.request.auth_bytes).decode().split(",")[2:])["r"]
        server_nonce = dict(x.split("=", 1) for x in bytes(first.response.auth_bytes).decode().split(","))["r"]
        assert server_nonce.startswith(client_nonce) and server_nonce != client_nonce
        sent = dict(x.split("=", 1) for x in bytes(final.request.auth_bytes).decode().split(","))["r"]
        assert sent == client_nonce + server_nonce   # RFC 5802: server_nonce alone
        if final.response is None:
            continue   # the client gave up (closed) before the answer: only its last attempt
        assert final.errors == ["SASL_AUTHENTICATION_FAILED"]
        assert "invalid credentials" in (final.response.error_message or "")
        refused += 1
    assert refused
    return exchanges
