"""Did each trial run on the machine its design was derived on? Step costs against the pre-flight's.

A scaled design is derived from two costs the pre-flight measured (:mod:`dlfp.trials.preflight`): the
decode step with a few requests decoding, and the mixed steps that carry a prefill beside them. If the
machine was busy during the pre-flight and quiet during the trials (or the other way round), the
design's load, target and ITL objective are all off by that factor, and stock may hardly stall
above the objective at all: the comparison then cannot show what it was set up to show, however
many trials pool. So every trial's stock unit is held against the pre-flight on like steps:

* **decode:** the median completion cadence of stock's decode-only steps (following a decode-only
  step) with one to twice the pre-flight's number of decoders, against the pre-flight's decode step;
* **mixed:** each stock step that carries between half the smallest probe and the largest probe of
  prefill tokens beside as many decodes, against the pre-flight's own step time at that size
  (linear between the probe sizes' medians, and from the decode step to the first probe), as a
  median ratio. No fitted cost model enters, so a model's error (a convex prefill cost fitted by a
  line) is not mistaken for a changed machine.

The batch range is wide on purpose: a design derived on a busy machine sets a low load, so on the quiet
machine its trial hardly ever has the pre-flight's decoders at once (a test's busy pre-flight left ten
such steps in a thousand). A batch's own cost is the price, and so is context: the trials' decodes carry
longer contexts than the pre-flight's short-prompt decoders. On the committed quiet runs (CPU engine and
modeled targets) the ratios lie between 0.73 and 1.55, which the design's ``max_cost_drift`` (1.75) leaves
unflagged, while that busy pre-flight gave 0.14 and the issue's busy laptop about 0.44. On a faster 2-core
VM (the stability study, ``dlfp study stability``) undisturbed repetitions reached 2.6, where the
pre-flight measured a 4 ms decode step and the trials' steps took longer: the check cannot tell a machine
that changed speed from trial steps unlike the probes, and it need not, since either way the design's load
and objective were derived for step costs the trials did not have, which is what its flag says.

A ratio is only formed from enough steps (:data:`MIN_DECODE_STEPS`, :data:`MIN_MIXED_STEPS`); with
fewer it is NaN and judges nothing. Pure pandas; the regime check (:func:`dlfp.analysis.tables.regime`)
and the run's progress lines use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_DECODE_STEPS = 20
MIN_MIXED_STEPS = 5


def cadence(steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Step records in step order and each step's completion cadence (time since the previous step's
    outputs; the interval decoding requests experience), NaN for the first."""
    s = steps.sort_values("step").reset_index(drop=True)
    return s, s.complete_t.astype(float).diff()


def plain_decode(s: pd.DataFrame, cad: pd.Series, lo: int, hi: int | None = None) -> pd.Series:
    """Decode-only steps with ``lo`` to ``hi`` decoding requests that follow a decode-only step (so
    the cadence is one decode step, not the tail of a prefill)."""
    reqs = s.decode_reqs >= lo if hi is None else s.decode_reqs.between(lo, hi)
    decode_only = (s.prefill_tokens == 0) & reqs
    return decode_only & decode_only.shift(1, fill_value=False) & cad.gt(0)


def preflight_curve(steps: pd.DataFrame, decoders: int) -> np.ndarray:
    """The pre-flight's step time against prefill tokens: ``(0, decode step)`` then ``(size, median
    mixed step)`` for every probe size seen at least twice; rows sorted by size."""
    s, cad = cadence(steps)
    plain = plain_decode(s, cad, decoders)
    points = [(0.0, float(cad[plain].median()) if plain.any() else math.nan)]
    for n in sorted(set(s.prefill_tokens[s.prefill_tokens > 0])):
        hit = (s.prefill_tokens == n) & (s.decode_reqs >= decoders - 1) & cad.gt(0)
        if hit.sum() >= 2:
            points.append((float(n), float(cad[hit].median())))
    return np.array(points)


@dataclass(frozen=True, slots=True)
class CostDrift:
    """One trial's stock steps against the pre-flight (ratios > 1: the trial ran slower)."""

    decode_ratio: float
    decode_steps: int
    mixed_ratio: float
    mixed_steps: int

    def off_by(self, tolerance: float) -> list[str]:
        """The ratios outside ``[1 / tolerance, tolerance]``, in words (empty: the machine held)."""
        out = []
        for what, ratio, n in (("decode", self.decode_ratio, self.decode_steps),
                               ("mixed", self.mixed_ratio, self.mixed_steps)):
            if math.isfinite(ratio) and not 1 / tolerance <= ratio <= tolerance:
                out.append(f"its {what} steps took {ratio:.2f}x the pre-flight's (median of {n})")
        return out


def drift(preflight_steps: pd.DataFrame, stock_steps: pd.DataFrame, decoders: int) -> CostDrift:
    """``stock_steps`` (one trial's stock unit) against ``preflight_steps`` (module docstring)."""
    curve = preflight_curve(preflight_steps, decoders)
    s, cad = cadence(stock_steps)
    plain = plain_decode(s, cad, 1, 2 * decoders)
    n_decode = int(plain.sum())
    decode = float(cad[plain].median()) / curve[0, 1] if n_decode >= MIN_DECODE_STEPS else math.nan
    n_mixed, mixed = 0, math.nan
    if len(curve) >= 2 and math.isfinite(curve[0, 1]):
        hit = (s.prefill_tokens >= curve[1, 0] / 2) & (s.prefill_tokens <= curve[-1, 0]) \
            & s.decode_reqs.between(1, 2 * decoders) & cad.gt(0)
        n_mixed = int(hit.sum())
        if n_mixed >= MIN_MIXED_STEPS:
            expected = np.interp(s.prefill_tokens[hit].astype(float), curve[:, 0], curve[:, 1])
            mixed = float((cad[hit] / expected).median())
    return CostDrift(decode, n_decode, mixed, n_mixed)
