"""The Java column of the benchmarks: ``benchmarks/java/ProtocolBench.java`` (Apache Kafka's own
classes: kafka-clients 4.4.0 from the cache tools/setup.sh fills) compiled on demand and run on
payload files the Python benchmarks write.

    python benchmarks/java_runner.py --build     # compile; prints the command for KPROTO_JAVA_BENCH

``bench_protocol.py``, ``bench_records.py`` and ``bench_storage.py`` run that command when
``KPROTO_JAVA_BENCH`` is set. The runner prints one JSON object: per protocol payload
decode/encode/send ops/s and the SHA-256 of its re-encoding (it also refuses to run if that
differs from the input), per record file records/s, per set of segment files records/s of a
scan of them all (mapped and read with MemoryRecords, the same with every batch's CRC checked,
and through FileRecords).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, "java", "ProtocolBench.java")
ENV = "KPROTO_JAVA_BENCH"
NO_JAVA = f"no Java (set {ENV}, see benchmarks/java_runner.py)"

sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests", "broker"))
from java_interop import jars  # noqa: E402  (the one place that lists the client's jars)

#: the kafka-clients release measured: the same as the Apache Kafka the other benchmarks run
KAFKA_VERSION = "4.4.0"


def build(out_dir: Optional[str] = None) -> List[str]:
    """Compile the runner into ``out_dir`` (default: a cache folder keyed by the source's hash,
    so an unchanged source is not recompiled) and return the command that runs it."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if not (java and javac):
        raise RuntimeError("java and javac (Java 17) are needed for the Java benchmark")
    cp = jars(KAFKA_VERSION)
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16] + "-" + KAFKA_VERSION
    if out_dir is None:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        out_dir = os.path.join(cache, "kproto-java-bench", digest)
    if not os.path.isfile(os.path.join(out_dir, "ProtocolBench.class")):
        os.makedirs(out_dir, exist_ok=True)
        proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", os.pathsep.join(cp),
                               "-d", out_dir, SOURCE], capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"javac failed:\n{proc.stderr}")
    # A fixed heap keeps GC sizing out of the comparison between runs.
    return [java, "-Xms1g", "-Xmx1g", "-cp", os.pathsep.join([out_dir] + cp), "ProtocolBench"]


def command_from_env() -> Optional[List[str]]:
    """The runner command from ``KPROTO_JAVA_BENCH``, or None when it is not set."""
    value = os.environ.get(ENV, "").strip()
    return shlex.split(value) if value else None


def run(command: Sequence[str], protocol: Sequence[Tuple[str, str, int, bytes]] = (),
        records: Sequence[Tuple[str, bytes]] = (), warmup: float = 5.0, rounds: int = 5,
        round_seconds: float = 1.0, timeout: Optional[float] = None,
        segments: Sequence[Tuple[str, Sequence[str]]] = (), cpu_time: bool = False) -> Dict[str, Any]:
    """Write the payloads to a temporary folder, run the runner on them, return its JSON.

    ``protocol``: (label, message name, version, body bytes); ``records``: (label, record
    batches); ``segments``: (label, paths of segment files scanned together, read in place).
    ``cpu_time``: rates per second of the JVM's CPU time (all its threads), not of the wall clock.
    """
    with tempfile.TemporaryDirectory(prefix="kproto-java-bench-") as tmp:
        args = list(command) + ["--warmup", str(warmup), "--rounds", str(rounds),
                                "--round-seconds", str(round_seconds)] + (["--cpu-time"] if cpu_time else [])
        for i, (label, message, version, data) in enumerate(protocol):
            path = os.path.join(tmp, f"protocol-{i}.bin")
            with open(path, "wb") as f:
                f.write(data)
            args += ["--protocol", label, message, str(version), path]
        for i, (label, data) in enumerate(records):
            path = os.path.join(tmp, f"records-{i}.bin")
            with open(path, "wb") as f:
                f.write(data)
            args += ["--records", label, path]
        for label, paths in segments:
            args += ["--segments", label, os.pathsep.join(os.path.abspath(p) for p in paths)]
        if timeout is None:   # three measurements per payload or scan, each warm-up plus rounds
            per = (warmup + rounds * round_seconds) * (10 if cpu_time else 1)  # CPU time runs slower on a busy machine
            timeout = 60 + 1.5 * per * (3 * len(protocol) + len(records) + 3 * len(segments))
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"Java benchmark failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="store_true", help="compile and print the command")
    ap.add_argument("--out", help="folder for the classes (default: a cache folder)")
    args = ap.parse_args(argv)
    if not args.build:
        ap.print_help()
        return 2
    print(shlex.join(build(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
