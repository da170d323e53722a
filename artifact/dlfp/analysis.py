"""From a run folder's raw traces to the paper-style paired tables (no cached numbers).

Everything here is recomputed from ``requests``/``tokens`` Parquet tables, each verified against
the manifest's checksum and the expected schema first (:mod:`dlfp.runfolder`): per trial and arm
the summary of :func:`dlfp.metrics.summarize`, exact token accounting against the saved
workload, output agreement of every arm with the stock reference, stall events, and per-trial
paired reductions with a Student's t interval across trials. A run whose stock arm's stalls
fell outside the design's regime (:mod:`dlfp.design`) is flagged wherever it is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp import metrics, stats, workload
from dlfp.design import Rules
from dlfp.labels import device, measured_on
from dlfp.params import parse_params
from dlfp.runfolder import (
    MANIFEST,
    RunFolderError,
    check_status,
    complete_units,
    listed_files,
    read_manifest,
    read_table,
    verify_file,
)
from dlfp.trialconfig import REFERENCE, TrialConfig, run_config

HEADLINE = ("itl_p99_ms", "ttft_p99_ms")
MIN_BOOTSTRAP_TRIALS = 5
"""Below this many trials a resampled interval is a range of a handful of values: not reported."""


@dataclass
class RunData:
    """A run folder loaded and verified: manifest, effective config and per-trial, per-arm tables."""

    path: Path
    manifest: dict[str, Any]
    config: TrialConfig
    tables: dict[tuple[int, str], dict[str, pd.DataFrame]]
    workloads: dict[int, list[workload.Request]]

    @property
    def arms(self) -> tuple[str, ...]:
        return self.config.arm_names

    @property
    def partial(self) -> bool:
        """Read on purpose while unfinished: every table that shows it says so."""
        return self.manifest["status"] != "complete"

    @property
    def trials(self) -> list[int]:
        """Trials with every arm complete, in order."""
        done = {k for k, _ in self.tables}
        return sorted(k for k in done if all((k, arm) in self.tables for arm in self.arms))


def load_run(path: str | Path, tables: tuple[str, ...] = ("requests", "tokens", "steps"),
             allow_partial: bool = False) -> RunData:
    """Load every complete unit of a run folder, verified (module docstring).

    A missing, corrupt, edited, foreign or unfinished run is refused with a
    :class:`dlfp.runfolder.RunFolderError` naming the file and how to recover;
    ``allow_partial`` reads an interrupted run's finished arms (then :attr:`RunData.partial`).
    """
    path = Path(path)
    manifest = read_manifest(path)
    check_status(path, manifest, allow_partial)
    try:
        config = run_config(manifest)
    except ValueError as exc:
        raise ValueError(f"{path / MANIFEST}: its config no longer parses ({exc})") from None
    for file, digest in listed_files(path, manifest):  # every file the manifest vouches for, read or not
        verify_file(file, digest)
    loaded: dict[tuple[int, str], dict[str, pd.DataFrame]] = {}
    workloads: dict[int, list[workload.Request]] = {}
    for unit in complete_units(manifest):
        k, arm = unit["trial"], unit["arm"]
        unit_dir = path / f"trial-{k}" / arm
        files = unit.get("files") or {}
        loaded[(k, arm)] = {t: read_table(unit_dir / f"{t}.parquet", t, files.get(f"{t}.parquet")) for t in tables}
        if k not in workloads:
            name = f"trial-{k}/workload.parquet"
            if name not in (manifest.get("workloads") or {}):
                raise RunFolderError(f"{path / name} has no checksum in the manifest; the manifest was edited: "
                                     "restore it")
            workloads[k] = workload.load(path / name)
    return RunData(path, manifest, config, loaded, workloads)


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
        token_ids = {
            arm: run.tables[(k, arm)]["tokens"].groupby("request_id")["token_id"].apply(list).to_dict()
            for arm in run.arms
        }
        for arm in run.arms:
            t = run.tables[(k, arm)]
            try:
                agree = metrics.output_agreement(token_ids[REFERENCE], token_ids[arm])
                summary = metrics.summarize(t["requests"], t["tokens"], config.ttft_slo_s, config.tpot_slo_s,
                                            threshold, long_gap)
                counts = accounting(t["requests"], t["tokens"], run.workloads[k])
            except ValueError as exc:
                raise ValueError(f"{run.path}/trial-{k}/{arm}: {exc}") from None
            rows.append({"trial": k, "seed": config.seeds[k], "arm": arm, **summary, **counts,
                         "agreement_rate": agree["rate"], "mismatched": len(agree["mismatched"])})
    return pd.DataFrame(rows)


def reductions(rows: pd.DataFrame, metric: str, arm: str = "dlfp") -> list[float]:
    """Per-trial paired reductions of ``metric``, stock -> ``arm``, in percent, in trial order."""
    wide = rows.pivot(index="trial", columns="arm", values=metric)
    out = []
    for k, s, d in zip(wide.index, wide[REFERENCE], wide[arm], strict=True):
        try:
            out.append(stats.paired_reduction(s, d))
        except ValueError as exc:  # e.g. an arm whose requests all failed has no P99
            raise ValueError(f"trial {k}, {metric}, {REFERENCE} -> {arm}: {exc}") from None
    return out


def paired(rows: pd.DataFrame, metric: str, arm: str = "dlfp") -> dict[str, Any]:
    """Per-trial reductions of ``metric`` (stock -> ``arm``, %), their mean and CI across trials.

    Student's t with n - 1 df from two trials on; the percentile bootstrap only from
    :data:`MIN_BOOTSTRAP_TRIALS` on (with three trials it would resample three numbers).
    """
    reductions_pct = reductions(rows, metric, arm)
    out: dict[str, Any] = {"metric": metric, "arm": arm, "reductions_pct": reductions_pct,
                           "mean_pct": float(sum(reductions_pct) / len(reductions_pct)) if reductions_pct else math.nan}
    if len(reductions_pct) >= 2:
        _, out["t_lo"], out["t_hi"] = stats.t_ci(reductions_pct)
    if len(reductions_pct) >= MIN_BOOTSTRAP_TRIALS:
        _, out["boot_lo"], out["boot_hi"] = stats.bootstrap_ci(reductions_pct)
    return out


def effect_words(p: dict[str, Any], increase: bool = False) -> str:
    """What a paired reduction says, as a verb phrase following its interval: "shows no
    detectable effect on it" when the CI spans zero, never "reduces it" then (``increase``
    words a positive mean as a rise, for TTFT)."""
    kind, mean = stats.direction(p.get("t_lo", math.nan), p.get("t_hi", math.nan)), p["mean_pct"]
    if kind == "untested":
        return "cannot be judged from one trial (no interval)"
    if kind == "none":
        return "shows no detectable effect on it"
    if increase:
        return f"raises it by a mean of {-mean:.1f}%" if mean < 0 else f"lowers it by a mean of {mean:.1f}%"
    return f"reduces it by a mean of {mean:.1f}%" if mean > 0 else f"raises it by a mean of {-mean:.1f}%"


def scope_note(run: RunData) -> str:
    """What kind of evidence a run is, for prose beside its numbers, from its manifest alone."""
    if run.config.engine.sim is not None:
        return "simulated numbers (a real vLLM scheduler on a modeled accelerator): evidence about the mechanism, " \
               "never a GPU measurement"
    if not str((run.manifest.get("versions") or {}).get("vllm", "")).endswith("+cpu"):
        return (f"GPU measurements of {run.config.engine.model} ({run.config.engine.dtype}): comparable with the "
                "paper's numbers where model, precision and GPU match its setting")
    return (f"CPU measurements of the weightless {run.config.engine.model} ({run.config.engine.dtype}): they test "
            "the mechanism, not the paper's GPU numbers")


def stock_budget(run: RunData) -> int:
    """Stock's token budget (``max_num_batched_tokens``): the size of the win depends on it."""
    return run.config.engine_for(REFERENCE).max_num_batched_tokens


