"""GPU engine settings: validated by the trial config parser, turned into vLLM engine arguments.

Fast tests need no vLLM import. The slow one runs tensor parallelism 2 for real on vLLM's CPU
build (two worker processes, one core each, through the stamped multiprocess executor).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dlfp.harness.engine import (
    MODELED,
    TIMED_MP,
    TIMED_UNI,
    EngineSpec,
    cpu_build,
    engine_kwargs,
    executor_backend,
    omp_bind,
)
from dlfp.paths import CONFIG_ROOT, model_path, weight_files
from dlfp.trials.config import parse_config


def engine(**settings: Any) -> EngineSpec:
    return parse_config({"engine": settings}).engine


def test_new_settings_parse_with_their_defaults() -> None:
    spec = engine()
    assert (spec.gpu_memory_utilization, spec.enforce_eager, spec.async_scheduling) == (0.92, False, None)
    assert (spec.load_format, spec.tokenizer, spec.download_dir) == ("dummy", None, None)
    spec = engine(gpu_memory_utilization=0.85, enforce_eager=True, async_scheduling=False,
                  tokenizer=None, download_dir=None)
    assert spec.gpu_memory_utilization == 0.85 and spec.enforce_eager and spec.async_scheduling is False


def test_setting_types_come_from_defaults_and_annotations() -> None:
    assert EngineSpec.setting_type("gpu_memory_utilization") is float
    assert EngineSpec.setting_type("async_scheduling") is bool  # defaults to None: its annotation
    assert EngineSpec.setting_type("tokenizer") is str
    assert EngineSpec.setting_type("max_model_len") is int


@pytest.mark.parametrize(("settings", "field", "allowed"), [
    ({"gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization", r"\(0, 1\]"),
    ({"gpu_memory_utilization": 0.0}, "engine.gpu_memory_utilization", r"\(0, 1\]"),
    ({"gpu_memory_utilization": "0.9"}, "engine.gpu_memory_utilization", "a float"),
    ({"enforce_eager": "yes"}, "engine.enforce_eager", "a bool"),
    ({"async_scheduling": 1}, "engine.async_scheduling", "a bool"),
    ({"tokenizer": 7}, "engine.tokenizer", "a str"),
    ({"download_dir": ["x"]}, "engine.download_dir", "a str"),
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


def hf_cache(root: Path, repo: str, weights: bool = True) -> Path:
    """A Hugging Face hub cache holding ``repo`` as ``hf download`` leaves it (one snapshot)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    (snapshot / "config.json").write_text((CONFIG_ROOT / "qwen3-tiny" / "config.json").read_text())
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    if weights:
        (snapshot / "model.safetensors").write_bytes(b"")
    return snapshot


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
