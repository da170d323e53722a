"""What ``dlfp pipeline`` says last: the headline result of the runs it rendered, and the claims' verdicts.

:func:`headline` words tables the analysis computes (:func:`dlfp.analysis.runs.trial_rows`,
:func:`dlfp.studies.claims.evaluate`) with the statistics and the words the results chapter uses
(:func:`dlfp.analysis.stats.paired`, :func:`~dlfp.analysis.stats.effect_words`), so the terminal
cannot say something the book does not; verdicts are counted per kind of evidence, never pooled.
:func:`result_lines` loads those tables for the runs the results notebook was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.analysis.stats import effect_words, paired


def headline(run: str, rows: pd.DataFrame, claims: pd.DataFrame) -> list[str]:
    """Lines for the end of the job: the P99 ITL reduction of ``run`` (its :func:`trial_rows`) with its
    paired interval and what it says, then the claims' verdict counts per kind of evidence
    (:func:`~dlfp.studies.claims.verdict_counts`, as the book's intro counts them)."""
    from dlfp.studies.claims import verdict_counts

    p = paired(rows, "itl_p99_ms")
    n = len(p["reductions_pct"])
    ci = f"paired 95% CI {p['t_lo']:.1f}% to {p['t_hi']:.1f}%" if "t_lo" in p else "one trial: no interval"
    lines = [f"P99 ITL reduction, stock to DLFP: {p['mean_pct']:.1f}% ({ci}; {n} trial{'s' if n != 1 else ''} of "
             f"{run}): DLFP {effect_words(p)}"]
    for evidence, counts in verdict_counts(claims).iterrows():
        lines.append(f"claims, {evidence}: " + ", ".join(f"{k} {verdict}" for verdict, k in counts.items() if k))
    return lines


def result_lines(root: Path, values: Mapping[str, Any]) -> list[str]:
    """The :func:`headline` of the runs the results notebook read; ``values`` are its parameters
    (paths relative to ``root``, where the notebook ran)."""
    from dlfp.analysis.runs import load_run, trial_rows
    from dlfp.studies.claims import claim_runs, evaluate

    run = load_run(root / values["run_dir"])
    gpu = root / values["gpu_run_dir"] if values["gpu_run_dir"] else ""
    claims = evaluate(claim_runs(run, gpu, root / values["modeled_root"], root / values["baselines_root"]))
    return headline(str(values["run_dir"]), trial_rows(run), claims)
