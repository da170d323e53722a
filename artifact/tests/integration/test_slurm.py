"""``dlfp cluster submit`` against a real single-node SLURM that the tests start themselves.

The chain is the session's reduced artifact (``conftest.py``): submitted once, its book shared
with ``test_pipeline.py``; this checks what the chain and its resubmission did. Without a usable
SLURM it is skipped, unless ``DLFP_REQUIRE_SLURM=1`` (CI). The part that starts a real engine (or
cluster); the fast tests are in ``artifact/tests/cluster/test_plan.py``.
"""

from __future__ import annotations

import itertools

import pytest

from tests.integration.slurm_cluster import MODELED_RUN, ReducedArtifact, stamp_s, unavailable


@pytest.mark.slow
def test_reduced_pipeline_as_chained_slurm_jobs_then_resubmission_skips(reduced_artifact: ReducedArtifact) -> None:
    chain = reduced_artifact.chain
    if chain is None:
        unavailable(reduced_artifact.why_not_slurm or "the reduced artifact was not made by SLURM")
    assert chain is not None
    runs, book = reduced_artifact.runs, reduced_artifact.book_dir
    run_of = chain.run_of

    out, ids, done = chain.first.out, chain.first.ids, chain.first.jobs
    assert list(ids) == ["verify", "trials", "gen-qwen3-tiny-tp1", "book"], out
    assert "runs in job gen-qwen3-tiny-tp1" in out  # the modeled study rides with the generalization job
    for name, job_id in ids.items():
        log = next(runs.glob(f"**/*.{job_id}.log"))
        assert done[job_id]["JobState"] == "COMPLETED", f"{name}: {done[job_id]}\n{log.read_text()[-3000:]}"
    order = [done[ids[n]] for n in ids]
    for before, after in itertools.pairwise(order):  # afterok: each started after the previous ended
        assert stamp_s(before["EndTime"]) <= stamp_s(after["StartTime"]), (before, after)

    logs = {"verify": runs / f"verify.{ids['verify']}.log", "book": runs / f"book.{ids['book']}.log",
            **{name: run.parent / f"{run.name}.{ids[name]}.log" for name, run in run_of.items()}}
    for name, log in logs.items():  # each log lies beside the run folder its job filled
        assert log.is_file(), (name, sorted(p.name for p in log.parent.iterdir()))
        assert f"[dlfp-cluster] job {ids[name]} {name}" in log.read_text()
    assert "[pipeline] 01_paired_trials done" in logs["trials"].read_text()
    assert "[pipeline] 04_reproducibility done" in logs["book"].read_text()
    assert run_of["gen-qwen3-tiny-tp1"] == runs / "generalization" / "qwen3-tiny-tp1"
    manifests = chain.manifests
    assert set(manifests) == {*run_of.values(), reduced_artifact.sim / MODELED_RUN}
    assert all(b'"status": "complete"' in m for m in manifests.values())
    for page in ("book/generated/00_verify", "book/generated/01_paired_trials", "book/generated/02_generalization",
                 "book/generated/03_results", "book/generated/04_reproducibility"):
        assert f"{page}.html" in chain.pages, page  # built by the first chain's book job

    assert chain.again is not None, reduced_artifact.failure
    out, ids2 = chain.again.out, chain.again.ids
    assert list(ids2) == ["book"], out  # every run complete, the verify page there: nothing is measured
    for name in ("verify", "trials", "gen-qwen3-tiny-tp1"):
        assert f"skipped {name}:" in out
    assert chain.again.jobs[ids2["book"]]["JobState"] == "COMPLETED"
    generated = book / "book" / "generated"  # the book job's notebooks found every run complete
    assert generated == reduced_artifact.notebooks
    assert "already complete, nothing to do" in (generated / "01_paired_trials.ipynb").read_text()
    assert (generated / "02_generalization.ipynb").read_text().count("already complete, nothing to do") == 2
    assert chain.manifests_again == manifests  # no arm, no pre-flight ran
    print(f"chain of 4 jobs: {chain.first.seconds:.0f} s; resubmission (book only): {chain.again.seconds:.0f} s")
