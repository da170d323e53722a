"""``dlfp plan``: a deployer's capacity question, answered in virtual time.

Given a model shape (a shipped name or a Hugging Face config directory), a GPU cost profile (shipped or
calibrated), a tensor-parallel size, a workload (a shipped one or a trace file, :mod:`dlfp.harness.tracefit`)
and two SLOs (P99 ITL and P99 TTFT), it runs the capacity study's sweep (:mod:`dlfp.trials.sweep`: seven
loads from light to past stock's saturation, every arm on the same seeded requests) for stock, the fixed
token budgets, the prefill cadences, the paper's law and the SLO controller (both holding the given ITL
SLO), on the modeled accelerator in virtual time (:mod:`dlfp.sim.virtual`), and prints which setting
carries the most load within both SLOs, what the trials cannot tell from it, and the vLLM arguments
that set it, beside a figure of P99 ITL and goodput against the rate. Every number is *simulated*.

Everything is checked before any work: the model and profile exist, TP divides the heads, the weights
leave a KV cache, the engine-core cost profile exists (virtual time prices the engine core), the trace is well formed,
and each SLO is above what the modeled device can do at all (the ITL SLO above one request's decode
step, the TTFT SLO above the shortest prompt's prefill on an idle engine): a sweep against an SLO no
step can meet would only report zeros.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from dlfp.paths import CONFIGS, model_label, model_path

WORKLOADS = ("studies", "field")
"""Shipped workloads: the studies' mix (Poisson arrivals; short chats decoding while 1.5-2k-token prompts
arrive) and the field-like one (``configs/workloads-field.yaml``: bursty arrivals, heavy-tailed chat and
summarization lengths, long-context prompts)."""
ARMS = ("stock", "mbt-256", "mbt-512", "mbt-1024", "mbt-2048", "cadence-2", "cadence-4", "interval-2", "dlfp",
        "dlfp-slo", "dlfp-deadline")
"""Stock, the fixed budgets, the prefill cadences, vLLM's prefill interval with its saturation guard and the
three controllers (the capacity study's names)."""
DEFAULT_TRIALS = 3


@dataclass(frozen=True)
class Question:
    """What a deployer asks; validated by :func:`check` before anything runs."""

    model: str
    profile: str
    itl_slo_ms: float
    ttft_slo_ms: float
    tp: int = 1
    workload: str = "studies"
    trials: int = DEFAULT_TRIALS
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    max_model_len: int | None = None
    engine: str = "gpu-node"


def _workload(q: Question, max_model_len: int) -> tuple[dict[str, Any], str]:
    """The workload mapping (arrival and classes) and a line saying what it is."""
    from dlfp.harness import tracefit
    from dlfp.studies.plans import MODELED_CLASSES

    if tracefit.is_trace(q.workload):
        fitted = tracefit.fit_workload(tracefit.read_trace(q.workload, max_model_len))
        return ({"arrival": fitted["arrival"], "classes": fitted["classes"]},
                f"fitted to trace {q.workload}: {tracefit.describe(fitted)}")
    if q.workload == "studies":
        return {"classes": MODELED_CLASSES}, "the studies' mix: Poisson arrivals, 85% short chats, 15% 1.5-2k prompts"
    if q.workload == "field":
        raw = yaml.safe_load((CONFIGS / "workloads-field.yaml").read_text(encoding="utf-8"))["workload"]
        said = "the field-like workload (configs/workloads-field.yaml)"
        return {"arrival": raw["arrival"], "classes": raw["classes"]}, said
    raise ValueError(f"--workload {q.workload!r}: use one of {list(WORKLOADS)} or a trace file (.csv or .parquet)")


def config(q: Question) -> tuple[dict[str, Any], str]:
    """The capacity run's raw config for ``q``, and the workload's description; refuses what cannot run."""
    from dlfp.studies.plans import CAPACITY_REQUESTS, capacity_arms
    from dlfp.trials.sweep import GIVEN, LOADS

    for name, value in (("--itl-slo-ms", q.itl_slo_ms), ("--ttft-slo-ms", q.ttft_slo_ms)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} {value!r}: give the SLO in milliseconds, > 0")
    if not 1 <= q.trials <= 100:
        raise ValueError(f"--trials {q.trials}: use 1 to 100")
    shape_config = json.loads((Path(model_path(q.model)) / "config.json").read_text(encoding="utf-8"))
    length = int(q.max_model_len or min(int(shape_config.get("max_position_embeddings", 8192)), 40960))
    workload, said = _workload(q, length)
    raw = {
        "name": f"plan-{model_label(q.model)}-{Path(q.profile).stem}-tp{q.tp}",
        "trials": q.trials, "token_ids": False,
        "engine": {"model": q.model, "dtype": "bfloat16", "max_model_len": length,
                   "max_num_batched_tokens": q.max_num_batched_tokens, "max_num_seqs": q.max_num_seqs,
                   "sim": {"profile": q.profile, "async_scheduling": True, "tp": q.tp, "clock": "virtual",
                           "engine": q.engine}},
        "design": {"kind": "capacity", "load": LOADS[0], "enforce": False,
                   "itl_slo_ms": float(q.itl_slo_ms), "ttft_slo_ms": float(q.ttft_slo_ms)},
        "workload": {"n_requests": CAPACITY_REQUESTS, "max_model_len": length, **workload},
        "arms": capacity_arms("plan", levels=(GIVEN,), only=ARMS),
    }
    return raw, said


def floors_ms(q: Question, raw: Mapping[str, Any]) -> tuple[float, float]:
    """The least ITL and TTFT the modeled device can give at all: one request's decode step (its host loop
    or its stream, whichever is longer, under async scheduling), and the shortest prompt's prefill on an
    idle engine with its input and output paths."""
    from dlfp.harness.lengths import LengthDist
    from dlfp.sim.costmodel import ModelShape, StepTime, load_engine_host, load_profile, step_time
    from dlfp.sim.stepfit import FittedProfile

    profile = load_profile(q.profile)
    shape = ModelShape.from_dir(model_path(q.model))
    host = load_engine_host(q.engine)
    shortest = min(LengthDist.parse(c["prompt_len"]).lo for c in raw["workload"]["classes"])

    def cost(prefill: int, context: int) -> StepTime:
        if isinstance(profile, FittedProfile):
            return StepTime(gpu_s=profile.fit.step_s(prefill, 0 if prefill > 1 else 1), host_s=0.0)
        return step_time(shape, profile, [(prefill, context)], q.tp, 2)

    decode, prefill = cost(1, shortest), cost(shortest, 0)
    loop = decode.host_s + host.schedule_s(1) + host.update_s(1)
    itl = max(decode.gpu_s, loop)
    ttft = (host.input_s + host.schedule_s(1) + prefill.host_s + prefill.gpu_s + host.update_s(1)
            + host.output_s(1))
    return itl * 1e3, ttft * 1e3


def check(q: Question) -> tuple[Any, str]:
    """The validated trial config for ``q`` and the workload's description, or a clear error (module docstring)."""
    from dlfp.sim.costmodel import ModelShape, check_tp, kv_cache_bytes, load_engine_host, load_profile
    from dlfp.sim.stepfit import FittedProfile
    from dlfp.trials.config import parse_config

    profile = load_profile(q.profile)  # an unknown name or a bad file says so
    load_engine_host(q.engine)
    shape = ModelShape.from_dir(model_path(q.model))
    check_tp(shape, q.tp)
    if not isinstance(profile, FittedProfile):
        kv_cache_bytes(shape, profile, q.tp, 2, 0.92)  # weights that leave no KV cache are refused here
    raw, said = config(q)
    itl, ttft = floors_ms(q, raw)
    if q.itl_slo_ms <= itl:
        raise ValueError(f"--itl-slo-ms {q.itl_slo_ms:g}: no step can meet it; one request's decode step alone takes "
                         f"{itl:.3g} ms on {q.tp} x {profile.name} with {model_label(q.model)} (simulated)")
    if q.ttft_slo_ms <= ttft:
        raise ValueError(f"--ttft-slo-ms {q.ttft_slo_ms:g}: no request can meet it; the shortest prompt's prefill on "
                         f"an idle engine alone takes {ttft:.3g} ms (simulated)")
    return parse_config(raw), said


def setting(config: Any, arm: str) -> str:
    """How to run ``arm`` of ``config`` (as it ran: its design's overrides in) in one's own vLLM: the token
    budget, and for an arm with DLFP parameters (a controller, or a cadence) the scheduler and its config."""
    spec, own = config.engine_for(arm), config.arm(arm)
    parts = [f"--max-num-batched-tokens {spec.max_num_batched_tokens}"]
    if spec.long_prefill_token_threshold:
        parts.append(f"--long-prefill-token-threshold {spec.long_prefill_token_threshold}")
    if own.dlfp is not None:
        dlfp = config.arm_dlfp(arm)
        parts.append(f"--scheduler-cls dlfp.vllm.DLFPScheduler --additional-config '{json.dumps({'dlfp': dlfp})}'")
    return " ".join(parts)


def answer(out: Path, said: str) -> str:
    """The which-setting answer from the finished run under ``out`` (``capacity.parquet``, ``points.parquet``
    and ``capacity.png`` are written beside it)."""
    from dlfp.analysis.capacity_plots import sweep
    from dlfp.analysis.runs import load_run
    from dlfp.studies.capacity import capacity_table, point_rows, trial_capacities
    from dlfp.studies.setting import which_setting
    from dlfp.trials.armid import ArmId
    from dlfp.trials.runfolder import write_parquet
    from dlfp.trials.sweep import GIVEN

    target = out.name
    run = load_run(out)
    points = point_rows(run, target)
    table = capacity_table(points)
    which = which_setting(table, trial_capacities(points)).iloc[0]
    write_parquet(points, out.parent / f"{target}.points.parquet")
    write_parquet(table, out.parent / f"{target}.capacity.parquet")
    fig = sweep(points, table, GIVEN, "P99 ITL and goodput against the arrival rate (simulated, virtual time)")
    fig.savefig(out.parent / f"{target}.capacity.png", dpi=110)
    rows = table.sort_values("capacity_rps", ascending=False)
    slos = f"P99 ITL <= {table.itl_slo_ms.iloc[0]:g} ms and P99 TTFT <= {table.ttft_slo_ms.iloc[0]:g} ms"
    lines = [f"Capacity within {slos} ({points.source.iloc[0]}); workload: {said}.", ""]
    for r in rows.itertuples():
        ci = "" if math.isnan(r.ci_low_rps) else f" (95% CI {max(0.0, r.ci_low_rps):.3g}-{r.ci_high_rps:.3g})"
        bound = {"above": ">= ", "below": "< "}.get(r.censored, "")
        share = r.capacity_rps / r.bound_rps
        lines.append(f"  {r.arm:<12} {bound}{r.capacity_rps:.3g} req/s{ci}, {share:.0%} of the bound")
    lines.append("")
    best = which["best"]
    if best == "none meets the SLOs":
        lines.append(f"No setting meets both SLOs even at the lightest rate swept ({table.min_rate_rps.iloc[0]:.3g} "
                     "req/s): loosen an SLO, or give the model more GPU (TP).")
    else:
        first = best.split(", ")[0]
        arm = next(a for a in run.config.arm_names if ArmId.parse(a).base == first)
        lines.append(f"Use {best}: {which['best_rps']:.3g} req/s. In vLLM: {setting(run.config, arm)}")
        if which["tied"]:
            lines.append(f"The {len(run.config.seeds)} trials cannot tell it from: {which['tied']}.")
    lines.append(f"Figure: {out.parent / f'{target}.capacity.png'}; run folder: {out}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlfp plan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a shipped model name (qwen3-0.6b, qwen3-8b, qwen3-32b ...) "
                    "or a directory holding a Hugging Face config.json")
    ap.add_argument("--profile", required=True, help="a shipped cost profile (a100, h200) or a profile YAML")
    ap.add_argument("--engine", default="gpu-node", help="the engine core's host costs: a shipped engine-core "
                    "profile (gpu-node) or a YAML (dlfp/sim/profiles/engine/)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    ap.add_argument("--workload", default="studies", help=f"one of {list(WORKLOADS)} or a trace .csv/.parquet "
                    "(columns arrival_s, prompt_len, output_len)")
    ap.add_argument("--itl-slo-ms", type=float, required=True, help="P99 inter-token latency SLO (ms)")
    ap.add_argument("--ttft-slo-ms", type=float, required=True, help="P99 time-to-first-token SLO (ms)")
    ap.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help="seeded trials per point (default 3)")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192, help="stock's token budget (default 8192)")
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=None, help="default: the model's, at most 40960")
    ap.add_argument("--out", type=Path, default=Path("data/runs/local/plan"), help="folder for the run and answer")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: this machine's cores)")
    ap.add_argument("--allow-dirty", action="store_true", help="run from uncommitted code (recorded)")
    args = ap.parse_args(argv)
    q = Question(args.model, args.profile, args.itl_slo_ms, args.ttft_slo_ms, args.tp, args.workload, args.trials,
                 args.max_num_batched_tokens, args.max_num_seqs, args.max_model_len, args.engine)
    try:
        config, said = check(q)
    except ValueError as exc:
        ap.error(str(exc))
    from dlfp.trials.runner import run_trials

    key = f"{config.name}-{args.workload if args.workload in WORKLOADS else Path(args.workload).stem}" \
          f"-itl{q.itl_slo_ms:g}-ttft{q.ttft_slo_ms:g}-n{q.trials}"
    out = args.out / key
    print(f"dlfp plan: {json.dumps(asdict(q))} -> {out}", file=sys.stderr)
    run_trials(config, out, allow_dirty=args.allow_dirty, workers=args.workers)
    print(answer(out, said))
    return 0
