"""``make gpu-calibrate`` runs on a bare GPU node: PyTorch, transformers, numpy, scipy, pandas and
PyYAML, the checkout on ``PYTHONPATH``, and nothing else (no vLLM, no pyarrow, no install of dlfp).

Two checks, because each misses what the other sees. Statically, the import closure of
``dlfp.sim.gpucal`` within dlfp (every ``import``, inside functions too, since a lazy one runs
as well) reaches only those packages and the standard library. End to end, the make target's CPU
dry run runs in an interpreter started with ``-S`` whose only site directory holds links to those
six distributions and their own dependencies: vLLM, pyarrow, matplotlib and dlfp's editable
install and metadata are absent, as on the node, and a meta-path finder refuses them besides.
The profile it writes is then loaded here, in a normal process. The CUDA path itself only runs
on a GPU (book/reference/gpu.md, "Calibration on a bare GPU node").
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from packaging.requirements import Requirement

from dlfp.paths import PACKAGE, REPO_ROOT
from dlfp.sim.costmodel import load_profile

ALLOWED = ("torch", "transformers", "numpy", "scipy", "pandas", "pyyaml")
"""The distributions a bare GPU node has (with their own dependencies)."""

DENIED = ("vllm", "pyarrow", "papermill", "matplotlib", "seaborn", "nbformat", "jupyter_book")
"""What the calibration must not need: vLLM, the run folders' parquet engine, the book's stack."""

ALLOWED_IMPORTS = {"torch", "transformers", "numpy", "scipy", "pandas", "yaml",
                   "huggingface_hub"}  # transformers' own dependency: dlfp.paths reads its cache lazily, guarded
"""Top-level third-party modules the closure may import."""

PARQUET = {"read_parquet", "to_parquet", "read_table", "write_table"}


def _closure_files() -> dict[str, Path]:
    """``dlfp.*`` module -> file for every dlfp module importing ``dlfp.sim.gpucal`` loads, parents too."""
    def path_of(name: str) -> Path | None:
        base = PACKAGE.parent.joinpath(*name.split("."))
        return next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.is_file()), None)

    found: dict[str, Path] = {}
    todo = ["dlfp.sim.gpucal"]
    while todo:
        name = todo.pop()
        if name in found or (path := path_of(name)) is None:
            continue
        found[name] = path
        todo += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]  # its packages run first
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: package.count(".") + 2 - node.level], *filter(None, [base])])
                todo += [base, *(f"{base}.{a.name}" for a in node.names)]
    return found


def _third_party(files: dict[str, Path]) -> dict[str, set[str]]:
    """Top-level non-dlfp, non-stdlib module -> the dlfp modules that import it."""
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for target in targets:
                top = target.partition(".")[0]
                if top and top != "dlfp" and top not in sys.stdlib_module_names:
                    out.setdefault(top, set()).add(name)
    return out


def test_import_closure_reaches_only_the_bare_node_packages() -> None:
    files = _closure_files()
    assert {"dlfp", "dlfp.sim", "dlfp.sim.gpucal", "dlfp.sim.gpufit", "dlfp.sim.costmodel", "dlfp.paths"} <= set(files)
    third = _third_party(files)
    assert set(third) <= ALLOWED_IMPORTS, {k: sorted(v) for k, v in third.items() if k not in ALLOWED_IMPORTS}
    assert {"torch", "transformers", "numpy", "scipy", "yaml"} <= set(third)
    parquet = [f"{name}: .{node.attr}" for name, path in files.items() for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and node.attr in PARQUET]
    assert not parquet, parquet


def _bare_site(root: Path) -> tuple[Path, set[str]]:
    """A site directory of links to the ALLOWED distributions and their dependencies, minus DENIED."""
    def key(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    denied, seen, todo = {key(d) for d in DENIED}, {}, list(ALLOWED)
    while todo:
        name = todo.pop()
        if key(name) in seen or key(name) in denied:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform dependency this environment does not have
        seen[key(name)] = dist
        requires = map(Requirement, dist.requires or [])
        todo += [r.name for r in requires if r.marker is None or r.marker.evaluate({"extra": ""})]  # no extras
    site = root / "bare_site"
    site.mkdir()
    for dist in seen.values():
        assert dist.files is not None, f"{dist.metadata['Name']} has no RECORD: cannot link its files"
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            if not (site / top).exists() and Path(dist.locate_file(top)).exists():
                (site / top).symlink_to(dist.locate_file(top))
    return site, set(seen)


PRELUDE = '''\
"""Run ``-m MODULE ARGS`` with only SITE for third-party packages (python -S: no .pth files, so no
editable dlfp) and DENIED refused by a meta-path finder; at exit, record what was imported."""
import atexit, importlib.abc, json, runpy, sys

SITE, DENIED, RECORD = {site!r}, {denied!r}, {record!r}
sys.path.append(SITE)


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in DENIED:
            raise ModuleNotFoundError(f"{{name}} is refused: not on a bare GPU node", name=name)
        return None


sys.meta_path.insert(0, Refuse())


@atexit.register
def record():
    dlfp = sys.modules.get("dlfp")
    with open(RECORD, "w") as fh:
        json.dump({{"modules": sorted(sys.modules), "dlfp": getattr(dlfp, "__file__", None)}}, fh)


assert sys.argv[1] == "-m", sys.argv
module = sys.argv[2]
sys.argv = [sys.argv[0], *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''


def test_makefile_target_needs_no_setup() -> None:
    rule = re.search(r"^gpu-calibrate:(.*)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    assert rule and not rule.group(1).strip(), "make gpu-calibrate must not depend on setup (it installs vLLM)"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_calibrate_cpu_dry_run_with_only_the_bare_node_packages(tmp_path: Path) -> None:
    site, dists = _bare_site(tmp_path)
    assert not {"vllm", "pyarrow", "dlfp", "matplotlib"} & dists
    record = tmp_path / "record.json"
    prelude = tmp_path / "bare.py"
    prelude.write_text(PRELUDE.format(site=str(site), denied=DENIED, record=str(record)))
    out = tmp_path / "cpu-measured.yaml"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["OMP_NUM_THREADS"] = "1"  # the suite shares two cores with timing-sensitive runs
    make = ["make", "--no-print-directory", "gpu-calibrate", f"PYTHON_GPU={sys.executable} -S {prelude}",
            "GPU_BASE=a100", "GPU_MODELS=qwen3-tiny", "GPU_MAX_SECONDS=300", f"GPU_OUT={out}",
            "GPU_CAL_ARGS=--device cpu --dtype float32 --quick --repeats 2"]
    proc = subprocess.run(make, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[5/5] qwen3-tiny" in proc.stderr

    imported = json.loads(record.read_text())
    assert Path(imported["dlfp"]).resolve() == PACKAGE / "__init__.py"  # the checkout, not an install
    tops = {m.partition(".")[0] for m in imported["modules"]}
    assert not tops & set(DENIED), sorted(tops & set(DENIED))
    assert {"torch", "transformers", "numpy", "scipy", "yaml"} <= tops

    profile = load_profile(out)  # in this, normal, process
    assert profile.name == "a100-measured" and profile.device.startswith("CPU")
    raw = yaml.safe_load(out.read_text())
    sources = {"matmul_efficiency": raw["compute"]["matmul_efficiency"]["source"],
               "attention_efficiency": raw["compute"]["attention_efficiency"]["source"],
               "memory_efficiency": raw["memory"]["efficiency"]["source"]}
    measured = [f for f, s in sources.items() if s == "measured"]
    assert measured, sources
    kept_line = " ".join(r for r in raw["references"] if "kept from it" in r)
    for factor in set(sources) - set(measured):  # on a CPU no sample may determine some factors: named
        assert factor in kept_line
    assert raw["compute"]["peak_tflops"] == {"value": 312, "source": "public spec"}
    assert raw["host"]["step_fixed_us"]["source"] == "assumed"
    references = "\n".join(raw["references"])
    assert f"Measured on {profile.device} with torch {torch.__version__}" in references
    assert re.search(r"dlfp\.sim\.gpucal, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00: ", references)
    assert "Command: python -m dlfp.sim.gpucal --base a100 --models qwen3-tiny --max-seconds 300 " in references
    assert "qwen3-tiny" in references and "leave-one-out" in references and "Incomplete" not in references
    header = out.read_text().split("\nname:")[0]
    assert header.count("qwen3-tiny ") == 5 + 1  # one table row per quick case, and the command line
