"""Fuzzing traces and run folders: a damaged, edited, partial or foreign run is refused with one
line naming the file (``dlfp analyze`` exits 2), never read into a wrong number, never a
traceback from inside pandas or pyarrow; valid traces give finite, consistent metrics.

One small valid run folder is written once by the trial runner itself, with the engine arm and
the pre-flight replaced by the fakes of ``test_trial_runner.py`` (no engine starts); every example
copies it and damages the copy. The committed CPU run ``data/runs/cpu-default`` is copied and its
manifest edited to claim a GPU: refused by its own telemetry, or still labelled a CPU measurement.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from dlfp import cli, metrics
from dlfp.analysis.labels import scope_note, source_line
from dlfp.analysis.runs import load_run, trial_rows
from dlfp.harness.arm import ArmResult
from dlfp.paths import REPO_ROOT
from dlfp.trials import runfolder, runner
from dlfp.trials.config import parse_config
from tests.fuzzing import JUNK, apply, apply_all, assert_names, mutations
from tests.trials.fakes import FakeArms, fake_preflight

CONFIG = {"name": "fuzz", "trials": 2, "workload": {"n_requests": 5, "rate_rps": 50.0}}


class Arms(FakeArms):
    """The runner tests' fake arm, with a steps table that has every column readers need, and a GPU
    sample beside the CPU one: the manifest records the host's own vLLM build and GPUs, and where that
    is a GPU build the run is refused unless its telemetry saw a GPU (:func:`dlfp.analysis.runs.check_device`);
    a CPU build's label ignores it."""

    def __call__(self, *args, **kwargs):
        result = super().__call__(*args, **kwargs)
        steps = pd.DataFrame({"step": [0, 1], "schedule_t": [0.0, 0.01], "complete_t": [0.01, 0.02],
                              "prefill_tokens": [64, 0], "decode_reqs": [0, 1]})
        telemetry = pd.concat([result.telemetry, result.telemetry.assign(source="gpu0")], ignore_index=True)
        return ArmResult(result.trace, steps, telemetry)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-run") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("dlfp.harness.arm.run_arm", Arms())
        mp.setattr("dlfp.trials.preflight.run_preflight", fake_preflight())
        assert runner.run_trials(parse_config(CONFIG), out, progress=False).status == "complete"
    return out


@pytest.fixture(scope="module")
def good_rows(good) -> pd.DataFrame:
    rows = trial_rows(load_run(good))
    assert len(rows) == 4 and (rows.prompt_mismatches == 0).all() and (rows.output_mismatches == 0).all()
    return rows


def analyze(run: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["analyze", str(run)])
    return rc, err.getvalue()


