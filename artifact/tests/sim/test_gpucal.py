"""GPU calibration's own logic: the busy-time union, the ``--max-seconds`` budget (on a fake clock,
with fake cases), the preflight, bad arguments stopping before any work, and the base profile
chosen by the GPU's name or refused when it describes another GPU (CUDA faked by name). The real CPU dry run,
end to end with only the bare-node packages present, is ``test_gpucal_bare.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import yaml

from dlfp.paths import model_path
from dlfp.sim import gpucal
from dlfp.sim.costmodel import ModelShape, load_profile, step_time
from dlfp.sim.gpucal import CASES, Budget, busy_seconds, main

torch.set_num_threads(1)  # the tests share two cores with timing-sensitive runs


def test_busy_seconds_counts_overlaps_once() -> None:
    assert busy_seconds([]) == 0
    assert busy_seconds([(5, 7), (0, 2), (1, 3), (10, 11), (6, 6.5)]) == pytest.approx(3 + 2 + 1)


class FakeClock:
    """Monotonic seconds that advance only when a fake case runs."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_refuses_what_the_longest_case_would_carry_past_the_deadline(monkeypatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(gpucal, "_clock", clock)
    budget = Budget(deadline=1030.0)
    assert budget.allows("first")
    budget.spent(10.0)
    clock.now = 1019.0
    assert budget.allows("second")  # 1019 + 10 <= 1030
    clock.now = 1021.0
    assert not budget.allows("third") and budget.stopped_before == "third"
    clock.now = 0.0
    assert not budget.allows("fourth") and budget.stopped_before == "third"  # once stopped, stays stopped
    assert Budget().allows("anything")  # no deadline


def fake_measurements(monkeypatch, seconds_per_case: float) -> FakeClock:
    """Cases that take ``seconds_per_case`` on a fake clock and time as the a100 profile at a fifth of
    its memory efficiency: the budget logic without building a model."""
    clock = FakeClock()
    monkeypatch.setattr(gpucal, "_clock", clock)
    monkeypatch.setattr(gpucal, "_build_model", lambda name, device, dtype: torch.nn.Module())
    truth = replace(load_profile("a100"), memory_efficiency=0.16)
    shape = ModelShape.from_dir(model_path("qwen3-tiny"))

    def time_case(model, case, device, repeats, busy):
        clock.now += seconds_per_case
        t = step_time(shape, truth, case.batch, dtype_bytes=4).gpu_s
        return t, t

    monkeypatch.setattr(gpucal, "_time_case", time_case)
    return clock


def test_max_seconds_stops_measuring_and_fits_what_it_has(tmp_path, monkeypatch, capsys) -> None:
    fake_measurements(monkeypatch, seconds_per_case=10.0)
    out = tmp_path / "cut.yaml"
    argv = ["--base", "a100", "--device", "cpu", "--dtype", "float32", "--models", "qwen3-tiny,qwen3-mini",
            "--quick", "--max-seconds", "45", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "[5/5] qwen3-tiny decode R=4 c=32: --max-seconds budget spent" in err
    cut = "measuring stopped by --max-seconds 45 before qwen3-tiny decode R=4 c=32: 4 of 10 cases measured"
    assert cut in err
    raw = yaml.safe_load(out.read_text())
    assert f"Incomplete: {cut}" in raw["references"]
    assert raw["memory"]["efficiency"] == {"value": pytest.approx(0.16, rel=1e-3), "source": "measured"}
    assert any(r.startswith("Command: python -m dlfp.sim.gpucal --base a100 ") and r.endswith("(measuring took 40 s)")
               for r in raw["references"])
    assert "qwen3-mini: building" not in err  # the budget was spent before the second model


def test_a_budget_too_short_to_fit_exits_1_and_writes_nothing(tmp_path, monkeypatch, capsys) -> None:
    fake_measurements(monkeypatch, seconds_per_case=10.0)
    out = tmp_path / "none.yaml"
    argv = ["--base", "a100", "--device", "cpu", "--models", "qwen3-tiny", "--quick", "--max-seconds", "25",
            "--out", str(out)]
    assert main(argv) == 1
    assert "cannot fit: need more than 3 samples" in capsys.readouterr().err and not out.exists()


def test_preflight_accepts_this_transformers() -> None:
    assert gpucal._preflight(torch.device("cpu"), "wall") is None


def test_cases_interleave_regimes_so_any_prefix_spans_them() -> None:
    assert len(CASES) == len(set(CASES)) == 16
    first = CASES[:4]
    assert {(c.new > 1, c.context > 0 and c.new > 1, c.new == 1) for c in first} == {
        (True, False, False), (True, True, False), (False, False, True)}


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


class Stop(Exception):
    """Raised where the run would first touch the GPU: the checks before it are what is tested."""


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):
    """CUDA reporting one GPU of the given name; measuring stops at the preflight (no GPU is touched)."""
    def install(name: str) -> None:
        monkeypatch.setattr(gpucal.torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(gpucal.torch.cuda, "get_device_name", lambda device=None: name)

        def preflight(device: torch.device, timer: str) -> None:
            raise Stop(device.type)

        monkeypatch.setattr(gpucal, "_preflight", preflight)
    return install


def test_an_a100_without_base_is_fitted_against_the_a100_profile(fake_gpu, capsys) -> None:
    fake_gpu("NVIDIA A100-SXM4-80GB")
    with pytest.raises(Stop):
        main(["--models", "qwen3-tiny", "--out", "p.yaml"])
    assert "--base a100: the shipped profile for NVIDIA A100-SXM4-80GB" in capsys.readouterr().err


@pytest.mark.parametrize(("gpu", "args", "message"), [
    ("NVIDIA A100-SXM4-80GB", ["--base", "h200"], "not this GPU, NVIDIA A100-SXM4-80GB (A100)"),
    ("NVIDIA H100 80GB HBM3", ["--base", "h200"], "not this GPU, NVIDIA H100 80GB HBM3 (H100)"),
    ("NVIDIA H100 80GB HBM3", [], "no shipped cost profile for 'NVIDIA H100 80GB HBM3'"),
])
def test_a_base_that_does_not_describe_the_gpu_is_refused_before_work(fake_gpu, capsys, gpu: str, args: list[str],
                                                                      message: str) -> None:
    fake_gpu(gpu)
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--models", "qwen3-tiny", "--out", "p.yaml"])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_mismatch_can_be_forced(fake_gpu) -> None:
    fake_gpu("NVIDIA A100-SXM4-80GB")
    with pytest.raises(Stop):
        main(["--base", "h200", "--allow-base-mismatch", "--models", "qwen3-tiny", "--out", "p.yaml"])


def test_a_cpu_dry_run_names_its_base(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--models", "qwen3-tiny", "--out", "p.yaml"])
    assert exit_info.value.code == 2 and "--device cpu: pass --base" in capsys.readouterr().err
