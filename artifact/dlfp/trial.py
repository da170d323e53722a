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
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp import __version__, workload
from dlfp.provenance import resume_record, start_record
from dlfp.runfolder import (
    KIND,
    MANIFEST,
    PREFLIGHT_STEPS,
    RunFolderError,
    read_manifest,
    sha256,
    write_json_atomic,
    write_parquet,
)
from dlfp.trialconfig import TrialConfig, parse_config


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, Any]:
    """Versions that decide what a run measured."""
    from dlfp.vllm_cli import vllm_version

    return {"dlfp": __version__, "vllm": vllm_version(), "torch": _version("torch"),
            "python": platform.python_version(), "pandas": pd.__version__}


def plan_units(config: TrialConfig) -> list[dict[str, Any]]:
    """Trial order and arm order: trial ``k`` runs the arms rotated by ``k`` places, so each arm
    runs in each position equally often over ``len(arms)`` trials and order effects cancel
    (two arms: they alternate)."""
    names = config.arm_names
    units = []
    for k, seed in enumerate(config.seeds):
        r = k % len(names)
        units += [{"trial": k, "seed": seed, "arm": arm, "status": "missing"} for arm in names[r:] + names[:r]]
    return units


def _open_run(config: TrialConfig, out: Path, allow_dirty: bool = False) -> dict[str, Any]:
    """A fresh manifest, or the existing one when resuming the same config (from the same clean commit,
    unless ``allow_dirty``: :mod:`dlfp.provenance`)."""
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        manifest = read_manifest(out)
        if normalized_config(manifest["config"]) != normalized_config(config.raw):
            raise RunFolderError(
                f"{out} holds a run of a different config; refusing to overwrite it "
                "(choose another --out, or delete the folder yourself)")
        recorded = (manifest.get("sim_profile") or {}).get("sha256")
        if recorded is not None and recorded != sim_profile_record(config)["sha256"]:
            raise RunFolderError(f"{out} was simulated with another version of cost profile "
                                 f"{config.engine.sim['profile']!r}; refusing to mix them in one run")
        if manifest["status"] != "complete":  # nothing runs for a complete one: nothing to trace
            manifest["git"] = resume_record(manifest.get("git"), allow_dirty)
        return manifest
    if out.exists() and any(out.iterdir()):
        raise RunFolderError(f"{out} exists, is not empty and has no {MANIFEST}: refusing to write there")
    from dlfp.telemetry import describe_hardware, telemetry_source

    git = start_record(allow_dirty)  # refuses a dirty tree before anything is written
    out.mkdir(parents=True, exist_ok=True)
    return {
        "kind": KIND, "name": config.name, "status": "running", "created": _now(),
        "versions": software_versions(), "git": git, "hardware": describe_hardware(),
        "telemetry": telemetry_source(), "argv": sys.argv, "config": config.raw, "engine_env": engine_env(config),
        **({"sim_profile": sim_profile_record(config)} if config.engine.sim is not None else {}),
        "units": plan_units(config),
    }


RECORDED_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES")
"""Environment that decides what an engine measures: which cores or GPUs it runs on."""


def engine_env(config: TrialConfig) -> dict[str, str]:
    """The :data:`RECORDED_ENV` values the run's engines get (the user's setting, else the default)."""
    from dlfp.engine import cpu_environment

    env = {**cpu_environment(config.engine.kv_cache_gib, config.engine.tensor_parallel_size), **os.environ}
    return {k: env[k] for k in RECORDED_ENV if k in env}


def normalized_config(raw: dict[str, Any]) -> Any:
    """A config as its parser completes it (defaults filled), JSON-round-tripped for comparison."""
    try:
        return json.loads(json.dumps(parse_config(raw).raw))
    except ValueError:
        return raw


def sim_profile_record(config: TrialConfig) -> dict[str, Any]:
    """The cost profile a simulated run uses: its file, checksum and every value in it.

    A profile named by a shipped name can change with the package; the checksum makes
    the run say exactly which numbers produced it, and a resume refuses another version.
    """
    import yaml

    from dlfp.sim.config import SimConfig
    from dlfp.sim.costmodel import PROFILE_DIR, load_profile, profile_file

    name = SimConfig(**(config.engine.sim or {})).profile
    load_profile(name)  # a clear error for a missing or invalid profile, before any engine
    path = profile_file(name)
    shown = f"dlfp/sim/profiles/{path.name} (shipped)" if path.parent == PROFILE_DIR else str(path)
    return {"name": name, "file": shown, "sha256": sha256(path),
            "values": yaml.safe_load(path.read_text(encoding="utf-8"))}


def _missing(manifest: dict[str, Any]) -> list[str]:
    return [f"trial-{u['trial']}/{u['arm']}" for u in manifest["units"] if u["status"] != "complete"]


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


