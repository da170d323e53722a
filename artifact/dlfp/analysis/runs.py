"""From a run folder's raw traces to the paper-style paired tables (no cached numbers).

Everything here is recomputed from ``requests``/``tokens`` Parquet tables, each verified against
the manifest's checksum and the expected schema first (:mod:`dlfp.trials.runfolder`): per trial and arm
the summary of :func:`dlfp.metrics.summarize`, exact token accounting against the saved
workload, output agreement of every arm with the stock reference, stall events, and per-trial
paired reductions with a Student's t interval across trials. A run whose stock arm's stalls
fell outside the design's regime (:mod:`dlfp.trials.design`) is flagged wherever it is shown.

What a run was measured on is read from its manifest (:mod:`dlfp.analysis.labels`), whose identity
(versions, hardware, git, config) has its own checksum (:func:`~dlfp.trials.schema.identity_verified`:
an edit is refused); a manifest claiming a GPU is also held against the run's checksummed telemetry
(:func:`check_device`): a GPU run samples its GPUs through NVML in every unit, a CPU run only the CPU, so a
CPU run edited into a GPU measurement is refused, and a claim nothing shows is labelled *unverified device*,
never printed as a GPU measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlfp import metrics
from dlfp.control.params import parse_params
from dlfp.harness import workload
from dlfp.harness.driver import output_digest
from dlfp.trials.arms import REFERENCE
from dlfp.trials.config import TrialConfig, run_config
from dlfp.trials.runfolder import MANIFEST, RunFolderError, read_table, verify_file
from dlfp.trials.schema import Manifest, check_status, identity_verified, listed_files, read_manifest


@dataclass
class RunData:
    """A run folder loaded and verified: manifest, effective config and per-trial, per-arm tables."""

    path: Path
    manifest: Manifest
    config: TrialConfig
    tables: dict[tuple[int, str], dict[str, pd.DataFrame]]
    workloads: dict[int, list[workload.Request]]

    @property
    def arms(self) -> tuple[str, ...]:
        return self.config.arm_names

    @property
    def partial(self) -> bool:
        """Read on purpose while unfinished: every table that shows it says so."""
        return not self.manifest.complete

    @property
    def trials(self) -> list[int]:
        """Trials with every arm they run complete (:meth:`TrialConfig.arms_in`), in order."""
        done = {k for k, _ in self.tables}
        return sorted(k for k in done if all((k, arm) in self.tables for arm in self.config.arms_in(k)))

    def trials_of(self, arm: str) -> list[int]:
        """The complete trials (:attr:`trials`) that ran ``arm``: all of them unless the arm runs in fewer."""
        return [k for k in self.trials if (k, arm) in self.tables]


def load_run(path: str | Path, tables: tuple[str, ...] = ("requests", "tokens", "steps"),
             allow_partial: bool = False, arms: Callable[[str], bool] | None = None) -> RunData:
    """Load every complete unit of a run folder, verified (module docstring).

    A missing, corrupt, edited, foreign or unfinished run is refused with a
    :class:`dlfp.trials.runfolder.RunFolderError` naming the file and how to recover;
    ``allow_partial`` reads an interrupted run's finished arms (then :attr:`RunData.partial`);
    ``arms`` reads only the units of the arms it accepts (every file is still verified): a capacity
    run has 161 arms, and a question about one controller needs a handful.
    """
    path = Path(path)
    manifest = read_manifest(path)
    check_status(path, manifest, allow_partial)
    try:
        config = run_config(manifest)
    except ValueError as exc:
        raise ValueError(f"{path / MANIFEST}: its config no longer parses ({exc})") from None
    identity = identity_verified(path, manifest)
    for file, digest in listed_files(path, manifest):  # every file the manifest vouches for, read or not
        verify_file(file, digest)
    manifest.device_unverified = check_device(path, manifest, config, identity)
    loaded: dict[tuple[int, str], dict[str, pd.DataFrame]] = {}
    workloads: dict[int, list[workload.Request]] = {}
    for unit in manifest.complete_units():
        k, arm = unit.trial, unit.arm
        if arms is not None and not arms(arm):
            continue
        unit_dir = path / unit.label
        loaded[(k, arm)] = {t: read_trace(unit_dir / f"{t}.parquet", t, unit.files.get(f"{t}.parquet")) for t in tables}
        check_outputs(unit_dir, loaded[(k, arm)])
        if k not in workloads:
            name = f"trial-{k}/workload.parquet"
            if name not in (manifest.workloads or {}):
                raise RunFolderError(f"{path / name} has no checksum in the manifest; the manifest was edited: "
                                     "restore it")
            workloads[k] = workload.load(path / name)
    return RunData(path, manifest, config, loaded, workloads)


def gpu_claim(manifest: Manifest) -> str | None:
    """What in a measured run's manifest claims a GPU build, in words, or None for the CPU build: any
    vLLM build but a ``+cpu`` one, and ``hardware.gpus`` then names the GPUs. (:mod:`dlfp.analysis.labels`
    calls an unknown build "unknown build", never a GPU; a run recording none is still held to its
    telemetry, since a GPU build's label is what an edit would be after.)"""
    vllm = (manifest.versions or {}).get("vllm")
    if isinstance(vllm, str) and vllm.endswith("+cpu"):
        return None  # a CPU build ran on the CPU, whatever GPUs the node had
    gpus = (manifest.hardware or {}).get("gpus")
    names = [g.get("name") for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []
    listed = f" and field 'hardware.gpus' lists {names}" if names else ""
    return f"field 'versions.vllm' is {vllm!r}, not a +cpu build{listed}"


def check_device(path: Path, manifest: Manifest, config: TrialConfig, identity: bool) -> str | None:
    """Hold a measured run's GPU claim against its evidence: None where it has none to hold (a CPU build, a
    simulation) or the evidence shows it, else why it is unverified; a claim its own telemetry refutes is
    refused.

    The evidence: the manifest's identity checksum (``identity``: the run's writer vouched for its versions
    and hardware; an edit that kept the checksum is refused before this) and its checksummed telemetry. Each
    unit's ``telemetry.parquet`` samples the engine's GPUs through NVML when there are any
    (:mod:`dlfp.harness.telemetry`): a unit that sampled, yet no GPU, ran on the CPU, and a manifest claiming
    otherwise was edited (refused). A claim is verified only where some unit sampled a GPU that the
    manifest's ``hardware.gpus`` lists and no unit contradicts it. Where NVML failed (``hardware.nvml_error``),
    the run ran on a MIG slice NVML cannot sample, no unit sampled anything, or the run predates identity
    checksums, nothing shows the claim: the run still loads, labelled *unverified device*.
    """
    claim = None if config.engine.sim is not None else gpu_claim(manifest)
    if claim is None:
        return None
    hardware = manifest.hardware or {}
    gpus = hardware.get("gpus")
    gpus = gpus if isinstance(gpus, list) else []
    listed = {f"gpu{g['index']}" for g in gpus if isinstance(g, dict) and "index" in g}
    seen: set[str] = set()
    for unit in manifest.complete_units():
        file = path / unit.label / "telemetry.parquet"
        telemetry = read_table(file, "telemetry", unit.files.get(file.name))
        sources = sorted(set(telemetry["source"].dropna()))
        if sources and not any(s.startswith("gpu") for s in sources):
            visible = hardware.get("cuda_visible_devices")
            if isinstance(visible, str) and any(e.strip().startswith("MIG-") for e in visible.split(",")):
                continue  # NVML samples no MIG slice: CPU telemetry alone proves nothing there
            if hardware.get("nvml_error"):
                continue  # NVML failed: the unit could sample the CPU only
            raise RunFolderError(
                f"{path / MANIFEST} labels the run a GPU measurement ({claim}), but {file}, which matches its "
                f"checksum, sampled no GPU (sources {sources}): it ran on the CPU, so the manifest was edited; "
                "restore it from version control (a GPU run recorded without NVML telemetry cannot show what it "
                "ran on: rerun it with the gpu extra installed)")
        seen.update(s for s in sources if s.startswith("gpu"))
    if not identity:
        return "its manifest has no identity checksum (a run made before they were recorded, or an edited one)"
    if seen & listed:
        return None
    error = hardware.get("nvml_error")
    if isinstance(error, str) and error:
        return f"NVML failed ({error})"
    return f"its telemetry sampled {sorted(seen)}, none of the GPUs its manifest lists" if seen else \
        "no unit's telemetry sampled a GPU"


def read_trace(path: Path, table: str, digest: str | None) -> pd.DataFrame:
    """One table, verified (:func:`~dlfp.trials.runfolder.read_table`) and, for requests and tokens,
    checked as the metrics will read it, here where the file can be named."""
    df = read_table(path, table, digest)
    try:
        if table == "requests":
            metrics.check_requests(df)
        elif table == "tokens":
            metrics.itl_gaps(df)
    except ValueError as exc:
        raise RunFolderError(f"{path}: {exc}; restore it or rerun the trial") from None
    return df


def output_digests(requests: pd.DataFrame, tokens: pd.DataFrame) -> dict[str, str]:
    """Each request's output digest (:func:`dlfp.harness.driver.output_digest`), for the requests that
    produced a token: the requests table's own, or (a run stored before it had them) made from the
    token ids."""
    if "output_digest" in requests.columns:
        produced = requests[requests["output_len"] > 0]
        return dict(zip(produced["request_id"], produced["output_digest"], strict=True))
    return {rid: output_digest(ids.to_numpy()) for rid, ids in tokens.sort_values(["request_id", "index"])
            .groupby("request_id")["token_id"]}


def check_outputs(unit_dir: Path, unit: dict[str, pd.DataFrame]) -> None:
    """Refuse a unit whose outputs cannot be compared across arms: its requests table has no output
    digests and its tokens table no token ids to make them from (each alone is a valid table)."""
    requests, tokens = unit.get("requests"), unit.get("tokens")
    if requests is not None and tokens is not None and "output_digest" not in requests.columns \
            and "token_id" not in tokens.columns:
        raise RunFolderError(f"{unit_dir / 'tokens.parquet'}: column 'token_id' is missing and "
                             f"{unit_dir / 'requests.parquet'} has no 'output_digest', so this arm's outputs "
                             "cannot be compared; restore them or rerun the trial")


def accounting(requests: pd.DataFrame, tokens: pd.DataFrame, wl: list[workload.Request]) -> dict[str, int]:
    """Exact token accounting: every request's prompt and output counts against the workload."""
    want = {r.request_id: (r.prompt_len, r.output_len) for r in wl}
    got = requests.set_index("request_id")
    per_req = tokens.groupby("request_id").size()
    bad_prompt = sum(int(got.at[rid, "prompt_len"]) != p for rid, (p, _) in want.items() if rid in got.index)
    bad_output = sum(
        got.at[rid, "status"] == "ok"
        and not (int(got.at[rid, "output_len"]) == o == int(per_req.get(rid, 0)))
        for rid, (_, o) in want.items() if rid in got.index
    )
    return {"n_expected": len(want), "n_recorded": int(got.index.isin(list(want)).sum()),
            "prompt_mismatches": int(bad_prompt), "output_mismatches": int(bad_output)}


def stall_threshold_s(config: TrialConfig) -> float:
    """What counts as a stall: a gap above the run's ITL objective (DLFP's ``itl_slo_ms``)."""
    return parse_params(config.dlfp).itl_slo_ms / 1000.0


def target_s(config: TrialConfig) -> float:
    """DLFP's target interval T* of the run (as configured for its reference): the line above which
    a stock gap is a prefill stall, what the design predicts the share of."""
    return parse_params(config.dlfp).target_interval_s


def trial_rows(run: RunData) -> pd.DataFrame:
    """One row per (trial, arm): summary metrics, stalls, accounting and agreement with stock."""
    config = run.config
    threshold, long_gap = stall_threshold_s(config), target_s(config)
    rows = []
    for k in run.trials:
        arms = config.arms_in(k)
        outputs = {arm: output_digests(run.tables[(k, arm)]["requests"], run.tables[(k, arm)]["tokens"])
                   for arm in arms}
        for arm in arms:
            t = run.tables[(k, arm)]
            try:
                agree = metrics.output_agreement(outputs[REFERENCE], outputs[arm])
                summary = metrics.summarize(t["requests"], t["tokens"], config.ttft_slo_s, config.tpot_slo_s,
                                            threshold, long_gap)
                counts = accounting(t["requests"], t["tokens"], run.workloads[k])
            except ValueError as exc:
                raise ValueError(f"{run.path}/trial-{k}/{arm}: {exc}") from None
            rows.append({"trial": k, "seed": config.seeds[k], "arm": arm, **summary, **counts,
                         "agreement_rate": agree["rate"], "mismatched": len(agree["mismatched"]),
                         "compared": agree["n_compared"]})
    return pd.DataFrame(rows)
