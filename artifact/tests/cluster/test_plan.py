"""``dlfp.cluster.plan``: the A100 job list as a dry run (GPUs per job = its TP size), the modeled
study in one job only, each job's own logs folder, the estimates' arrival rates and the reference
page's table of them, and the job's SIGTERM grace. A real SLURM runs the CPU chain in
``tests/integration/test_slurm.py``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from dlfp.cluster.estimate import slurm_time
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


def test_each_job_writes_its_kernel_output_to_its_own_logs_folder(tmp_path) -> None:
    """Without ``--logs`` every concurrent generalization job would write the checkout's one
    ``build/logs/02_generalization.log``."""
    p = _plan_a100(tmp_path)
    logs = {}
    for j in p.jobs:
        args = list(j.pipeline_args)
        assert args.count("--logs") == 1, j.name
        logs[j.name] = Path(args[args.index("--logs") + 1])
    assert logs == {j.name: tmp_path / "a100" / "jobs" / j.name / "logs" for j in p.jobs}


def _committed_sim_plan(tmp_path: Path):
    """The A100 plan over fresh --runs with the committed, complete simulated study."""
    layout = Layout(root=ROOT, params=ROOT / "params" / "a100.yaml", runs=tmp_path / "a100",
                    sim=ROOT / "data" / "runs" / "generalization-sim", book_dir=tmp_path / "book")
    return plan(layout, gpus=True)


def test_a_real_run_is_estimated_at_the_rate_the_modeled_study_derived(tmp_path) -> None:
    """The config's 4 requests/s is a stand-in under the scaled design; the modeled 32B derived 0.68."""
    manifest = json.loads((ROOT / "data" / "runs" / "generalization-sim" / "a100-qwen3-32b-tp1" / "manifest.json")
                          .read_text())
    derived = manifest["design"]["overrides"]["workload"]["rate_rps"]
    jobs = {j.name: j for j in _committed_sim_plan(tmp_path).jobs}
    assert jobs["gen-qwen3-32b-tp1"].basis[0].endswith(
        f"(16 warm-up + 100 requests) at {derived:.3g} req/s, the rate the modeled study derived (a100-qwen3-32b-tp1)")
    assert "at 4 req/s, the config's rate" in jobs["gen-qwen3-32b-tp2"].basis[0]  # not modeled: the stand-in
    assert jobs["gen-qwen3-32b-tp1"].work_s > jobs["gen-qwen3-32b-tp2"].work_s


TABLE_ROW = re.compile(r"^\| `([\w.-]+)` \| (\d+) \| (\d+) \| ([\d:-]+) \| (\d+) min \| ([\d.]+|-) \|$", re.M)


def test_the_reference_pages_estimate_table_is_the_plans(tmp_path) -> None:
    from dlfp.cluster.sbatch import Slurm, cpus

    page = (ROOT / "book" / "reference" / "cluster.md").read_text()
    p = _committed_sim_plan(tmp_path)
    assert TABLE_ROW.findall(page) == [
        (j.name, str(j.gpus), str(cpus(j, Slurm())), slurm_time(j.limit_s), f"{j.work_s / 60:.0f}",
         f"{j.gpus * j.work_s / 3600:.2f}" if j.gpus else "-") for j in p.jobs]
    expected = sum(j.gpus * j.work_s for j in p.jobs) / 3600
    at_most = sum(j.gpus * j.limit_s for j in p.jobs) / 3600
    assert f"| total | | | | | about {expected:.2f} (at most {at_most:.2f} at the limits) |" in page


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
