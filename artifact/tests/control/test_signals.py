"""Which interval each signal reports, and when a cycle counts as guarded."""

from __future__ import annotations

import pytest

from dlfp.control.signals import StepRecord, StepTracker
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
