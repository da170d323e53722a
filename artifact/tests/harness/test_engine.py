"""GPU engine settings: validated by the trial config parser, turned into vLLM engine arguments.

Fast tests need no vLLM import; the GPU memory check runs against a fake NVML (no GPU here). The
slow one runs tensor parallelism 2 for real on vLLM's CPU build (two worker processes, one core
each, through the stamped multiprocess executor).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dlfp.control.fields import declared
from dlfp.harness import engine as engine_module
from dlfp.harness.engine import (
    MODELED,
    TIMED_MP,
    TIMED_UNI,
    EngineSpec,
    cpu_build,
    cpu_environment,
    engine_kwargs,
    executor_backend,
    markdown_table,
    memory_shortfall,
    omp_bind,
    start_engine,
)
from dlfp.paths import model_path, weight_files
from dlfp.trials.config import parse_config
from tests.hub import hf_cache


def engine(**settings: Any) -> EngineSpec:
    return parse_config({"engine": settings}).engine


def test_new_settings_parse_with_their_defaults() -> None:
    spec = engine()
    assert (spec.gpu_memory_utilization, spec.enforce_eager, spec.async_scheduling) == (0.92, False, None)
    assert (spec.load_format, spec.tokenizer, spec.download_dir) == ("dummy", None, None)
    spec = engine(gpu_memory_utilization=0.85, enforce_eager=True, async_scheduling=False,
                  tokenizer=None, download_dir=None)
    assert spec.gpu_memory_utilization == 0.85 and spec.enforce_eager and spec.async_scheduling is False


def test_every_setting_declares_its_rule_and_the_table_lists_each_once() -> None:
    """The check, the message and the reference table come from one declaration per setting."""
    rules = {f.name: rule for f, rule in declared(EngineSpec)}
    assert list(rules) == [f.name for f in fields(EngineSpec)]
    assert rules["max_num_seqs"].allowed == "[1, max_num_batched_tokens]"
    assert rules["async_scheduling"].allowed == "null or true or false" and rules["sim"].allowed == "null or a mapping"
    rows = markdown_table().splitlines()[2:]
    assert [r.split(" | ")[0].strip("| `") for r in rows] == list(rules) and all(r.count(" | ") == 4 for r in rows)
    assert "| `extra` | `{}` |" in rows[-1]


@pytest.mark.parametrize(("settings", "field", "allowed"), [
    ({"gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization", r"\(0, 1\]"),
    ({"gpu_memory_utilization": 0.0}, "engine.gpu_memory_utilization", r"\(0, 1\]"),
    ({"gpu_memory_utilization": "0.9"}, "engine.gpu_memory_utilization", r"\(0, 1\]"),
    ({"enforce_eager": "yes"}, "engine.enforce_eager", "true or false"),
    ({"async_scheduling": 1}, "engine.async_scheduling", "null or true or false"),
    ({"tokenizer": 7}, "engine.tokenizer", "null or a non-empty text"),
    ({"download_dir": ["x"]}, "engine.download_dir", "null or a file path"),
    ({"max_num_seqs": 0}, "engine.max_num_seqs", r"\[1, max_num_batched_tokens = 4096\]"),
    ({"seed": -1}, "engine.seed", r"\[0, 4294967295\]"),
    ({"dtype": "int4"}, "engine.dtype", "float32 or bfloat16 or float16 or auto"),
    ({"load_format": "pt"}, "engine.load_format", "dummy"),
    ({"load_format": "auto"}, "engine.load_format", "holds no weight files"),
    ({"model": "Org/Missing"}, "engine.model", "trials never download"),
    ({"tokenizer": "Org/Missing"}, "engine.tokenizer", "tokenizer_config.json"),
    ({"sim": {"profile": "a100"}, "async_scheduling": True}, "engine.async_scheduling", "engine.sim"),
    ({"sim": {"profile": "a100"}, "load_format": "auto"}, "engine.load_format", "engine.sim"),
    ({"extra": {"": 1}}, "engine.extra", "identifiers"),
    ({"extra": {"swap_space": float("nan")}}, "engine.extra", "without NaN"),
    ({"extra": {"compilation_config": {"sizes": [1, float("inf")]}}}, "engine.extra", "infinity"),
])
def test_bad_settings_are_refused_naming_the_field(settings: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"'{field}'.*{allowed}"):
        engine(**settings)


def test_real_checkpoint_by_hub_id_from_an_offline_cache(tmp_path: Path) -> None:
    snapshot = hf_cache(tmp_path / "cache", "Org/Tiny")
    assert model_path("Org/Tiny", str(tmp_path / "cache")) == str(snapshot)
    assert weight_files(str(snapshot)) == [snapshot / "model.safetensors"]
    with pytest.raises(ValueError, match="not found there"):
        model_path("Org/Tiny")  # not in the default cache
    spec = engine(model="Org/Tiny", tokenizer="Org/Tiny", download_dir=str(tmp_path / "cache"),
                  load_format="safetensors")
    kwargs = engine_kwargs(spec)
    assert kwargs["model"] == kwargs["tokenizer"] == str(snapshot)
    assert kwargs["load_format"] == "safetensors" and kwargs["skip_tokenizer_init"] is False
    assert kwargs["download_dir"] == str(tmp_path / "cache")


def test_real_checkpoint_by_directory(tmp_path: Path) -> None:
    snapshot = hf_cache(tmp_path, "Org/Dir")
    kwargs = engine_kwargs(engine(model=str(snapshot), load_format="auto"))
    assert kwargs["model"] == str(snapshot) and kwargs["tokenizer"] is None and kwargs["skip_tokenizer_init"]
    no_weights = hf_cache(tmp_path / "empty", "Org/Empty", weights=False)
    with pytest.raises(ValueError, match="holds no weight files"):
        engine(model=str(no_weights), load_format="auto")
    assert engine_kwargs(engine(model=str(no_weights)))["load_format"] == "dummy"  # a shape, random weights


def test_engine_arguments_carry_the_gpu_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    kwargs = engine_kwargs(engine(gpu_memory_utilization=0.9, enforce_eager=True, async_scheduling=False))
    assert kwargs["gpu_memory_utilization"] == 0.9 and kwargs["enforce_eager"] is True
    assert kwargs["async_scheduling"] is False
    assert kwargs["scheduler_cls"] == "dlfp.vllm.DLFPScheduler"
    assert engine_kwargs(engine())["async_scheduling"] is None  # vLLM's platform default


def test_executor_is_vllms_choice_with_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    one, two = EngineSpec(), EngineSpec(tensor_parallel_size=2)
    assert executor_backend(one, cpu=False) == TIMED_UNI  # GPU, TP=1: vLLM's "uni"
    assert executor_backend(two, cpu=False) == TIMED_MP
    assert executor_backend(one, cpu=True) == TIMED_MP  # the CPU platform swaps "uni" for "mp" itself
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert executor_backend(one, cpu=True) == TIMED_UNI  # engine core in-process: vLLM keeps "uni"
    assert executor_backend(EngineSpec(sim={"profile": "a100"}), cpu=True) == MODELED


@pytest.mark.skipif(not cpu_build(), reason="vLLM's CPU build forces async scheduling off; the GPU build does not")
def test_async_scheduling_on_the_cpu_build_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'engine\.async_scheduling'.*CPU build"):
        engine_kwargs(engine(async_scheduling=True))


@pytest.mark.parametrize(("cores", "tp", "bind"),
                         [(2, 1, "0-1"), (2, 2, "0|1"), (16, 2, "0-7|8-15"), (5, 2, "0-2|3-4")])
def test_omp_bind_gives_each_rank_its_cores(cores: int, tp: int, bind: str) -> None:
    assert omp_bind(cores, tp) == bind


def test_omp_bind_refuses_more_ranks_than_cores() -> None:
    with pytest.raises(ValueError, match=r"'engine\.tensor_parallel_size'"):
        omp_bind(1, 2)


@pytest.fixture
def restored_environ() -> Iterator[None]:
    """``start_engine`` writes the engine's environment into this process's: put it back afterwards."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_engines_number_gpus_as_nvml_does_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert cpu_environment(1)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert "CUDA_DEVICE_ORDER" not in cpu_environment(1)  # the user's order stands (and is recorded)


