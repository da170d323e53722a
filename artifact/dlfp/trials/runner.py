"""Paired trials: per seed, a stock arm and a DLFP arm on the same workload, traces on disk.

Run folder layout (``data/runs/<id>/``)::

    manifest.json                 versions, hardware, git commit, config, seeds, timings,
                                  status, per-unit status and file checksums
    trial-<k>/workload.parquet    the requests both arms replay
    trial-<k>/<arm>/requests.parquet tokens.parquet steps.parquet telemetry.parquet

Each arm is a unit of work: it runs in ``trial-<k>/.<arm>.partial`` and is renamed into place
only when all its tables are written, and the manifest (itself replaced atomically) records
it. A crash or Ctrl-C leaves every finished unit and a manifest listing what is missing; the
same command resumes, and a folder holding a different config is refused, never overwritten.

The run reports one line per unit of work (:mod:`dlfp.trials.progress`); what the engines print
themselves, from every process vLLM starts, goes to ``<run folder>.engine.log``
(:func:`~dlfp.trials.runfolder.engine_log`, :mod:`dlfp.harness.quiet`), whose end a failure shows.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.harness import workload
from dlfp.harness.quiet import output_to
from dlfp.paths import sha256
from dlfp.trials.config import TrialConfig
from dlfp.trials.interrupts import Interrupted, StopSignal, watch_interrupt
from dlfp.trials.manifest import exclusive, now, open_run
from dlfp.trials.progress import RunProgress, progress_stream
from dlfp.trials.runfolder import (
    PREFLIGHT_STEPS,
    RunFolderError,
    engine_log,
    engine_step_log,
    stored,
    write_parquet,
)
from dlfp.trials.schema import Manifest, Unit, write_manifest
from dlfp.trials.stopping import SKIPPED, Stopping


def _workload_for(config: TrialConfig, out: Path, trial: int, seed: int) -> list[workload.Request]:
    path = out / f"trial-{trial}" / "workload.parquet"
    requests = workload.generate(config.workload_spec(seed))
    if path.exists():
        if workload.load(path) != requests:
            raise RunFolderError(f"{path} does not match the workload of seed {seed}; refusing to resume")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        workload.save(requests, path)
    return requests


class _Workloads:
    """What each unit of one run replays: its trial's workload (saved, checked on resume, its checksum in
    the manifest), at the arm's own rate and count where it has them (the first requests, arrivals
    rescaled: :meth:`TrialConfig.workload_spec`).

    Each distinct workload is drawn once per run and shared by the units that replay it: a capacity
    sweep's 161 units per trial replay seven rates. Drawn per unit, a virtual-time run held every unit's
    own copy until its workers took it (3.0 GB peak for Qwen3-8B at three trials, 1.4 GB shared), and
    checking a trial's saved file once per unit cost about as much as simulating a short unit."""

    def __init__(self, config: TrialConfig, out: Path, manifest: Manifest) -> None:
        self.config, self.out, self.manifest = config, out, manifest
        self._trials: set[int] = set()
        self._drawn: dict[str, list[workload.Request]] = {}

    def for_unit(self, unit: Unit) -> list[workload.Request]:
        trial, seed = unit.trial, self.config.seeds[unit.trial] if unit.seed is None else unit.seed
        if trial not in self._trials:
            requests = _workload_for(self.config, self.out, trial, seed)
            self._drawn[repr(self.config.workload_spec(seed))] = requests
            name = f"trial-{trial}/workload.parquet"
            if self.manifest.workloads is None:
                self.manifest.workloads = {}
            self.manifest.workloads[name] = sha256(self.out / name)
            self._trials.add(trial)
        spec = self.config.workload_spec(seed, unit.arm)
        key = repr(spec)
        if key not in self._drawn:
            self._drawn[key] = workload.generate(spec)
        return self._drawn[key]


def _engine_groups(config: TrialConfig, units: list[Unit]) -> list[list[int]]:
    """The missing units in order, consecutive ones of one engine configuration grouped where the
    config reuses engines (else one unit per engine)."""
    groups: list[list[int]] = []
    last = None
    for i, unit in enumerate(units):
        if unit.settled:
            last = None
            continue
        spec = config.engine_for(unit.arm)
        if config.reuse_engine and groups and spec == last:
            groups[-1].append(i)
        else:
            groups.append([i])
        last = spec
    return groups


