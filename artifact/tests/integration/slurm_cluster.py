"""A real single-node SLURM for the tests: munged, slurmctld and slurmd, all state in one folder.

Debian's ``slurm-wlm`` and ``munge``, started with a configuration, key, sockets, state and logs
of their own under a temporary folder, on free ports, so nothing touches a system SLURM; what is
left in the queue is cancelled and the daemons are stopped on exit. The job completion log
(``jobcomp/filetxt``) records each job's state, start and end. Used by the session's reduced
artifact (``conftest.py``, whose record, :class:`ReducedArtifact`, is defined here with what a
chain of jobs did), which ``test_slurm.py`` and ``test_pipeline.py`` check.
"""

from __future__ import annotations

import contextlib
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

from dlfp.paths import REPO_ROOT

DAEMONS = ("munged", "slurmctld", "slurmd")


CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")


WAIT_S = 1800
"""A guard against a hung queue, not a time budget: each job is bounded by its own time limit."""


REQUIRE_ENV = "DLFP_REQUIRE_SLURM"
"""Set (CI) to fail instead of skipping, or of building the artifact in-process, when SLURM is unusable."""


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def unusable() -> str | None:
    """Why no single-node test cluster can be started here, or None when one can."""
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b) is None]
    if missing:
        return f"slurm is not installed (missing {missing}; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a single-node test cluster needs root (slurmd)"
    return None


def unavailable(reason: str) -> None:
    """Skip for ``reason``; fail instead when :data:`REQUIRE_ENV` is set."""
    if required():
        pytest.fail(f"{REQUIRE_ENV} is set but {reason}")
    pytest.skip(reason)


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

    def wait_idle(self, deadline_s: float = WAIT_S) -> None:
        end = time.monotonic() + deadline_s
        while self.run("squeue", "-h", "-o", "%i").strip():
            if time.monotonic() > end:
                pytest.fail(f"jobs still queued after {deadline_s:.0f} s:\n{self.run('squeue')}")
            time.sleep(2)

    def submit(self, *args: str) -> str:
        """``dlfp cluster submit ARGS`` from the repository root; its standard output."""
        done = subprocess.run([sys.executable, "-m", "dlfp.cli", "cluster", "submit", *args], cwd=REPO_ROOT,
                              env=self.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout


def submitted_ids(out: str) -> dict[str, str]:
    """Job name -> SLURM job id, in submission order, from ``dlfp cluster submit``'s output."""
    line = next(x for x in out.splitlines() if x.startswith("submitted: "))
    return dict(pair.split() for pair in line.removeprefix("submitted: ").split(", "))


def stamp_s(stamp: str) -> float:
    """A completion log time (``2024-05-01T12:00:00``, local) in seconds since the epoch."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def single_node_cluster(d: Path) -> Iterator[Cluster]:
    """munged, slurmctld and slurmd for this host, all state under ``d``; stopped on exit."""
    host = socket.gethostname().split(".")[0]
    d.mkdir(parents=True, exist_ok=True)
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


MODELED_RUN = "a100-qwen3-0.6b-tp1"
"""The reduced pipeline's one modeled run (``notebook_parameters(reduced=True)``), under the sim folder."""


@dataclass(frozen=True)
class Submission:
    """One ``dlfp cluster submit`` and its jobs once the queue drained."""

    out: str
    """What the command printed (the job list, the skipped jobs, the ids)."""
    ids: dict[str, str]
    """Job name -> SLURM job id, in submission order."""
    jobs: dict[str, dict[str, str]]
    """The completion log after the queue drained: job id -> fields (JobState, StartTime, EndTime ...)."""
    seconds: float
    """From the submission until the queue was empty."""


@dataclass(frozen=True)
class Chain:
    """What the SLURM chain and its resubmission did."""

    args: tuple[str, ...]
    """The arguments of both submissions."""
    run_of: dict[str, Path]
    """Planned job -> the run folder it fills (the measuring jobs)."""
    first: Submission
    pages: frozenset[str]
    """The built book's HTML files after the first chain, relative to its HTML folder."""
    manifests: dict[Path, bytes]
    """Each run folder's manifest after the first chain (b"" where there is none)."""
    again: Submission | None
    """The resubmission; None when the first chain did not complete (nothing was resubmitted)."""
    manifests_again: dict[Path, bytes]
    """The same manifests after the resubmission."""


@dataclass(frozen=True)
class ReducedArtifact:
    made_by: str
    """``slurm`` or ``in-process``."""
    runs: Path
    """The runs folder: the paired run and ``generalization/`` (and, in-process, ``sim/``)."""
    sim: Path
    """The modeled runs' folder."""
    book_dir: Path
    """The scratch book (config, toc, prose, ``book/generated``); the build is in its ``_build/``."""
    html: Path
    """The strict build's HTML folder."""
    notebooks: Path
    """The executed notebooks the book was built from (``book_dir / 'book' / 'generated'``)."""
    chain: Chain | None = None
    """What the SLURM chain did; None in-process."""
    why_not_slurm: str | None = None
    failure: str | None = None
    """Why there is no complete book (a job of the chain failed); None when there is one."""

    def book(self) -> Path:
        """The HTML folder, or the test fails with why the chain left none."""
        if self.failure:
            pytest.fail(self.failure)
        return self.html
