"""``dlfp cluster submit`` against a real single-node SLURM that the test starts itself.

The part that starts a real engine (or cluster); the fast tests are in ``artifact/tests/cluster/test_plan.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dlfp.cluster.plan import Layout, plan
from dlfp.paths import REPO_ROOT

ROOT = REPO_ROOT


DAEMONS = ("munged", "slurmctld", "slurmd")


CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")


WAIT_S = 1800
"""A guard against a hung queue, not a time budget: each job is bounded by its own time limit."""


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]

    def run(self, *args: str) -> str:
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, check=True, timeout=60).stdout

    def jobs(self) -> dict[str, dict[str, str]]:
        """Finished jobs from the completion log: id -> fields (Name, JobState, StartTime ...)."""
        log = self.folder / "jobcomp.log"
        rows = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in log.read_text().splitlines()] if log.exists() else []
        return {r["JobId"]: r for r in rows}

    def wait_idle(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while self.run("squeue", "-h", "-o", "%i").strip():
            if time.monotonic() > end:
                pytest.fail(f"jobs still queued after {deadline_s:.0f} s:\n{self.run('squeue')}")
            time.sleep(2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unavailable(reason: str) -> None:
    if os.environ.get("DLFP_REQUIRE_SLURM", "") not in ("", "0"):
        pytest.fail(f"DLFP_REQUIRE_SLURM is set but {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def single_node_cluster(d: Path) -> Iterator[Cluster]:
    """munged, slurmctld and slurmd for this host, all state under ``d``; stopped on exit."""
    host = socket.gethostname().split(".")[0]
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=dlfptest", f"SlurmctldHost={host}", f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}", "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={d}/munge.sock",
        "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool", f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd.pid",
        f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd.log", "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={d}/jobcomp.log", "ReturnToService=2", "MpiDefault=none", "MinJobAge=3600",
        f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
        f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    commands = [
        ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={d}/munge.sock",
         f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed"],
        ["slurmctld", "-D", "-f", str(conf)],
        ["slurmd", "-D", "-f", str(conf)],
    ]
    procs: list[subprocess.Popen] = []
    try:
        for cmd in commands:
            with open(d / f"{cmd[0]}.out", "w") as out:
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
            time.sleep(1)
        end = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                           text=True).stdout:
            if time.monotonic() > end or any(p.poll() is not None for p in procs):
                logs = "\n".join(f"{f.name}: {f.read_text()[-800:]}" for f in sorted(d.glob("*.out")) + sorted(
                    d.glob("*.log")))
                raise RuntimeError(f"the test cluster did not come up:\n{logs}")
            time.sleep(1)
        yield Cluster(d, env)
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        end = time.monotonic() + 60
        while time.monotonic() < end and subprocess.run(["squeue", "-h"], env=env, capture_output=True,
                                                        text=True).stdout.strip():
            time.sleep(1)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b) is None]
    if missing:
        _unavailable(f"slurm is not installed (missing {missing}; apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        _unavailable("a single-node test cluster needs root (slurmd)")
    with single_node_cluster(tmp_path_factory.mktemp("slurm")) as c:
        yield c


def _submit(cluster: Cluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "dlfp.cli", "cluster", "submit", *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _ids(out: str) -> dict[str, str]:
    line = next(x for x in out.splitlines() if x.startswith("submitted: "))
    return dict(pair.split() for pair in line.removeprefix("submitted: ").split(", "))


def _t(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


@pytest.mark.slow
def test_reduced_pipeline_as_chained_slurm_jobs_then_resubmission_skips(cluster: Cluster, tmp_path) -> None:
    runs, book = tmp_path / "runs", tmp_path / "book"
    params = tmp_path / "params.yaml"
    # The pipeline's reduced parameters (dlfp pipeline --reduced), with one paired trial instead of
    # two, so the whole chain stays within a few minutes on 2 cores: 5 real and 2 modeled arms
    # (and their pre-flights). This tests the batch mechanics, not DLFP: a design the pre-flight
    # would refuse on a slow or busy machine runs anyway (design.enforce: false, recorded).
    small = {"trials": 1, "workload": {"n_requests": 10}, "design": {"enforce": False}}
    params.write_text(yaml.safe_dump({
        **yaml.safe_load((ROOT / "params" / "cpu.yaml").read_text()),
        "models": ["qwen3-tiny"], "overrides": small, "modeled_overrides": small,
        "modeled_runs": [{"profile": "a100", "model": "qwen3-0.6b", "tp": 1}],
        "cluster": {"gpus": False, "cpus_per_task": os.cpu_count(),
                    "engine_start_s": 120}}))  # generous limits: a busy machine is slow, not wrong
    args = ("--params", str(params), "--runs", str(runs), "--sim", str(tmp_path / "sim"), "--book-dir", str(book))
    planned = plan(Layout(ROOT, params, runs, tmp_path / "sim", book), gpus=False)
    run_of = {j.name: j.runs[0] for j in planned.jobs if j.runs}

    started = time.monotonic()
    out = _submit(cluster, *args)
    ids = _ids(out)
    assert list(ids) == ["verify", "trials", "gen-qwen3-tiny-tp1", "book"], out
    assert "runs in job gen-qwen3-tiny-tp1" in out  # the modeled study rides with the generalization job
    cluster.wait_idle(WAIT_S)
    first_s = time.monotonic() - started
    done = cluster.jobs()
    for name, job_id in ids.items():
        log = next(Path(p) for p in (runs.glob(f"**/*.{job_id}.log")))
        assert done[job_id]["JobState"] == "COMPLETED", f"{name}: {done[job_id]}\n{log.read_text()[-3000:]}"
    order = [done[ids[n]] for n in ids]
    for before, after in itertools.pairwise(order):  # afterok: each started after the previous ended
        assert _t(before["EndTime"]) <= _t(after["StartTime"]), (before, after)

    logs = {"verify": runs / f"verify.{ids['verify']}.log", "book": runs / f"book.{ids['book']}.log",
            **{name: run.parent / f"{run.name}.{ids[name]}.log" for name, run in run_of.items()}}
    for name, log in logs.items():  # each log lies beside the run folder its job filled
        assert log.is_file(), (name, sorted(p.name for p in log.parent.iterdir()))
        assert f"[dlfp-cluster] job {ids[name]} {name}" in log.read_text()
    assert "[pipeline] 01_paired_trials done" in logs["trials"].read_text()
    assert "[pipeline] 04_reproducibility done" in logs["book"].read_text()
    assert run_of["gen-qwen3-tiny-tp1"] == runs / "generalization" / "qwen3-tiny-tp1"
    manifests = {d: (d / "manifest.json").read_bytes() for d in
                 (*run_of.values(), tmp_path / "sim" / "a100-qwen3-0.6b-tp1")}
    assert all(b'"status": "complete"' in m for m in manifests.values())
    html = book / "_build" / "html"
    for page in ("book/generated/00_verify", "book/generated/01_paired_trials", "book/generated/02_generalization",
                 "book/generated/03_results", "book/generated/04_reproducibility"):
        assert (html / f"{page}.html").is_file(), page

    again = time.monotonic()
    out = _submit(cluster, *args)
    ids2 = _ids(out)
    assert list(ids2) == ["book"], out  # every run complete, the verify page there: nothing is measured
    for name in ("verify", "trials", "gen-qwen3-tiny-tp1"):
        assert f"skipped {name}:" in out
    cluster.wait_idle(WAIT_S)
    assert cluster.jobs()[ids2["book"]]["JobState"] == "COMPLETED"
    generated = book / "book" / "generated"  # the book job's notebooks found every run complete
    assert "already complete, nothing to do" in (generated / "01_paired_trials.ipynb").read_text()
    assert (generated / "02_generalization.ipynb").read_text().count("already complete, nothing to do") == 2
    assert {d: (d / "manifest.json").read_bytes() for d in manifests} == manifests  # no arm, no pre-flight ran
    print(f"chain of 4 jobs: {first_s:.0f} s; resubmission (book only): {time.monotonic() - again:.0f} s")
