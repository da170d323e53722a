"""Paired statistics over trials: per-trial reductions and confidence intervals of their mean.

Each trial runs stock and DLFP on the same seeded workload, so the per-trial reduction is the
unit of replication; intervals are over those few trial values, hence Student's t (exact for
normal data at small n) with a seeded percentile bootstrap as a distribution-free cross-check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from dlfp.trials.arms import REFERENCE


def paired_reduction(stock: float, dlfp: float) -> float:
    """Percent reduction of a latency from stock to DLFP: 100 * (stock - dlfp) / stock."""
    if not (math.isfinite(stock) and stock > 0):
        raise ValueError(f"stock={stock!r} is invalid; allowed: finite number > 0")
    if not math.isfinite(dlfp):
        raise ValueError(f"dlfp={dlfp!r} is invalid; allowed: finite number")
    return 100.0 * (stock - dlfp) / stock


def _sample(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"values has {x.size} element(s); allowed: a 1-D sample of n >= 2")
    if not np.isfinite(x).all():
        raise ValueError(f"values={x.tolist()!r} is invalid; allowed: finite numbers")
    return x


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} is invalid; allowed: (0, 1)")


def t_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): two-sided Student's t interval for the mean with n - 1 degrees of freedom."""
    _check_confidence(confidence)
    x = _sample(values)
    mean = float(x.mean())
    half = float(sps.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, n_resamples: int = 10000,
                 seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi): percentile bootstrap interval of the mean, reproducible through ``seed``."""
    _check_confidence(confidence)
    x = _sample(values)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples={n_resamples!r} is invalid; allowed: integer >= 1")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_resamples, x.size))].mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(x.mean()), float(lo), float(hi)


LARGE_PCT = 10.0
"""A reduction whose whole interval lies beyond this many percent is *large*: the claims file's line
between a benefit and none (``configs/claims.yaml`` counts an upper bound below 10% as no benefit)."""
EFFECTS = ("large benefit", "detectable benefit", "no detectable effect", "detectable harm", "large harm",
           "untested")
"""What :func:`effect_kind` can say of an interval, from best to worst, then no interval at all."""


def effect_kind(lo: float, hi: float) -> str:
    """What a paired interval of a reduction (%) says, and nothing more: a *benefit* when it lies
    above zero (*large* above :data:`LARGE_PCT`), a *harm* when below (large below -10%), *no
    detectable effect* when it spans zero, *untested* without an interval (one trial). The one
    classifier every verdict word in the book comes from."""
    if math.isnan(lo) or math.isnan(hi):
        return "untested"
    if lo > LARGE_PCT:
        return "large benefit"
    if lo > 0:
        return "detectable benefit"
    if hi < -LARGE_PCT:
        return "large harm"
    if hi < 0:
        return "detectable harm"
    return "no detectable effect"


def is_benefit(kind: str) -> bool:
    """Whether an :func:`effect_kind` is a benefit of either size."""
    return kind.endswith("benefit") and kind != "no detectable effect"


def is_harm(kind: str) -> bool:
    """Whether an :func:`effect_kind` is a harm of either size."""
    return kind.endswith("harm")


MIN_BOOTSTRAP_TRIALS = 7
"""Below this many trials a resampled interval is a range of a handful of values (six trials have
at most 462 distinct resampled means, most of them a few apart): not reported, never called a CI."""


def reductions(rows: pd.DataFrame, metric: str, arm: str = "dlfp") -> list[float]:
    """Per-trial paired reductions of ``metric``, stock -> ``arm``, in percent, in trial order."""
    wide = rows.pivot(index="trial", columns="arm", values=metric)
    out = []
    for k, s, d in zip(wide.index, wide[REFERENCE], wide[arm], strict=True):
        try:
            out.append(paired_reduction(s, d))
        except ValueError as exc:  # e.g. an arm whose requests all failed has no P99
            raise ValueError(f"trial {k}, {metric}, {REFERENCE} -> {arm}: {exc}") from None
    return out


def paired(rows: pd.DataFrame, metric: str, arm: str = "dlfp") -> dict[str, Any]:
    """Per-trial reductions of ``metric`` (stock -> ``arm``, %), their mean and CI across trials.

    Student's t with n - 1 df from two trials on; the percentile bootstrap only from
    :data:`MIN_BOOTSTRAP_TRIALS` on (with three trials it would resample three numbers).
    """
    reductions_pct = reductions(rows, metric, arm)
    out: dict[str, Any] = {"metric": metric, "arm": arm, "reductions_pct": reductions_pct,
                           "mean_pct": float(sum(reductions_pct) / len(reductions_pct)) if reductions_pct else math.nan}
    if len(reductions_pct) >= 2:
        _, out["t_lo"], out["t_hi"] = t_ci(reductions_pct)
    if len(reductions_pct) >= MIN_BOOTSTRAP_TRIALS:
        _, out["boot_lo"], out["boot_hi"] = bootstrap_ci(reductions_pct)
    return out


def reduction_notes(mean_pct: float, n: int, lo: float, hi: float) -> list[str]:
    """A paired reduction read back from a table (its mean, trial count and interval; NaN: one trial, no
    interval) in the words its interval allows (:func:`effect_words`), then the interval where there is one."""
    p = {"mean_pct": mean_pct, "n": n, **({} if pd.isna(lo) else {"t_lo": lo, "t_hi": hi})}
    return [effect_words(p)] + ([] if pd.isna(lo) else [f"paired 95% CI {lo:.1f}% to {hi:.1f}%"])


def effect_words(p: dict[str, Any]) -> str:
    """A paired reduction (:func:`paired`'s mapping, or one with ``mean_pct``, ``t_lo``, ``t_hi`` and
    ``n``) as a verb phrase whose strength follows its interval (:func:`effect_kind`): "reduces it
    by a mean of 52.3% (a large benefit)", "shows no detectable effect on it", "raises it by a mean
    of 12.0% (a detectable harm)"; a result on two trials says so, one on a single trial is not judged."""
    kind, mean = effect_kind(p.get("t_lo", math.nan), p.get("t_hi", math.nan)), p["mean_pct"]
    n = len(p["reductions_pct"]) if "reductions_pct" in p else p.get("n")
    if kind == "untested":
        return "cannot be judged from one trial (no interval)"
    if kind == "no detectable effect":
        words = "shows no detectable effect on it"
    else:
        words = (f"reduces it by a mean of {mean:.1f}%" if mean > 0 else f"raises it by a mean of {-mean:.1f}%") + \
            f" (a {kind})"
    return words + (", on two trials only" if n == 2 else "")
