"""The results chapter's baselines section: each target's arms against stock on the ITL-TTFT plane, and the
numbers the prose of *Beyond the paper* pastes, from the baselines study's runs (``dlfp study baselines``),
as :mod:`dlfp.book.page` items. A target without a run gets a note naming it, not a number."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pandas as pd

from dlfp.analysis import figures
from dlfp.analysis.labels import lateness_note, source_kind, source_line, stock_budget
from dlfp.analysis.runs import RunData, load_run
from dlfp.analysis.stats import reduction_notes
from dlfp.analysis.tables import regime
from dlfp.book.notebook import Plain
from dlfp.book.page import Figure, Glue, Item, Say, Show
from dlfp.studies.frontier import (
    effects_table,
    goal,
    objective_goal,
    run_table,
    target_summary,
    ttft_premise,
    ttft_spread,
)
from dlfp.studies.generalization import glue_key
from dlfp.studies.plans import BASELINE_ARMS, MODELED_TARGETS
from dlfp.trials.provenance import run_folders

TARGETS = ("cpu-tiny", *MODELED_TARGETS)
EFFECT_ARMS = ("dlfp", "dlfp-completion", "dlfp-antiwindup", "dlfp-decode", "cap", "dlfp-slo")
"""The arms of the effects table, in its column order (those some target ran)."""


def reduction_text(row: pd.Series, trials: int) -> str:
    """An arm's P99 ITL reduction against stock as the prose gives it: mean, words its interval allows, interval."""
    mean = row["ITL reduction vs stock (%)"]
    return f"{mean:.1f}% ({'; '.join(reduction_notes(mean, trials, row['ITL CI lo (%)'], row['ITL CI hi (%)']))})"


def load(root: str) -> tuple[dict[str, RunData], dict[str, pd.DataFrame]]:
    """The study's runs by target (its folder names), and each run's arms table (:func:`run_table`)."""
    runs = {d.name: load_run(d) for d in run_folders([root])}
    return runs, {name: run_table(r) for name, r in runs.items()}


def section(root: str, runs: Mapping[str, RunData], tables: dict[str, pd.DataFrame]) -> Iterator[Item]:
    """Everything the section's first cell shows and glues, in the page's order (``root``: the study's folder;
    ``runs`` and ``tables``: :func:`load`'s)."""
    for target in TARGETS:  # numbers for the prose, or a note saying which run is missing
        t = tables.get(target)
        # The run's own arms (a run made before an arm joined the plan lacks it); the plan's where it is missing.
        for arm in [a["name"] for a in BASELINE_ARMS] if t is None else list(t.arm):
            if arm == "stock":
                continue
            text = (f"(run {target} is not in {root})" if t is None
                    else reduction_text(t.set_index("arm").loc[arm], len(runs[target].trials)))
            yield Glue(glue_key(f"{target}-{arm}"), Plain(text))
    kinds = {t: source_kind(source_line(r)) for t, r in runs.items()}
    yield Glue("baselines_goal", Plain(goal(tables, TARGETS, kinds)))
    yield Glue("baselines_slo_goal", Plain(objective_goal(tables, "dlfp-slo", TARGETS, kinds)))
    yield Glue("baselines_ttft_spread", Plain(ttft_spread(tables)))
    yield Glue("baselines_ttft_premise", Plain(ttft_premise(tables, kinds)))
    arms = [a for a in EFFECT_ARMS if any(a in set(t.arm) for t in tables.values())]
    labelled = {f"{t} ({kinds[t]})": table for t, table in tables.items()}
    yield Glue("baselines_effects", effects_table(labelled, arms).style.set_caption(
        "P99 ITL reduction against stock per target and arm: mean over the run's paired trials (paired 95% CI); "
        "a negative reduction is an increase"))
    if not tables:
        note = f"no baselines runs under {root} (dlfp study baselines --out {root} makes them)"
        yield Glue("baselines_summary", pd.DataFrame({"baselines study": [note]}).style.hide(axis="index"))
        yield Say(note)
        return
    words = "; ".join(f"{k}: {', '.join(t for t in kinds if kinds[t] == k)}" for k in sorted(set(kinds.values())))
    yield Figure(
        figures.frontier(tables, f"P99 ITL against P99 TTFT per arm ({words})"),
        "Each arm's P99 ITL against its P99 TTFT, per target, on log axes: down and left is better. The orange "
        "line joins the fixed token budgets that no other fixed budget beats on both; the dashed line is the "
        "run's ITL objective. An arm below the line at its own TTFT beats every fixed chunk there. Colours are "
        f"arm families, the same in every figure; shades and markers tell a family's arms apart. {words}.")
    summary = target_summary(tables)
    yield Glue("baselines_summary", summary)
    yield Show(summary)


def per_run(runs: Mapping[str, RunData], tables: dict[str, pd.DataFrame]) -> Iterator[Item]:
    """Each run's arms with their latencies and settings, captioned with where the run comes from, its stock
    budget, its regime and how late its client sent."""
    for name, r in runs.items():
        yield Show(tables[name].drop(columns=["settings", "family"]).style.format(precision=1).hide(axis="index")
                   .set_caption(f"{name}: {figures.provenance(r)}; stock budget {stock_budget(r)}; "
                                f"{regime(r)['verdict']}; {lateness_note(r)}"))
