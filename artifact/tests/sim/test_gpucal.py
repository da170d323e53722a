"""GPU calibration: the fit recovers known efficiencies, a CPU dry run writes a valid profile,
and bad arguments stop before any work."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dlfp.paths import model_path
from dlfp.sim.costmodel import ModelShape, load_profile, step_time
from dlfp.sim.gpucal import CASES, busy_seconds, main
from dlfp.sim.gpufit import Case, Sample, fit_efficiencies

torch.set_num_threads(1)  # the tests share two cores with timing-sensitive runs

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


def test_busy_seconds_counts_overlaps_once() -> None:
    assert busy_seconds([]) == 0
    assert busy_seconds([(5, 7), (0, 2), (1, 3), (10, 11), (6, 6.5)]) == pytest.approx(3 + 2 + 1)


def test_cpu_dry_run_writes_a_loadable_measured_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.yaml"
    start = time.perf_counter()
    code = main(["--base", "a100", "--device", "cpu", "--dtype", "float32", "--models", "qwen3-tiny", "--quick",
                 "--repeats", "3", "--out", str(out)])
    assert code == 0 and time.perf_counter() - start < 60
    profile = load_profile(out)
    assert profile.name == "a100-measured" and profile.device.startswith("CPU")
    raw = yaml.safe_load(out.read_text())
    sources = {"matmul_efficiency": raw["compute"]["matmul_efficiency"]["source"],
               "attention_efficiency": raw["compute"]["attention_efficiency"]["source"],
               "memory_efficiency": raw["memory"]["efficiency"]["source"]}
    measured = [f for f, s in sources.items() if s == "measured"]
    assert measured, sources
    kept_line = " ".join(r for r in raw["references"] if "kept from it" in r)
    for factor in set(sources) - set(measured):  # on a CPU no sample may determine some factors: named
        assert factor in kept_line
    references = "\n".join(raw["references"])
    assert raw["compute"]["peak_tflops"] == {"value": 312, "source": "public spec"}
    assert raw["host"]["step_fixed_us"]["source"] == "assumed"
    assert "qwen3-tiny" in references and f"torch {torch.__version__}" in references
    assert "leave-one-out" in references and "dlfp.sim.gpucal" in references
    header = out.read_text().split("\nname:")[0]
    assert header.count("qwen3-tiny ") == 5  # one table row per quick case
    assert "[5/5] qwen3-tiny" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--models", "qwen3-nope"], "unknown model 'qwen3-nope'"),
    (["--base", "tpu9"], "unknown profile 'tpu9'"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--out", "/nonexistent-dir/p.yaml"], "does not exist"),
])
def test_bad_arguments_exit_2_before_work(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--base", "a100", "--device", "cpu", "--models", "qwen3-tiny", "--out", "p.yaml", *args]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", "h200", "--device", "cuda", "--models", "qwen3-tiny", "--out", "p.yaml"])
    assert exit_info.value.code == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


def test_existing_out_is_refused_before_work(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "measured.yaml"
    out.write_text("a profile measured earlier\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--base", "a100", "--device", "cpu", "--models", "qwen3-tiny", "--quick", "--out", str(out)])
    assert exit_info.value.code == 2 and "refusing to overwrite" in capsys.readouterr().err
    assert out.read_text() == "a profile measured earlier\n"
