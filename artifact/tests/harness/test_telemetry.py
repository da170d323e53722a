"""Telemetry sampler on this machine's CPU, and its GPU path against a fake ``pynvml``.

The fake NVML has several GPUs so that the tests can tell "the GPUs the engine uses" (the
visible ones, in ``CUDA_VISIBLE_DEVICES`` order) from "every GPU of the node"; with ``mig`` its
GPU 1 is in MIG mode with two MIG devices (slots 0 and 2), whose utilisation NVML does not report.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from types import ModuleType, SimpleNamespace

import pandas as pd
import pytest

from dlfp.harness.devices import Visible
from dlfp.harness.telemetry import TelemetrySampler, describe_hardware, engine_gpus, gpu_memory, telemetry_source


class FakeNVMLError(Exception):
    pass


UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-dddd-3"]


MIG_UUIDS = {0: "MIG-1111-aaaa", 2: "MIG-2222-bbbb"}


def fake_pynvml(calls: list[str], count: int = 1, mig: bool = False, free_gib: float = 78.0) -> ModuleType:
    """``count`` GPUs whose power reading always fails, recording init/shutdown in ``calls``;
    GPU ``i``'s utilisation is ``80 + i``, so samples say which GPU they came from. Handles are
    ``("gpu", i)`` and, with ``mig``, ``("mig", 1, slot)`` for GPU 1's MIG devices (10 GiB each,
    ``slot + 1`` GiB used)."""
    m = ModuleType("pynvml")

    def power(handle: object) -> int:
        raise FakeNVMLError("power not supported")

    def handle(i: int) -> tuple[str, int]:
        if not 0 <= i < count:
            raise FakeNVMLError(f"invalid index {i}")
        return ("gpu", i)

    def util(h: tuple) -> SimpleNamespace:
        if h[0] == "mig":
            raise FakeNVMLError("Not Supported")  # as NVML answers for a MIG device
        return SimpleNamespace(gpu=80 + h[1], memory=40)

    def memory(h: tuple) -> SimpleNamespace:
        if h[0] == "mig":
            return SimpleNamespace(used=(h[2] + 1) * 2**30, free=(9 - h[2]) * 2**30, total=10 * 2**30)
        return SimpleNamespace(used=2 * 2**30, free=free_gib * 2**30, total=80 * 2**30)

    def mig_handle(parent: tuple, slot: int) -> tuple[str, int, int]:
        if parent != ("gpu", 1) or slot not in MIG_UUIDS:
            raise FakeNVMLError("Not Found")
        return ("mig", 1, slot)

    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: count
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetUUID = lambda h: (UUIDS[h[1]] if h[0] == "gpu" else MIG_UUIDS[h[2]]).encode()
    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetClockInfo = lambda h, clock: 1980 if clock == m.NVML_CLOCK_SM else 0
    m.nvmlDeviceGetMemoryInfo = memory
    m.nvmlDeviceGetPowerUsage = power
    m.nvmlDeviceGetName = lambda h: b"NVIDIA Fake100" if h[0] == "gpu" else b"NVIDIA Fake100 MIG 1g.10gb"
    m.nvmlSystemGetDriverVersion = lambda: "555.42"
    if mig:
        m.nvmlDeviceGetMigMode = lambda h: (1, 1) if h == ("gpu", 1) else (0, 0)
        m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
        m.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
        m.nvmlDeviceGetGpuInstanceId = lambda h: h[2] + 1
        m.nvmlDeviceGetComputeInstanceId = lambda h: 0
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


def sample_for(seconds: float, gpus: Sequence[int | Visible | None] | None = None) -> pd.DataFrame:
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
                       "cpu_physical_cores", "memory_gib", "gpus", "cuda_visible_devices", "cuda_device_order",
                       "visible_gpus", "visible_devices", "nvml_error"}
    assert hw["gpus"] == [] and hw["visible_gpus"] == [] and hw["memory_gib"] > 0 and hw["cpu_logical_cores"] >= 1
    assert hw["nvml_error"] == "pynvml (nvidia-ml-py) is not installed"  # why there are no GPUs, stated
    json.dumps(hw)
    assert telemetry_source() == "cpu (psutil)"
    assert engine_gpus(1) == [] and gpu_memory(1) == []


def test_describe_hardware_with_gpu(fake_gpu: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    hw = describe_hardware()
    assert hw["gpus"] == [{"index": 0, "uuid": "GPU-aaaa-0", "name": "NVIDIA Fake100", "memory_gib": 80.0,
                           "driver": "555.42"}]
    assert hw["cuda_visible_devices"] is None and hw["visible_gpus"] == [0] and hw["nvml_error"] is None
    assert hw["cuda_device_order"] == "PCI_BUS_ID"  # what dlfp's engines run under (dlfp.harness.engine)
    assert hw["visible_devices"] == [{"entry": "0", "index": 0, "mig": None, "name": None, "sampled": True,
                                      "note": None}]
    json.dumps(hw)
    assert telemetry_source() == "nvidia (pynvml)"
    assert fake_gpu == ["init", "shutdown"] * 2


def test_manifest_names_the_visible_gpus_of_a_node(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-dddd-3,1")
    hw = describe_hardware()
    assert [g["index"] for g in hw["gpus"]] == [0, 1, 2, 3]  # the node: every GPU, as NVML lists them
    assert hw["cuda_visible_devices"] == "GPU-dddd-3,1" and hw["visible_gpus"] == [3, 1]
    assert [g.index for g in engine_gpus(1)] == [3] and [g.index for g in engine_gpus(2)] == [3, 1]


def test_sampler_samples_only_the_engines_gpus(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu<k> is the engine's cuda:<k>: NVML GPU 3 then 1 here, never GPU 0 or 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,2")
    df = sample_for(0.3, gpus=engine_gpus(2))
    util = df[df.metric == "util_pct"].groupby("source")["value"].agg(set).to_dict()
    assert util == {"cpu": util["cpu"], "gpu0": {83.0}, "gpu1": {81.0}}
    gap = sample_for(0.3, gpus=[None, 1])  # a device not sampled keeps its place: cuda:1 is still gpu1
    assert set(gap.source) == {"cpu", "gpu1"} and set(metric(gap, "gpu1", "util_pct")["value"]) == {81.0}
    default = sample_for(0.3)  # no list: every GPU visible to the process, in CUDA order
    assert set(default.source) == {"cpu", "gpu0", "gpu1", "gpu2"}
    assert set(metric(default, "gpu2", "util_pct")["value"]) == {82.0}


def test_nvml_that_fails_is_recorded_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver NVML cannot talk to: no GPU records, the reason in ``nvml_error``, CPU sampling goes on."""
    broken = fake_pynvml([], count=2)

    def init() -> None:
        raise FakeNVMLError("Driver Not Loaded")

    broken.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    hw = describe_hardware()
    assert hw["gpus"] == [] and hw["nvml_error"] == "nvmlInit failed (FakeNVMLError: Driver Not Loaded)"
    assert set(sample_for(0.2, gpus=engine_gpus(1)).source) == {"cpu"}


