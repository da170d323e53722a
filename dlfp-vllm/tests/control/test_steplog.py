"""Step logs (:mod:`dlfp.control.steplog`): every engine start writes a header line first, records
are buffered and flushed every ``FLUSH_EVERY`` records or once a record comes more than
``FLUSH_AFTER_S`` after the last flush, ``close`` writes the pending steps once, and
``read_step_log`` reads back exactly what was written, one ``(header, records)`` per start,
skipping a torn last line."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control.signals import COLLECT, EXEC_DONE, StepRecord, StepTracker
from dlfp.control.steplog import FLUSH_AFTER_S, FLUSH_EVERY, StepLog, read_step_log

LONG_AGO = -1.0e9
"""A ``schedule_t`` (monotonic clock) long before any flush: such a record never flushes by time."""


def rec(step: int, schedule_t: float = LONG_AGO, complete_t: float | None = 1.5) -> StepRecord:
    return StepRecord(step=step, schedule_t=schedule_t, complete_t=complete_t, prefill_tokens=step % 7, decode_reqs=3,
                      total_tokens=step % 7 + 3, cap=256, signal_s=0.012, guarded=True, target_s=0.05,
                      chunk=256.0, exec_done_t=None)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_header_is_written_at_once_as_the_first_line(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "steps.jsonl"  # parent folders are created
    StepLog(path, header={"model": "qwen3-tiny", "params": {"gain": 0.5}})
    assert lines(path) == ['{"header": {"model": "qwen3-tiny", "params": {"gain": 0.5}}}']
    assert list(read_step_log(path)) == [({"model": "qwen3-tiny", "params": {"gain": 0.5}}, [])]


def test_records_are_buffered_until_flush_every_records(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    log = StepLog(path, header={})
    for i in range(FLUSH_EVERY - 1):
        log.add(rec(i))
    assert len(lines(path)) == 1  # the hot path has not written anything yet
    log.add(rec(FLUSH_EVERY - 1))
    assert len(lines(path)) == 1 + FLUSH_EVERY
    log.add(rec(FLUSH_EVERY))
    assert len(lines(path)) == 1 + FLUSH_EVERY  # a new batch starts
    log.flush()
    assert len(lines(path)) == 2 + FLUSH_EVERY


def test_a_record_more_than_a_second_after_the_last_flush_flushes(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    log = StepLog(path, header={})
    flushed_at = log._flushed_at  # the monotonic instant of the header's flush
    assert flushed_at <= time.monotonic()
    log.add(rec(0))
    log.add(rec(1, schedule_t=flushed_at + FLUSH_AFTER_S))  # exactly a second later: not more
    assert len(lines(path)) == 1
    log.add(rec(2, schedule_t=flushed_at + FLUSH_AFTER_S + 0.01))
    assert [json.loads(x).get("step") for x in lines(path)] == [None, 0, 1, 2]
    assert log._flushed_at >= flushed_at  # the flush restarted the clock
    log.add(rec(3, schedule_t=log._flushed_at + FLUSH_AFTER_S))  # not more than a second after it
    assert len(lines(path)) == 4


def test_close_writes_pending_steps_once(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    log = StepLog(path, header={"run": 0})
    log.add(rec(0))
    log.close([rec(1, complete_t=None), rec(2, complete_t=None)])
    log.close([rec(3, complete_t=None)])  # closed already: nothing more
    log.close([])
    [(header, rows)] = list(read_step_log(path))
    assert header == {"run": 0}
    assert [(r["step"], r["complete_t"]) for r in rows] == [(0, 1.5), (1, None), (2, None)]


def test_records_read_back_identically(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    written = [rec(i) for i in range(5)] + [replace(rec(5), cap=None, signal_s=None, exec_done_t=3.25)]
    log = StepLog(path, header={"t0": 12.5})
    for r in written[:-2]:
        log.add(r)
    log.close(written[-2:])
    [(header, rows)] = list(read_step_log(path))
    assert header == {"t0": 12.5}
    assert rows == [asdict(r) for r in written]
    assert set(rows[0]) == set(asdict(written[0]))  # every field, exec_done_t and complete_source included


def test_each_step_logs_which_completion_time_the_signal_took(tmp_path: Path) -> None:
    """``complete_source``: "exec_done" where the executor's stamp was used, "collect" where the collect
    time stood in (no stamp), null for a step still pending at shutdown; into steps.parquet as a column."""
    path = tmp_path / "steps.jsonl"
    tracker, log = StepTracker("completion"), StepLog(path, header={})
    stamped, unstamped, pending = rec(0, 0.0, None), rec(1, 0.01, None), rec(2, 0.02, None)
    stamped.exec_done_t = 0.015
    for r in (stamped, unstamped):
        tracker.completed(r, r.schedule_t + 0.02)
        log.add(r)
    log.close([pending])
    [(_, rows)] = list(read_step_log(path))
    assert [r["complete_source"] for r in rows] == [EXEC_DONE, COLLECT, None]
    assert [r["exec_done_t"] for r in rows] == [0.015, None, None]


def test_a_log_from_before_complete_source_reads_back_without_it(tmp_path: Path) -> None:
    """Older engines wrote records without ``complete_source`` (or ``exec_done_t``): read as written."""
    path = tmp_path / "steps.jsonl"
    old = {k: v for k, v in asdict(rec(0)).items() if k not in ("complete_source", "exec_done_t")}
    path.write_text(json.dumps({"header": {"run": 0}}) + "\n" + json.dumps(old) + "\n", encoding="utf-8")
    [(header, rows)] = list(read_step_log(path))
    assert header == {"run": 0} and rows == [old] and all("complete_source" not in r for r in rows)


FINITE = st.floats(allow_nan=False, allow_infinity=False)
OPT = st.none() | FINITE
RECORDS = st.builds(
    StepRecord, step=st.integers(0, 2 ** 40), schedule_t=FINITE, complete_t=OPT,
    prefill_tokens=st.integers(0, 1 << 20), decode_reqs=st.integers(0, 4096), total_tokens=st.integers(0, 1 << 21),
    cap=st.none() | st.integers(1, 1 << 20), signal_s=OPT, guarded=st.booleans(), target_s=FINITE, chunk=FINITE,
    exec_done_t=OPT, complete_source=st.sampled_from([None, EXEC_DONE, COLLECT]))


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.lists(RECORDS, max_size=6), min_size=1, max_size=3))
def test_any_records_of_any_starts_round_trip(tmp_path_factory: pytest.TempPathFactory,
                                               runs: list[list[StepRecord]]) -> None:
    path = tmp_path_factory.mktemp("log") / "steps.jsonl"
    for i, records in enumerate(runs):
        log = StepLog(path, header={"start": i})
        for r in records[:-1]:
            log.add(r)
        log.close(records[-1:])
    got = list(read_step_log(path))
    assert [h for h, _ in got] == [{"start": i} for i in range(len(runs))]
    assert [rows for _, rows in got] == [[asdict(r) for r in records] for records in runs]


def killed_mid_write(path: Path) -> Path:
    """A log of one start (header run 0, step 0) whose engine was killed while writing step 1."""
    log = StepLog(path, header={"run": 0})
    log.add(rec(0))
    log.close([])
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"step": 1, "schedule_t": 2.0, "compl')  # no newline
    return path


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = killed_mid_write(tmp_path / "steps.jsonl")
    [(header, rows)] = list(read_step_log(path))
    assert header == {"run": 0} and [r["step"] for r in rows] == [0]


def test_a_file_without_a_header_yields_no_run(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(asdict(rec(0))) + "\n", encoding="utf-8")
    assert list(read_step_log(path)) == []


def test_a_start_after_a_torn_line_is_still_told_apart(tmp_path: Path) -> None:
    path = killed_mid_write(tmp_path / "steps.jsonl")
    second = StepLog(path, header={"run": 1})
    second.add(rec(7))
    second.close([])
    got = list(read_step_log(path))
    assert [(h, [r["step"] for r in rows]) for h, rows in got] == [({"run": 0}, [0]), ({"run": 1}, [7])]
