"""Run folders on disk: their tables, atomic writes, checksums, and verified reading.

Every table of ``data/runs/<id>/`` is written and read here, below the trial runner, the analysis
and the simulator (which all need it and must not import each other for it); the manifest is read
and written by :mod:`dlfp.trials.schema`. Writers replace files in one step, so a crash never leaves
half a file. Readers verify before they trust: every table's sha256 against the manifest, and every
table's columns and types, so a hand-edited, truncated, partial or foreign run is refused with a
message naming the file and how to recover, never read into a wrong number.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dlfp.paths import sha256

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


PREFLIGHT_STEPS = "preflight/steps.parquet"
