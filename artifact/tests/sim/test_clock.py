"""``sleep_until`` (:mod:`dlfp.sim.clock`): returns once ``time.monotonic() >= deadline``, never
before, and at once for a deadline that has passed; it sleeps to about ``SPIN_S`` before the
deadline and then yields with ``time.sleep(0)`` (releasing the GIL) instead of busy-waiting.

Real-clock checks allow 20 ms of lateness (a shared, loaded machine); the sleeping strategy is
checked on a fake clock, exactly.
"""

from __future__ import annotations

import threading
import time
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.sim import clock
from dlfp.sim.clock import SPIN_S, sleep_until

LATE_S = 0.020


@pytest.mark.parametrize("duration", [0.0005, 0.003, 0.030])
def test_lands_after_the_deadline_and_soon_after_it(duration: float) -> None:
    for _ in range(3):
        deadline = time.monotonic() + duration
        sleep_until(deadline)
        woke = time.monotonic()
        assert deadline <= woke < deadline + LATE_S


@pytest.mark.parametrize("ago", [0.0, 0.5, 1e6])
def test_a_deadline_in_the_past_returns_at_once(ago: float) -> None:
    start = time.monotonic()
    sleep_until(start - ago)
    assert time.monotonic() - start < LATE_S


def test_other_threads_run_while_it_waits() -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    worker = threading.Thread(target=count)
    worker.start()
    try:
        time.sleep(0.01)
        before = ticks
        sleep_until(time.monotonic() + 0.1)
        during = ticks - before
    finally:
        stop.set()
        worker.join()
    assert during > 1000  # the waiting thread did not keep the interpreter to itself


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` on a clock that advances only when slept on; each sleep
    wakes ``overshoot`` late (a real one does), ``sleep(0)`` takes ``tick``."""

    def __init__(self, now: float, overshoot: float, tick: float) -> None:
        self.now, self.overshoot, self.tick = now, overshoot, tick
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds + self.overshoot if seconds > 0 else self.tick


    def module(self) -> types.SimpleNamespace:
        """Stands in for the ``time`` module inside :mod:`dlfp.sim.clock` only."""
        return types.SimpleNamespace(monotonic=self.monotonic, sleep=self.sleep)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock(now=1000.0, overshoot=0.0001, tick=1e-5)
    monkeypatch.setattr(clock, "time", c.module())
    return c


def test_sleeps_until_spin_s_before_then_yields(fake: FakeClock) -> None:
    sleep_until(1000.5)
    assert fake.sleeps[0] == pytest.approx(0.5 - SPIN_S)
    assert fake.sleeps[1:] and set(fake.sleeps[1:]) == {0}  # then only yields, no busy loop
    assert 1000.5 <= fake.now < 1000.5 + fake.tick + 1e-9


def test_a_deadline_within_spin_s_only_yields(fake: FakeClock) -> None:
    sleep_until(1000.0 + SPIN_S / 2)
    assert fake.sleeps and set(fake.sleeps) == {0}
    assert fake.now >= 1000.0 + SPIN_S / 2


def test_a_passed_deadline_does_not_sleep(fake: FakeClock) -> None:
    sleep_until(999.0)
    sleep_until(1000.0)  # exactly now counts as reached
    assert fake.sleeps == [] and fake.now == 1000.0


@settings(max_examples=200, deadline=None)
@given(offset=st.floats(-10, 10), overshoot=st.floats(0, 0.01), tick=st.floats(1e-6, 1e-3))
def test_never_early_on_any_clock(offset: float, overshoot: float, tick: float) -> None:
    c = FakeClock(now=50.0, overshoot=overshoot, tick=tick)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "time", c.module())
        sleep_until(50.0 + offset)
    assert c.now >= 50.0 + offset
    long = [s for s in c.sleeps if s > 0]
    assert len(long) <= 1 and all(s == pytest.approx(offset - SPIN_S) for s in long)
    # Late only by the one sleep's overshoot beyond SPIN_S, or one yield.
    assert c.now - max(50.0 + offset, 50.0) <= max(overshoot - SPIN_S, 0) + tick + 1e-9
