"""``dlfp.analysis.labels.measured_on``: the phrase a book prints, from manifest dicts alone."""

from __future__ import annotations

from typing import Any

import pytest

from dlfp.analysis.labels import cpu_name, engine_gpus, measured_on


def gpu(index: int, name: str = "NVIDIA A100-SXM4-80GB") -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index:04d}", "name": name, "memory_gib": 79.2, "driver": "555.42"}


def manifest(engine: dict[str, Any], hardware: dict[str, Any], vllm: str = "0.32.0", **extra: Any) -> dict[str, Any]:
    return {"versions": {"vllm": vllm}, "config": {"engine": engine}, "hardware": hardware, **extra}


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
    assert measured_on(m) == ("simulated: cost profile h200 (NVIDIA H200 SXM 141GB, TP 2, async scheduling), "
                              "real vLLM 0.32.0+cpu scheduler")
    bare = manifest({"sim": {"async_scheduling": False}}, CPU_HW, vllm="0.32.0+cpu")
    assert measured_on(bare) == "simulated: cost profile a100 (TP 1, sync scheduling), real vLLM 0.32.0+cpu scheduler"


def test_missing_fields_say_unknown() -> None:
    assert measured_on({}) == "unknown CPU, vLLM unknown"


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
    manifest = {"versions": {"vllm": "0.32.0"}, "config": {"engine": {}},
                "hardware": {"cpu_model": True, "cpu_logical_cores": "2", "gpus": True, "visible_gpus": [[0]]}}
    assert measured_on(manifest) == "unknown CPU, vLLM 0.32.0"
    manifest["hardware"]["gpus"] = [{"name": 7, "index": [0]}, "A100"]
    manifest["hardware"]["visible_gpus"] = None
    assert measured_on(manifest) == "1 x unknown GPU, vLLM 0.32.0"


def test_the_cpus_the_engine_was_bound_to_are_named() -> None:
    """A run with the engine on one core of two is another machine speed; its label says so."""
    bound = manifest({}, CPU_HW, vllm="0.32.0+cpu", engine_env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert measured_on(bound) == "2-core Intel Xeon Processor (engine on CPUs 0), vLLM 0.32.0+cpu"


def test_lateness_note_names_late_units_and_tolerates_odd_manifests() -> None:
    from types import SimpleNamespace

    from dlfp.analysis.labels import lateness_note

    run = SimpleNamespace(manifest={"units": [
        {"trial": 1, "arm": "dlfp", "send_lateness_ms": {"p99": 109.1}},
        {"trial": 0, "arm": "stock", "send_lateness_ms": {"p99": 0.3}},
        {"trial": 0, "arm": "x", "send_lateness_ms": {"p99": True}}, "junk", {"send_lateness_ms": None}]})
    assert lateness_note(run) == "late sends (p99 over 10 ms): trial-1/dlfp 109 ms"
    assert lateness_note(SimpleNamespace(manifest={})).startswith("every unit sent its requests within 10 ms")
