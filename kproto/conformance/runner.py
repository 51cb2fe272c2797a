"""The I/O of a conformance run: connections to both brokers, topic set-up, and driving each
scenario's generator against both (the comparison itself is sans-I/O).

    report = await run_conformance(("127.0.0.1", 9092), ("127.0.0.1", 19092))
    print(report.text())

Every scenario runs once per version of its API both brokers advertise; the runs are
independent (names unique per run) and go in parallel over a small pool of connections per
broker. Topics the scenarios declare are created up front with CreateTopics on each broker, in
batches, and the run waits until Metadata shows a leader for every partition.
"""
from __future__ import annotations

import asyncio
import fnmatch
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from kproto.client.connection import Connection
from kproto.client.protocol import KafkaConnectionError
from kproto.codecs import request as request_codec
from kproto.conformance.compare import Diff, compare
from kproto.conformance.deviations import Deviations
from kproto.conformance.normalise import Normaliser, to_tree
from kproto.conformance.report import CallResult, Report
from kproto.conformance.scenario import TRANSIENT_COORDINATOR_ERRORS, Call, Context, MissingApi, Scenario, api_name, build
from kproto.conformance.scenarios import SCENARIOS
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError, EncodeError, UnsupportedVersionError
from kproto.schemas.api_keys import ApiKey

__all__ = ["run_conformance", "parse_address"]

Address = Tuple[str, int]

#: The outcome of a call the kit itself failed to make or to follow (a scenario bug, or an
#: answer missing what the scenario reads next): a difference even when both sides agree.
KIT_ERROR = "<kit error>"

#: How often a call with ``retry`` is sent again at most (100 ms apart).
RETRIES = 100


def parse_address(text: str) -> Address:
    """``HOST:PORT`` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass
class _Outcome:
    label: str
    api_key: int
    version: int
    compare: bool
    tree: Any  # normalised answer, or {"<error>": text}


class _Side:
    """One broker: a pool of connections and what the set-up learnt (topic ids, node id)."""

    def __init__(self, name: str, address: Address, size: int, timeout: float) -> None:
        self.name, self.address, self.timeout = name, address, timeout
        self.pool: asyncio.Queue[Connection] = asyncio.Queue()
        self.size = size
        self.versions: Dict[int, range] = {}
        self.topic_ids: Dict[str, Any] = {}
        self.node_id = -1
        self.touched: Set[Tuple[str, str, str]] = set()  # what the normaliser replaced
        self._all: List[Connection] = []

    async def connect(self) -> Connection:
        conn = await Connection.open(*self.address, client_id="kproto-conformance",
                                     request_timeout=self.timeout)
        self._all.append(conn)
        return conn

    async def start(self) -> None:
        first = await self.connect()
        self.versions = dict(first.versions.broker)
        self.pool.put_nowait(first)
        for conn in await asyncio.gather(*(self.connect() for _ in range(self.size - 1))):
            self.pool.put_nowait(conn)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._all), return_exceptions=True)


def _common(a: Dict[int, range], b: Dict[int, range]) -> Dict[int, range]:
    out = {}
    for k in set(a) & set(b):
        try:
            codec = request_codec(k).valid_versions
        except KeyError:
            continue
        lo = max(a[k].start, b[k].start, codec.start)
        hi = min(a[k].stop, b[k].stop, codec.stop)
        if lo < hi:
            out[k] = range(lo, hi)
    return out


async def _drive(side: _Side, scenario: Scenario, ctx: Context) -> List[_Outcome]:
    """Run one scenario's generator against one broker; a failed call ends the run."""
    norm = Normaliser()
    outcomes: List[_Outcome] = []
    gen = scenario.body(ctx)
    conn = await side.pool.get()
    try:
        call: Optional[Call] = next(gen)
        while call is not None:
            try:
                if call.expect_response:
                    resp = await conn.request(call.body, call.version)
                    for _ in range(RETRIES):
                        if call.retry is None or not call.retry(resp):
                            break
                        await asyncio.sleep(0.1)
                        resp = await conn.request(call.body, call.version)
                else:
                    conn.send(call.body, call.version, expect_response=False)
                    resp = None
            except DecodeError as exc:  # the broker's answer does not parse: its difference
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {"<error>": f"DecodeError: {exc}"}))
                break
            except (EncodeError, UnsupportedVersionError, TypeError, ValueError) as exc:
                # the kit could not write its own request: always reported, never "same"
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {KIT_ERROR: f"{type(exc).__name__}: {exc}"}))
                break
            except Exception as exc:  # noqa: BLE001 - recorded and compared as the outcome
                outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare,
                                         {"<error>": type(exc).__name__}))
                if conn.closed:
                    try:
                        conn = await side.connect()
                    except KafkaConnectionError:
                        pass  # the broker is gone: later calls on this connection fail too
                break
            tree = None if resp is None else norm.apply(api_name(call.api_key),
                                                         to_tree(call.api_key, call.version, resp))
            if call.view is not None and tree is not None:
                tree = call.view(tree)
            outcomes.append(_Outcome(call.label, call.api_key, call.version, call.compare, tree))
            try:
                call = gen.send(resp)
            except (StopIteration, MissingApi):
                raise
            except Exception as exc:  # noqa: BLE001 - the answer was not what the scenario needs
                outcomes.append(_Outcome("<scenario>", call.api_key, call.version, False,
                                         {KIT_ERROR: f"{type(exc).__name__}: {exc}"}))
                break
    except StopIteration:
        pass
    finally:
        gen.close()
        side.pool.put_nowait(conn)
        side.touched |= norm.touched
    return outcomes