def test_a_gpu_field_nvml_refuses_leaves_a_hole_not_an_empty_list(fake_gpu: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One refused query (a name) used to empty the GPU list, which labels then read as a CPU run."""
    nvml = sys.modules["pynvml"]

    def name(h: object) -> str:
        raise FakeNVMLError("Unknown Error")

    monkeypatch.setattr(nvml, "nvmlDeviceGetName", name)
    hw = describe_hardware()
    assert [(g["index"], g["name"], g["memory_gib"]) for g in hw["gpus"]] == [(0, None, 80.0)]
    assert hw["visible_gpus"] == [0] and hw["nvml_error"] is None


@pytest.fixture
def mig_node(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    nvml = fake_pynvml([], count=4, mig=True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return nvml


def test_a_mig_device_is_a_usable_gpu(mig_node: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A MIG slice in CUDA_VISIBLE_DEVICES maps to its parent GPU (which ``dlfp gpu-check`` needs to
    accept it), is named as the slice, and is sampled through its own handle where NVML answers:
    memory and clock, not the unsupported utilisation, never the GPU's shared power."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222")
    hw = describe_hardware()
    assert hw["visible_gpus"] == [1] and hw["nvml_error"] is None
    assert hw["visible_devices"] == [{"entry": "MIG-2222", "index": 1, "mig": "MIG-2222-bbbb",
                                      "name": "NVIDIA Fake100 MIG 1g.10gb", "sampled": True, "note": None}]
    [device] = engine_gpus(1)
    assert (device.index, device.mig.slot) == (1, 2)
    df = sample_for(0.3, gpus=[device])
    assert set(df.source) == {"cpu", "gpu0"}
    assert set(metric(df, "gpu0", "mem_used_gib")["value"]) == {3.0}  # the slice's own memory
    assert set(df[df.source == "gpu0"].metric) == {"sm_clock_mhz", "mem_used_gib"}
    assert gpu_memory(1) == [("cuda:0 (NVML GPU 1, MIG device MIG-2222-bbbb)", 7.0, 10.0)]
    assert telemetry_source() == "nvidia (pynvml)"


def test_a_mig_device_found_by_uuid_without_nvmls_listing_calls(mig_node: ModuleType,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An NVML without the per-GPU MIG listing still maps a full MIG UUID to its GPU
    (``nvmlDeviceGetHandleByUUID``, ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``)."""
    monkeypatch.delattr(mig_node, "nvmlDeviceGetMaxMigDeviceCount")
    handles = {"MIG-1111-aaaa": ("mig", 1, 0)}
    monkeypatch.setattr(mig_node, "nvmlDeviceGetHandleByUUID", lambda uuid: handles[uuid], raising=False)
    monkeypatch.setattr(mig_node, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", lambda h: ("gpu", h[1]),
                        raising=False)
    monkeypatch.setattr(mig_node, "nvmlDeviceGetIndex", lambda h: h[1], raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1111-aaaa")
    hw = describe_hardware()
    assert hw["visible_gpus"] == [1] and hw["visible_devices"][0]["sampled"] is True
    assert set(metric(sample_for(0.3, gpus=engine_gpus(1)), "gpu0", "mem_used_gib")["value"]) == {1.0}


def test_a_mig_device_nvml_cannot_place_is_recorded_as_not_sampled(mig_node: ModuleType,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No MIG calls at all: the entry is in the manifest with the reason, nothing crashes, no GPU sampled."""
    for name in ("nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex"):
        monkeypatch.delattr(mig_node, name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1111-aaaa")
    hw = describe_hardware()
    [record] = hw["visible_devices"]
    assert hw["visible_gpus"] == [] and record["sampled"] is False and record["note"].startswith("not sampled")
    assert engine_gpus(1) == [] and set(sample_for(0.2, gpus=engine_gpus(1)).source) == {"cpu"}


def test_a_mig_handle_nvml_will_not_read_is_recorded_as_not_sampled(mig_node: ModuleType,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A MIG device NVML lists but will not read (here: its memory) is named, marked not sampled, and why."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-1111")
    real_memory = mig_node.nvmlDeviceGetMemoryInfo

    def memory(h: tuple) -> SimpleNamespace:
        if h[0] == "mig":
            raise FakeNVMLError("Insufficient Permissions")
        return real_memory(h)

    monkeypatch.setattr(mig_node, "nvmlDeviceGetMemoryInfo", memory)
    [record] = describe_hardware()["visible_devices"]
    assert (record["index"], record["sampled"]) == (1, False)
    assert record["note"] == "not sampled: NVML gives no readable MIG handle (FakeNVMLError: Insufficient Permissions)"


def test_device_order_the_user_set_is_recorded(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    hw = describe_hardware()
    assert hw["cuda_device_order"] == "FASTEST_FIRST" and hw["visible_gpus"] == [2]
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST" in hw["visible_devices"][0]["note"]


def test_gpu_memory_of_the_engines_gpus(four_gpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert gpu_memory(2) == [("cuda:0 (NVML GPU 3)", 78.0, 80.0), ("cuda:1 (NVML GPU 1)", 78.0, 80.0)]
    assert gpu_memory(1) == [("cuda:0 (NVML GPU 3)", 78.0, 80.0)]


def test_gpu_check_accepts_a_mig_slice(mig_node: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's case: ``dlfp gpu-check`` on a MIG slice used to say CUDA_VISIBLE_DEVICES "hides every GPU"."""
    from dlfp.cluster.gpucheck import host_gpus

    monkeypatch.setattr("dlfp.harness.engine.cpu_build", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-2222-bbbb")
    gpus, devices = host_gpus()
    assert [g["index"] for g in gpus] == [1] and devices == ["MIG-2222-bbbb"]
