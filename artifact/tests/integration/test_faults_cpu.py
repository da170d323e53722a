"""Faults as clusters deliver them: a killed driver, a SIGTERM, a dead engine core.

Fast tests check :mod:`dlfp.harness.lifeline` with plain processes (a stand-in driver, engine core
and worker). The slow test is one cluster job's life on the real CPU engine, run by
``dlfp trial`` as a subprocess: the engine core killed mid-arm, then SIGTERM, then SIGKILL
of the driver, each followed by the same command resuming; after each, no process the
driver started may be left (six engine starts, the pre-flight's included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from dlfp.harness import lifeline
from dlfp.paths import REPO_ROOT
from dlfp.trials.runfolder import engine_step_log

ROOT = REPO_ROOT


def gone(proc: psutil.Process) -> bool:
    """Exited: no such process (or its pid reused), or a zombie (a container's pid 1 may not
    reap orphans)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """The processes still running after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(gone(p) for p in procs):
        time.sleep(0.1)
    return [p for p in procs if not gone(p)]


# A stand-in driver: sets the lifeline environment, starts an "engine core" that arms the
# lifeline and starts a "worker" of its own, prints their pids, then sleeps until killed. The
# core's stderr is a pipe the driver reads, as with `dlfp trial ... 2>&1 | tee log`: it breaks
# when the driver dies, and the lifeline must still act.
DRIVER = textwrap.dedent("""
    import os, subprocess, sys, time
    from dlfp.harness import lifeline
    os.environ.update(lifeline.child_environment())
    core = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    print(core.pid, core.stdout.readline().strip(), flush=True)
    time.sleep(600)
""")
CORE = textwrap.dedent("""
    import os, subprocess, sys, time
    from dlfp.harness import lifeline
    if {no_pidfd}:
        del os.pidfd_open  # as on Linux < 5.3: the lifeline polls instead
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    lifeline.exit_with_parent()
    print(worker.pid, flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("no_pidfd", [False, True], ids=["pidfd", "polling"])
def test_engine_core_and_its_workers_exit_with_a_killed_driver(no_pidfd: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "artifact")}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, CORE.format(no_pidfd=no_pidfd)],
                              stdout=subprocess.PIPE, text=True, env=env)
    procs = [psutil.Process(int(p)) for p in driver.stdout.readline().split()]  # the core, its worker
    try:
        time.sleep(0.5)
        assert not any(gone(p) for p in procs), "the lifeline fired while the driver lives"
        driver.kill()  # SIGKILL: no handler, no atexit
        driver.wait()
        assert wait_gone(procs, timeout_s=lifeline.POLL_S + 4) == []
    finally:
        driver.kill()
        driver.wait()
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def test_lifeline_is_off_without_the_variable_and_in_the_driver_itself(monkeypatch) -> None:
    before = threading.active_count()
    monkeypatch.delenv(lifeline.PARENT_ENV, raising=False)
    lifeline.exit_with_parent()
    monkeypatch.setenv(lifeline.PARENT_ENV, str(os.getpid()))  # an in-process engine core
    lifeline.exit_with_parent()
    assert threading.active_count() == before
    monkeypatch.setenv(lifeline.PARENT_ENV, "driver")
    with pytest.raises(ValueError, match=f"{lifeline.PARENT_ENV}='driver' is not a process id"):
        lifeline.exit_with_parent()


class FakeEngine:
    """``AsyncLLM.errored``, turning true ``dies_after_s`` from now (never when None)."""

    def __init__(self, dies_after_s: float | None) -> None:
        self.dies_at = None if dies_after_s is None else time.monotonic() + dies_after_s

    @property
    def errored(self) -> bool:
        return self.dies_at is not None and time.monotonic() >= self.dies_at


async def _replay(duration_s: float, log: list[str]) -> str:
    try:
        await asyncio.sleep(duration_s)
    except asyncio.CancelledError:
        log.append("cancelled")
        raise
    return "trace"


def test_a_dead_engine_core_voids_the_arm_at_once() -> None:
    log: list[str] = []
    started = time.monotonic()
    with pytest.raises(lifeline.EngineCoreDied, match="engine core process died during the arm"):
        asyncio.run(lifeline.unless_engine_dies(FakeEngine(0.3), _replay(30.0, log)))
    assert time.monotonic() - started < 0.3 + 3 * lifeline.WATCH_ENGINE_S and log == ["cancelled"]
    assert asyncio.run(lifeline.unless_engine_dies(FakeEngine(None), _replay(0.6, log))) == "trace"
    with pytest.raises(lifeline.EngineCoreDied):  # died as the last request finished: steps may be lost
        asyncio.run(lifeline.unless_engine_dies(FakeEngine(0.0), _replay(0.0, log)))


# --- the real engine --------------------------------------------------------------------------

TINY = {"name": "faults", "trials": 1, "design": {"kind": "fixed", "enforce": False}, "warmup_requests": 2,
        "engine": {"enforce_eager": True},  # faults, not latency: an eager engine starts in half the time
        "workload": {"n_requests": 12, "rate_rps": 4.0,
                     "classes": [{"name": "short", "weight": 1, "prompt_len": {"uniform": [32, 64]},
                                  "output_len": {"uniform": [16, 32]}}]}}