async def _create_topics(side: _Side, specs: Dict[str, Any], timeout: float) -> None:
    """CreateTopics for every declared topic (batches of 50), then wait for their leaders."""
    if not specs:
        return
    conn = await side.pool.get()
    try:
        if ApiKey.CREATE_TOPICS in side.versions:
            ver = side.versions[ApiKey.CREATE_TOPICS][-1]
            ver = min(ver, request_codec(ApiKey.CREATE_TOPICS).valid_versions[-1])
            names = list(specs)
            for i in range(0, len(names), 50):
                req = build(ApiKey.CREATE_TOPICS, ver, timeout_ms=30000, topics=[
                    {"name": n, "num_partitions": specs[n].partitions, "replication_factor": 1,
                     "configs": [{"name": k, "value": v} for k, v in specs[n].configs]}
                    for n in names[i:i + 50]])
                resp = await conn.request(req, ver)
                for t in resp.topics:
                    if t.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                        raise RuntimeError(f"{side.name}: CreateTopics {t.name}: error {t.error_code}")
        md_ver = min(side.versions[ApiKey.METADATA][-1], 12)
        deadline = time.monotonic() + timeout
        pending = set(specs)
        while pending:
            req = build(ApiKey.METADATA, md_ver, topics=[{"name": n} for n in sorted(pending)],
                        allow_auto_topic_creation=ApiKey.CREATE_TOPICS not in side.versions)
            resp = await conn.request(req, md_ver)
            for b in resp.brokers[:1]:
                side.node_id = b.node_id
            for t in resp.topics:
                if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
                    side.topic_ids[t.name] = t.topic_id
                    pending.discard(t.name)
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: no leader for {len(pending)} topics after {timeout} s")
                await asyncio.sleep(0.1)
    finally:
        side.pool.put_nowait(conn)


async def _warm_coordinators(side: _Side, timeout: float) -> None:
    """FindCoordinator for a group and a transactional id until both are found: the first one
    makes a broker create ``__consumer_offsets``/``__transaction_state`` and load them, which
    scenarios must not see as errors of their own."""
    if ApiKey.FIND_COORDINATOR not in side.versions:
        return
    ver = min(side.versions[ApiKey.FIND_COORDINATOR][-1], 6)
    conn = await side.pool.get()
    try:
        for key_type in (0, 1):
            deadline = time.monotonic() + timeout
            while True:
                req = build(ApiKey.FIND_COORDINATOR, ver, key="kproto-conformance", key_type=key_type,
                            coordinator_keys=["kproto-conformance"])
                resp = await conn.request(req, ver)
                code = resp.coordinators[0].error_code if ver >= 4 else resp.error_code
                if code not in TRANSIENT_COORDINATOR_ERRORS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
    finally:
        side.pool.put_nowait(conn)


async def _has_authorizer(side: _Side) -> bool:
    if ApiKey.DESCRIBE_ACLS not in side.versions:
        return False
    conn = await side.pool.get()
    try:
        ver = min(side.versions[ApiKey.DESCRIBE_ACLS][-1], request_codec(ApiKey.DESCRIBE_ACLS).valid_versions[-1])
        req = build(ApiKey.DESCRIBE_ACLS, ver, resource_type_filter=1, pattern_type_filter=1,
                    operation=1, permission_type=1)
        resp = await conn.request(req, ver)
        return resp.error_code != ErrorCode.SECURITY_DISABLED
    except Exception:  # noqa: BLE001 - no answer: no usable authorizer
        return False
    finally:
        side.pool.put_nowait(conn)


