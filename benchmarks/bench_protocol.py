"""Protocol codec benchmark: kproto next to kio and kafka-python, same bytes, one run.

    python benchmarks/bench_protocol.py [--seconds 1.0] [--repeat 5] [--only NAMES] [--cpu-time]

Inputs (built with kproto, then decoded by every library; each peer's re-encoding is checked against
the same bytes before it is timed):
- MetadataResponse, 200 topics x 10 partitions, v12 and v9
- ProduceRequest, 100 partitions with one small record batch each, v9
- FetchResponse, 100 partitions with 16 KiB of record batches each, v12

Prints the median ops/s of decode and encode for each library and kproto's ratio to each peer, and
kproto's zero-copy send (``encode_parts``: a list of buffers for ``writelines``, records not copied).

kproto's C decoder checks an array of structs whole but builds its elements on first read, so its
decode row is what decoding costs a reader of some fields; ``--touch`` adds three rows: decoding
with ``lazy=False`` (everything built in the one walk, the same objects Java's decode makes, as
kproto's broker, client and capture reader decode), decoding and then building every array of
structs at any depth, and decoding and then reading every field of every object (what a reader
of all of it pays in Python).

With ``KPROTO_JAVA_BENCH`` set (``python benchmarks/java_runner.py --build`` prints it) the same bytes
also go to Apache Kafka's own classes on the JVM (5 s warm-up, median of 5 rounds by default), which
must re-encode them identically; the Java row and the send row give kproto/Java. Without it the
reference figures measured on this machine are printed instead.
"""
from __future__ import annotations

import argparse
import io
import operator
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import java_runner  # noqa: E402
import kproto  # noqa: E402
from kproto.codecs import Uuid  # noqa: E402
from kproto.records import RecordBatchBuilder  # noqa: E402


def small_batch(seed: int) -> bytes:
    b = RecordBatchBuilder(base_offset=0, producer_id=1000 + seed, producer_epoch=0, base_sequence=seed)
    b.append(1_700_000_000_000 + seed, b"key-%05d" % seed, b"value-" + bytes(40))
    return b.build()


def fetch_records(seed: int, size: int = 16 * 1024) -> bytes:
    out = bytearray()
    offset = seed * 1000
    while len(out) < size:
        b = RecordBatchBuilder(base_offset=offset)
        for i in range(10):
            b.append(1_700_000_000_000 + i, b"k%09d" % (offset + i), bytes(150))
        out += b.build()
        offset += 10
    return bytes(out)


def build_inputs() -> Dict[str, Tuple[str, int, bytes]]:
    md = kproto.response(3)
    C = md.cls

    def metadata(version: int) -> bytes:
        topics = []
        for t in range(200):
            parts = [C.MetadataResponsePartition(
                error_code=0, partition_index=p, leader_id=p % 5, leader_epoch=7,
                replica_nodes=[p % 5, (p + 1) % 5, (p + 2) % 5], isr_nodes=[p % 5, (p + 1) % 5, (p + 2) % 5],
                offline_replicas=[]) for p in range(10)]
            topics.append(C.MetadataResponseTopic(
                error_code=0, name=f"topic-{t:04d}.events", topic_id=Uuid(t.to_bytes(16, "big")),
                is_internal=False, partitions=parts, topic_authorized_operations=-2147483648))
        brokers = [C.MetadataResponseBroker(node_id=i, host=f"broker-{i}.example.internal", port=9092,
                                            rack=f"rack-{i % 3}") for i in range(5)]
        return md.encode(C(throttle_time_ms=0, brokers=brokers, cluster_id="kproto-bench-cluster",
                           controller_id=1, topics=topics), version)

    pr = kproto.request(0)
    P = pr.cls
    produce = pr.encode(P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        P.TopicProduceData(name=f"topic-{t}", partition_data=[
            P.PartitionProduceData(index=p, records=small_batch(t * 10 + p)) for p in range(10)])
        for t in range(10)]), 9)

    fr = kproto.response(1)
    R = fr.cls
    fetch = fr.encode(R(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        R.FetchableTopicResponse(topic=f"topic-{t}", partitions=[
            R.PartitionData(partition_index=p, error_code=0, high_watermark=10_000_000,
                            last_stable_offset=10_000_000, log_start_offset=0, aborted_transactions=[],
                            preferred_read_replica=-1, records=fetch_records(t * 10 + p))
            for p in range(10)]) for t in range(10)]), 12)
    return {
        "MetadataResponse v12": ("MetadataResponse", 12, metadata(12)),
        "MetadataResponse v9": ("MetadataResponse", 9, metadata(9)),
        "ProduceRequest v9": ("ProduceRequest", 9, produce),
        "FetchResponse v12": ("FetchResponse", 12, fetch),
    }


# -- the libraries -------------------------------------------------------------------------------
class Lib:
    name = ""

    def prepare(self, message: str, version: int, data: bytes) -> Optional[Tuple[Callable, Callable]]:
        """(decode(), encode()) closures over ``data``, or None when the library cannot do it."""
        raise NotImplementedError


