"""Paired statistics over trials: per-trial reductions and confidence intervals of their mean.

Each trial runs stock and DLFP on the same seeded workload, so the per-trial reduction is the
unit of replication; intervals are over those few trial values, hence Student's t (exact for
normal data at small n) with a seeded percentile bootstrap as a distribution-free cross-check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps


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


def direction(lo: float, hi: float) -> str:
    """What an interval of a reduction says: ``gain`` (above zero), ``loss`` (below zero), ``none``
    (it spans zero, so no effect is detectable) or ``untested`` (no interval, e.g. one trial)."""
    if math.isnan(lo) or math.isnan(hi):
        return "untested"
    return "gain" if lo > 0 else "loss" if hi < 0 else "none"
