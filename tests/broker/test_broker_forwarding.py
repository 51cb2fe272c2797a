"""A cluster broker's channel to the active controller (``send_to_controller``) on a fake
clock and transport: what is sent again, and what is waited for."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional

from kproto.broker.cluster.broker import ClusterBrokerCore
from kproto.broker.timer import FakeClock, SystemTimer
from kproto.error_codes import ErrorCode


class FakeBroker(SimpleNamespace):
    """The parts of a ClusterBrokerCore ``send_to_controller`` uses; requests are kept."""

    def __init__(self, controller: int) -> None:
        clock = FakeClock(1_000)
        super().__init__(detached=False, clock=clock, timer=SystemTimer(clock=clock),
                         controller_id=controller, sent=[], transport=self)
        self._controller_target = lambda: self.controller_id

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Optional[Any]], None], timeout_ms: int) -> None:
        self.sent.append((dst, on_response, timeout_ms))

    def advance(self, ms: int) -> None:
        for _ in range(ms // 50):
            self.clock.advance(50)
            self.timer.advance_clock()


def send(b: FakeBroker, timeout_ms: int = 30_000) -> list[Any]:
    out: list[Any] = []
    ClusterBrokerCore.send_to_controller(b, 19, 7, object(), out.append, timeout_ms)  # type: ignore[arg-type]
    return out


def test_slow_controller_is_waited_for_not_asked_twice() -> None:
    """A CreateTopics the controller answers after 6 s is sent once: sent again, the second
    would find the topic the first made (TOPIC_ALREADY_EXISTS)."""
    b = FakeBroker(controller=3001)
    out = send(b)
    b.advance(10_000)
    assert len(b.sent) == 1 and b.sent[0][0] == 3001 and b.sent[0][2] == 30_000
    answer = SimpleNamespace(error_code=0)
    b.sent[0][1](answer)
    assert out == [answer]


def test_sent_again_on_not_controller_lost_connection_and_new_controller() -> None:
    b = FakeBroker(controller=3001)
    out = send(b)
    b.sent[0][1](SimpleNamespace(error_code=ErrorCode.NOT_CONTROLLER))
    b.advance(200)
    assert len(b.sent) == 2
    b.sent[1][1](None)  # the connection lost: the controller may not have it
    b.advance(200)
    assert len(b.sent) == 3
    b.controller_id = 3002  # another controller became active: the old answer no longer counts
    b.advance(200)
    assert [s[0] for s in b.sent] == [3001, 3001, 3001, 3002]
    b.sent[2][1](SimpleNamespace(error_code=0))  # late answer of the abandoned attempt
    assert out == []
    answer = SimpleNamespace(error_code=0)
    b.sent[3][1](answer)
    assert out == [answer]


def test_time_runs_out() -> None:
    b = FakeBroker(controller=3001)
    out = send(b, timeout_ms=1000)
    b.sent[0][1](None)
    b.advance(200)
    assert len(b.sent) == 2 and b.sent[1][2] <= 900  # the second waits out what is left
    b.advance(900)
    b.sent[1][1](None)
    b.advance(200)
    assert out == [None] and len(b.sent) == 2
