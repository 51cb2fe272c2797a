"""Ports for servers started in other processes are picked outside the ephemeral range, where an
outgoing connection cannot take one before the server binds it."""
from __future__ import annotations

import socket

from kproto.testing import ports


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    picked = ports.free_ports(20)
    assert len(set(picked)) == 20
    assert all(not low <= p <= high for p in picked), (picked, low, high)
    for p in picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_never_picked(monkeypatch):
    # two free ports outside the ephemeral range (an ephemeral port's neighbour may be any
    # connection's own port on a busy machine); a pool of the two, one bound here: every pick
    # is the other one
    taken, other = ports.free_ports(2)
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        held.listen()
        monkeypatch.setattr(ports, "_candidates", lambda: [taken, other])
        assert [ports.free_ports(1)[0] for _ in range(10)] == [other] * 10


def test_without_room_outside_the_range_the_os_picks(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))
    assert ports._candidates() is None
    picked = ports.free_ports(3)
    assert len(set(picked)) == 3


def test_a_full_pool_falls_back_to_the_os(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(ports, "_candidates", lambda: range(taken, taken + 1))
        (p,) = ports.free_ports(1)
        assert p != taken
