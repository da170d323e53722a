"""A real GPU's forward passes against the cost model, from a profile ``dlfp sim gpu-calibrate`` measured.

The measured profile's header records every forward pass it was fitted to
(:func:`dlfp.sim.gpufit.read_samples`). Each is predicted here twice: by the shipped profile of that
GPU, whose efficiencies are assumed and which every modeled run of the artifact uses, and by a refit
of the three efficiencies to the passes (the file's own fit, recomputed and checked against it). The
first says how far the modeled accelerator's step times are from this GPU's; the second whether
fitting three factors closes the gap or the model lacks a term.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dlfp.sim.costmodel import Profile, load_profile, step_time
from dlfp.sim.devicenames import shipped_base
from dlfp.sim.gpufit import FACTORS, Fit, Sample, error_percentiles, fit_efficiencies, read_samples

LABELS = {"matmul_efficiency": "matmul", "attention_efficiency": "attention", "memory_efficiency": "memory"}
"""The efficiencies as :func:`errors` heads its columns (short: the table sits in a narrow page)."""
FIT_P90 = 0.25
"""The largest p90 relative error over the measured passes at which the fitted model counts as fitting
them. A modeled run's P99 ITL is set by how many steps fit in a second and by the longest ones; a
model that misses a tenth of the steps by more than a quarter moves both by about that much, more
than the effects the modeled studies resolve (their paired intervals span tens of percent)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """One measured profile's passes, the shipped profile they are compared with, and the refit."""

    device: str
    measured_on: str
    """Where and when, from the profile's provenance: ``<GPU> with <versions>, <date>``."""
    shipped: str
    base: Profile
    """The shipped profile itself, whose efficiencies are assumed."""
    samples: tuple[Sample, ...]
    shipped_s: tuple[float, ...]
    fit: Fit


def load(path: str | Path) -> Calibration:
    """Read a measured profile, predict its passes by the shipped profile of its GPU, and refit them.

    Refuses a profile whose recorded factors the refit does not reproduce (to the file's four digits):
    then the header's samples are not the passes its factors came from."""
    path = Path(path)
    recorded = load_profile(path)
    shipped = shipped_base(recorded.device)
    if shipped is None:
        raise ValueError(f"{path}: no shipped profile for its device {recorded.device!r} to compare with")
    base = load_profile(shipped)
    samples = tuple(read_samples(path))
    fit = fit_efficiencies(base, samples)
    for factor in fit.measured:
        if not np.isclose(getattr(fit.profile, factor), getattr(recorded, factor), rtol=1e-3):
            raise ValueError(f"{path}: its {factor} {getattr(recorded, factor)} is not what its samples fit "
                             f"({getattr(fit.profile, factor):.4g}); the file was edited or mixes runs")
    predicted = tuple(step_time(s.shape, base, s.batch, tp=1).gpu_s for s in samples)
    refs = yaml.safe_load(path.read_text(encoding="utf-8")).get("references", [])
    where = next((str(r).removeprefix("Measured on ") for r in refs if str(r).startswith("Measured on ")),
                 recorded.device)
    when = next((m[1] for r in refs if (m := re.match(r"dlfp\.sim\.gpucal, (\d{4}-\d\d-\d\d)", str(r)))), "")
    return Calibration(recorded.device, f"{where}, {when}" if when else where, shipped, base, samples, predicted,
                       fit)


def passes(cal: Calibration) -> pd.DataFrame:
    """One row per forward pass: the GPU's time (busy and wall clock) and each profile's prediction."""
    return pd.DataFrame({
        "model": [s.model for s in cal.samples],
        "step": [s.case.label for s in cal.samples],
        "measured (ms)": [s.seconds * 1e3 for s in cal.samples],
        "wall clock (ms)": [s.wall_s * 1e3 for s in cal.samples],
        f"{cal.shipped}, assumed (ms)": [t * 1e3 for t in cal.shipped_s],
        "fitted (ms)": [t * 1e3 for t in cal.fit.predicted_s],
    })


def errors(cal: Calibration) -> pd.DataFrame:
    """Per profile: its three efficiencies and its relative error over the passes (p50, p90); the fit's
    leave-one-out error beside its in-sample one."""
    shipped = error_percentiles(np.array(cal.shipped_s), np.array([s.seconds for s in cal.samples]))
    fit = cal.fit
    rows = [(f"{cal.shipped} (assumed)", cal.base, shipped),
            ("fitted", fit.profile, (fit.in_sample_p50, fit.in_sample_p90)),
            ("fitted, leave-one-out", None, (fit.heldout_p50, fit.heldout_p90))]
    return pd.DataFrame([{"profile": label, **{LABELS[f]: getattr(profile, f) if profile else np.nan for f in FACTORS},
                          "error p50 (%)": 100 * p50, "error p90 (%)": 100 * p90}
                         for label, profile, (p50, p90) in rows])


def verdict(cal: Calibration) -> str:
    """Whether the fitted three-factor model fits the passes within :data:`FIT_P90` at p90 (the words
    follow the number: a fit at or under the line fits, one above it does not)."""
    p90 = cal.fit.in_sample_p90
    if p90 <= FIT_P90:
        return (f"the three-factor model fits these passes (p90 error {p90:.0%}, within {FIT_P90:.0%}): the fitted "
                "factors could replace the assumed ones")
    return (f"the three-factor model does not fit these passes (p90 error {p90:.0%} even with its factors fitted, "
            f"above {FIT_P90:.0%}): the model lacks a term these kernels pay, and the fitted factors would only "
            "trade one step kind's error for another's, so the modeled runs keep the assumed profile")