def test_engine_warnings_reach_the_engine_log_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """WARNING, not ERROR: vLLM says so when it turns async scheduling off, and that must be in the log."""
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    assert cpu_environment(1)["VLLM_LOGGING_LEVEL"] == "WARNING"
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    assert "VLLM_LOGGING_LEVEL" not in cpu_environment(1)


def test_memory_shortfall_names_both_numbers_and_the_fix() -> None:
    fits = [("cuda:0 (NVML GPU 0)", 79.0, 80.0)]
    assert memory_shortfall(0.9, fits) is None and memory_shortfall(0.9, []) is None
    why = memory_shortfall(0.9, [*fits, ("cuda:1 (NVML GPU 3)", 40.5, 80.0)])
    assert why is not None and "cuda:0" not in why
    assert "cuda:1 (NVML GPU 3): 40.5 GiB free of 80.0 GiB, 0.9 x 80.0 = 72.0 GiB requested" in why
    assert "Lower engine.gpu_memory_utilization in the config" in why and "overrides" in why
    assert "to at most 0.50 (free / total), or free the GPU" in why


class FakeNVMLError(Exception):
    pass


def fake_nvml(free_gib: float, total_gib: float = 80.0) -> Any:
    """One GPU with ``free_gib`` of ``total_gib`` free, as ``pynvml`` reports it."""
    from types import ModuleType, SimpleNamespace

    m = ModuleType("pynvml")
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 1

    def handle(i: int) -> str:
        if i != 0:
            raise FakeNVMLError(f"invalid index {i}")
        return "h0"

    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetUUID = lambda h: "GPU-aaaa-0"
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(free=free_gib * 2**30, total=total_gib * 2**30,
                                                          used=(total_gib - free_gib) * 2**30)
    return m


