"""The artifact's main job: execute the notebooks in order with papermill, then build the book.

``make artifact`` runs every notebook; ``make book`` re-executes only the ones that read traces
(results, reproducibility) and rebuilds the book from what is committed. The end-to-end test
runs the same code with reduced parameters into a scratch copy of the book sources.

The terminal gets one line per notebook and the progress lines of the trials the notebooks run
(relayed from their kernels, :mod:`dlfp.trials.progress`); what a kernel and the processes it
starts print themselves goes to ``build/logs/<notebook>.log`` (``--logs``), the engines' output to
each run's engine log. The job ends with the headline result and the claims' verdicts
(:mod:`dlfp.book.summary`) and where the book is.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dlfp.book.parameters import check_all
from dlfp.trials.progress import duration

NOTEBOOKS = ("00_verify", "01_paired_trials", "02_generalization", "03_results", "04_reproducibility")
RESULTS = "03_results"
"""The notebook whose runs the job's closing lines summarise."""
FROM_TRACES = (RESULTS, "04_reproducibility")
"""Notebooks that only read ``data/``: enough to re-render the book from committed traces."""
BOOK_SOURCES = ("_config.yml", "_toc.yml", "book", "dlfp-vllm/README.md")
"""What a book built elsewhere (``--book-dir``) copies: config, table of contents, prose, and the plug-in's
README, which the parameter page includes (``{include} ../../dlfp-vllm/README.md``)."""
LOGS = Path("build") / "logs"
"""Where the kernels' own output goes, relative to the repository root (``build/`` is not committed)."""


def notebook_parameters(run: str, gen: str, sim: str, reduced: bool) -> dict[str, dict[str, Any]]:
    """Papermill parameters per notebook; ``reduced`` shrinks the trials for CI."""
    params: dict[str, dict[str, Any]] = {
        "00_verify": {},
        "01_paired_trials": {"run_dir": run},
        "02_generalization": {"out_root": gen, "modeled_root": sim},
        "03_results": {"run_dir": run, "generalization_root": gen, "modeled_root": sim},
        "04_reproducibility": {"run_dir": run, "generalization_root": gen, "modeled_root": sim},  # 03's runs
    }
    if reduced:
        # Reduced runs check the pipeline, not the claim: a design outside its regime on a busy machine
        # is recorded and flagged in the book rather than refused, two requests warm each engine, and
        # the CPU engines run eagerly (vLLM's enforce_eager): on 2 cores a start took 62 s instead of
        # 116 s, at decode steps 17% slower (median inter-token gap 23.7 against 20.2 ms).
        lenient = {"design": {"enforce": False}, "warmup_requests": 2}
        eager = {"engine": {"enforce_eager": True}}
        small = {"trials": 1, "workload": {"n_requests": 10}, **lenient}
        params["00_verify"]["enforce_eager"] = True
        params["01_paired_trials"]["overrides"] = {"trials": 2, "workload": {"n_requests": 12}, **lenient, **eager}
        params["02_generalization"].update(models=["qwen3-tiny"], overrides={**small, **eager}, modeled_overrides=small,
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
            target: dict[str, Any] | None = None, logs: Path | None = None) -> None:
    """Run ``names`` in order; the first failing notebook stops the job (its traceback stays in it).

    Each notebook gets the ``target`` values its parameters cell declares, then ``params[name]``.
    A finished notebook is normalised (:mod:`dlfp.book.render`): the same traces and code render the
    same bytes. ``out_dir`` (``book/generated/``) holds outputs, not code a run depends on, so
    writing it does not make the runs started by later notebooks dirty (:mod:`dlfp.trials.provenance`).

    While a notebook runs, this process's descriptors point at ``logs/<name>.log`` (default
    :data:`LOGS` under ``root``; :func:`dlfp.harness.quiet.output_to`), which the kernel inherits:
    its own warnings, and what ipykernel echoes of the processes it starts, go there. The trials'
    progress lines come through a sink file and are relayed here (:mod:`dlfp.trials.progress`).
    """
    import papermill

    from dlfp.book.render import normalise_file
    from dlfp.harness.quiet import output_to, tail
    from dlfp.trials.manifest import now
    from dlfp.trials.progress import TAIL_LINES, progress_sink, progress_stream, relay

    logs = root / LOGS if logs is None else logs
    out_dir.mkdir(parents=True, exist_ok=True)
    with progress_stream() as stream, progress_sink(logs) as sink:  # in this order: the stream is not the sink
        assert stream is not None

        def say(text: str) -> None:
            stream.write(f"[pipeline] {text}\n")
            stream.flush()

        for i, name in enumerate(names, 1):
            started = time.monotonic()
            source = root / "notebooks" / f"{name}.ipynb"
            declared = papermill.inspect_notebook(str(source))
            values = {**{k: v for k, v in (target or {}).items() if k in declared}, **params[name]}
            log = logs / f"{name}.log"
            say(f"{name} (notebook {i}/{len(names)}) ...; kernel output: {log}")
            try:
                with relay(sink, stream), output_to(log, f"===== {now()} {name} (pipeline pid {os.getpid()})"):
                    papermill.execute_notebook(str(source), str(out_dir / f"{name}.ipynb"), parameters=values,
                                               cwd=str(root), kernel_name="python3", progress_bar=False)
            except Exception as exc:
                say(f"{name} failed after {duration(time.monotonic() - started)}: {type(exc).__name__}; its "
                    f"traceback is in {out_dir / f'{name}.ipynb'}; last lines of {log}:")
                for line in tail(log, TAIL_LINES):
                    say(f"  | {line}")
                raise
            normalise_file(out_dir / f"{name}.ipynb")
            say(f"{name} done in {duration(time.monotonic() - started)} (notebook {i}/{len(names)})")


