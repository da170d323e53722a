"""Fitting a profile's efficiencies to forward passes (``dlfp.sim.gpufit``).

Known factors are recovered, undetermined ones kept from the base profile.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dlfp.paths import model_path
from dlfp.sim.costmodel import ModelShape, load_profile, step_time
from dlfp.sim.gpucal import CASES
from dlfp.sim.gpufit import Case, Sample, fit_efficiencies

QWEN3_8B = ModelShape.from_dir(model_path("qwen3-8b"))


TRUE = {"matmul_efficiency": 0.5, "attention_efficiency": 0.3, "memory_efficiency": 0.7}


def synthetic(cases: tuple[Case, ...], profile_changes: dict[str, float]) -> list[Sample]:
    """Samples timed by the cost model itself under the a100 profile with ``profile_changes``."""
    truth = replace(load_profile("a100"), **profile_changes)
    return [Sample("qwen3-8b", QWEN3_8B, case, t := step_time(QWEN3_8B, truth, case.batch).gpu_s, t)
            for case in cases]


def test_fit_recovers_known_efficiencies() -> None:
    samples = synthetic(CASES, TRUE)
    fit = fit_efficiencies(load_profile("a100"), samples, dtype_bytes=2)
    assert set(fit.measured) == set(TRUE)
    for factor, value in TRUE.items():
        assert getattr(fit.profile, factor) == pytest.approx(value, rel=0.02), factor
    # Both regimes are present, so each factor is pinned by some samples.
    assert 0 < fit.memory_bound < len(samples)
    assert fit.in_sample_p90 < 0.01 and fit.heldout_p90 < 0.01
    # The public specs are untouched.
    assert fit.profile.peak_tflops == 312 and fit.profile.memory_gbps == 2039


def test_fit_recovers_efficiencies_jointly_from_two_models_with_noise() -> None:
    truth = replace(load_profile("h200"), matmul_efficiency=0.55, attention_efficiency=0.25, memory_efficiency=0.85)
    rng = np.random.default_rng(1)
    samples = []
    for name in ("qwen3-0.6b", "qwen3-8b"):
        shape = ModelShape.from_dir(model_path(name))
        for case in CASES:
            seconds = step_time(shape, truth, case.batch).gpu_s * math.exp(0.05 * rng.standard_normal())
            samples.append(Sample(name, shape, case, seconds, seconds))
    fit = fit_efficiencies(load_profile("h200"), samples, dtype_bytes=2)
    assert fit.profile.matmul_efficiency == pytest.approx(0.55, rel=0.05)
    assert fit.profile.attention_efficiency == pytest.approx(0.25, rel=0.05)
    assert fit.profile.memory_efficiency == pytest.approx(0.85, rel=0.05)
    assert fit.in_sample_p50 == pytest.approx(0.05 * 0.674, rel=0.5)  # median |5% normal noise|


def test_fit_keeps_base_factors_that_no_sample_determines() -> None:
    decodes = tuple(case for case in CASES if case.new == 1)  # all memory-bound
    fit = fit_efficiencies(load_profile("a100"), synthetic(decodes, TRUE), dtype_bytes=2)
    assert fit.measured == ("memory_efficiency",)
    assert fit.profile.memory_efficiency == pytest.approx(0.7, rel=0.02)
    assert (fit.profile.matmul_efficiency, fit.profile.attention_efficiency) == (0.6, 0.45)  # a100's assumptions


def test_fit_needs_more_samples_than_factors() -> None:
    with pytest.raises(ValueError, match="need more than 3 samples"):
        fit_efficiencies(load_profile("a100"), synthetic(CASES[:3], TRUE))


def test_a_written_profile_reads_back_the_samples_it_was_fitted_to(tmp_path) -> None:
    from dlfp.sim.costmodel import PROFILE_DIR
    from dlfp.sim.gpufit import Run, load_base, read_samples, render_profile

    truth = replace(load_profile("h200"), matmul_efficiency=0.55, memory_efficiency=0.85)
    samples = [Sample(name, shape, case, step_time(shape, truth, case.batch).gpu_s, 1.5 * (k + 1) / 1e3)
               for name in ("qwen3-0.6b", "qwen3-8b") for shape in [ModelShape.from_dir(model_path(name))]
               for k, case in enumerate(CASES)]
    base_raw, base = load_base("h200")
    run = Run(base="h200", device="NVIDIA H200", dtype="bfloat16", timer="busy", repeats=5, versions="torch x",
              date="2026-12-04")
    path = tmp_path / "measured.yaml"
    path.write_text(render_profile(fit_efficiencies(base, samples), samples, base_raw, run, "h200-measured"))
    back = read_samples(path)
    assert [(s.model, s.shape, s.case) for s in back] == [(s.model, s.shape, s.case) for s in samples]
    assert [s.seconds for s in back] == pytest.approx([s.seconds for s in samples], abs=1e-7)  # 0.1 us
    assert [s.wall_s for s in back] == pytest.approx([s.wall_s for s in samples], abs=1e-7)
    with pytest.raises(ValueError, match="no sample lines"):
        read_samples(PROFILE_DIR / "h200.yaml")
