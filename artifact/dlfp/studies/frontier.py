"""DLFP against fixed chunks: the latency frontier a fixed token budget traces, and regret.

A fixed prefill chunk trades P99 TTFT (big chunks prefill fast) against P99 ITL (small chunks
stall decodes less); sweeping vLLM's ``max_num_batched_tokens`` traces that trade-off for one
target (model, hardware, load). The question a reviewer asks of an adaptive controller is how far
it lands from that frontier, and whether one set of its defaults lands near it on every target
where no single fixed chunk does. Two measures, both from the arms table of a run:

* *regret at equal TTFT*: an arm's P99 ITL minus the best P99 ITL of any fixed-budget arm whose
  P99 TTFT is no larger, within :data:`TTFT_TOLERANCE`. An arm faster to first token than every
  fixed budget is held against the fastest: no slower between tokens, it dominates that budget
  (regret at most zero, a hit); slower, it trades ITL for TTFT beyond the frontier's end and is
  *not comparable* (NaN: neither a hit nor a miss);
* *TTFT excess under the ITL objective*: among the arms whose P99 ITL meets the run's ITL
  objective, the least P99 TTFT is the best achievable; an arm that meets the objective pays its
  TTFT above that, one that misses it is marked so. A fixed budget that is best on one target and
  misses the objective on another is the failure an adaptive controller is meant to avoid.

Pure pandas over :func:`dlfp.analysis.tables.arms_table` rows; the frontier itself
(:func:`~dlfp.analysis.pareto.frontier`, ``ITL``, ``TTFT``) lives with the figure that draws it.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dlfp.analysis.families import family, kind
from dlfp.analysis.pareto import ITL, TTFT
from dlfp.analysis.pareto import frontier as frontier  # the study's public name, kept
from dlfp.analysis.runs import RunData, stall_threshold_s
from dlfp.analysis.tables import arms_table
from dlfp.trials.arms import REFERENCE

REGRET = "ITL regret vs best fixed budget at equal TTFT (ms)"
TTFT_TOLERANCE = 0.05
"""A fixed budget is *at equal TTFT* with an arm when its P99 TTFT is at most this share above the
arm's. Mean P99 TTFTs of two trials differ by a few percent between arms that prefill alike (on the
modeled A100 with Qwen3-8B every arm lies within 278-301 ms), so a strict comparison would credit
an arm for noise: 3 ms less TTFT would excuse any ITL."""
GOAL_PCT = 10.0
"""The study's goal: an adaptive controller within this share of the best fixed chunk's P99 ITL
at equal P99 TTFT (issue 11)."""
EXCESS = "TTFT excess over best arm meeting it (%)"
""":func:`regret`'s column of what an arm meeting the ITL objective pays in P99 TTFT (NaN where it misses)."""
TTFT_GOAL_PCT = 10.0
"""The SLO controller's goal in the baselines (issue 21): meet the run's ITL objective with P99 TTFT
at most this share above the best arm that meets it."""
NEAR_PCT = 100 * TTFT_TOLERANCE
"""A verdict sentence names a target as *near the line* where the number it judges lies within this
many percentage points of the goal's line (or this share of the ITL objective): two trials' means of
arms that prefill alike differ by about as much (:data:`TTFT_TOLERANCE`), so a rerun may put it on
the other side. The verdicts are on the runs' means; this says which of them are that close."""


