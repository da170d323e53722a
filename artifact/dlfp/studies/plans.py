"""The studies beyond the paper's two arms: baselines, sensitivity, and explanations of its failure.

Each study is a list of paired-trial runs (one run folder each, every arm of a run on the same
seeded workload and the same pre-flight design), built here as validated configs and run by
``dlfp study <name> --out DIR`` (sequentially; each run resumes like any other). The results
chapter renders the committed folders (``data/runs/study-*``).

* **baselines**: on each target (the CPU engine; the modeled A100 with Qwen3-0.6B, 8B, 32B and
  8B at TP=2; the modeled H200 with 8B) every arm of :data:`BASELINE_ARMS`: vLLM's own knobs
  (a ``max_num_batched_tokens`` sweep, ``long_prefill_token_threshold``), a fixed cap on mixed
  steps at the chunk DLFP's target implies (DLFP's placement without feedback), a Sarathi-style
  budget from the same target, a P-PAS-style two-level switch, DLFP with the paper's signal, with
  the completion signal and with anti-windup, DLFP with one absolute target for every model, the
  controller proposed with the baselines (target from the measured decode step, completion
  signal), the prefill cadences (:data:`CADENCE_ARMS`) and the SLO controller (``dlfp-slo``).
* **sensitivity**: on the modeled A100 with Qwen3-0.6B (the paper's success), DLFP's gain,
  target fraction and ``chunk_min`` as arms of one run; and, on the CPU engine and on that modeled
  target, the design's stall share swept over runs (from far below to above what a pooled P99
  sees: refusal off, recorded) with three trials each, to measure where DLFP's gain turns into a
  loss. The stall share is set through the long-prompt arrival rate, so the sweep is also the
  study's arrival-rate sweep.
* **explanations**: the paper blames its negative result on the async scheduler-call interval.
  Beside that (arms ``dlfp`` vs ``dlfp-completion`` of the baselines study) and one absolute
  target for every model size (arm ``dlfp-abs-target``), two more candidates as variants of the
  modeled study on the four paper settings: host-bound small models (a counterfactual profile with
  a tenth of the host time per step) and stalls too rare to reach the pooled P99 (a design at
  0.5% stall share).
* **capacity** (issue 20): per target one run, a sweep of arrival rates set as stock's predicted
  prefill load (:data:`dlfp.trials.sweep.LOADS`, and a target's :data:`LOWER_LOADS` below them): every arm
  once per load (arm ``<name>_<load>``;
  the plain ``stock`` is stock at the lowest), each trial's requests replayed at every rate (paired
  by seed across arms and loads), SLOs at two levels (tight, relaxed) from the run's one pre-flight.
  Arms whose parameters do not name the SLO run once and are judged at both levels; DLFP's
  controllers (:data:`SLO_ARMS`) run once per level with ``itl_slo_ms`` at that level's ITL SLO, as
  a user would set it (``<name>.<level>``). Consecutive units of one engine configuration (an arm's
  loads) share one engine (``reuse_engine``), and the token tables keep times, not ids
  (``token_ids: false``: a sweep's many units would otherwise take three times the bytes; each
  request's output digest stays). On the CPU engine a reduced arm set
  (:data:`CPU_CAPACITY_ARMS`), on the modeled targets all; and once more on a field-like workload
  the defaults were not developed on (:data:`FIELD_TARGET`, a reduced set).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dlfp.control.registry import REGISTRY
from dlfp.paths import CONFIGS
from dlfp.trials.armid import ArmId
from dlfp.trials.arms import REFERENCE
from dlfp.trials.config import TrialConfig, merge, parse_config

CPU_BASE = CONFIGS / "cpu-default.yaml"
SIM_BASE = CONFIGS / "sim-generalization.yaml"
TRIALS, REQUESTS = 2, 60
MODELED_CLASSES = [
    {"name": "short", "weight": 0.85, "prompt_len": {"uniform": [32, 256]}, "output_len": {"uniform": [64, 160]}},
    {"name": "long", "weight": 0.15, "prompt_len": {"uniform": [1536, 2048]}, "output_len": {"uniform": [8, 32]}},
]
"""The studies' request mix on modeled targets: the generalization study's (configs/a100.yaml's,
4-7k-token prompts) with 1.5-2k-token long prompts instead, so that the many arms of a study run
in hours rather than a day on two cores (a Qwen3-32B step is modeled in real time); the design
derives each run's rate from it as always."""
ABSOLUTE_ITL_SLO_MS = 100.0
"""The one ITL objective the ``dlfp-abs-target`` arm uses for every model (the artifact's CPU
default, and the most common interactive ITL SLO in vLLM's own benchmarks)."""

