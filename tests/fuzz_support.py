"""The atheris targets of ``fuzz/`` for the tests: which there are, and loading one so its
``TestOneInput`` can be called with plain bytes (no fuzzing run needed)."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
from pathlib import Path
from types import ModuleType

try:
    import atheris
except ImportError:  # only the targets that fall back without it will load
    atheris = None

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
#: the same glob as .ci/fuzz_smoke.py, so the suite drives exactly what CI fuzzes
NAMES = sorted(p.stem for p in FUZZ.glob("fuzz_*.py"))


@contextlib.contextmanager
def _uninstrumented():
    """Make ``atheris.instrument_imports()`` a no-op: its coverage hooks only serve libFuzzer,
    and instrumenting a first import of numpy and kproto costs seconds and slows every later
    test that uses them."""
    if atheris is None:
        yield
        return
    original = atheris.instrument_imports
    atheris.instrument_imports = lambda *args, **kwargs: contextlib.nullcontext()
    try:
        yield
    finally:
        atheris.instrument_imports = original


@functools.cache
def load(name: str) -> ModuleType:
    """``fuzz/NAME.py`` as a module, executed once per session (some build seed corpora)."""
    path = FUZZ / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no fuzz target {path}")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    with _uninstrumented():
        spec.loader.exec_module(mod)
    return mod


def zstd_bomb(mib: int, base_offset: int = 0) -> bytes:
    """A valid v2 batch (CRC right) whose few KB of zstd expand to ``mib`` MiB of 7-byte
    records: the decompression bomb of the hostile-input tests and of fuzz/campaign.py."""
    import struct

    import zstandard
    from crc32c import crc32c

    from kproto.records.batch import CRC_START, HEADER, HEADER_SIZE
    from kproto.records.record import LOG_OVERHEAD

    n = (mib << 20) // 7
    body = zstandard.ZstdCompressor(level=19).compress(b"\x0c\x00\x00\x00\x01\x01\x00" * n)
    head = bytearray(HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), 0, 2, 0, 4,
                                 n - 1, 0, 0, -1, -1, -1, n))
    struct.pack_into(">I", head, 17, crc32c(body, crc32c(bytes(head[CRC_START:]))))
    return bytes(head) + body
