"""``dlfp gpu-check``: refuses at once without a GPU; its plan, configs and verdict logic; and the
whole command on the CPU engine (``--cpu-dry-run``, slow: three engine starts and a calibration).

On a GPU node the same code runs the shipped GPU configs on CUDA; that part (CUDA engines,
NVML on real GPUs, gpu-calibrate on CUDA) is not run here.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pandas as pd
import pytest

from dlfp.analysis.tables import interval_divergence
from dlfp.cluster import gpucheck
from dlfp.cluster.gpucheck import (
    Check,
    NotAGPUHost,
    ahead_share,
    check_config,
    dlfp_activity,
    plan,
    proxy_error,
    stamped_share,
)
from dlfp.harness.engine import cpu_build
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.mark.skipif(not cpu_build(), reason="needs vLLM's CPU build (a host where gpu-check must refuse)")
def test_refuses_at_once_on_a_cpu_host(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dlfp.cli", "gpu-check", "--out", str(tmp_path / "gc")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert "CPU build" in done.stderr and "--cpu-dry-run" in done.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "gc").exists()  # no vLLM import, no work


def nvml(names: list[str]) -> ModuleType:
    m = ModuleType("pynvml")
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(names)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"
    m.nvmlDeviceGetName = lambda h: names[h]
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=80 * 2**30)
    m.nvmlSystemGetDriverVersion = lambda: "555.42"
    return m


def test_host_gpus_are_the_visible_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dlfp.harness.engine.cpu_build", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml(["NVIDIA H200"] * 4))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0003,1")
    gpus, devices = gpucheck.host_gpus()
    assert [g["index"] for g in gpus] == [3, 1] and devices == ["GPU-0003", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpucheck.host_gpus()[1] == ["0", "1", "2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NotAGPUHost, match="hides every GPU"):
        gpucheck.host_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NotAGPUHost, match="NVML reports no NVIDIA GPU"):
        gpucheck.host_gpus()


def test_plan_adds_tp2_where_two_gpus_are_visible(tmp_path: Path) -> None:
    models = ["qwen3-0.6b", "qwen3-8b"]
    one = plan(models, ["3"], tmp_path)
    assert [(c.model, c.tp, c.devices) for c in one] == [("qwen3-0.6b", 1, "3"), ("qwen3-8b", 1, "3")]
    two = plan(models, ["GPU-a", "GPU-b", "GPU-c"], tmp_path)
    assert [(c.model, c.tp, c.devices) for c in two][-1] == ("qwen3-8b", 2, "GPU-a,GPU-b")
    assert two[-1].folder == tmp_path / "qwen3-8b-tp2"
    assert [(c.tp, c.devices) for c in plan(["qwen3-tiny"], None, tmp_path)] == [(1, None)]


@pytest.mark.parametrize("name", ["a100", "h200", "gpu-check-cpu"])
def test_check_configs_are_the_shipped_ones_made_small(name: str, tmp_path: Path) -> None:
    check = Check("qwen3-8b" if name != "gpu-check-cpu" else "qwen3-tiny", 2, tmp_path, None)
    config = check_config(ROOT / "configs" / f"{name}.yaml", check, 24)
    assert len(config.seeds) == 1 and config.workload["n_requests"] == 24
    assert config.engine.model == check.model and config.engine.tensor_parallel_size == 2
    assert config.arm_names == ("stock", "dlfp")


def test_visible_devices_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    with gpucheck.visible_devices("1"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with gpucheck.visible_devices("0,1"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def steps_frame(schedule: list[float], done: list[float | None], prefill: list[int], cap: list[float | None],
                decodes: int = 4) -> pd.DataFrame:
    n = len(schedule)
    return pd.DataFrame({"step": range(n), "schedule_t": schedule, "complete_t": [s + 0.009 for s in schedule],
                         "exec_done_t": done, "prefill_tokens": prefill, "decode_reqs": [decodes] * n, "cap": cap})


def test_proxy_error_against_the_executors_completion_stamps() -> None:
    """Scheduler calls every 10 ms while the device completes steps 20 ms apart: error 0.5, measured on
    the stamps; the engine core's collect times (late by 1 to 11 ms) would say otherwise."""
    schedule = [0.01 * j for j in range(6)]
    done = [0.005 + 0.02 * j for j in range(6)]
    lags = [0.001, 0.011, 0.001, 0.011, 0.001, 0.011]
    collected = [d + g for d, g in zip(done, lags, strict=True)]
    s = steps_frame(schedule, done, [64] * 6, [64.0] * 6).assign(complete_t=collected)
    assert proxy_error(s) == pytest.approx(0.5)
    assert stamped_share(s) == 1.0
    unstamped = s.assign(exec_done_t=None)  # the stock executor, or a CPU engine without stamps
    assert stamped_share(unstamped) == 0.0
    assert proxy_error(unstamped) == pytest.approx(interval_divergence(s.drop(columns="exec_done_t")))
    assert proxy_error(unstamped) != pytest.approx(0.5)  # collect cadences 30 and 10 ms
    sync = steps_frame(schedule, [t + 0.008 for t in schedule], [64] * 6, [64.0] * 6)
    assert proxy_error(sync) == pytest.approx(0.0, abs=1e-9)


