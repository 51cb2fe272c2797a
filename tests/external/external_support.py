"""Where the third-party material lives: $KPROTO_EXTERNAL (default ../shared/external)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = Path(os.environ.get("KPROTO_EXTERNAL", REPO.parent / "shared" / "external"))
LOGDIRS = EXTERNAL / "logdirs"
CAPTURES = EXTERNAL / "captures"


def logdir(name: str) -> str:
    """The broker log directory of one ``logdirs/<name>`` folder."""
    return str(LOGDIRS / name / "logdir")