async def run_conformance(target: Address, reference: Address, *,
                          deviations: Optional[Deviations] = None,
                          scenarios: Optional[Sequence[Scenario]] = None,
                          select: Optional[Sequence[str]] = None,
                          concurrency: int = 16, timeout: float = 30.0,
                          run_id: Optional[str] = None) -> Report:
    """Run the corpus (or ``scenarios``; ``select``: fnmatch patterns on scenario names)
    against ``target`` and ``reference`` and return the :class:`Report`."""
    scenarios = list(SCENARIOS if scenarios is None else scenarios)
    if select:
        scenarios = [s for s in scenarios if any(fnmatch.fnmatchcase(s.name, p) for p in select)]
    run_id = run_id or os.urandom(3).hex()
    tside = _Side("target", target, concurrency, timeout)
    rside = _Side("reference", reference, concurrency, timeout)
    try:
        await asyncio.gather(tside.start(), rside.start())
        common = _common(tside.versions, rside.versions)
        report = Report(f"{target[0]}:{target[1]}", f"{reference[0]}:{reference[1]}",
                        tside.versions, rside.versions, deviations=deviations or Deviations())
        auth = await asyncio.gather(_has_authorizer(tside), _has_authorizer(rside))
        runs: List[Tuple[Scenario, int]] = []
        for s in scenarios:
            if s.needs_authorizer and not all(auth):
                report.skipped[s.name] = ("needs an authorizer on both brokers (target: %s, reference: %s)"
                                          % ("yes" if auth[0] else "no", "yes" if auth[1] else "no"))
                continue
            ref = rside.versions.get(s.api_key, range(0))
            codec = request_codec(s.api_key).valid_versions
            wanted = s.versions or codec
            ref_versions = [v for v in ref if v in codec and v in wanted]
            if not ref_versions:
                report.skipped[s.name] = f"the reference does not advertise {api_name(s.api_key)}"
                continue
            report.tested.add(s.api_key)
            tgt = tside.versions.get(s.api_key, range(0))
            for v in ref_versions:
                if v in tgt:
                    runs.append((s, v))
                elif (s.api_key, v) not in report.unsupported:
                    report.unsupported.append((s.api_key, v))
        specs: Dict[str, Any] = {}
        for s, v in runs:
            for t in s.topics:
                specs[f"kc{run_id}-{s.name}-v{v}-{t.suffix}"] = t
        await asyncio.gather(_create_topics(tside, specs, timeout),
                             _create_topics(rside, specs, timeout),
                             _warm_coordinators(tside, timeout), _warm_coordinators(rside, timeout))

        sem = asyncio.Semaphore(concurrency)
        t0 = int(time.time()) * 1000

        async def one(s: Scenario, v: int) -> None:
            prefix = f"kc{run_id}-{s.name}-v{v}"
            ctxs = [Context(s, v, prefix, common, side.topic_ids, side.node_id, t0) for side in (tside, rside)]
            async with sem:
                try:
                    t_out, r_out = await asyncio.gather(_drive(tside, s, ctxs[0]), _drive(rside, s, ctxs[1]))
                except MissingApi as exc:
                    report.skipped[s.name] = str(exc)
                    return
            _record(report, s, v, t_out, r_out)

        await asyncio.gather(*(one(s, v) for s, v in runs))
        report.normalised = tside.touched | rside.touched
        return report
    finally:
        await asyncio.gather(tside.close(), rside.close())


def _record(report: Report, s: Scenario, v: int, t_out: List[_Outcome], r_out: List[_Outcome]) -> None:
    """Compare the two transcripts call by call. Compared calls count in their own cell; a
    helper call counts (in the scenario's cell) only when one side failed it; a call only one
    side made is a ``<sequence>`` difference."""
    own = CallResult(s.name, s.api_key, v, s.name)
    report.results.append(own)
    for i in range(max(len(t_out), len(r_out))):
        t = t_out[i] if i < len(t_out) else None
        r = r_out[i] if i < len(r_out) else None
        if t is None or r is None or t.label != r.label:
            own.diffs.append(Diff(f"<sequence>[{i}]", t and t.label, r and r.label))
            break
        kit = [x.tree[KIT_ERROR] for x in (t, r) if isinstance(x.tree, dict) and KIT_ERROR in x.tree]
        if kit:
            own.diffs.append(Diff(f"{KIT_ERROR}[{i}]", t.tree, r.tree))
            break
        if _is_error(t.tree) or _is_error(r.tree):
            # a failed call (closed connection, undecodable answer) ends that side's run
            if t.tree != r.tree:
                res = own if not t.compare else CallResult(s.name, t.api_key, t.version, t.label)
                if res is not own:
                    report.results.append(res)
                res.diffs.append(Diff(f"<error {t.label}>" if res is own else "<error>",
                                      _error_text(t.tree), _error_text(r.tree)))
            break
        if t.compare:
            res = CallResult(s.name, t.api_key, t.version, t.label, compare(t.tree, r.tree))
            report.results.append(res)


def _error_text(tree: Any) -> Any:
    return tree.get("<error>", "answered") if isinstance(tree, dict) else "answered"


def _is_error(tree: Any) -> bool:
    return isinstance(tree, dict) and "<error>" in tree