def copy_run(good: Path, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("case") / "run"
    shutil.copytree(good, run)
    return run


def assert_refused(run: Path, *named: str) -> str:
    """``dlfp analyze`` exits 2 with one line naming the run folder and one of ``named``."""
    rc, err = analyze(run)
    assert rc == 2 and err.startswith("dlfp: error: ") and err.count("\n") == 1, err
    assert str(run) in err and (not named or any(n in err for n in named)), err
    return err


def files(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*.parquet"))


RELS = ["trial-0/workload.parquet", "trial-1/workload.parquet"] + [
    f"trial-{k}/{arm}/{t}.parquet" for k in (0, 1) for arm in ("stock", "dlfp") for t in runfolder.TABLES]


def _damage(path: Path, how: str, at: float, other: Path) -> None:
    data = path.read_bytes()
    k = int(at * len(data))
    if how == "truncate":
        path.write_bytes(data[:k])
    elif how == "flip":
        path.write_bytes(data[:k] + bytes([data[k] ^ 0x5A]) + data[k + 1:])
    elif how == "append":
        path.write_bytes(data + b"\0junk")
    elif how == "garbage":
        path.write_bytes(bytes(range(256)) * 3)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "delete":
        path.unlink()
    elif how == "directory":
        path.unlink()
        path.mkdir()
    else:  # another valid table of the run in its place: valid Parquet, right schema, other numbers
        shutil.copyfile(other, path)


@settings(max_examples=40, deadline=None)
@given(rel=st.sampled_from(RELS), how=st.sampled_from(["truncate", "flip", "append", "garbage", "empty", "delete",
                                                        "directory", "swap"]),
       at=st.floats(0, 0.999))
def test_damaged_file_is_refused_by_its_checksum(good, tmp_path_factory, rel, how, at) -> None:
    run = copy_run(good, tmp_path_factory)
    trial_, rest = rel.split("/", 1)
    other = run / {"trial-0": "trial-1", "trial-1": "trial-0"}[trial_] / rest  # the other seed's: other numbers
    if how == "swap" and other.read_bytes() == (run / rel).read_bytes():
        how = "flip"  # the fake arm writes the same steps and telemetry for every seed
    _damage(run / rel, how, at, other)
    if rel.endswith("telemetry.parquet"):  # `dlfp analyze` does not read telemetry (nor verify it): its readers do
        with pytest.raises(runfolder.RunFolderError, match=rel):
            load_run(run, tables=runfolder.TABLES)
    else:
        assert_refused(run, rel)
    event(how)


TABLE_EDITS = ("drop_column", "to_text", "to_bool", "to_mixed", "nan", "none", "decreasing", "duplicate_row",
               "drop_row", "empty", "shuffle", "extra_column")
"""What a writer bug does to a table (a value edit that stays plausible is for the checksum to catch)."""
INVARIANT = ("shuffle", "extra_column")
CLOCK = {"requests": "first_token_s", "tokens": "t_us", "steps": "schedule_t", "telemetry": "t_s"}
"""The time column of each table as stored, which "decreasing" reverses (token times are integer
microseconds on disk, :data:`dlfp.trials.runfolder.TOKEN_TICKS_PER_S`)."""


def _edit(df: pd.DataFrame, how: str, column: str, row: int) -> pd.DataFrame:
    row = row % max(len(df), 1)
    df = df.copy()
    if how == "drop_column":
        return df.drop(columns=[column])
    if how == "to_text":
        return df.assign(**{column: df[column].astype(str)})
    if how == "to_bool":
        return df.assign(**{column: df[column].astype(bool)})
    if how == "to_mixed":
        return df.assign(**{column: [None if i == row else v for i, v in enumerate(df[column].astype(object))]})
    if how in ("nan", "none"):
        values = df[column].astype(float if how == "nan" and pd.api.types.is_numeric_dtype(df[column]) else object)
        values.iloc[row] = math.nan if how == "nan" else None
        return df.assign(**{column: values})
    if how == "decreasing":  # reversed order of the column's values (sortable ones; None/NaN go last)
        return df.assign(**{column: df[column].sort_values(ascending=False, na_position="last").to_numpy()})
    if how == "duplicate_row":
        return pd.concat([df, df.iloc[[row]]], ignore_index=True)
    if how == "drop_row":
        return df.drop(index=df.index[row])
    if how == "empty":
        return df.iloc[:0]
    if how == "shuffle":
        return df.sample(frac=1.0, random_state=row)
    if how == "extra_column":
        return df.assign(zz_extra=1.5)
    return df.assign(**{column: df[column].iloc[row]})  # "constant"


@settings(max_examples=40, deadline=None)
@given(k=st.sampled_from([0, 1]), arm=st.sampled_from(["stock", "dlfp"]), table=st.sampled_from(runfolder.TABLES),
       how=st.sampled_from(TABLE_EDITS), col=st.integers(0, 20), row=st.integers(0, 500))
@example(k=0, arm="stock", table="tokens", how="drop_column", col=3, row=0)  # no token ids, no digests: was a KeyError
@example(k=0, arm="stock", table="tokens", how="decreasing", col=0, row=0)  # the stored clock, t_us: was a KeyError
def test_consistently_rewritten_table(good, good_rows, tmp_path_factory, k, arm, table, how, col, row) -> None:
    """A table edited *and* re-checksummed in the manifest (a writer bug, or a hand edit done
    thoroughly): refused naming the file and column, or read with the damage showing in the numbers
    (token accounting), never silently changed numbers."""
    run = copy_run(good, tmp_path_factory)
    path = run / f"trial-{k}" / arm / f"{table}.parquet"
    df = pd.read_parquet(path)
    column = CLOCK[table] if how == "decreasing" else sorted(df.columns)[col % len(df.columns)]
    if how == "empty" and table in ("requests", "tokens"):
        how = "drop_row"  # an arm without one ITL gap: see test_arm_without_gaps_is_analyzed_or_named
    runfolder.write_parquet(_edit(df, how, column, row), path)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    unit = next(u for u in manifest["units"] if u["trial"] == k and u["arm"] == arm)
    unit["files"][path.name] = runfolder.sha256(path)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    rc, err = analyze(run)
    if rc != 0 and f"{run}/trial-{k}/{arm}: requests/tokens: " in err:
        # The two tables disagree (dlfp.metrics.summarize): named by the arm's folder, both tables,
        # the column and the request, since neither file alone is wrong.
        assert rc == 2 and err.startswith("dlfp: error: ") and err.count("\n") == 1 and "'r0" in err, err
        event(f"{how}: refused (tables disagree)")
        return
    if rc != 0:
        assert_refused(run, str(path.relative_to(run)))
        event(f"{how}: refused")
        return
    rows = trial_rows(load_run(run))
    mine = (rows.trial == k) & (rows.arm == arm)
    flagged = (rows.prompt_mismatches + rows.output_mismatches)[mine].item() > 0 or \
        rows.n_recorded[mine].item() < rows.n_expected[mine].item()
    same = rows.drop(columns=["agreement_rate", "mismatched", "compared"]).equals(
        good_rows.drop(columns=["agreement_rate", "mismatched", "compared"]))
    assert same or (flagged and how not in INVARIANT), (how, table, column, rows.compare(good_rows))
    assert rows.drop(columns=["mismatched"]).select_dtypes("number").stack().map(np.isfinite).all()
    event(f"{how}: {'same numbers' if same else 'flagged by accounting'}")


def test_request_lost_from_a_consistent_table_is_counted(good, good_rows, tmp_path_factory) -> None:
    """The same property for one case by hand: a request row gone is counted as not recorded."""
    run = copy_run(good, tmp_path_factory)
    path = run / "trial-0" / "stock" / "requests.parquet"
    runfolder.write_parquet(pd.read_parquet(path).iloc[1:], path)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    next(u for u in manifest["units"] if u["trial"] == 0 and u["arm"] == "stock")["files"][path.name] = \
        runfolder.sha256(path)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    rows = trial_rows(load_run(run)).set_index(["trial", "arm"])
    assert rows.loc[(0, "stock"), "n_recorded"] == rows.loc[(0, "stock"), "n_expected"] - 1


MANIFEST_VALUES = st.one_of(JUNK, st.sampled_from(["complete", "interrupted", "dlfp-paired-trials", "stock",
                                                   "trial-0/workload.parquet", "0" * 64]))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_edited_manifest(good, good_rows, tmp_path_factory, data) -> None:
    """One edit of the manifest (a missing or wrong field, another kind, other units): refused
    naming the manifest, the field or the file, or read with the same numbers (edits of the config
    and the design legitimately change thresholds and SLOs, so only their parsing is checked)."""
    manifest = json.loads((good / runfolder.MANIFEST).read_text())
    mutation = data.draw(mutations(manifest, MANIFEST_VALUES, root=True))
    run = copy_run(good, tmp_path_factory)
    (run / runfolder.MANIFEST).write_text(json.dumps(apply(manifest, mutation)))
    rc, _ = analyze(run)
    path = mutation[1]
    if rc != 0:
        assert_refused(run)
        event(f"{path[:1]}: refused")
        return
    if path[:1] not in (("config",), ("design",)):
        rows = trial_rows(load_run(run))
        assert rows.equals(good_rows), (mutation, rows.compare(good_rows))
    event(f"{path[:1]}: accepted")


@pytest.mark.parametrize("measured", [{}, {"decoders": "8"}, {"decoders": True}, None, [1]])
def test_a_design_edited_to_lose_its_measured_decoders_still_analyses(good, tmp_path_factory, measured) -> None:
    """Found by the fuzz test above (``design.measured`` replaced by ``{}``: a KeyError in the cost check):
    the cost check then has no pre-flight record to hold the trials against, and says nothing."""
    manifest = json.loads((good / runfolder.MANIFEST).read_text())
    run = copy_run(good, tmp_path_factory)
    (run / runfolder.MANIFEST).write_text(json.dumps(apply(manifest, ("replace", ("design", "measured"), measured))))
    rc, _ = analyze(run)
    if rc != 0:
        assert_refused(run)


COMMITTED_CPU_RUN = REPO_ROOT / "data" / "runs" / "cpu-default"
GPU_NAMES = st.sampled_from(["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H200", "NVIDIA H100 80GB HBM3"])
VLLM_BUILDS = st.sampled_from(["0.32.0", "0.32.0+cu130", "0.32.0+rocm", "0.33.0", "", "unknown", "0.32.0+cpu"])
"""What ``versions.vllm`` may be edited to: GPU builds, nothing, or the CPU build itself (no claim)."""


@st.composite
def gpu_claims(draw) -> list[tuple]:
    """Edits (fuzzing.py mutations) that make a CPU run's manifest read as a GPU node's: any subset of
    the node's GPUs, which of them are visible, the torch build and the telemetry source, with or
    without an edit of the vLLM build (the field the labels decide by), never no edit at all."""
    n = draw(st.integers(0, 4))
    gpus = [{"index": i, "uuid": f"GPU-{i:08x}-5ad1", "name": draw(GPU_NAMES), "memory_gib": 80.0,
             "driver": "580.65.06"} for i in range(n)]
    visible = list(draw(st.permutations(range(n))))[:draw(st.integers(0, n))]
    node = [
        ("replace", ("hardware", "gpus"), gpus),
        draw(st.sampled_from([("replace", ("hardware", "visible_gpus"), visible),
                              ("delete", ("hardware", "visible_gpus"), None)])),  # an older manifest's form
        ("replace", ("hardware", "cuda_visible_devices"), ",".join(map(str, visible))),
        ("replace", ("versions", "torch"), "2.13.0"),
        ("replace", ("telemetry",), "nvidia (pynvml)"),
    ]
    build = draw(st.none() | VLLM_BUILDS.map(lambda v: ("replace", ("versions", "vllm"), v))
                 | st.just(("delete", ("versions", "vllm"), None)))
    chosen = draw(st.lists(st.sampled_from(range(len(node))), min_size=0 if build else 1, unique=True))
    return [node[i] for i in sorted(chosen)] + ([build] if build else [])


@settings(max_examples=30, deadline=None)
@given(edits=gpu_claims())
def test_cpu_run_edited_to_claim_a_gpu(tmp_path_factory, edits) -> None:
    """The committed CPU run with its manifest edited to claim a GPU: any build but a +cpu one labels
    it a GPU measurement, so it is refused naming the manifest, the vLLM field and the telemetry that
    saw no GPU; with the +cpu build kept (a CPU build on a GPU node) it loads, labelled a CPU run."""
    run = copy_run(COMMITTED_CPU_RUN, tmp_path_factory)
    manifest = apply_all(json.loads((run / runfolder.MANIFEST).read_text()), edits)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    vllm = next((e for e in edits if e[1] == ("versions", "vllm")), None)
    cpu_build = vllm is None or (vllm[0] == "replace" and vllm[2].endswith("+cpu"))
    try:
        loaded = load_run(run, tables=())
    except ValueError as exc:
        assert not cpu_build, f"a CPU build was refused for the GPUs its node has: {exc}"
        assert_names(exc, vllm)
        assert str(run / runfolder.MANIFEST) in str(exc) and "sampled no GPU" in str(exc), exc
        assert "telemetry.parquet, which matches its checksum" in str(exc), exc
        event(f"refused ({vllm[0]} versions.vllm)")
        return
    assert cpu_build, f"a GPU claim was accepted: {edits}"
    label = source_line(loaded)
    assert label.startswith("measured: ") and "GPU" not in label and "NVIDIA" not in label, label
    assert scope_note(loaded).startswith("CPU measurements"), scope_note(loaded)
    event("accepted, labelled CPU")


def test_engine_env_that_is_not_a_mapping_is_refused(good, tmp_path_factory) -> None:
    """A case the fuzzer found (CI, 2026-11-30): ``engine_env`` edited to a number reached the
    device label and raised AttributeError instead of naming the field."""
    run = copy_run(good, tmp_path_factory)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    (run / runfolder.MANIFEST).write_text(json.dumps({**manifest, "engine_env": 1}))
    assert_refused(run, "'engine_env'")


def test_arm_without_gaps_is_analyzed_or_named(good, tmp_path_factory) -> None:
    run = copy_run(good, tmp_path_factory)
    unit_dir = run / "trial-0" / "dlfp"
    requests = pd.read_parquet(unit_dir / "requests.parquet")
    requests = requests.assign(status="failed", first_token_s=math.nan, finish_s=math.nan, output_len=0,
                               error="engine core died")
    tokens = pd.read_parquet(unit_dir / "tokens.parquet").iloc[:0]
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    unit = next(u for u in manifest["units"] if u["trial"] == 0 and u["arm"] == "dlfp")
    for name, df in (("requests.parquet", requests), ("tokens.parquet", tokens)):
        runfolder.write_parquet(df, unit_dir / name)
        unit["files"][name] = runfolder.sha256(unit_dir / name)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    rc, err = analyze(run)
    assert rc == 0 or "trial-0" in err or "trial 0" in err, err


def test_partial_run_refused_unless_asked_then_labelled(good, good_rows, tmp_path_factory) -> None:
    run = copy_run(good, tmp_path_factory)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    unit = next(u for u in manifest["units"] if u["trial"] == 1 and u["arm"] == "dlfp")
    unit.update(status="missing")
    del unit["files"]
    manifest.update(status="interrupted", missing=["trial-1/dlfp"], interrupted_by="SIGTERM")
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    shutil.rmtree(run / "trial-1" / "dlfp")
    err = assert_refused(run, "interrupted")
    assert "trial-1/dlfp" in err and "allow_partial" in err
    partial = load_run(run, allow_partial=True)
    assert partial.partial and partial.trials == [0]
    rows = trial_rows(partial)
    assert rows.equals(good_rows[good_rows.trial == 0])


def test_foreign_or_missing_manifest(good, tmp_path_factory) -> None:
    run = copy_run(good, tmp_path_factory)
    (run / runfolder.MANIFEST).write_text(json.dumps({"kind": "vllm-bench", "units": [], "config": {}}))
    assert_refused(run, "not a dlfp paired-trial manifest")
    (run / runfolder.MANIFEST).unlink()
    assert_refused(run, "no manifest.json")


# Frames handed directly to dlfp.metrics.

chunks = st.lists(st.tuples(st.integers(1, 3), st.floats(1e-4, 0.5)), min_size=1, max_size=6)
request = st.tuples(st.sampled_from(["ok", "ok", "ok", "failed", "cancelled"]), st.floats(0, 5), st.floats(1e-3, 1),
                    st.integers(1, 300), chunks)


def frames(reqs: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests and tokens frames of ``reqs`` = [(status, arrival, ttft, prompt_len, chunks)]."""
    req_rows, tok_rows = [], []
    for i, (status, arrival, first, prompt_len, cs) in enumerate(reqs):
        rid, t, index = f"q{i}", arrival + first, 0
        for j, (size, gap) in enumerate(cs):
            t += gap if j else 0.0
            tok_rows += [{"request_id": rid, "index": index + n, "t_s": t} for n in range(size)]
            index += size
        ok = status == "ok"
        req_rows.append({"request_id": rid, "arrival_s": arrival, "send_s": arrival,
                         "first_token_s": arrival + first if ok else math.nan, "finish_s": t if ok else math.nan,
                         "prompt_len": prompt_len, "output_len_requested": index, "output_len": index,
                         "status": status, "error": None if ok else status})
    return pd.DataFrame(req_rows), pd.DataFrame(tok_rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(request, min_size=1, max_size=6), st.floats(1e-3, 1), st.floats(1e-3, 1))
def test_metrics_of_valid_traces_are_finite_and_consistent(reqs, ttft_slo, tpot_slo) -> None:
    requests, tokens = frames(reqs)
    s = metrics.summarize(requests, tokens, ttft_slo, tpot_slo, stall_s=0.1)
    ok = [r for r in reqs if r[0] == "ok"]
    assert s["n_ok"] + s["n_failed"] + s["n_cancelled"] == s["n_requests"] == len(reqs)
    ok_tokens = tokens[tokens.request_id.isin(requests.request_id[requests.status == "ok"])]
    gaps = metrics.itl_gaps(ok_tokens)
    assert len(gaps) == sum(len(r[4]) - 1 for r in ok)  # pooled gaps = per-request chunks - 1, summed
    assert len(metrics.per_request_itl(ok_tokens)) == sum(len(r[4]) > 1 for r in ok)
    assert s["output_tokens"] == sum(sum(n for n, _ in r[4]) for r in ok) == len(ok_tokens)
    assert 0 <= s["slo_compliance"] <= len(ok) / len(reqs)
    assert s["stalls"] == int((gaps > 0.1).sum()) <= len(gaps)
    for key, value in s.items():
        defined = (len(gaps) if key.startswith(("itl", "stall", "worst", "long_gap")) else len(ok))
        assert finite_or_nan(value, defined), (key, value)
    if ok:
        assert min(metrics.ttft(requests)) >= 0 and s["ttft_p99_ms"] <= s["ttft_max_ms"] + 1e-9
    if len(gaps):
        assert s["itl_p50_ms"] <= s["itl_p99_ms"] + 1e-9 <= s["itl_max_ms"] + 2e-9
        assert s["worst_gap_ms"] == pytest.approx(s["itl_max_ms"])


def finite_or_nan(value, defined: int) -> bool:
    if not isinstance(value, float):
        return True
    return math.isfinite(value) if defined else True


FRAME_EDITS = ("drop_column", "to_text", "to_bool", "to_mixed", "nan", "none", "decreasing", "duplicate_row",
               "drop_row", "empty", "shuffle", "constant", "status")
FUNCTIONS = {
    "itl_gaps": lambda r, t: metrics.itl_gaps(t), "per_request_itl": lambda r, t: metrics.per_request_itl(t),
    "ttft": lambda r, t: metrics.ttft(r), "ttft_from_send": lambda r, t: metrics.ttft_from_send(r),
    "slo_compliance": lambda r, t: metrics.slo_compliance(r, 1.0, 0.1),
    "summarize": lambda r, t: metrics.summarize(r, t, 1.0, 0.1),
}


@settings(max_examples=200, deadline=None)
@given(reqs=st.lists(request, min_size=2, max_size=4), which=st.sampled_from(["requests", "tokens"]),
       how=st.sampled_from(FRAME_EDITS), col=st.integers(0, 20), row=st.integers(0, 50),
       fn=st.sampled_from(sorted(FUNCTIONS)))
def test_metrics_of_broken_frames(reqs, which, how, col, row, fn) -> None:
    """A frame with one column missing, of the wrong type, NaN, reordered, duplicated or constant:
    a ValueError naming the column (or the request), or finite numbers."""
    requests, tokens = frames(reqs)
    df = requests if which == "requests" else tokens
    column = sorted(df.columns)[col % len(df.columns)]
    if how == "status":
        column = "status"
        edited = df.assign(status=["weird" if i == row % len(df) else s for i, s in enumerate(df.get("status", []))]) \
            if which == "requests" else df
    else:
        edited = _edit(df, how, column, row)
    requests, tokens = (edited, tokens) if which == "requests" else (requests, edited)
    try:
        result = FUNCTIONS[fn](requests, tokens)
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg and (column in msg or "request" in msg), (how, column, msg)
        event(f"{how}: refused")
        return
    values = np.asarray(list(result.values()) if isinstance(result, dict) else result, dtype=np.float64)
    if fn == "summarize":
        assert result["n_requests"] == len(requests)
    assert not np.isinf(values).any(), (how, column, result)
    if fn == "slo_compliance" and requests.empty:
        assert np.isnan(values).all()  # documented: no requests, no compliance
    elif fn != "summarize":
        assert np.isfinite(values).all() and (fn == "ttft_from_send" or (values >= 0).all()), (how, column, result)
    event(f"{how}: accepted")


def _frames_edited(edit) -> tuple[pd.DataFrame, pd.DataFrame]:
    requests, tokens = frames([("ok", 0.0, 0.5, 8, [(1, 0.1), (2, 0.2)]), ("ok", 1.0, 0.25, 8, [(1, 0.1)])])
    return edit(requests, tokens)


FOUND_FRAMES = [  # each was a traceback from pandas/numpy or a silently wrong number before
    (lambda r, t: (pd.concat([r, r.iloc[:1]]), t), "request_id 'q0' appears more than once"),  # TypeError later
    (lambda r, t: (r, t.assign(t_s=t.t_s.astype(str))), "column 't_s' holds string"),  # numpy ValueError, no column
    (lambda r, t: (r, t.assign(index=["a", *list(t["index"][1:])])), "column 'index'"),  # TypeError in sort_values
    (lambda r, t: (r, t.assign(request_id=[1, *list(t.request_id[1:])])), "column 'request_id'"),  # TypeError
    (lambda r, t: (r.assign(finish_s=r.first_token_s - 0.1), t), "finish_s is before first_token_s"),  # TPOT < 0: "met"
    (lambda r, t: (r.assign(arrival_s=r.first_token_s + 1), t), "first_token_s is before arrival_s"),  # TTFT < 0
    (lambda r, t: (r.assign(output_len=[math.nan, 1.0]), t), "output_len is NaN/inf"),  # NaN TPOT counted as met
    (lambda r, t: (r.assign(first_token_s=r.first_token_s - 0.01), t), "differs from the t_s"),  # TTFT from nowhere
]


@pytest.mark.parametrize(("edit", "needle"), FOUND_FRAMES)
def test_frames_fuzzing_found(edit, needle) -> None:
    requests, tokens = _frames_edited(edit)
    with pytest.raises(ValueError) as err:
        metrics.itl_gaps(tokens)  # summarize reads only the ok requests' tokens
        metrics.summarize(requests, tokens, 1.0, 0.1)
    assert needle in str(err.value), str(err.value)


FOUND_MANIFESTS = [  # each raised AttributeError/KeyError/TypeError in a reader, or dropped a trial silently
    (lambda m: m.update(units=[1, *m["units"][1:]]), "'units[0]'"),
    (lambda m: m["units"][0].pop("trial"), "'units[0]'"),
    (lambda m: m["units"][0].update(trial="0"), "'units[0]'"),  # read as a third trial: trial 0 lost its stock arm
    (lambda m: m["units"][0].update(files=[1]), "'units[0]'"),
    (lambda m: m["units"].pop(0), "'units'"),  # a complete run without trial 0's stock arm: trial 0 dropped
    (lambda m: m["units"].append(dict(m["units"][0])), "'units'"),
    (lambda m: m["units"][0].update(status="missing"), "'status' says complete"),  # trial 0 dropped silently
    (lambda m: m.update(design=[1]), "'design'"),
    (lambda m: m["design"].update(rules={"zzz": 1}), "'design.rules'"),
    (lambda m: m["design"].update(problems=5), "'design.problems'"),
    (lambda m: m.update(workloads=[1]), "'workloads'"),
    (lambda m: m.update(versions=[1]), "'versions'"),
    (lambda m: m.update(status="interrupted", argv=5), "'argv'"),
]


@pytest.mark.parametrize(("edit", "needle"), FOUND_MANIFESTS)
def test_manifests_fuzzing_found(good, tmp_path_factory, edit, needle) -> None:
    run = copy_run(good, tmp_path_factory)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    edit(manifest)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    assert_refused(run, needle)


def test_bad_values_in_a_checksummed_table_name_the_file(good, tmp_path_factory) -> None:
    """NaN timestamps in a table whose checksum matches: the file is named (was: "tokens: t_s contains NaN")."""
    run = copy_run(good, tmp_path_factory)
    path = run / "trial-1" / "dlfp" / "tokens.parquet"
    runfolder.write_parquet(pd.read_parquet(path).assign(t_s=math.nan), path)
    manifest = json.loads((run / runfolder.MANIFEST).read_text())
    next(u for u in manifest["units"] if u["trial"] == 1 and u["arm"] == "dlfp")["files"][path.name] = \
        runfolder.sha256(path)
    (run / runfolder.MANIFEST).write_text(json.dumps(manifest))
    assert "t_s contains NaN" in assert_refused(run, "trial-1/dlfp/tokens.parquet")
