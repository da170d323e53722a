"""Measured durations (:mod:`dlfp.bench.timed`): the record a command's run writes, the words a page states
it in, and the pages held to the committed records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dlfp.bench.timed import (
    TIMINGS,
    duration_words,
    measure,
    minutes,
    phase_words,
    pipeline_phases,
    pytest_sessions,
    read_timing,
)
from dlfp.cli import main as dlfp_main
from dlfp.paths import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "book").rglob("*.md"))]


def test_pytest_summaries_are_read_in_order_from_quiet_and_ruled_lines() -> None:
    out = ["....\n", "1735 passed, 2 skipped, 31 deselected, 14 warnings in 2186.12s (0:36:26)\n", "noise in 3s\n",
           "======================= 262 passed in 111.0s (0:01:51) ========================\n"]
    assert pytest_sessions(out) == [
        {"counts": {"passed": 1735, "skipped": 2, "deselected": 31, "warnings": 14}, "seconds": 2186.12},
        {"counts": {"passed": 262}, "seconds": 111.0}]
    assert pytest_sessions(["3 failed, 10 passed in 4.00s"]) == [{"counts": {"failed": 3, "passed": 10},
                                                                   "seconds": 4.0}]


def test_minutes() -> None:
    assert (minutes(2661.4), minutes(48.4), minutes(60), minutes(59.6)) == ("44 min 21 s", "48 s", "1 min 0 s",
                                                                             "1 min 0 s")


def record(**over: object) -> dict:
    return {"name": "make-test", "command": [".ci/run"], "fresh_clone": True,
            "git": {"commit": "1a2b3c4d5e6f", "dirty": False}, "machine": "2-core AMD EPYC 7B13 CPU",
            "date": "2026-12-07T17:00:00+00:00", "wall_s": 2661.4, "returncode": 0,
            "pytest": [{"counts": {"passed": 1735}, "seconds": 2186.1}, {"counts": {"passed": 262}, "seconds": 111.0}],
            **over}


def test_the_words_name_the_duration_machine_commit_date_and_tests() -> None:
    assert duration_words(record()) == ("44 min 21 s on a 2-core AMD EPYC 7B13 CPU (a fresh clone of `1a2b3c4d`, "
                                        "2026-12-07; pytest: 1735 passed in 2186 s, then 262 passed in 111 s)")
    here = duration_words(record(fresh_clone=False, pytest=[], git={"commit": "abcdef0123", "dirty": True}))
    assert here == "44 min 21 s on a 2-core AMD EPYC 7B13 CPU (commit `abcdef01 with uncommitted changes`, 2026-12-07)"
    with pytest.raises(ValueError, match=r"failed .exit status 2."):
        duration_words(record(returncode=2))


def test_a_command_is_run_and_recorded_with_its_pytest_counts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    said = "print('5 passed, 1 skipped in 1.25s'); print('3 passed in 0.5s')"
    rec = measure("toy", [sys.executable, "-c", said], fresh_clone=False, out=tmp_path / "new", allow_dirty=True)
    assert rec == read_timing("toy", tmp_path / "new") == json.loads((tmp_path / "new" / "toy.json").read_text())
    assert rec["returncode"] == 0 and rec["wall_s"] >= 0 and rec["git"]["commit"]
    assert rec["pytest"] == [{"counts": {"passed": 5, "skipped": 1}, "seconds": 1.25},
                             {"counts": {"passed": 3}, "seconds": 0.5}]
    assert "5 passed, 1 skipped" in capsys.readouterr().out  # the command's output reaches the terminal


def test_a_failing_command_is_recorded_as_failed_and_the_command_line_says_so(tmp_path: Path) -> None:
    code = dlfp_main(["bench", "timed", "--name", "fails", "--out", str(tmp_path), "--allow-dirty", "--",
                      sys.executable, "-c", "import sys; sys.exit(3)"])
    assert code == 1 and read_timing("fails", tmp_path)["returncode"] == 3


def test_a_fresh_clone_times_head(tmp_path: Path) -> None:
    rec = measure("clone", ["git", "status", "--porcelain"], fresh_clone=True, out=tmp_path, workdir=tmp_path)
    assert rec["fresh_clone"] and rec["git"]["dirty"] is False and rec["returncode"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["clone.json"]  # the scratch clone is removed


def test_bad_names_and_missing_commands_are_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lower-case letters"):
        measure("Make Test", ["true"], fresh_clone=False, out=tmp_path)
    with pytest.raises(ValueError, match="no command to time"):
        measure("x", [], fresh_clone=False, out=tmp_path)
    with pytest.raises(ValueError, match="is not its record"):
        (tmp_path / "y.json").write_text(json.dumps({"name": "z"}))
        read_timing("y", tmp_path)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in TIMINGS.glob("*.json")))
def test_each_committed_timing_is_stated_once_in_its_own_words(name: str) -> None:
    """A measured duration is written on one page, in :func:`duration_words`' words (the others link to it):
    remeasuring a command fails here until the page says the new number."""
    words = duration_words(read_timing(name))
    pages = [p.relative_to(REPO_ROOT) for p in PAGES if words in p.read_text(encoding="utf-8")]
    assert len(pages) == 1, f"{name}: {words!r} is stated on {pages or 'no page'}"


PIPELINE_OUTPUT = """\
pip install ...
[pipeline] 00_verify (notebook 1/2) ...; kernel output: build/logs/00_verify.log
[pipeline] 00_verify done in 1 min 08 s (notebook 1/2)
[run] 3 of 6 units to run
[pipeline] 01_paired_trials done in 1 h 02 min (notebook 2/2)
[pipeline] building the book strictly; Sphinx output: build/logs/book.log
[pipeline] book at _build/html/index.html; total 1 h 04 min; kernel output in build/logs
"""


def test_a_pipelines_phases_are_read_from_its_own_lines() -> None:
    phases = pipeline_phases(PIPELINE_OUTPUT.splitlines())
    assert phases == {"00_verify": 68.0, "01_paired_trials": 3720.0, "total": 3840.0}
    assert pipeline_phases(["[pipeline] x done in soon (notebook 1/1)", "1800 passed in 3.0s"]) == {}
    record = {"name": "make-artifact", "wall_s": 3960.0, "phases": phases}
    assert phase_words(record) == "set-up 2 min 0 s, 00_verify 1 min 8 s, 01_paired_trials 62 min 0 s, the book 52 s"
    with pytest.raises(ValueError, match="no pipeline phases"):
        phase_words({"name": "make-test", "wall_s": 1.0})


def test_a_timed_pipeline_records_its_phases(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write(" + repr(PIPELINE_OUTPUT) + ")"
    record = measure("p", [sys.executable, "-c", script], fresh_clone=False, out=tmp_path)
    assert record["phases"]["total"] == 3840.0 and json.loads((tmp_path / "p.json").read_text())["phases"] == \
        record["phases"]
    assert "phases" not in measure("q", [sys.executable, "-c", "print(1)"], fresh_clone=False, out=tmp_path)


@pytest.mark.parametrize("name", sorted(p.stem for p in TIMINGS.glob("*.json")
                                        if "phases" in json.loads(p.read_text(encoding="utf-8"))))
def test_each_committed_pipelines_phases_are_stated_once(name: str) -> None:
    words = phase_words(read_timing(name))
    pages = [p.relative_to(REPO_ROOT) for p in PAGES if words in p.read_text(encoding="utf-8")]
    assert len(pages) == 1, f"{name}: {words!r} is stated on {pages or 'no page'}"
