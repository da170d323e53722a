"""Progress lines (``dlfp.trials.progress``): their arithmetic, their cadence, where they go, and what
``run_trials`` reports with the fake engine arms (no engine starts here)."""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.trials import progress, runner
from dlfp.trials.config import parse_config
from dlfp.trials.progress import (
    HEARTBEAT_S,
    MIN_GAP_S,
    PROGRESS_ENV,
    QUARTERS,
    RunProgress,
    arm_left_s,
    arm_names,
    due,
    duration,
    progress_sink,
    progress_stream,
    relay,
    run_left_s,
)
from dlfp.trials.runfolder import engine_log
from dlfp.trials.schema import Unit
from tests.trials.fakes import CONFIG, manifest


@pytest.mark.parametrize(("seconds", "text"), [(0, "0 s"), (41.6, "42 s"), (60, "1 min 00 s"), (185, "3 min 05 s"),
                                               (3720, "1 h 02 min"), (-5, "0 s")])
def test_duration_is_as_precise_as_an_estimate_needs(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_start_line_names_a_few_arms_and_counts_the_rest() -> None:
    assert arm_names(["stock", "dlfp"]) == "arms stock, dlfp"
    sweep = [f"a{i}" for i in range(161)]
    assert arm_names(sweep) == "161 arms a0, a1, a2, a3, a4, a5 and 155 more"
    assert arm_names(sweep[:6]) == "arms a0, a1, a2, a3, a4, a5"


def test_an_arm_has_its_arrival_span_left_once_its_engine_is_up() -> None:
    assert arm_left_s(elapsed_s=70, span_s=60, replay_started_s=50) == 40  # 20 s into a 60 s span
    assert arm_left_s(elapsed_s=200, span_s=60, replay_started_s=50) == 0  # draining its last requests
    assert arm_left_s(elapsed_s=10, span_s=60, start_guess_s=50) == 100  # 40 s of start-up, then the span
    assert arm_left_s(elapsed_s=10, span_s=60) is None  # the run's first engine: no start-up seen yet


def test_the_run_has_the_mean_finished_unit_left_per_unit_after_this_one() -> None:
    assert run_left_s(30, [100, 120], units_after=2) == 30 + 2 * 110
    assert run_left_s(30, [], units_after=2, unit_guess_s=90) == 30 + 2 * 90
    assert run_left_s(30, [], units_after=2) is None
    assert run_left_s(30, [], units_after=0) == 30  # the last unit needs no mean
    assert run_left_s(None, [100], units_after=1) is None


def lines_at(total: int, seconds_per_request: float) -> list[int]:
    reported, since, lines = 0, 0.0, []
    for done in range(1, total + 1):
        since += seconds_per_request
        if due(done, total, reported, since):
            reported, since = done, 0.0
            lines.append(done)
    return lines


def test_a_few_lines_per_arm_not_one_per_request() -> None:
    assert lines_at(40, 1.0) == [10, 20, 30]  # each quarter; the unit's own line reports the 40th
    assert lines_at(40, MIN_GAP_S / 25) == [25]  # 10 came too soon after the engine-up line, 30 after 25
    assert lines_at(12, 0.1) == []  # a replay of a second: its start and its end are enough
    long_arm = lines_at(1000, 1.0)  # a long arm: a line per heartbeat (and quarter), not per request
    assert 1000 // HEARTBEAT_S <= len(long_arm) <= 1000 / HEARTBEAT_S + QUARTERS
    assert due(3, 40, 2, since_last_s=HEARTBEAT_S)  # a long quiet stretch: a line all the same
    assert not due(3, 40, 3, since_last_s=HEARTBEAT_S)  # but only when a request finished since


@given(elapsed=st.floats(0, 1e6), span=st.floats(0, 1e5), started=st.none() | st.floats(0, 1e6),
       guess=st.none() | st.floats(0, 1e4))
def test_an_estimate_is_never_negative(elapsed: float, span: float, started: float | None,
                                       guess: float | None) -> None:
    left = arm_left_s(elapsed, span, started, guess)
    assert left is None or left >= 0
    run = run_left_s(left, [span], 3)
    assert run is None or run >= (left or 0)


@given(total=st.integers(1, 5000), steps=st.lists(st.integers(1, 50), max_size=200))
def test_requests_lines_never_pass_the_total_and_come_at_most_once_per_quarter(total: int, steps: list[int]) -> None:
    done, reported, lines = 0, 0, 0
    for n in steps:
        done = min(total, done + n)
        if due(done, total, reported, since_last_s=MIN_GAP_S):
            assert reported < done < total
            reported, lines = done, lines + 1
    assert lines <= QUARTERS - 1


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_run_progress_lines_name_trial_arm_unit_requests_and_what_is_left(tmp_path) -> None:
    units = [Unit(trial=0, seed=0, arm="stock", status="complete", wall_s=100.0),
             Unit(trial=0, seed=0, arm="dlfp"), Unit(trial=1, seed=1, arm="dlfp"), Unit(trial=1, seed=1, arm="stock")]
    out, clock = io.StringIO(), Clock()
    report = RunProgress(tmp_path / "run", units, out, clock)
    report.begin(tmp_path / "run.log")
    requests = [SimpleNamespace(arrival_s=20.0 * i) for i in range(8)]  # a 140 s arrival span
    arm = report.unit(1, requests)
    clock.t += 45
    arm(0)  # the engine is up after 45 s
    for _ in range(8):
        clock.t += 20
        arm(1)
    report.unit_done(1, dataclasses.replace(units[1], status="complete", wall_s=210.0))
    lines = _lines(out)
    unit = "[run] trial 1/2 dlfp (unit 2/4)"
    assert lines[0] == f"[run] 3 of 4 units to run (2 trials x arms stock, dlfp); engine output: {tmp_path / 'run.log'}"
    assert lines[1] == f"{unit}: engine starting; 0/8 requests, 0 s elapsed"
    assert lines[2] == (f"{unit}: engine up after 45 s; 0/8 requests, 45 s elapsed, ~2 min 20 s left "
                        "(run: ~5 min 40 s left)")  # 140 s + 2 units x 100 s (the finished unit's wall time)
    assert lines[3] == f"{unit}: 2/8 requests, 1 min 25 s elapsed, ~1 min 40 s left (run: ~5 min 00 s left)"
    assert [line.split(": ")[1].split(",")[0] for line in lines[3:6]] == [f"{k}/8 requests" for k in (2, 4, 6)]
    assert lines[6] == (f"{unit}: done in 3 min 30 s; 2/4 units done, run 3 min 25 s elapsed, "
                        "~5 min 10 s left")  # 2 units x the mean of 100 s and 210 s
    report.unit(2, requests)  # the next engine start is estimated from the last one
    assert _lines(out)[-1] == ("[run] trial 2/2 dlfp (unit 3/4): engine starting; 0/8 requests, 0 s elapsed, "
                               "~3 min 05 s left (run: ~5 min 40 s left)")  # 45 s + 140 s; then 1 unit x 155 s


def test_a_failure_shows_the_end_of_the_engine_log_and_an_interruption_says_by_what(tmp_path) -> None:
    log = tmp_path / "run.engine.log"
    log.write_text("".join(f"noise {i}\n" for i in range(30)))
    out = io.StringIO()
    report = RunProgress(tmp_path / "run", [Unit(trial=0, arm="stock")], out)
    report.unit(0, [])
    report.stopped(RuntimeError("engine core died"), None, log)
    lines = _lines(out)
    assert lines[1].startswith("[run] failed during trial 1/1 stock (unit 1/1), trial-0/stock after ")
    assert lines[1].endswith(": RuntimeError: engine core died")
    assert lines[2] == f"[run] last 20 lines of {log}:"
    assert lines[3:] == [f"[run]   | noise {i}" for i in range(10, 30)]
    report.stopped(KeyboardInterrupt(), "SIGTERM", log)
    assert _lines(out)[-1].startswith("[run] interrupted by SIGTERM during trial 1/1 stock")


def test_disabled_progress_has_no_stream_and_a_sink_file_wins_over_stderr(tmp_path, monkeypatch) -> None:
    with progress_stream(False) as stream:
        assert stream is None
    RunProgress(tmp_path, [], None).line("nothing happens")
    sink = tmp_path / "sink.log"
    monkeypatch.setenv(PROGRESS_ENV, str(sink))
    with progress_stream() as stream:
        assert stream is not None
        stream.write("a line\n")
    assert sink.read_text() == "a line\n"
    monkeypatch.delenv(PROGRESS_ENV)
    with progress_stream() as stream:  # pytest replaced sys.stderr: no descriptor to duplicate
        import sys

        assert stream is sys.stderr


def test_the_sink_is_named_for_child_processes_only_while_the_block_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    import os

    with progress_sink(tmp_path / "logs") as sink:
        assert os.environ[PROGRESS_ENV] == str(sink) and sink.is_file()
    assert PROGRESS_ENV not in os.environ and not sink.exists()


def test_relay_copies_appended_lines_while_running_and_the_rest_at_the_end(tmp_path) -> None:
    sink = tmp_path / "sink.log"
    sink.write_text("from an earlier notebook\n")
    out = io.StringIO()
    with relay(sink, out, poll_s=0.01), open(sink, "a") as fh:
        fh.write("[run] first line\n[run] half a li")
        fh.flush()
        deadline = time.monotonic() + 5
        while "first line" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert out.getvalue() == "[run] first line\n"  # complete lines only, while the block runs
        fh.write("ne\n[run] last, without its newline")
    assert out.getvalue() == "[run] first line\n[run] half a line\n[run] last, without its newline\n"


def test_run_trials_reports_to_the_sink_and_is_silent_without_progress(tmp_path, fake, monkeypatch, capfd) -> None:
    fake()
    sink = tmp_path / "sink.log"
    monkeypatch.setenv(PROGRESS_ENV, str(sink))
    out = tmp_path / "run"
    runner.run_trials(parse_config(CONFIG), out, progress=True)
    lines = sink.read_text().splitlines()
    assert lines[0] == f"[run] 4 of 4 units to run (2 trials x arms stock, dlfp); engine output: {engine_log(out)}"
    assert lines[1] == "[run] pre-flight: measuring the stock engine ..."
    assert lines[2].startswith("[run] pre-flight done in ")
    assert lines[3].startswith("[run] trial 1/2 stock (unit 1/4): engine starting; 0/3 requests, ")
    assert lines[4].startswith("[run] trial 1/2 stock (unit 1/4): done in ")
    assert lines[-1].startswith("[run] complete: 4 units, ") and lines[-1].endswith(f"engine output: {engine_log(out)}")
    assert len(lines) == 12 and capfd.readouterr().err == ""  # to the sink, not to stderr
    fake()
    monkeypatch.delenv(PROGRESS_ENV)
    runner.run_trials(parse_config({**CONFIG, "name": "quiet"}), tmp_path / "quiet", progress=False)
    assert capfd.readouterr() == ("", "")


def test_engine_output_goes_to_the_log_beside_the_run_folder_and_a_failure_shows_it(tmp_path, fake, monkeypatch,
                                                                                    capfd) -> None:
    import subprocess
    import sys

    arms = fake()
    real = arms.__call__

    def noisy_arm(spec, requests, step_log, progress=None, telemetry_interval_s=0.5, warmup=()):
        subprocess.run([sys.executable, "-c", "import sys; print('Triton is installed, but ...', file=sys.stderr)"],
                       check=True)  # a process the engine starts, talking as vLLM's do
        if not arms.calls:
            raise RuntimeError("engine core died")
        return real(spec, requests, step_log, progress, telemetry_interval_s)

    monkeypatch.setattr("dlfp.harness.arm.run_arm", noisy_arm)
    monkeypatch.setattr(progress, "TAIL_LINES", 3)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        runner.run_trials(parse_config(CONFIG), out, progress=True)
    err = capfd.readouterr().err
    assert "[run] failed during trial 1/2 stock (unit 1/4), trial-0/stock" in err
    assert f"[run] last 3 lines of {engine_log(out)}:" in err
    assert err.count("Triton is installed") == 1  # once: in the log's tail, never as the engine printed it
    log = engine_log(out).read_text().splitlines()
    assert log[0].startswith("===== ") and log[0].endswith("pre-flight on the stock engine")
    assert log[1].endswith("trial-0/stock (seed 0)") and log[2] == "Triton is installed, but ..."
    assert manifest(out)["status"] == "failed" and not (out / engine_log(out).name).exists()
    assert engine_log(out) == tmp_path / "run.engine.log"


def test_the_engine_log_lies_beside_the_folder_whatever_the_path_looks_like(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert engine_log(Path("data/runs/x/")) == Path("data/runs/x.engine.log")
    assert engine_log(Path(".")) == tmp_path.parent / f"{tmp_path.name}.engine.log"


def test_a_unit_on_a_reused_engine_says_so_and_keeps_the_start_estimate(tmp_path) -> None:
    units = [Unit(trial=0, seed=0, arm=a) for a in ("stock", "stock_fast")]
    out, clock = io.StringIO(), Clock()
    report = RunProgress(tmp_path / "run", units, out, clock)
    requests = [SimpleNamespace(arrival_s=1.0)]
    first = report.unit(0, requests)
    clock.t += 30
    first(0)  # a fresh engine is up after 30 s
    report.unit_done(0, dataclasses.replace(units[0], status="complete", wall_s=31.0))
    second = report.unit(1, requests, reused=True)
    second(0)
    lines = _lines(out)
    assert lines[-1].startswith("[run] trial 1/1 stock_fast (unit 2/2): engine reused; 0/1 requests")
    assert not any("engine up" in line for line in lines[lines.index(lines[-1]):])
    assert report.start_guess_s == 30  # the next fresh engine is still estimated from a real start