MODELED_TARGETS: dict[str, dict[str, Any]] = {
    "a100-qwen3-0.6b": {"profile": "a100", "model": "qwen3-0.6b", "tp": 1},
    "a100-qwen3-8b": {"profile": "a100", "model": "qwen3-8b", "tp": 1},
    "a100-qwen3-32b": {"profile": "a100", "model": "qwen3-32b", "tp": 1},
    "a100-qwen3-8b-tp2": {"profile": "a100", "model": "qwen3-8b", "tp": 2},
    "h200-qwen3-8b": {"profile": "h200", "model": "qwen3-8b", "tp": 1},
}
PAPER_TARGETS = ("a100-qwen3-0.6b", "a100-qwen3-8b", "a100-qwen3-32b", "a100-qwen3-8b-tp2")
"""The paper's settings: its success (0.6B) and its three failures."""

FIXED_BUDGETS = (256, 512, 1024, 2048)
_CAP = {"chunk_min": "@target_chunk", "chunk_max": "@target_chunk", "chunk_init": "@target_chunk"}
PAPER_BASELINE_ARMS: list[dict[str, Any]] = [
    {"name": "stock"},
    *({"name": f"mbt-{b}", "engine": {"max_num_batched_tokens": b}} for b in FIXED_BUDGETS),
    {"name": "lpt-256", "engine": {"long_prefill_token_threshold": 256}},
    {"name": "cap", "dlfp": _CAP},
    {"name": "sarathi", "engine": {"max_num_batched_tokens": "@sarathi_budget"}},
    {"name": "ppas", "dlfp": {**_CAP, "pressure_decodes": 2}},
    {"name": "dlfp", "dlfp": {}},
    {"name": "dlfp-completion", "dlfp": {"signal": "completion"}},
    {"name": "dlfp-antiwindup", "dlfp": {"anti_windup": True}},
    {"name": "dlfp-abs-target", "dlfp": {"itl_slo_ms": ABSOLUTE_ITL_SLO_MS}},
    {"name": "dlfp-decode", "dlfp": {"target": "decode", "signal": "completion", "anti_windup": True}},
]
"""The baselines study's arms as its first runs had them; :data:`BASELINE_ARMS` adds the cadences and
the SLO controller."""

CADENCE_EVERY = (2, 4, 8)
CADENCE_ARMS: list[dict[str, Any]] = [
    *({"name": f"cadence-{n}", "dlfp": {"enabled": False, "prefill_every": n}} for n in CADENCE_EVERY),
    {"name": "cadence-4-cap", "dlfp": {**_CAP, "prefill_every": 4}},
]
"""The prefill-cadence baseline (issue 20): prefill admitted only every N-th step while decodes run,
with stock's chunks (control off) and combined with the fixed cap on mixed steps (no ``stock``: it
joins a list that has one)."""
SLO_CONTROLLER_ARM: dict[str, Any] = {"name": "dlfp-slo", "dlfp": {"controller": "slo", "saturation_guard": True}}
"""The SLO controller (issue 21, :mod:`dlfp.control.slo`) at its defaults; its ``itl_slo_ms`` is the
run's, as every DLFP arm's. With the saturation guard (:mod:`dlfp.control.guard`), as the plug-in's
default: a trial config's base ``dlfp`` block holds it off for the paper's law."""
BASELINE_ARMS: list[dict[str, Any]] = [*PAPER_BASELINE_ARMS, *CADENCE_ARMS, SLO_CONTROLLER_ARM]
"""Every arm of the baselines study; the study's text (module docstring) says what each is."""

