"""Telemetry sampler on this machine's CPU, and its GPU path against a fake ``pynvml``."""

from __future__ import annotations

import json
import sys
import time
from types import ModuleType, SimpleNamespace

import pandas as pd
import pytest

from dlfp.telemetry import TelemetrySampler, describe_hardware, telemetry_source


class FakeNVMLError(Exception):
    pass


def fake_pynvml(calls: list[str]) -> ModuleType:
    """One GPU whose power reading always fails, recording init/shutdown in ``calls``."""
    m = ModuleType("pynvml")

    def power(handle: object) -> int:
        raise FakeNVMLError("power not supported")

    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=87, memory=40)
    m.nvmlDeviceGetClockInfo = lambda h, clock: 1980 if clock == m.NVML_CLOCK_SM else 0
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=2 * 2**30, total=80 * 2**30)
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetName = lambda h: b"NVIDIA Fake100"
    m.nvmlSystemGetDriverVersion = lambda: "555.42"
    return m


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pynvml`` fail, whatever is installed."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    return calls


def sample_for(seconds: float) -> pd.DataFrame:
    with TelemetrySampler(interval_s=0.05, t0_monotonic=time.monotonic()) as sampler:
        time.sleep(seconds)
    return sampler.frame()


def metric(df: pd.DataFrame, source: str, name: str) -> pd.DataFrame:
    return df[(df["source"] == source) & (df["metric"] == name)]


@pytest.mark.usefixtures("no_gpu")
def test_cpu_samples() -> None:
    df = sample_for(0.3)
    assert list(df.columns) == ["t_s", "source", "metric", "value"]
    assert set(df["source"]) == {"cpu"}
    for name in ("util_pct", "mem_used_gib"):
        rows = metric(df, "cpu", name)
        assert len(rows) >= 2
        assert rows["t_s"].is_monotonic_increasing and rows["t_s"].is_unique
    assert (df["t_s"] > 0).all()
    assert metric(df, "cpu", "util_pct")["value"].between(0, 100).all()
    assert (metric(df, "cpu", "mem_used_gib")["value"] > 0).all()


@pytest.mark.usefixtures("no_gpu")
def test_block_shorter_than_interval_gives_empty_frame() -> None:
    with TelemetrySampler(interval_s=60) as sampler:
        pass
    df = sampler.frame()
    assert df.empty and list(df.columns) == ["t_s", "source", "metric", "value"]


@pytest.mark.parametrize("interval_s", [0, -1, 60.5, float("nan")])
def test_bad_interval_raises(interval_s: float) -> None:
    with pytest.raises(ValueError, match="interval_s"):
        TelemetrySampler(interval_s=interval_s)


def test_sampler_is_single_use() -> None:
    sampler = TelemetrySampler(interval_s=60)
    with sampler:
        pass
    with pytest.raises(RuntimeError, match="single-use"), sampler:
        pass


def test_gpu_rows_and_failing_metric_skipped(fake_gpu: list[str]) -> None:
    df = sample_for(0.3)
    assert set(df["source"]) == {"cpu", "gpu0"}
    util = metric(df, "gpu0", "util_pct")
    assert len(util) >= 2 and util["t_s"].is_monotonic_increasing  # thread survived the errors
    assert set(util["value"]) == {87.0}
    assert set(metric(df, "gpu0", "sm_clock_mhz")["value"]) == {1980.0}
    assert set(metric(df, "gpu0", "mem_used_gib")["value"]) == {2.0}
    assert metric(df, "gpu0", "power_w").empty
    assert fake_gpu == ["init", "shutdown"]


def test_describe_hardware_without_gpu(no_gpu: None) -> None:
    hw = describe_hardware()
    assert set(hw) == {"hostname", "platform", "machine", "python", "cpu_model", "cpu_logical_cores",
                       "cpu_physical_cores", "memory_gib", "gpus"}
    assert hw["gpus"] == [] and hw["memory_gib"] > 0 and hw["cpu_logical_cores"] >= 1
    json.dumps(hw)
    assert telemetry_source() == "cpu (psutil)"


def test_describe_hardware_with_gpu(fake_gpu: list[str]) -> None:
    hw = describe_hardware()
    assert hw["gpus"] == [{"name": "NVIDIA Fake100", "memory_gib": 80.0, "driver": "555.42"}]
    json.dumps(hw)
    assert telemetry_source() == "nvidia (pynvml)"
    assert fake_gpu == ["init", "shutdown"] * 2
