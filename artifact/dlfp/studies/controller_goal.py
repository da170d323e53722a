"""The controller goal of issue 39 as a declared file (``configs/controller-goal.yaml``): read and
validated here, before any run that judges it, so the goal cannot move with the result; and judged here
from a capacity run's tables.

Each criterion is a statement over the capacity study's target and SLO-level pairs (the file's comments
say what each means); :func:`load_goal` refuses a file that is missing a criterion, names one it does
not know, or sets a share or ratio outside its range, and reads the held-out workloads (their pairs judged
alone as well, :func:`held_out_sentence`) with the plug-in's defaults as they stood when they were named.
:func:`judge` gives each judged arm's standing on each pair, criterion by criterion, and :func:`verdicts`
each criterion's verdict per arm: *met*, *not met*, or *undecided* where a pair it needs cannot be read (a
censored or single-trial ratio, no rate at or below the capacity). A pair counts only where its trials rank anything
(:func:`dlfp.studies.setting.ranks`); the others are named, not counted. Every criterion can come out
either way: each is a comparison of a measured value with the file's number.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dlfp.analysis.capacity_tables import column
from dlfp.control.fields import number, refuse_invalid
from dlfp.control.params import parse_params
from dlfp.paths import CONFIGS
from dlfp.studies.capacity_ratio import compare, family_confidence
from dlfp.studies.setting import FIXED_BUDGET, best_single_budget, judged_pairs, ranks

GOAL_FILE = CONFIGS / "controller-goal.yaml"


def _ratio(doc: str) -> Any:
    """A capacity ratio of the goal: above 0, at most 10 (every criterion is set in the goal file)."""
    return number(None, "x", 0, 10, doc, lo_open=True, integer=False)


def _share(doc: str) -> Any:
    """A share of pairs or a relative margin: above 0, at most 1."""
    return number(None, "-", 0, 1, doc, lo_open=True, integer=False)


def _refuse(key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{key} = {value!r} is outside {allowed}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PerTargetBudget:
    point_at_least: float = _ratio("The least mean capacity ratio to the target's own best fixed budget.")
    interval_low_at_least: float = _ratio("The least lower end of that log ratio's interval.")
    confidence: float = number(None, "-", 0.5, 1, "The interval's confidence, corrected for the pairs judged.",
                               lo_open=True, integer=False)

    def __post_init__(self) -> None:
        refuse_invalid(self, _refuse)


@dataclass(frozen=True, slots=True, kw_only=True)
class SingleBudget:
    point_at_least: float = _ratio("The least mean ratio to the best single fixed budget across targets.")
    share_of_pairs: float = _share("On at least this share of the pairs.")

    def __post_init__(self) -> None:
        refuse_invalid(self, _refuse)


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    point_at_least: float = _ratio("The least mean capacity as a share of the pair's capacity bound.")
    share_of_pairs: float = _share("On at least this share of the pairs.")

    def __post_init__(self) -> None:
        refuse_invalid(self, _refuse)


@dataclass(frozen=True, slots=True, kw_only=True)
class TTFTAtCapacity:
    within: float = _share("P99 TTFT at most (1 + within) x the best among the arms that meet the ITL SLO there.")

    def __post_init__(self) -> None:
        refuse_invalid(self, _refuse)


@dataclass(frozen=True, slots=True)
class HeldOut:
    """The workloads the controllers were not developed on (the goal file's comments say why each): their
    pairs are judged alone as well, and ``defaults`` are the plug-in's parameter defaults when they were
    named (a test holds :class:`dlfp.control.params.DLFPParams` to them)."""

    targets: tuple[str, ...]
    defaults: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Goal:
    """The declared goal: the arms judged, the four criteria and the held-out workloads."""

    arms: tuple[str, ...]
    per_target_budget: PerTargetBudget
    single_budget: SingleBudget
    bound: Bound
    ttft_at_capacity: TTFTAtCapacity
    held_out: HeldOut


_CRITERIA = {"per_target_budget": PerTargetBudget, "single_budget": SingleBudget, "bound": Bound,
             "ttft_at_capacity": TTFTAtCapacity}


def load_goal(path: Path = GOAL_FILE) -> Goal:
    """The goal in ``path``, validated (module docstring); a ValueError names what is wrong."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) != {"arms", "criteria", "held_out"}:
        raise ValueError(f"{path}: needs exactly the keys 'arms', 'criteria' and 'held_out'")
    arms = raw["arms"]
    if not (isinstance(arms, list) and arms and all(isinstance(a, str) and a for a in arms)):
        raise ValueError(f"{path}: 'arms' must list arm names, got {arms!r}")
    criteria = raw["criteria"]
    if not isinstance(criteria, dict) or set(criteria) != set(_CRITERIA):
        raise ValueError(f"{path}: 'criteria' must be exactly {sorted(_CRITERIA)}, got {sorted(criteria or {})}")
    built: dict[str, Any] = {}
    for name, cls in _CRITERIA.items():
        given = criteria[name]
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(given, dict) or set(given) != fields:
            raise ValueError(f"{path}: criterion {name!r} needs exactly {sorted(fields)}, got {given!r}")
        try:  # each bound declared once, on the criterion's class
            built[name] = cls(**given)
        except ValueError as exc:
            raise ValueError(f"{path}: {name}.{exc}") from None
    return Goal(arms=tuple(arms), **built, held_out=_held_out(path, raw["held_out"]))


def _held_out(path: Path, raw: Any) -> HeldOut:
    if not isinstance(raw, dict) or set(raw) != {"targets", "defaults"}:
        raise ValueError(f"{path}: 'held_out' needs exactly the keys 'targets' and 'defaults', got {raw!r}")
    targets = raw["targets"]
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets)):
        raise ValueError(f"{path}: held_out.targets must list capacity-study targets, got {targets!r}")
    defaults = raw["defaults"]
    try:
        parse_params(defaults)  # the plug-in's own check: a mapping of its parameters, each valid
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: held_out.defaults: {exc}") from None
    return HeldOut(tuple(targets), dict(defaults))


