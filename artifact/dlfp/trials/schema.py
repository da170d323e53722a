"""A run's manifest as typed objects, with its schema version: the one reader and writer of ``manifest.json``.

:class:`Manifest` is what a run folder says about itself (versions, hardware, commit, config, the
pre-flight's design, and one :class:`Unit` per arm and trial with its tables' checksums). Every
reader and writer goes through :func:`read_manifest` and :func:`write_manifest`, so a field has one
name, one type and one check. The records that describe the world outside the run (``versions``,
``git``, ``hardware``, ``telemetry``, the design's record, the cost profiles) stay JSON objects:
they are written by the modules that measure them and shown as they are.

Schema versions (``schema``): **1**, the manifests written before the field existed (every run
committed before it), read as they are; **2**, the same fields, with the version written. A manifest
of a later version than this code knows is refused with the version to install, never half read.

The checks are the ones readers rely on: a field of the wrong type, a unit whose arm would reach out
of the folder, a unit lost or doubled against the config's plan, and a file name no run writes are
refused by name, with how to recover; an edited identity (:data:`IDENTITY_FIELDS`) is refused by
:func:`identity_verified`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dlfp.paths import write_json_atomic
from dlfp.trials.runfolder import KIND, MANIFEST, PREFLIGHT_STEPS, TABLES, RunFolderError

SCHEMA = 2
"""The manifest schema this code writes (module docstring); it reads every version up to it."""

IDENTITY_FIELDS = ("versions", "hardware", "git", "config")
"""What a manifest says a run *is*: which software, which machine, which commit, which config. The tables'
checksums cannot vouch for these, so they get their own (:func:`identity_digest`): an edit of one (a CPU
run's ``versions.vllm`` turned into a CUDA build's) no longer passes unseen."""
IDENTITY = "identity_sha256"

Record = dict[str, Any]
"""A JSON object recorded as it was measured (versions, hardware, git, a design's record)."""


@dataclass
class Unit:
    """One arm of one trial: where it stands and, once complete, its tables' checksums."""

    trial: int
    arm: str
    status: str = "missing"
    seed: int | None = None
    finished: str | None = None
    wall_s: float | None = None
    send_lateness_ms: dict[str, float] | None = None
    """The client's lateness in sending the unit's requests (``p50``, ``p99``)."""
    files: dict[str, str] = field(default_factory=dict)
    """``<table>.parquet`` -> sha256, for a complete unit."""
    ran: Record | None = None
    """What the engine reports it ran (:data:`dlfp.harness.result.RAN`)."""
    margins: dict[str, float | None] | None = None
    """A capacity sweep's unit: per SLO level judging it, how far its worse P99 is over the SLO (a share; None:
    nothing to judge), recorded as it finishes (:mod:`dlfp.trials.stopping`)."""
    skipped: str | None = None
    """Why a ``skipped`` unit did not run: its sweep stopped at a lower load (:mod:`dlfp.trials.stopping`)."""
    extra: Record = field(default_factory=dict)
    """Fields this code does not know, written back unchanged (as :attr:`Manifest.extra`)."""

    @property
    def complete(self) -> bool:
        """Run, its tables written."""
        return self.status == "complete"

    @property
    def settled(self) -> bool:
        """Nothing left to do: complete, or skipped by design (a skipped unit has no tables)."""
        return self.status in ("complete", "skipped")

    @property
    def label(self) -> str:
        """``trial-<k>/<arm>``, the unit's folder in the run."""
        return f"trial-{self.trial}/{self.arm}"

    def to_json(self) -> Record:
        out: Record = {"trial": self.trial, "seed": self.seed, "arm": self.arm, "status": self.status}
        if self.seed is None:
            del out["seed"]
        for key in ("finished", "wall_s", "send_lateness_ms", "files", "ran", "margins", "skipped"):
            value = getattr(self, key)
            if value is not None and (value or key != "files"):
                out[key] = value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, raw: Record) -> Unit:
        """A unit record already checked by :func:`read_manifest`'s checks."""
        known = {k: v for k, v in raw.items() if k in _UNIT_FIELDS}
        return cls(**known, extra={k: v for k, v in raw.items() if k not in _UNIT_FIELDS})


