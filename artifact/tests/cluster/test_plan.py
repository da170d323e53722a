"""``dlfp cluster submit`` against a real single-node SLURM that the test starts itself.

The fixture starts munged, slurmctld and slurmd (Debian's ``slurm-wlm`` and ``munge``) with a
configuration, key, sockets, state and logs of their own under a temporary folder, on free
ports, so it touches no system SLURM; it cancels what is left and stops them afterwards. The
job completion log (``jobcomp/filetxt``) records each job's state, start and end.

The submission is a reduced CPU pipeline (the pipeline's ``--reduced`` parameters: two
paired trials of 12 requests): verify, paired trials, one generalization job (qwen3-tiny, TP 1, carrying one
small simulated run), then results and book, chained with ``afterok``; a resubmission must skip
every complete run and submit the book job alone. GPU requests cannot run here (no GPU, no
``gres``): the A100 job list is checked as a dry run instead (GPUs per job = its TP size).
Without slurm installed the cluster test is skipped, unless ``DLFP_REQUIRE_SLURM=1`` (CI).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from dlfp.cluster.plan import Layout, plan
from dlfp.cluster.sbatch import Slurm, script
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT


def _plan_a100(tmp_path: Path):
    layout = Layout(root=ROOT, params=ROOT / "params" / "a100.yaml", runs=tmp_path / "a100", sim=tmp_path / "sim",
                    book_dir=tmp_path / "book")
    return plan(layout, gpus=True)


def test_a100_plan_requests_one_gpu_per_tensor_parallel_rank(tmp_path) -> None:
    target = yaml.safe_load((ROOT / "params" / "a100.yaml").read_text())
    p = _plan_a100(tmp_path)
    jobs = {j.name: j for j in p.jobs}
    pairs = {f"gen-{m}-tp{tp}": tp for m in target["models"] for tp in target["tensor_parallel_sizes"]}
    assert set(jobs) == {"verify", "trials", "book", *pairs}
    for name, tp in pairs.items():
        assert jobs[name].gpus == tp, name
        assert "trials" in jobs[name].after
        text = script(jobs[name], Slurm(gpu_type="a100"), ROOT)
        assert f"#SBATCH --gres=gpu:a100:{tp}\n" in text
        assert f"--tensor-parallel-sizes {tp} " in text and "--only 02_generalization" in text
    assert jobs["trials"].gpus >= 1 and jobs["trials"].after == ("verify",)
    assert jobs["book"].gpus == 0 and "--gres" not in script(jobs["book"], Slurm(), ROOT)
    assert set(jobs["book"].after) == set(jobs) - {"book"}
    assert "--gpus=2" in script(jobs[next(n for n, tp in pairs.items() if tp == 2)], Slurm(gpu_request="gpus"), ROOT)
    for j in p.jobs:  # limits follow the estimate: more work, never a shorter limit
        assert j.limit_s >= j.work_s and j.limit_s % 60 == 0


def test_an_incomplete_modeled_study_runs_in_one_job_only(tmp_path) -> None:
    """Notebook 02 runs the modeled study too: with it incomplete, the first generalization job
    carries it and the other generalization jobs wait, so no two jobs write one run folder."""
    p = _plan_a100(tmp_path)  # a fresh --sim folder: the modeled study is still to run
    gens = [j for j in p.jobs if j.name.startswith("gen-")]
    assert len(gens) > 1 and any("simulated" in b for b in gens[0].basis)
    assert gens[0].after == ("trials",) and all(j.after == (gens[0].name, "trials") for j in gens[1:])
    assert f"runs in job {gens[0].name}" in " ".join(p.notes) and not p.problems


def test_sigterm_gives_the_notebook_kernel_time_to_stop_first() -> None:
    """The job's main process notes SLURM's SIGTERM and stops only after a grace period (or when
    papermill returns first): exiting at once would let SLURM kill the kernel mid-cleanup."""
    import signal

    from dlfp.book.pipeline import _sigterm_waits_for_the_kernel

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), _sigterm_waits_for_the_kernel(grace_s=0.5) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        assert stopped == [signal.SIGTERM]  # noted, not fatal: still running here
        time.sleep(5)  # papermill waiting on a kernel that never answers
    assert 0.5 <= time.monotonic() - started < 4
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