MET, NOT_MET, UNDECIDED = "met", "not met", "undecided"
YES, NO, UNREAD = "yes", "no", "cannot tell"
"""A pair's standing on one criterion: passes, fails, or cannot be read from this run."""


def _ttft_at_capacity(points: pd.DataFrame, arm: str, capacity: float) -> tuple[float, float, float, str]:
    """At the highest rate swept at or below ``capacity`` (trials' means): that rate, ``arm``'s P99 TTFT
    (ms), the lowest P99 TTFT among the arms that meet the ITL SLO there and which arm that is (NaN and ''
    where the rate or such an arm is missing). A point counts where every trial of its arm ran it: a sweep stops
    above an arm's failure (:mod:`dlfp.trials.stopping`), and a mean over the trials that went on is biased."""
    ran = points.groupby(["arm", "load"])["trial"].transform("nunique")
    points = points[ran == points.groupby("arm")["trial"].transform("nunique")]
    means = points.groupby(["arm", "load"], sort=False)[["rate_rps", "itl_p99_ms", "ttft_p99_ms", "itl_slo_ms"]].mean()
    own = means.loc[arm] if arm in means.index.get_level_values(0) else means.iloc[:0]
    below = own[own.rate_rps <= capacity * (1 + 1e-9)]
    if below.empty or not capacity > 0:
        return math.nan, math.nan, math.nan, ""
    load = below.rate_rps.idxmax()
    there = means.xs(load, level="load")
    meeting = there[there.itl_p99_ms <= there.itl_slo_ms]
    if meeting.empty:
        return float(below.rate_rps.max()), float(own.loc[load, "ttft_p99_ms"]), math.nan, ""
    best = str(meeting.ttft_p99_ms.idxmin())
    return (float(below.rate_rps.max()), float(own.loc[load, "ttft_p99_ms"]), float(meeting.ttft_p99_ms.min()),
            best)


def _standing(ok: bool | None) -> str:
    return UNREAD if ok is None else YES if ok else NO


