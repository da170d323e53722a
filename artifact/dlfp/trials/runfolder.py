"""Run folders on disk: atomic writes, checksums, and verified reading.

Everything that writes or reads ``data/runs/<id>/`` goes through here, below the trial
runner, the analysis and the simulator (which all need it and must not import each other
for it). Writers replace files in one step, so a crash never leaves half a file. Readers
verify before they trust: the manifest's kind and status, every table's sha256 against the
manifest, and every table's columns and types, so a hand-edited, truncated, partial or
foreign run is refused with a message naming the file and how to recover, never read into a
wrong number.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dlfp.paths import sha256, write_json_atomic

MANIFEST = "manifest.json"


def engine_log(run_dir: Path) -> Path:
    """Where the engines of a run write their own output (vLLM's and PyTorch's notices and warnings):
    ``<run folder>.engine.log``, beside the folder like its lock file, not in it.

    The folder holds exactly what its manifest vouches for, so copying, checksumming or sizing it
    (the reproducibility appendix) gives the same answer on every machine; the log differs from one
    execution to the next, is never read back, and ``.gitignore`` keeps it out of commits.
    """
    run_dir = Path(run_dir)
    run_dir = run_dir if run_dir.name else run_dir.resolve()
    return run_dir.with_name(f"{run_dir.name}.engine.log")


def engine_step_log(run_dir: Path) -> Path:
    """The step log of the engine in flight (``.<run folder>.steps.jsonl``, beside the folder like the
    engine log): one file for every unit an engine runs, split into each unit's ``steps.parquet`` as
    it finishes, and removed when the engine is done; a killed run leaves it for the next to replace."""
    run_dir = Path(run_dir)
    run_dir = run_dir if run_dir.name else run_dir.resolve()
    return run_dir.with_name(f".{run_dir.name}.steps.jsonl")


KIND = "dlfp-paired-trials"


TABLES = ("requests", "tokens", "steps", "telemetry")


SCHEMAS: dict[str, dict[str, str]] = {
    "requests": {"request_id": "string", "arrival_s": "float", "send_s": "float", "first_token_s": "float",
                 "finish_s": "float", "prompt_len": "int", "output_len_requested": "int", "output_len": "int",
                 "status": "string"},
    "tokens": {"request_id": "string", "index": "int", "t_s": "float"},
    "steps": {"step": "int", "schedule_t": "float", "complete_t": "float", "prefill_tokens": "int",
              "decode_reqs": "int"},
    "telemetry": {"t_s": "float", "source": "string", "metric": "string", "value": "float"},
}
"""Columns every reader relies on, with their kind; writers may add more columns."""

OPTIONAL_COLUMNS: dict[str, dict[str, str]] = {
    "requests": {"output_digest": "string"},
    "tokens": {"token_id": "int"},
}
"""Columns a table has when its run recorded them (each request's output digest since the compact
token table; token ids unless the config's ``token_ids`` is off), checked like the required ones."""

TOKEN_TICKS_PER_S = 1_000_000
"""``tokens.parquet`` stores each token's client time as integer microseconds (``t_us``), which the
client's stamps are rounded to (:func:`dlfp.harness.driver.stamp`), and its integers as int32. On a
capacity unit of 72,620 tokens a row took 13.0 bytes as float seconds and int64 ids, 4.2 stored so
and 1.4 without the ids (``token_ids: false``; random ids hardly compress). Readers see ``t_s``
either way (older runs stored it)."""


IDENTITY_FIELDS = ("versions", "hardware", "git", "config")
"""What a manifest says a run *is*: which software, which machine, which commit, which config. The tables'
checksums cannot vouch for these, so they get their own (:func:`identity_digest`): an edit of one (a CPU
run's ``versions.vllm`` turned into a CUDA build's) no longer passes unseen."""
IDENTITY = "identity_sha256"

OPTIONAL_FIELDS = {"design": dict, "workloads": dict, "missing": list, "argv": list, "versions": dict,
                   "hardware": dict, "git": dict, "sim_profile": dict, "sim_engine": dict, "engine_env": dict,
                   IDENTITY: str}
"""Manifest fields readers use when present (null: absent), and their type."""


def identity_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest's :data:`IDENTITY_FIELDS`, as canonical JSON (sorted keys, the writer's
    rendering of non-JSON values), so the digest of a manifest read back equals the one it was written with."""
    identity = {k: manifest.get(k) for k in IDENTITY_FIELDS}
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write the run's manifest atomically, its identity checksum recomputed (the run's own writer is the
    one that may change its identity: a resume records its commit)."""
    manifest[IDENTITY] = identity_digest(manifest)
    write_json_atomic(Path(run_dir) / MANIFEST, manifest)


