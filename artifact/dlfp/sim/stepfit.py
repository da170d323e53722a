"""Fit step-time coefficients to measured step records, say how well they predict, and write
the result as a *fitted* profile the modeled executor can replay.

The harness's step records carry each step's prefill tokens, decode count and its
schedule and completion times, but not the context lengths the roofline model needs, so
the calibrated model is the linear one those columns support::

    step_s = a + e * [prefill_tokens > 0] + b * prefill_tokens + c * decode_reqs + d * prefill_tokens**2

``a`` is the fixed per-step cost, ``e`` the extra fixed cost of a step that prefills at all
(on the CPU engine a prefill step runs another attention path: without ``e`` the per-token
slope ``b`` absorbs it and big chunks come out 25% too slow), ``b`` and ``c`` the per-token
and per-decode costs, and ``d`` the attention term that grows with the square of a prefill
chunk. All five are non-negative (``scipy.optimize.nnls``): a negative cost would fit
noise, not hardware.

The duration of step ``k`` is its span ``complete_t[k] - schedule_t[k]`` in a
*synchronous* run: the ``schedule()`` call, the model's forward pass and sampling, back to
back. Replayed on the modeled executor, the engine's real scheduling and output processing
run around the modeled sleep, as they did around the real forward pass; the span counts the
``schedule()`` call once more (up to about 1 ms per step on 2 cores with 64 running requests,
as ``dlfp bench schedule`` measures it). The cadence ``complete_t[k] - complete_t[k-1]`` would add the output
processing too, and waits for arrivals. Async records (a step scheduled before its
predecessor completed) are refused: their span includes the predecessor's time.

Errors are *relative to the prediction* (iteratively reweighted least squares, weights
``1/predicted``, the quasi-likelihood of a Gamma model): a 20 ms decode step and a 700 ms
prefill step count alike, and the fit estimates each batch's *mean* step time. The mean is
what a replay needs: how many steps, hence how many inter-token gaps, fit in a second sets
P99 ITL. Weighting by the *measured* time instead favours the fast outliers and biases
every prediction low; on the 2-core CPU engine, whose step times are bimodal (OS
scheduling of the engine against the client), that made decode steps 40% too fast.
Held-out error comes from a seeded random 20% of the steps that the fit never saw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import nnls

MODEL = "step_s = a + e*[prefill_tokens > 0] + b*prefill_tokens + c*decode_reqs + d*prefill_tokens^2"


COEFFICIENTS = ("a_s", "e_s_per_prefill_step", "b_s_per_prefill_token", "c_s_per_decode_req",
                "d_s_per_prefill_token_sq")


FITTED_KIND = "fitted"


IRLS_ROUNDS = 20


MIN_STEP_S = 1e-5


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted coefficients (seconds per unit) and their held-out relative error."""

    a: float
    e: float
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
        return _design(p, np.asarray(decode_reqs, dtype=float)) @ np.array(self.coefficients)

    @property
    def coefficients(self) -> tuple[float, float, float, float, float]:
        """In :data:`COEFFICIENTS` order (the design matrix's columns)."""
        return (self.a, self.e, self.b, self.c, self.d)

    def step_s(self, prefill_tokens: int, decode_reqs: int) -> float:
        """One step's predicted seconds, in plain floats (the executor's hot path)."""
        prefill = self.e + prefill_tokens * (self.b + self.d * prefill_tokens) if prefill_tokens else 0.0
        return self.a + prefill + self.c * decode_reqs

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a manifest, a table or a fitted profile."""
        return {
            "model": MODEL,
            "coefficients": dict(zip(COEFFICIENTS, self.coefficients, strict=True)),
            "n_train": self.n_train, "n_test": self.n_test,
            "heldout_rel_err_p50": self.heldout_p50, "heldout_rel_err_p90": self.heldout_p90,
            "seed": self.seed,
        }


def _design(prefill_tokens: np.ndarray, decode_reqs: np.ndarray) -> np.ndarray:
    p, d = np.broadcast_arrays(prefill_tokens, decode_reqs)
    return np.stack([np.ones_like(p), (p > 0).astype(float), p, d, p * p], axis=-1)


def step_durations(steps: pd.DataFrame) -> pd.DataFrame:
    """One sync run's non-empty steps: ``prefill_tokens``, ``decode_reqs``, ``step_s`` (the span).

    Raises ``ValueError`` when a step was scheduled before its predecessor completed:
    those are async records, whose span is not one step's cost.
    """
    s = steps.dropna(subset=["complete_t"]).sort_values("schedule_t")
    if (s["schedule_t"] < s["complete_t"].shift() - 1e-6).any():
        raise ValueError("steps overlap (scheduled before the previous step completed): "
                         "calibrate on synchronous runs")
    s = s[s["total_tokens"] > 0]  # nothing scheduled: no forward pass to model
    return pd.DataFrame({
        "prefill_tokens": s["prefill_tokens"].to_numpy(dtype=float),
        "decode_reqs": s["decode_reqs"].to_numpy(dtype=float),
        "step_s": (s["complete_t"] - s["schedule_t"]).to_numpy(dtype=float),
    })


def relative_errors(result: Fit, durations: pd.DataFrame) -> np.ndarray:
    """``|predicted / measured - 1|`` per step of :func:`step_durations` output."""
    predicted = result.predict(durations["prefill_tokens"].to_numpy(), durations["decode_reqs"].to_numpy())
    return np.abs(predicted / durations["step_s"].to_numpy() - 1)


def fit(steps: pd.DataFrame | Sequence[pd.DataFrame], *, seed: int = 0, test_fraction: float = 0.2) -> Fit:
    """Fit :data:`MODEL` to step records of one sync run or a list of runs (see module doc)."""
    runs = [steps] if isinstance(steps, pd.DataFrame) else list(steps)
    data = pd.concat([step_durations(r) for r in runs], ignore_index=True)
    n_test = round(len(data) * test_fraction)
    if not 0 < test_fraction < 1 or n_test < 1 or len(data) - n_test < 8:
        raise ValueError(f"{len(data)} steps cannot give a held-out split of {test_fraction}: need more steps")
    order = np.random.default_rng(seed).permutation(len(data))
    train, test = data.iloc[order[n_test:]], data.iloc[order[:n_test]]
    x = _design(train["prefill_tokens"].to_numpy(), train["decode_reqs"].to_numpy())
    y = train["step_s"].to_numpy()
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0  # a feature absent from the data keeps coefficient 0
    xs, weight = x / scale, 1.0 / y  # first pass: relative to the measurement
    for _ in range(IRLS_ROUNDS):
        coef, _ = nnls(xs * weight[:, None], y * weight)
        weight = 1.0 / np.maximum(xs @ coef, MIN_STEP_S)  # then relative to the prediction
    coef = coef / scale
    a, e, b, c, d = (float(v) for v in coef)
    result = Fit(a, e, b, c, d, n_train=len(train), n_test=len(test), heldout_p50=math.nan, heldout_p90=math.nan,
                 seed=seed)
    err = relative_errors(result, test)
    return replace(result, heldout_p50=float(np.percentile(err, 50)), heldout_p90=float(np.percentile(err, 90)))


@dataclass(frozen=True, slots=True)
class FittedProfile:
    """A calibrated step-time model for one model shape on one machine (``kind: fitted``).

    The modeled executor spends ``fit.step_s`` per step on its stream and no separate
    host time: the measured span already contains the host's share. ``shape`` is the
    calibrated model's (the executor refuses another); ``kv_cache_gib`` sizes the KV cache
    as the calibrated engine had it; ``calibration`` says where the numbers come from.
    """

    name: str
    device: str
    fit: Fit
    shape: dict[str, Any]
    kv_cache_gib: float
    calibration: dict[str, Any] = field(default_factory=dict)

    def to_yaml(self) -> str:
        """The profile file: ``load_profile`` reads it back."""
        body = {"name": self.name, "kind": FITTED_KIND, "device": self.device, **self.fit.to_dict(),
                "shape": self.shape, "kv_cache_gib": self.kv_cache_gib, "calibration": self.calibration}
        header = ("# Fitted step-time profile (dlfp calibrate): measured step spans of a synchronous run,\n"
                  f"# fitted to {MODEL}.\n# Replays are simulated numbers; the run it came from is named below.\n")
        return header + yaml.safe_dump(body, sort_keys=False)


def parse_fitted_profile(raw: Mapping[str, Any], origin: str = "profile") -> FittedProfile:
    """Validate a ``kind: fitted`` mapping; errors name the file and the key."""
    need = {"name", "kind", "device", "model", "coefficients", "shape", "kv_cache_gib"}
    missing = sorted(need - set(raw))
    if missing:
        raise ValueError(f"{origin}: fitted profile lacks {missing}")
    if raw["model"] != MODEL:
        raise ValueError(f"{origin}: model {raw['model']!r} is not {MODEL!r}")
    coefs = raw["coefficients"]
    if not isinstance(coefs, Mapping) or set(coefs) != set(COEFFICIENTS):
        raise ValueError(f"{origin}: coefficients must be exactly {list(COEFFICIENTS)}")
    values = [coefs[k] for k in COEFFICIENTS]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
               for v in values) or values[0] <= 0:
        raise ValueError(f"{origin}: coefficients must be finite and >= 0, with a_s > 0")
    kv = raw["kv_cache_gib"]
    if isinstance(kv, bool) or not isinstance(kv, (int, float)) or not kv > 0:
        raise ValueError(f"{origin}: kv_cache_gib must be a positive number")
    if not isinstance(raw["shape"], Mapping):
        raise ValueError(f"{origin}: shape must be a mapping of model dimensions")
    a, e, b, c, d = (float(v) for v in values)
    result = Fit(a, e, b, c, d, n_train=int(raw.get("n_train", 0)), n_test=int(raw.get("n_test", 0)),
                 heldout_p50=float(raw.get("heldout_rel_err_p50", math.nan)),
                 heldout_p90=float(raw.get("heldout_rel_err_p90", math.nan)), seed=int(raw.get("seed", 0)))
    return FittedProfile(name=str(raw["name"]), device=str(raw["device"]), fit=result, shape=dict(raw["shape"]),
                         kv_cache_gib=float(kv), calibration=dict(raw.get("calibration") or {}))