def _run_group(config: TrialConfig, out: Path, manifest: Manifest, report: RunProgress,
               workloads: _Workloads, stopping: Stopping, group: list[int]) -> None:
    """Run units ``group`` (one engine configuration) on one engine, each unit's tables written and
    recorded in the manifest as it finishes, so an interruption loses only the unit in flight; a unit its
    sweep stopped below is skipped (:mod:`dlfp.trials.stopping`), a group left with none starts no engine."""
    from dlfp.harness import arm
    from dlfp.harness.arm import Job

    group = [i for i in group if not manifest.units[i].settled]
    if not group:
        return
    units = [manifest.units[i] for i in group]
    work = [workloads.for_unit(unit) for unit in units]
    started = [0.0]

    def prepare(j: int) -> Any:
        """Unit ``j`` begins: a fresh partial folder, its clock, its progress line."""
        _fresh_partial(out, units[j])
        started[0] = time.monotonic()
        return report.unit(group[j], work[j], reused=j > 0)

    def done(j: int, result: Any) -> None:
        _record(config, out, manifest, report, stopping, group[j], result, time.monotonic() - started[0])

    first = units[0]
    shared = ", one engine" if len(units) > 1 else ""
    names = ", ".join(u.label for u in units)
    header = f"===== {now()} {names}"
    log = engine_step_log(out)
    log.unlink(missing_ok=True)
    progress = prepare(0)  # the first unit's clock includes the engine's start, as with one engine per unit
    jobs = [Job(w, (lambda: progress) if j == 0 else functools.partial(prepare, j),
                functools.partial(lambda i: not manifest.units[i].settled, group[j])) for j, w in enumerate(work)]
    spec = config.engine_for(first.arm)
    try:
        with output_to(engine_log(out), f"{header} (seed {first.seed}{shared})"):
            warmup = work[0][:config.warmup_requests]  # every unit meets a warmed engine, however shared
            if config.reuse_engine:
                arm.run_arms(spec, jobs, log, done, config.telemetry_interval_s, warmup=warmup)
            else:  # one engine per unit: the arm runner's own entry point (what tests stand in for)
                done(0, arm.run_arm(spec, work[0], log, progress, config.telemetry_interval_s, warmup=warmup))
    finally:
        log.unlink(missing_ok=True)


def _run_virtual(config: TrialConfig, out: Path, manifest: Manifest, report: RunProgress,
                 workloads: _Workloads, stopping: Stopping, workers: int) -> None:
    """Every missing unit of a virtual-time run, on ``workers`` processes (:mod:`dlfp.trials.parallel`), each
    written and recorded as it finishes; a sweep's loads of one arm in order, none past where it stops."""
    from dlfp.trials.parallel import run_units

    indices = [i for i, unit in enumerate(manifest.units) if not unit.settled]
    report.workers = workers

    def task(i: int) -> Any:
        return i, config.engine_for(manifest.units[i].arm), workloads.for_unit(manifest.units[i])

    def done(i: int, result: Any, wall_s: float) -> None:
        _fresh_partial(out, manifest.units[i])
        _record(config, out, manifest, report, stopping, i, result, wall_s)

    with output_to(engine_log(out), f"===== {now()} {len(indices)} virtual units on {workers} worker(s)"):
        run_units(indices, task, workers, done, blocked=stopping.blocked,
                  wanted=lambda i: not manifest.units[i].settled)


def _record(config: TrialConfig, out: Path, manifest: Manifest, report: RunProgress, stopping: Stopping,
            index: int, result: Any, wall_s: float) -> None:
    """A finished unit: its tables in place and its record in the manifest, with the units its sweep now skips
    (one manifest write, so a crash never leaves a failure recorded without what it stops)."""
    unit = _finish_unit(config, out, manifest.units[index], result, wall_s)
    manifest.units[index] = dataclasses.replace(
        unit, margins=stopping.margins(index, result.trace.requests, result.trace.tokens))
    skipped = _skip(manifest, stopping, index)
    manifest.missing = manifest.missing_units()
    write_manifest(out, manifest)
    report.unit_done(index, manifest.units[index])
    for j in skipped:
        report.unit_skipped(j, manifest.units[j])
    _warn_drift(config, out, manifest, index, result.steps, report)


