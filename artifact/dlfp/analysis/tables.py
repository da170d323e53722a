"""The paper-style tables of loaded runs: paired results, design and regime, arms, ladders."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dlfp.analysis.labels import build, device, source_line, stock_budget
from dlfp.analysis.runs import RunData, stall_threshold_s, trial_rows
from dlfp.analysis.stats import effect_words, paired, reductions
from dlfp.trials.arms import REFERENCE
from dlfp.trials.config import TRIAL_DLFP
from dlfp.trials.costcheck import drift
from dlfp.trials.design import Rules
from dlfp.trials.runfolder import PREFLIGHT_STEPS, read_table

HEADLINE = ("itl_p99_ms", "ttft_p99_ms")


def regime(run: RunData, rows: pd.DataFrame | None = None) -> dict[str, Any]:
    """Was the run inside its design's regime? Predicted problems (before the trials), the realized
    share of stock's gaps that are prefill stalls (above T*, the quantity the design predicts; pooled,
    against the design rules' bounds), and, per trial, stock's gaps above the ITL objective, the
    threshold the P99 ITL verdict is judged at.

    A trial in which fewer than ``realized_min_stall_share`` of stock's gaps exceed the objective has
    a stock P99 ITL at or under it: that trial cannot show what the design set it up to show, however
    the trials pool. A machine that ran the pre-flight slower than the trials (a busy laptop) designs
    exactly such trials, and pooling hid them (one trial at 1.75%, two at 0%, "in regime")."""
    rows = trial_rows(run) if rows is None else rows
    design = run.manifest.design or {}
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
    thin = stock[~(stock.stall_share >= rules.realized_min_stall_share)]  # NaN (no gaps) counts as thin
    if len(thin):
        shares = ", ".join(f"trial {int(t)}: {v:.2%}" for t, v in zip(thin.trial, thin.stall_share, strict=True))
        flags.append(f"stock's gaps above the ITL objective ({stall_threshold_s(run.config) * 1e3:g} ms) were "
                     f"below the {rules.realized_min_stall_share:.1%} a P99 reliably sees in {len(thin)} of "
                     f"{len(stock)} trials ({shares}): there stock's P99 ITL already meets the objective")
    drifted = cost_checks(run)
    drifted = drifted[drifted.off.str.len() > 0] if len(drifted) else drifted
    if len(drifted):
        flags.append(f"stock's steps did not cost what the pre-flight measured in {len(drifted)} of {len(stock)} "
                     "trials (" + "; ".join(f"trial {int(t)}: {', '.join(off)}" for t, off in
                                           zip(drifted.trial, drifted.off, strict=True))
                     + f", beyond the {rules.max_cost_drift:g}x allowed): the load, target and ITL objective were "
                     "derived for other step costs (a machine busy during the pre-flight or the trials, or trial "
                     "steps unlike the pre-flight's probes); rerun on a quiet machine")
    flags += async_mismatches(run)
    if run.manifest.design is None:
        flags.append("no design record (run made before pre-flight designs)")
    if run.partial:
        flags.append(f"partial run (status {run.manifest.status})")
    return {"predicted_stall_share": (design.get("predicted") or {}).get("stall_share", math.nan),
            "realized_stall_share": realized, "flags": flags,
            "verdict": "in regime" if not flags else "OUTSIDE REGIME: " + "; ".join(flags)}


def cost_checks(run: RunData) -> pd.DataFrame:
    """Per trial, its stock unit's steps against the pre-flight's (:mod:`dlfp.trials.costcheck`): the
    decode and mixed step ratios, how many steps each is a median of, and ``off``, the ratios outside the
    design's ``max_cost_drift`` in words. Empty where the run has no pre-flight record or its step
    tables were not loaded."""
    design = run.manifest.design or {}
    digest = (design.get("files") or {}).get(PREFLIGHT_STEPS)
    measured = design.get("measured")
    decoders = measured.get("decoders") if isinstance(measured, dict) else None
    if digest is None or isinstance(decoders, bool) or not isinstance(decoders, int) or decoders < 1:
        return pd.DataFrame(columns=["trial", *CHECK_COLUMNS])  # no pre-flight record, or an edited one
    rules = Rules(**design["rules"]) if "rules" in design else Rules()
    preflight = read_table(run.path / PREFLIGHT_STEPS, "steps", digest)
    rows = []
    for k in run.trials:
        steps = run.tables[(k, REFERENCE)].get("steps")
        if steps is None:
            continue
        d = drift(preflight, steps, decoders)
        rows.append({"trial": k, "decode_ratio": d.decode_ratio, "decode_steps": d.decode_steps,
                     "mixed_ratio": d.mixed_ratio, "mixed_steps": d.mixed_steps, "off": d.off_by(rules.max_cost_drift)})
    return pd.DataFrame(rows, columns=["trial", *CHECK_COLUMNS])


CHECK_COLUMNS = ("decode_ratio", "decode_steps", "mixed_ratio", "mixed_steps", "off")


def async_mismatches(run: RunData) -> list[str]:
    """Units whose engine ran another async mode than their config asked for (from each unit's
    ``ran`` record, :data:`dlfp.harness.result.RAN`): explicitly, or, where the config left it to vLLM,
    synchronously on a GPU build, whose default is async. A modeled accelerator's mode is the cost
    model's (``engine.sim``), not the scheduler's, so simulated runs are not compared."""
    if run.config.engine.sim is not None:
        return []
    gpu_build = build(run.manifest) == "gpu"
    out = []
    for u in run.manifest.units:
        ran = (u.ran or {}).get("async_scheduling")
        if not isinstance(ran, bool) or u.arm not in run.arms:
            continue
        asked = run.config.engine_for(u.arm).async_scheduling
        expected = bool(asked) if asked is not None else gpu_build
        if ran != expected:
            why = "its config asked for" if asked is not None else "vLLM's default on this build is"
            out.append(f"{u.label} ran with async scheduling {'on' if ran else 'off'}, "
                       f"though {why} {'on' if expected else 'off'}")
    return out


def design_table(runs: list[RunData], outcome: bool = False) -> pd.DataFrame:
    """Per run: what its pre-flight measured, the design derived from it (rules version), the stall
    share it predicted for stock and the one measured afterwards, and the regime verdict; with
    ``outcome``, also DLFP's paired P99 ITL reduction and what it says."""
    out = []
    for run in runs:
        design = run.manifest.design or {}
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
            out[-1].update({"engine threads": (run.manifest.engine_env or {}).get("VLLM_CPU_OMP_THREADS_BIND",
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
            "arms' wall time (s)": sum(u.wall_s or 0.0 for u in run.manifest.complete_units()),
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


BY_CONSTRUCTION = "by construction (modeled tokens)"
"""What output agreement is on a modeled accelerator: its executor's tokens are a hash of the
request and position, identical in every arm whatever the schedule, so agreement checks nothing."""


def arms_table(run: RunData, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every arm against stock: mean P99 ITL (pooled and per request), P99 TTFT, stalls,
    throughput, and the paired reduction of P99 ITL with its t interval; output agreement where
    it is a check (:data:`BY_CONSTRUCTION` on a modeled accelerator)."""
    rows = trial_rows(run) if rows is None else rows
    simulated = run.config.engine.sim is not None
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
            "output agreement": BY_CONSTRUCTION if simulated else mine.agreement_rate.mean(),
        })
    return pd.DataFrame(out)


def interval_divergence(steps: pd.DataFrame) -> float:
    """Median relative gap between the two feedback signals over mixed steps: the one definition
    of "signal divergence" (the book) and "proxy error" (``dlfp gpu-check``), which both call it.

    For step ``j``: the scheduler-call interval that follows it (``s_(j+1) - s_j``, the paper's
    signal) against its completion cadence (``c_j - c_(j-1)``, the ``completion`` signal), as
    ``|interval - cadence| / cadence``. ``c`` is each step's best completion time, the one the
    controller takes (:mod:`dlfp.control.signals`): the executor's stamp (``exec_done_t``, on a GPU
    the device's finish) where the step log says the step used it (``complete_source``), else the
    collect time ``complete_t``; a run logged before ``complete_source`` existed gets the same
    choice rebuilt by :func:`~dlfp.control.signals.best_completions`, and a run without stamps
    the collect times, as before stamps existed. Near 0 in synchronous engines; under async
    scheduling the interval measures a neighbouring step, the mechanism the paper blames for its
    negative result.
    """
    from dlfp.control.signals import EXEC_DONE, best_completions

    s = steps.sort_values("step")
    complete = s.complete_t.astype(float)
    if "complete_source" in s and "exec_done_t" in s and s.complete_source.notna().any():
        done = complete.where(s.complete_source.ne(EXEC_DONE).fillna(True).astype(bool), s.exec_done_t.astype(float))
    elif "exec_done_t" in s and s.exec_done_t.notna().any():
        times, _ = best_completions(s.schedule_t.astype(float).tolist(), complete.tolist(),
                                    s.exec_done_t.astype(float).tolist())
        done = pd.Series(times, index=s.index)
    else:
        done = complete
    sched = s.schedule_t.shift(-1) - s.schedule_t
    comp = done - done.shift(1)
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
        div = [interval_divergence(run.tables[(k, arm)]["steps"]) for k in run.trials_of(arm)]
        params = run.config.engine_for(arm).dlfp
        out.append({
            "run": run.path.name, "model": engine.model,
            "device": f"{sim.get('profile', 'a100')} (modeled)" if sim is not None else device(run.manifest),
            "TP": sim.get("tp", 1) if sim is not None else engine.tensor_parallel_size,
            "DLFP variant": ", ".join(f"{k}={v}" for k, v in sorted(params.items())
                                      if k not in ("itl_slo_ms", "enabled", "step_log")
                                      and not (k in TRIAL_DLFP and TRIAL_DLFP[k] == v))  # a trial's defaults
                            or "paper's law",
            "design": (run.manifest.design or {}).get("kind", "none"),
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