def judge(goal: Goal, table: pd.DataFrame, trials: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Per arm of ``goal`` and target and SLO level that ranks its arms and ran that arm beside a fixed
    budget: each criterion's measured value and the pair's standing on it (:data:`YES`, :data:`NO`,
    :data:`UNREAD`). ``table`` is the capacity table, ``trials`` each trial's capacity, ``points`` every
    point of the sweep (:mod:`dlfp.studies.capacity`)."""
    single = best_single_budget(table)
    confidence = family_confidence(judged_pairs(trials), alpha=1 - goal.per_target_budget.confidence)
    crit = goal.per_target_budget
    rows = []
    for (target, level), g in table.groupby(["target", "level"], sort=False):
        pair = trials[(trials.target == target) & (trials.level == level)]
        fixed = g[g.arm.str.startswith(FIXED_BUDGET)]
        if fixed.empty or not ranks(pair):
            continue
        by_arm = g.set_index("arm")
        caps = by_arm.capacity_rps
        best = str(fixed.sort_values("capacity_rps", ascending=False, kind="stable").arm.iloc[0])
        for arm in goal.arms:
            if arm not in caps.index:
                continue
            own = float(caps[arm])
            vs_best = compare(pair, arm, best, confidence)
            point = own / float(caps[best]) if caps[best] > 0 else math.nan
            budget_ok: bool | None = None  # a point below the goal fails whatever the interval
            if not math.isnan(point) and point < crit.point_at_least:
                budget_ok = False
            elif not math.isnan(point) and vs_best.n >= 2 and not math.isnan(vs_best.lo):
                budget_ok = vs_best.lo >= crit.interval_low_at_least
            vs_single = own / float(caps[single]) if single in caps.index and caps[single] > 0 else math.nan
            share = float(by_arm.share_of_bound.get(arm, math.nan))
            rate, ttft, best_ttft, best_arm = _ttft_at_capacity(
                points[(points.target == target) & (points.level == level)], arm, own)
            rows.append({
                "arm": arm, "target": target, "level": level,
                "best budget": best, "vs best budget": point, "interval": vs_best.words(),
                "per_target_budget": _standing(budget_ok),
                "single budget": single or "", "vs single budget": vs_single,
                "single_budget": _standing(None if math.isnan(vs_single)
                                           else vs_single >= goal.single_budget.point_at_least),
                "share of bound": share,
                "bound": _standing(None if math.isnan(share) else share >= goal.bound.point_at_least),
                "rate for TTFT (req/s)": rate, "P99 TTFT (ms)": ttft, "lowest P99 TTFT meeting ITL (ms)": best_ttft,
                "lowest by": best_arm,
                "ttft_at_capacity": _standing(None if math.isnan(best_ttft)
                                              else ttft <= (1 + goal.ttft_at_capacity.within) * best_ttft),
                "censored trials": vs_best.censored, "confidence": confidence,
            })
    return pd.DataFrame(rows)


def settling(goal: Goal, points: pd.DataFrame, smallest: int = 3) -> pd.DataFrame:
    """How many trials the per-target comparison took to settle: per arm of ``goal`` and pair, its standing
    (:func:`judge`'s ``per_target_budget``) on the first ``n`` trials for each ``n`` from ``smallest`` to the
    most the pair ran, and ``settled_at``, the smallest ``n`` from which the standing no longer changed (NaN
    where the last one is :data:`UNREAD`). A pair that settles only at its last ``n`` might still move with
    more trials; one that settled early held through every trial added. Each ``n`` is judged as a run of that
    many trials would be (its own capacity table and family of pairs)."""
    from dlfp.studies.capacity import capacity_table, trial_capacities

    most = int(points["trial"].max()) + 1 if len(points) else 0
    standings: dict[tuple[str, str, str], dict[int, str]] = {}
    for n in range(min(smallest, most), most + 1):
        first = points[points["trial"] < n]
        judged = judge(goal, capacity_table(first), trial_capacities(first), first)
        for r in judged.itertuples():
            standings.setdefault((r.arm, r.target, r.level), {})[n] = r.per_target_budget
    ran = points.groupby(["target", "level", "arm"])["trial"].nunique()  # an arm may run fewer than the most
    rows = []
    for (arm, target, level), by_n in standings.items():
        ns = sorted(n for n in by_n if n <= max(int(ran.get((target, level, arm), 0)), min(by_n)))
        last = by_n[ns[-1]]
        settled = ns[-1]
        for n in reversed(ns):
            if by_n[n] != last:
                break
            settled = n
        rows.append({"arm": arm, "target": target, "level": level, "trials": ns[-1], "standing": last,
                     "settled_at": math.nan if last == UNREAD else settled,
                     "by_trials": ", ".join(f"{n}:{by_n[n]}" for n in ns)})
    return pd.DataFrame(rows, columns=["arm", "target", "level", "trials", "standing", "settled_at", "by_trials"])


def settling_sentence(settled: pd.DataFrame, smallest: int = 3) -> str:
    """:func:`settling` in words: from how many trials each per-target standing held, which ones changed at the
    last count (and so might still move), and which were judged on ``smallest`` trials only."""
    if settled.empty:
        return "No pair was judged, so no standing had trials to settle on."
    name = settled.arm + " on " + settled.target + " " + settled.level
    fewest = settled.trials <= smallest
    parts = []
    if fewest.any():
        parts.append(f"{int(fewest.sum())} of the {len(settled)} per-target standings rest on {smallest} trials only, "
                     "the fewest the plan runs, so a 'no' there may be a lack of trials rather than a shortfall "
                     "(`dlfp study capacity --goal-trials N` runs the goal's arms in more)")
    more = settled[~fewest]
    if len(more):
        unread = more[more.standing == UNREAD]
        read = more[more.standing != UNREAD]
        early = read[read.settled_at <= smallest]
        later = read[(read.settled_at > smallest) & (read.settled_at < read.trials)]
        last = read[read.settled_at >= read.trials]
        lo, hi = int(more.trials.min()), int(more.trials.max())
        said = [f"of the {len(more)} judged on {lo if lo == hi else f'{lo} to {hi}'} trials, "
                f"{len(early)} held from {smallest} trials on"]
        if len(later):
            said.append(f"{len(later)} settled later ("
                        + ", ".join(f"{name[i]} at {int(later.settled_at[i])}" for i in later.index) + ")")
        if len(last):
            said.append(f"{len(last)} changed at the last count, so more trials might still move them ("
                        + "; ".join(f"{name[i]}: {_history(more.by_trials[i])}" for i in last.index) + ")")
        if len(unread):
            said.append(f"{len(unread)} cannot be read on the last count ({', '.join(name[unread.index])}: a capacity "
                        "censored at an end of the sweep leaves no interval, which more trials do not give)")
        parts.append("; ".join(said))
    return ". ".join(p[0].upper() + p[1:] for p in parts) + "."


def _history(by_trials: str) -> str:
    """A standing's history as :func:`settling` writes it, in words (``3:no, 4:yes`` reads 3 no, 4 yes)."""
    return ", ".join(step.replace(":", " ") for step in by_trials.split(", "))


EVERY_PAIR = ("per_target_budget", "ttft_at_capacity")
"""Criteria that must hold on every pair; the others on a share of them (their ``share_of_pairs``)."""


def verdicts(goal: Goal, judged: pd.DataFrame) -> pd.DataFrame:
    """Per arm of ``goal`` and criterion: the verdict and how many pairs passed, failed or could not be read.

    On every pair (:data:`EVERY_PAIR`): met where every pair passes, not met where one fails, else
    undecided. On a share: met where the pairs that pass already reach the share, not met where even
    every unreadable pair passing would not, else undecided. An arm that judged no pair is undecided."""
    rows = []
    for arm in goal.arms:
        mine = judged[judged.arm == arm] if len(judged) else judged
        for name in (*EVERY_PAIR[:1], "single_budget", "bound", *EVERY_PAIR[1:]):
            col = mine[name] if len(mine) else pd.Series(dtype=object)
            yes, no, unread, n = int(np.sum(col == YES)), int(np.sum(col == NO)), int(np.sum(col == UNREAD)), len(col)
            if n == 0:
                verdict = UNDECIDED
            elif name in EVERY_PAIR:
                verdict = NOT_MET if no else MET if yes == n else UNDECIDED
            else:
                need = getattr(goal, name).share_of_pairs * n
                verdict = MET if yes >= need else NOT_MET if yes + unread < need else UNDECIDED
            rows.append({"arm": arm, "criterion": name, "verdict": verdict, "pairs": n, "pass": yes, "fail": no,
                         "cannot tell": unread})
    return pd.DataFrame(rows)


def statement(goal: Goal) -> str:
    """The goal in words, from the declared file's numbers (so the text cannot drift from what is judged)."""
    b, s, u, t = goal.per_target_budget, goal.single_budget, goal.bound, goal.ttft_at_capacity
    return (f"at least {b.point_at_least:g} of each target's best fixed budget with the interval's low end at "
            f"{b.interval_low_at_least:g} on every pair, {s.point_at_least:g} of the best single budget on "
            f"{s.share_of_pairs:.0%} of the pairs, {u.point_at_least:g} of the capacity bound on "
            f"{u.share_of_pairs:.0%} of them, and P99 TTFT at capacity within {t.within:.0%} of the best arm that "
            "meets the ITL SLO there, on every pair")


def sentence(goal: Goal, judged: pd.DataFrame, verdict: pd.DataFrame, trials: pd.DataFrame) -> str:
    """The goal (:func:`statement`), the trials it was judged on, and what the verdicts say, per arm,
    counted (the tables carry the values); an arm the run does not have is named as such."""
    n = trials.groupby(["target", "level"])["trial"].nunique()
    runs = (f"{n.min()} trials per pair" if len(n) and n.min() == n.max()
            else f"{n.min()} to {n.max()} trials per pair" if len(n) else "no trials")
    parts = [f"The goal: {statement(goal)}. Judged on {runs}"]
    for arm in goal.arms:
        mine = verdict[verdict.arm == arm]
        if not len(judged) or arm not in set(judged.arm):
            parts.append(f"{arm} is not in these runs, so nothing is judged for it")
            continue
        parts.append(f"{arm}: {_said(mine)}")
    return parts[0] + ": " + "; ".join(parts[1:]) + "." + held_out_sentence(goal, judged)


def _said(mine: pd.DataFrame) -> str:
    return ", ".join(f"{r.criterion.replace('_', ' ')} {r.verdict} ({r['pass']} of {r.pairs} pairs pass)"
                     for _, r in mine.iterrows())


def held_out_sentence(goal: Goal, judged: pd.DataFrame) -> str:
    """The same criteria on the held-out targets' pairs alone (``" "`` and a sentence; empty where the goal
    names none): what the goal says on workloads the controllers were not developed on."""
    names = goal.held_out.targets
    if not names:
        return ""
    mine = judged[judged.target.isin(names)] if len(judged) else judged
    head = (f" On the held-out workloads alone ({', '.join(names)}, named in the goal file with the plug-in's "
            "defaults, which a test holds the plug-in to)")
    if not len(mine):
        return head + ": none of their pairs is judged in these runs."
    verdict = verdicts(goal, mine)
    return head + ": " + "; ".join(f"{arm}: {_said(verdict[verdict.arm == arm])}" for arm in goal.arms
                                   if arm in set(mine.arm)) + "."


def shown(goal: Goal, judged: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """:func:`judge`'s rows as the book shows them: each target named with where its numbers come from,
    each criterion's value beside its standing, headed by the goal's own numbers."""
    if judged.empty:
        return judged
    g = goal
    ttft = judged["P99 TTFT (ms)"].map("{:.0f}".format) + " vs " + judged["lowest P99 TTFT meeting ITL (ms)"].map(
        "{:.0f}".format) + " (" + judged["lowest by"] + ")"
    return pd.DataFrame({
        "arm": judged.arm, "target": [column(str(t), table) for t in judged.target], "level": judged.level,
        "vs best budget (interval)": judged["best budget"] + ": " + judged["vs best budget"].map("{:.3f}".format)
        + " (" + judged["interval"].str.split("(", n=1).str[-1].str.rstrip(")") + ")",
        f">= {g.per_target_budget.point_at_least:g}, low end >= {g.per_target_budget.interval_low_at_least:g}":
            judged["per_target_budget"],
        "vs single budget": judged["single budget"] + ": " + judged["vs single budget"].map("{:.3f}".format),
        f">= {g.single_budget.point_at_least:g}": judged["single_budget"],
        "share of bound": judged["share of bound"].map("{:.3f}".format),
        f">= {g.bound.point_at_least:g}": judged["bound"],
        "P99 TTFT at capacity vs lowest meeting ITL (ms)": ttft,
        f"within {g.ttft_at_capacity.within:.0%}": judged["ttft_at_capacity"],
    })