def _skip(manifest: Manifest, stopping: Stopping, finished: int | None = None) -> list[int]:
    """Mark every unit the stopping rule now rules out (after unit ``finished``: in its chain) as skipped, in
    memory; their indices."""
    ruled_out = stopping.to_skip(finished)
    for j, why in ruled_out.items():
        manifest.units[j] = dataclasses.replace(manifest.units[j], status=SKIPPED, skipped=why)
    return sorted(ruled_out)


def _warn_drift(config: TrialConfig, out: Path, manifest: Manifest, index: int, steps: pd.DataFrame,
                report: RunProgress) -> None:
    """Say at once when a stock unit's steps did not cost what the pre-flight measured
    (:mod:`dlfp.trials.costcheck`): the run goes on, and its regime check flags the trial, but the
    user of a busy machine learns it now rather than from the book."""
    from dlfp.trials.arms import REFERENCE
    from dlfp.trials.costcheck import drift

    design = manifest.design or {}
    if manifest.units[index].arm != REFERENCE or "measured" not in design or \
            not (out / PREFLIGHT_STEPS).is_file():
        return
    off = drift(pd.read_parquet(out / PREFLIGHT_STEPS), steps,
                int(design["measured"]["decoders"])).off_by(config.design.rules.max_cost_drift)
    if off:
        report.line(f"{report.unit_label(index)}: {'; '.join(off)}: its steps did not cost what the pre-flight "
                    "measured, so this trial will be flagged outside its design's regime (rerun on a quiet machine)")


def _fresh_partial(out: Path, unit: Unit) -> None:
    """An empty partial folder for ``unit``, whose tables are written there and renamed into place; what an
    earlier attempt left of it is removed (not in the manifest as complete: incomplete)."""
    trial_dir = out / f"trial-{unit.trial}"
    for stale in (trial_dir / f".{unit.arm}.partial", trial_dir / unit.arm):
        shutil.rmtree(stale, ignore_errors=True)
    (trial_dir / f".{unit.arm}.partial").mkdir(parents=True)


def _finish_unit(config: TrialConfig, out: Path, unit: Unit, result: Any, wall_s: float) -> Unit:
    """Write a finished unit's tables into place (atomically: a rename) and return its manifest record."""
    trial_dir = out / f"trial-{unit.trial}"
    final, partial = trial_dir / unit.arm, trial_dir / f".{unit.arm}.partial"
    tokens = result.trace.tokens if config.token_ids else result.trace.tokens.drop(columns="token_id")
    tables = {"requests": result.trace.requests, "tokens": tokens, "steps": result.steps, "telemetry": result.telemetry}
    for name, df in tables.items():
        write_parquet(stored(df, name), partial / f"{name}.parquet")
    os.replace(partial, final)
    lateness = pd.Series(result.trace.lateness_s, dtype=float)
    return dataclasses.replace(
        unit, status="complete", finished=now(), wall_s=round(wall_s, 2),
        send_lateness_ms={"p50": float(lateness.quantile(0.5) * 1e3), "p99": float(lateness.quantile(0.99) * 1e3)},
        files={f"{name}.parquet": sha256(final / f"{name}.parquet") for name in tables},
        ran=result.ran or unit.ran)  # what the engine reports it ran (harness.result.RAN)


def run_trials(config: TrialConfig, out: Path, progress: bool = True, allow_dirty: bool = False,
               workers: int | None = None) -> Manifest:
    """Run (or resume) every missing unit of ``config`` into ``out``; returns the manifest.

    Refuses to start unless the code runs depend on is a clean commit, or ``allow_dirty`` (or
    ``DLFP_ALLOW_DIRTY=1``) says otherwise; the manifest's ``git`` entry records either. A virtual-time
    run's units run on ``workers`` processes (default: this process's cores); real-time units, one
    engine at a time, always.
    """
    out = Path(out)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if workers is not None and workers > 1 and not config.engine.virtual:
        raise ValueError(f"workers = {workers}: only a virtual-time run (engine.sim.clock: virtual) runs units "
                         "in parallel; real engines beside each other would slow each other's measurements")
    with exclusive(out):
        manifest = open_run(config, out, allow_dirty)
        if manifest.complete:
            print(f"{out}: already complete, nothing to do", file=sys.stderr)
            return manifest
        manifest.status, manifest.missing, manifest.resumed = "running", manifest.missing_units(), now()
        write_manifest(out, manifest)
        with progress_stream(progress) as stream, watch_interrupt() as ctrl_c:
            report = RunProgress(out, manifest.units, stream)
            report.begin(engine_log(out))
            _run_units(config, out, manifest, report, ctrl_c, workers)
            report.finished(engine_log(out))
        manifest.status, manifest.finished, manifest.missing = "complete", now(), []
        manifest.error = manifest.interrupted_by = None
        write_manifest(out, manifest)
        return manifest