DEADLINE_ARM: dict[str, Any] = {"name": "dlfp-deadline", "dlfp": {"controller": "deadline", "saturation_guard": True}}
"""The deadline controller (issue 39, :mod:`dlfp.control.deadline`) at its defaults: both SLOs, the run's,
and the saturation guard, as :data:`SLO_CONTROLLER_ARM`."""
INTERVAL_EVERY = (2, 33)
"""vLLM's prefill schedule interval at the values its single-engine proposal (PR 54627) found best: 2
under bursty arrivals, 33 in steady state."""
INTERVAL_ARMS: list[dict[str, Any]] = [
    *({"name": f"interval-{n}", "dlfp": {"enabled": False, "prefill_interval": n}} for n in INTERVAL_EVERY),
    {"name": "interval-2-mbt-512", "dlfp": {"enabled": False, "prefill_interval": 2},
     "engine": {"max_num_batched_tokens": 512}},
]
"""vLLM's prefill interval with its saturation guard (issue 39), alone and with the best single fixed
budget of the capacity study (``mbt-512``)."""
SLO_ARMS: list[dict[str, Any]] = [
    {"name": "dlfp", "dlfp": {}},
    {"name": "dlfp-completion", "dlfp": {"signal": "completion"}},
    {"name": "dlfp-antiwindup", "dlfp": {"anti_windup": True}},
    SLO_CONTROLLER_ARM,
    DEADLINE_ARM,
]
"""The capacity study's arms that hold an SLO given to them: each runs once per SLO level."""
CAPACITY_FIXED_ARMS: list[dict[str, Any]] = [
    *(a for a in BASELINE_ARMS if a["name"] not in {s["name"] for s in SLO_ARMS}), *INTERVAL_ARMS]
"""The capacity study's arms whose parameters do not name the SLO: one sweep serves both levels."""
CPU_CAPACITY_ARMS = ("stock", "mbt-256", "mbt-512", "mbt-1024", "cap", "cadence-2", "cadence-4",
                     "interval-2", "dlfp", "dlfp-completion", "dlfp-slo", "dlfp-deadline")
"""The reduced arm set on the CPU engine (its units cost a minute of engine start each)."""
FIELD_TARGET = "h200-qwen3-8b-field"
"""The capacity study on a workload DLFP's defaults were not developed on: ``configs/workloads-field.yaml``
(bursty gamma arrivals, heavy-tailed chat and summarization lengths, a long-context class) on the
modeled H200 with Qwen3-8B."""
FIELD_CAPACITY_ARMS = ("stock", "mbt-512", "mbt-2048", "cap", "cadence-4", "interval-2", "dlfp", "dlfp-completion",
                       "dlfp-slo", "dlfp-deadline")
"""The field workload's reduced arm set: its requests are long (hundreds of output tokens, real time
on the modeled GPU), so fewer arms."""
LOWER_LOADS: dict[str, tuple[float, ...]] = {"cpu-tiny": (0.05, 0.1)}
"""Loads below :data:`dlfp.trials.sweep.LOADS` where a target's grid must reach lower (issue 39): a pair in
which no arm meets both SLOs in every trial at the lowest rate swept ranks nothing, every arm tied in failure
(:func:`dlfp.studies.setting.ranks`). The committed CPU-engine run's tight pair did so at load 0.15 (9.55
req/s: the fixed budgets missed the ITL SLO, the controllers the TTFT SLO); a third and two thirds of that
load go below it. The book names every pair that still ranks nothing, which is where to extend next."""
HIGHER_LOADS: tuple[float, ...] = (1.4, 1.6, 2.0)
"""Loads above :data:`dlfp.trials.sweep.LOADS` on every target: an arm that meets the SLOs at the top load has
its capacity censored above (at least the top rate, no interval), and in virtual time every arm met the relaxed
SLOs at load 1.2 on the modeled A100 with Qwen3-0.6B (and failed them at 1.6, one trial). The sweep stops at an
arm's failure (:mod:`dlfp.trials.stopping`), so only the arms still passing at 1.2 run these points."""
CAPACITY_REQUESTS = 160
"""Fewest requests of the top load's units (fewer at lower loads, the same arrival span:
:func:`dlfp.trials.sweep.requests_at_load`), more where they would arrive faster than
:func:`dlfp.trials.sweep.min_span_s` allows: the span decides whether a rate past what an arm sustains
can pass its TTFT SLO."""

