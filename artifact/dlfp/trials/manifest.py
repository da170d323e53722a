"""A run's manifest: what it records (versions, hardware, config, units) and how a folder is opened.

A folder holding another config, or a modeled run whose profile changed, is refused before any
work; one writer at a time holds a folder's lock (:func:`exclusive`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import platform
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import pandas as pd

from dlfp import __version__
from dlfp.paths import sha256
from dlfp.trials.config import TrialConfig, parse_config
from dlfp.trials.provenance import resume_record, start_record
from dlfp.trials.runfolder import MANIFEST, RunFolderError
from dlfp.trials.schema import Manifest, Unit, identity_verified, read_manifest


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, Any]:
    """Versions that decide what a run measured."""
    from dlfp.vllm.version import vllm_version

    return {"dlfp": __version__, "vllm": vllm_version(), "torch": dist_version("torch"),
            "python": platform.python_version(), "pandas": pd.__version__}


def plan_units(config: TrialConfig) -> list[Unit]:
    """Trial order and arm order: trial ``k`` runs the arms rotated by ``k`` places, so each arm
    runs in each position equally often over ``len(arms)`` trials and order effects cancel
    (two arms: they alternate). A trial runs only the arms whose own ``trials`` reach it."""
    units = []
    for k, seed in enumerate(config.seeds):
        names = config.arms_in(k)
        r = k % len(names)
        units += [Unit(trial=k, seed=seed, arm=arm) for arm in names[r:] + names[:r]]
    return units


def open_run(config: TrialConfig, out: Path, allow_dirty: bool = False) -> Manifest:
    """A fresh manifest, or the existing one when resuming the same config (from the same clean commit,
    unless ``allow_dirty``: :mod:`dlfp.trials.provenance`)."""
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        manifest = read_manifest(out)
        identity_verified(out, manifest)  # a resume re-signs the manifest: an edited identity stops here
        if normalized_config(manifest.config) != normalized_config(config.raw):
            raise RunFolderError(
                f"{out} holds a run of a different config; refusing to overwrite it "
                "(choose another --out, or delete the folder yourself)")
        for held, record, what in ((manifest.sim_profile, sim_profile_record, "cost profile"),
                                   (manifest.sim_engine, sim_engine_record, "engine-core cost profile")):
            recorded = (held or {}).get("sha256")
            if held is not None and recorded is not None and recorded != record(config)["sha256"]:
                raise RunFolderError(f"{out} was simulated with another version of {what} "
                                     f"{held.get('name')!r}; refusing to mix them in one run")
        if not manifest.complete:  # nothing runs for a complete one: nothing to trace
            manifest.git = resume_record(manifest.git, allow_dirty)
            if config.engine.sim is None and manifest.hardware:  # a manifest without one cannot tell
                _same_machine(out, manifest.hardware)
        return manifest
    if out.exists() and any(out.iterdir()):
        raise RunFolderError(f"{out} exists, is not empty and has no {MANIFEST}: refusing to write there")
    from dlfp.harness.telemetry import describe_hardware, telemetry_source

    git = start_record(allow_dirty)  # refuses a dirty tree before anything is written
    out.mkdir(parents=True, exist_ok=True)
    return Manifest(
        name=config.name, status="running", created=now(), versions=software_versions(), git=git,
        hardware=describe_hardware(), telemetry=telemetry_source(), argv=list(sys.argv), config=config.raw,
        engine_env=engine_env(config),
        sim_profile=sim_profile_record(config) if config.engine.sim is not None else None,
        sim_engine=sim_engine_record(config) if config.engine.virtual else None,
        units=plan_units(config))


def measuring_machine(hardware: Mapping[str, Any]) -> dict[str, Any]:
    """What of a machine (``describe_hardware``) decides a measured run's numbers: its GPU models where
    it has GPUs, else its CPU model and logical cores. Host names, memory and how many GPUs a node has
    do not: a cluster job resumed on another node with the same GPUs measures the same thing."""
    names = sorted({str(g.get("name")) for g in hardware.get("gpus") or []})
    if names:
        return {"gpus": names}
    return {"cpu_model": hardware.get("cpu_model"), "cpu_logical_cores": hardware.get("cpu_logical_cores")}


def _same_machine(out: Path, recorded: Mapping[str, Any]) -> None:
    """Refuse to resume a measured run on another kind of machine: its finished units were measured on
    the one that started it, and units of two machines in one run would be compared as one machine's
    (a long run split across working sessions may land on another CPU)."""
    from dlfp.harness.telemetry import describe_hardware

    then, here = measuring_machine(recorded), measuring_machine(describe_hardware())
    if then != here:
        raise RunFolderError(
            f"{out} was started on {then} and this machine is {here}: resuming here would mix two machines' "
            "measurements in one run. Resume it on the kind of machine that started it, or run into a new folder")


RECORDED_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
"""Environment that decides what an engine measures: which cores or GPUs it runs on, and how CUDA numbers them."""


def engine_env(config: TrialConfig) -> dict[str, str]:
    """The :data:`RECORDED_ENV` values the run's engines get (the user's setting, else the default)."""
    from dlfp.harness.engine import cpu_environment

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
    from dlfp.sim.config import SimConfig
    from dlfp.sim.costmodel import load_profile, profile_file

    name = SimConfig(**(config.engine.sim or {})).profile
    load_profile(name)  # a clear error for a missing or invalid profile, before any engine
    return _file_record(name, profile_file(name))


def sim_engine_record(config: TrialConfig) -> dict[str, Any]:
    """The engine-core cost profile a virtual-time run charges (:mod:`dlfp.sim.virtual`), recorded as the
    device profile is: file, checksum, values."""
    from dlfp.sim.config import SimConfig
    from dlfp.sim.costmodel import engine_file, load_engine_host

    name = SimConfig(**(config.engine.sim or {})).engine
    load_engine_host(name)
    return _file_record(name, engine_file(name))


def _file_record(name: str, path: Path) -> dict[str, Any]:
    """A profile file as a manifest records it: its name, where it is (a shipped one says so), its checksum
    and its values."""
    import yaml

    from dlfp.sim.costmodel import PROFILE_DIR

    shipped = path.resolve().is_relative_to(PROFILE_DIR.resolve())
    shown = f"dlfp/sim/{path.resolve().relative_to(PROFILE_DIR.parent.resolve()).as_posix()} (shipped)" if shipped \
        else str(path)
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {"name": name, "file": shown, "sha256": sha256(path), "values": values}


NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
"""``flock`` errors of a filesystem that does not implement it (Lustre mounted without ``-o flock``)."""


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
    """Hold the run folder for this process: a second ``dlfp trial`` into it (a resubmitted job
    while the first still runs) is refused instead of writing the same units twice. The lock is
    ``flock`` on a file beside the folder, released by the kernel however this process ends; on a
    filesystem without ``flock`` a POSIX record lock (``lockf``) on the same file, which network
    filesystems implement more often (and which excludes other processes, not this one's)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.parent / f".{out.name}.dlfp-lock"
    with open(lock, "a+") as fh:
        _lock(fh, out, lock)
        yield


def _lock(fh: IO[str], out: Path, lock: Path) -> None:
    """Take ``lock`` (open as ``fh``) for ``out`` without waiting: ``flock``, else ``lockf``."""
    import fcntl

    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        raise _busy(out) from None
    except OSError as exc:
        if exc.errno not in NO_FLOCK:
            raise
    try:
        fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):  # lockf's two answers for a lock held elsewhere
            raise _busy(out) from None
        raise RunFolderError(
            f"cannot lock {lock}: its filesystem supports neither flock nor POSIX locks ({exc.strerror}). On "
            "Lustre, mount it with -o flock (ask the administrators), or put --out/--runs on a filesystem with "
            "locks: without one, two jobs could write the same run folder") from None


def _busy(out: Path) -> RunFolderError:
    return RunFolderError(f"{out} is being written by another dlfp process; wait for it to finish "
                          "(or stop it), then rerun to resume")