def regime(run: RunData, rows: pd.DataFrame | None = None) -> dict[str, Any]:
    """Was the run inside its design's regime? Predicted problems (before the trials) and the
    realized share of stock's gaps that are prefill stalls (above T*, the quantity the design
    predicts), against the design rules' bounds."""
    rows = trial_rows(run) if rows is None else rows
    design = run.manifest.get("design") or {}
    rules = Rules(**design["rules"]) if "rules" in design else Rules()
    stock = rows[rows.arm == REFERENCE]
    realized = float(stock.long_gap_share.mean()) if len(stock) else math.nan
    flags = [f"predicted: {p}" for p in design.get("problems", [])]
    if not math.isnan(realized) and realized < rules.realized_min_stall_share:
        flags.append(f"stock's prefill stalls (gaps above T*) were {realized:.2%} of gaps, below the "
                     f"{rules.realized_min_stall_share:.1%} a pooled P99 reliably sees")
    if not math.isnan(realized) and realized > rules.max_stall_share:
        flags.append(f"stock's prefill stalls (gaps above T*) were {realized:.1%} of gaps, above "
                     f"{rules.max_stall_share:.0%}: not a tail")
    if "design" not in run.manifest:
        flags.append("no design record (run made before pre-flight designs)")
    if run.partial:
        flags.append(f"partial run (status {run.manifest['status']})")
    return {"predicted_stall_share": (design.get("predicted") or {}).get("stall_share", math.nan),
            "realized_stall_share": realized, "flags": flags,
            "verdict": "in regime" if not flags else "OUTSIDE REGIME: " + "; ".join(flags)}


