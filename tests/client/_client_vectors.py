"""Shared helpers for the client tests: locating and reading the golden vectors."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors")) / "client"


def load_jsonl(name: str) -> list[dict]:
    """Every line of ``$KPROTO_VECTORS/client/<name>``; fails (never skips) when it is missing."""
    path = VECTORS / name
    if not path.exists():
        pytest.fail(f"golden vector file missing: {path}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
