"""What the SLO controller's step-cost fit got right and wrong, from its step logs (issue 21: where
the controller misses its goal, say why).

Each step the SLO controller (``controller: slo``, arm ``dlfp-slo``) sizes is logged with the step
budget its chunk was sized to (``budget_s``), the fit's prediction of the step's duration with that
chunk (``predicted_s``), and whether no chunk could meet the budget (``infeasible``: the budget lay
below the predicted decode floor, and the step got the smallest chunk). A sized step is judged against
the duration the controller itself fits: its completion cadence (the same clock as the controller,
:func:`dlfp.control.signals.best_completions`, and the same rule, :func:`dlfp.control.slo.step_duration`).

The prediction is for a step carrying its whole chunk, so it is compared only where the prefill filled
the chunk: a prompt's last piece, shorter than the chunk, makes a shorter step than predicted, and
at a relaxed SLO most chunks are larger than what is left of a prompt.

Per target and SLO level, over every trial and load the arm ran at (:func:`fit_table`): how far the
predictions were off (the median error says whether the fit leans one way; the 90th percentile of its
size how far a step can stray), how often a sized step overran its budget by more than
:data:`OVERRUN`, how often no chunk could meet the budget, and where the budget sat against the ITL
SLO. A fit that is right while the capacity falls short points at the budget (the feedback) or at the
queue (TTFT), not at the fit; a fit that is off explains overruns, and so a missed ITL SLO.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from dlfp.analysis.labels import source_kind, source_line
from dlfp.analysis.runs import RunData, load_run
from dlfp.control.signals import best_completions
from dlfp.control.slo import step_duration
from dlfp.trials.armid import ArmId

CONTROLLER = "dlfp-slo"
"""The capacity study's arm of the SLO controller (run once per level, ``dlfp-slo.<level>_<load>``)."""
OVERRUN = 0.10
"""A sized step counts as overrunning its budget when it lasted more than this fraction longer."""


def sized_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps the controller sized (a budget logged), in step order, each with ``observed_s``
    (:func:`timed_steps`)."""
    out = timed_steps(steps)
    return out[out["budget_s"].notna()] if "budget_s" in out else out.iloc[:0]


def timed_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Every step in step order, each with ``observed_s``: its duration as the controller fits it (NaN
    where the step was never collected or is unusable)."""
    steps = steps.sort_values("step").reset_index(drop=True)
    stamps = steps["exec_done_t"].tolist() if "exec_done_t" in steps else None
    done, _ = best_completions(steps["schedule_t"].tolist(), steps["complete_t"].tolist(), stamps)
    observed, prev = [], None
    for s, d, n in zip(steps["schedule_t"], done, steps["decode_reqs"], strict=True):
        usable = not math.isnan(d)
        observed.append(step_duration(s, d, prev, int(n)) if usable else None)
        prev = d if usable else prev
    return steps.assign(observed_s=pd.Series(observed, dtype=float))


def fit_rows(run: RunData, target: str) -> pd.DataFrame:
    """One row per step the SLO controller sized in ``run`` (a capacity run, loaded with its steps):
    target, level, trial, load, budget, prediction, observed duration, infeasible, the level's ITL SLO."""
    sweep = (run.manifest.design or {})["sweep"]
    frames = []
    for (k, arm), tables in sorted(run.tables.items()):
        arm_id = ArmId.parse(arm)
        base, level = arm_id.base, arm_id.level
        if base != CONTROLLER or level is None:
            continue
        steps = sized_steps(tables["steps"])
        frames.append(pd.DataFrame({
            "target": target, "level": level, "trial": k, "load": sweep["arms"][arm]["load"],
            "budget_s": steps["budget_s"], "predicted_s": steps["predicted_s"], "observed_s": steps["observed_s"],
            "filled": steps["prefill_tokens"] >= steps["cap"],
            "infeasible": steps["infeasible"].astype(bool) if "infeasible" in steps else False,
            "itl_slo_s": sweep["slos"][level]["itl_ms"] / 1e3, "source": source_line(run),
        }))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def controller_runs(root: Path) -> list[tuple[str, RunData]]:
    """(target, run) of every capacity run under ``root``, loaded with the steps of the SLO controller's
    units only (verified as every trace is)."""
    out = []
    for manifest in sorted(Path(root).glob("*/manifest.json")):
        run = load_run(manifest.parent, tables=("steps",), allow_partial=True,
                       arms=lambda arm: ArmId.parse(arm).base == CONTROLLER)
        if "sweep" in (run.manifest.design or {}):
            out.append((manifest.parent.name, run))
    return out


def study_rows(root: Path) -> pd.DataFrame:
    """:func:`fit_rows` of every capacity run under ``root`` that ran the SLO controller."""
    frames = [f for f in (fit_rows(run, target) for target, run in controller_runs(root)) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def fit_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per target and SLO level (module docstring): steps sized and the share whose prefill filled the
    chunk; over those, the prediction error's median and the 90th percentile of its size (observed over
    predicted, minus one, in %); over every timed sized step with a feasible chunk, the share over budget
    by more than :data:`OVERRUN`; the share with no feasible chunk; the median budget as a share of the
    ITL SLO. No rows (no run has the controller's units yet, as in an interrupted study): no table."""
    if rows.empty:
        return pd.DataFrame()
    out = []
    for (target, level), g in rows.groupby(["target", "level"], sort=False):
        timed = g[g.observed_s.notna() & g.predicted_s.notna() & ~g.infeasible]
        err = 100 * (timed.observed_s / timed.predicted_s - 1)[timed.filled]
        out.append({
            "target": f"{target} ({source_kind(g.source.iloc[0])})", "SLO level": level,
            "steps sized (chunk filled, %)": f"{len(g)} ({100 * g.filled.mean():.0f})",
            "median error (%)": _num(err.median()),
            "90% of errors within (±%)": _num(np.percentile(err.abs(), 90)) if len(err) else "",
            f"over budget by >{OVERRUN:.0%} (% of steps)":
                _num(100 * (timed.observed_s > (1 + OVERRUN) * timed.budget_s).mean()) if len(timed) else "",
            "no feasible chunk (% of steps)": _num(100 * g.infeasible.mean()),
            "median budget (% of ITL SLO)": _num(100 * (g.budget_s / g.itl_slo_s).median()),
        })
    return pd.DataFrame(out)


def _num(x: float) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.2g}" if abs(x) < 10 else f"{x:.0f}"
