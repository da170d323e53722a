"""The results chapter's capacity section: figures, tables and the glued numbers *Beyond the paper* pastes,
built from a capacity study's folder (``dlfp study capacity``) as :mod:`dlfp.book.page` items.

Targets still running (a manifest without every unit) are named and left out of every table, so a page
rendered mid-study says what it lacks instead of ranking arms on part of a sweep. Every value another page
pastes is glued in every case, a stand-in saying why where there is nothing to show, so that page builds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from dlfp.analysis import capacity_plots, capacity_tables
from dlfp.analysis.labels import source_kind
from dlfp.book.notebook import Plain
from dlfp.book.page import Figure, Glue, Item, Say, Show
from dlfp.studies import capacity_goal, controller_goal, fit_features, slo_fit
from dlfp.studies.capacity import capacity_table, load_points, trial_capacities, unfinished
from dlfp.studies.setting import share_grid, standing, unranked, which_setting
from dlfp.trials import sweep

LEVELS = ("tight", "relaxed")

def _sources(table: pd.DataFrame) -> str:
    return "; ".join(sorted(set(table.source)))


def section(root: str) -> Iterator[Item]:
    """Everything the section shows and glues, in the page's order (``root``: the study's folder, as the
    notebook parameter names it)."""
    here = Path(root)
    points, recomputed = load_points(here) if here.is_dir() else (pd.DataFrame(), None)
    running = unfinished(here) if here.is_dir() else {}
    still = (" Still running, and left out of every table here: " + ", ".join(f"{t} ({n})" for t, n in running.items())
             + "." if running else "")
    if running and len(points):
        points = points[~points.target.isin(running)]
    if recomputed:
        yield Say(f"points recomputed from the traces: {recomputed} (dlfp study capacity --tables --out {root} stamps "
                  "them)")
    if not len(points):
        yield from _not_run(root, still)
        return
    table = capacity_table(points)
    trials = trial_capacities(points)
    kinds = " and ".join(sorted({source_kind(s) for s in table.source}))
    sources = _sources(table)
    yield from _figures(points, table, kinds, sources)
    which = which_setting(table, trials)
    yield Glue("capacity_which", which)
    yield Glue("capacity_status", Plain(
        f"The capacity study ran on {table.target.nunique()} targets ({kinds}).{still} Per SLO level, which arms had "
        "the highest capacity and on how many targets, and how close the others came:"))
    yield Glue("capacity_findings", capacity_tables.findings(which).style.hide(axis="index"))
    yield from _which_setting(table, which, kinds, sources)
    yield Show(capacity_tables.design(table).style.hide(axis="index").set_caption(
        f"What each capacity is measured against. {sweep.describe()} A rate past what an arm sustains passes "
        "a point while the queue it builds stays under the TTFT SLO: 'overload that can pass' is the largest such "
        "overload; 'points sent late' counts the points whose client fell behind its arrival schedule."))
    yield from _goals(points, table, trials, sources)
    yield from _fits(here, running, sources)
    for level in LEVELS:
        yield Show(capacity_tables.by_target(table, level).style.set_caption(
            f"Capacity at the {level} SLOs (requests/s): mean over trials (95% interval); ≥ where every point met "
            "the SLOs (at least the top rate), < where the lowest did not. Sources: " + sources))


def _not_run(root: str, still: str) -> Iterator[Item]:
    note = (f"The capacity study has no finished target yet under {root} (dlfp study capacity --out {root} "
            "makes them)." + still)
    not_run = pd.DataFrame({"capacity study": ["not run"]}).style.hide(axis="index")
    yield Glue("capacity_status", Plain(note))
    yield Glue("capacity_findings", not_run)
    yield Glue("capacity_slo_goal", Plain(note))
    yield Glue("capacity_slo_fit", not_run)
    yield Glue("capacity_fit_features", not_run)
    yield Glue("capacity_standing", not_run)
    yield Glue("capacity_unranked", Plain(note))
    yield Glue("capacity_controller_goal", Plain(note))
    yield Glue("capacity_controller_goal_settling", Plain(""))
    yield Glue("capacity_controller_goal_pairs", not_run)
    yield Glue("capacity_shares", not_run)
    yield Say(note)


def _figures(points: pd.DataFrame, table: pd.DataFrame, kinds: str, sources: str) -> Iterator[Item]:
    for level in LEVELS:
        yield Figure(
            capacity_plots.sweep(points, table, level, f"P99 ITL and goodput against the arrival rate, {level} SLOs "
                                 f"({kinds})"),
            f"P99 ITL (top, log) and goodput (bottom) against the arrival rate at the {level} SLOs, one line per "
            "arm family (its best arm, named in the goodput panel's legend), mean over trials. The dashed line is the "
            "ITL SLO, the dotted one the capacity bound from the measured step costs; where an arm's P99 crosses its "
            f"SLO is its capacity. {kinds.capitalize()}: {sources}.")
    yield Figure(
        capacity_plots.bars(table, f"Capacity per arm and SLO level ({kinds})"),
        "Each arm's capacity: the highest arrival rate at which its P99 ITL and P99 TTFT both meet the SLOs "
        "(bars: mean over trials; whiskers: 95% interval where no trial is censored; the legend under the figure "
        "says which bar is which level). The vertical lines are the capacity bounds, what the hardware allows with "
        "steps sized exactly to the ITL SLO (queueing aside); a capacity above its bound comes from trials whose "
        "prompts were shorter than the design's mean, or from the overload a finite point lets pass (design table).")


def _which_setting(table: pd.DataFrame, which: pd.DataFrame, kinds: str, sources: str) -> Iterator[Item]:
    nothing = unranked(which)
    left_out = "Left out, ranking nothing: " + ", ".join(nothing) + ". " if nothing else ""
    confidence = which.confidence.iloc[0]
    yield Figure(
        capacity_plots.shares(share_grid(table, which), f"Capacity as a share of each pair's best arm ({kinds})"),
        "Which setting to use, at a glance: each arm's capacity (mean over trials) as a share of the best arm's at "
        "each target and SLO level. A red triangle marks an arm the paired trials place below the best "
        f"({confidence:.2%} intervals of the log ratio, Bonferroni over the pairs ranked); every "
        "other filled cell cannot be told from the best with these trials. Blank: the target did not run that arm. "
        + left_out + f"The intervals are in the which-setting table below. Sources: {sources}.",
        glue_as="capacity_shares")
    yield Glue("capacity_unranked", Plain("Every target and SLO-level pair ranks its arms." if not nothing else
                                          "Ranking nothing, and left out of every count: " + ", ".join(nothing)
                                          + " (fewer than two trials in which any arm met the SLOs)."))
    yield Show(which.style.format(precision=2, na_rep="not run").hide(axis="index").set_caption(
        "Which setting to use: per target and SLO level the arm with the highest mean capacity (best_rps), the "
        f"arms whose capacity ratio to it has an interval reaching 1 (tied: the trials cannot tell them apart; "
        f"log-ratio intervals at {confidence:.2%} each, Bonferroni over the pairs ranked, censored "
        "trials at their bound), the share of it that DLFP's defaults (defaults_share, and the paired ratio "
        "defaults_ratio) and the best single fixed budget across all targets (budget, budget_share, budget_ratio) "
        "reach. ranked: false where fewer than two trials had any arm meet the SLOs. Sources: " + sources))
    held = standing(table, which).style.hide(axis="index").set_caption(
        "Which arms were never detectably beaten: per arm, over the target and SLO-level pairs it ran that rank "
        "anything, on how many its capacity was the highest or one the trials cannot tell from it (the which-setting "
        "table's best and tied), and on how many it was detectably below the best (its capacity ratio's interval "
        "under 1, at the corrected confidence). With three trials a tie is weak evidence: a wide interval ties an arm "
        "whose mean is far below the best. " + ("Left out: " + ", ".join(nothing) + ". " if nothing else "")
        + "Sources: " + sources)
    yield Glue("capacity_standing", held)
    yield Show(held)


def _goals(points: pd.DataFrame, table: pd.DataFrame, trials: pd.DataFrame, sources: str) -> Iterator[Item]:
    slo_goal = capacity_goal.goal_table(table, trials)
    yield Glue("capacity_slo_goal", Plain(capacity_goal.sentence(slo_goal)))
    if len(slo_goal):
        yield Show(slo_goal.style.hide(axis="index").set_caption(
            "The SLO controller's capacity goal: dlfp-slo's capacity over each target's best fixed budget and over "
            "the best single budget across targets: the geometric mean of the paired per-trial ratios and its "
            f"interval ({slo_goal.confidence.iloc[0]:.2%} each: Bonferroni over the pairs ranked; censored: a trial "
            "only bounded, entered at its bound), and the verdict the interval gives (within 10%: low end at least "
            "0.9; short: high end under it). Pairs that rank nothing are left out."))
    declared = controller_goal.load_goal()
    judged = controller_goal.judge(declared, table, trials, points)
    verdicts = controller_goal.verdicts(declared, judged)
    yield Glue("capacity_controller_goal", Plain(controller_goal.sentence(declared, judged, verdicts, trials)))
    yield Glue("capacity_controller_goal_settling",
               Plain(controller_goal.settling_sentence(controller_goal.settling(declared, points))))
    if len(judged):
        pairs = controller_goal.shown(declared, judged, table).style.hide(axis="index").set_caption(
            "The controller goal (configs/controller-goal.yaml) per arm and pair: capacity over the target's best "
            f"fixed budget (ratio of means; paired log-ratio interval at {judged.confidence.iloc[0]:.2%}, Bonferroni "
            "over the pairs ranked), over the best single budget, as a share of the bound, and P99 TTFT at the "
            "highest rate swept at or below the capacity against the lowest among arms meeting the ITL SLO there "
            "(mean over trials); each criterion yes, no or cannot tell. Pairs that rank nothing are left out. "
            "Sources: " + sources)
        yield Glue("capacity_controller_goal_pairs", pairs)
        yield Show(pairs)
    else:  # Beyond the paper pastes the table: say why there is none
        yield Glue("capacity_controller_goal_pairs", pd.DataFrame(
            {"controller goal": ["no target and SLO-level pair ranks anything (fewer than two trials in which any "
                                 "arm met the SLOs)"]}).style.hide(axis="index"))


def _fits(here: Path, running: dict[str, str], sources: str) -> Iterator[Item]:
    rows = slo_fit.study_rows(here)
    fit = slo_fit.fit_table(rows[~rows.target.isin(running)] if len(rows) else rows)
    fit_styled = fit.style.hide(axis="index").set_caption(
        "What the SLO controller's step-cost fit got wrong, from its step logs (every trial and load of dlfp-slo): "
        "the steps it sized, and the share whose prefill filled the chunk, where the fit's prediction is compared "
        "with the step's completion cadence (median error: which way the fit leans; 90% of errors within: how far "
        "a step strays); the share of sized steps that overran their budget by more than "
        f"{slo_fit.OVERRUN:.0%}, of steps with no feasible chunk (a budget below the predicted decode floor), and "
        "where the feedback held the budget. Sources: " + sources)
    yield Glue("capacity_slo_fit", fit_styled)
    yield Show(fit_styled)
    features = fit_features.feature_table(fit_features.feature_rows(here))
    features = features[~features.target.str.split(" ").str[0].isin(running)] if len(features) else features
    features_styled = features.style.hide(axis="index").set_caption(
        "What the fit misses: the SLO controller's predictions (online fit, as run) and least-squares fits of "
        "every completed step of its units, in sample, with the five features they ran with and with a candidate "
        "added (a fixed cost of any step that carries prefill, the chunk squared, decodes times that indicator), "
        "judged on the steps it sized with the chunk filled. An in-sample fit is the best fixed coefficients can "
        "do: a feature that does not shrink the error there cannot online. Sources: " + sources)
    yield Glue("capacity_fit_features", features_styled)
    yield Show(features_styled)
