"""Telemetry sampler on this machine's CPU, and its GPU path against a fake ``pynvml``.

The fake NVML has several GPUs so that the tests can tell "the GPUs the engine uses" (the
visible ones, in ``CUDA_VISIBLE_DEVICES`` order) from "every GPU of the node".
"""

from __future__ import annotations

import json
import sys
import time
from types import ModuleType, SimpleNamespace

import pandas as pd
import pytest

from dlfp.harness.telemetry import TelemetrySampler, describe_hardware, engine_gpus, telemetry_source, visible_gpus


class FakeNVMLError(Exception):
    pass


UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-dddd-3"]


def fake_pynvml(calls: list[str], count: int = 1) -> ModuleType:
    """``count`` GPUs whose power reading always fails, recording init/shutdown in ``calls``;
    GPU ``i``'s utilisation is ``80 + i``, so samples say which GPU they came from."""
    m = ModuleType("pynvml")

    def power(handle: object) -> int:
        raise FakeNVMLError("power not supported")

    def handle(i: int) -> str:
        if not 0 <= i < count:
            raise FakeNVMLError(f"invalid index {i}")
        return f"handle{i}"

    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetUUID = lambda h: UUIDS[int(h[-1])].encode()
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=80 + int(h[-1]), memory=40)
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
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return calls


@pytest.fixture
def four_gpus(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls, count=4))
    return calls


def sample_for(seconds: float, gpus: list[int] | None = None) -> pd.DataFrame:
    with TelemetrySampler(interval_s=0.05, t0_monotonic=time.monotonic(), gpus=gpus) as sampler:
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
    assert set(util["value"]) == {80.0}
    assert set(metric(df, "gpu0", "sm_clock_mhz")["value"]) == {1980.0}
    assert set(metric(df, "gpu0", "mem_used_gib")["value"]) == {2.0}
    assert metric(df, "gpu0", "power_w").empty
    assert fake_gpu == ["init", "shutdown"]


def test_describe_hardware_without_gpu(no_gpu: None) -> None:
    hw = describe_hardware()
    assert set(hw) == {"hostname", "platform", "machine", "python", "cpu_model", "cpu_logical_cores",
                       "cpu_physical_cores", "memory_gib", "gpus", "cuda_visible_devices", "visible_gpus"}
    assert hw["gpus"] == [] and hw["visible_gpus"] == [] and hw["memory_gib"] > 0 and hw["cpu_logical_cores"] >= 1
    json.dumps(hw)
    assert telemetry_source() == "cpu (psutil)"


def test_describe_hardware_with_gpu(fake_gpu: list[str]) -> None:
    hw = describe_hardware()
    assert hw["gpus"] == [{"index": 0, "uuid": "GPU-aaaa-0", "name": "NVIDIA Fake100", "memory_gib": 80.0,
                           "driver": "555.42"}]
    assert hw["cuda_visible_devices"] is None and hw["visible_gpus"] == [0]
    json.dumps(hw)
    assert telemetry_source() == "nvidia (pynvml)"
    assert fake_gpu == ["init", "shutdown"] * 2


@pytest.mark.parametrize(("env", "want"), [
    (None, [0, 1, 2, 3]),
    ("2,0", [2, 0]),
    ("GPU-cccc,1", [2, 1]),        # a unique UUID prefix, as CUDA accepts
    ("1,7,2", [1]),                # CUDA stops at the first entry naming no device
    ("GPU-,3", []),                # an ambiguous prefix names no device
    ("3,3", [3]),
    ("-1", []),
    ("", []),
    ("MIG-1234,0", []),
])
def test_visible_gpus_follow_cuda_visible_devices(env: str | None, want: list[int]) -> None:
    assert visible_gpus(env, UUIDS) == want


def test_manifest_names_the_visible_gpus_of_a_node(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-dddd-3,1")
    hw = describe_hardware()
    assert [g["index"] for g in hw["gpus"]] == [0, 1, 2, 3]  # the node: every GPU, as NVML lists them
    assert hw["cuda_visible_devices"] == "GPU-dddd-3,1" and hw["visible_gpus"] == [3, 1]
    assert engine_gpus(1) == [3] and engine_gpus(2) == [3, 1]


def test_sampler_samples_only_the_engines_gpus(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu<k> is the engine's cuda:<k>: NVML GPU 3 then 1 here, never GPU 0 or 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,2")
    df = sample_for(0.3, gpus=engine_gpus(2))
    util = df[df.metric == "util_pct"].groupby("source")["value"].agg(set).to_dict()
    assert util == {"cpu": util["cpu"], "gpu0": {83.0}, "gpu1": {81.0}}
    default = sample_for(0.3)  # no list: every GPU visible to the process, in CUDA order
    assert set(default.source) == {"cpu", "gpu0", "gpu1", "gpu2"}
    assert set(metric(default, "gpu2", "util_pct")["value"]) == {82.0}
