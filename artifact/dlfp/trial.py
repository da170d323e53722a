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
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp import __version__, workload
from dlfp.runfolder import KIND, MANIFEST, RunFolderError, sha256, write_json_atomic, write_parquet
from dlfp.trialconfig import ARMS, TrialConfig


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


def git_state() -> dict[str, Any]:
    """The artifact's commit and whether the working tree had changes."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                                  check=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def plan_units(config: TrialConfig) -> list[dict[str, Any]]:
    """Trial order and arm order: arms alternate across trials so order effects cancel."""
    units = []
    for k, seed in enumerate(config.seeds):
        arms = ARMS if k % 2 == 0 else tuple(reversed(ARMS))
        units += [{"trial": k, "seed": seed, "arm": arm, "status": "missing"} for arm in arms]
    return units


def _open_run(config: TrialConfig, out: Path) -> dict[str, Any]:
    """A fresh manifest, or the existing one when resuming the same config."""
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunFolderError(f"{manifest_path} is corrupt ({exc}); move it away first") from None
        if manifest.get("config") != json.loads(json.dumps(config.raw)):
            raise RunFolderError(
                f"{out} holds a run of a different config; refusing to overwrite it "
                "(choose another --out, or delete the folder yourself)")
        recorded = (manifest.get("sim_profile") or {}).get("sha256")
        if recorded is not None and recorded != sim_profile_record(config)["sha256"]:
            raise RunFolderError(f"{out} was simulated with another version of cost profile "
                                 f"{config.engine.sim['profile']!r}; refusing to mix them in one run")
        return manifest
    if out.exists() and any(out.iterdir()):
        raise RunFolderError(f"{out} exists, is not empty and has no {MANIFEST}: refusing to write there")
    from dlfp.telemetry import describe_hardware, telemetry_source

    out.mkdir(parents=True, exist_ok=True)
    return {
        "kind": KIND, "name": config.name, "status": "running", "created": _now(),
        "versions": software_versions(), "git": git_state(), "hardware": describe_hardware(),
        "telemetry": telemetry_source(), "argv": sys.argv, "config": config.raw,
        **({"sim_profile": sim_profile_record(config)} if config.engine.sim is not None else {}),
        "units": plan_units(config),
    }


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


def run_trials(config: TrialConfig, out: Path, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) every missing unit of ``config`` into ``out``; returns the manifest."""
    out = Path(out)
    manifest = _open_run(config, out)
    if manifest["status"] == "complete":
        print(f"{out}: already complete, nothing to do", file=sys.stderr)
        return manifest
    manifest.update(status="running", missing=_missing(manifest), resumed=_now())
    write_json_atomic(out / MANIFEST, manifest)
    with _watch_interrupt() as ctrl_c:
        _run_units(config, out, manifest, progress, ctrl_c)
    manifest["workloads"] = {f"trial-{k}/workload.parquet": sha256(out / f"trial-{k}" / "workload.parquet")
                             for k in range(len(config.seeds))}
    manifest.update(status="complete", finished=_now(), missing=[])
    manifest.pop("error", None)
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


@contextlib.contextmanager
def _watch_interrupt() -> Iterator[list[bool]]:
    """Note a Ctrl-C even when a library reports it as another error.

    SIGINT reaches the whole process group: vLLM's engine core dies of it during start-up
    and the client then raises ``RuntimeError("Engine core initialization failed")``, which
    must still be recorded (and reported) as an interruption, not as a failure.
    """
    seen = [False]
    if threading.current_thread() is not threading.main_thread():
        yield seen  # signal handlers can only be installed from the main thread
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        seen[0] = True
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_units(config: TrialConfig, out: Path, manifest: dict[str, Any], progress: bool, ctrl_c: list[bool]) -> None:
    """Every missing unit in order; on any exit but success the manifest says what is missing."""
    try:
        for i, unit in enumerate(manifest["units"]):
            if unit["status"] == "complete":
                continue
            requests = _workload_for(config, out, unit["trial"], unit["seed"])
            manifest["units"][i] = _run_unit(config, out, unit, requests, progress)
            manifest["missing"] = _missing(manifest)
            write_json_atomic(out / MANIFEST, manifest)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or ctrl_c[0]
        manifest.update(status="interrupted" if interrupted else "failed", stopped=_now(),
                        error=None if interrupted else f"{type(exc).__name__}: {exc}",
                        missing=_missing(manifest))
        write_json_atomic(out / MANIFEST, manifest)
        if interrupted and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        raise
