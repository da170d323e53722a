"""Which explanation of the paper's negative result reproduces its pattern in the model?

The paper reports that DLFP works on Qwen3-0.6B and fails on Qwen3-8B, Qwen3-32B and 8B at TP=2,
and blames the async scheduler-call interval. Each candidate explanation is a variant of the
modeled study on those four settings (:mod:`dlfp.studies.plans`):

* (a) the lagging async signal: the paper's law as is, under async scheduling (the baselines
  study's ``dlfp`` arm), with the completion signal beside it as the control;
* (b) one absolute latency target for every model size (arm ``dlfp-abs-target``);
* (c) host-bound small models: the counterfactual profile with a tenth of the host time;
* (d) stalls too rare to reach the pooled P99: a design at 0.5% stall share.

A variant *reproduces the paper's pattern* when its paired CI on Qwen3-0.6B lies above zero
and on each of the other three settings does not (its upper bound below
:data:`NO_BENEFIT_BELOW`, the claims file's threshold for "no benefit").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.analysis.stats import effect_kind, paired
from dlfp.trials.runfolder import MANIFEST

NO_BENEFIT_BELOW = 10.0
WORKS = "a100-qwen3-0.6b"
FAILS = ("a100-qwen3-8b", "a100-qwen3-32b", "a100-qwen3-8b-tp2")
VARIANTS: dict[str, tuple[str, str, str]] = {
    "(a) paper's law, async scheduler-call interval": ("baselines", "{target}", "dlfp"),
    "control: completion signal": ("baselines", "{target}", "dlfp-completion"),
    "(b) one absolute target (100 ms ITL objective)": ("baselines", "{target}", "dlfp-abs-target"),
    "(c) fast host (counterfactual profile)": ("explanations", "fast-host-{target}", "dlfp"),
    "(d) rare stalls (0.5% design)": ("explanations", "rare-stalls-{target}", "dlfp"),
}
"""Column label -> (study, run folder pattern, arm compared with stock)."""
PATTERN = "pattern (0.6B works; 8B, 32B, TP=2 do not)"
"""The column that says whether a variant shows the paper's pattern, and what breaks it where not."""


def reproduces(cells: Mapping[str, Mapping[str, Any]]) -> str:
    """Does one variant's per-setting reduction show the paper's pattern? (module docstring) When
    not, each setting that breaks it is named with what its interval says (:func:`effect_kind`)
    and the interval itself, so "a benefit not ruled out" is never said of a large, certain one."""
    if any(t not in cells or "t_lo" not in cells[t] for t in (WORKS, *FAILS)):
        return "not testable (a setting is missing or has one trial)"

    def said(target: str) -> str:
        lo, hi = cells[target]["t_lo"], cells[target]["t_hi"]
        kind = effect_kind(lo, hi)
        words = f"a benefit of up to {hi:.0f}% not ruled out" if kind == "no detectable effect" else f"a {kind}"
        return f"{words} on {target.split('-', 1)[1]} (CI {lo:.0f} to {hi:.0f}%)"

    works = cells[WORKS]["t_lo"] > 0
    fails = [cells[t]["t_hi"] < NO_BENEFIT_BELOW for t in FAILS]
    if works and all(fails):
        return "reproduces the pattern"
    lo, hi = cells[WORKS]["t_lo"], cells[WORKS]["t_hi"]
    problems = ([] if works else [f"{effect_kind(lo, hi).replace('no detectable effect', 'no detectable benefit')} "
                                  f"on 0.6B (CI {lo:.0f} to {hi:.0f}%)"]) + [
        said(t) for t, ok in zip(FAILS, fails, strict=True) if not ok]
    return "does not: " + "; ".join(problems)


def table(load: Callable[[str, str], RunData | None]) -> pd.DataFrame:
    """Rows: the variants; columns: the four settings and :data:`PATTERN`; cells: mean reduction and
    CI. One row per variant, so that the pattern's reasons read along a line rather than down a column.

    ``load(study, folder)`` returns a loaded run or None when it is not rendered.
    """
    cache: dict[tuple[str, str], tuple[RunData, pd.DataFrame] | None] = {}
    out: dict[str, dict[str, str]] = {}
    for label, (study, pattern, arm) in VARIANTS.items():
        cells: dict[str, dict[str, Any]] = {}
        row = out.setdefault(label, {})
        for target in (WORKS, *FAILS):
            key = (study, pattern.format(target=target))
            if key not in cache:
                run = load(*key)
                cache[key] = None if run is None else (run, trial_rows(run))
            entry = cache[key]
            if entry is None or arm not in entry[0].arms:
                row[target] = "not rendered"
                continue
            p = paired(entry[1], "itl_p99_ms", arm)
            cells[target] = p
            ci = f" [{p['t_lo']:.0f}, {p['t_hi']:.0f}]" if "t_lo" in p else ""
            row[target] = f"{p['mean_pct']:.0f}%{ci}"
        row[PATTERN] = reproduces(cells)
    return pd.DataFrame.from_dict(out, orient="index")


def from_runs(baselines_root: Path, explanations_root: Path) -> pd.DataFrame:
    """:func:`table` from the two studies' run folders; a folder without a manifest counts as not run.

    The results notebook and the pipeline test both read the committed runs through this, so the
    test checks the very sentence the book glues.
    """
    roots = {"baselines": Path(baselines_root), "explanations": Path(explanations_root)}

    def load(study: str, folder: str) -> RunData | None:
        d = roots[study] / folder
        return load_run(d) if (d / MANIFEST).is_file() else None

    return table(load)


def verdict(expl: pd.DataFrame) -> str:
    """The explanations table's :data:`PATTERN` column in one sentence: which variants reproduce the
    paper's pattern, which do not, which cannot be tested yet. The reasons stay in the table, beside
    the intervals they cite: a sentence that carried them held some twenty numbers."""
    row = expl[PATTERN]
    groups: dict[str, list[str]] = {"reproduce the paper's pattern": [], "do not reproduce it": [],
                                     "not testable yet": []}
    for label, text in row.items():
        key = ("reproduce the paper's pattern" if text == "reproduces the pattern" else
               "not testable yet" if text.startswith("not testable") else "do not reproduce it")
        groups[key].append(label)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items() if v) + "."