def _run_unit(config: TrialConfig, out: Path, unit: dict[str, Any], requests: list[workload.Request],
              progress: bool) -> dict[str, Any]:
    from tqdm import tqdm

    from dlfp.arm import run_arm

    trial_dir = out / f"trial-{unit['trial']}"
    final = trial_dir / unit["arm"]
    partial = trial_dir / f".{unit['arm']}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)  # not in the manifest as complete: incomplete
    partial.mkdir(parents=True)
    started = time.monotonic()
    label = f"trial {unit['trial']} (seed {unit['seed']}) {unit['arm']:>5}"
    with tqdm(total=len(requests), desc=label, unit="req", disable=not progress, file=sys.stderr) as bar:
        result = run_arm(config.engine_for(unit["arm"]), requests, partial / "steps.jsonl",
                         progress=bar.update, telemetry_interval_s=config.telemetry_interval_s)
    tables = {"requests": result.trace.requests, "tokens": result.trace.tokens,
              "steps": result.steps, "telemetry": result.telemetry}
    for name, df in tables.items():
        write_parquet(df, partial / f"{name}.parquet")
    (partial / "steps.jsonl").unlink(missing_ok=True)  # now in steps.parquet
    os.replace(partial, final)
    lateness = pd.Series(result.trace.lateness_s, dtype=float)
    return {
        **unit, "status": "complete", "finished": _now(), "wall_s": round(time.monotonic() - started, 2),
        "send_lateness_ms": {"p50": float(lateness.quantile(0.5) * 1e3),
                             "p99": float(lateness.quantile(0.99) * 1e3)},
        "files": {f"{name}.parquet": sha256(final / f"{name}.parquet") for name in tables},
    }


def run_trials(config: TrialConfig, out: Path, progress: bool = True, allow_dirty: bool = False) -> dict[str, Any]:
    """Run (or resume) every missing unit of ``config`` into ``out``; returns the manifest.

    Refuses to start unless the code runs depend on is a clean commit, or ``allow_dirty`` (or
    ``DLFP_ALLOW_DIRTY=1``) says otherwise; the manifest's ``git`` entry records either.
    """
    out = Path(out)
    with _exclusive(out):
        manifest = _open_run(config, out, allow_dirty)
        if manifest["status"] == "complete":
            print(f"{out}: already complete, nothing to do", file=sys.stderr)
            return manifest
        manifest.update(status="running", missing=_missing(manifest), resumed=_now())
        write_json_atomic(out / MANIFEST, manifest)
        with _watch_interrupt() as ctrl_c:
            _run_units(config, out, manifest, progress, ctrl_c)
        manifest.update(status="complete", finished=_now(), missing=[])
        for stale in ("error", "interrupted_by"):
            manifest.pop(stale, None)
        write_json_atomic(out / MANIFEST, manifest)
        return manifest


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """Hold the run folder for this process: a second ``dlfp trial`` into it (a resubmitted job
    while the first still runs) is refused instead of writing the same units twice. The lock is
    ``flock`` on a file beside the folder, released by the kernel however this process ends."""
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.dlfp-lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(f"{out} is being written by another dlfp process; wait for it to finish "
                                 "(or stop it), then rerun to resume") from None
        yield


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal: SIGINT (Ctrl-C) or SIGTERM (SLURM at the time limit, and
    ``scancel``; ``kill``). A ``KeyboardInterrupt``, so every cleanup path treats both alike;
    ``exit_code`` is the shell's convention, 128 + the signal number (130, 143)."""

    def __init__(self, signum: int) -> None:
        self.signal = signal.Signals(signum)
        self.exit_code = 128 + int(self.signal)
        super().__init__(self.signal.name)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_S = 1.0
"""How often a stop signal is delivered again until the runner acts on it (see :func:`_watch_interrupt`)."""


class StopSignal:
    """What :func:`_watch_interrupt` saw: the stop signal, if any, and whether the runner is
    already recording the stop (from then on further signals are only noted)."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.stopping = False
        self.redelivered = False


def _on_its_way_out(exc: BaseException | None) -> bool:
    """An :class:`Interrupted` is being handled (directly, or behind the ``CancelledError`` with
    which asyncio unwinds the tasks): cleanup, such as an engine's shutdown, is under way."""
    while exc is not None:
        if isinstance(exc, Interrupted):
            return True
        exc = exc.__context__
    return False


