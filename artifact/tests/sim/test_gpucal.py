"""GPU calibration: the fit recovers known efficiencies, a CPU dry run writes a valid profile,
and bad arguments stop before any work.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml

from dlfp.sim.costmodel import load_profile
from dlfp.sim.gpucal import busy_seconds, main

torch.set_num_threads(1)  # the tests share two cores with timing-sensitive runs


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