@pytest.mark.usefixtures("restored_environ")
@pytest.mark.parametrize(("free_gib", "refused"), [(30.0, True), (79.0, False)])
def test_a_gpu_engine_that_would_not_fit_is_refused_before_it_loads(
        monkeypatch: pytest.MonkeyPatch, free_gib: float, refused: bool) -> None:
    """A GPU another process half fills: refused at once with the numbers, before vLLM is imported
    (here an import of vLLM fails, so reaching it means the check let the engine start)."""
    monkeypatch.setattr(engine_module, "cpu_build", lambda: False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(free_gib))
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = EngineSpec(gpu_memory_utilization=0.9)
    if refused:
        with pytest.raises(ValueError, match=r"30\.0 GiB free of 80\.0 GiB, 0\.9 x 80\.0 = 72\.0 GiB requested.*"
                                             r"at most 0\.37 \(free / total\)"):
            start_engine(spec)
    else:
        with pytest.raises(ImportError):
            start_engine(spec)
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


@pytest.mark.usefixtures("restored_environ")
@pytest.mark.parametrize("spec", [EngineSpec(), EngineSpec(sim={"profile": "a100"})], ids=["cpu-build", "modeled"])
def test_engines_that_take_no_gpu_memory_are_not_checked(monkeypatch: pytest.MonkeyPatch, spec: EngineSpec) -> None:
    """The CPU build (no NVML, or NVML of a GPU it will not use) and a modeled accelerator skip the check."""
    def no_check(tp: int) -> list[Any]:
        raise AssertionError("GPU memory read for an engine that uses no GPU")

    monkeypatch.setattr("dlfp.harness.telemetry.gpu_memory", no_check)
    monkeypatch.setattr(engine_module, "cpu_build", lambda: spec.sim is None)  # the modeled one: a GPU build
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError):
        start_engine(spec)
