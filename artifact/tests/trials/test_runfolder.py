"""Run folders' tables (:mod:`dlfp.trials.runfolder`): readers verify before they trust. A file whose sha256
differs from the manifest's, a table lacking a column or holding the wrong kind of values are refused with a
:class:`RunFolderError` naming the file; tables are written in one step. :func:`make_run` builds a tiny run
folder for these tests and the manifest's (``test_schema.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.harness.driver import stamp
from dlfp.paths import REPO_ROOT, sha256
from dlfp.trials.runfolder import (
    KIND,
    MANIFEST,
    OPTIONAL_COLUMNS,
    SCHEMAS,
    TABLES,
    RunFolderError,
    check_schema,
    engine_log,
    read_table,
    stored,
    write_parquet,
)

COMMITTED = REPO_ROOT / "data" / "runs" / "cpu-default"

FRAMES: dict[str, pd.DataFrame] = {
    "requests": pd.DataFrame({"request_id": ["r0", "r1"], "arrival_s": [0.0, 0.5], "send_s": [0.001, 0.5],
                              "first_token_s": [0.1, 0.6], "finish_s": [0.2, 0.7], "prompt_len": [16, 600],
                              "output_len_requested": [4, 2], "output_len": [4, 2], "status": ["ok", "ok"]}),
    "tokens": pd.DataFrame({"request_id": ["r0", "r0", "r1"], "index": [0, 1, 0], "t_s": [0.1, 0.12, 0.6],
                            "token_id": [7, 8, 9]}),
    "steps": pd.DataFrame({"step": [0, 1], "schedule_t": [0.0, 0.01], "complete_t": [0.01, 0.02],
                           "prefill_tokens": [16, 0], "decode_reqs": [0, 1]}),
    "telemetry": pd.DataFrame({"t_s": [0.0], "source": ["cpu"], "metric": ["util_pct"], "value": [50.0]}),
}


def make_run(root: Path, trials: int = 1, arms: tuple[str, ...] = ("stock", "dlfp"),
             incomplete: tuple[tuple[int, str], ...] = ()) -> Path:
    """A tiny run folder whose manifest vouches for every table it holds."""
    run = root / "run"
    units = []
    for k in range(trials):
        for arm in arms:
            unit: dict[str, Any] = {"trial": k, "arm": arm, "status": "complete", "files": {}}
            if (k, arm) in incomplete:
                unit = {"trial": k, "arm": arm, "status": "pending"}
            else:
                folder = run / f"trial-{k}" / arm
                folder.mkdir(parents=True)
                for table in TABLES:
                    write_parquet(FRAMES[table], folder / f"{table}.parquet")
                    unit["files"][f"{table}.parquet"] = sha256(folder / f"{table}.parquet")
            units.append(unit)
    run.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": KIND, "name": "tiny", "status": "interrupted" if incomplete else "complete",
                "config": {"name": "tiny", "trials": trials}, "units": units, "argv": ["dlfp", "trial", "x.yaml"]}
    (run / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return run


# --- check_schema, read_table, write_parquet ---------------------------------------------------------


@pytest.mark.parametrize("table", TABLES)
def test_each_schema_accepts_its_frame_and_extra_columns(tmp_path: Path, table: str) -> None:
    df = FRAMES[table].assign(extra=1)
    assert check_schema(df, table, tmp_path / f"{table}.parquet") is df


@pytest.mark.parametrize("table", TABLES)
def test_a_missing_column_is_named_with_the_table(tmp_path: Path, table: str) -> None:
    column = list(SCHEMAS[table])[-1]
    where = tmp_path / f"{table}.parquet"
    with pytest.raises(RunFolderError) as err:
        check_schema(FRAMES[table].drop(columns=column), table, where)
    assert str(err.value) == f"{where}: column {column!r} is missing (a {table} table needs {sorted(SCHEMAS[table])})"


@pytest.mark.parametrize(("table", "column", "values", "dtype"), [
    ("tokens", "t_s", ["0.1", "0.2", "0.3"], "object"),           # strings where times belong
    ("tokens", "token_id", [7.0, 8.5, 9.0], "float64"),           # floats where ints belong
    ("tokens", "index", [True, False, True], "bool"),             # bools are not ints
    ("tokens", "request_id", [1, 2, 3], "int64"),                 # numbers are not ids
    ("tokens", "request_id", ["r0", 5, "r1"], "object"),          # one non-string among strings
    ("telemetry", "value", [None], "object"),
])
def test_a_column_of_the_wrong_kind_is_refused(tmp_path: Path, table: str, column: str, values: list[Any],
                                               dtype: str) -> None:
    df = FRAMES[table].copy()
    df[column] = pd.Series(values, dtype=object if dtype == "object" else None)
    assert str(df[column].dtype) == dtype
    with pytest.raises(RunFolderError) as err:
        check_schema(df, table, tmp_path / "t.parquet")
    kind = {**SCHEMAS[table], **OPTIONAL_COLUMNS.get(table, {})}[column]
    assert str(err.value) == f"{tmp_path / 't.parquet'}: column {column!r} holds {dtype} values, expected {kind}"


def test_ints_are_floats_and_missing_strings_are_allowed(tmp_path: Path) -> None:
    df = FRAMES["requests"].assign(send_s=[1, 2], status=["ok", None])
    assert check_schema(df, "requests", tmp_path / "r.parquet") is df


def test_write_parquet_round_trips_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "tokens.parquet"
    write_parquet(FRAMES["tokens"].iloc[:1], path)
    write_parquet(FRAMES["tokens"], path)
    back = read_table(path, "tokens", sha256(path))
    pd.testing.assert_frame_equal(back, FRAMES["tokens"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.parquet"]  # no temporary file left


@given(st.lists(st.tuples(st.floats(0, 1e5), st.integers(0, 2**31 - 1)), min_size=1, max_size=50),
       st.booleans())
def test_a_stored_token_table_reads_back_exactly(tmp_path_factory: pytest.TempPathFactory,
                                                 rows: list[tuple[float, int]], with_ids: bool) -> None:
    """Times the client stamped (to the microsecond) come back bit for bit from integer microseconds."""
    df = pd.DataFrame({"request_id": ["r0"] * len(rows), "index": range(len(rows)),
                       "t_s": sorted(stamp(t) for t, _ in rows), "token_id": [i for _, i in rows]})
    df = df if with_ids else df.drop(columns="token_id")
    path = tmp_path_factory.mktemp("stored") / "tokens.parquet"
    write_parquet(stored(df, "tokens"), path)
    assert pq.read_schema(path).names == ["request_id", "index", "t_us", *(["token_id"] if with_ids else [])]
    back = read_table(path, "tokens", sha256(path))
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    assert back["t_s"].to_list() == df["t_s"].to_list()  # exact, not approximately


def test_stored_tokens_take_under_half_the_bytes_of_float_seconds(tmp_path: Path) -> None:
    """What the compact table is for (:data:`~dlfp.trials.runfolder.TOKEN_TICKS_PER_S`): the capacity
    study's traces."""
    rng = np.random.default_rng(0)
    n = 20_000
    t = np.cumsum(rng.exponential(0.01, n))
    df = pd.DataFrame({"request_id": [f"r{i // 100:04d}" for i in range(n)], "index": np.arange(n) % 100,
                       "t_s": [stamp(x) for x in t], "token_id": rng.integers(0, 151_936, n)})
    write_parquet(df, tmp_path / "float.parquet")
    write_parquet(stored(df, "tokens"), tmp_path / "stored.parquet")
    assert (tmp_path / "stored.parquet").stat().st_size < 0.5 * (tmp_path / "float.parquet").stat().st_size


