"""``dlfp.analysis.labels.measured_on``: the phrase a book prints, from a manifest alone (its outside-world
records, ``versions`` and ``hardware``, as odd as a hand edit leaves them: the reader checks the rest)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.analysis.labels import build, cpu_name, device, engine_gpus, measured_on, scope_note
from dlfp.trials.config import parse_config
from dlfp.trials.schema import Manifest, Unit


def gpu(index: int, name: str = "NVIDIA A100-SXM4-80GB") -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index:04d}", "name": name, "memory_gib": 79.2, "driver": "555.42"}


def typed(fields: dict[str, Any]) -> Manifest:
    """A manifest with these fields, built as the reader builds one (its checks are ``test_schema.py``'s)."""
    return Manifest(**{"status": "complete", "config": {}, "units": [], **fields})


def manifest(engine: dict[str, Any], hardware: dict[str, Any], vllm: str = "0.32.0", **extra: Any) -> Manifest:
    return typed({"versions": {"vllm": vllm}, "config": {"engine": engine}, "hardware": hardware, **extra})


CPU_HW = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_logical_cores": 2, "gpus": [],
          "cuda_visible_devices": None, "visible_gpus": []}


def test_cpu_run() -> None:
    m = manifest({"model": "qwen3-tiny"}, CPU_HW, vllm="0.32.0+cpu")
    assert measured_on(m) == "2-core Intel Xeon Processor, vLLM 0.32.0+cpu"


def test_cpu_run_as_recorded_before_visible_gpus_existed() -> None:
    hw = {k: v for k, v in CPU_HW.items() if k not in ("cuda_visible_devices", "visible_gpus")}
    assert measured_on(manifest({}, hw, vllm="0.32.0+cpu")) == "2-core Intel Xeon Processor, vLLM 0.32.0+cpu"


def test_cpu_build_on_a_gpu_node_ran_on_the_cpu() -> None:
    hw = {**CPU_HW, "gpus": [gpu(0)], "visible_gpus": [0]}
    assert measured_on(manifest({}, hw, vllm="0.32.0+cpu")).startswith("2-core Intel Xeon Processor")


def test_one_gpu() -> None:
    hw = {**CPU_HW, "gpus": [gpu(0)], "visible_gpus": [0]}
    assert measured_on(manifest({"tensor_parallel_size": 1}, hw)) == "1 x NVIDIA A100-SXM4-80GB, vLLM 0.32.0"


def test_two_gpus_of_eight_visible_in_cuda_order() -> None:
    """CUDA_VISIBLE_DEVICES=5,2 on an 8-GPU node: the engine used NVML GPUs 5 and 2, not 0 and 1."""
    names = ["NVIDIA A100-SXM4-40GB"] * 5 + ["NVIDIA H200"] * 3
    hw = {**CPU_HW, "gpus": [gpu(i, names[i]) for i in range(8)], "cuda_visible_devices": "5,2",
          "visible_gpus": [5, 2]}
    m = manifest({"tensor_parallel_size": 2}, hw)
    assert [g["index"] for g in engine_gpus(hw, 2)] == [5, 2]
    assert measured_on(m) == "1 x NVIDIA H200 + 1 x NVIDIA A100-SXM4-40GB (TP 2), vLLM 0.32.0"
    hw_same = {**hw, "gpus": [gpu(i, "NVIDIA H200") for i in range(8)], "visible_gpus": [6, 7]}
    assert measured_on(manifest({"tensor_parallel_size": 2}, hw_same)) == "2 x NVIDIA H200 (TP 2), vLLM 0.32.0"
    assert measured_on(manifest({"tensor_parallel_size": 1}, hw_same)) == "1 x NVIDIA H200, vLLM 0.32.0"


def test_gpu_manifest_without_visible_gpus_uses_the_first() -> None:
    hw = {"cpu_model": "AMD EPYC 7763", "cpu_logical_cores": 64, "gpus": [gpu(0), gpu(1)]}
    assert measured_on(manifest({"tensor_parallel_size": 2}, hw)) == "2 x NVIDIA A100-SXM4-80GB (TP 2), vLLM 0.32.0"