def _design(config: TrialConfig, out: Path, manifest: Manifest, report: RunProgress) -> TrialConfig:
    """The config the arms run: the requested one with its design's overrides.

    The pre-flight runs once per run folder: its measurement and the derived design are recorded
    in the manifest and reused on resume, so a resumed run keeps its design on any machine. A
    design the checks refuse (and ``design.enforce`` keeps refused) is recorded as
    ``refused_design`` with status ``refused``, and a rerun measures afresh.
    """
    from dlfp.trials.arms import REFERENCE
    from dlfp.trials.design import derive, refuse
    from dlfp.trials.prediction import workload_facts
    from dlfp.trials.preflight import run_preflight

    if manifest.design is None:
        facts = workload_facts(config.raw)
        decoders = max(1, round(config.design.rules.decoders))
        sim = config.engine.sim
        source = "measured" if sim is None else (f"simulated (cost profile {sim.get('profile', 'a100')}"
                                                 + (", virtual time)" if config.engine.virtual else ")"))
        report.preflight(REFERENCE)
        started = time.monotonic()
        with output_to(engine_log(out), f"===== {now()} pre-flight on the {REFERENCE} engine"):
            result = run_preflight(config.engine_for(REFERENCE), facts, decoders,
                                   int(config.workload.get("vocab_size", 32000)), source)
        design = derive(config.design, result.measured, facts, config.raw)
        record = {**design.record(), "enforced": config.design.enforce, "finished": now(),
                  "wall_s": round(time.monotonic() - started, 2)}
        if design.problems and config.design.enforce:
            manifest.status, manifest.refused_design, manifest.stopped = "refused", record, now()
            write_manifest(out, manifest)
            refuse(design)
        (out / PREFLIGHT_STEPS).parent.mkdir(exist_ok=True)
        write_parquet(result.steps, out / PREFLIGHT_STEPS)
        record["files"] = {PREFLIGHT_STEPS: sha256(out / PREFLIGHT_STEPS)}
        manifest.refused_design, manifest.design = None, record
        write_manifest(out, manifest)
        report.preflight_done(record["wall_s"])
    return config.with_overrides(manifest.design["overrides"])


def _run_units(config: TrialConfig, out: Path, manifest: Manifest, report: RunProgress,
               stop: StopSignal, workers: int | None = None) -> None:
    """Every missing unit in order; on any exit but success the manifest says what is missing."""
    try:
        config = _design(config, out, manifest, report)
        workloads = _Workloads(config, out, manifest)
        stopping = Stopping(manifest, config.design.kind == "capacity" and config.design.stop_at_failure)
        if _skip(manifest, stopping):  # resumed: what the failures it recorded already rule out
            manifest.missing = manifest.missing_units()
            write_manifest(out, manifest)
        if config.engine.virtual:
            from dlfp.trials.parallel import default_workers

            _run_virtual(config, out, manifest, report, workloads, stopping, workers or default_workers())
        for group in _engine_groups(config, manifest.units):
            _run_group(config, out, manifest, report, workloads, stopping, group)
    except BaseException as exc:
        stop.stopping = True  # signals from here on are only noted: the manifest write must finish
        if manifest.status == "refused":
            raise
        # A signal's own exception, or any error that follows it (a library reporting the
        # engine core it killed), is an interruption; a KeyboardInterrupt without our handler
        # (a notebook kernel's, a worker thread) is a SIGINT.
        sig = stop.signal or (signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
        manifest.status, manifest.stopped = "failed" if sig is None else "interrupted", now()
        manifest.error = f"{type(exc).__name__}: {exc}" if sig is None else None
        manifest.interrupted_by = None if sig is None else sig.name
        manifest.missing = manifest.missing_units()
        write_manifest(out, manifest)
        report.stopped(exc, None if sig is None else sig.name, engine_log(out))
        if sig is not None and not isinstance(exc, KeyboardInterrupt):
            raise Interrupted(sig) from exc
        raise