def test_proxy_error_is_the_books_signal_divergence() -> None:
    """One definition: gpu-check's proxy error is the book's column, on stamped and unstamped steps, and
    on a step table that logged which completion time the controller took."""
    schedule = [0.01 * j for j in range(8)]
    done = [0.004 + 0.013 * j for j in range(8)]
    s = steps_frame(schedule, done, [64, 0, 64, 64, 0, 64, 64, 64], [64.0] * 8)
    for frame in (s, s.assign(exec_done_t=None), s.assign(complete_source=["exec_done"] * 4 + ["collect"] * 4)):
        assert proxy_error(frame) == interval_divergence(frame)
    assert stamped_share(s.assign(complete_source=["exec_done"] * 6 + ["collect", None])) == pytest.approx(6 / 7)
    assert math.isnan(stamped_share(s.assign(complete_t=None)))  # nothing collected: nothing to say


def test_dlfp_activity_counts_steps_the_cap_bound_below_stocks_budget() -> None:
    s = steps_frame([0.0, 0.01, 0.02, 0.03], [None] * 4, [256, 100, 2048, 0], [256.0, 256.0, 2048.0, None])
    assert dlfp_activity(s, stock_budget=2048) == (1, 3)  # 256 bound; 100 did not fill it; 2048 is stock's budget
    assert dlfp_activity(s, stock_budget=4096) == (2, 3)


def test_verdict_table_keeps_long_reasons_below_it() -> None:
    rows = [{"model": "qwen3-0.6b", "TP": 1, "status": "complete", "P99 ITL stock (ms)": 31.25,
             "proxy error DLFP": 0.4321, "measured on": "1 x NVIDIA H200, vLLM 0.32.0"},
            {"model": "qwen3-8b", "TP": 2, "status": "design refused", "reason": "stall 3 ms < target"}]
    text = gpucheck.format_table(rows)
    table, notes = text.split("\n\n")
    assert "31.2" in table and "0.432" in table and "vLLM" not in table and "stall" not in table
    assert notes.splitlines() == ["qwen3-0.6b TP=1: measured on 1 x NVIDIA H200, vLLM 0.32.0",
                                  "qwen3-8b TP=2: reason stall 3 ms < target"]


def test_ahead_share() -> None:
    sync = steps_frame([0.0, 0.01, 0.02], [None] * 3, [0] * 3, [None] * 3)  # complete 9 ms after schedule
    assert ahead_share(sync) == 0.0
    overlapped = sync.assign(complete_t=[0.015, 0.025, 0.035])
    assert ahead_share(overlapped) == 1.0