class Job:
    """``dlfp trial CONFIG --out OUT`` as a subprocess, as a batch script would run it."""

    def __init__(self, config: Path, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen([str(Path(sys.executable).with_name("dlfp")), "trial", str(config),
                                      "--out", str(out), "--quiet"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def manifest(self) -> dict:
        return json.loads((self.out / "manifest.json").read_text())

    def complete(self) -> list[str]:
        try:
            units = self.manifest()["units"]
        except (OSError, ValueError, KeyError):
            return []
        return [f"trial-{u['trial']}/{u['arm']}" for u in units if u["status"] == "complete"]

    def serving(self, n_complete: int) -> list[psutil.Process]:
        """Wait until ``n_complete`` arms are done and the next arm's engine, one of this job's
        processes (a stopped job leaves its partial step log behind), has run some steps (its
        step log, beside the run folder, holds records, not just its header); the driver's descendants."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"dlfp trial ended early: {self.proc.communicate()}"
            children = psutil.Process(self.proc.pid).children(recursive=True)
            for log in [engine_step_log(self.out)] if engine_step_log(self.out).is_file() else []:
                try:
                    lines = log.read_text().splitlines()
                except FileNotFoundError:  # removed as its engine finished
                    continue
                try:
                    pid = json.loads(lines[0])["header"]["pid"]
                except (IndexError, ValueError):  # not written yet, or caught mid-write
                    continue
                except KeyError:  # a stopped job's engine core flushed its last steps after the driver
                    continue      # removed its log: a leftover without a header, which the next unit removes
                if len(self.complete()) == n_complete and len(lines) > 2 and pid in {c.pid for c in children}:
                    return children
            time.sleep(0.2)
        raise TimeoutError(f"no arm in flight after {START_TIMEOUT_S} s; {self.complete()} complete")

    def finish(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=START_TIMEOUT_S)
        return self.proc.returncode, err


START_TIMEOUT_S = 900
"""An engine starts in 20-40 s on 2 idle cores, but in minutes on a machine shared with other runs."""


def engine_cores(procs: list[psutil.Process]) -> list[psutil.Process]:
    cores = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if "EngineCore" in (" ".join(proc.cmdline()) or proc.name()):
                cores.append(proc)
    return cores


@pytest.fixture
def jobs():
    """Starts :class:`Job` s; whatever happens in the test, none (nor its engine) outlives it."""
    started: list[Job] = []

    def start(config: Path, out: Path) -> Job:
        started.append(Job(config, out))
        return started[-1]

    yield start
    for job in started:
        if job.proc.poll() is None:  # not reaped, so its pid is still this job's
            lifeline.kill_tree(job.proc.pid)
        job.proc.wait()


@pytest.mark.slow
def test_cluster_job_killed_and_resumed_loses_at_most_the_arm_in_flight(tmp_path, jobs) -> None:
    pytest.importorskip("vllm")
    import yaml

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    out = tmp_path / "run"
    arms = 2  # one trial: stock and DLFP

    # 1. The engine core dies mid-arm (OOM killer, a crashed kernel): the arm is void, the
    #    run "failed" with the reason, exit 1; nothing is left running.
    job = jobs(config, out)
    children = job.serving(n_complete=0)
    [core] = engine_cores(children)
    core.kill()
    code, err = job.finish()
    assert code == 1, err
    m = job.manifest()
    assert m["status"] == "failed" and "EngineCoreDied" in m["error"] and len(m["missing"]) == arms, m
    assert "engine core process died" in err and wait_gone(children, 10) == []

    # 2. SIGTERM (SLURM's time limit, scancel) once an arm is finished: exit 143, "interrupted"
    #    by SIGTERM, the finished arm kept, the engine core shut down.
    job = jobs(config, out)
    children = job.serving(n_complete=1)
    assert engine_cores(children)
    job.proc.send_signal(signal.SIGTERM)
    code, err = job.finish()
    assert code == 143, err
    m = job.manifest()
    assert m["status"] == "interrupted" and m["interrupted_by"] == "SIGTERM" and len(m["missing"]) == arms - 1, m
    assert wait_gone(children, 10) == []
    kept = {arm: (out / arm / "tokens.parquet").read_bytes() for arm in job.complete()}

    # 3. SIGKILL of the driver (no handler can run; the manifest still says "running"): the
    #    engine core notices and exits with it, and takes its worker along.
    job = jobs(config, out)
    children = job.serving(n_complete=1)
    assert engine_cores(children)
    job.proc.kill()
    code, _ = job.finish()
    assert code == -signal.SIGKILL
    assert job.manifest()["status"] == "running" and job.complete() == list(kept)
    assert wait_gone(children, lifeline.POLL_S + 10) == [], "a process outlived its SIGKILLed driver"

    # 4. The same command resumes: only the missing arms run, the kept ones are untouched.
    job = jobs(config, out)
    code, err = job.finish()
    assert code == 0, err
    m = job.manifest()
    assert m["status"] == "complete" and m["missing"] == [] and len(job.complete()) == arms
    assert {arm: (out / arm / "tokens.parquet").read_bytes() for arm in kept} == kept
    assert not list(out.rglob("*.partial")) and not engine_step_log(out).exists()  # the killed run's log too