def test_modeled_run() -> None:
    m = manifest({"model": "qwen3-8b", "sim": {"profile": "h200", "async_scheduling": True, "tp": 2}},
                 CPU_HW, vllm="0.32.0+cpu",
                 sim_profile={"name": "h200", "values": {"device": "NVIDIA H200 SXM 141GB"}})
    assert measured_on(m) == ("simulated: cost profile h200 (NVIDIA H200 SXM 141GB, TP 2, async scheduling, "
                              "real time), real vLLM 0.32.0+cpu scheduler")
    bare = manifest({"sim": {"async_scheduling": False}}, CPU_HW, vllm="0.32.0+cpu")
    assert measured_on(bare) == ("simulated: cost profile a100 (TP 1, sync scheduling, real time), "
                                 "real vLLM 0.32.0+cpu scheduler")
    virtual = manifest({"sim": {"clock": "virtual"}}, CPU_HW, vllm="0.32.0+cpu")
    assert measured_on(virtual) == ("simulated: cost profile a100 (TP 1, async scheduling, virtual time, engine costs "
                                    "gpu-node), real vLLM 0.32.0+cpu scheduler")
    fast = manifest({"sim": {"clock": "virtual", "engine": "gpu-node-fast"}}, CPU_HW, vllm="0.32.0+cpu")
    assert "virtual time, engine costs gpu-node-fast)" in measured_on(fast)


def test_missing_fields_say_unknown() -> None:
    assert measured_on(typed({})) == "unknown build, vLLM unknown"


@pytest.mark.parametrize(("model", "name"), [
    ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Intel Xeon Platinum 8375C CPU @ 2.90GHz"),
    ("AMD EPYC 7B13", "AMD EPYC 7B13 CPU"),
    ("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", "Intel Core i7-8700 CPU @ 3.20GHz"),
    (None, "unknown CPU"),
])
def test_cpu_name(model: str | None, name: str) -> None:
    assert cpu_name(model) == name


def test_fields_of_the_wrong_kind_read_as_unknown() -> None:
    """A hand-edited manifest (found by the fuzz tests: a boolean CPU model) is named, not a crash."""
    manifest = typed({"versions": {"vllm": "0.32.0"}, "config": {"engine": {}},
                      "hardware": {"cpu_model": True, "cpu_logical_cores": "2", "gpus": True, "visible_gpus": [[0]]}})
    assert measured_on(manifest) == "GPU (telemetry unavailable: the manifest records no GPU), vLLM 0.32.0"
    hardware = manifest.hardware or {}
    hardware["gpus"] = [{"name": 7, "index": [0]}, "A100"]
    hardware["visible_gpus"] = None
    assert measured_on(manifest) == "1 x unknown GPU, vLLM 0.32.0"


