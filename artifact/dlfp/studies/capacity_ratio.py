"""One arm's capacity against another's, trial by trial: a ratio interval that censoring cannot invert.

A capacity sweep measures each trial's capacity only inside its sweep: a trial that fails the SLOs at
the lowest rate has a capacity somewhere in ``[0, lowest rate]`` (censored *below*), one that meets
them at the top rate one of at least the top rate (*above*). Entering such a trial as a number into a
paired t test of differences did two wrong things: a capacity of 0 is a point far from the others, so a
catastrophic trial *widened* the interval and made an arm harder to flag, and a difference interval of
a ratio of capacities reached below zero. Here:

* each trial's ratio is taken on the log scale, ``log(arm / reference)`` (a ratio interval is then a
  ratio, positive, and symmetric in which arm is on top);
* a censored trial is an interval ``[L, U]`` of log ratios, from its bracket (``log 0 = -inf`` below,
  ``+inf`` above); the interval's lower end is built on the trials' ``L``, its upper end on their ``U``,
  so a trial enters at the end of its bracket that favours the conclusion *against* which that end is
  read (an arm is called below the reference only if it is below with every censored trial at its most
  favourable bound), and the spread comes from the trials measured as values only
  (:func:`log_ratio_interval`): lowering a censored trial's bound can only lower the upper end. An end
  that some trial leaves unbounded is unbounded;
* the interval's confidence is set by the caller: :func:`family_confidence` corrects for the number of
  target and SLO-level pairs judged (Bonferroni), since a statement such as "never detectably beaten"
  is made across all of them at once.

Pure arithmetic (SciPy's t quantile).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

ALPHA = 0.05
"""The family-wise error rate the which-setting and goal statements are made at."""


def family_confidence(pairs: int, alpha: float = ALPHA) -> float:
    """Each interval's confidence so that ``pairs`` of them hold together with probability ``1 - alpha``
    (Bonferroni; 95% for one pair)."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise ValueError(f"pairs = {pairs!r}: allowed a positive number of comparisons")
    return 1 - alpha / pairs


def trial_bounds(capacity: float, censored: str, bracket_high: float) -> tuple[float, float]:
    """A trial's capacity as an interval (req/s): a point where the sweep found it, ``[0, lowest rate]``
    where the lowest rate already failed (``bracket_high`` is that rate), ``[top rate, inf)`` where the top
    rate still met the SLOs."""
    if censored == "none":
        if not capacity > 0:
            raise ValueError(f"capacity = {capacity!r} found inside the sweep: a sweep's capacity is above 0")
        return capacity, capacity
    if censored == "below":
        return 0.0, bracket_high
    if censored == "above":
        return capacity, math.inf
    raise ValueError(f"censored = {censored!r}: allowed none, below or above")


def _log(x: float) -> float:
    return -math.inf if x <= 0 else math.inf if math.isinf(x) else math.log(x)


def trial_log_ratio(arm: tuple[float, float], ref: tuple[float, float]) -> tuple[float, float]:
    """``[L, U]``: the log ratios one trial allows, from each capacity's interval."""
    lo = -math.inf if arm[0] <= 0 or math.isinf(ref[1]) else _log(arm[0]) - _log(ref[1])
    hi = math.inf if math.isinf(arm[1]) or ref[0] <= 0 else _log(arm[1]) - _log(ref[0])
    return lo, hi


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """``arm / reference`` over trials: the geometric mean ratio (NaN where a censored trial leaves it a
    bound), and the interval's ends as ratios (0 and inf where unbounded)."""

    estimate: float
    lo: float
    hi: float
    n: int
    censored: int
    """Trials whose ratio is a bound, not a value."""
    confidence: float

    def below(self, threshold: float = 1.0) -> bool:
        """Detectably below ``threshold``: the whole interval lies under it."""
        return self.n >= 2 and self.hi < threshold

    def at_least(self, threshold: float) -> bool:
        """Detectably at or above ``threshold``."""
        return self.n >= 2 and self.lo >= threshold

    def words(self) -> str:
        """``0.52 (0.31-0.86)``; a censored estimate as its range; '' without trials."""
        if self.n == 0:
            return ""
        ends = " (no interval)" if math.isnan(self.lo) else f" ({_num(self.lo)}-{_num(self.hi)})"
        if math.isnan(self.estimate):
            return f"censored{ends}"
        return f"{_num(self.estimate)}{ends}"


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.2f}" if x < 100 else f"{x:.3g}"


def log_ratio_interval(arm: Sequence[tuple[float, float]], ref: Sequence[tuple[float, float]],
                       confidence: float) -> RatioInterval:
    """``arm`` against ``ref``, paired trial by trial (each a capacity interval, :func:`trial_bounds`).

    The interval's ends are the means of the trials' ``L`` and of their ``U`` (module docstring) -/+ the t
    half-width; the spread is estimated from the trials whose ratio is a value (``n - 1`` degrees of freedom
    become ``points - 1``), because a censored trial's value is unknown and its bound says nothing about the
    spread: a trial that failed at the lowest rate moves the upper end down by its bound, instead of widening
    the interval as an outlier would. With fewer than two values there is no spread to estimate, and no
    interval."""
    if len(arm) != len(ref):
        raise ValueError(f"{len(arm)} arm trials against {len(ref)} reference trials: pair them first")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}: allowed (0, 1)")
    pairs = [trial_log_ratio(a, r) for a, r in zip(arm, ref, strict=True)]
    n = len(pairs)
    values = np.array([lo for lo, hi in pairs if lo == hi], dtype=float)
    estimate = math.exp(float(values.mean())) if n and len(values) == n else math.nan
    if n < 2 or len(values) < 2:
        return RatioInterval(estimate, math.nan, math.nan, n, n - len(values), confidence)
    half = float(sps.t.ppf(1 - (1 - confidence) / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(n))
    lows, highs = [p[0] for p in pairs], [p[1] for p in pairs]
    lo = -math.inf if math.isinf(min(lows)) else float(np.mean(lows)) - half
    hi = math.inf if math.isinf(max(highs)) else float(np.mean(highs)) + half
    return RatioInterval(estimate, math.exp(lo), math.exp(hi), n, n - len(values), confidence)


def compare(trials: pd.DataFrame, arm: str, ref: str, confidence: float) -> RatioInterval:
    """``arm`` against ``ref`` in one target and level's trial capacities
    (:func:`dlfp.studies.capacity.trial_capacities`), paired by trial."""
    bounds = {name: {int(r.trial): trial_bounds(float(r.capacity_rps), str(r.censored), float(r.bracket_high_rps))
                     for r in trials[trials.arm == name].itertuples()} for name in (arm, ref)}
    both = sorted(set(bounds[arm]) & set(bounds[ref]))
    return log_ratio_interval([bounds[arm][k] for k in both], [bounds[ref][k] for k in both], confidence)
