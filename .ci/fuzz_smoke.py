"""Run every atheris target in fuzz/ for a short bounded pass (a few seconds each), two at a time."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

RUNS = "3000"
WORKERS = 2
artifacts = tempfile.mkdtemp(prefix="kproto-fuzz-")


def run(target: Path) -> tuple[Path, subprocess.CompletedProcess]:
    return target, subprocess.run(
        [sys.executable, str(target), f"-runs={RUNS}", "-max_total_time=60",
         f"-artifact_prefix={artifacts}/{target.stem}-"], capture_output=True, text=True, timeout=300)


failed = []
targets = sorted((Path(__file__).resolve().parents[1] / "fuzz").glob("fuzz_*.py"))
with ThreadPoolExecutor(WORKERS) as pool:
    for target, proc in pool.map(run, targets):
        status = "ok" if proc.returncode == 0 else f"FAILED ({proc.returncode})"
        print(f"fuzz {target.name}: {status}", flush=True)
        if proc.returncode != 0:
            failed.append(target.name)
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            print(f"  crashing inputs are in {artifacts}")
print(f"fuzz smoke: {len(failed) == 0 and 'all passed' or 'failures: ' + ', '.join(failed)}")
sys.exit(1 if failed else 0)
