"""One arm's engine-side results (``dlfp.harness.arm``): the step log read back on the trial's time
base, with what the engine reports it ran. The engine start itself is tested in
``integration/test_engine_cpu.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlfp.harness.result import RAN, steps_frame


def write_log(path: Path, starts: list[tuple[dict, list[dict]]]) -> Path:
    lines = []
    for header, records in starts:
        lines += [json.dumps({"header": header}), *(json.dumps(r) for r in records)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_last_start_is_read_with_what_it_ran(tmp_path: Path) -> None:
    first = {"scheduler": "DLFPScheduler", "async_scheduling": False, "executor": "uni", "pid": 1}
    last = {"scheduler": "DLFPAsyncScheduler", "async_scheduling": True,
            "executor": "dlfp.vllm.executors.TimedUniProcExecutor", "pid": 2, "params": {"gain": 0.5}}
    log = write_log(tmp_path / "steps.jsonl", [
        (first, [{"step": 0, "schedule_t": 5.0, "complete_t": 5.5}]),
        (last, [{"step": 0, "schedule_t": 10.0, "complete_t": 10.25, "exec_done_t": 10.2},
                {"step": 1, "schedule_t": 10.5, "complete_t": 10.75}])])
    steps, ran = steps_frame(log, t0_monotonic=10.0)
    assert steps.step.tolist() == [0, 1]  # the last engine start's records only
    assert steps.schedule_t.tolist() == [0.0, 0.5] and steps.complete_t.tolist() == [0.25, 0.75]
    assert steps.exec_done_t.iloc[0] == pytest.approx(0.2)
    assert ran == {"scheduler": "DLFPAsyncScheduler", "async_scheduling": True,
                   "executor": "dlfp.vllm.executors.TimedUniProcExecutor"}
    assert set(ran) == set(RAN)  # what ran, not the parameters or the process


def test_an_older_header_records_what_it_has(tmp_path: Path) -> None:
    log = write_log(tmp_path / "steps.jsonl", [({"scheduler": "DLFPScheduler", "async_scheduling": False},
                                                 [{"step": 0, "schedule_t": 1.0, "complete_t": 1.5}])])
    assert steps_frame(log, 1.0)[1] == {"scheduler": "DLFPScheduler", "async_scheduling": False}


def test_a_log_without_records_says_the_scheduler_was_not_active(tmp_path: Path) -> None:
    (tmp_path / "steps.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(RuntimeError, match="was the DLFP scheduler active"):
        steps_frame(tmp_path / "steps.jsonl", 0.0)