def test_the_cpus_the_engine_was_bound_to_are_named() -> None:
    """A run with the engine on one core of two is another machine speed; its label says so."""
    bound = manifest({}, CPU_HW, vllm="0.32.0+cpu", engine_env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert measured_on(bound) == "2-core Intel Xeon Processor (engine on CPUs 0), vLLM 0.32.0+cpu"


def test_lateness_note_names_late_units_and_tolerates_odd_values() -> None:
    from dlfp.analysis.labels import lateness_note

    run = SimpleNamespace(manifest=typed({"units": [
        Unit(trial=1, arm="dlfp", send_lateness_ms={"p99": 109.1}),
        Unit(trial=0, arm="stock", send_lateness_ms={"p99": 0.3}),
        Unit(trial=0, arm="x", send_lateness_ms={"p99": True}), Unit(trial=0, arm="y")]}))  # type: ignore[dict-item]
    assert lateness_note(run) == "late sends (p99 over 10 ms): trial-1/dlfp 109 ms"
    assert lateness_note(SimpleNamespace(manifest=typed({}))).startswith("every unit sent its requests within 10 ms")


NVML_FAILED = {**CPU_HW, "nvml_error": "nvmlInit failed (NVMLError_DriverNotLoaded: Driver Not Loaded)"}


@pytest.mark.parametrize("versions", [{"vllm": "0.32.0"}, {"vllm": "0.32.0", "torch": "2.9.0+cu128"},
                                      {"vllm": "0.32.0+cu130", "torch": "2.9.0"}])
def test_a_cuda_run_whose_nvml_failed_is_a_gpu_run_not_a_cpu_one(versions: dict[str, str]) -> None:
    """Telemetry lists no GPU when NVML fails; the build, not that list, says the run was on a GPU."""
    m = dataclasses.replace(manifest({"tensor_parallel_size": 1}, NVML_FAILED), versions=versions)
    assert device(m) == "GPU (telemetry unavailable: nvmlInit failed (NVMLError_DriverNotLoaded: Driver Not Loaded))"
    assert measured_on(m) == f"{device(m)}, vLLM {versions['vllm']}"
    older = manifest({"tensor_parallel_size": 2}, {"cpu_model": "AMD EPYC 7763", "cpu_logical_cores": 64, "gpus": []})
    assert device(older) == "GPU (telemetry unavailable: the manifest records no GPU) (TP 2)"


def test_a_gpu_run_whose_visible_entry_nvml_could_not_place_says_which() -> None:
    hw = {**CPU_HW, "gpus": [gpu(0)], "cuda_visible_devices": "MIG-4b1e", "visible_gpus": [], "nvml_error": None,
          "visible_devices": [{"entry": "MIG-4b1e", "index": None, "mig": None, "name": None, "sampled": False,
                               "note": "not sampled: NVML cannot list MIG devices here, so its GPU is unknown"}]}
    assert measured_on(manifest({}, hw)) == ("GPU (telemetry unavailable: CUDA_VISIBLE_DEVICES entry 'MIG-4b1e' not "
                                             "sampled: NVML cannot list MIG devices here, so its GPU is unknown), "
                                             "vLLM 0.32.0")
    hidden = {**CPU_HW, "gpus": [gpu(0)], "cuda_visible_devices": "-1", "visible_gpus": []}
    assert device(manifest({}, hidden)) == "GPU (telemetry unavailable: no visible GPU recorded " \
                                           "(CUDA_VISIBLE_DEVICES='-1'))"


def test_a_mig_device_is_named_as_the_slice() -> None:
    hw = {**CPU_HW, "gpus": [gpu(0), gpu(1)], "cuda_visible_devices": "MIG-4b1e", "visible_gpus": [1],
          "visible_devices": [{"entry": "MIG-4b1e", "index": 1, "mig": "MIG-4b1e-0000", "sampled": True, "note": None,
                               "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb"}]}
    assert measured_on(manifest({}, hw)) == "1 x NVIDIA A100-SXM4-80GB MIG 3g.40gb, vLLM 0.32.0"
    hw["visible_devices"][0]["name"] = None
    assert device(manifest({}, hw)) == "1 x MIG device of NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize("versions", [{}, {"vllm": None}, {"vllm": ""}, {"vllm": "unknown"}, {"vllm": 32},
                                      {"torch": "2.9.0+cu128"}])
def test_an_unknown_build_is_neither_gpu_nor_cpu(versions: dict[str, Any]) -> None:
    hw = {**CPU_HW, "gpus": [gpu(0)], "visible_gpus": [0]}
    m = dataclasses.replace(manifest({}, hw), versions=versions)
    assert build(m) == "unknown" and device(m) == "unknown build"
    assert measured_on(m) == "unknown build, vLLM unknown"


def run_of(m: Manifest) -> Any:
    return SimpleNamespace(manifest=m, config=parse_config({"engine": m.config["engine"]}))


@pytest.mark.parametrize(("versions", "starts"), [
    ({"vllm": "0.32.0+cpu"}, "CPU measurements of the weightless qwen3-tiny"),
    ({"vllm": "0.32.0"}, "GPU measurements of qwen3-tiny"),
    ({}, "measurements of qwen3-tiny (float32) by an unknown vLLM build"),
    ({"vllm": "unknown"}, "measurements of qwen3-tiny (float32) by an unknown vLLM build"),
])
def test_scope_note_follows_the_build(versions: dict[str, Any], starts: str) -> None:
    note = scope_note(run_of(dataclasses.replace(manifest({}, CPU_HW), versions=versions)))
    assert note.startswith(starts)
    assert ("GPU measurements" in note) == (versions.get("vllm") == "0.32.0")


