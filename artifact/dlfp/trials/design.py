"""The trial design: load, latency target and SLOs derived from what the engine measures.

A design fixed in absolute units (requests per second, an ITL SLO in milliseconds) means
different things on different machines. Stock vLLM's prefill stalls reach a pooled P99 of
inter-token gaps only when they are more than about 1% of all gaps, and their share is

    s = L k / ((1 - u) / d + L k),   u = L P,

for long prompts arriving at rate ``L``, each prefilled by stock in ``k`` steps taking ``P``
seconds in all, and decodes stepping every ``d`` seconds in between (every decoder sees every
stall once; the engine spends ``u`` of its time on long prefills). ``s`` depends on the ratio
``P / d``, a property of model, prompt length and hardware, and on the load ``u``. A design
tuned on one machine lands at 4% on it and at 0.5% on a machine with relatively faster decode
steps, where DLFP can only lose. So every run measures ``d`` and the prefill cost first (a
pre-flight on the real engine, :mod:`dlfp.trials.preflight`; on a modeled accelerator the same code
measures the modeled engine) and :func:`derive` sets, by the rules below:

* the long-prompt load ``u`` that puts stock's stalls at ``stall_share`` of all gaps
  (inverting the formula above), hence the long-prompt rate ``L = u / P``; where the engine's
  capacity (``max_load``, in every arm) does not allow that, the largest share that fits, but
  not less than ``min_stall_share``;
* the short-request rate that keeps ``decoders`` requests decoding on average (Little's law
  with the mean short output length), hence the arrival rate and the long-prompt share;
* DLFP's target interval ``T* = target_overheads x (d + a)``, a few times the fixed part ``d + a``
  of a mixed step (the decode step plus the fixed cost of carrying prefill): the share of each
  of DLFP's mixed steps that does useful prefill work, hence how much longer DLFP's prefills
  take than stock's, is then the same on every machine (the ITL objective ``itl_slo_ms`` is
  ``T* / target_fraction``);
* SLOs: TPOT at the ITL objective, TTFT at ``ttft_stalls`` stock stalls.

It then refuses designs in which the comparison cannot show anything: predicted stall share
below ``min_stall_share`` (a pooled P99 would not see the stalls), target not below the
predicted stall (DLFP never acts), or predicted engine load (prefill time of stock, and of
DLFP, whose chunks each carry a decode step) above ``max_load`` (the queue would grow without
bound). A *fixed* design (the paper's style: the config's rate and targets as written, one SLO
for every model) is derived nothing but checked the same way. A *capacity* design is one point of
the capacity sweep (:mod:`dlfp.trials.sweep`): the config's request mix as written, at the rate that
puts stock's predicted prefill load at ``design.load``, with SLO levels from the measurement; it is
checked against nothing (a sweep goes past saturation on purpose); its arms may each run at their
own load (``arms[].load``), all under the SLOs of the run's one pre-flight.

Pure arithmetic; the modeled study (:mod:`dlfp.studies.generalization`) and the real runs share it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from dlfp.control.fields import declared, nested, number, refuse_invalid, switch, word
from dlfp.control.fields import markdown_table as fields_table
from dlfp.trials.prediction import (
    Measured,
    Prediction,
    Workload,
    long_class_index,
    long_weight_share,
    predict,
    round_sig,
    scaled_rates,
    workload_facts,
)
from dlfp.trials.sweep import (
    LOADS,
    derived_slos,
    min_span_s,
    rate_at_load,
    requests_at_load,
    slo_levels,
    sweep_record,
    top_requests,
)

RULES_VERSION = 2
"""Bumped whenever a rule's formula or default changes; recorded with every derived design (2: a
capacity point spans :data:`~dlfp.trials.sweep.SPAN_TTFT_SLOS` TTFT SLOs of arrivals)."""


KINDS = ("scaled", "fixed", "capacity")


class DesignError(ValueError):
    """A design the comparison cannot test, refused before any trial (names the numbers)."""


BIG = 1e6
"""The upper bound of a rule that has no natural one: a finite number, so infinity and NaN are refused."""


def _refused(key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"config field 'design.{key}' = {value!r} is invalid: allowed {allowed}")


def _share(default: float, doc: str) -> Any:
    return number(default, "share", 0, 1, doc, lo_open=True, hi_open=True)


def _positive(default: float, unit: str, doc: str, *, above: float = 0) -> Any:
    return number(default, unit, above, BIG, doc, lo_open=True)


@dataclass(frozen=True, slots=True)
class Rules:
    """The design rules' parameters, each declared once with its unit, its bounds and its meaning
    (:mod:`dlfp.control.fields`): the check, its message and the method chapter's table of rules
    (:func:`dlfp.book.reference_tables.rules_table`) come from these declarations. A config's ``design``
    mapping may override each."""

    stall_share: float = _share(0.03, "Stock's prefill stalls as a share of all inter-token gaps (scaled designs "
                                      "aim here); within [min_stall_share, max_stall_share].")
    min_stall_share: float = _share(0.015, "Below this a pooled P99 of gaps does not reliably see the stalls: "
                                           "refused.")
    max_stall_share: float = _share(0.25, "Above this stalls are the common case, not the tail: flagged after the "
                                          "run.")
    decoders: float = _positive(4.0, "requests", "Mean number of requests decoding (Little's law over the short "
                                                 "requests).")
    target_overheads: float = _positive(3.0, "x (d + a)", "DLFP's target interval in mixed-step fixed parts: "
                                        "T* = target_overheads x (d + a); above 1, which the fixed part alone takes.",
                                        above=1)
    max_load: float = _share(0.8, "Largest predicted share of engine time spent prefilling, in any arm.")
    stall_over_target: float = _positive(3.0, "x T*", "Scaled designs lengthen long prompts (where needed) until "
                                                      "stock's stall lasts this many T*.")
    min_stall_over_target: float = _positive(1.5, "factor", "The predicted stall must exceed DLFP's target by this "
                                                            "factor, or DLFP has nothing to do.")
    ttft_stalls: float = _positive(10.0, "stalls", "TTFT SLO in stock stalls (queueing allowance for long "
                                                   "prompts).")
    realized_min_stall_share: float = _share(0.01, "After the run: stock's measured stall share below this flags "
                                                   "the run out of regime.")
    max_cost_drift: float = _positive(1.75, "factor", "After the run: a trial whose stock steps took more than this "
                                      "factor longer (or shorter) than the pre-flight's flags the run out of regime "
                                      "(the machine was not the one the design was derived on).", above=1)

    def __post_init__(self) -> None:
        refuse_invalid(self, _refused)
        if not self.min_stall_share <= self.stall_share <= self.max_stall_share:
            raise ValueError(f"config field 'design.stall_share' = {self.stall_share!r} is invalid: allowed "
                             f"[min_stall_share, max_stall_share] = [{self.min_stall_share}, {self.max_stall_share}]")


RULE_DOCS: dict[str, str] = {f.name: rule.doc for f, rule in declared(Rules)}
"""What each rule means, from its declaration (claims files name rules by these keys)."""


@dataclass(frozen=True, slots=True)
class DesignSpec:
    """A config's ``design`` mapping, validated: kind, rules, and whether refusals apply."""

    kind: str = word("scaled", KINDS, "scaled: load, target and SLOs derived from the pre-flight; fixed: the "
                                      "config's values as written; capacity: one point of a capacity sweep.")
    enforce: bool = switch(True, "false: run a design the checks refuse (recorded, flagged in every table).")
    rules: Rules = nested("any rule's key, beside these", "Not a key itself: the design rules' keys go beside these "
                          "(the Method chapter's table).", Rules(), shown="each rule's")
    load: float | None = number(None, "share", 0, 10, "Capacity designs only (required there): stock's predicted "
                                "prefill load the workload's rate is set to.", lo_open=True, nullable=True)
    itl_slo_ms: float | None = number(None, "ms", 0, 3.6e6, "Capacity designs only, with ttft_slo_ms: a given ITL "
                                      "SLO, one SLO level instead of the two the pre-flight derives.", lo_open=True,
                                      nullable=True)
    ttft_slo_ms: float | None = number(None, "ms", 0, 3.6e6, "Capacity designs only: the given TTFT SLO beside "
                                       "itl_slo_ms.", lo_open=True, nullable=True)
    stop_at_failure: bool = switch(True, "Capacity designs only: a trial's sweep of an arm stops at its first load "
                                   "that misses the SLOs at every level judging it (dlfp.trials.stopping); false: "
                                   "every point runs.")

    def __post_init__(self) -> None:
        refuse_invalid(self, _refused)
        if (self.kind == "capacity") != (self.load is not None):
            raise ValueError("config field 'design.load' belongs to capacity designs: design.kind: capacity "
                             "needs it, and no other kind takes it")
        if not self.stop_at_failure and self.kind != "capacity":
            raise ValueError("config field 'design.stop_at_failure' belongs to capacity designs: no other kind sweeps")
        given = (self.itl_slo_ms, self.ttft_slo_ms)
        if any(v is not None for v in given) and (self.kind != "capacity" or any(v is None for v in given)):
            raise ValueError("config fields 'design.itl_slo_ms' and 'design.ttft_slo_ms' go together, in a "
                             "capacity design (design.kind: capacity): the one SLO level a user gives")

    @classmethod
    def parse(cls, raw: Any) -> DesignSpec:
        """A config's ``design`` mapping: its own keys and any of the rules', side by side."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError(f"config field 'design' = {raw!r} is invalid: allowed a mapping")
        own = {f.name for f in fields(cls)} - {"rules"}
        known = own | {f.name for f in fields(Rules)}
        unknown = sorted(set(raw) - known, key=str)
        if unknown:
            raise ValueError(f"unknown design setting(s) {unknown}; known: {sorted(known)}")
        rules = Rules(**{k: v for k, v in raw.items() if k not in own})
        spec = cls(**{k: v for k, v in raw.items() if k in own}, rules=rules)
        def real(v: float | None) -> float | None:  # a config's 2 is the float 2.0 a design computes with
            return None if v is None else float(v)

        return replace(spec, load=real(spec.load), itl_slo_ms=real(spec.itl_slo_ms), ttft_slo_ms=real(spec.ttft_slo_ms))


def markdown_table() -> str:
    """The design mapping's own keys as the trial reference's Markdown table (the rules': the Method chapter's)."""
    return fields_table(DesignSpec, "key")


def _largest_share(m: Measured, w: Workload, rules: Rules, target_s: float) -> float:
    """The stall share to aim at: ``rules.stall_share``, or less where the engine's capacity
    (``max_load``, in every arm) requires it, but not below ``min_stall_share`` (then refused)."""

    def load(share: float) -> float:
        p = predict(m, w, *scaled_rates(m, w, share, rules.decoders), target_s)
        return max(p.stock_load, p.dlfp_load)

    lo, hi = rules.min_stall_share, rules.stall_share
    if load(hi) <= rules.max_load or load(lo) > rules.max_load:
        return hi if load(hi) <= rules.max_load else lo
    for _ in range(40):  # the load grows with the share: bisect for the largest that fits
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if load(mid) <= rules.max_load else (lo, mid)
    return lo


@dataclass(frozen=True, slots=True)
class Design:
    """A derived (or checked) design: overrides for the config, and what it predicts."""

    kind: str
    rules: Rules
    measured: Measured
    workload: Workload
    prediction: Prediction
    overrides: dict[str, Any]
    problems: tuple[str, ...]
    sweep: dict[str, Any] | None = None
    """Capacity designs: :func:`dlfp.trials.sweep.sweep_record` (load, rate, SLO levels, bound)."""

    def record(self) -> dict[str, Any]:
        """JSON-ready, for the manifest: inputs, rules and version, derived values, checks."""
        p = self.prediction
        return {
            "kind": self.kind, "rules_version": RULES_VERSION, "rules": asdict(self.rules),
            "measured": asdict(self.measured), "workload": asdict(self.workload),
            "predicted": {**asdict(p), "rate_rps": p.rate_rps, "long_share": p.long_share},
            "overrides": self.overrides, "problems": list(self.problems),
            **({"sweep": self.sweep} if self.sweep is not None else {}),
        }


def check(p: Prediction, rules: Rules) -> tuple[str, ...]:
    """Why a design cannot show anything, one sentence per reason with its numbers (empty: fine)."""
    problems = []
    if p.stall_share < rules.min_stall_share:
        # Both to three digits: at one precision each, 0.249% below 0.25% printed as "0.25%, below the 0.2%".
        problems.append(f"stock's prefill stalls are predicted at {100 * p.stall_share:.3g}% of inter-token gaps, "
                        f"below the {100 * rules.min_stall_share:.3g}% a pooled P99 reliably sees: the comparison "
                        "would be a coin toss")
    if p.stall_s < rules.min_stall_over_target * p.target_s:
        problems.append(f"DLFP's target interval {p.target_s * 1e3:.1f} ms is not below the predicted stall "
                        f"{p.stall_s * 1e3:.1f} ms by {rules.min_stall_over_target}x: DLFP would have nothing to cut")
    worst = max(p.stock_load, p.dlfp_load)
    if worst > rules.max_load:
        arm = "stock" if p.stock_load >= p.dlfp_load else "DLFP"
        problems.append(f"the arrival rate {p.rate_rps:.2f} req/s would keep the engine prefilling {worst:.0%} of the "
                        f"time in the {arm} arm (limit {rules.max_load:.0%}): beyond its capacity, queues would grow")
    return tuple(problems)


def derive(spec: DesignSpec, m: Measured, w: Workload, config: Mapping[str, Any]) -> Design:
    """The design for ``config`` (a trial config's raw mapping) from the pre-flight's measurements.

    A scaled design returns config overrides (rate, class weights, ``dlfp.itl_slo_ms``, SLOs); a
    fixed one none. Both are checked (:func:`check`); raise :class:`DesignError` via
    :func:`refuse` where the caller enforces the checks.
    """
    rules = spec.rules
    target_fraction = float((config.get("dlfp") or {}).get("target_fraction", 0.5))
    if spec.kind == "capacity":
        return _capacity(spec, m, w, config, target_fraction)
    if spec.kind == "fixed":
        rate = float(config["workload"]["rate_rps"])
        long_w = long_weight_share(config["workload"]["classes"])
        target_s = float((config.get("dlfp") or {}).get("itl_slo_ms", 100.0)) * target_fraction / 1e3
        p = predict(m, w, rate * long_w, rate * (1 - long_w), target_s)
        arms = resolve_arms(config["arms"], derived_values(m, w, target_s, rules.decoders))
        return Design("fixed", rules, m, w, p, {"arms": arms} if arms else {}, check(p, rules))
    itl_slo_ms = round_sig(rules.target_overheads * (m.decode_s + m.prefill_fixed_s) / target_fraction * 1e3)
    target_s = itl_slo_ms * target_fraction / 1e3
    classes = _lengthened(config["workload"]["classes"], m, w, rules.stall_over_target * target_s)
    w = workload_facts({**config, "workload": {**config["workload"], "classes": classes}})
    share = _largest_share(m, w, rules, target_s)
    p = predict(m, w, *scaled_rates(m, w, share, rules.decoders), target_s)
    classes = _reweighted(classes, p.long_share)
    overrides: dict[str, Any] = {
        "workload": {"rate_rps": round_sig(p.rate_rps), "classes": classes},
        "dlfp": {"itl_slo_ms": itl_slo_ms},
        "slo": {"tpot_ms": itl_slo_ms, "ttft_ms": round_sig(rules.ttft_stalls * p.stall_s * 1e3)},
    }
    p = replace(p, long_rate_rps=overrides["workload"]["rate_rps"] * p.long_share,
                short_rate_rps=overrides["workload"]["rate_rps"] * (1 - p.long_share))
    arms = resolve_arms(config["arms"], derived_values(m, w, p.target_s, rules.decoders))
    if arms:
        overrides["arms"] = arms
    return Design("scaled", rules, m, w, p, overrides, check(p, rules))


def _capacity(spec: DesignSpec, m: Measured, w: Workload, config: Mapping[str, Any],
              target_fraction: float) -> Design:
    """A capacity sweep (module docstring; :mod:`dlfp.trials.sweep`): the config's mix, each arm at the rate of
    its own ``load`` (else ``design.load``, the workload's rate) replaying the first ``requests_at_load`` of the
    trial's requests (the sweep's top load all of them), SLOs (and DLFP's ``itl_slo_ms``) at the tight level,
    nothing refused. The record's ``sweep.arms`` gives each arm's load, rate and requests."""
    if spec.load is None:  # DesignSpec.parse gives every capacity design its load
        raise ValueError("a capacity design needs design.load")
    design_load = spec.load
    long_w = long_weight_share(config["workload"]["classes"])
    given = (None if spec.itl_slo_ms is None or spec.ttft_slo_ms is None else
             {"itl_ms": spec.itl_slo_ms, "ttft_ms": spec.ttft_slo_ms})
    sweep = sweep_record(m, w, long_w, design_load, given)
    tight = next(iter(sweep["slos"].values()))  # the tightest level (the given one where the user gave it)
    target_s = tight["itl_ms"] * target_fraction / 1e3
    rate = sweep["rate_rps"]
    p = predict(m, w, rate * long_w, rate * (1 - long_w), target_s)
    values = {**derived_values(m, w, target_s, spec.rules.decoders), **derived_slos(sweep["slos"])}
    arms = resolve_arms(config["arms"], values) or [dict(a) for a in config["arms"]]
    n_top = top_requests(int(config["workload"]["n_requests"]), rate_at_load(m, w, long_w, LOADS[-1]),
                         min_span_s(sweep["slos"]))
    for a in arms:
        load = float(a.get("load") or design_load)
        a["rate_rps"] = round_sig(rate_at_load(m, w, long_w, load))
        a["n_requests"] = requests_at_load(load, n_top)
    n_top = max(n_top, *(a["n_requests"] for a in arms))  # a grid past LOADS: the trial holds its top's requests
    sweep["arms"] = {a["name"]: {"load": float(a.get("load") or design_load), "rate_rps": a["rate_rps"],
                                 "n_requests": a["n_requests"]} for a in arms}
    overrides: dict[str, Any] = {"workload": {"rate_rps": rate, "n_requests": n_top},
                                 "dlfp": {"itl_slo_ms": tight["itl_ms"]},
                                 "slo": {"tpot_ms": tight["itl_ms"], "ttft_ms": tight["ttft_ms"]}, "arms": arms}
    return Design("capacity", spec.rules, m, w, p, overrides, (), sweep)


DERIVED: dict[str, str] = {
    "@target_chunk": "prefill tokens whose mixed step lasts DLFP's target T* (from the pre-flight's fit)",
    "@sarathi_budget": "a step token budget that lasts T* with the design's decoders in it (Sarathi-Serve's rule: "
                       "the budget from the latency target, by profiling)",
    "@itl_slo_tight": "the capacity study's tight ITL SLO in ms (dlfp.trials.sweep: 5 measured decode steps)",
    "@itl_slo_relaxed": "the capacity study's relaxed ITL SLO in ms (dlfp.trials.sweep: 25 measured decode steps)",
    "@itl_slo_given": "a capacity design's given ITL SLO in ms (design.itl_slo_ms: dlfp plan's)",
    "@ttft_slo_tight": "the capacity study's tight TTFT SLO in ms (dlfp.trials.sweep)",
    "@ttft_slo_relaxed": "the capacity study's relaxed TTFT SLO in ms (dlfp.trials.sweep)",
    "@ttft_slo_given": "a capacity design's given TTFT SLO in ms (design.ttft_slo_ms: dlfp plan's)",
}
"""Values an arm may name instead of a number; each design resolves them from its measurement."""


def derived_values(m: Measured, w: Workload, target_s: float, decoders: float) -> dict[str, float]:
    """:data:`DERIVED` for a measured engine, a workload and a target interval."""
    chunk = max(1, round(m.chunk_for(target_s)))
    return {"@target_chunk": chunk, "@sarathi_budget": max(1, round(chunk + decoders)),
            **derived_slos(slo_levels(m, w))}


def resolve_arms(arms: list[Mapping[str, Any]], values: Mapping[str, float]) -> list[dict[str, Any]] | None:
    """The arms with every :data:`DERIVED` name replaced by its value; None when no arm names one."""
    used = False

    def sub(v: Any) -> Any:
        nonlocal used
        if isinstance(v, str) and v in values:
            used = True
            return values[v]
        return v

    out = [{k: ({kk: sub(vv) for kk, vv in v.items()} if isinstance(v, Mapping) else v) for k, v in arm.items()}
           for arm in arms]
    return out if used else None


def refuse(design: Design) -> None:
    """Raise :class:`DesignError` naming every problem of ``design`` (none: return)."""
    if design.problems:
        p, m = design.prediction, design.measured
        raise DesignError(
            f"the {design.kind} design cannot test DLFP here: " + "; ".join(design.problems)
            + f". Measured ({m.source}): decode step {m.decode_s * 1e3:.2f} ms, prefill "
            f"{m.prefill_fixed_s * 1e3:.2f} ms + {m.prefill_per_token_s * 1e6:.1f} us/token; "
            f"predicted stall {p.stall_s * 1e3:.1f} ms at "
            f"{p.rate_rps:.2f} req/s. "
            "Change the workload (shorter long prompts lower the stall, a higher load raises its share) or the design "
            "rules, or set design.enforce: false to run it anyway (recorded, and flagged in every table)")


def _reweighted(classes: Sequence[Mapping[str, Any]], long_share: float) -> list[dict[str, Any]]:
    """The classes with the long class at ``long_share`` and the others sharing the rest as before."""
    i = long_class_index(classes)
    others = sum(float(c.get("weight", 1.0)) for j, c in enumerate(classes) if j != i)
    out = []
    for j, c in enumerate(classes):
        share = long_share if j == i else (1 - long_share) * float(c.get("weight", 1.0)) / others
        out.append({**c, "weight": round_sig(share)})
    return out


def _lengthened(classes: list[Mapping[str, Any]], m: Measured, w: Workload, stall_s: float) -> list[dict[str, Any]]:
    """The classes with the long class's prompts scaled up (same relative spread) until stock's stall
    for a median long prompt lasts ``stall_s``; unchanged where it already does. A stall cannot
    outgrow stock's budget step, and prompts stay within the model length."""
    from dlfp.harness.workload import LengthDist

    needed = min(m.chunk_for(stall_s), w.stock_budget)
    out = [dict(c) for c in classes]
    if needed <= w.long_prompt:
        return out
    i = long_class_index(classes)
    dist = LengthDist.parse(classes[i]["prompt_len"])
    f = needed / w.long_prompt
    hi = min(w.max_prompt, round(dist.hi * f))
    lo = min(hi, round(dist.lo * f))
    if dist.kind == "lognormal":
        prompt: Any = {"lognormal": {"median": min(hi, max(lo, round(dist.median * f))), "sigma": dist.sigma,
                                     "min": lo, "max": hi}}
    else:
        prompt = {"fixed": hi} if dist.kind == "fixed" else {"uniform": [lo, hi]}
    out[i]["prompt_len"] = prompt
    return out
