"""``dlfp.book.notebook``: the notebooks' parameter helpers refuse a bad parameter with one line
naming it, its value and what is allowed, and turn good ones into exactly the configs the committed
runs were made from (so re-executing a notebook over a committed folder reruns nothing).

``tests/test_fuzz_inputs.py`` already fuzzes which inputs are refused; here are the exact words of
a refusal, the plans' contents (names, folders, models, TP sizes, overrides) and ``run_label``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.book.notebook import Plain, config_with_overrides, generalization_plan, modeled_plan, require, run_label
from dlfp.paths import REPO_ROOT
from dlfp.studies.generalization import STUDY_RUNS, StudyRun
from dlfp.trials.manifest import normalized_config
from dlfp.trials.provenance import repo_root
from tests.hub import hf_cache

CONFIGS = REPO_ROOT / "configs"
CPU_DEFAULT = str(CONFIGS / "cpu-default.yaml")
CPU_LADDER = str(CONFIGS / "cpu-generalization.yaml")
SIM = str(CONFIGS / "sim-generalization.yaml")
RUNS = REPO_ROOT / "data" / "runs"


# require and Plain

def test_require_passes_silently_when_ok() -> None:
    assert require(True, "x", object(), "anything") is None


def test_require_names_parameter_value_and_allowed() -> None:
    with pytest.raises(ValueError) as err:
        require(False, "trials", [0], "a positive integer")
    assert str(err.value) == "notebook parameter 'trials' = [0] is invalid: allowed a positive integer"


@given(name=st.text(min_size=1, max_size=20), value=st.one_of(st.text(), st.integers(), st.none(),
                                                              st.lists(st.text(max_size=5), max_size=3)))
def test_require_message_is_one_line_with_the_values_repr(name: str, value: Any) -> None:
    with pytest.raises(ValueError) as err:
        require(False, name, value, "something else")
    msg = str(err.value)
    assert msg.startswith(f"notebook parameter {name!r} = {value!r} is invalid")
    assert msg.endswith(": allowed something else") and "\n" not in msg


def test_plain_is_glued_without_quotes() -> None:
    p = Plain("measured: 2-core CPU")
    assert repr(p) == str(p) == "measured: 2-core CPU" and isinstance(p, str) and p == "measured: 2-core CPU"


# run_label

@pytest.mark.skipif(repo_root() is None, reason="needs the git checkout")
def test_a_committed_run_is_called_so() -> None:
    assert run_label("data/runs/cpu-default") == "the committed run"  # as the notebook passes it
    assert run_label(str(RUNS / "cpu-default")) == "the committed run"


def test_any_other_run_is_named_by_its_folder(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{}")
    assert run_label(str(tmp_path)) == f"the run in {tmp_path} (not a committed run)"


# config_with_overrides

def test_overrides_merge_into_the_file_nested() -> None:
    cfg = config_with_overrides(CPU_DEFAULT, {"trials": 2, "workload": {"n_requests": 12}, "dlfp": {"gain": 0.4}})
    assert cfg.name == "cpu-default" and cfg.seeds == (0, 1)
    assert cfg.workload["n_requests"] == 12
    assert [c["name"] for c in cfg.workload["classes"]] == ["short", "long"]  # the file's, kept beside the override
    assert cfg.dlfp == {"gain": 0.4} and cfg.engine.max_num_batched_tokens == 4096
    assert config_with_overrides(CPU_DEFAULT, {}).seeds == (0, 1, 2)


@pytest.mark.parametrize("path", ["configs/no-such.yaml", str(CONFIGS)])
def test_a_config_that_is_no_file_is_refused(path: str) -> None:
    with pytest.raises(ValueError) as err:
        config_with_overrides(path, {})
    assert str(err.value) == f"notebook parameter 'config' = {path!r} is invalid: allowed a YAML file"


@pytest.mark.parametrize("overrides", [None, [], "trials: 2", 2, [("trials", 2)]])
def test_overrides_that_are_no_mapping_are_refused(overrides: Any) -> None:
    with pytest.raises(ValueError) as err:
        config_with_overrides(CPU_DEFAULT, overrides)
    assert str(err.value) == f"notebook parameter 'overrides' = {overrides!r} is invalid: allowed a mapping"


def test_an_override_the_config_refuses_names_the_field() -> None:
    with pytest.raises(ValueError, match="'trials'"):
        config_with_overrides(CPU_DEFAULT, {"trials": 0})


# generalization_plan

def test_generalization_plan_is_one_config_per_model_and_tp_size(tmp_path: Path) -> None:
    plan = generalization_plan(CPU_LADDER, ["qwen3-tiny", "qwen3-small"], [1, 2], str(tmp_path), {"trials": 1})
    assert [p for p, _ in plan] == [tmp_path / f"{m}-tp{tp}" for m in ("qwen3-tiny", "qwen3-small") for tp in (1, 2)]
    assert [(c.engine.model, c.engine.tensor_parallel_size) for _, c in plan] == [
        ("qwen3-tiny", 1), ("qwen3-tiny", 2), ("qwen3-small", 1), ("qwen3-small", 2)]
    assert [c.name for _, c in plan] == [f"cpu-generalization-{p.name}" for p, _ in plan]
    assert all(c.seeds == (0,) and c.workload["n_requests"] == 30 for _, c in plan)  # override, then the file's


def test_generalization_plan_of_the_defaults_is_the_committed_ladder() -> None:
    """The notebook's defaults plan the committed CPU ladder, config for config: nothing reruns."""
    out_root = RUNS / "generalization-cpu"
    plan = generalization_plan(CPU_LADDER, ["qwen3-tiny", "qwen3-small"], [1], str(out_root), {})
    assert sorted(p.name for p, _ in plan) == sorted(p.name for p in out_root.iterdir() if (p / "manifest.json")
                                                     .is_file())
    for path, cfg in plan:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        assert normalized_config(manifest["config"]) == normalized_config(cfg.raw), path.name