_OPTIONAL: dict[str, type] = {"design": dict, "workloads": dict, "missing": list, "argv": list, "versions": dict,
                              "hardware": dict, "git": dict, "sim_profile": dict, "sim_engine": dict,
                              "engine_env": dict, "telemetry": str, IDENTITY: str, "name": str, "created": str,
                              "resumed": str, "finished": str, "stopped": str, "error": str,
                              "interrupted_by": str, "refused_design": dict}
"""Manifest fields readers use when present (null: absent), and their type."""

DESIGN_FIELDS = {"overrides": dict, "rules": dict, "measured": dict, "predicted": dict, "problems": list,
                 "files": dict}


@dataclass(kw_only=True)
class Manifest:
    """A run folder's ``manifest.json`` (module docstring). Field order is the order written."""

    name: str | None = None
    status: str
    """``running``, ``complete``, ``failed``, ``interrupted`` or ``refused``."""
    created: str | None = None
    versions: Record | None = None
    git: Record | None = None
    hardware: Record | None = None
    telemetry: str | None = None
    """Which telemetry the units sampled (:func:`dlfp.harness.telemetry.telemetry_source`)."""
    argv: list[str] | None = None
    config: Record
    """The config as the user gave it (:func:`dlfp.trials.config.run_config` parses it with the design's overrides)."""
    engine_env: dict[str, str] | None = None
    sim_profile: Record | None = None
    """The device cost profile a simulated run used: name, file, checksum, values."""
    sim_engine: Record | None = None
    """The engine-core cost profile a virtual-time run charged."""
    units: list[Unit]
    missing: list[str] | None = None
    resumed: str | None = None
    design: Record | None = None
    """The pre-flight's measurement and the design derived from it (:meth:`dlfp.trials.design.Design.record`)."""
    refused_design: Record | None = None
    workloads: dict[str, str] | None = None
    """``trial-<k>/workload.parquet`` -> sha256."""
    finished: str | None = None
    stopped: str | None = None
    error: str | None = None
    interrupted_by: str | None = None
    identity_sha256: str | None = None
    schema: int = SCHEMA
    """The version this manifest was read as (module docstring); written as :data:`SCHEMA`."""
    extra: Record = field(default_factory=dict)
    """Fields this code does not know, kept so that a resume rewrites them unchanged."""
    device_unverified: str | None = None
    """Set in memory by :func:`dlfp.analysis.runs.load_run` only, never written: why a GPU claim is unverified."""

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def complete_units(self) -> list[Unit]:
        return [u for u in self.units if u.complete]

    def missing_units(self) -> list[str]:
        """Units still to run (a skipped unit is not missing: its sweep stopped below it)."""
        return [u.label for u in self.units if not u.settled]

    def unit(self, trial: int, arm: str) -> Unit:
        for u in self.units:
            if u.trial == trial and u.arm == arm:
                return u
        raise KeyError(f"trial-{trial}/{arm}")

    def to_json(self) -> Record:
        """The manifest as written: :data:`SCHEMA`, then each set field in order, then :attr:`extra`."""
        out: Record = {"kind": KIND, "schema": SCHEMA}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("schema", "extra", "device_unverified") or value is None:
                continue
            out[f.name] = [u.to_json() for u in value] if f.name == "units" else value
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, raw: Any, path: Path) -> Manifest:
        """A manifest read from ``path``, checked (module docstring); any version up to :data:`SCHEMA`."""
        if not isinstance(raw, dict) or raw.get("kind") != KIND:
            kind = raw.get("kind") if isinstance(raw, dict) else type(raw).__name__
            raise RunFolderError(f"{path} is not a dlfp paired-trial manifest (kind {kind!r}, expected {KIND!r})")
        version = raw.get("schema", 1)
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA:
            raise RunFolderError(f"{path}: manifest schema {version!r} is not one this dlfp reads (1 to {SCHEMA}); "
                                 "a later version was written by a newer dlfp: install it to read this run")
        for key, kind_ in (("units", list), ("config", dict), ("status", str)):
            if not isinstance(raw.get(key), kind_):
                raise RunFolderError(f"{path}: field {key!r} is missing or not a {kind_.__name__}; the manifest "
                                     "was edited or truncated: restore it from version control")
        _check_fields(path, raw)
        known = {f.name for f in fields(cls)} - {"units", "schema", "extra", "device_unverified"}
        values = {k: v for k, v in raw.items() if k in known}
        extra = {k: v for k, v in raw.items() if k not in known | {"kind", "schema", "units", "device_unverified"}}
        units = [Unit.from_json(u) for u in raw["units"]]
        return cls(**values, units=units, schema=version, extra=extra)


