"""Shared fixtures: where the record-batch vectors live (``$KPROTO_VECTORS/records``)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors")) / "records"
FIXTURES = Path(os.environ.get("KPROTO_FIXTURES", REPO.parent / "shared" / "fixtures"))


def vector_names() -> list[str]:
    """Every vector in the directory: a ``.bin`` with its ``.jsonl`` and ``.spec.json``."""
    names = sorted(p.name[:-4] for p in VECTORS.glob("*.bin"))
    assert names, f"no record vectors found in {VECTORS}"
    return names


def segment_files() -> list[Path]:
    """Every ``.log`` segment of the log-dir fixtures (each has an expected ``.log.jsonl``)."""
    files = sorted((FIXTURES / "logdirs").glob("*/*/*.log"))
    assert files, f"no log segments found in {FIXTURES / 'logdirs'}"
    return files