_GETTERS: Dict[type, Callable[[Any], Tuple[Any, ...]]] = {}


def touch(obj: Any) -> int:
    """Read every field of a decoded message and of every object in it, at any depth (arrays of
    structs still pending are built by the read); the number of values read."""
    n = 0
    stack = [obj]
    message_object = kproto.codecs.MessageObject
    while stack:
        o = stack.pop()
        get = _GETTERS.get(type(o))
        if get is None:
            fields = type(o)._fields
            get = _GETTERS[type(o)] = (operator.attrgetter(*fields) if len(fields) > 1
                                       else (lambda x, f=fields: tuple(getattr(x, a) for a in f)))
        for v in get(o):
            n += 1
            if type(v) is list:
                if v and isinstance(v[0], message_object):
                    stack.extend(v)
            elif isinstance(v, message_object):
                stack.append(v)
    return n


_ARRAYS: Dict[type, Tuple[str, ...]] = {}


def _struct_arrays(cls: type) -> Tuple[str, ...]:
    names = _ARRAYS.get(cls)
    if names is None:
        names = _ARRAYS[cls] = tuple(f.attr for f in cls._schema_struct.fields  # type: ignore[attr-defined]
                                     if f.is_array and f.is_struct_type)
    return names


def build_all(obj: Any) -> None:
    """Read every array of structs of a decoded message at any depth (built by the first read of
    the outermost ones) and nothing else: the cost of building everything, with little Python."""
    stack = [obj]
    while stack:
        o = stack.pop()
        for name in _struct_arrays(type(o)):
            v = getattr(o, name)
            if v and _struct_arrays(type(v[0])):
                stack.extend(v)


class KprotoLib(Lib):
    name = "kproto"

    def prepare(self, message, version, data):
        codec = kproto.message(message)
        obj = codec.decode(data, version)
        assert codec.encode(obj, version) == data
        self.send = lambda: codec.encode_parts(obj, version, [])
        self.touch = lambda: touch(codec.decode(data, version))
        self.build = lambda: build_all(codec.decode(data, version))
        self.whole = lambda: codec.decode(data, version, lazy=False)
        return (lambda: codec.decode(data, version)), (lambda: codec.encode(obj, version))


class KafkaPythonLib(Lib):
    name = "kafka-python"

    def prepare(self, message, version, data):
        try:
            import kafka.protocol.consumer as f
            import kafka.protocol.metadata as m
            import kafka.protocol.producer as p
        except ImportError:
            return None
        cls = {"MetadataResponse": m.MetadataResponse, "ProduceRequest": p.ProduceRequest,
               "FetchResponse": f.FetchResponse}[message]
        obj = cls.decode(data, version=version)
        try:
            obj._header
        except AttributeError:   # its fast decoder skips __init__; encode() needs the slot set
            obj._header = None
        enc = obj.encode(version=version)
        if bytes(enc) != data:
            print(f"  note: kafka-python re-encodes {message} v{version} differently "
                  f"({len(enc)} vs {len(data)} bytes)")
        return (lambda: cls.decode(data, version=version)), (lambda: obj.encode(version=version))


class KioLib(Lib):
    name = "kio"

    def prepare(self, message, version, data):
        try:
            import importlib

            from kio.serial import entity_reader, entity_writer
        except ImportError:
            return None
        mod = {"MetadataResponse": "metadata.v%d.response", "ProduceRequest": "produce.v%d.request",
               "FetchResponse": "fetch.v%d.response"}[message] % version
        cls = getattr(importlib.import_module("kio.schema." + mod), message)
        read, write = entity_reader(cls), entity_writer(cls)
        obj, end = read(data, 0)
        assert end == len(data)
        buf = io.BytesIO()
        write(buf, obj)
        if buf.getvalue() != data:
            print(f"  note: kio re-encodes {message} v{version} differently")

        def encode() -> bytes:
            b = io.BytesIO()
            write(b, obj)
            return b.getvalue()

        return (lambda: read(data, 0)), encode


#: Kafka 4.4.0's classes, Java 17, this machine, 5 s warm-up, median of 5, per CPU second:
#: decode, encode, zero-copy send ops/s; printed when no Java runner is configured.
JAVA_REFERENCE: Dict[str, Tuple[float, float, Optional[float]]] = {
    "MetadataResponse v9": (8_800, 7_300, 6_800),
    "ProduceRequest v9": (362_000, 283_000, 229_000),
    "FetchResponse v12": (245_000, 5_400, 125_000),
}


