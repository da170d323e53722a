"""The artifact's main job: execute the notebooks in order with papermill, then build the book.

``make artifact`` runs every notebook; ``make book`` re-executes only the ones that read traces
(results, reproducibility) and rebuilds the book from what is committed. The end-to-end test
runs the same code with reduced parameters into a scratch copy of the book sources.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

NOTEBOOKS = ("00_verify", "01_paired_trials", "02_generalization", "03_results", "04_reproducibility")
FROM_TRACES = ("03_results", "04_reproducibility")
"""Notebooks that only read ``data/``: enough to re-render the book from committed traces."""
BOOK_SOURCES = ("_config.yml", "_toc.yml", "book")


def notebook_parameters(run: str, gen: str, sim: str, reduced: bool) -> dict[str, dict[str, Any]]:
    """Papermill parameters per notebook; ``reduced`` shrinks the trials for CI."""
    params: dict[str, dict[str, Any]] = {
        "00_verify": {},
        "01_paired_trials": {"run_dir": run},
        "02_generalization": {"out_root": gen, "modeled_root": sim},
        "03_results": {"run_dir": run, "generalization_root": gen, "modeled_root": sim},
        "04_reproducibility": {"run_roots": sorted({str(Path(d).parent) for d in (run, gen, sim)})},
    }
    if reduced:
        small = {"trials": 1, "workload": {"n_requests": 10}}
        params["01_paired_trials"]["overrides"] = {"trials": 2, "workload": {"n_requests": 12}}
        params["02_generalization"].update(models=["qwen3-tiny"], overrides=small, modeled_overrides=small,
                                           modeled_runs=[{"profile": "a100", "model": "qwen3-0.6b", "tp": 1}])
    return params


def load_target(path: Path | None) -> dict[str, Any]:
    """A target's parameter file (``params/cpu.yaml``, ``params/a100.yaml``): name -> value."""
    if path is None:
        return {}
    with open(path, encoding="utf-8") as fh:
        target = yaml.safe_load(fh) or {}
    if not isinstance(target, dict):
        raise ValueError(f"{path}: a parameter file must map parameter names to values")
    return target


def execute(root: Path, out_dir: Path, params: dict[str, dict[str, Any]], names: tuple[str, ...],
            target: dict[str, Any] | None = None) -> None:
    """Run ``names`` in order; the first failing notebook stops the job (its traceback stays in it).

    Each notebook gets the ``target`` values its parameters cell declares, then ``params[name]``.
    """
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        started = time.monotonic()
        source = root / "notebooks" / f"{name}.ipynb"
        declared = papermill.inspect_notebook(str(source))
        values = {**{k: v for k, v in (target or {}).items() if k in declared}, **params[name]}
        print(f"[pipeline] {name} ...", file=sys.stderr, flush=True)
        papermill.execute_notebook(str(source), str(out_dir / f"{name}.ipynb"), parameters=values,
                                   cwd=str(root), kernel_name="python3", progress_bar=False)
        print(f"[pipeline] {name} done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def build_book(book_root: Path) -> Path:
    """Strict Jupyter Book build (warnings are errors); returns the HTML folder."""
    jb = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jb), "build", str(book_root), "--all", "-W", "-n", "--keep-going"], check=True)
    return book_root / "_build" / "html"


def copy_book_sources(root: Path, dest: Path) -> None:
    """A scratch book (config, toc, prose) in which generated notebooks can be replaced."""
    for name in BOOK_SOURCES:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("generated"))
        else:
            shutil.copy2(src, dest / name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp pipeline", description=__doc__)
    ap.add_argument("--run", default="data/runs/cpu-default", help="paired-trial run folder")
    ap.add_argument("--gen", default="data/runs/generalization-cpu", help="generalization runs folder")
    ap.add_argument("--sim", default="data/runs/generalization-sim",
                    help="simulated generalization runs folder (the committed one is complete: nothing reruns)")
    ap.add_argument("--book-only", action="store_true", help="re-render from committed traces only")
    ap.add_argument("--reduced", action="store_true", help="small trials (CI)")
    ap.add_argument("--params", type=Path, help="a target's parameter file, e.g. params/a100.yaml")
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="repository root")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    started = time.monotonic()
    names = FROM_TRACES if args.book_only else NOTEBOOKS
    params = notebook_parameters(args.run, args.gen, args.sim, args.reduced)
    execute(root, root / "book" / "generated", params, names, load_target(args.params))
    html = build_book(root)
    print(f"[pipeline] book at {html / 'index.html'}; total {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0
