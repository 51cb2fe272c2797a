"""Run the atheris targets in fuzz/ that the CI campaign after this (fuzz/campaign.py, 10 s per
family) does not run, for a short bounded pass (a few seconds each), two at a time: each
target's start-up costs about as much as its pass, and the campaign fuzzes the others longer."""
from __future__ import annotations

import importlib.util
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


def campaign_targets() -> set[str]:
    """The targets of the families ``fuzz/campaign.py`` runs by default."""
    path = Path(__file__).resolve().parents[1] / "fuzz" / "campaign.py"
    spec = importlib.util.spec_from_file_location("campaign", path)
    campaign = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(campaign)
    return {t for family, names in campaign.FAMILIES.items() if family not in campaign.OPT_IN
            for t in names}


failed = []
covered = campaign_targets()
targets = sorted(t for t in (Path(__file__).resolve().parents[1] / "fuzz").glob("fuzz_*.py")
                 if t.stem not in covered)
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
