"""``dlfp.book.pipeline``, its pure parts: which parameters each notebook is given (the pipeline's
own, then a target's parameter file, over the notebook's defaults), which notebooks ``--book-only``
and ``--only`` execute, and what a bad parameter file or option gets. Nothing is executed here:
``execute`` and the book build are replaced by recorders (the real run is
``tests/integration/test_pipeline.py``, slow).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path
from typing import Any

import papermill
import pytest
import yaml

from dlfp.book import pipeline
from dlfp.book.pipeline import (
    FROM_TRACES,
    NOTEBOOKS,
    effective_parameters,
    load_target,
    notebook_parameters,
    prepare_book,
    select_pairs,
)
from dlfp.paths import REPO_ROOT

PARAMS = REPO_ROOT / "params"
TARGETS = sorted(PARAMS.glob("*.yaml"))


def declared(name: str) -> dict[str, Any]:
    """The notebook's parameters cell: name -> default value (as written, a literal)."""
    spec = papermill.inspect_notebook(str(REPO_ROOT / "notebooks" / f"{name}.ipynb"))
    return {k: ast.literal_eval(v["default"]) for k, v in spec.items()}


DECLARED = {name: declared(name) for name in NOTEBOOKS}


def test_the_notebooks_in_order_and_those_that_only_read_traces() -> None:
    assert NOTEBOOKS == ("00_verify", "01_paired_trials", "02_generalization", "03_results", "04_reproducibility")
    assert FROM_TRACES == ("03_results", "04_reproducibility")
    assert all((REPO_ROOT / "notebooks" / f"{n}.ipynb").is_file() for n in NOTEBOOKS)


@pytest.mark.parametrize("reduced", [False, True])
def test_every_parameter_the_pipeline_passes_is_declared(reduced: bool) -> None:
    params = notebook_parameters("r", "g", "s", reduced)
    assert tuple(params) == NOTEBOOKS
    for name, values in params.items():
        assert set(values) <= set(DECLARED[name]), name  # papermill would only warn about the others


def test_the_run_folders_reach_the_notebooks_that_read_them() -> None:
    params = notebook_parameters("RUN", "GEN", "SIM", reduced=False)
    assert params == {
        "00_verify": {},
        "01_paired_trials": {"run_dir": "RUN"},
        "02_generalization": {"out_root": "GEN", "modeled_root": "SIM"},
        "03_results": {"run_dir": "RUN", "generalization_root": "GEN", "modeled_root": "SIM"},
        "04_reproducibility": {"run_dir": "RUN", "generalization_root": "GEN", "modeled_root": "SIM"},
    }


def test_reduced_parameters_shrink_every_measurement() -> None:
    params = notebook_parameters("r", "g", "s", reduced=True)
    p01, p02 = params["01_paired_trials"], params["02_generalization"]
    assert params["00_verify"] == {"enforce_eager": True}
    lean, eager = {"design": {"enforce": False}, "warmup_requests": 2}, {"engine": {"enforce_eager": True}}
    assert p01["overrides"] == {"trials": 2, "workload": {"n_requests": 12}, **lean, **eager}
    assert p02["models"] == ["qwen3-tiny"]
    assert p02["modeled_overrides"] == {"trials": 1, "workload": {"n_requests": 10}, **lean}
    assert p02["overrides"] == {**p02["modeled_overrides"], **eager}  # the modeled engine compiles nothing
    assert p02["modeled_runs"] == [{"profile": "a100", "model": "qwen3-0.6b", "tp": 1}]
    assert params["03_results"] == notebook_parameters("r", "g", "s", reduced=False)["03_results"]


def test_select_pairs_restricts_the_generalization_notebook() -> None:
    params = notebook_parameters("r", "g", "s", reduced=False)
    select_pairs(params, None, None)
    assert "models" not in params["02_generalization"]
    select_pairs(params, ["qwen3-8b"], [2])
    assert params["02_generalization"]["models"] == ["qwen3-8b"]
    assert params["02_generalization"]["tensor_parallel_sizes"] == [2]


# Target parameter files

def test_load_target(tmp_path: Path) -> None:
    assert load_target(None) == {}
    cpu = load_target(PARAMS / "cpu.yaml")
    assert cpu["model"] == "qwen3-tiny" and cpu["models"] == ["qwen3-tiny", "qwen3-small"]
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    assert load_target(empty) == {}


