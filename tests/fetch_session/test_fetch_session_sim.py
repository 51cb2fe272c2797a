"""The bandwidth simulation and ``kproto fetch-session-sim``."""
from __future__ import annotations

import argparse
import json

import pytest

from kproto.cli import fetch_session_sim
from kproto.fetch_session.sim import bandwidth_table, simulate


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kproto")
    fetch_session_sim.register(parser.add_subparsers())
    args = parser.parse_args(["fetch-session-sim", *argv])
    return args.func(args)


def test_registered_in_main():
    from kproto.cli import main

    assert "kproto.cli.fetch_session_sim" in main.SUBCOMMAND_MODULES


@pytest.mark.parametrize("version", [7, 13, 17])
def test_rounds_after_the_first_are_incremental(version):
    stats = simulate(version, topics=20, partitions_per_topic=5, changed=7, rounds=3)
    assert stats[0].full and stats[0].request_partitions == 100 == stats[0].response_partitions
    for s in stats[1:]:
        assert not s.full
        assert s.response_partitions == 7  # exactly the partitions that got a record
        assert s.request_partitions <= 7   # only partitions whose offset moved are resent
    # the second round resends nothing: offsets only move after the records are fetched
    assert stats[1].request_partitions == 0
    assert stats[2].request_partitions == 7


def test_sessionless_fetcher_sends_everything_every_time():
    stats = simulate(13, topics=20, partitions_per_topic=5, changed=7, rounds=2, use_sessions=False)
    assert all(s.full and s.request_partitions == 100 == s.response_partitions for s in stats)


def test_bandwidth_saving_grows_with_unchanged_partitions():
    rows = bandwidth_table([12, 13], [0, 10, 50], topics=20, partitions_per_topic=5)
    assert [(r.version, r.changed) for r in rows] == [(v, k) for v in (12, 13) for k in (0, 10, 50)]
    for v in (12, 13):
        rs = [r for r in rows if r.version == v]
        assert len({r.sessionless_request for r in rs}) == 1  # always every partition
        assert all(r.full_request == r.sessionless_request for r in rs)
        incr = [r.incremental_request for r in rs]
        assert incr[0] < incr[1] < incr[2] < rs[0].sessionless_request
        assert rs[0].incremental_response < rs[0].sessionless_response


def test_cli_json(capsys):
    assert _cli(["--versions", "7,13", "--topics", "5", "--partitions", "4", "--changed", "0,3", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["version"], r["changed"]) for r in rows] == [(7, 0), (7, 3), (13, 0), (13, 3)]
    assert all(r["incremental_request"] < r["sessionless_request"] for r in rows)


def test_cli_table_and_errors(capsys):
    assert _cli(["--versions", "12", "--topics", "3", "--partitions", "2", "--changed", "1", "--follower"]) == 0
    out = capsys.readouterr().out
    assert "6 partitions (3 topics x 2), follower" in out and out.count("\n") == 3
    assert _cli(["--versions", "6"]) == 2
    with pytest.raises(SystemExit):
        _cli(["--versions", "x"])