_UNIT_FIELDS = {f.name for f in fields(Unit)} - {"extra"}


def _bad(path: Path, field_: str, what: str) -> RunFolderError:
    return RunFolderError(f"{path}: field {field_!r} {what}; the manifest was edited or truncated: restore it "
                          "from version control")


def _check_fields(path: Path, manifest: Record) -> None:
    """Refuse a manifest whose optional fields, units or design record readers would misread."""
    design = manifest.get("design") or {}
    for where, kinds, record in (("", _OPTIONAL, manifest), ("design.", DESIGN_FIELDS, design)):
        for key, kind_ in kinds.items():
            value = record.get(key) if isinstance(record, dict) else None
            if (value is not None or (where and key in record)) and not isinstance(value, kind_):
                raise _bad(path, where + key, f"is {value!r}, not a {kind_.__name__}")
    for i, u in enumerate(manifest["units"]):
        if not _unit_ok(u):
            raise _bad(path, f"units[{i}]", f"is {u!r}, not a {{trial, arm, status, files}} record")
    _check_plan(path, manifest)
    if "rules" in design:
        from dlfp.trials.design import Rules

        try:
            Rules(**design["rules"])
        except (TypeError, ValueError) as exc:
            raise _bad(path, "design.rules", f"is invalid ({exc})") from None
    if not all(isinstance(v, str) for v in (manifest.get("workloads") or {}).values()):
        raise _bad(path, "workloads", "holds a checksum that is not a string")
    if not all(isinstance(v, str) for v in (design.get("files") or {}).values()):
        raise _bad(path, "design.files", "holds a checksum that is not a string")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unit_ok(u: Any) -> bool:
    """A unit record readers can use: a trial number, an arm that names a folder inside the run, a status,
    string checksums, and the optional fields of their types."""
    if not isinstance(u, dict):
        return False
    trial, arm, files = u.get("trial"), u.get("arm"), u.get("files", {})
    return (isinstance(trial, int) and not isinstance(trial, bool) and trial >= 0
            and isinstance(arm, str) and arm == Path(arm).name and arm not in ("", ".", "..")
            and isinstance(u.get("status"), str)
            and isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
            and (u.get("seed") is None or _is_int(u["seed"]))
            and all(u.get(k) is None or isinstance(u[k], t) for k, t in (
                ("finished", str), ("wall_s", (int, float)), ("send_lateness_ms", dict), ("ran", dict),
                ("margins", dict), ("skipped", str)))
            and all(m is None or (isinstance(m, (int, float)) and not isinstance(m, bool))
                    for m in (u.get("margins") or {}).values()))


def _check_plan(path: Path, manifest: Record) -> None:
    """Each arm of each of the config's trials once (an arm with its own ``trials``, of that many): a unit lost
    or doubled would drop a trial silently."""
    got = [(u["trial"], u["arm"]) for u in manifest["units"]]
    trials = manifest["config"].get("trials")
    arms = [a for a in manifest["config"].get("arms") or [] if isinstance(a, dict)]
    own = {a["name"]: a.get("trials") for a in arms if isinstance(a.get("name"), str)}
    # the config's arms where it names each by a text (an edited name, a list say, cannot name a unit's folder)
    names = set(own) if arms and all(isinstance(a.get("name"), str) for a in arms) else {a for _, a in got}
    planned = set(got) if not isinstance(trials, int) else {
        (k, a) for k in range(trials) for a in names if not isinstance(limit := own.get(a), int) or k < limit}
    if len(set(got)) != len(got) or set(got) != planned:
        doubled = sorted({u for u in got if got.count(u) > 1})
        odd = [f"{what} {units[:5]}{' ...' if len(units) > 5 else ''}" for what, units in (
            ("missing", sorted(planned - set(got))), ("not planned", sorted(set(got) - planned)), ("twice", doubled))
            if units]
        raise _bad(path, "units", f"lists {len(got)} units, not each arm of each of the config's {trials!r} trials "
                                  f"once (an arm with its own 'trials', of that many): {'; '.join(odd)}")


