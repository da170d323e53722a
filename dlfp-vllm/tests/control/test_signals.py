"""Which interval each signal reports, when a cycle counts as guarded, and which completion time
(the executor's stamp or the collect time) the completion signal takes."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control.signals import COLLECT, EXEC_DONE, StepRecord, StepTracker, best_completions
from dlfp.control.steplog import StepLog, read_step_log


def rec(step: int, t: float, prefill: int, decodes: int) -> StepRecord:
    return StepRecord(step=step, schedule_t=t, complete_t=None, prefill_tokens=prefill,
                      decode_reqs=decodes, total_tokens=prefill + decodes, cap=None,
                      signal_s=None, guarded=False, target_s=0.05, chunk=256.0)


def test_schedule_signal_measures_previous_call() -> None:
    tr = StepTracker("schedule")
    assert tr.observe(0.0, True) is None
    tr.scheduled(rec(0, 0.0, 100, 4))
    obs = tr.observe(0.030, True)
    assert obs is not None and abs(obs.interval_s - 0.030) < 1e-12 and obs.guarded


def test_mode_switch_is_unguarded() -> None:
    tr = StepTracker("schedule")
    tr.scheduled(rec(0, 0.0, 0, 4))  # decode-only step measured
    assert not tr.observe(0.02, True).guarded
    tr.scheduled(rec(1, 0.02, 100, 4))  # mixed step measured, but planning a non-mixed step
    assert not tr.observe(0.05, False).guarded


def test_saturated_means_the_measured_prefill_filled_its_cap() -> None:
    tr = StepTracker("schedule")
    full, short = rec(0, 0.0, 256, 4), rec(1, 0.01, 40, 4)
    full.cap = short.cap = 256
    tr.scheduled(full)
    assert tr.observe(0.01, True).saturated
    tr.scheduled(short)  # a short prompt's whole prefill: below the cap
    assert not tr.observe(0.02, True).saturated


def test_completion_signal_is_cadence_and_used_once() -> None:
    tr = StepTracker("completion")
    a, b = rec(0, 0.0, 100, 4), rec(1, 0.001, 100, 4)
    tr.scheduled(a)
    tr.scheduled(b)  # async: step 1 scheduled before step 0 completes
    assert tr.observe(0.002, True) is None  # nothing completed yet
    tr.completed(a, 0.040)
    assert tr.observe(0.041, True) is None  # one completion gives no cadence
    tr.completed(b, 0.100)
    obs = tr.observe(0.101, True)
    assert obs is not None and abs(obs.interval_s - 0.060) < 1e-12 and obs.guarded
    assert tr.observe(0.102, True) is None  # the same completion is not fed twice


def test_step_log_round_trip(tmp_path) -> None:
    path = tmp_path / "steps.jsonl"
    for run in range(2):
        log = StepLog(path, header={"run": run})
        done = rec(0, 1.0, 10, 2)
        done.complete_t = 1.5
        log.add(done)
        log.close([rec(1, 2.0, 0, 2)])
    with path.open("a") as fh:
        fh.write('{"step": 9, "sched')  # torn last line from a killed engine
    runs = list(read_step_log(path))
    assert [h["run"] for h, _ in runs] == [0, 1]
    assert [[r["complete_t"] for r in rows] for _, rows in runs] == [[1.5, None], [1.5, None]]


def test_decode_step_estimate_uses_decode_only_cadence_only() -> None:
    tr = StepTracker("completion")
    t = 0.0
    for prefill, gap in [(0, 0.010), (0, 0.010), (500, 0.050), (0, 0.020), (0, 0.010), (0, 0.010)]:
        t += gap
        tr.completed(rec(int(t * 1000), 0.0, prefill, 4), t)
    # Only a decode-only step after a decode-only step counts: the mixed step and the one right
    # after it (whose cadence ends the mixed step) are skipped, so the estimate stays at 10 ms.
    assert tr.decode_step_s == pytest.approx(0.010)
    tr.completed(rec(999, 0.0, 0, 4), t + 0.020)
    assert tr.decode_step_s == pytest.approx(0.2 * 0.020 + 0.8 * 0.010)


# Completion stamps: the executor's time of each step's output (dlfp.vllm.completion_stamps) feeds
# the completion signal where it is present and plausible; the collect time stands in otherwise.

def completed(tr: StepTracker, step: int, schedule_t: float, collect_t: float, stamp: float | None,
              prefill: int = 100) -> StepRecord:
    r = rec(step, schedule_t, prefill, 4)
    r.exec_done_t = stamp  # what the scheduler copies from the SchedulerOutput before completing
    tr.scheduled(r)
    tr.completed(r, collect_t)
    return r


def test_a_stamp_is_what_the_controller_sees() -> None:
    """Async: outputs appear 20 ms apart on the device, the engine core collects them 5 and 35 ms later."""
    tr = StepTracker("completion")
    a = completed(tr, 0, 0.000, 0.025, 0.020)
    b = completed(tr, 1, 0.010, 0.075, 0.040)
    obs = tr.observe(0.08, True)
    assert obs is not None and obs.interval_s == pytest.approx(0.020)  # not the collect cadence 0.050
    assert (a.complete_source, b.complete_source) == (EXEC_DONE, EXEC_DONE)
    assert (a.complete_t, b.complete_t) == (0.025, 0.075)  # complete_t stays the collect time
    assert (a.exec_done_t, b.exec_done_t) == (0.020, 0.040)


def test_without_stamps_the_collect_time_is_used() -> None:
    tr = StepTracker("completion")
    a = completed(tr, 0, 0.000, 0.025, None)
    b = completed(tr, 1, 0.010, 0.075, None)
    assert tr.observe(0.08, True).interval_s == pytest.approx(0.050)
    assert (a.complete_source, b.complete_source) == (COLLECT, COLLECT)


def test_a_step_missing_its_stamp_falls_back_for_that_step_only() -> None:
    tr = StepTracker("completion")
    completed(tr, 0, 0.000, 0.025, 0.020)
    gap = completed(tr, 1, 0.010, 0.050, None)  # e.g. an empty step: not sampled, not stamped
    assert gap.complete_source == COLLECT and tr.observe(0.051, True).interval_s == pytest.approx(0.030)
    back = completed(tr, 2, 0.030, 0.090, 0.070)
    assert back.complete_source == EXEC_DONE and tr.observe(0.091, True).interval_s == pytest.approx(0.020)


@pytest.mark.parametrize(("stamp", "why"), [
    (0.020, "duplicate: the previous step's stamp again, a zero cadence"),
    (0.015, "out of order: before the previous step's completion"),
    (0.005, "before this step was scheduled"),
    (0.200, "after its output was collected"),
    (math.nan, "NaN"),
])
def test_an_impossible_stamp_is_replaced_by_the_collect_time(stamp: float, why: str) -> None:
    tr = StepTracker("completion")
    completed(tr, 0, 0.000, 0.025, 0.020)
    r = completed(tr, 1, 0.010, 0.060, stamp)
    assert r.complete_source == COLLECT, why
    assert tr.observe(0.061, True).interval_s == pytest.approx(0.060 - 0.020)  # never zero or negative


def test_a_step_completed_twice_or_late_does_not_move_the_cadence() -> None:
    tr = StepTracker("completion")
    a = completed(tr, 0, 0.000, 0.025, 0.020)
    b = completed(tr, 1, 0.010, 0.050, 0.040)
    assert tr.observe(0.051, True).interval_s == pytest.approx(0.020)
    tr.completed(b, 0.090)  # the same step again
    late = rec(0, 0.0, 100, 4)
    late.exec_done_t = 0.085
    tr.completed(late, 0.095)  # an earlier step after a later one
    assert (b.complete_t, b.complete_source) == (0.050, EXEC_DONE)
    assert tr.observe(0.1, True) is None  # nothing new to feed: step 1's cadence was used once
    assert (late.complete_t, late.complete_source) == (0.095, COLLECT) and a.complete_t == 0.025


def test_the_decode_step_estimate_runs_on_stamps() -> None:
    tr = StepTracker("completion")
    for i, (stamp, collect) in enumerate([(0.010, 0.030), (0.020, 0.031), (0.030, 0.070)]):
        completed(tr, i, stamp - 0.005, collect, stamp, prefill=0)
    assert tr.decode_step_s == pytest.approx(0.010)  # the collect cadences were 1 ms and 39 ms


STEP = st.tuples(st.floats(1e-4, 0.05), st.floats(0.0, 0.05), st.floats(0.0, 1.0),
                 st.sampled_from(["stamp", "none", "stale", "late"]))
"""A step: gap to its scheduling, its run time, how late in the async lag it is collected, and which stamp it carries
(its output's time, none, a stale one: the previous stamp or one before its scheduling, one after its collection)."""


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=25), async_lag=st.floats(0.0, 0.05))
def test_the_analysis_rebuilds_the_controllers_choice(steps: list[tuple[float, float, float, str]],
                                                      async_lag: float) -> None:
    """``best_completions`` (for step tables without ``complete_source``) picks, step by step, the
    time and source the tracker took; every chosen cadence is non-negative."""
    tr = StepTracker("completion")
    sched, collect, stamps, chosen, sources = [], [], [], [], []
    t, last_collect = 0.0, 0.0
    for gap, run, where, kind in steps:
        t += gap
        done = t + run
        c = max(done + where * async_lag, last_collect + 1e-6)
        stamp = {"stamp": done, "none": None, "stale": (stamps[-1] if stamps and stamps[-1] is not None else t - 1),
                 "late": c + 1.0}[kind]
        r = completed(tr, len(sched), t, c, stamp)
        sched.append(t)
        collect.append(c)
        stamps.append(stamp)
        chosen.append(r.exec_done_t if r.complete_source == EXEC_DONE else r.complete_t)
        sources.append(r.complete_source)
        last_collect = c
    times, got = best_completions(sched, collect, stamps)
    assert got == sources and times == chosen
    assert all(b >= a for a, b in pairwise(times))


def test_best_completions_of_pending_and_unstamped_steps() -> None:
    times, sources = best_completions([0.0, 1.0, 2.0], [0.5, 1.5, None], None)
    assert times[:2] == [0.5, 1.5] and math.isnan(times[2]) and sources == [COLLECT, COLLECT, None]
    times, sources = best_completions([0.0, 1.0, 2.0], [0.5, 1.5, math.nan], [0.4, math.nan, None])
    assert times[:2] == [0.4, 1.5] and sources == [EXEC_DONE, COLLECT, None]
