"""The closing lines of ``dlfp pipeline`` (``dlfp.book.summary``): the headline and the claims' verdicts
are worded from the analysis' tables with its own statistics, never recomputed."""

from __future__ import annotations

import pandas as pd

from dlfp.analysis.stats import effect_words, paired
from dlfp.book.summary import headline
from dlfp.studies.claims import EVIDENCE, verdict_counts


def rows(stock: list[float], dlfp: list[float]) -> pd.DataFrame:
    """The columns of :func:`dlfp.analysis.runs.trial_rows` the headline reads."""
    return pd.DataFrame([{"trial": k, "arm": arm, "itl_p99_ms": v}
                         for arm, values in (("stock", stock), ("dlfp", dlfp)) for k, v in enumerate(values)])


CPU, GPU, SIM, _ = EVIDENCE
CLAIMS = pd.DataFrame({
    "evidence": [GPU, CPU, CPU, SIM, CPU, SIM],
    "verdict": ["not testable here", "reproduced", "reproduced", "not reproduced",
                "not testable here (run outside its design regime)", "reproduced"],
})


def test_headline_gives_the_paired_reduction_its_interval_and_the_verdicts_per_source() -> None:
    r = rows([100.0, 120.0, 110.0], [70.0, 90.0, 80.0])
    p = paired(r, "itl_p99_ms")
    lines = headline("data/runs/local/cpu-default", r, CLAIMS)
    assert lines[0] == (f"P99 ITL reduction, stock to DLFP: {p['mean_pct']:.1f}% (paired 95% CI {p['t_lo']:.1f}% to "
                        f"{p['t_hi']:.1f}%; 3 trials of data/runs/local/cpu-default): DLFP {effect_words(p)}")
    assert "reduces it by a mean of" in lines[0]
    assert lines[1:] == [f"claims, {CPU}: 2 reproduced, 1 not testable here",
                         f"claims, {GPU}: 1 not testable here",
                         f"claims, {SIM}: 1 reproduced, 1 not reproduced"]  # per kind of evidence, never pooled


def test_one_trial_has_no_interval_and_says_so() -> None:
    line = headline("run", rows([100.0], [80.0]), CLAIMS.iloc[:0])
    assert line == ["P99 ITL reduction, stock to DLFP: 20.0% (one trial: no interval; 1 trial of run): "
                    "DLFP cannot be judged from one trial (no interval)"]


def test_verdict_counts_add_up_to_the_claims_table() -> None:
    counts = verdict_counts(CLAIMS)
    assert int(counts.to_numpy().sum()) == len(CLAIMS)
    assert counts.index.tolist() == [CPU, GPU, SIM] and counts.columns.tolist() == ["reproduced", "not reproduced",
                                                                                  "not testable here"]
