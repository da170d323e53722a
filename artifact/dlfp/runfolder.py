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

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
KIND = "dlfp-paired-trials"
TABLES = ("requests", "tokens", "steps", "telemetry")

SCHEMAS: dict[str, dict[str, str]] = {
    "requests": {"request_id": "string", "arrival_s": "float", "send_s": "float", "first_token_s": "float",
                 "finish_s": "float", "prompt_len": "int", "output_len_requested": "int", "output_len": "int",
                 "status": "string"},
    "tokens": {"request_id": "string", "index": "int", "t_s": "float", "token_id": "int"},
    "steps": {"step": "int", "schedule_t": "float", "complete_t": "float", "prefill_tokens": "int",
              "decode_reqs": "int"},
    "telemetry": {"t_s": "float", "source": "string", "metric": "string", "value": "float"},
}
"""Columns every reader relies on, with their kind; writers may add more columns."""


class RunFolderError(ValueError):
    """A run folder cannot be used as asked: it would lose, mix or misread data."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one step, so a reader (or a crash) never leaves half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """A manifest or report, replaced in one step (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """One table; callers write into a partial folder that is renamed into place when complete."""
    df.to_parquet(path, compression="zstd", index=False)


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
    return manifest


def complete_units(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [u for u in manifest["units"] if u.get("status") == "complete"]


def check_status(run_dir: Path, manifest: Mapping[str, Any], allow_partial: bool) -> None:
    """Refuse an unfinished run unless the caller asked for its finished arms explicitly."""
    if manifest["status"] == "complete" or allow_partial:
        return
    missing = manifest.get("missing") or [f"trial-{u.get('trial')}/{u.get('arm')}" for u in manifest["units"]
                                          if u.get("status") != "complete"]
    raise RunFolderError(
        f"{run_dir} is a {manifest['status']} run (missing: {', '.join(missing) or 'none'}); rerun the command "
        f"that made it to finish it (manifest argv: {' '.join(manifest.get('argv') or []) or 'unknown'}), "
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
    for column, kind in SCHEMAS[table].items():
        if column not in df.columns:
            raise RunFolderError(f"{where}: column {column!r} is missing (a {table} table needs "
                                 f"{sorted(SCHEMAS[table])})")
        if not _kind_ok(df[column], kind):
            raise RunFolderError(f"{where}: column {column!r} holds {df[column].dtype} values, expected {kind}")
    return df


def read_table(path: Path, table: str, digest: str | None, verify: bool = True) -> pd.DataFrame:
    """One Parquet table of a run, checksum- and schema-verified."""
    if verify:
        verify_file(path, digest)
    try:
        df = pq.read_table(path).to_pandas()
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise RunFolderError(f"{path}: cannot read it as Parquet ({exc}); restore it or rerun the trial") from None
    return check_schema(df, table, path)
