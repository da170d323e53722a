"""``dlfp.analysis.report.format_report``: what ``dlfp analyze`` prints for a run says where its
numbers come from, shows the paired mean and interval exactly as :func:`dlfp.analysis.stats.paired`
computes them, words the effect as :func:`dlfp.analysis.stats.effect_words` does, and never hides
that a run is partial or that an interval is missing.

Read from the committed ``data/runs/cpu-default`` (two arms, three trials) and
``data/runs/cpu-default-6x50`` (six trials: the bootstrap interval is shown); variants are the
same loaded run with its manifest or tables changed in memory.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from dlfp.analysis.labels import measured_on
from dlfp.analysis.report import format_report
from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.analysis.stats import effect_words, paired
from dlfp.analysis.tables import regime
from dlfp.paths import REPO_ROOT

RUNS = REPO_ROOT / "data" / "runs"


@pytest.fixture(scope="module")
def report(run: RunData) -> str:
    return format_report(run)


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_the_header_names_the_run_its_source_and_its_stall_line(run: RunData, report: str) -> None:
    lines = report.splitlines()
    assert lines[0] == f"run {run.path} (cpu-default, status complete)"
    assert lines[1] == "measured: " + measured_on(run.manifest)
    assert lines[1].startswith("measured: 2-core ") and "vLLM 0.32.0+cpu" in lines[1]
    slo_ms = (run.manifest.design or {})["overrides"]["dlfp"]["itl_slo_ms"]  # the design's ITL objective
    assert lines[2] == (f"stock token budget (max_num_batched_tokens): 4096; stall = gap above {slo_ms:.1f} ms; "
                        f"regime: {regime(run)['verdict']}")  # whatever the run's trials say (test_tables)
    assert "PARTIAL" not in report


@pytest.mark.parametrize("metric", ["itl_p99_ms", "ttft_p99_ms"])
def test_the_paired_line_is_what_stats_computes(rows: pd.DataFrame, report: str, metric: str) -> None:
    p = paired(rows, metric)
    (line,) = lines_starting(report, f"dlfp {metric}: ")
    assert line == (f"dlfp {metric}: mean reduction {p['mean_pct']:.1f}%, paired 95% CI (Student's t, 2 df) "
                    f"[{p['t_lo']:.1f}%, {p['t_hi']:.1f}%] ({effect_words(p)})")
    assert "bootstrap" not in line  # three trials: no resampled interval


@pytest.mark.parametrize("metric", ["itl_p99_ms", "ttft_p99_ms"])
def test_the_effects_are_worded_as_their_intervals_allow(rows: pd.DataFrame, report: str, metric: str) -> None:
    """Each headline metric in the words its paired interval allows, whichever way the run came out (a
    regenerated run may lose or gain an effect: the words follow, the test does not pin them)."""
    (line,) = lines_starting(report, f"dlfp {metric}: ")
    t = paired(rows, metric)
    words = "raises it" if t["t_hi"] < 0 else "reduces it" if t["t_lo"] > 0 else "shows no detectable effect"
    assert f"({words}" in line


def test_the_paper_table_is_printed_for_two_arms(rows: pd.DataFrame, report: str) -> None:
    assert "ITL reduction (%)" in report and "P99 TTFT DLFP (ms)" in report
    assert "settings" not in report  # the arms table is for runs with more arms, or without dlfp
    stock = rows[rows.arm == "stock"].itl_p99_ms
    assert all(f"{v:.2f}" in report for v in stock)


def test_token_accounting_closes_the_report(run: RunData, rows: pd.DataFrame, report: str) -> None:
    n = run.config.workload["n_requests"]
    assert report.splitlines()[-1] == (f"token accounting: {len(rows) * n} of {len(rows) * n} request-arms recorded; "
                                       "0 prompt and 0 output mismatches")


def test_six_trials_get_no_bootstrap_interval() -> None:
    """A bootstrap over six values is a handful of resampled means: never printed as a CI."""
    run = load_run(RUNS / "cpu-default-6x50", tables=("requests", "tokens"))
    p = paired(trial_rows(run), "itl_p99_ms")
    (line,) = lines_starting(format_report(run), "dlfp itl_p99_ms: ")
    assert f"(Student's t, 5 df) [{p['t_lo']:.1f}%, {p['t_hi']:.1f}%]" in line
    assert "bootstrap" not in line and "boot_lo" not in p


def test_a_partial_run_says_so(run: RunData) -> None:
    manifest = dataclasses.replace(run.manifest, status="interrupted")
    first = format_report(dataclasses.replace(run, manifest=manifest)).splitlines()[0]
    assert first == f"run {run.path} (cpu-default, status interrupted, PARTIAL: only its finished arms)"


def test_one_trial_has_no_interval_and_says_it_cannot_judge(run: RunData) -> None:
    one = dataclasses.replace(run, tables={k: v for k, v in run.tables.items() if k[0] == 0})
    (line,) = lines_starting(format_report(one), "dlfp itl_p99_ms: ")
    assert "CI" not in line and line.endswith("(cannot be judged from one trial (no interval))")
    assert format_report(one).splitlines()[-1].startswith("token accounting: 200 of 200 request-arms")


def test_a_run_without_a_complete_trial(run: RunData) -> None:
    manifest = dataclasses.replace(run.manifest, missing=["trial-0/dlfp"])
    empty = dataclasses.replace(run, manifest=manifest, tables={(0, "stock"): run.tables[(0, "stock")]})
    assert format_report(empty) == f"{run.path}: no trial has all arms complete yet (missing: ['trial-0/dlfp'])"