def regret(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (arms_table rows with a ``kind`` column and the run's ``itl objective (ms)``) with
    regret at equal TTFT and TTFT excess under the ITL objective (module docstring)."""
    fixed = table[table.kind == "fixed budget"]
    out = table.copy()

    def at_equal_ttft(row: Any) -> float:
        eligible = fixed[fixed[TTFT] <= row[TTFT] * (1 + TTFT_TOLERANCE)]
        if len(eligible):
            return float(row[ITL] - eligible[ITL].min())
        ranked = fixed.dropna(subset=[TTFT, ITL]).sort_values(TTFT, kind="stable")
        if ranked.empty:
            return math.nan
        fastest = float(ranked[ITL].iloc[0])  # the arm is faster than every fixed budget: does it dominate this one?
        return float(row[ITL] - fastest) if row[ITL] <= fastest else math.nan

    out[REGRET] = out.apply(at_equal_ttft, axis=1)
    meets = out[ITL] <= out["itl objective (ms)"]
    best_ttft = out.loc[meets, TTFT].min() if meets.any() else math.nan
    out["meets ITL objective"] = meets
    out[EXCESS] = [
        100 * (t / best_ttft - 1) if ok and not math.isnan(best_ttft) else math.nan
        for t, ok in zip(out[TTFT], meets, strict=True)]
    return out


def run_table(run: RunData) -> pd.DataFrame:
    """A baselines run's arms table with each arm's kind and family
    (:mod:`dlfp.analysis.families`), the ITL objective, and :func:`regret`."""
    t = arms_table(run)
    t["kind"] = [kind(run.config.arm(a)) for a in t.arm]
    t["family"] = [family(a, run.config.arm(a)) for a in t.arm]
    t["itl objective (ms)"] = stall_threshold_s(run.config) * 1e3
    return regret(t)


def target_summary(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per arm name, across targets: does it meet the ITL objective, and at what TTFT excess?

    The answer to "does one set of DLFP defaults land near the frontier on every target, where
    no single fixed chunk does?" is read off this table: one row per arm, one column per target;
    "not run" where a target's run lacks the arm (a run made before the arm joined the plan).
    """
    cells: dict[str, dict[str, str]] = {}
    for target, t in tables.items():
        for _, row in t.iterrows():
            text = (f"{row[EXCESS]:+.0f}% TTFT" if row["meets ITL objective"]
                    else f"misses ITL ({row[ITL]:.0f} > {row['itl objective (ms)']:.0f} ms)")
            cells.setdefault(row["arm"], {})[target] = text
    order = sorted(cells, key=lambda a: (a != REFERENCE, a))
    return pd.DataFrame([{"arm": a, **{target: cells[a].get(target, "not run") for target in tables}}
                         for a in order]).set_index("arm")


def reduction_cell(mean: float, lo: float, hi: float) -> str:
    """A paired reduction in one table cell: "60.5% (37.5 to 83.5)", the interval omitted where there
    is none (one trial); "no value" where the run has no mean (an arm without a P99 in some trial)."""
    if math.isnan(mean):
        return "no value"
    return f"{mean:.1f}%" + ("" if math.isnan(lo) else f" ({lo:.1f} to {hi:.1f})")


def effects_table(tables: dict[str, pd.DataFrame], arms: list[str]) -> pd.DataFrame:
    """Per target (rows, in ``tables`` order) and arm (columns, ``arms``): the arm's P99 ITL reduction
    against stock with its paired 95% interval (:func:`reduction_cell`); "not run" where a target's
    run lacks the arm. The enumeration a paragraph of glued values would otherwise carry."""
    cells = {}
    for target, t in tables.items():
        by_arm = t.set_index("arm")
        cells[target] = {a: reduction_cell(*(float(by_arm.at[a, c]) for c in
                                              ("ITL reduction vs stock (%)", "ITL CI lo (%)", "ITL CI hi (%)")))
                         if a in by_arm.index else "not run" for a in arms}
    return pd.DataFrame.from_dict(cells, orient="index", columns=arms).rename_axis("target")


def relative_regret(table: pd.DataFrame) -> pd.Series:
    """Regret at equal TTFT as a percentage of the best fixed budget's P99 ITL there, by arm name;
    NaN where the arm is *not comparable* (faster to first token than every fixed budget and slower
    between tokens than the fastest: neither a hit nor a miss of the goal)."""
    best_fixed = table[ITL] - table[REGRET]
    pct = (100 * table[REGRET] / best_fixed).where(table[REGRET].notna(), math.nan)
    return pd.Series(pct.to_numpy(dtype=float), index=table["arm"])


def _worst(pcts: dict[str, float]) -> float:
    """The largest comparable relative regret over targets (NaN, not comparable, is skipped: ``max``
    over values holding NaN depends on their order); ``inf`` when no target is comparable."""
    return max((p for p in pcts.values() if not math.isnan(p)), default=math.inf)


def _closest(pct: dict[str, dict[str, float]], hits: dict[str, list[str]]) -> str:
    """The adaptive arm closest to the goal: most hits, then the smallest worst comparable regret,
    then the name (so the choice never depends on dict order)."""
    return min(pct, key=lambda a: (-len(hits[a]), _worst(pct[a]), a))


def _named(target: str, kinds: dict[str, str] | None) -> str:
    """A target as a verdict sentence names it: with its source ("measured" or "simulated") where
    known, so a CPU number never reads as a modeled one beside it."""
    return f"{target} ({kinds[target]})" if kinds and target in kinds else target


def _closest_clause(arm: str, pcts: dict[str, float], hits: list[str], kinds: dict[str, str] | None) -> str:
    """How the closest arm fares: on how many targets it hits, on how many it is not comparable,
    and its largest gap (or that it is missing from a run)."""
    text = f"the closest, {arm}, does on {len(hits)} of {len(pcts)}"
    near = {t: p for t, p in pcts.items() if abs(p - GOAL_PCT) <= NEAR_PCT}  # NaN and inf are never near
    if near:
        text += " (near the line on " + ", ".join(f"{_named(t, kinds)}: {p:.0f}%" for t, p in near.items()) + ")"
    blind = [t for t, p in pcts.items() if math.isnan(p)]
    if blind:
        text += (f" (not comparable on {len(blind)}: faster to first token than every fixed budget, slower "
                 "between tokens than the fastest)")
    comparable = {t: p for t, p in pcts.items() if not math.isnan(p)}
    if not comparable:
        return text
    worst = max(comparable, key=comparable.__getitem__)  # no NaN left: the first of equal gaps, in run order
    gap = "is not in the run" if math.isinf(comparable[worst]) else f"is {comparable[worst]:.0f}% above it"
    return f"{text} and {gap} on {_named(worst, kinds)}"


def goal(tables: dict[str, pd.DataFrame], targets: tuple[str, ...], kinds: dict[str, str] | None = None) -> str:
    """The study's question in one sentence, from the runs: which adaptive arm (one set of
    defaults) lands within :data:`GOAL_PCT` of the best fixed budget at equal TTFT on every target,
    and which fixed budget meets the ITL objective on every target; naming the targets not run. A
    target where an arm is not comparable (:func:`relative_regret`) is no hit for it. ``kinds``
    (target -> "measured" or "simulated") labels the target the sentence names with its source."""
    missing = [t for t in targets if t not in tables]
    ran = [t for t in targets if t in tables]
    if not ran:
        return "not testable: no baselines run"
    scope = f"on the {len(ran)} targets run" + (f" (not run: {', '.join(missing)})" if missing else "") + \
        ", on the runs' means"
    adaptive = sorted({a for t in ran for a in tables[t].loc[tables[t].kind == "adaptive", "arm"]})
    regrets = {t: relative_regret(tables[t]) for t in ran}
    pct = {a: {t: float(regrets[t].get(a, math.inf)) for t in ran} for a in adaptive}  # inf: not in that run
    hits = {a: [t for t in ran if not math.isnan(pct[a][t]) and pct[a][t] <= GOAL_PCT] for a in adaptive}
    winners = [a for a in adaptive if len(hits[a]) == len(ran)]
    if winners:
        text = f"{', '.join(winners)} lands within {GOAL_PCT:.0f}% of the best fixed budget at equal TTFT {scope}"
        near = [f"{w} on {_named(t, kinds)}: {pct[w][t]:.0f}%" for w in winners for t in ran
                if abs(pct[w][t] - GOAL_PCT) <= NEAR_PCT]
        if near:
            text += f" (near the line: {', '.join(near)})"
    elif adaptive:
        best = _closest(pct, hits)
        text = (f"no adaptive controller lands within {GOAL_PCT:.0f}% of the best fixed budget at equal TTFT "
                f"{scope}; {_closest_clause(best, pct[best], hits[best], kinds)}")
    else:
        return f"not testable: no adaptive arm {scope}"
    rows = {t: tables[t].set_index("arm") for t in ran}
    singles = single_budgets({t: tables[t] for t in ran})
    fixed = sorted({a for t in ran for a in tables[t].loc[tables[t].kind == "fixed budget", "arm"]})
    everywhere = [a for a in fixed if all(bool(rows[t]["meets ITL objective"].get(a, False)) for t in ran)]
    single = [a for a in everywhere if a in singles]
    derived = [a for a in everywhere if a not in single]
    text += ("; single fixed budgets that meet the ITL objective on every one of them: " + ", ".join(single)
             if single else "; no single fixed budget meets the ITL objective on every one of them")
    if derived:
        text += f" (budgets derived per target that do: {', '.join(derived)})"
    return text + "."


def objective_goal(tables: dict[str, pd.DataFrame], arm: str, targets: tuple[str, ...],
                   kinds: dict[str, str] | None = None) -> str:
    """Does ``arm`` meet the ITL objective on every target, paying at most :data:`TTFT_GOAL_PCT` P99 TTFT
    over the best arm that meets it? One sentence: the verdict, the counts, and each target where it
    misses the objective, pays more, or lacks the arm. Judged on the runs' means (two trials in the
    baselines), so a target near either line (:data:`NEAR_PCT`) may fall the other way on a rerun; the
    sentence names those targets, or says there are none.
    ``kinds`` (target -> "measured" or "simulated") labels each target the sentence names with its source."""
    ran = [t for t in targets if t in tables]
    if not ran:
        return "not testable: no baselines run"
    rows = {t: tables[t].set_index("arm") for t in ran}
    judged = [t for t in ran if arm in rows[t].index]
    if not judged:
        return f"not testable: no run has {arm}"
    misses = [t for t in judged if not bool(rows[t].at[arm, "meets ITL objective"])]
    excess = {t: float(rows[t].at[arm, EXCESS]) for t in judged if t not in misses}
    over = {t: e for t, e in excess.items() if e > TTFT_GOAL_PCT}
    holds = len(judged) == len(targets) and not misses and not over
    text = (f"the goal for {arm} (the ITL objective met on every target with at most {TTFT_GOAL_PCT:.0f}% P99 TTFT "
            f"over the best arm meeting it) {'holds' if holds else 'does not hold'} on the runs' means: it meets "
            f"the objective on {len(judged) - len(misses)} of {len(judged)} targets, within "
            f"{TTFT_GOAL_PCT:.0f}% on {len(excess) - len(over)}")
    if misses:
        text += "; it misses it on " + ", ".join(
            f"{_named(t, kinds)}: {rows[t].at[arm, ITL]:.0f} > {rows[t].at[arm, 'itl objective (ms)']:.0f} ms"
            for t in misses)
    if over:
        text += "; it pays " + ", ".join(f"{e:+.0f}% on {_named(t, kinds)}" for t, e in over.items())
    absent = [t for t in targets if t not in judged]
    if absent:
        text += f"; not run on {', '.join(absent)}"
    near = [f"{_named(t, kinds)} ({e:+.0f}% TTFT)" for t, e in excess.items() if abs(e - TTFT_GOAL_PCT) <= NEAR_PCT]
    for t in judged:
        itl, objective = rows[t].at[arm, ITL], rows[t].at[arm, "itl objective (ms)"]
        if abs(itl / objective - 1) <= NEAR_PCT / 100:
            near.append(f"{_named(t, kinds)} (ITL {itl:.3g} against {objective:.3g} ms)")
    text += (f"; near a line (within {NEAR_PCT:.0f} points), where a rerun may fall the other way: {', '.join(near)}"
             if near else f"; no target lies within {NEAR_PCT:.0f} points of either line")
    return text + "."


def single_budgets(tables: dict[str, pd.DataFrame]) -> set[str]:
    """The fixed-budget arms with one setting on every target that runs them (stock and the
    ``max_num_batched_tokens`` sweep), as against budgets derived per target (a Sarathi-style budget
    from each target's own step costs): only the former is one setting a deployer could carry over."""
    settings: dict[str, set[str]] = {}
    for t in tables.values():
        for arm, setting in t.loc[t.kind == "fixed budget", ["arm", "settings"]].itertuples(index=False):
            settings.setdefault(arm, set()).add(setting)
    return {a for a, seen in settings.items() if len(seen) == 1}


def _spreads(tables: dict[str, pd.DataFrame]) -> dict[str, tuple[float, float]]:
    """Per target, the least and largest P99 TTFT over the single fixed budgets (:func:`single_budgets`)."""
    singles = single_budgets(tables)
    out = {}
    for target, t in tables.items():
        ttft = t.loc[t.arm.isin(singles), TTFT].dropna()
        if len(ttft):
            out[target] = (float(ttft.min()), float(ttft.max()))
    return out


def ttft_spread(tables: dict[str, pd.DataFrame]) -> str:
    """Per target, the range of P99 TTFT over the single fixed budgets (:func:`single_budgets`): what a
    small chunk costs in time to first token there, which decides how much room an adaptive chunk has.
    A budget derived per target is left out: on the CPU engine it is far below the sweep's smallest."""
    parts = [f"{target} {lo:.0f}-{hi:.0f} ms ({100 * (hi / lo - 1):.0f}% apart)"
             for target, (lo, hi) in _spreads(tables).items()]
    return "; ".join(parts) if parts else "no baselines run"


def ttft_premise(tables: dict[str, pd.DataFrame], kinds: dict[str, str]) -> str:
    """Does the study's premise hold, that a small chunk costs little TTFT on the CPU engine and much on
    a GPU? It holds where every measured (CPU) target's TTFT spread over the single fixed budgets
    (:func:`ttft_spread`) is below every simulated one's, fails where every measured spread is above
    them, and is mixed otherwise. ``kinds``: target -> "measured" or "simulated"."""
    pct = {t: 100 * (hi / lo - 1) for t, (lo, hi) in _spreads(tables).items()}
    measured = [p for t, p in pct.items() if kinds.get(t) == "measured"]
    simulated = [p for t, p in pct.items() if kinds.get(t) == "simulated"]
    if not measured or not simulated:
        return "not testable: it needs a measured and a simulated baselines run"

    def span(v: list[float]) -> str:
        lo, hi = f"{min(v):.0f}%", f"{max(v):.0f}%"
        return lo if lo == hi else f"{lo[:-1]}-{hi}"

    if max(measured) < min(simulated):
        verdict = "holds: the measured spread is below every simulated one"
    elif min(measured) > max(simulated):
        verdict = "does not hold: the measured spread is above every simulated one"
    else:
        verdict = "is mixed: the measured and simulated spreads overlap"
    return f"the premise {verdict} ({span(measured)} measured, {span(simulated)} simulated)"