SENSITIVITY_ARMS: list[dict[str, Any]] = [
    {"name": "stock"},
    {"name": "dlfp", "dlfp": {}},
    {"name": "gain-0.25", "dlfp": {"gain": 0.25}},
    {"name": "gain-1.0", "dlfp": {"gain": 1.0}},
    {"name": "tf-0.25", "dlfp": {"target_fraction": 0.25}},
    {"name": "tf-0.75", "dlfp": {"target_fraction": 0.75}},
    {"name": "cmin-8", "dlfp": {"chunk_min": 8}},
    {"name": "cmin-128", "dlfp": {"chunk_min": 128}},
]
STALL_SHARES: dict[str, tuple[float, ...]] = {
    "cpu-tiny": (0.0025, 0.005, 0.01, 0.02, 0.04),
    "a100-qwen3-0.6b": (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08),
}
"""The regime sweep per target: around the 1% a pooled P99 sees, from a quarter of it to several
times it (the CPU engine's arms cost a minute of engine start each, so it has one point fewer)."""
REGIME_TRIALS = 3
"""Trials per sweep point: a paired t interval on two trials has one degree of freedom (t = 12.7)
and cannot place a boundary; three (t = 4.3) can."""
SENSITIVITY_TARGET = "a100-qwen3-0.6b"
RARE_STALL_SHARE = 0.005
FAST_HOST_PROFILE = "a100-fast-host"
FAST_HOST_ENGINE = "gpu-node-fast"
"""The counterfactual's engine-core costs in virtual time (a tenth of gpu-node's), beside the device profile's
tenth of the model runner's: in real time the engine core ran at the simulating machine's speed."""


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _common(trials: int, requests: int) -> dict[str, Any]:
    return {"trials": trials, "workload": {"n_requests": requests}}


CLOCKS = ("real", "virtual")
"""How a study's modeled targets run (:mod:`dlfp.sim.config`): ``real``, the committed runs' mode, or
``virtual``; the CPU engine is measured either way."""


