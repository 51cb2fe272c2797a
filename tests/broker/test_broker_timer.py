"""The timing wheel and the purgatory, driven by a fake clock."""
from __future__ import annotations

import random

import pytest

from kproto.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kproto.broker.timer import CallbackTask, FakeClock, SystemTimer, TimerTask


def make_timer(**kw):
    clock = FakeClock(kw.pop("start", 0))
    return clock, SystemTimer(clock=clock, **kw)


def schedule(timer, clock, delays, ran):
    tasks = {}
    for name, delay in delays.items():
        task = CallbackTask(delay, lambda name=name: ran.append((name, clock.now_ms())))
        tasks[name] = task
        timer.add(task)
    return tasks


def test_each_task_runs_at_its_own_millisecond_across_four_wheel_levels():
    clock, timer = make_timer()  # 1 ms x 20: levels span 20, 400, 8000, 160000 ms
    delays = {f"t{d}": d for d in (1, 5, 19, 20, 21, 399, 400, 401, 419, 420, 7999, 8000, 8001, 12345)}
    ran: list = []
    schedule(timer, clock, dict(random.Random(1).sample(sorted(delays.items()), len(delays))), ran)
    assert timer.wheel.levels == 4
    assert timer.size == len(delays)
    while clock.now_ms() < 12400:
        clock.advance(1)
        timer.advance_clock()
    assert sorted(ran) == sorted((name, d) for name, d in delays.items())
    assert timer.size == 0


def test_a_jump_of_the_clock_runs_the_due_tasks_in_expiration_order_and_leaves_the_rest():
    clock, timer = make_timer(start=1_000_003)  # not a multiple of any tick
    rng = random.Random(7)
    delays = {f"t{i}": rng.randrange(1, 50_000) for i in range(500)}
    ran: list = []
    schedule(timer, clock, delays, ran)
    clock.advance(25_000)
    timer.advance_clock()
    got = [delays[name] for name, _ in ran]
    assert got == sorted(got)
    assert set(got) == {d for d in delays.values() if d <= 25_000}
    assert timer.size == sum(1 for d in delays.values() if d > 25_000)
    nxt = timer.next_expiration_ms()
    assert nxt is not None and nxt <= 1_000_003 + min(d for d in delays.values() if d > 25_000)
    clock.advance(25_000)
    timer.advance_clock()
    assert len(ran) == len(delays) and timer.size == 0


def test_cancelled_tasks_leave_at_once_and_never_run():
    clock, timer = make_timer()
    ran: list = []
    tasks = schedule(timer, clock, {f"t{i}": 10 + i * 37 for i in range(200)}, ran)
    for name in list(tasks)[::2]:
        tasks[name].cancel()
        tasks[name].cancel()  # twice is harmless
    assert timer.size == 100
    clock.advance(10_000)
    timer.advance_clock()
    assert sorted(n for n, _ in ran) == sorted(list(tasks)[1::2])


def test_a_task_added_again_moves_and_a_due_task_runs_without_the_clock_moving():
    clock, timer = make_timer()
    ran: list = []
    task = CallbackTask(100, lambda: ran.append(clock.now_ms()))
    timer.add(task)
    clock.advance(50)
    task.delay_ms = 200
    timer.add(task)  # now due at 250, no longer at 100
    assert timer.size == 1
    for _ in range(300):
        clock.advance(1)
        timer.advance_clock()
    assert ran == [250]
    timer.add(CallbackTask(0, lambda: ran.append(-1)))
    timer.advance_clock()
    assert ran == [250, -1] and timer.size == 0
    timer.add(CallbackTask(-5, lambda: ran.append(-2)))  # already past the wheel's time: at once
    assert ran == [250, -1, -2]


def test_a_task_may_schedule_another_while_the_clock_advances():
    clock, timer = make_timer()
    ran: list = []

    def first() -> None:
        ran.append(("first", clock.now_ms()))
        timer.add(CallbackTask(30, lambda: ran.append(("second", clock.now_ms()))))

    timer.add(CallbackTask(10, first))
    for _ in range(100):
        clock.advance(1)
        timer.advance_clock()
    assert ran == [("first", 10), ("second", 40)]


class Op(DelayedOperation):
    def __init__(self, delay_ms: int, ready: list) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.force_complete() if self.ready[0] else False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


def make_purgatory(**kw):
    clock = FakeClock()
    return clock, DelayedOperationPurgatory("test", SystemTimer(clock=clock), **kw)


def test_an_operation_that_can_complete_at_once_is_neither_watched_nor_timed():
    clock, purgatory = make_purgatory()
    op = Op(500, [True])
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert op.completions == 1 and purgatory.watched() == 0 and purgatory.num_delayed == 0


