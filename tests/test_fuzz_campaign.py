"""fuzz/campaign.py finds what breaks the promise: an escaping exception, a timeout and a
MemoryError each become a saved finding with a reproducer, and clean targets give none."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

CAMPAIGN = Path(__file__).resolve().parents[1] / "fuzz" / "campaign.py"


@pytest.fixture()
def campaign(monkeypatch):
    spec = importlib.util.spec_from_file_location("campaign", CAMPAIGN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _raises(data: bytes) -> None:
    if len(data) > 3:
        raise IndexError("a raw IndexError escaped")


def _sleeps(data: bytes) -> None:
    time.sleep(5)


def _spins(data: bytes) -> None:
    while True:  # a hang burns CPU time: caught by the CPU-time budget, well before the backstop
        pass


def _allocates(data: bytes) -> None:
    bytearray(3 << 30)


@pytest.mark.parametrize("target,kind", [(_raises, "exception"), (_sleeps, "timeout"),
                                         (_spins, "timeout"), (_allocates, "memory")])
def test_findings_are_saved_with_a_reproducer(campaign, tmp_path, target, kind):
    campaign._LOCAL["bad"] = target
    campaign.FAMILIES["bad"] = ["bad"]
    summary = campaign.run(["bad"], seconds=1.0, workers=1, timeout=0.3, memory=1 << 30,
                           out=str(tmp_path), seed=1)
    found = summary["families"]["bad"]["findings"]
    assert summary["findings"] == len(found) > 0 and summary["inputs"] >= len(found)
    first = Path(found[0])
    assert first.exists() and first.suffix == ".bin"
    note = first.with_suffix(".txt").read_text()
    assert note.startswith(f"{kind} in bad (bad)") and "reproduce: python fuzz/campaign.py" in note


_CALLS = [0]


def _stuck(data: bytes) -> None:
    import signal

    _CALLS[0] += 1
    if _CALLS[0] > 1:  # past the warm-up: stuck where neither budget signal reaches Python
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF, signal.SIGALRM})
        time.sleep(60)


def _crashes(data: bytes) -> None:
    import os

    _CALLS[0] += 1
    if _CALLS[0] > 1:
        os._exit(3)


@pytest.mark.parametrize("target,kind", [(_stuck, "hang"), (_crashes, "crash")])
def test_a_stuck_or_dead_worker_leaves_its_input_saved(campaign, tmp_path, monkeypatch, target, kind):
    monkeypatch.setattr(campaign, "REPORT_GRACE", 1.0)
    monkeypatch.setattr(campaign, "EXIT_GRACE", 1.0)
    campaign._LOCAL["bad"] = target
    campaign.FAMILIES["bad"] = ["bad"]
    summary = campaign.run(["bad"], seconds=1.0, workers=1, timeout=0.3, memory=1 << 30,
                           out=str(tmp_path), seed=2)
    found = summary["families"]["bad"]["findings"]
    assert len(found) == 1, found
    saved = Path(found[0])  # the input it was running, with the note to reproduce it
    assert saved.suffix == ".bin" and saved.exists()
    note = saved.with_suffix(".txt").read_text()
    assert note.startswith(f"{kind} in bad (bad)") and "reproduce: python fuzz/campaign.py" in note
    assert not list(tmp_path.glob(".running-*"))


def test_a_short_campaign_of_the_records_family_keeps_the_promise(campaign, tmp_path):
    summary = campaign.run(["records"], seconds=3.0, workers=1, timeout=2.0, memory=2 << 30,
                           out=str(tmp_path), seed=3)
    assert summary["families"]["records"]["inputs"] > 100
    assert summary["findings"] == 0, summary


def test_reproduce_runs_one_input(campaign, tmp_path, capsys):
    path = tmp_path / "records-records_bulk-0.bin"
    path.write_bytes(b"\x00" * 70)
    assert campaign.reproduce(str(path), None) == 0
    assert "kept the promise" in capsys.readouterr().out


def test_the_attribute_oracle_finds_rows_lost_without_damage(campaign, monkeypatch):
    import kproto.storage.reader as storage_reader

    flip = bytes([0, 0x00, 0x20])  # the first batch's control bit set, its CRC repaired
    campaign.attribute_oracle(flip)  # reported as damage: the promise kept
    # a reader that skips control batches without looking at their records loses rows
    monkeypatch.setattr(storage_reader, "check_control_keys", lambda keys: None)
    with pytest.raises(AssertionError, match="no damage reported"):
        campaign.attribute_oracle(flip)


def test_a_short_campaign_of_the_file_and_attribute_families_keeps_the_promise(campaign,
                                                                             tmp_path):
    summary = campaign.run(["files", "attributes"], seconds=2.0, workers=1, timeout=2.0,
                           memory=2 << 30, out=str(tmp_path), seed=5)
    assert all(f["inputs"] > 5 for f in summary["families"].values()), summary
    assert summary["findings"] == 0, summary