def test_times_that_are_not_whole_microseconds_are_not_stored() -> None:
    with pytest.raises(ValueError, match="t_s holds times that are not whole microseconds"):
        stored(FRAMES["tokens"].assign(t_s=[0.1, 0.1200004, 0.6]), "tokens")


def test_a_stored_token_table_with_non_integer_microseconds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.parquet"
    write_parquet(stored(FRAMES["tokens"], "tokens").astype({"t_us": float}), path)
    with pytest.raises(RunFolderError) as err:
        read_table(path, "tokens", sha256(path))
    assert str(err.value) == f"{path}: column 't_us' holds float64 values, expected int"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "tokens.parquet"
    write_parquet(FRAMES["tokens"], path)
    before = path.read_bytes()
    with pytest.raises(Exception):  # noqa: B017 - pyarrow's own error: a column it cannot type
        write_parquet(pd.DataFrame({"token_id": [1, "x", 2.5]}), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.parquet"]


def test_read_table_refuses_a_file_that_is_not_parquet(tmp_path: Path) -> None:
    path = tmp_path / "steps.parquet"
    path.write_text("not parquet", encoding="utf-8")
    with pytest.raises(RunFolderError, match="does not match its checksum"):
        read_table(path, "steps", "0" * 64)
    with pytest.raises(RunFolderError) as err:
        read_table(path, "steps", None, verify=False)
    assert str(err.value).startswith(f"{path}: cannot read it as Parquet (")


def test_read_table_checks_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "steps.parquet"
    write_parquet(FRAMES["steps"].drop(columns="decode_reqs"), path)
    with pytest.raises(RunFolderError, match=f"{path}: column 'decode_reqs' is missing"):
        read_table(path, "steps", sha256(path))


# --- engine_log ------------------------------------------------------------------------------------


def test_engine_log_sits_beside_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert engine_log(tmp_path / "runs" / "x") == tmp_path / "runs" / "x.engine.log"
    assert engine_log(Path("data/runs/x/")) == Path("data/runs/x.engine.log")
    monkeypatch.chdir(tmp_path)
    assert engine_log(Path(".")) == tmp_path.parent / f"{tmp_path.name}.engine.log"


def test_the_engine_step_log_lies_beside_the_run_folder_never_in_it(tmp_path, monkeypatch) -> None:
    from dlfp.trials.runfolder import engine_step_log

    assert engine_step_log(tmp_path / "run") == tmp_path / ".run.steps.jsonl"
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert engine_step_log(Path(".")) == tmp_path / ".here.steps.jsonl"