def ops_per_second(fn: Callable[[], Any], seconds: float, repeat: int,
                   clock: Callable[[], float] = time.perf_counter) -> float:
    fn()
    n = 1
    while True:   # calibrate: how many calls fill about a tenth of the time budget
        t0 = clock()
        for _ in range(n):
            fn()
        dt = clock() - t0
        if dt > seconds / 10:
            break
        n *= 2
    per_round = max(1, int(n * (seconds / repeat) / dt))
    rates = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(per_round):
            fn()
        rates.append(per_round / (clock() - t0))
    return statistics.median(rates)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="time budget per measurement")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", help="substrings of the input names to run, comma-separated")
    ap.add_argument("--cpu-time", action="store_true",
                    help="ops per CPU second (Python's process_time, the JVM's process CPU time) rather "
                         "than per wall-clock second: steadier on a machine shared with other work")
    ap.add_argument("--touch", action="store_true",
                    help="also time kproto decoding with lazy=False, and decoding then building or reading "
                         "everything at any depth")
    ap.add_argument("--java-warmup", type=float, default=5.0, help="JVM warm-up seconds per measurement")
    ap.add_argument("--java-rounds", type=int, default=5, help="JVM rounds (median reported)")
    ap.add_argument("--java-round-seconds", type=float, default=1.0)
    args = ap.parse_args(argv)
    libs = [KprotoLib(), KioLib(), KafkaPythonLib()]
    inputs = build_inputs()
    only = [o for o in (args.only or "").split(",") if o]
    selected = {k: v for k, v in inputs.items() if not only or any(o in k for o in only)}
    clock = time.process_time if args.cpu_time else time.perf_counter
    java_cmd = java_runner.command_from_env()
    java: Optional[Dict[str, Any]] = None
    if java_cmd:   # first, alone: the JVM and Python would otherwise share the two cores
        java = java_runner.run(java_cmd, [(k, m, v, d) for k, (m, v, d) in selected.items()],
                               warmup=args.java_warmup, rounds=args.java_rounds,
                               round_seconds=args.java_round_seconds, cpu_time=args.cpu_time)
        print(f"Java: Kafka {java['kafka']} classes, Java {java['java']}, {java['warmup_s']:g} s warm-up, "
              f"median of {java['rounds']} x {java['round_s']:g} s")
    else:
        print(java_runner.NO_JAVA + "; reference figures measured on this machine are shown instead")
    print("ops per CPU second (process time)" if args.cpu_time else "ops per wall-clock second")
    print(f"{'input':<22} {'library':<13} {'decode ops/s':>13} {'encode ops/s':>13}   "
          f"{'kproto/peer decode':>18} {'kproto/peer encode':>18}")
    for label, (message, version, data) in selected.items():
        results: Dict[str, Tuple[float, float]] = {}
        for lib in libs:
            try:
                fns = lib.prepare(message, version, data)
            except Exception as exc:  # a peer that cannot handle the input is reported, not fatal
                print(f"  {lib.name}: cannot handle {label}: {type(exc).__name__}: {exc}")
                continue
            if fns is None:
                print(f"  {lib.name}: not installed")
                continue
            dec, enc = fns
            results[lib.name] = (ops_per_second(dec, args.seconds, args.repeat, clock),
                                 ops_per_second(enc, args.seconds, args.repeat, clock))
        java_send: Optional[float] = None
        if java is not None:
            j = java["protocol"][label]
            results["Java"] = (j["decode"], j["encode"])
            java_send = j["send"]
        elif label in JAVA_REFERENCE:
            d, e, java_send = JAVA_REFERENCE[label]
            results["Java (ref.)"] = (d, e)
        base = results.get("kproto")
        for name, (d, e) in results.items():
            ratio = ""
            if base and name != "kproto":
                ratio = f"{base[0] / d:>18.2f}x {base[1] / e:>17.2f}x"
            print(f"{label:<22} {name:<13} {d:>13,.0f} {e:>13,.0f}   {ratio}")
            if name == "kproto":
                send = ops_per_second(libs[0].send, args.seconds, args.repeat, clock)
                print(f"{'':<22} {'kproto send':<13} {'':>13} {send:>13,.0f}   (encode_parts, zero-copy)")
                if args.touch:
                    java_decode = results.get("Java", results.get("Java (ref.)", (0.0, 0.0)))[0]
                    for row, fn, what in (("kproto whole", libs[0].whole, "decode with lazy=False"),
                                          ("kproto build", libs[0].build, "decode and build every array"),
                                          ("kproto touch", libs[0].touch, "decode and read every field")):
                        rate = ops_per_second(fn, args.seconds, args.repeat, clock)
                        vs = f"{rate / java_decode:>18.2f}x ({what} / Java decode)" if java_decode else ""
                        print(f"{'':<22} {row:<13} {rate:>13,.0f} {'':>13}   {vs}")
            elif name.startswith("Java") and java_send:
                # Java's encode copies records into one buffer, its Send (SendBuilder) does not
                print(f"{'':<22} {name + ' send':<13} {'':>13} {java_send:>13,.0f}   {'':>18} "
                      f"{send / java_send:>17.2f}x (kproto send / Java zero-copy Send)")
        print(f"{'':<22} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
