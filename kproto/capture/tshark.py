"""Wireshark's reading of a capture beside kproto's: ``tshark``'s Kafka dissector, PDU by PDU
(API key, version, correlation id, length, what it marked malformed or noted), matched with the
exchanges :class:`~kproto.capture.decoder.CaptureDecoder` found in the same file.

Reading tshark's JSON (:func:`tshark_pdus`) and comparing (:func:`compare`) know nothing of
processes; :func:`run_tshark` runs ``tshark -r FILE -d tcp.port==P,kafka -T json`` for them.
``kproto decode-pcap --compare-tshark`` prints :meth:`Comparison.table`.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from kproto.codecs import api_keys

__all__ = ["TsharkPdu", "Comparison", "tshark_command", "tshark_pdus", "run_tshark", "compare"]


@dataclass(frozen=True)
class TsharkPdu:
    """One Kafka PDU as tshark dissected it."""

    frame: int
    client_port: int
    broker_port: int
    is_request: bool
    correlation_id: int
    length: int                      #: the size field (the frame without its 4 size bytes)
    api_key: Optional[int] = None    #: a response's: from the request tshark paired it with
    api_version: Optional[int] = None
    malformed: bool = False
    notes: tuple[str, ...] = ()      #: tshark's expert messages ("Unsupported ... version", ...)


def tshark_command(path: str, ports: Iterable[int], tshark: str = "tshark") -> list[str]:
    """The command whose output :func:`tshark_pdus` reads: every Kafka PDU of ``path``, the
    TCP ``ports`` dissected as Kafka."""
    cmd = [tshark, "-r", path, "-n"]
    for p in sorted(set(ports)):
        cmd += ["-d", f"tcp.port=={p},kafka"]
    return cmd + ["-Y", "kafka", "-T", "json", "-J", "tcp kafka"]


def _messages(obj: Any) -> Iterable[str]:
    """tshark's expert messages anywhere under a dissected PDU."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "_ws.expert.message" and isinstance(v, str):
                yield v
            else:
                yield from _messages(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _messages(v)


def _int(text: Any) -> Optional[int]:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def tshark_pdus(frames: Sequence[Any], ports: Iterable[int]) -> list[TsharkPdu]:
    """The Kafka PDUs of tshark's ``-T json`` output (:func:`tshark_command`); those sent to
    one of ``ports`` are requests."""
    brokers = set(ports)
    out = []
    for fr in frames:
        layers = fr.get("_source", {}).get("layers", {})
        tcp, pdus = layers.get("tcp") or {}, layers.get("kafka")
        sport, dport = _int(tcp.get("tcp.srcport")), _int(tcp.get("tcp.dstport"))
        if sport is None or dport is None:
            continue
        frame_malformed = "_ws.malformed" in layers
        number = _int(layers.get("frame", {}).get("frame.number")) or 0
        for pdu in pdus if isinstance(pdus, list) else [pdus]:
            if not isinstance(pdu, dict) or _int(pdu.get("kafka.correlation_id")) is None:
                continue
            request = dport in brokers
            version = pdu.get("kafka.request.version" if request else "kafka.response.version")
            out.append(TsharkPdu(
                frame=number, client_port=sport if request else dport,
                broker_port=dport if request else sport, is_request=request,
                correlation_id=int(pdu["kafka.correlation_id"]), length=_int(pdu.get("kafka.len")) or 0,
                api_key=_int(pdu.get("kafka.request_key" if request else "kafka.response_key")),
                api_version=_int(version),
                malformed=frame_malformed or "_ws.malformed" in pdu,
                notes=tuple(dict.fromkeys(_messages(pdu)))))
    return out


def run_tshark(path: str, ports: Iterable[int], tshark: Optional[str] = None,
               timeout: float = 600.0) -> list[TsharkPdu]:
    """tshark's Kafka PDUs of the capture ``path`` (``ports``: the brokers'). RuntimeError when
    tshark is missing or fails."""
    exe = tshark or shutil.which("tshark")
    if exe is None:
        raise RuntimeError("tshark is not installed (Debian: apt-get install tshark)")
    ports = list(ports)
    proc = subprocess.run(tshark_command(path, ports, exe), capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"tshark exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    text = proc.stdout.decode("utf-8", "replace").strip()
    return tshark_pdus(json.loads(text) if text else [], ports)


@dataclass
class Comparison:
    """kproto's exchanges and tshark's PDUs, matched by connection (client and broker port)
    and correlation id."""

    rows: list[tuple[Any, Optional[TsharkPdu], Optional[TsharkPdu]]] = field(default_factory=list)
    #: tshark's requests no exchange has (same connection, correlation id, API key and version)
    missed: list[TsharkPdu] = field(default_factory=list)
    #: tshark's responses no exchange has
    missed_responses: list[TsharkPdu] = field(default_factory=list)
    tshark_requests: int = 0
    tshark_responses: int = 0
    tshark_malformed: int = 0        #: PDUs tshark marked malformed
    tshark_notes: Counter[str] = field(default_factory=Counter)

    @property
    def agrees(self) -> bool:
        """Every PDU tshark read is one of kproto's exchanges, as tshark read it."""
        return not self.missed and not self.missed_responses

    def table(self) -> str:
        """One line per exchange: kproto's reading, then tshark's; the totals at the end."""
        names = api_keys()
        lines = [f"{'client':>6} {'broker':>6} {'corr':>10}  {'kproto':<34} {'tshark':<30}"]
        for ex, req, resp in self.rows:
            name = ex.api_name or f"key {ex.api_key}"
            ours = f"{name} v{ex.api_version}" + (f" !{len(ex.problems)}" if ex.problems else "")
            if req is None:
                theirs = "-"
            else:
                theirs = f"{names.get(req.api_key or -1, f'key {req.api_key}')} v{req.api_version}"
                bad = [p for p in (req, resp) if p is not None and p.malformed]
                if bad:
                    theirs += " malformed" + ("" if len(bad) == 2 else " (request)" if bad[0] is req
                                              else " (response)")
                if resp is None and ex.response_bytes:
                    theirs += ", response not read"
            lines.append(f"{ex.client.port:>6} {ex.broker.port:>6} {ex.correlation_id:>10}  "
                         f"{ours:<34} {theirs}")
        for p in self.missed + self.missed_responses:
            kind = "request" if p.is_request else "response"
            lines.append(f"{p.client_port:>6} {p.broker_port:>6} {p.correlation_id:>10}  "
                         f"{'- (not found)':<34} {kind} key {p.api_key} v{p.api_version} frame {p.frame}")
        lines.append(f"tshark: {self.tshark_requests} requests, {self.tshark_responses} responses, "
                     f"{self.tshark_malformed} malformed; kproto: {len(self.rows)} exchanges; "
                     + ("every PDU tshark read is an exchange here" if self.agrees else
                        f"{len(self.missed) + len(self.missed_responses)} PDU(s) tshark read are not"))
        for note, n in self.tshark_notes.most_common(5):
            lines.append(f"tshark noted {n}x: {note}")
        return "\n".join(lines)


def compare(exchanges: Iterable[Any], pdus: Iterable[TsharkPdu]) -> Comparison:
    """Match kproto's Kafka exchanges with tshark's PDUs (:func:`tshark_pdus`)."""
    requests: dict[tuple[int, int, int], list[TsharkPdu]] = {}
    responses: dict[tuple[int, int, int], list[TsharkPdu]] = {}
    out = Comparison()
    for p in pdus:
        key = (p.client_port, p.broker_port, p.correlation_id)
        (requests if p.is_request else responses).setdefault(key, []).append(p)
        out.tshark_requests += p.is_request
        out.tshark_responses += not p.is_request
        out.tshark_malformed += p.malformed
        out.tshark_notes.update(p.notes)
    for ex in exchanges:
        if ex.kind != "kafka":
            continue
        key = (ex.client.port, ex.broker.port, ex.correlation_id)
        req = _take(requests, key, lambda p: (p.api_key, p.api_version) == (ex.api_key, ex.api_version)
                    and p.length == ex.request_bytes - 4)
        resp = _take(responses, key, lambda p: p.length == ex.response_bytes - 4) if ex.response_bytes else None
        out.rows.append((ex, req, resp))
    out.missed = [p for ps in requests.values() for p in ps]
    out.missed_responses = [p for ps in responses.values() for p in ps]
    return out


def _take(found: dict[tuple[int, int, int], list[TsharkPdu]], key: tuple[int, int, int],
          match: Any) -> Optional[TsharkPdu]:
    for i, p in enumerate(found.get(key, ())):
        if match(p):
            return found[key].pop(i)
    return None
