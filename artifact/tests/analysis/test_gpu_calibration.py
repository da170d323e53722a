"""A measured GPU profile against the cost model (dlfp.analysis.gpu_calibration): the committed H200
measurement and synthetic profiles whose truth is known, so the verdict is shown to come out both ways."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from dlfp.analysis import gpu_calibration
from dlfp.paths import REPO_ROOT, model_path
from dlfp.sim.costmodel import ModelShape, load_profile, step_time
from dlfp.sim.gpucal import CASES
from dlfp.sim.gpufit import Run, Sample, fit_efficiencies, load_base, render_profile

COMMITTED = REPO_ROOT / "data" / "runs" / "gpu-calibrate-h200" / "h200-measured.yaml"


def _profile(tmp_path: Path, slowdown: float = 1.0) -> Path:
    """A profile measured on a modeled H200 whose true factors are known; ``slowdown`` multiplies the
    decode steps only, a term the three factors cannot express."""
    truth = replace(load_profile("h200"), matmul_efficiency=0.5, attention_efficiency=0.3, memory_efficiency=0.7)
    samples = []
    for name in ("qwen3-0.6b", "qwen3-8b"):
        shape = ModelShape.from_dir(model_path(name))
        for case in CASES:
            t = step_time(shape, truth, case.batch).gpu_s * (slowdown if case.new == 1 else 1.0)
            samples.append(Sample(name, shape, case, t, t))
    base_raw, base = load_base("h200")
    run = Run(base="h200", device="NVIDIA H200", dtype="bfloat16", timer="busy", repeats=5,
              versions="torch 2.11.0+cu130, CUDA 13.0, transformers 5.17.0", date="2026-12-04T18:00:00+00:00")
    path = tmp_path / "h200-measured.yaml"
    path.write_text(render_profile(fit_efficiencies(base, samples), samples, base_raw, run, "h200-measured"))
    return path


def test_a_model_that_generated_the_passes_fits_them(tmp_path: Path) -> None:
    cal = gpu_calibration.load(_profile(tmp_path))
    assert cal.shipped == "h200" and len(cal.samples) == 2 * len(CASES)
    assert cal.measured_on == "NVIDIA H200 with torch 2.11.0+cu130, CUDA 13.0, transformers 5.17.0, 2026-12-04"
    err = gpu_calibration.errors(cal).set_index("profile")
    assert err.loc["fitted", "error p90 (%)"] < 1.0 and err.loc["h200 (assumed)", "error p90 (%)"] > 10.0
    assert err.loc["fitted", "memory"] == pytest.approx(0.7, rel=0.02)
    assert gpu_calibration.verdict(cal).startswith("the three-factor model fits these passes")
    table = gpu_calibration.passes(cal)
    assert list(table.columns) == ["model", "step", "measured (ms)", "wall clock (ms)", "h200, assumed (ms)",
                                   "fitted (ms)"]
    assert table["fitted (ms)"].to_numpy() == pytest.approx(table["measured (ms)"].to_numpy(), rel=0.01)


def test_a_term_the_model_lacks_fails_the_fit(tmp_path: Path) -> None:
    cal = gpu_calibration.load(_profile(tmp_path, slowdown=6.0))
    assert cal.fit.in_sample_p90 > gpu_calibration.FIT_P90
    assert gpu_calibration.verdict(cal).startswith("the three-factor model does not fit these passes")


def test_a_profile_whose_factors_its_samples_do_not_give_is_refused(tmp_path: Path) -> None:
    path = _profile(tmp_path)
    text = path.read_text()
    fitted = load_profile(path).memory_efficiency
    path.write_text(text.replace(f"efficiency: {{value: {fitted}, source: measured}}",
                                 "efficiency: {value: 0.9, source: measured}"))
    with pytest.raises(ValueError, match="is not what its samples fit"):
        gpu_calibration.load(path)
    path.write_text(text.replace("device: NVIDIA H200", "device: NVIDIA H100"))  # no shipped h100 profile
    with pytest.raises(ValueError, match="no shipped profile"):
        gpu_calibration.load(path)


def test_the_committed_h200_measurement_reads_and_refits_as_recorded() -> None:
    cal = gpu_calibration.load(COMMITTED)
    assert cal.device == "NVIDIA H200" and cal.shipped == "h200" and len(cal.samples) == 32
    assert cal.measured_on.endswith("2026-12-04")
    p90 = gpu_calibration.errors(cal).set_index("profile").loc["fitted", "error p90 (%)"]
    assert math.isclose(p90, 100 * cal.fit.in_sample_p90)
    fits = p90 <= 100 * gpu_calibration.FIT_P90
    assert gpu_calibration.verdict(cal).startswith("the three-factor model fits" if fits else
                                                   "the three-factor model does not fit")