@contextlib.contextmanager
def _watch_interrupt() -> Iterator[StopSignal]:
    """Raise :class:`Interrupted` on SIGINT and SIGTERM until the runner stops, and note the
    signal even when a library then reports it as another error.

    SIGINT reaches the whole process group (and SLURM sends SIGTERM to every process of the
    job): vLLM's engine core dies of it during start-up and the client then raises
    ``RuntimeError("Engine core initialization failed")``, which must still be recorded (and
    reported) as an interruption, not as a failure. vLLM 0.32 also swallows a
    ``KeyboardInterrupt`` raised while its client waits for a starting engine
    (``zmq_socket_ctx`` catches it): measured here, a SIGTERM then went unnoticed and the run
    carried on. So the signal is delivered again every :data:`REDELIVER_S` until the runner
    acts on it, except while the first one's cleanup is under way. A signal the caller
    ignores (SIG_IGN, e.g. SIGINT of a background job) stays ignored; another handler
    installed before ours (e.g. a notebook kernel's) still decides what a SIGINT does.
    """
    stop = StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop  # signal handlers can only be installed from the main thread
        return
    # None: a handler installed outside Python, which could not be restored afterwards.
    previous = {s: h for s in STOP_SIGNALS if (h := signal.getsignal(s)) not in (signal.SIG_IGN, None)}
    done = threading.Event()
    redelivery: list[threading.Thread] = []

    def redeliver(signum: int) -> None:
        while not done.wait(REDELIVER_S) and not stop.stopping:
            stop.redelivered = True
            os.kill(os.getpid(), signum)

    def handler(signum: int, frame: Any) -> None:
        redelivered, stop.redelivered = stop.redelivered, False
        if stop.stopping or (redelivered and _on_its_way_out(sys.exc_info()[1])):
            return  # a repeat must not cut short the cleanup of the first; a second Ctrl-C may
        stop.signal = signal.Signals(signum)
        chained = previous[signum]
        if callable(chained) and chained is not signal.default_int_handler:
            chained(signum, frame)
            return
        if not redelivery:
            redelivery.append(threading.Thread(target=redeliver, args=(signum,), name="dlfp-stop", daemon=True))
            redelivery[0].start()
        raise Interrupted(signum)

    for s in previous:
        signal.signal(s, handler)
    try:
        yield stop
    finally:
        stop.stopping = True
        done.set()
        for thread in redelivery:
            thread.join()
        for s, h in previous.items():
            signal.signal(s, h)


def _design(config: TrialConfig, out: Path, manifest: dict[str, Any], progress: bool) -> TrialConfig:
    """The config the arms run: the requested one with its design's overrides.

    The pre-flight runs once per run folder: its measurement and the derived design are recorded
    in the manifest and reused on resume, so a resumed run keeps its design on any machine. A
    design the checks refuse (and ``design.enforce`` keeps refused) is recorded as
    ``refused_design`` with status ``refused``, and a rerun measures afresh.
    """
    from dlfp.design import derive, refuse, workload_facts
    from dlfp.preflight import run_preflight
    from dlfp.trialconfig import REFERENCE

    if "design" not in manifest:
        facts = workload_facts(config.raw)
        decoders = max(1, round(config.design.rules.decoders))
        sim = config.engine.sim
        source = "measured" if sim is None else f"simulated (cost profile {sim.get('profile', 'a100')})"
        if progress:
            print(f"{out}: pre-flight on the {REFERENCE} engine ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = run_preflight(config.engine_for(REFERENCE), facts, decoders,
                               int(config.workload.get("vocab_size", 32000)), source)
        design = derive(config.design, result.measured, facts, config.raw)
        record = {**design.record(), "enforced": config.design.enforce, "finished": _now(),
                  "wall_s": round(time.monotonic() - started, 2)}
        if design.problems and config.design.enforce:
            manifest.update(status="refused", refused_design=record, stopped=_now())
            write_json_atomic(out / MANIFEST, manifest)
            refuse(design)
        (out / PREFLIGHT_STEPS).parent.mkdir(exist_ok=True)
        write_parquet(result.steps, out / PREFLIGHT_STEPS)
        record["files"] = {PREFLIGHT_STEPS: sha256(out / PREFLIGHT_STEPS)}
        manifest.pop("refused_design", None)
        manifest["design"] = record
        write_json_atomic(out / MANIFEST, manifest)
    return config.with_overrides(manifest["design"]["overrides"])


def _run_units(config: TrialConfig, out: Path, manifest: dict[str, Any], progress: bool,
               stop: StopSignal) -> None:
    """Every missing unit in order; on any exit but success the manifest says what is missing."""
    try:
        config = _design(config, out, manifest, progress)
        for i, unit in enumerate(manifest["units"]):
            if unit["status"] == "complete":
                continue
            requests = _workload_for(config, out, unit["trial"], unit["seed"])
            name = f"trial-{unit['trial']}/workload.parquet"
            manifest.setdefault("workloads", {})[name] = sha256(out / name)
            manifest["units"][i] = _run_unit(config, out, unit, requests, progress)
            manifest["missing"] = _missing(manifest)
            write_json_atomic(out / MANIFEST, manifest)
    except BaseException as exc:
        stop.stopping = True  # signals from here on are only noted: the manifest write must finish
        if manifest["status"] == "refused":
            raise
        # A signal's own exception, or any error that follows it (a library reporting the
        # engine core it killed), is an interruption; a KeyboardInterrupt without our handler
        # (a notebook kernel's, a worker thread) is a SIGINT.
        sig = stop.signal or (signal.SIGINT if isinstance(exc, KeyboardInterrupt) else None)
        manifest.update(status="failed" if sig is None else "interrupted", stopped=_now(),
                        error=f"{type(exc).__name__}: {exc}" if sig is None else None,
                        interrupted_by=None if sig is None else sig.name, missing=_missing(manifest))
        write_json_atomic(out / MANIFEST, manifest)
        if sig is not None and not isinstance(exc, KeyboardInterrupt):
            raise Interrupted(sig) from exc
        raise