def build_book(book_root: Path, log: Path | None = None) -> Path:
    """Strict Jupyter Book build (warnings are errors); returns the HTML folder.

    With ``log``, Sphinx's page-by-page output goes there and only a failure shows its last lines
    (the warnings that failed the build are among them); without, it goes to the terminal.
    """
    from dlfp.harness.quiet import tail
    from dlfp.trials.progress import TAIL_LINES

    jb = Path(sys.executable).with_name("jupyter-book")
    command = [str(jb), "build", str(book_root), "--all", "-W", "-n", "--keep-going"]
    if log is None:
        subprocess.run(command, check=True)
        return book_root / "_build" / "html"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        done = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode:
        print(f"[pipeline] the book build failed (exit {done.returncode}); last lines of {log}:", file=sys.stderr)
        for line in tail(log, TAIL_LINES):
            print(f"[pipeline]   | {line}", file=sys.stderr)
        raise subprocess.CalledProcessError(done.returncode, command)
    return book_root / "_build" / "html"


def copy_book_sources(root: Path, dest: Path) -> None:
    """A scratch book (config, toc, prose) in which generated notebooks can be replaced."""
    for name in BOOK_SOURCES:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("generated"), dirs_exist_ok=True)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def effective_parameters(root: Path, name: str, params: dict[str, dict[str, Any]],
                         target: dict[str, Any] | None) -> dict[str, Any]:
    """Every parameter notebook ``name`` runs with under :func:`execute`: its ``parameters`` cell's
    defaults, then the ``target`` values it declares, then ``params[name]``.

    The cluster planner reads configs and run folders from these values, so the jobs it plans
    are the ones the notebooks then execute. A default that is not a literal stays its source text.
    """
    import papermill

    declared = papermill.inspect_notebook(str(root / "notebooks" / f"{name}.ipynb"))
    values: dict[str, Any] = {}
    for key, spec in declared.items():
        try:
            values[key] = ast.literal_eval(spec["default"])
        except (ValueError, SyntaxError):
            values[key] = spec["default"]
    return {**values, **{k: v for k, v in (target or {}).items() if k in declared}, **params[name]}


def select_pairs(params: dict[str, dict[str, Any]], models: list[str] | None,
                 tensor_parallel_sizes: list[int] | None) -> None:
    """Restrict the generalization notebook to some models and TP sizes (one cluster job = one pair)."""
    if models:
        params["02_generalization"]["models"] = list(models)
    if tensor_parallel_sizes:
        params["02_generalization"]["tensor_parallel_sizes"] = list(tensor_parallel_sizes)


def prepare_book(root: Path, book_dir: Path | None) -> Path:
    """The folder the book is built in: the repository itself, or ``book_dir`` with a fresh copy of
    the book's sources (config, toc, prose; executed notebooks already there are kept)."""
    if book_dir is None or book_dir.resolve() == root:
        return root
    book_dir = book_dir.resolve()
    book_dir.mkdir(parents=True, exist_ok=True)
    copy_book_sources(root, book_dir)
    return book_dir


