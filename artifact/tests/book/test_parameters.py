"""``dlfp.book.parameters``: each notebook's parameters declared once. The notebooks' ``parameters`` cells
must be literal (papermill), so they repeat the declaration: the tests here hold the two together, check
that each notebook checks what it is given, and that a pipeline or a cluster plan refuses a bad parameter
or an unknown key of a parameter file before anything runs."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import papermill
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dlfp.book import pipeline
from dlfp.book.notebook import rendered_run, run_folder
from dlfp.book.parameters import (
    NOTEBOOK_PARAMETERS,
    Generalization,
    PairedTrials,
    Results,
    Verify,
    check,
    check_all,
    declared_names,
    markdown_tables,
)
from dlfp.book.pipeline import NOTEBOOKS, notebook_parameters
from dlfp.control.fields import default
from dlfp.paths import REPO_ROOT

TARGETS = sorted((REPO_ROOT / "params").glob("*.yaml"))


def _cell_defaults(name: str) -> dict[str, Any]:
    spec = papermill.inspect_notebook(str(REPO_ROOT / "notebooks" / f"{name}.ipynb"))
    return {k: ast.literal_eval(v["default"]) for k, v in spec.items()}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def test_every_notebook_is_declared() -> None:
    assert tuple(NOTEBOOK_PARAMETERS) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_parameters_cell_is_the_declaration(name: str) -> None:
    """Same names, same order, same defaults: the generated table shows what the notebook runs with."""
    cls = NOTEBOOK_PARAMETERS[name]
    declared = {f.name: _plain(default(f)) for f in dataclasses.fields(cls)}
    cell = _cell_defaults(name)
    assert list(cell) == list(declared), f"{name}: the parameters cell's names or order differ from {cls.__name__}'s"
    assert cell == declared, f"{name}: the parameters cell's defaults differ from {cls.__name__}'s"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_notebook_checks_its_parameters_first(name: str) -> None:
    """The cell after the parameters (where papermill injects its own) starts with the check."""
    cells = [c for c in json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
             if c["cell_type"] == "code"]
    assert "parameters" in cells[0]["metadata"].get("tags", [])
    first = "".join(cells[1]["source"])
    calls = [line for line in first.splitlines() if not line.startswith(("from ", "import "))]
    assert calls and calls[0].startswith(f'check("{name}", globals())'), first


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_defaults_pass(name: str) -> None:
    cls = NOTEBOOK_PARAMETERS[name]
    assert check(name, _cell_defaults(name)) == cls()


@pytest.mark.parametrize(("cls", "field", "value", "allowed"), [
    (Verify, "tensor_parallel_size", 0, "[1, 64]"),
    (Verify, "tensor_parallel_size", True, "[1, 64]"),
    (Verify, "dtype", "fp8", "float32 or bfloat16 or float16 or auto"),
    (Verify, "expected_vllm", "latest", "a version such as 0.32.0"),
    (Verify, "overrides", {"engine": []}, "a mapping whose engine entry is a mapping"),
    (Verify, "model", "", "a non-empty text"),
    (PairedTrials, "allow_dirty", "yes", "true or false"),
    (PairedTrials, "overrides", [], "a mapping"),
    (Generalization, "models", [], "a non-empty list of model names"),
    (Generalization, "models", ["qwen3-tiny", 8], "a list of texts"),
    (Generalization, "tensor_parallel_sizes", [1, 0], "a non-empty list of integers in [1, 64]"),
    (Generalization, "tensor_parallel_sizes", 2, "a non-empty list of integers in [1, 64]"),
    (Results, "gpu_run_dir", None, "a run folder, or empty: none"),
    (Results, "speed_runs", "data/runs/cpu-default", "a list of texts"),
])
def test_a_bad_value_is_refused_naming_the_parameter(cls: type, field: str, value: Any, allowed: str) -> None:
    with pytest.raises(ValueError) as err:
        cls(**{field: value})
    assert str(err.value) == f"notebook parameter {field!r} = {value!r} is invalid: allowed {allowed}"


def test_lists_become_tuples_and_integral_floats_ints() -> None:
    g = Generalization(models=["a", "b"], tensor_parallel_sizes=[1, 2])
    assert g.models == ("a", "b") and g.tensor_parallel_sizes == (1, 2)
    assert Verify(tensor_parallel_size=2.0).tensor_parallel_size == 2


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.integers(), max_size=4))
def test_a_target_key_no_notebook_declares_is_refused_by_name(target: dict[str, Any]) -> None:
    unknown = set(target) - declared_names() - {"cluster"}
    params = notebook_parameters("r", "g", "s", reduced=False)
    if not unknown:
        return
    with pytest.raises(ValueError) as err:
        check_all(NOTEBOOKS, params, target, "params/mine.yaml")
    assert str(err.value).startswith("params/mine.yaml has ") and "which no notebook declares" in str(err.value)
    assert all(repr(k) in str(err.value) for k in unknown)


def test_a_typo_and_a_bad_value_are_refused_naming_the_notebook() -> None:
    params = notebook_parameters("r", "g", "s", reduced=False)
    with pytest.raises(ValueError, match="'tensor_paralel_size', which no notebook declares"):
        check_all(NOTEBOOKS, params, {"tensor_paralel_size": 2})
    with pytest.raises(ValueError, match=r"^02_generalization: notebook parameter 'tensor_parallel_sizes' = \[1, -2\]"):
        check_all(NOTEBOOKS, params, {"tensor_parallel_sizes": [1, -2]})
    check_all(("00_verify",), params, {"tensor_parallel_sizes": [1, -2]})  # 02 does not run: not its business
    check_all(NOTEBOOKS, params, {"cluster": {"partition": "gpu"}})  # the site settings are the cluster's


@pytest.mark.parametrize("reduced", [False, True])
@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_every_shipped_target_passes(target: Path, reduced: bool) -> None:
    check_all(NOTEBOOKS, notebook_parameters("r", "g", "s", reduced), yaml.safe_load(target.read_text()), str(target))


def test_the_pipeline_refuses_a_bad_parameter_file_before_any_notebook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[Any] = []
    monkeypatch.setattr(pipeline, "execute", lambda *a, **k: ran.append(a))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((REPO_ROOT / "params" / "a100.yaml").read_text()),
                                   "models": ["qwen3-0.6b", 8]}))
    code = pipeline.main(["--root", str(REPO_ROOT), "--no-book", "--notebooks-out", str(tmp_path / "nb"),
                          "--params", str(bad)])
    assert code == 2 and ran == []
    err = capsys.readouterr().err
    assert "[pipeline] refused before any notebook ran: 02_generalization: notebook parameter 'models'" in err


def test_the_cluster_plan_refuses_a_typo_before_any_submission(tmp_path: Path) -> None:
    from dlfp.cluster.plan import Layout, plan

    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({**yaml.safe_load((REPO_ROOT / "params" / "a100.yaml").read_text()),
                                    "modeled_run": []}))
    with pytest.raises(ValueError, match="'modeled_run', which no notebook declares"):
        plan(Layout(root=REPO_ROOT, params=typo, runs=tmp_path / "runs", sim=tmp_path / "sim", book_dir=tmp_path / "b"))


def test_a_results_notebook_refuses_a_folder_without_a_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'run_dir' = .* is invalid: allowed a run folder with manifest\.json"):
        run_folder(str(tmp_path))
    with pytest.raises(ValueError, match=r"allowed a run folder with manifest\.json"):
        rendered_run(str(tmp_path))
    assert run_folder("data/runs/cpu-default") == Path("data/runs/cpu-default")


def test_the_reference_page_holds_the_generated_tables() -> None:
    page = (REPO_ROOT / "book" / "reference" / "commands.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- settings: generated by dlfp\.book\.parameters\.markdown_tables -->\n(.*?)"
                      r"<!-- end of settings -->", page, flags=re.S)
    assert found, "commands.md: the markers of the notebooks' parameter tables are missing"
    assert found.group(1) == markdown_tables(), (
        "commands.md's notebook parameter tables are not the generated ones: paste the output of "
        "`python -c 'from dlfp.book.parameters import markdown_tables; print(markdown_tables(), end=\"\")'`")
    for name, cls in NOTEBOOK_PARAMETERS.items():
        assert f"### `{name}`" in found.group(1) and all(f"| `{f.name}` |" in found.group(1)
                                                          for f in dataclasses.fields(cls))