def test_generalization_plan_keeps_a_checkpoint_path_or_hub_id_inside_the_runs_folder(tmp_path: Path) -> None:
    """A cluster names real checkpoints by path or hub id: each run folder is one level below ``out_root``
    (where the results chapter looks), named by the checkpoint's last component; a hub id is looked up in
    the cache the overrides name, as the trials will read it."""
    ckpt = tmp_path / "ckpt" / "Qwen3-Tiny"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text((REPO_ROOT / "artifact/dlfp/model_configs/qwen3-tiny/config.json").read_text())
    hf_cache(tmp_path / "hf", "Org/Tiny-Hub")
    runs = tmp_path / "runs"
    plan = generalization_plan(CPU_LADDER, [f"{ckpt}/", "Org/Tiny-Hub"], [1], str(runs),
                               {"engine": {"download_dir": str(tmp_path / "hf")}})
    assert [p for p, _ in plan] == [runs / "Qwen3-Tiny-tp1", runs / "Tiny-Hub-tp1"]
    assert [c.engine.model for _, c in plan] == [f"{ckpt}/", "Org/Tiny-Hub"]
    assert [c.name for _, c in plan] == ["cpu-generalization-Qwen3-Tiny-tp1", "cpu-generalization-Tiny-Hub-tp1"]
    with pytest.raises(ValueError, match=r"notebook parameter 'models' has 'Org/Tiny-Hub'.*not found"):
        generalization_plan(CPU_LADDER, ["Org/Tiny-Hub"], [1], str(runs), {})  # not in the default cache
    twin = tmp_path / "other" / "Qwen3-Tiny"
    twin.mkdir(parents=True)
    (twin / "config.json").write_text((ckpt / "config.json").read_text())
    with pytest.raises(ValueError, match="would both run in 'Qwen3-Tiny'"):
        generalization_plan(CPU_LADDER, [str(ckpt), str(twin)], [1], str(runs), {})


def test_generalization_plan_names_an_unknown_model() -> None:
    with pytest.raises(ValueError, match="notebook parameter 'models' has 'qwen3-huge'"):
        generalization_plan(CPU_LADDER, ["qwen3-tiny", "qwen3-huge"], [1], "out", {})


# modeled_plan

def test_modeled_plan_of_the_committed_study(tmp_path: Path) -> None:
    plan = modeled_plan(SIM, None, str(tmp_path), {"trials": 1})
    assert len(plan) == len(STUDY_RUNS) == 5
    for (path, cfg), entry in zip(plan, STUDY_RUNS, strict=True):
        label = f"{entry['profile']}-{entry['model']}-tp{entry['tp']}"
        assert path == tmp_path / label and cfg.name == f"sim-{label}"
        assert cfg.engine.model == entry["model"]
        assert cfg.engine.sim == {"profile": entry["profile"], "async_scheduling": True, "tp": entry["tp"]}
        assert cfg.engine.tensor_parallel_size == 1  # TP is modeled, not run
        assert cfg.seeds == (0,)
    assert {(c.engine.model, c.engine.sim["tp"]) for _, c in plan} >= {("qwen3-8b", 2), ("qwen3-32b", 1)}


def test_modeled_plan_of_the_defaults_is_the_committed_study() -> None:
    out_root = RUNS / "generalization-sim"
    plan = modeled_plan(SIM, None, str(out_root), {})
    # run folders only: a resumed run leaves its hidden lock file beside its folder (trials.manifest)
    assert sorted(p.name for p, _ in plan) == sorted(p.name for p in out_root.iterdir() if p.is_dir())
    for path, cfg in plan:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        assert normalized_config(manifest["config"]) == normalized_config(cfg.raw), path.name


def test_a_controller_variant_gets_its_own_folder_and_parameters(tmp_path: Path) -> None:
    entry = {"profile": "h200", "model": "qwen3-8b", "tp": 2, "dlfp": {"signal": "completion", "anti_windup": True}}
    ((path, cfg),) = modeled_plan(SIM, [entry], str(tmp_path), {})
    assert path.name == StudyRun(**entry).label == "h200-qwen3-8b-tp2-anti_windup-true-signal-completion"
    assert cfg.dlfp == {"signal": "completion", "anti_windup": True}
    assert cfg.engine.sim["profile"] == "h200" and cfg.engine.sim["tp"] == 2


def test_modeled_plan_needs_a_simulated_base_config() -> None:
    with pytest.raises(ValueError) as err:
        modeled_plan(CPU_LADDER, None, "out", {})
    assert str(err.value) == (f"notebook parameter 'base_config' = {CPU_LADDER!r} is invalid: allowed a config with "
                              "engine.sim set")


def test_modeled_plan_refuses_a_fitted_profile() -> None:
    """A fitted profile models the one machine it was measured on, not an accelerator to scale."""
    fitted = str(RUNS / "sim-fidelity" / "profile.yaml")
    with pytest.raises(ValueError, match="allowed roofline profiles"):
        modeled_plan(SIM, [{"profile": fitted, "model": "qwen3-tiny", "tp": 1}], "out", {})


def test_every_notebook_cell_has_its_own_fixed_id() -> None:
    """A cell without an id is given a random one at each execution, so the rendered book would differ
    from one render to the next (the byte-stability test catches it minutes later; this at once)."""
    for path in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        ids = [c.get("id") for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        assert all(ids) and len(set(ids)) == len(ids), (path.name, [i for i, c in enumerate(ids) if not c])