def read_manifest(run_dir: Path) -> Manifest:
    """The manifest of ``run_dir``, refusing a missing, corrupt, foreign or later-schema one by name."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise RunFolderError(f"{run_dir} is not a run folder: it has no {MANIFEST}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{path} is corrupt ({exc}); restore it from version control or rerun the trial "
                             "into a new folder") from None
    return Manifest.from_json(raw, path)


def identity_digest(manifest: Manifest) -> str:
    """SHA-256 of the manifest's :data:`IDENTITY_FIELDS`, as canonical JSON (sorted keys, the writer's
    rendering of non-JSON values), so the digest of a manifest read back equals the one it was written with."""
    identity = {k: getattr(manifest, k) for k in IDENTITY_FIELDS}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    """Write the run's manifest atomically, its identity checksum recomputed (the run's own writer is the
    one that may change its identity: a resume records its commit)."""
    manifest.identity_sha256 = identity_digest(manifest)
    write_json_atomic(Path(run_dir) / MANIFEST, manifest.to_json())


def identity_verified(path: Path, manifest: Manifest) -> bool:
    """Whether the manifest's identity is vouched for by its checksum: True where it matches, False where
    the run predates the checksum (none recorded); an identity that does not match is refused."""
    recorded = manifest.identity_sha256
    if recorded is None:
        return False
    if recorded != identity_digest(manifest):
        raise RunFolderError(
            f"{Path(path) / MANIFEST}: its identity ({', '.join(IDENTITY_FIELDS)}) does not match its checksum "
            f"{IDENTITY}: the manifest was edited after the run; restore it from version control")
    return True


def check_status(run_dir: Path, manifest: Manifest, allow_partial: bool) -> None:
    """Refuse an unfinished run unless the caller asked for its finished arms explicitly."""
    if manifest.complete and any(not u.settled for u in manifest.units):
        raise RunFolderError(f"{Path(run_dir) / MANIFEST}: field 'status' says complete, but some of its units do "
                             "not; the manifest was edited: restore it from version control")
    if manifest.complete or allow_partial:
        return
    missing = manifest.missing or manifest.missing_units()
    argv = " ".join(map(str, manifest.argv or []))
    raise RunFolderError(
        f"{run_dir} is a {manifest.status} run (missing: {', '.join(map(str, missing)) or 'none'}); rerun the "
        f"command that made it to finish it (manifest argv: {argv or 'unknown'}), "
        "or read its finished arms on purpose (allow_partial=True, `dlfp analyze --partial`): they are then "
        "labelled partial")


def listed_files(run_dir: Path, manifest: Manifest) -> list[tuple[Path, str | None]]:
    """Every file of the run folder its manifest vouches for, with its recorded sha256: finished
    arms' tables, workloads and the pre-flight's step records."""
    run_dir = Path(run_dir)
    files: list[tuple[Path, str | None]] = []
    for u in manifest.complete_units():
        for name, digest in u.files.items():
            _expected_name(run_dir, name, {f"{t}.parquet" for t in TABLES})
            files.append((run_dir / u.label / name, digest))
    trials = {u.trial for u in manifest.units}
    for name, digest in (manifest.workloads or {}).items():
        _expected_name(run_dir, name, {f"trial-{k}/workload.parquet" for k in trials})
        files.append((run_dir / name, digest))
    for name, digest in ((manifest.design or {}).get("files") or {}).items():
        _expected_name(run_dir, name, {PREFLIGHT_STEPS})
        files.append((run_dir / name, digest))
    return files


def _expected_name(run_dir: Path, name: Any, allowed: set[str]) -> None:
    """A file name in a manifest must be one a run writes: an edit cannot point a reader elsewhere."""
    if name not in allowed:
        raise RunFolderError(f"{Path(run_dir) / MANIFEST} lists a file {name!r} that no run writes (expected one of "
                             f"{sorted(allowed)}); the manifest was edited: restore it")