def design_table(runs: list[RunData], outcome: bool = False) -> pd.DataFrame:
    """Per run: what its pre-flight measured, the design derived from it (rules version), the stall
    share it predicted for stock and the one measured afterwards, and the regime verdict; with
    ``outcome``, also DLFP's paired P99 ITL reduction and what it says."""
    out = []
    for run in runs:
        design = run.manifest.get("design") or {}
        m, p = design.get("measured") or {}, design.get("predicted") or {}
        rows = trial_rows(run)
        cfg, verdict = run.config, regime(run, rows)
        out.append({
            "run": run.path.name, "design": design.get("kind", "none (run predates designs)"),
            "rules": design.get("rules_version", math.nan), "inputs": m.get("source", ""),
            "decode step d (ms)": 1e3 * m.get("decode_s", math.nan),
            "prefill fixed a (ms)": 1e3 * m.get("prefill_fixed_s", math.nan),
            "prefill per token b (us)": 1e6 * m.get("prefill_per_token_s", math.nan),
            "arrival rate (req/s)": cfg.workload["rate_rps"],
            "long share": p.get("long_share", math.nan),
            "DLFP target T* (ms)": 1e3 * p.get("target_s", math.nan),
            "predicted stall (ms)": 1e3 * p.get("stall_s", math.nan),
            "TPOT SLO (ms)": 1e3 * cfg.tpot_slo_s, "TTFT SLO (ms)": 1e3 * cfg.ttft_slo_s,
            "prefill stalls predicted, stock (% of gaps)": 100 * p.get("stall_share", math.nan),
            "prefill stalls measured, stock (% of gaps above T*)": 100 * verdict["realized_stall_share"],
            "regime": verdict["verdict"],
        })
        if outcome and "dlfp" in run.arms:
            itl = paired(rows, "itl_p99_ms")
            out[-1].update({"engine threads": (run.manifest.get("engine_env") or {}).get("VLLM_CPU_OMP_THREADS_BIND",
                                                                                         "not recorded"),
                            "P99 ITL reduction (%)": itl["mean_pct"], "ITL CI lo (%)": itl.get("t_lo", math.nan),
                            "ITL CI hi (%)": itl.get("t_hi", math.nan), "DLFP on P99 ITL": effect_words(itl)})
    return pd.DataFrame(out)


def trials_table(runs: list[RunData]) -> pd.DataFrame:
    """Per run: trials x requests, DLFP's mean P99 ITL reduction, its paired 95% CI and the CI's
    width, and the wall time of all arms (engine starts included): which split of the same work
    into trials gives the tighter interval."""
    out = []
    for run in runs:
        p = paired(trial_rows(run), "itl_p99_ms")
        lo, hi = p.get("t_lo", math.nan), p.get("t_hi", math.nan)
        out.append({
            "run": run.path.name, "trials": len(run.trials), "requests per trial": run.config.workload["n_requests"],
            "P99 ITL reduction (%)": p["mean_pct"], "CI lo (%)": lo, "CI hi (%)": hi, "CI width (points)": hi - lo,
            "arms' wall time (s)": sum(u.get("wall_s", 0.0) for u in complete_units(run.manifest)),
        })
    return pd.DataFrame(out).set_index("run")