@pytest.mark.parametrize("text", ["- model\n- qwen3-tiny\n", "qwen3-tiny\n", "3\n"])
def test_a_target_file_that_is_no_mapping_is_refused_by_name(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        load_target(path)
    assert str(err.value) == f"{path}: a parameter file must map parameter names to values"


def test_the_cpu_target_spells_out_the_notebooks_defaults() -> None:
    """params/cpu.yaml: "the notebooks' own defaults, spelled out"."""
    target = load_target(PARAMS / "cpu.yaml")
    compared = 0
    for name in NOTEBOOKS:
        for key, value in target.items():
            if key in DECLARED[name]:
                assert DECLARED[name][key] == value, (name, key)
                compared += 1
    assert compared >= 6


def unused(target: Path) -> set[str]:
    """Keys of a target file that no notebook declares (``cluster`` is read by ``dlfp cluster``)."""
    return set(load_target(target)) - {k for d in DECLARED.values() for k in d} - {"cluster"}


def test_every_parameter_of_the_cpu_target_reaches_a_notebook() -> None:
    assert unused(PARAMS / "cpu.yaml") == set()


@pytest.mark.parametrize("target", [t for t in TARGETS if t.name != "cpu.yaml"], ids=lambda p: p.name)
def test_every_parameter_of_a_target_reaches_a_notebook(target: Path) -> None:
    assert unused(target) == set()


def test_effective_parameters_of_the_a100_target() -> None:
    target = load_target(PARAMS / "a100.yaml")
    params = notebook_parameters("data/runs/a100", "data/runs/gen-a100", "data/runs/sim", reduced=False)
    p00 = effective_parameters(REPO_ROOT, "00_verify", params, target)
    assert p00 == {**DECLARED["00_verify"], "model": "qwen3-0.6b", "dtype": "bfloat16", "tensor_parallel_size": 1,
                   "overrides": target["overrides"]}  # its download_dir: the cache a hub id is read from
    p01 = effective_parameters(REPO_ROOT, "01_paired_trials", params, target)
    assert p01 == {**DECLARED["01_paired_trials"], "config": "configs/a100.yaml", "overrides": target["overrides"],
                   "run_dir": "data/runs/a100"}
    p02 = effective_parameters(REPO_ROOT, "02_generalization", params, target)
    assert (p02["models"], p02["tensor_parallel_sizes"]) == (["qwen3-0.6b", "qwen3-8b", "qwen3-32b"], [1, 2])
    assert p02["base_config"] == "configs/a100.yaml" and p02["out_root"] == "data/runs/gen-a100"
    assert p02["modeled_config"] == DECLARED["02_generalization"]["modeled_config"]  # not in the target: default
    p03 = effective_parameters(REPO_ROOT, "03_results", params, target)
    assert p03 == {**DECLARED["03_results"], "run_dir": "data/runs/a100", "generalization_root": "data/runs/gen-a100",
                   "modeled_root": "data/runs/sim"}


def test_the_pipelines_parameters_win_over_the_target_and_undeclared_keys_stay_out() -> None:
    params = notebook_parameters("mine", "g", "s", reduced=False)
    values = effective_parameters(REPO_ROOT, "01_paired_trials", params, {"run_dir": "theirs", "models": ["x"],
                                                                          "config": "configs/cpu-smoke.yaml"})
    assert values["run_dir"] == "mine" and values["config"] == "configs/cpu-smoke.yaml" and "models" not in values
    assert effective_parameters(REPO_ROOT, "00_verify", params, None) == DECLARED["00_verify"]


# prepare_book

def test_prepare_book_in_the_repository_or_a_copy(tmp_path: Path) -> None:
    assert prepare_book(REPO_ROOT, None) == REPO_ROOT
    assert prepare_book(REPO_ROOT, REPO_ROOT) == REPO_ROOT
    book = prepare_book(REPO_ROOT, tmp_path / "scratch")
    assert book == (tmp_path / "scratch").resolve()
    for name in ("_config.yml", "_toc.yml", "book/intro.md", "book/reference"):
        assert (book / name).exists(), name
    assert (book / "_toc.yml").read_bytes() == (REPO_ROOT / "_toc.yml").read_bytes()
    assert not (book / "book" / "generated").exists()  # executed notebooks are the job's to write


# main: which notebooks run, without running them

@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def execute(root: Path, out_dir: Path, params: dict, names: tuple[str, ...], target: dict | None = None,
                *args: Any, **kwargs: Any) -> None:
        calls.append({"root": root, "out_dir": out_dir, "params": params, "names": names, "target": target})

    def no_book(book_root: Path) -> Path:
        raise AssertionError("the book is not built with --no-book")

    monkeypatch.setattr(pipeline, "execute", execute)
    monkeypatch.setattr(pipeline, "build_book", no_book)
    monkeypatch.setattr("dlfp.book.summary.result_lines", lambda *a, **k: [], raising=False)
    return calls


def run_main(tmp_path: Path, *argv: str) -> int:
    return pipeline.main(["--root", str(REPO_ROOT), "--no-book", "--notebooks-out", str(tmp_path / "nb"), *argv])


def test_book_only_executes_the_notebooks_that_read_traces(tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    assert run_main(tmp_path, "--book-only") == 0
    (call,) = recorded
    assert call["names"] == FROM_TRACES and call["out_dir"] == tmp_path / "nb" and call["root"] == REPO_ROOT
    assert call["params"]["03_results"]["run_dir"] == "data/runs/cpu-default"  # the committed runs by default
    assert call["params"]["03_results"]["modeled_root"] == "data/runs/generalization-sim"
    assert call["target"] == {}


def test_only_runs_in_pipeline_order_with_the_target(tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    assert run_main(tmp_path, "--only", "03_results", "00_verify", "--params", str(PARAMS / "a100.yaml"),
                    "--models", "qwen3-8b") == 0
    (call,) = recorded
    assert call["names"] == ("00_verify", "03_results")
    assert call["target"] == yaml.safe_load((PARAMS / "a100.yaml").read_text())
    assert call["params"]["02_generalization"]["models"] == ["qwen3-8b"]


def test_every_notebook_runs_by_default(tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    assert run_main(tmp_path, "--reduced") == 0
    (call,) = recorded
    assert call["names"] == NOTEBOOKS and call["params"] == notebook_parameters(
        "data/runs/cpu-default", "data/runs/generalization-cpu", "data/runs/generalization-sim", reduced=True)


@pytest.mark.parametrize("argv", [("--book-only", "--only", "03_results"), ("--only", "05_nope"),
                                  ("--reduced", "--tensor-parallel-sizes", "two")])
def test_bad_options_stop_before_any_notebook(tmp_path: Path, recorded: list[dict[str, Any]],
                                              capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as stop:
        run_main(tmp_path, *argv)
    assert stop.value.code == 2 and recorded == []
    assert "dlfp pipeline: error:" in capsys.readouterr().err


def test_a_failed_book_build_shows_the_end_of_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Sphinx's page-by-page output stays in the log; a failure names the log and shows its last lines."""
    from dlfp.book import pipeline

    fake = tmp_path / "bin" / "jupyter-book"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor i in $(seq 1 40); do echo \"page $i\"; done\n"
                    "echo 'WARNING: broken ref' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pipeline.sys, "executable", str(fake.with_name("python")))
    log = tmp_path / "logs" / "book.log"
    with pytest.raises(subprocess.CalledProcessError):
        pipeline.build_book(tmp_path, log)
    err = capsys.readouterr().err
    assert f"last lines of {log}" in err and "WARNING: broken ref" in err and "page 40" in err
    assert "page 1\n" not in err  # the head stays in the log
    assert log.read_text().startswith("page 1\n")


def test_a_scratch_book_holds_every_file_its_pages_include(tmp_path) -> None:
    """A book built in another folder (``--book-dir``, the cluster's book job) is a copy of the sources:
    a page that includes a file outside ``book/`` (the plug-in's README) must find it there too."""
    import re

    from dlfp.book.pipeline import copy_book_sources
    from dlfp.paths import REPO_ROOT

    copy_book_sources(REPO_ROOT, tmp_path)
    included = [(page, target) for page in (tmp_path / "book").rglob("*.md")
                for target in re.findall(r"```\{include\} (\S+)", page.read_text(encoding="utf-8"))]
    assert included, "no page includes a file: the check would check nothing"
    missing = [f"{page.relative_to(tmp_path)} includes {target}" for page, target in included
               if not (page.parent / target).is_file()]
    assert not missing, missing
