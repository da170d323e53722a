"""The results chapter's headline (:mod:`dlfp.book.headline_section`) on the committed CPU run: every value
the pages paste from it is glued, intervals read low to high in the sign the prose uses, and the side-by-side
table puts the paper's reported numbers (from :mod:`dlfp.analysis.paper`) beside the run's."""

from __future__ import annotations

import re

from dlfp.analysis.paper import PAPER
from dlfp.analysis.runs import load_run, trial_rows
from dlfp.book.headline_section import ci_text, glues, side_by_side
from dlfp.book.page import glued
from dlfp.paths import REPO_ROOT

RUN = "data/runs/cpu-default"
NOT_HERE = ("baselines_", "capacity_", "sim_", "explanations_", "gpu_cal_", "stability_", "virtual_")
PASTED = {k for page in REPO_ROOT.joinpath("book").glob("*.md")
          for k in re.findall(r"03_results\.ipynb::(\w+)", page.read_text()) if not k.startswith(NOT_HERE)}
"""The values pages paste from 03_results that no other section glues."""


def test_ci_text_reads_low_to_high_in_the_proses_sign() -> None:
    assert ci_text({"t_lo": 5.0, "t_hi": 20.0}) == "5.0% to 20.0%"
    assert ci_text({"t_lo": 5.0, "t_hi": 20.0}, sign=-1) == "-20.0% to -5.0%"
    assert ci_text({"mean_pct": 3.0}) == "one trial: no interval"


def test_every_value_the_pages_paste_is_glued() -> None:
    run = load_run(REPO_ROOT / RUN)
    values = glued(glues(run, trial_rows(run), RUN))
    assert PASTED and set(values) >= PASTED, PASTED - set(values)
    assert str(values["paper_itl_mean"]) == f"{PAPER['mean_pct']:.1f}%"
    assert values["n_trials"] == len(run.trials)
    assert str(values["run_label"]) == "the committed run"


def test_the_side_by_side_table_sets_the_papers_row_under_the_runs() -> None:
    run = load_run(REPO_ROOT / RUN)
    table = side_by_side(run, trial_rows(run))
    ours, paper = table.data.to_dict("records")
    assert ours["source"].startswith("measured") and paper["source"].startswith("reported by the paper (")
    assert paper["mean (%)"] == f"{PAPER['mean_pct']:.1f}" and paper["bootstrap 95% CI (%)"] == "not reported"
    assert table.caption == "P99 ITL reduction, stock to DLFP: ours and the paper's, side by side"