def with_clock(raw: dict[str, Any], clock: str) -> dict[str, Any]:
    """``raw`` (a modeled target's config) on ``clock``; in virtual time without what only a started engine
    uses (``reuse_engine``: a virtual unit builds its engine core in milliseconds)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock {clock!r}: use one of {list(CLOCKS)}")
    if (raw.get("engine") or {}).get("sim") is None:
        return raw  # a measured target: its clock is the machine's
    raw = merge(raw, {"engine": {"sim": {"clock": clock}}})
    if clock == "virtual":
        raw.pop("reuse_engine", None)
        if raw["engine"]["sim"].get("profile") == FAST_HOST_PROFILE:  # the counterfactual host, engine core too
            raw["engine"]["sim"]["engine"] = FAST_HOST_ENGINE
    return raw


def target_config(target: str, over: dict[str, Any]) -> dict[str, Any]:
    """The raw config of one target (``cpu-tiny`` or a key of :data:`MODELED_TARGETS`) with ``over``."""
    if target == "cpu-tiny":
        return merge(_load(CPU_BASE), {"name": f"study-{target}", **over})
    if target not in MODELED_TARGETS:
        raise ValueError(f"unknown study target {target!r}: use cpu-tiny or one of {sorted(MODELED_TARGETS)}")
    t = MODELED_TARGETS[target]
    base = _load(SIM_BASE)
    sim = {**base["engine"]["sim"], "profile": t["profile"], "tp": t["tp"]}
    base["workload"]["classes"] = MODELED_CLASSES
    return merge(base, {"name": f"study-{target}", "engine": {"model": t["model"], "sim": sim}, **over})


def baselines(trials: int = TRIALS, requests: int = REQUESTS,
              targets: tuple[str, ...] = ("cpu-tiny", *MODELED_TARGETS)) -> list[tuple[Path, TrialConfig]]:
    """One run per target with every baseline arm."""
    return [(Path(t), parse_config(target_config(t, {**_common(trials, requests), "arms": BASELINE_ARMS})))
            for t in targets]


def sensitivity(trials: int = TRIALS, requests: int = REQUESTS) -> list[tuple[Path, TrialConfig]]:
    """DLFP's parameters as arms of one run; the design's stall share swept over runs per target
    (at least :data:`REGIME_TRIALS` trials each, whatever ``trials`` says)."""
    plan = [(Path("params"), parse_config(target_config(SENSITIVITY_TARGET, {**_common(trials, requests),
                                                                             "arms": SENSITIVITY_ARMS,
                                                                             "name": "study-sensitivity"})))]
    sweep = _common(max(trials, REGIME_TRIALS), requests)
    for target, shares in STALL_SHARES.items():
        for share in shares:
            design = {"kind": "scaled", "stall_share": share, "min_stall_share": min(share, 0.015), "enforce": False}
            raw = target_config(target, {**sweep, "design": design, "name": f"study-stalls-{target}-{share}"})
            plan.append((Path(f"stalls-{target}-{share}"), parse_config(raw)))
    return plan


def explanations(trials: int = TRIALS, requests: int = REQUESTS) -> list[tuple[Path, TrialConfig]]:
    """The paper's four settings with a host-bound-free counterfactual profile, and with rare stalls."""
    common = _common(trials, requests)
    plan = []
    for target in PAPER_TARGETS:
        raw = target_config(target, common)
        raw["engine"]["sim"]["profile"] = FAST_HOST_PROFILE
        plan.append((Path(f"fast-host-{target}"), parse_config({**raw, "name": f"study-fast-host-{target}"})))
        design = {"kind": "scaled", "stall_share": RARE_STALL_SHARE, "min_stall_share": RARE_STALL_SHARE,
                  "enforce": False}
        raw = target_config(target, {**common, "design": design, "name": f"study-rare-stalls-{target}"})
        plan.append((Path(f"rare-stalls-{target}"), parse_config(raw)))
    return plan


def _held_slos(arm: dict[str, Any], level: str) -> dict[str, str]:
    """The SLOs a held arm is given at ``level``: those its controller reads (:mod:`dlfp.control.registry`)."""
    reads = REGISTRY[arm["dlfp"].get("controller") or "law"].slos
    return {key: f"@{key.removesuffix('_ms')}_{level}" for key in reads}


def capacity_loads(target: str) -> tuple[float, ...]:
    """The loads a target's capacity run sweeps, lowest first: the study's own, the target's :data:`LOWER_LOADS`
    and :data:`HIGHER_LOADS`."""
    from dlfp.trials.sweep import LOADS

    return tuple(sorted({*LOWER_LOADS.get(target, ()), *LOADS, *HIGHER_LOADS}))


