"""A fuzz campaign over every decoder family, with the promise checked on each input: only the
documented errors (``kproto.DecodeError``, or a damage/problem report), no hang, no memory
blow-up.

    python fuzz/campaign.py --seconds 600 --workers 2 --out findings/
    python fuzz/campaign.py --reproduce findings/records-fuzz_records-<sha>.bin

Each family runs for ``--seconds`` in worker processes; a worker caps its memory (the data
limit: heap and private mappings, every allocation, but not files mapped read-only, whose pages
are read as they are used) at ``--memory`` bytes above what importing kproto took and gives
each input ``--timeout`` seconds of CPU time (and at most 15 times that in wall time).
Inputs are mutations (bit flips, byte overwrites, inserts, cuts, splices, length-field
boundary values) of seeds taken from the project's own data (``examples/``), of valid
record batches of every codec, of decompression bombs and of random bytes. An exception that
escapes a target, a timeout or a MemoryError is a finding: the input is saved with a ``.txt``
beside it saying how to reproduce it. The summary (JSON on stdout, ``--json FILE``) gives the
inputs executed and the findings per family.

The ``jvm`` family runs only when named (``--families jvm``: it needs a JDK and pyspark): each
input is a segment read by the ``kafka-segments-jvm`` reader in a JVM per worker and must give
the rows of kproto's Python reader (or a refusal), never an exception in the JVM.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))  # the tests' builders: the bomb, pcaps

#: family -> the targets run on its inputs (fuzz/<name>.py modules or functions below)
FAMILIES: dict[str, list[str]] = {
    "messages": ["fuzz_protocol_request", "fuzz_protocol_response", "fuzz_protocol_headers",
                 "fuzz_protocol_c_decoder", "fuzz_protocol_c_encoder"],
    "frames": ["fuzz_capture_stream", "fuzz_client_protocol"],
    "records": ["fuzz_records", "fuzz_decompress", "records_bulk"],
    "logdirs": ["fuzz_storage_files", "fuzz_storage_log", "logdir_files"],
    "captures": ["fuzz_capture_file"],
    "cli": ["cli_files"],
    "broker": ["fuzz_broker_request"],
    "bombs": ["bomb_entry_points"],
    "files": ["huge_files"],
    "attributes": ["attribute_oracle"],
    "jvm": ["jvm_segments"],
}
#: families run only when named in ``--families``: ``jvm`` needs a JDK and pyspark's jars
OPT_IN = frozenset({"jvm"})


# -- targets that have no fuzz/ module of their own ---------------------------------------------

def records_bulk(data: bytes) -> None:
    """The bulk paths of the records layer on a buffer of batches: columns, Arrow, objects."""
    from kproto.errors import DecodeError
    from kproto.problems import Problems
    from kproto.records.reader import decode_columns
    from kproto.records.dump import dump_lines
    from kproto.records.reader import iter_batches

    with contextlib.suppress(DecodeError):
        decode_columns(data)
    for line in dump_lines(data):
        assert line["type"] in ("batch", "record", "error", "summary")
    for batch in iter_batches(data, problems=Problems()):
        with contextlib.suppress(DecodeError):
            batch.record_list()


_LOGDIR: dict[str, object] = {}


def _scratch_logdir() -> tuple[str, list[str]]:
    """A private copy of examples/logdir (made once per worker) and its files."""
    if not _LOGDIR:
        root = tempfile.mkdtemp(prefix="kproto-campaign-")
        shutil.copytree(REPO / "examples" / "logdir", os.path.join(root, "logdir"))
        path = os.path.join(root, "logdir")
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
        _LOGDIR.update(path=path, files=files,
                       pristine={f: Path(f).read_bytes() for f in files})
    return _LOGDIR["path"], _LOGDIR["files"]  # type: ignore[return-value]


def logdir_files(data: bytes) -> None:
    """One file of a log dir replaced by the input: the summary, the Arrow read and the dumps
    must report what is wrong and go on."""
    import kproto.storage as ks
    from kproto.problems import Problems
    from kproto.storage.summary import summarize

    path, files = _scratch_logdir()
    if not data:
        return
    victim = files[data[0] % len(files)]
    try:
        Path(victim).write_bytes(data[1:])
        doc = summarize(path)
        assert isinstance(doc.get("problems", []), list)
        damage = Problems()
        ks.read_arrow(path, problems=damage, isolation="read_committed")
        assert all(d.bytes_skipped >= 0 for d in damage)
    finally:
        Path(victim).write_bytes(_LOGDIR["pristine"][victim])  # type: ignore[index]


def cli_files(data: bytes) -> None:
    """The command-line tools on the input as a file of each kind they read: any exit status
    is fine, an escaping exception is not."""
    from kproto.cli.main import main

    if not data:
        return
    kinds = [("00000000000000000000.log", ["dump-log", "--format", "jsonl", "--decode-internal"]),
             ("00000000000000000000.index", ["dump-log", "--format", "jsonl"]),
             ("00000000000000000000.snapshot", ["dump-log", "--format", "jsonl"]),
             ("leader-epoch-checkpoint", ["dump-log", "--format", "text"]),
             ("capture.pcap", ["decode-pcap", "--format", "jsonl", "--records", "--no-progress"]),
             ("capture.pcapng", ["decode-pcap", "--format", "text", "--no-progress"]),
             ("00000000000000000000.log", ["logdir"])]
    name, argv = kinds[data[0] % len(kinds)]
    with tempfile.TemporaryDirectory(prefix="kproto-cli-") as tmp:
        folder = os.path.join(tmp, "fuzz-0")
        os.mkdir(folder)
        target = os.path.join(folder, name)
        Path(target).write_bytes(data[1:])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv + [folder if argv == ["logdir"] else target])
        assert rc in (0, 1, 2), rc


def bomb_entry_points(data: bytes) -> None:
    """A public entry point that decompresses (one per input, chosen by its CRC: each cuts a
    bomb after decompressing its budget, a tenth of a second), with its default arguments, on
    a buffer of batches (bombs among the seeds): a DecodeError (the budget's limit among them)
    or data."""
    import zlib

    from kproto.capture.records_view import iter_records, records_json
    from kproto.client.consumer import parse_records
    from kproto.errors import DecodeError
    from kproto.records.batch import RecordBatch
    from kproto.records.dump import dump_lines
    from kproto.records.reader import decode_columns, iter_batches, iter_column_batches

    calls = [lambda: [b.record_list() for b in iter_batches(data)],
             lambda: RecordBatch(data).record_list(), lambda: decode_columns(data),
             lambda: list(iter_column_batches(data)), lambda: records_json(data),
             lambda: list(iter_records(data)), lambda: parse_records("t", 0, data, 0),
             lambda: list(dump_lines(data))]
    with contextlib.suppress(DecodeError):
        calls[zlib.crc32(data) % len(calls)]()


#: the sizes ``huge_files`` makes its victim (sparse: a hole, then the input): past every
#: kind's limit, Kafka's 2 GiB - 1 file limit, and two large holes; one mode more is garbage
_HUGE_SIZES = (3 << 30, (1 << 31) - 1, 1 << 30, 300 << 20)


def _kinds_logdir() -> tuple[str, list[str]]:
    """The scratch log dir of :func:`logdir_files` with one file of each kind it lacks (a
    transaction index, a clean-shutdown file, a KRaft partition with quorum-state and a
    snapshot), made once per worker."""
    path, files = _scratch_logdir()
    if "kinds" not in _LOGDIR:
        seg = next(f for f in files if f.endswith("00000000000000000000.log"))
        meta = os.path.join(path, "__cluster_metadata-0")
        os.makedirs(meta, exist_ok=True)
        extra = {seg[:-4] + ".txnindex": b"",
                 os.path.join(path, ".kafka_cleanshutdown"): b'{"version":0,"brokerEpoch":1}',
                 os.path.join(meta, "quorum-state"):
                     b'{"leaderId":1,"leaderEpoch":1,"votedId":-1,"appliedOffset":0,'
                     b'"currentVoters":[{"voterId":1}],"data_version":0}',
                 os.path.join(meta, "00000000000000000000-0000000000.checkpoint"): b"",
                 os.path.join(meta, "partition.metadata"):
                     b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"}
        for f, body in extra.items():
            Path(f).write_bytes(body)
            _LOGDIR["pristine"][f] = body  # type: ignore[index]
        _LOGDIR["kinds"] = sorted(_LOGDIR["pristine"])  # type: ignore[arg-type]
    return path, _LOGDIR["kinds"]  # type: ignore[return-value]


def huge_files(data: bytes) -> None:
    """One file of a log dir, of any kind, made huge and sparse or garbage: the summary, the
    Arrow read and the dump of that file report it (a named problem) within the memory cap."""
    import kproto.storage as ks
    from kproto.errors import DecodeError
    from kproto.problems import Problems
    from kproto.storage.dump import dump_file
    from kproto.storage.summary import summarize

    if len(data) < 2:
        return
    path, files = _kinds_logdir()
    victim = files[data[0] % len(files)]
    mode = data[1] % (len(_HUGE_SIZES) + 1)
    try:
        with open(victim, "r+b") as f:
            if mode < len(_HUGE_SIZES):  # a hole, then what the input holds at the end
                f.truncate(_HUGE_SIZES[mode])
                f.seek(0, os.SEEK_END)
                f.write(data[2:4096])
            else:
                f.truncate(0)
                f.write(data[2:])
        doc = summarize(path)
        assert isinstance(doc.get("problems", []), list)
        damage = Problems()
        ks.read_arrow(path, problems=damage)
        with contextlib.suppress(DecodeError, OSError):
            if not victim.endswith((".log", ".checkpoint")):  # files of batches: dump-log maps
                dump_file(victim)
    finally:
        with open(victim, "wb") as f:
            f.write(_LOGDIR["pristine"][victim])  # type: ignore[index]


_ATTR: dict[str, object] = {}


def _attribute_segment() -> tuple[str, str, bytes, list[tuple[int, int]], int]:
    """A scratch partition of one segment of v2 batches of every codec, transactional ones
    and a COMMIT marker among them, and its rows as read unmutated (made once per worker):
    (folder, segment, bytes, (position, size) of each batch, rows)."""
    if not _ATTR:
        import kproto.storage as ks
        from kproto.records import RecordBatchBuilder
        from kproto.records.control import encode_control_key, encode_end_txn_marker

        parts, offset = [], 0
        for i, codec in enumerate([0, 1, 2, 3, 4, 0, 4]):
            txn = i in (5, 6)
            b = RecordBatchBuilder(base_offset=offset, compression=codec,
                                   producer_id=7 if txn else -1, producer_epoch=0 if txn else -1,
                                   base_sequence=0 if txn else -1, transactional=txn)
            for j in range(3 + i):
                b.append(1_700_000_000_000 + offset + j, b"k%d" % j, b"v" * j, [("h", b"x")])
            parts.append(b.build())
            offset += 3 + i
        marker = RecordBatchBuilder(base_offset=offset, producer_id=7, producer_epoch=0,
                                    transactional=True, control=True)
        marker.append(1_700_000_000_100, encode_control_key(1), encode_end_txn_marker(0))
        parts.append(marker.build())
        root = tempfile.mkdtemp(prefix="kproto-campaign-")
        folder = os.path.join(root, "attrs-0")
        os.mkdir(folder)
        seg = os.path.join(folder, "00000000000000000000.log")
        data = b"".join(parts)
        Path(seg).write_bytes(data)
        places, pos = [], 0
        for p in parts:
            places.append((pos, len(p)))
            pos += len(p)
        _ATTR.update(folder=folder, seg=seg, data=data, places=places,
                     rows=ks.read_arrow(folder).num_rows)
    return (_ATTR["folder"], _ATTR["seg"], _ATTR["data"], _ATTR["places"],  # type: ignore
            _ATTR["rows"])


def attribute_oracle(data: bytes) -> None:
    """A batch's attributes (and perhaps other header bytes) mutated with its CRC repaired:
    the read may report damage, or leave out what Kafka leaves out (a batch turned into a
    control batch whose records are control records), but fewer rows than the unmutated
    segment with no damage reported is a finding."""
    import struct

    import kproto.storage as ks
    from crc32c import crc32c
    from kproto.errors import DecodeError
    from kproto.problems import Problems
    from kproto.records.batch import CRC_START, RecordBatch
    from kproto.records.control import check_control_keys

    if len(data) < 3:
        return
    folder, seg, pristine, places, rows = _attribute_segment()
    pos, size = places[data[0] % len(places)]
    buf = bytearray(pristine)
    struct.pack_into(">h", buf, pos + CRC_START, struct.unpack(">h", data[1:3])[0])
    for i in range(3, len(data) - 1, 2):  # further (offset, value) pairs within the header
        buf[pos + 21 + data[i] % 40] = data[i + 1]
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + CRC_START:pos + size])))
    try:
        Path(seg).write_bytes(buf)
        damage = Problems()
        got = ks.read_arrow(folder, problems=damage).num_rows
        if damage or got >= rows:
            return
        # what Kafka's consumer also leaves out: a control batch of control records
        skipped = 0
        with contextlib.suppress(DecodeError):
            batch = RecordBatch(bytes(buf), pos)
            if batch.is_control:
                check_control_keys([r.key for r in batch.record_list()])
                skipped = RecordBatch(pristine, pos).count
        if got < rows - skipped:
            raise AssertionError(f"{rows - got} rows fewer than the unmutated segment's "
                                 f"{rows}, and no damage reported")
    finally:
        Path(seg).write_bytes(pristine)


_JVM: dict[str, Any] = {}


def _fuzz_module(name: str):
    """fuzz/<name>.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _jvm_oracle():
    return _fuzz_module("jvm_oracle")


def jvm_segments(data: bytes) -> None:
    """The input as the segment of a one-partition log dir, read by kafka-segments-jvm's
    ``LogDirCheck`` (one JVM per worker, kept across inputs and started at the warm-up, before
    the memory cap) and judged against kproto's Python reader (fuzz/jvm_oracle.py): an
    exception or error in the JVM, no answer, or rows that differ is a finding."""
    if not _JVM:
        oracle = _jvm_oracle()
        root = tempfile.mkdtemp(prefix="kproto-campaign-jvm-")
        _JVM.update(oracle=oracle, root=root, log=oracle.seed_logdir(root))
    proc = _JVM.get("proc")
    if proc is None or proc.poll() is not None:
        from kproto.spark import jvm

        proc = subprocess.Popen(jvm.check_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        _JVM["proc"] = proc
    Path(_JVM["log"]).write_bytes(data)
    try:
        proc.stdin.write(_JVM["root"] + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
    except BaseException:  # a timeout: that JVM is stuck on this input
        proc.kill()
        _JVM.pop("proc")
        raise
    if not line:
        _JVM.pop("proc")
        raise AssertionError(f"LogDirCheck exited with status {proc.wait()}")
    _JVM["oracle"].judge(_JVM["root"], json.loads(line))


_LOCAL = {"records_bulk": records_bulk, "logdir_files": logdir_files, "cli_files": cli_files,
          "bomb_entry_points": bomb_entry_points, "huge_files": huge_files,
          "attribute_oracle": attribute_oracle, "jvm_segments": jvm_segments}


def load_target(name: str):
    """The ``TestOneInput`` of fuzz/<name>.py, or one of this module's targets."""
    if name in _LOCAL:
        return _LOCAL[name]
    return _fuzz_module(name).TestOneInput


# -- inputs -------------------------------------------------------------------------------------

def seeds(family: str) -> list[bytes]:
    """Starting inputs of a family: the project's own data and hand-made hostile ones."""
    from fuzz_support import zstd_bomb
    from kproto.records import LegacyMessageBuilder, RecordBatchBuilder

    out = [b"", b"\x00" * 64, bytes(range(256))]
    logdir = REPO / "examples" / "logdir"
    files = sorted(p for p in logdir.rglob("*") if p.is_file())
    if family in ("records", "logdirs", "cli"):
        for codec in range(5):
            b = RecordBatchBuilder(compression=codec)
            for i in range(5):
                b.append(1_700_000_000_000 + i, b"k%d" % i, b"v" * i, [("h", b"x")])
            out.append(b.build())
            if codec < 4:
                lb = LegacyMessageBuilder(1, compression=codec)
                lb.append(1000, b"k", b"v")
                lb.append(1001, None, b"w")
                out.append(lb.build())
        out.append(zstd_bomb(64))
        out += [p.read_bytes()[:65536] for p in files]
    if family in ("captures", "cli"):
        sys.path.insert(0, str(REPO / "tests" / "capture"))
        import pcapgen

        conv = pcapgen.Conversation()
        conv.send(True, pcapgen.request_frame(18, 3, 1))
        conv.send(False, pcapgen.response_frame(18, 3, 1))
        conv.close()
        out += [b"\x00" + pcapgen.write_pcap(conv.frames()),
                b"\x00" + pcapgen.write_pcapng(conv.frames())]
    if family in ("messages", "frames"):
        out.append((REPO / "examples" / "fetch_request_v13.bin").read_bytes())
    if family == "broker":
        # each template request whole (byte 0 picks it; bit 7 clear: written at position 0)
        from fuzz_broker_request import TEMPLATES
        out += [bytes([i, 0]) + t for i, t in enumerate(TEMPLATES)]
    if family == "bombs":
        # bombs cut by the budget (73, 255 MiB), several in one buffer, and a bomb behind a
        # valid batch
        valid = RecordBatchBuilder(compression=4)
        valid.append(1_700_000_000_000, b"k", b"v")
        out += [zstd_bomb(73), zstd_bomb(255), zstd_bomb(73) + zstd_bomb(73, 10**8),
                valid.build() + zstd_bomb(73, 100)]
    if family == "files":
        out += [bytes([i, m]) + b"\x00" * 16 for i in range(32) for m in range(5)]
    if family == "attributes":
        # (batch, attributes) of note: unknown codecs, the control and transactional bits
        out += [bytes([i]) + struct_attr for i in range(8)
                for struct_attr in (b"\x00\x05", b"\x00\x27", b"\x00\x20", b"\x00\x10",
                                    b"\x00\x08", b"\x00\x40", b"\xff\xff")]
    if family == "logdirs":
        out += [bytes([i]) + files[i % len(files)].read_bytes()[:4096] for i in range(len(files))]
    if family == "jvm":
        with tempfile.TemporaryDirectory() as tmp:
            out.append(Path(_jvm_oracle().seed_logdir(tmp)).read_bytes())
        out += [p.read_bytes()[:65536] for p in files if p.suffix == ".log"]
    return out


_EDGES = [b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
          b"\x00\x00\x00\x01", b"\xff\xff", b"\x7f\xff", b"\x80"]


def mutate(rnd: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One to four random edits of ``data``."""
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(7)
        pos = rnd.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = rnd.randrange(len(buf))
            buf[i] ^= 1 << rnd.randrange(8)
        elif op == 1 and buf:
            i = rnd.randrange(len(buf))
            buf[i] = rnd.randrange(256)
        elif op == 2:
            buf[pos:pos] = os.urandom(rnd.randint(1, 16))
        elif op == 3 and buf:
            del buf[pos:pos + rnd.randint(1, 64)]
        elif op == 4:
            other = rnd.choice(pool)
            if other:
                a = rnd.randrange(len(other))
                buf[pos:pos] = other[a:a + rnd.randint(1, 256)]
        elif op == 5:
            edge = rnd.choice(_EDGES)
            buf[pos:pos + len(edge)] = edge
        else:
            del buf[pos:]
    return bytes(buf)


# -- workers ------------------------------------------------------------------------------------

#: how many times an input's CPU-time budget it may take in wall time before it counts as a hang
WALL_BACKSTOP = 15
#: how long past its family's time a worker may take to report, then to exit, before it is
#: taken for stuck (killed, its input saved)
REPORT_GRACE, EXIT_GRACE = 300.0, 30.0


class _Timeout(BaseException):
    """Raised in the worker when an input takes longer than its time (not an Exception, so
    that no target swallows it)."""


def _alarm(signum, frame):
    raise _Timeout()


@contextlib.contextmanager
def _budget(cpu_seconds: float):
    """Raise :class:`_Timeout` in the block after ``cpu_seconds`` of CPU time or
    :data:`WALL_BACKSTOP` times that in wall time."""
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, cpu_seconds * WALL_BACKSTOP)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)


def _limit_memory(extra: int) -> None:
    # RLIMIT_DATA, not RLIMIT_AS: a segment of Kafka's largest size mapped to be read batch by
    # batch takes 2 GiB of address space and no memory; an allocation of that much is a finding
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[5]) * resource.getpagesize()  # data + stack
    resource.setrlimit(resource.RLIMIT_DATA, (used + extra, used + extra))


def _save(out: Path, family: str, target: str, data: bytes, kind: str, detail: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha1(data).hexdigest()[:16]
    path = out / f"{family}-{target}-{sha}.bin"
    path.write_bytes(data)
    path.with_suffix(".txt").write_text(
        f"{kind} in {target} ({family})\n{detail}\n"
        f"reproduce: python fuzz/campaign.py --reproduce {path} --target {target}\n")
    return str(path)


def _running_path(out: str, family: str, seed: int) -> Path:
    """Where the worker of ``family`` with ``seed`` keeps the input it is running (read by the
    campaign when the worker stops answering)."""
    return Path(out) / f".running-{family}-{seed}"


class _Running:
    """The input a worker is running, written before each call: a call stuck in C code (where
    neither budget signal reaches Python) leaves its input here for the campaign to save."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def hold(self, target: str, data: bytes) -> None:
        name = target.encode()
        os.pwrite(self.fd, struct.pack(">HI", len(name), len(data)) + name + data, 0)


def _stuck_input(path: Path) -> tuple[str, bytes] | None:
    """(target, input) a worker left in ``path`` (None: none)."""
    try:
        raw = path.read_bytes()
        n, size = struct.unpack_from(">HI", raw)
        return raw[6:6 + n].decode(), raw[6 + n:6 + n + size]
    except (OSError, struct.error, UnicodeDecodeError):
        return None


def _compile_every_codec() -> None:
    """Compile every request and response codec at every version (an orphan response in a
    capture may try them all)."""
    from kproto.codecs import api_keys, request, response

    for key in api_keys():
        for codec in (request(key), response(key)):
            for version in codec.valid_versions:
                codec._get(version)


def worker(family: str, seconds: float, seed: int, timeout: float, memory: int, out: str,
           queue) -> None:
    """Run the family's targets on mutated inputs for ``seconds``; report counts and findings."""
    rnd = random.Random(seed)
    targets = {name: load_target(name) for name in FAMILIES[family]}
    pool = seeds(family)
    # the budget is CPU time (a loaded or shared machine must not turn a slow turn of the
    # scheduler into a finding), with a wall-clock backstop for a wait that burns none
    signal.signal(signal.SIGPROF, _alarm)
    signal.signal(signal.SIGALRM, _alarm)
    running = _Running(_running_path(out, family, seed))
    for name, fn in targets.items():  # warm up: first calls import and compile codecs
        running.hold(name, pool[-1])
        with contextlib.suppress(BaseException), _budget(timeout * WALL_BACKSTOP):
            fn(pool[-1])
    if family in ("messages", "frames", "captures", "cli"):
        _compile_every_codec()  # a decoder compiled on first use must not count against an input
    _limit_memory(memory)
    done, findings = 0, []
    end = time.monotonic() + seconds
    names = list(targets)
    while time.monotonic() < end:
        name = names[done % len(names)]
        data = mutate(rnd, rnd.choice(pool), pool) if rnd.random() < 0.95 else rnd.choice(pool)
        running.hold(name, data)
        try:
            with _budget(timeout):
                targets[name](data)
        except _Timeout:
            findings.append(_save(Path(out), family, name, data, "timeout",
                                  f"more than {timeout} s of CPU time (or {timeout * WALL_BACKSTOP} s "
                                  "of wall time)"))
        except MemoryError:
            findings.append(_save(Path(out), family, name, data, "memory",
                                  f"MemoryError under a {memory}-byte cap"))
        except Exception:  # noqa: BLE001 - any escaping exception breaks the promise
            findings.append(_save(Path(out), family, name, data, "exception",
                                  traceback.format_exc(limit=8)))
        done += 1
        if len(findings) >= 20:
            break
    queue.put((family, done, findings))


def run(families: list[str], seconds: float, workers: int, timeout: float, memory: int,
        out: str, seed: int) -> dict:
    """The campaign: each family for ``seconds`` on ``workers`` processes."""
    ctx = mp.get_context("fork")
    summary: dict = {"seconds_per_family": seconds, "workers": workers, "timeout_s": timeout,
                     "memory_cap": memory, "seed": seed, "families": {}}
    for family in families:
        queue = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(family, seconds, seed + i, timeout, memory,
                                                  out, queue)) for i in range(workers)]
        for p in procs:
            p.start()
        inputs, findings = 0, []
        for p in procs:
            try:
                _, n, found = queue.get(timeout=seconds + REPORT_GRACE)
            except Exception:  # noqa: BLE001 - a worker that died or hangs without reporting
                found, n = [], 0
            inputs += n
            findings += found
        for i, p in enumerate(procs):
            p.join(timeout=EXIT_GRACE)
            if p.exitcode is None:  # stuck where the budget's signals cannot reach Python
                p.kill()
                p.join()
                stuck = _stuck_input(_running_path(out, family, seed + i))
                findings.append(_save(Path(out), family, stuck[0], stuck[1], "hang",
                                      "the worker stopped answering (killed after "
                                      f"{seconds + REPORT_GRACE + EXIT_GRACE:.0f} s): stuck "
                                      "where the budget's signals do not reach Python")
                                if stuck else f"a {family} worker hung before its first input")
            elif p.exitcode != 0:
                stuck = _stuck_input(_running_path(out, family, seed + i))
                findings.append(_save(Path(out), family, stuck[0], stuck[1], "crash",
                                      f"the worker died with status {p.exitcode}")
                                if stuck else f"a {family} worker exited with status {p.exitcode}")
            with contextlib.suppress(OSError):
                _running_path(out, family, seed + i).unlink()
        summary["families"][family] = {"inputs": inputs, "findings": findings}
    summary["inputs"] = sum(f["inputs"] for f in summary["families"].values())
    summary["findings"] = sum(len(f["findings"]) for f in summary["families"].values())
    return summary


def reproduce(path: str, target: str | None) -> int:
    """Run one saved input through its target, with the traceback if it fails."""
    name = target or Path(path).stem.split("-")[1]
    fn = load_target(name)
    fn(Path(path).read_bytes())
    print(f"{path}: {name} kept the promise")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60, help="per family (default 60)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=2.0, help="per input, seconds (default 2)")
    p.add_argument("--memory", type=int, default=2 << 30,
                   help="memory (data limit) per worker above the imported library (default 2 GiB)")
    p.add_argument("--families", default=",".join(f for f in FAMILIES if f not in OPT_IN),
                   help=f"comma-separated, of {', '.join(FAMILIES)} (default: all but "
                        f"{', '.join(sorted(OPT_IN))})")
    p.add_argument("--out", default="fuzz-findings", help="where findings are saved")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--json", help="also write the summary to this file")
    p.add_argument("--reproduce", metavar="FILE", help="run one saved finding")
    p.add_argument("--target", help="with --reproduce: the target (default: from the name)")
    args = p.parse_args(argv)
    if args.reproduce:
        return reproduce(args.reproduce, args.target)
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        p.error(f"unknown families: {', '.join(sorted(unknown))}")
    summary = run(families, args.seconds, args.workers, args.timeout, args.memory, args.out,
                  args.seed)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
