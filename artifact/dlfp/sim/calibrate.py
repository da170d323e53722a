"""Fit step-time coefficients to measured step records, and say how well they predict.

The harness's step records carry each step's prefill tokens, decode count and its
schedule and completion times, but not the context lengths the roofline model needs, so
the calibrated model is the linear one those columns support::

    step_s = a + b * prefill_tokens + c * decode_reqs + d * prefill_tokens**2

``a`` is the fixed per-step cost, ``b`` and ``c`` the per-token and per-decode costs, and
``d`` the attention term that grows with the square of a prefill chunk. All four are
non-negative (``scipy.optimize.nnls``): a negative cost would fit noise, not hardware.

The duration of step ``k`` is the completion cadence ``complete_t[k] - complete_t[k-1]``
of a *synchronous* run, where one step's schedule, execution and output processing sit
back to back; steps that follow an idle gap (the engine waited for arrivals) are dropped.
Rows are weighted by ``1/step_s``, minimizing squared *relative* error: a 20 ms decode
step and a 700 ms prefill step count alike, as they do in the error we report. Held-out
error comes from a seeded random 20% of the steps that the fit never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

MODEL = "step_s = a + b*prefill_tokens + c*decode_reqs + d*prefill_tokens^2"
MAX_GAP_S = 0.005
"""Longest wait between a completion and the next schedule call still counted as busy."""


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted coefficients (seconds per unit) and their held-out relative error."""

    a: float
    b: float
    c: float
    d: float
    n_train: int
    n_test: int
    heldout_p50: float
    heldout_p90: float
    seed: int

    def predict(self, prefill_tokens: Any, decode_reqs: Any) -> np.ndarray:
        """Predicted step seconds for batches (scalars or arrays, broadcast)."""
        p = np.asarray(prefill_tokens, dtype=float)
        return _design(p, np.asarray(decode_reqs, dtype=float)) @ np.array([self.a, self.b, self.c, self.d])

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a manifest or a table."""
        return {
            "model": MODEL,
            "coefficients": {"a_s": self.a, "b_s_per_prefill_token": self.b,
                             "c_s_per_decode_req": self.c, "d_s_per_prefill_token_sq": self.d},
            "n_train": self.n_train, "n_test": self.n_test,
            "heldout_rel_err_p50": self.heldout_p50, "heldout_rel_err_p90": self.heldout_p90,
            "seed": self.seed,
        }


def _design(prefill_tokens: np.ndarray, decode_reqs: np.ndarray) -> np.ndarray:
    p, d = np.broadcast_arrays(prefill_tokens, decode_reqs)
    return np.stack([np.ones_like(p), p, d, p * p], axis=-1)


def step_durations(steps: pd.DataFrame, max_gap_s: float = MAX_GAP_S) -> pd.DataFrame:
    """One sync run's busy steps: ``prefill_tokens``, ``decode_reqs``, ``step_s`` (cadence).

    Raises ``ValueError`` when a step was scheduled before its predecessor completed:
    those are async records, whose cadence is not one step's cost.
    """
    s = steps.dropna(subset=["complete_t"]).sort_values("schedule_t")
    prev_complete = s["complete_t"].shift()
    gap = s["schedule_t"] - prev_complete
    if (gap < -1e-6).any():
        raise ValueError("steps overlap (scheduled before the previous step completed): "
                         "calibrate on synchronous runs")
    keep = gap.notna() & (gap <= max_gap_s)
    return pd.DataFrame({
        "prefill_tokens": s["prefill_tokens"][keep].to_numpy(dtype=float),
        "decode_reqs": s["decode_reqs"][keep].to_numpy(dtype=float),
        "step_s": (s["complete_t"] - prev_complete)[keep].to_numpy(dtype=float),
    })


def fit(steps: pd.DataFrame | Sequence[pd.DataFrame], *, seed: int = 0, test_fraction: float = 0.2,
        max_gap_s: float = MAX_GAP_S) -> Fit:
    """Fit :data:`MODEL` to step records of one sync run or a list of runs (see module doc)."""
    runs = [steps] if isinstance(steps, pd.DataFrame) else list(steps)
    data = pd.concat([step_durations(r, max_gap_s) for r in runs], ignore_index=True)
    n_test = round(len(data) * test_fraction)
    if not 0 < test_fraction < 1 or n_test < 1 or len(data) - n_test < 8:
        raise ValueError(f"{len(data)} busy steps cannot give a held-out split of {test_fraction}: need more steps")
    order = np.random.default_rng(seed).permutation(len(data))
    train, test = data.iloc[order[n_test:]], data.iloc[order[:n_test]]
    x = _design(train["prefill_tokens"].to_numpy(), train["decode_reqs"].to_numpy())
    y = train["step_s"].to_numpy()
    rows = x / y[:, None]  # relative weighting: each row's target becomes 1
    scale = np.abs(rows).max(axis=0)
    scale[scale == 0] = 1.0  # a feature absent from the data keeps coefficient 0
    coef, _ = nnls(rows / scale, np.ones(len(y)))
    coef = coef / scale
    predicted = _design(test["prefill_tokens"].to_numpy(), test["decode_reqs"].to_numpy()) @ coef
    err = np.abs(predicted / test["step_s"].to_numpy() - 1)
    return Fit(*coef.tolist(), n_train=len(train), n_test=len(test),
               heldout_p50=float(np.percentile(err, 50)), heldout_p90=float(np.percentile(err, 90)), seed=seed)