def capacity_arms(target: str, levels: tuple[str, ...] | None = None,
                  only: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The capacity run's arms: every arm at every load of :func:`capacity_loads` (fixed arms once, SLO arms
    once per level of ``levels``, default the study's two), an arm's loads consecutive so that one engine
    serves them; plain ``stock`` at the lowest load. ``only``: these arms (default: the target's set)."""
    from dlfp.trials.sweep import LEVELS

    loads = capacity_loads(target)
    levels = LEVELS if levels is None else levels
    reduced = only or {"cpu-tiny": CPU_CAPACITY_ARMS, FIELD_TARGET: FIELD_CAPACITY_ARMS}.get(target)
    keep = (lambda name: True) if reduced is None else (lambda name: name in reduced)
    fixed = [a for a in CAPACITY_FIXED_ARMS if keep(a["name"])]
    held = [{"name": ArmId(a["name"], level).held, "dlfp": {**a["dlfp"], **_held_slos(a, level)}}
            for a in SLO_ARMS if keep(a["name"]) for level in levels]
    return [{"name": REFERENCE} if a["name"] == REFERENCE and load == loads[0] else
            {**a, "name": ArmId.parse(a["name"]).at(load).name, "load": load}
            for a in [*fixed, *held] for load in loads]


def goal_arm(unit: str, controllers: tuple[str, ...]) -> bool:
    """Whether a capacity unit belongs to what the controller goal compares (:mod:`dlfp.studies.controller_goal`):
    the goal's ``controllers`` (its declared file's arms), the fixed budgets they are judged against, and stock."""
    from dlfp.studies.setting import FIXED_BUDGET

    base = ArmId.parse(unit).base
    return base == REFERENCE or base.startswith(FIXED_BUDGET) or base in controllers


def with_goal_trials(arms: list[dict[str, Any]], trials: int,
                     goal_trials: int | None) -> tuple[list[dict[str, Any]], int]:
    """``arms`` and the run's trial count when the goal's arms (:func:`goal_arm`) run ``goal_trials`` trials and
    the others ``trials``: the per-target comparison the goal judges is an interval on paired trials, which
    three trials leave wide, while the other arms' capacities are read only as point estimates beside it.
    ``goal_trials`` None (or not above ``trials``): every arm in every trial, as before."""
    if goal_trials is None or goal_trials <= trials:
        return arms, trials
    from dlfp.studies.controller_goal import load_goal

    controllers = load_goal().arms
    return [a if goal_arm(a["name"], controllers) else {**a, "trials": trials} for a in arms], goal_trials


def capacity(trials: int = TRIALS, requests: int = CAPACITY_REQUESTS,
             targets: tuple[str, ...] = ("cpu-tiny", *MODELED_TARGETS, FIELD_TARGET),
             goal_trials: int | None = None) -> list[tuple[Path, TrialConfig]]:
    """One capacity run per target (module docstring) with at least :data:`REGIME_TRIALS` trials (a
    capacity's t interval needs them as a boundary's does); the studies' request mix everywhere but on
    :data:`FIELD_TARGET`, which keeps its config's workload (arrival process and classes). ``goal_trials``:
    the controller goal's arms in that many trials, the rest in ``trials`` (:func:`with_goal_trials`)."""
    plan = []
    trials = max(trials, REGIME_TRIALS)
    for target in targets:
        arms, n = with_goal_trials(capacity_arms(target), trials, goal_trials)
        lowest = capacity_loads(target)[0]  # the plain stock arm's, which the design's own load is
        over = {**_common(n, requests), "arms": arms, "reuse_engine": True,
                "token_ids": False, "design": {"kind": "capacity", "load": lowest, "enforce": False},
                "name": f"study-capacity-{target}"}
        if target == FIELD_TARGET:
            raw = merge(_load(CONFIGS / "workloads-field.yaml"), over)
        else:
            over["workload"]["classes"] = MODELED_CLASSES
            raw = target_config(target, over)
        plan.append((Path(target), parse_config(raw)))
    return plan


STABILITY_TIMES = 5
"""Repetitions of the default paired design in the stability study, and the fewest it takes: with fewer a
claim that flips once in three regenerations looks like one that holds."""


def stability(trials: int | None = None, requests: int | None = None,
              times: int = STABILITY_TIMES) -> list[tuple[Path, TrialConfig]]:
    """The default paired design (``configs/cpu-default.yaml``: what ``make artifact`` runs) ``times`` times,
    each repetition its own run folder with its own pre-flight, design and fresh engines: the same seeds,
    so what differs between repetitions is the machine, as in a regeneration. ``trials``/``requests``
    override the design's own (for a quick look only: the book's table is of the design as it is)."""
    if isinstance(times, bool) or not isinstance(times, int) or times < 1:
        raise ValueError(f"times = {times!r}: allowed a positive number of repetitions")
    over: dict[str, Any] = {"name": "study-stability"}
    if trials is not None:
        over["trials"] = trials
    if requests is not None:
        over["workload"] = {"n_requests": requests}
    raw = merge(_load(CPU_BASE), over)
    return [(Path(f"rep-{i}"), parse_config(raw)) for i in range(1, times + 1)]


STUDIES = {"baselines": baselines, "sensitivity": sensitivity, "explanations": explanations, "capacity": capacity,
           "stability": stability}
