"""The session's one reduced artifact: every notebook with the pipeline's reduced parameters, then
the strict book build, made once and shared by ``test_slurm.py`` and ``test_pipeline.py``.

Where a real SLURM is usable (its binaries are installed and this is root, which slurmd needs) the
artifact is made as a cluster user makes it: ``dlfp cluster submit --reduced`` into a single-node
cluster started here (:mod:`tests.integration.slurm_cluster`), a chain of 4 jobs (verify, trials,
one generalization job carrying the modeled run, book), then the same submission again, which
must submit the book job alone. What the chain did is recorded (:class:`~tests.integration.slurm_cluster.Chain`) for
``test_slurm.py`` to check, and the book the resubmission rebuilt is the one ``test_pipeline.py``
checks. Elsewhere the same notebooks run in-process (:mod:`dlfp.book.pipeline`), unless
``DLFP_REQUIRE_SLURM`` is set (CI): then an unusable SLURM fails the fixture.

Either way the runs are the pipeline's reduced ones (``notebook_parameters(reduced=True)``): two
paired trials of 12 requests, one qwen3-tiny TP 1 generalization trial and one modeled A100 trial
of 10 requests each. They test the pipeline, not DLFP: a design the pre-flight would refuse on a
slow or busy machine runs anyway (``design.enforce: false``, recorded).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from dlfp.paths import REPO_ROOT
from tests.integration.slurm_cluster import (
    MODELED_RUN,
    REQUIRE_ENV,
    Chain,
    Cluster,
    ReducedArtifact,
    Submission,
    required,
    single_node_cluster,
    submitted_ids,
    unusable,
)

ROOT = REPO_ROOT
TAIL_CHARS = 3000


def _manifests(paths: tuple[Path, ...]) -> dict[Path, bytes]:
    return {d: (d / "manifest.json").read_bytes() if (d / "manifest.json").is_file() else b"" for d in paths}


def _submission(cluster: Cluster, args: tuple[str, ...]) -> Submission:
    started = time.monotonic()
    out = cluster.submit(*args)
    ids = submitted_ids(out)
    cluster.wait_idle()
    return Submission(out, ids, cluster.jobs(), time.monotonic() - started)


def _unfinished(s: Submission, runs: Path) -> str | None:
    """Which jobs of ``s`` did not complete, each with its state and the end of its log; None when all did."""
    bad = []
    for name, job_id in s.ids.items():
        state = s.jobs.get(job_id, {}).get("JobState", "not in the completion log")
        if state != "COMPLETED":
            log = next(runs.glob(f"**/*.{job_id}.log"), None)
            bad.append(f"{name} ({job_id}): {state}; log {log}:\n"
                       + (log.read_text(errors="replace")[-TAIL_CHARS:] if log else "(none)"))
    return "\n".join(bad) or None


def _by_slurm(factory: pytest.TempPathFactory) -> ReducedArtifact:
    from dlfp.cluster.plan import Layout, plan

    base = factory.mktemp("reduced-slurm")
    runs, sim, book, params = base / "runs", base / "sim", base / "book", base / "params.yaml"
    # The CPU target with the pipeline's --reduced parameters (the same runs as in-process), and
    # generous limits: a busy machine is slow, not wrong.
    params.write_text(yaml.safe_dump({
        **yaml.safe_load((ROOT / "params" / "cpu.yaml").read_text()),
        "cluster": {"gpus": False, "cpus_per_task": os.cpu_count(), "engine_start_s": 120}}))
    args = ("--params", str(params), "--runs", str(runs), "--sim", str(sim), "--book-dir", str(book), "--reduced")
    planned = plan(Layout(ROOT, params, runs, sim, book, reduced=True), gpus=False)
    run_of = {j.name: j.runs[0] for j in planned.jobs if j.runs}
    measured = (*run_of.values(), sim / MODELED_RUN)
    html = book / "_build" / "html"
    again = None
    with single_node_cluster(factory.mktemp("slurm")) as cluster:
        first = _submission(cluster, args)
        pages = frozenset(str(p.relative_to(html)) for p in html.rglob("*.html")) if html.is_dir() else frozenset()
        manifests = _manifests(measured)
        failure = _unfinished(first, runs)
        if failure:
            failure = f"the SLURM chain did not complete (nothing resubmitted):\n{failure}"
        else:
            again = _submission(cluster, args)
            failure = _unfinished(again, runs)
            if failure:
                failure = f"the resubmission did not complete:\n{failure}"
    chain = Chain(args, run_of, first, pages, manifests, again, _manifests(measured))
    return ReducedArtifact("slurm", runs, sim, book, html, book / "book" / "generated", chain, failure=failure)


def _in_process(factory: pytest.TempPathFactory, why_not_slurm: str) -> ReducedArtifact:
    from dlfp.book.pipeline import NOTEBOOKS, build_book, copy_book_sources, execute, notebook_parameters

    scratch = factory.mktemp("artifact")
    copy_book_sources(ROOT, scratch)
    runs = scratch / "data" / "runs"
    params = notebook_parameters(str(runs / "cpu"), str(runs / "generalization"), str(runs / "sim"), reduced=True)
    execute(ROOT, scratch / "book" / "generated", params, NOTEBOOKS)
    html = build_book(scratch)
    return ReducedArtifact("in-process", runs, runs / "sim", scratch, html, scratch / "book" / "generated",
                           why_not_slurm=why_not_slurm)


@pytest.fixture(scope="session")
def reduced_artifact(tmp_path_factory: pytest.TempPathFactory, _scratch_runs_may_be_dirty: None) -> ReducedArtifact:
    """The reduced pipeline, run once per session: by a SLURM chain where one is usable, else in-process.

    Requests the suite's dirty-tree allowance by name: the jobs and kernels inherit it from here.
    """
    pytest.importorskip("vllm")
    pytest.importorskip("papermill")
    why = unusable()
    if why is None:
        return _by_slurm(tmp_path_factory)
    if required():
        pytest.fail(f"{REQUIRE_ENV} is set but {why}")
    return _in_process(tmp_path_factory, why)