def paper_table(rows: pd.DataFrame, arm: str = "dlfp") -> pd.DataFrame:
    """The paper's table: per trial P99 ITL and TTFT of stock and ``arm``, reductions, stalls, SLO,
    failures, agreement."""
    wide = rows.pivot(index="trial", columns="arm")
    table = pd.DataFrame({
        "seed": wide[("seed", REFERENCE)],
        "P99 ITL stock (ms)": wide[("itl_p99_ms", REFERENCE)],
        "P99 ITL DLFP (ms)": wide[("itl_p99_ms", arm)],
        "ITL reduction (%)": reductions(rows, "itl_p99_ms", arm),
        "P99 TTFT stock (ms)": wide[("ttft_p99_ms", REFERENCE)],
        "P99 TTFT DLFP (ms)": wide[("ttft_p99_ms", arm)],
        "TTFT change (%)": [-r for r in reductions(rows, "ttft_p99_ms", arm)],
        "gaps > ITL SLO, stock (%)": 100 * wide[("stall_share", REFERENCE)],
        "gaps > ITL SLO, DLFP (%)": 100 * wide[("stall_share", arm)],
        "SLO stock": wide[("slo_compliance", REFERENCE)],
        "SLO DLFP": wide[("slo_compliance", arm)],
        "failures": wide[("n_failed", REFERENCE)] + wide[("n_failed", arm)],
        "output agreement": wide[("agreement_rate", arm)],
    })
    table.index.name = "trial"
    return table