SIGTERM_GRACE_S = 20.0
"""How long a SIGTERM'd pipeline waits for its notebook kernel to stop (SLURM's KillWait is 30 s by default)."""


@contextlib.contextmanager
def _sigterm_waits_for_the_kernel(grace_s: float = SIGTERM_GRACE_S) -> Iterator[list[int]]:
    """Note SIGTERM, and stop only after the notebook kernel has had ``grace_s`` to stop its trial.

    SLURM signals every process of a job at once (time limit, ``scancel``): the kernel running a
    trial keeps the finished arms and marks the manifest (:mod:`dlfp.trials.runner`), and papermill then
    reports the interrupted cell. The pipeline must outlive that, because SLURM kills whatever is
    left as soon as the job's main process exits: dying at once here would kill the kernel before it
    writes the manifest. If papermill has not returned after ``grace_s`` (the signal came between
    notebooks, or only to this process), the main thread is interrupted.
    """
    seen: list[int] = []

    def grace_over(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"no answer from the notebook kernel {grace_s:.0f} s after SIGTERM")

    def noted(signum: int, frame: Any) -> None:
        if not seen:
            seen.append(signum)
            signal.setitimer(signal.ITIMER_REAL, grace_s)  # a real signal: it also ends a blocking wait

    previous = signal.signal(signal.SIGTERM, noted), signal.signal(signal.SIGALRM, grace_over)
    try:
        yield seen
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGALRM, previous[1])


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
    ap.add_argument("--only", nargs="+", choices=NOTEBOOKS, metavar="NOTEBOOK",
                    help=f"execute these notebooks only, in pipeline order (of {', '.join(NOTEBOOKS)})")
    ap.add_argument("--models", nargs="+", metavar="MODEL", help="generalization models (instead of the params')")
    ap.add_argument("--tensor-parallel-sizes", nargs="+", type=int, metavar="N",
                    help="generalization TP sizes (instead of the params')")
    ap.add_argument("--book-dir", type=Path,
                    help="build the book in this folder (a copy of its sources; default: the repository root)")
    ap.add_argument("--notebooks-out", type=Path,
                    help="write the executed notebooks here (default: the book's book/generated)")
    ap.add_argument("--no-book", action="store_true", help="execute the notebooks only, do not build the book")
    ap.add_argument("--logs", type=Path,
                    help=f"folder for each notebook kernel's own output (default: {LOGS} under the root)")
    args = ap.parse_args(argv)
    if args.book_only and args.only:
        ap.error("--book-only and --only exclude each other (--book-only is --only " + " ".join(FROM_TRACES) + ")")
    root = args.root.resolve()
    started = time.monotonic()
    names: tuple[str, ...] = FROM_TRACES if args.book_only else NOTEBOOKS
    if args.only:
        names = tuple(n for n in NOTEBOOKS if n in args.only)
    params = notebook_parameters(args.run, args.gen, args.sim, args.reduced)
    select_pairs(params, args.models, args.tensor_parallel_sizes)
    target, logs = load_target(args.params), args.logs or root / LOGS
    try:
        check_all(names, params, target, str(args.params))
    except ValueError as exc:
        print(f"[pipeline] refused before any notebook ran: {exc}", file=sys.stderr)
        return 2
    book = root if args.no_book and args.notebooks_out else prepare_book(root, args.book_dir)
    with _sigterm_waits_for_the_kernel() as stopped:
        try:
            execute(root, args.notebooks_out or book / "book" / "generated", params, names, target, logs)
        except BaseException:
            if not stopped:
                raise
            print("[pipeline] stopped by SIGTERM: finished arms are kept; run (or submit) the same command again to "
                  "resume", file=sys.stderr)
            return 128 + signal.SIGTERM
    if not args.no_book:
        print(f"[pipeline] building the book strictly; Sphinx output: {logs / 'book.log'}", file=sys.stderr, flush=True)
    html = None if args.no_book else build_book(book, logs / "book.log")
    if RESULTS in names:
        from dlfp.book.summary import result_lines

        for line in result_lines(root, effective_parameters(root, RESULTS, params, target)):
            print(f"[pipeline] {line}", file=sys.stderr)
    total = f"total {duration(time.monotonic() - started)}; kernel output in {logs}"
    print(f"[pipeline] {', '.join(names)} executed; {total}" if html is None
          else f"[pipeline] book at {html / 'index.html'}; {total}", file=sys.stderr)
    return 0