def test_an_event_on_a_watch_key_completes_the_operation_before_its_timeout():
    clock, purgatory = make_purgatory()
    ready = [False]
    op = Op(500, ready)
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert purgatory.watched() == 2 and purgatory.num_delayed == 1
    assert purgatory.check_and_complete("a") == 0  # nothing changed yet
    ready[0] = True
    assert purgatory.check_and_complete("zzz") == 0
    assert purgatory.check_and_complete("b") == 1
    assert op.completions == 1 and purgatory.num_delayed == 0
    clock.advance(1000)
    purgatory.advance_clock()
    assert (op.completions, op.expirations) == (1, 0)
    assert purgatory.check_and_complete("a") == 0 and op.completions == 1


def test_a_completion_that_checks_its_key_again_completes_each_operation_once():
    # an operation's answer may append to the partition it waited on (a share coordinator's
    # write answered from a replication wait): the check of that key runs inside the first
    clock, purgatory = make_purgatory()
    ready = [False]
    first, second = Op(500, ready), Op(500, ready)
    first.on_complete = lambda: purgatory.check_and_complete("a")  # type: ignore[method-assign]
    purgatory.try_complete_else_watch(first, ["a"])
    purgatory.try_complete_else_watch(second, ["a"])
    ready[0] = True
    assert purgatory.check_and_complete("a") == 1  # (the second completed inside the first)
    assert second.completions == 1 and purgatory.num_delayed == 0 and purgatory.watched() == 0


def test_expiry_completes_once_and_a_later_event_does_not_complete_again():
    clock, purgatory = make_purgatory()
    ready = [False]
    op = Op(500, ready)
    purgatory.try_complete_else_watch(op, ["a"])
    clock.advance(499)
    purgatory.advance_clock()
    assert op.completions == 0
    clock.advance(1)
    purgatory.advance_clock()
    assert (op.completions, op.expirations) == (1, 1)
    ready[0] = True
    assert purgatory.check_and_complete("a") == 0
    assert (op.completions, op.expirations) == (1, 1)


@pytest.mark.parametrize("event_first", [True, False])
def test_completion_racing_expiry_completes_exactly_once(event_first):
    rng = random.Random(3)
    clock, purgatory = make_purgatory()
    ready = [False]
    ops = [Op(rng.randrange(1, 300), ready) for _ in range(300)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i % 7, "all"])
    clock.advance(150)
    ready[0] = True  # every operation can complete now, and half of them are due
    if event_first:
        purgatory.check_and_complete("all")
        purgatory.advance_clock()
    else:
        purgatory.advance_clock()
        purgatory.check_and_complete("all")
    for k in range(7):
        purgatory.check_and_complete(k)
    clock.advance(1000)
    purgatory.advance_clock()
    assert all(op.completions == 1 for op in ops)
    expired = sum(op.expirations for op in ops)
    due = sum(1 for op in ops if op.delay_ms <= 150)
    assert expired == (0 if event_first else due)
    assert purgatory.num_delayed == 0


def test_operations_completed_through_one_key_are_purged_from_the_others_past_the_threshold():
    clock, purgatory = make_purgatory(purge_interval=10)
    ready = [False]
    ops = [Op(10_000, ready) for _ in range(30)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [("own", i), "shared"])
    assert purgatory.watched() == 60
    ready[0] = True
    for i in range(8):
        purgatory.check_and_complete(("own", i))
    # 8 done: below the threshold, the shared list still holds them
    assert purgatory.advance_clock() == 0 and purgatory.watched() == 60 - 8
    for i in range(8, 20):
        purgatory.check_and_complete(("own", i))
    assert purgatory.watched() == 60 - 20
    assert purgatory.advance_clock() == 20  # 30 estimated - 10 delayed > 10: swept
    assert purgatory.watched() == 20 and purgatory.estimated_total == 10
    ready[0] = False
    assert purgatory.check_and_complete("shared") == 0 and all(op.tries >= 1 for op in ops)


def test_cancel_for_key_removes_the_operations_without_completing_them():
    clock, purgatory = make_purgatory()
    ops = [Op(100, [False]) for _ in range(3)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["k"])
    assert len(purgatory.cancel_for_key("k")) == 3
    assert purgatory.num_delayed == 0
    clock.advance(500)
    purgatory.advance_clock()
    assert all(op.completions == 0 for op in ops)


def test_a_plain_timer_task_must_say_what_it_runs():
    clock, timer = make_timer()
    timer.add(TimerTask(5))
    clock.advance(5)
    with pytest.raises(NotImplementedError):
        timer.advance_clock()