def arms_table(run: RunData, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every arm against stock: mean P99 ITL (pooled and per request), P99 TTFT, stalls,
    throughput, and the paired reduction of P99 ITL with its t interval."""
    rows = trial_rows(run) if rows is None else rows
    out = []
    for arm in run.arms:
        mine = rows[rows.arm == arm]
        p = paired(rows, "itl_p99_ms", arm) if arm != REFERENCE else {}
        t = paired(rows, "ttft_p99_ms", arm) if arm != REFERENCE else {}
        out.append({
            "arm": arm, "settings": run.config.arm_label(arm),
            "P99 ITL (ms)": mine.itl_p99_ms.mean(), "P99 per-request ITL (ms)": mine.itl_req_p99_ms.mean(),
            "P99 TTFT (ms)": mine.ttft_p99_ms.mean(), "gaps > ITL SLO (%)": 100 * mine.stall_share.mean(),
            "worst gap (ms)": mine.worst_gap_ms.max(), "throughput (tok/s)": mine.output_throughput_tps.mean(),
            "ITL reduction vs stock (%)": p.get("mean_pct", math.nan),
            "ITL CI lo (%)": p.get("t_lo", math.nan), "ITL CI hi (%)": p.get("t_hi", math.nan),
            "TTFT change vs stock (%)": -t.get("mean_pct", math.nan) if t else math.nan,
            "output agreement": mine.agreement_rate.mean(),
        })
    return pd.DataFrame(out)


def format_report(run: RunData) -> str:
    """The text ``dlfp analyze`` prints."""
    rows = trial_rows(run)
    if rows.empty:
        return f"{run.path}: no trial has all arms complete yet (missing: {run.manifest.get('missing')})"
    lines = [
        f"run {run.path} ({run.manifest.get('name')}, status {run.manifest.get('status')}"
        + (", PARTIAL: only its finished arms" if run.partial else "") + ")",
        source_line(run),
        f"stock token budget (max_num_batched_tokens): {stock_budget(run)}; stall = gap above "
        f"{stall_threshold_s(run.config) * 1e3:.1f} ms; regime: {regime(run, rows)['verdict']}",
        "",
    ]
    if "dlfp" in run.arms:
        lines += [paper_table(rows).to_string(float_format=lambda x: f"{x:.2f}"), ""]
    if len(run.arms) > 2 or "dlfp" not in run.arms:
        lines += [arms_table(run, rows).to_string(index=False, float_format=lambda x: f"{x:.2f}"), ""]
    for arm in [a for a in run.arms if a != REFERENCE]:
        for metric in HEADLINE:
            p = paired(rows, metric, arm)
            line = f"{arm} {metric}: mean reduction {p['mean_pct']:.1f}%"
            if "t_lo" in p:
                line += (f", paired 95% CI (Student's t, {len(p['reductions_pct']) - 1} df) "
                         f"[{p['t_lo']:.1f}%, {p['t_hi']:.1f}%]")
            if "boot_lo" in p:
                line += f", bootstrap [{p['boot_lo']:.1f}%, {p['boot_hi']:.1f}%]"
            lines.append(line + f" ({effect_words(p, increase=metric.startswith('ttft'))})")
    acc = rows[["prompt_mismatches", "output_mismatches", "n_recorded", "n_expected"]].sum()
    lines.append(f"token accounting: {int(acc.n_recorded)} of {int(acc.n_expected)} request-arms recorded; "
                 f"{int(acc.prompt_mismatches)} prompt and {int(acc.output_mismatches)} output mismatches")
    return "\n".join(lines)


def interval_divergence(steps: pd.DataFrame) -> float:
    """Median relative gap between the two feedback signals over mixed steps.

    For step ``j``: the scheduler-call interval that follows it (``s_(j+1) - s_j``, the
    paper's signal) against its completion cadence (``c_j - c_(j-1)``, the completion-timed
    signal). Near 0 in synchronous engines; under async scheduling the first measures a
    neighbouring step, the mechanism the paper blames for its negative result.
    """
    s = steps.sort_values("step")
    sched = s.schedule_t.shift(-1) - s.schedule_t
    comp = s.complete_t - s.complete_t.shift(1)
    mixed = (s.prefill_tokens > 0) & (s.decode_reqs > 0) & sched.notna() & (comp > 0)
    if not mixed.any():
        return math.nan
    return float(((sched[mixed] - comp[mixed]).abs() / comp[mixed]).median())


def generalization_table(runs: list[RunData], arm: str = "dlfp") -> pd.DataFrame:
    """One row per run (model shape, TP size): ``arm``'s effect, stalls, regime, signal divergence."""
    out = []
    for run in runs:
        rows = trial_rows(run)
        if rows.empty or arm not in run.arms:
            continue
        engine, sim = run.config.engine, run.config.engine.sim
        itl, ttft = paired(rows, "itl_p99_ms", arm), paired(rows, "ttft_p99_ms", arm)
        div = [interval_divergence(run.tables[(k, arm)]["steps"]) for k in run.trials]
        params = run.config.engine_for(arm).dlfp
        out.append({
            "run": run.path.name, "model": engine.model,
            "device": f"{sim.get('profile', 'a100')} (modeled)" if sim is not None else device(run.manifest),
            "TP": sim.get("tp", 1) if sim is not None else engine.tensor_parallel_size,
            "DLFP variant": ", ".join(f"{k}={v}" for k, v in sorted(params.items())
                                      if k not in ("itl_slo_ms", "enabled", "step_log")) or "paper's law",
            "design": (run.manifest.get("design") or {}).get("kind", "none"),
            "stock budget": stock_budget(run),
            "trials": len(run.trials),
            "P99 ITL stock (ms)": rows[rows.arm == REFERENCE].itl_p99_ms.mean(),
            "P99 ITL DLFP (ms)": rows[rows.arm == arm].itl_p99_ms.mean(),
            "ITL reduction (%)": itl["mean_pct"],
            "ITL CI lo (%)": itl.get("t_lo", math.nan), "ITL CI hi (%)": itl.get("t_hi", math.nan),
            "TTFT reduction (%)": ttft["mean_pct"],
            "prefill stalls stock (% of gaps)": 100 * rows[rows.arm == REFERENCE].long_gap_share.mean(),
            "gaps > ITL SLO, stock (%)": 100 * rows[rows.arm == REFERENCE].stall_share.mean(),
            "gaps > ITL SLO, DLFP (%)": 100 * rows[rows.arm == arm].stall_share.mean(),
            "signal divergence": float(pd.Series(div).median()),
            "regime": regime(run, rows)["verdict"],
            "source": source_line(run),
        })
    return pd.DataFrame(out)


LATE_SEND_MS = 10.0
"""A unit whose client sent its requests later than this (p99) had its arrival process disturbed,
typically by another process on the machine; the runner records it per unit."""


def lateness_note(run: RunData) -> str:
    """Which units' requests were sent late (p99 above :data:`LATE_SEND_MS`), from the manifest."""
    late = []
    for u in run.manifest.get("units") or []:
        p99 = (u.get("send_lateness_ms") or {}).get("p99") if isinstance(u, dict) else None
        if isinstance(p99, (int, float)) and not isinstance(p99, bool) and p99 > LATE_SEND_MS:
            late.append(f"trial-{u.get('trial')}/{u.get('arm')} {p99:.0f} ms")
    return (f"late sends (p99 over {LATE_SEND_MS:.0f} ms): {', '.join(late)}" if late
            else f"every unit sent its requests within {LATE_SEND_MS:.0f} ms of schedule (p99)")


def source_line(run: RunData) -> str:
    """Where a run's numbers come from: measured (machine, vLLM build) or simulated (profile)."""
    label = measured_on(run.manifest)
    return label if label.startswith("simulated") else f"measured: {label}"