def identity_verified(path: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether the manifest's identity is vouched for by its checksum: True where it matches, False where
    the run predates the checksum (none recorded); an identity that does not match is refused."""
    recorded = manifest.get(IDENTITY)
    if recorded is None:
        return False
    if recorded != identity_digest(manifest):
        raise RunFolderError(
            f"{Path(path) / MANIFEST}: its identity ({', '.join(IDENTITY_FIELDS)}) does not match its checksum "
            f"{IDENTITY}: the manifest was edited after the run; restore it from version control")
    return True


DESIGN_FIELDS = {"overrides": dict, "rules": dict, "measured": dict, "predicted": dict, "problems": list,
                 "files": dict}


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: it would lose, mix or misread data."""


def stored(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """A run table as it is written: a token table's times as integer microseconds and its integers as
    int32 (what :func:`read_table` turns back, exactly, into the frame the metrics read). Times that
    are not whole microseconds are refused rather than rounded: ``first_token_s`` would no longer be
    its first token's ``t_s``."""
    if table != "tokens" or "t_s" not in df.columns:
        return df
    t_s = df["t_s"].to_numpy(dtype=float)
    ticks = np.rint(t_s * TOKEN_TICKS_PER_S).astype(np.int64)
    if not np.array_equal(ticks / TOKEN_TICKS_PER_S, t_s):  # it would not read back as it was written
        raise ValueError("tokens: t_s holds times that are not whole microseconds; allowed: the client's "
                         "stamps (dlfp.harness.driver.stamp)")
    out = df.drop(columns="t_s").astype({c: "int32" for c in ("index", "token_id") if c in df.columns})
    out.insert(list(df.columns).index("t_s"), "t_us", ticks)
    return out


def _canonical(df: pd.DataFrame, table: str, where: Path) -> pd.DataFrame:
    """:func:`stored`'s inverse (its int32 columns stay so); a table stored before it came is returned
    as it was."""
    if table != "tokens" or "t_us" not in df.columns or "t_s" in df.columns:
        return df
    if not _kind_ok(df["t_us"], "int"):
        raise RunFolderError(f"{where}: column 't_us' holds {df['t_us'].dtype} values, expected int")
    out = df.drop(columns="t_us")
    out.insert(list(df.columns).index("t_us"), "t_s", df["t_us"].to_numpy(dtype=np.int64) / TOKEN_TICKS_PER_S)
    return out


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """One table (zstd), replaced in one step like :func:`write_text_atomic`. Only text columns are
    dictionary-encoded: on numbers zstd does better alone (see :data:`TOKEN_TICKS_PER_S`)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
        pq.write_table(table, tmp, compression="zstd", use_dictionary=text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The manifest of ``run_dir``, refusing a missing, corrupt or foreign one by name."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise RunFolderError(f"{run_dir} is not a run folder: it has no {MANIFEST}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"{path} is corrupt ({exc}); restore it from version control or rerun the trial "
                             "into a new folder") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        kind = manifest.get("kind") if isinstance(manifest, dict) else type(manifest).__name__
        raise RunFolderError(f"{path} is not a dlfp paired-trial manifest (kind {kind!r}, expected {KIND!r})")
    for key, kind_ in (("units", list), ("config", dict), ("status", str)):
        if not isinstance(manifest.get(key), kind_):
            raise RunFolderError(f"{path}: field {key!r} is missing or not a {kind_.__name__}; the manifest "
                                 "was edited or truncated: restore it from version control")
    _check_fields(path, manifest)
    return manifest


def _check_fields(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse a manifest whose optional fields, units or design record readers would misread."""
    def bad(field: str, what: str) -> RunFolderError:
        return RunFolderError(f"{path}: field {field!r} {what}; the manifest was edited or truncated: restore it "
                              "from version control")

    design = manifest.get("design") or {}
    for where, fields, record in (("", OPTIONAL_FIELDS, manifest), ("design.", DESIGN_FIELDS, design)):
        for key, kind_ in fields.items():
            value = record.get(key) if isinstance(record, dict) else None
            if (value is not None or (where and key in record)) and not isinstance(value, kind_):
                raise bad(where + key, f"is {value!r}, not a {kind_.__name__}")
    for i, u in enumerate(manifest["units"]):
        trial, arm, files = (u.get("trial"), u.get("arm"), u.get("files", {})) if isinstance(u, dict) else (0, 0, 0)
        if not (isinstance(trial, int) and not isinstance(trial, bool) and trial >= 0 and isinstance(arm, str)
                and arm == Path(arm).name and arm not in ("", ".", "..") and isinstance(u.get("status"), str)
                and isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
            raise bad(f"units[{i}]", f"is {u!r}, not a {{trial, arm, status, files}} record")
    got = [(u["trial"], u["arm"]) for u in manifest["units"]]
    trials = manifest["config"].get("trials")
    own = {a.get("name"): a.get("trials") for a in manifest["config"].get("arms") or [] if isinstance(a, dict)}
    names = set(own) if own and None not in own else {a for _, a in got}  # the config's arms, where it names them
    planned = set(got) if not isinstance(trials, int) else {
        (k, a) for k in range(trials) for a in names if not isinstance(limit := own.get(a), int) or k < limit}
    if len(set(got)) != len(got) or set(got) != planned:  # a unit lost or doubled would drop a trial silently
        doubled = sorted({u for u in got if got.count(u) > 1})
        odd = [f"{what} {units[:5]}{' ...' if len(units) > 5 else ''}" for what, units in (
            ("missing", sorted(planned - set(got))), ("not planned", sorted(set(got) - planned)), ("twice", doubled))
            if units]
        raise bad("units", f"lists {len(got)} units, not each arm of each of the config's {trials!r} trials once "
                           f"(an arm with its own 'trials', of that many): {'; '.join(odd)}")
    if "rules" in design:
        from dlfp.trials.design import Rules

        try:
            Rules(**design["rules"])
        except (TypeError, ValueError) as exc:
            raise bad("design.rules", f"is invalid ({exc})") from None
    if not all(isinstance(v, str) for v in (manifest.get("workloads") or {}).values()):
        raise bad("workloads", "holds a checksum that is not a string")
    if not all(isinstance(v, str) for v in (design.get("files") or {}).values()):
        raise bad("design.files", "holds a checksum that is not a string")


def complete_units(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [u for u in manifest["units"] if u.get("status") == "complete"]


def check_status(run_dir: Path, manifest: Mapping[str, Any], allow_partial: bool) -> None:
    """Refuse an unfinished run unless the caller asked for its finished arms explicitly."""
    if manifest["status"] == "complete" and any(u["status"] != "complete" for u in manifest["units"]):
        raise RunFolderError(f"{Path(run_dir) / MANIFEST}: field 'status' says complete, but some of its units do "
                             "not; the manifest was edited: restore it from version control")
    if manifest["status"] == "complete" or allow_partial:
        return
    missing = manifest.get("missing") or [f"trial-{u.get('trial')}/{u.get('arm')}" for u in manifest["units"]
                                          if u.get("status") != "complete"]
    argv = " ".join(map(str, manifest.get("argv") or []))
    raise RunFolderError(
        f"{run_dir} is a {manifest['status']} run (missing: {', '.join(map(str, missing)) or 'none'}); rerun the "
        f"command that made it to finish it (manifest argv: {argv or 'unknown'}), "
        "or read its finished arms on purpose (allow_partial=True, `dlfp analyze --partial`): they are then "
        "labelled partial")


def verify_file(path: Path, digest: str | None) -> None:
    """Refuse a file that is missing or whose sha256 differs from the manifest's."""
    if not path.is_file():
        raise RunFolderError(f"{path} is missing, but the manifest lists it; restore the run folder from version "
                             "control, or rerun the trial into a new folder")
    if digest is None:
        raise RunFolderError(f"{path} has no checksum in the manifest; the manifest was edited: restore it")
    actual = sha256(path)
    if actual != digest:
        raise RunFolderError(f"{path} does not match its checksum in the manifest (sha256 {actual[:12]}..., "
                             f"recorded {digest[:12]}...): the file was changed or damaged after the run; "
                             "restore it from version control, or rerun the trial into a new folder")


def _kind_ok(series: pd.Series, kind: str) -> bool:
    dtype = series.dtype
    if kind == "float":
        return pd.api.types.is_float_dtype(dtype) or pd.api.types.is_integer_dtype(dtype)
    if kind == "int":
        return pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
    return (pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)) and all(
        isinstance(v, str) for v in series.dropna())


def check_schema(df: pd.DataFrame, table: str, where: Path) -> pd.DataFrame:
    """Refuse a table lacking a column readers rely on, or holding the wrong kind of values in it."""
    optional = OPTIONAL_COLUMNS.get(table, {})
    for column, kind in {**SCHEMAS[table], **optional}.items():
        if column not in df.columns:
            if column in optional:
                continue
            raise RunFolderError(f"{where}: column {column!r} is missing (a {table} table needs "
                                 f"{sorted(SCHEMAS[table])})")
        if not _kind_ok(df[column], kind):
            raise RunFolderError(f"{where}: column {column!r} holds {df[column].dtype} values, expected {kind}")
    return df


def read_table(path: Path, table: str, digest: str | None, verify: bool = True) -> pd.DataFrame:
    """One Parquet table of a run, checksum- and schema-verified (the metrics' own checks of
    request and token frames are made where traces are read for numbers: :func:`dlfp.analysis.runs.load_run`)."""
    if verify:
        verify_file(path, digest)
    try:
        df = pq.read_table(path).to_pandas()
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise RunFolderError(f"{path}: cannot read it as Parquet ({exc}); restore it or rerun the trial") from None
    return check_schema(_canonical(df, table, path), table, path)


def listed_files(run_dir: Path, manifest: Mapping[str, Any]) -> list[tuple[Path, str | None]]:
    """Every file of the run folder its manifest vouches for, with its recorded sha256: finished
    arms' tables, workloads and the pre-flight's step records."""
    run_dir = Path(run_dir)
    files = []
    for u in complete_units(manifest):
        for name, digest in (u.get("files") or {}).items():
            _expected_name(run_dir, name, {f"{t}.parquet" for t in TABLES})
            files.append((run_dir / f"trial-{u['trial']}" / u["arm"] / name, digest))
    trials = {u["trial"] for u in manifest["units"]}
    for name, digest in (manifest.get("workloads") or {}).items():
        _expected_name(run_dir, name, {f"trial-{k}/workload.parquet" for k in trials})
        files.append((run_dir / name, digest))
    for name, digest in ((manifest.get("design") or {}).get("files") or {}).items():
        _expected_name(run_dir, name, {PREFLIGHT_STEPS})
        files.append((run_dir / name, digest))
    return files


PREFLIGHT_STEPS = "preflight/steps.parquet"


def _expected_name(run_dir: Path, name: Any, allowed: set[str]) -> None:
    """A file name in a manifest must be one a run writes: an edit cannot point a reader elsewhere."""
    if name not in allowed:
        raise RunFolderError(f"{Path(run_dir) / MANIFEST} lists a file {name!r} that no run writes (expected one of "
                             f"{sorted(allowed)}); the manifest was edited: restore it")