def unit(trial: int, ran: dict[str, Any] | None, status: str = "complete") -> Unit:
    return Unit(trial=trial, arm="stock", status=status, ran=ran)


SYNC = {"scheduler": "DLFPScheduler", "async_scheduling": False, "executor": "TimedMultiprocExecutor"}
ASYNC = {"scheduler": "DLFPAsyncScheduler", "async_scheduling": True, "executor": "TimedUniProcExecutor"}


@pytest.mark.parametrize(("units", "tail"), [
    ([unit(0, SYNC), unit(1, SYNC)], ", sync scheduling"),
    ([unit(0, ASYNC), unit(1, ASYNC)], ", async scheduling"),
    ([unit(0, SYNC), unit(1, ASYNC)], ", mixed sync/async scheduling"),
    ([unit(0, None), unit(1, None)], ""),                       # every committed run: recorded before "ran"
    ([unit(0, SYNC), unit(1, ASYNC, status="missing")], ", sync scheduling"),  # only what ran counts
    ([unit(0, {"scheduler": "DLFPAsyncScheduler"})], ", async scheduling"),  # the class says it too
    ([unit(0, {"async_scheduling": "yes"})], ""),
])
def test_real_runs_say_how_they_scheduled(units: list[Any], tail: str) -> None:
    m = manifest({}, CPU_HW, vllm="0.32.0+cpu", units=units)
    assert measured_on(m) == f"2-core Intel Xeon Processor, vLLM 0.32.0+cpu{tail}"
    gpu_run = manifest({}, {**CPU_HW, "gpus": [gpu(0)], "visible_gpus": [0]}, units=units)
    assert measured_on(gpu_run) == f"1 x NVIDIA A100-SXM4-80GB, vLLM 0.32.0{tail}"


VERSIONS = st.fixed_dictionaries({}, optional={
    "vllm": st.one_of(st.none(), st.integers(), st.text(max_size=10),
                      st.sampled_from(["0.32.0", "0.32.0+cpu", "0.32.0+cu130", "unknown", ""])),
    "torch": st.one_of(st.none(), st.sampled_from(["2.9.0", "2.9.0+cu128", "2.13.0+cpu"]), st.text(max_size=6))})
JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6), st.lists(st.integers(0, 3), max_size=3))
HARDWARE = st.fixed_dictionaries({}, optional={
    "gpus": st.one_of(JUNK, st.lists(st.builds(gpu, st.integers(0, 3)), max_size=3)), "visible_gpus": JUNK,
    "nvml_error": st.one_of(st.none(), st.text(max_size=8)), "cpu_model": JUNK, "cpu_logical_cores": JUNK,
    "visible_devices": st.one_of(JUNK, st.lists(st.fixed_dictionaries({}, optional={
        "entry": JUNK, "index": JUNK, "mig": JUNK, "name": JUNK, "note": JUNK}), max_size=2))})


@settings(max_examples=200, deadline=None)
@given(versions=VERSIONS, hardware=HARDWARE, tp=JUNK)
def test_a_label_never_calls_a_non_cpu_build_a_cpu_run(versions: dict[str, Any], hardware: dict[str, Any],
                                                       tp: Any) -> None:
    """Whatever the manifest holds: a CPU build is labelled by its CPU alone, a GPU build by GPUs or
    "GPU (telemetry unavailable: ...)", anything else "unknown build"; and nothing raises."""
    m = typed({"versions": versions, "config": {"engine": {"tensor_parallel_size": tp}}, "hardware": hardware})
    kind, label = build(m), device(m)
    assert isinstance(measured_on(m), str)
    if kind == "unknown":
        assert label.startswith("unknown build")
    elif kind == "gpu":
        assert " x " in label or label.startswith("GPU (telemetry unavailable: "), label
    else:  # the CPU it ran on, whatever GPUs the node had or telemetry made of them
        cpu_only = {k: v for k, v in hardware.items() if k not in ("gpus", "visible_gpus", "visible_devices")}
        assert label == device(dataclasses.replace(m, hardware=cpu_only)), label
