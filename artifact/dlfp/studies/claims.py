"""The paper's claims checked against our runs, by ranges declared before the runs were made.

``configs/claims.yaml`` lists each claim, what the paper reports, and per source (a measured GPU
run, the CPU paired run, a modeled run) what our value must satisfy for the claim to count as
reproduced there. :func:`evaluate` reads the values from the rendered runs' raw traces and gives
each row a verdict: *reproduced*, *not reproduced*, or *not testable here* (no such run, a
single trial, a run outside its design's regime, or a setting where the situation the claim is
about does not arise). The book's prose follows these verdicts; it is never written to a number.

Three things keep a verdict honest:

* every row says what would have made it false (:func:`falsifier`, from its expectation);
* a row may hold only ``given`` a situation (``given: {arm, value, expect, unmet}``): the paper's
  explanation of a failure is tested where the failure occurs, and elsewhere is "not testable";
* a claim whose outcome the trial design's rules make likely names them (``design_implied``), and
  each row on a run with a scaled design says so beside its verdict: a verdict the design was
  built to give is weaker evidence than one it could not have arranged.

Verdicts are counted per kind of evidence (:func:`evidence`: measured on a CPU engine, measured
on a GPU, simulated), never pooled: four simulated rows do not add to three measured ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dlfp.analysis.labels import build, engine_gpus, source_line
from dlfp.analysis.runs import RunData, load_run, trial_rows
from dlfp.analysis.stats import paired, t_ci
from dlfp.analysis.tables import regime
from dlfp.control.fields import name as text_name
from dlfp.control.fields import number, refuse_invalid, same_as, word
from dlfp.harness.engine import DTYPES, EngineSpec
from dlfp.paths import CONFIGS
from dlfp.trials.arms import REFERENCE
from dlfp.trials.design import RULE_DOCS
from dlfp.trials.provenance import run_folders

CLAIMS_FILE = CONFIGS / "claims.yaml"
EXPECTATIONS = ("ci_lo_above", "ci_hi_below", "ci_overlaps", "at_least", "at_most")
EVIDENCE = ("measured (CPU engine)", "measured (GPU)", "simulated (modeled accelerator)", "unverified device")
"""The kinds of evidence a row can rest on, in the order the book counts them. The last is a run that claims
a GPU its manifest's checksum and telemetry cannot show (:attr:`dlfp.trials.schema.Manifest.device_unverified`):
judged, but never in the GPU column."""
VERDICTS = ("reproduced", "not reproduced", "not testable here")


@dataclass(frozen=True, kw_only=True)
class Setting:
    """``claims.yaml``'s ``setting``: the paper's, on which a run in the ``gpu`` slot is judged (elsewhere its
    rows say how its setting differs). Every key is required."""

    model: str = text_name("", "The paper's model (a shipped name, a checkpoint directory or a hub id).",
                           shown="required")
    dtype: str = word("bfloat16", DTYPES, "Its precision.")
    tensor_parallel_size: int = same_as(EngineSpec, "tensor_parallel_size", 1, "Its GPUs per engine.")
    gpu: str = text_name("", "A text the GPU's NVML name contains (A100).", shown="required")
    gpu_memory_gib_at_least: float = number(0.0, "GiB", 0, math.inf, "The least memory per GPU (an 80 GB A100 "
                                            "reports about 79 GiB).", lo_open=True, hi_open=True)

    def __post_init__(self) -> None:
        refuse_invalid(self, lambda key, value, allowed: ValueError(
            f"setting {key!r} = {value!r} is invalid: allowed {allowed}"))


SETTING = tuple(f.name for f in fields(Setting))
"""The keys of ``claims.yaml``'s ``setting``, each required."""
VALUES = ("itl_reduction", "output_agreement", "failures", "slo_change_abs", "ttft_of_slo")
REGIME_BOUND = ("itl_reduction",)
"""Values that only mean something inside the design's regime (stalls the pooled P99 can see)."""


def load_claims(path: Path = CLAIMS_FILE) -> list[dict[str, Any]]:
    """The declared claims, validated (unknown value or expectation names are refused by name)."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    claims = raw.get("claims") if isinstance(raw, dict) else None
    if not isinstance(claims, list) or not claims:
        raise ValueError(f"{path}: expected a non-empty list under 'claims'")
    setting = _setting(path, raw.get("setting"))
    for i, claim in enumerate(claims):
        if not isinstance(claim, dict):
            raise ValueError(f"{path}: claims[{i}] is {claim!r}; expected a mapping {{id, claim, paper, rows}}")
        for key in ("id", "claim", "paper", "rows"):
            if key not in claim:
                raise ValueError(f"{path}: claim {claim.get('id', i)!r} lacks {key!r}")
        if not isinstance(claim["rows"], list) or not all(isinstance(r, dict) for r in claim["rows"]):
            raise ValueError(f"{path}: claim {claim['id']!r} has rows {claim['rows']!r}; expected a list of mappings")
        for row in claim["rows"]:
            if not isinstance(row.get("run"), str):
                raise ValueError(f"{path}: claim {claim['id']!r} has run {row.get('run')!r}; expected a run name")
            if row.get("value") not in VALUES:
                raise ValueError(f"{path}: claim {claim['id']!r} has value {row.get('value')!r}; allowed {VALUES}")
            _check_expect(path, claim["id"], row.get("expect"))
            given = row.get("given")
            if given is not None:
                if not isinstance(given, dict) or set(given) != {"arm", "value", "expect", "unmet"} or \
                        given["value"] not in VALUES or not isinstance(given["unmet"], str):
                    raise ValueError(f"{path}: claim {claim['id']!r} has given {given!r}; expected a mapping "
                                     f"{{arm, value (one of {VALUES}), expect, unmet (words)}}")
                _check_expect(path, claim["id"], given["expect"])
        if setting is not None:  # the gpu slot's rows are judged only on the paper's setting
            for row in claim["rows"]:
                if row["run"] == "gpu":
                    row["setting"] = setting
        implied = claim.get("design_implied")
        if implied is not None and not (isinstance(implied, dict) and set(implied) == {"rules", "why"}
                                        and isinstance(implied["rules"], list) and implied["rules"]
                                        and all(isinstance(r, str) and r in RULE_DOCS for r in implied["rules"])
                                        and isinstance(implied["why"], str)):
            raise ValueError(f"{path}: claim {claim['id']!r} has design_implied {implied!r}; expected "
                             f"{{rules: [names of design rules, from {sorted(RULE_DOCS)}], why: words}}")
    return claims


def _setting(path: Path, raw: Any) -> Setting | None:
    if raw is None:
        return None
    if not (isinstance(raw, dict) and set(raw) == set(SETTING)):
        raise ValueError(f"{path}: setting {raw!r}: expected a mapping of exactly {', '.join(SETTING)} "
                         "(the paper's model, dtype, TP size, GPU name and its least memory in GiB)")
    try:
        return Setting(**raw)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _check_expect(path: Path, claim_id: str, expect: Any) -> None:
    if not isinstance(expect, dict) or not expect or not set(expect) <= set(EXPECTATIONS) or not all(
            _bound_ok(k, v) for k, v in expect.items()):
        raise ValueError(f"{path}: claim {claim_id!r} expectation {expect!r}: allowed keys "
                         f"{EXPECTATIONS}, each a number (ci_overlaps: [lo, hi])")


def _bound_ok(key: str, bound: Any) -> bool:
    bounds = bound if key == "ci_overlaps" and isinstance(bound, list) and len(bound) == 2 else [bound]
    return (isinstance(bound, list) == (key == "ci_overlaps")) and all(
        isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)


def _value(run: RunData, rows: pd.DataFrame, name: str, arm: str) -> tuple[dict[str, float], str]:
    """(numbers the expectations test, the value as the table shows it), for ``arm`` against stock."""
    dlfp, stock = rows[rows.arm == arm].set_index("trial"), rows[rows.arm == REFERENCE].set_index("trial")
    if name == "itl_reduction":
        p = paired(rows, "itl_p99_ms", arm)
        if "t_lo" not in p:
            return {"value": p["mean_pct"]}, f"{p['mean_pct']:.1f}% (one trial)"
        return ({"value": p["mean_pct"], "lo": p["t_lo"], "hi": p["t_hi"]},
                f"{p['mean_pct']:.1f}% (paired 95% CI {p['t_lo']:.1f} to {p['t_hi']:.1f}%, {len(p['reductions_pct'])} "
                f"trials)")
    if name == "output_agreement":  # counts, not a rounded rate: 99.96% would print as 100.0%
        v = float(dlfp.agreement_rate.min())
        same, compared = int((dlfp.compared - dlfp.mismatched).sum()), int(dlfp.compared.sum())
        return {"value": v}, f"{same} of {compared} requests identical"
    if name == "failures":
        v = float(rows.n_failed.sum())
        return {"value": v}, f"{v:.0f} failed requests"
    if name == "slo_change_abs":
        change = dlfp.slo_compliance - stock.slo_compliance
        v = float(change.abs().max())
        return {"value": v}, (f"compliance stock {stock.slo_compliance.mean():.1%}, DLFP "
                              f"{dlfp.slo_compliance.mean():.1%} (largest per-trial change {v:.1%})")
    # ttft_of_slo: the arm's P99 TTFT as a share of the TTFT SLO, its mean over trials with a t interval, so
    # "inside the SLO" is judged on where the mean lies, not on the one worst trial (nor missed for want of one)
    slo_ms = run.config.ttft_slo_s * 1e3
    share = (100 * dlfp.ttft_p99_ms / slo_ms).to_numpy(dtype=float)
    t = paired(rows, "ttft_p99_ms", arm)
    said = (f"P99 TTFT {-t['mean_pct']:+.1f}% (mean change); DLFP's P99 TTFT {share.mean():.0f}% of the "
            f"{slo_ms:.0f} ms SLO")
    if len(share) < 2:
        return {"value": float(share.mean())}, said + " (one trial)"
    mean, lo, hi = t_ci(list(share))
    return ({"value": mean, "lo": lo, "hi": hi},
            said + f" (95% CI {lo:.0f}% to {hi:.0f}%, {len(share)} trials; worst trial {share.max():.0f}%)")


def _judgeable(numbers: Mapping[str, float], expect: Mapping[str, Any]) -> bool:
    """Whether the numbers can be held against the expectation: no NaN, and an interval where the
    expectation tests one (one trial has none)."""
    return not any(math.isnan(v) for v in numbers.values()) and (
        "lo" in numbers or not set(expect) & {"ci_lo_above", "ci_hi_below", "ci_overlaps"})


def _meets(numbers: Mapping[str, float], expect: Mapping[str, Any]) -> bool:
    checks = []
    for key, bound in expect.items():
        if key == "ci_lo_above":
            checks.append(numbers["lo"] > bound)
        elif key == "ci_hi_below":
            checks.append(numbers["hi"] < bound)
        elif key == "ci_overlaps":
            checks.append(numbers["lo"] <= bound[1] and numbers["hi"] >= bound[0])
        elif key == "at_least":
            checks.append(numbers["value"] >= bound)
        else:
            checks.append(numbers["value"] <= bound)
    return all(checks)


REDUCTIONS = ("itl_reduction",)
"""Values that are a reduction (%), for which an interval below a bound means *no benefit*."""


def expectation_text(expect: Mapping[str, Any], value: str = REDUCTIONS[0]) -> str:
    """The declared range in words (for ``value``: a reduction's upper bound says whether a benefit is left)."""
    no_benefit = " (no benefit)" if value in REDUCTIONS else ""
    words = {"ci_lo_above": "CI above {}%", "ci_hi_below": "CI below {}%" + no_benefit,
             "ci_overlaps": "CI overlaps {}", "at_least": ">= {}", "at_most": "<= {}"}
    return "; ".join(words[k].format(v) for k, v in expect.items())


def falsifier(expect: Mapping[str, Any], value: str = REDUCTIONS[0]) -> str:
    """What result would have made the row *not reproduced*: the negation of its expectation."""
    benefit = " (a benefit not ruled out)" if value in REDUCTIONS else ""
    words = {"ci_lo_above": "the CI's lower bound is {}% or less",
             "ci_hi_below": "the CI's upper bound reaches {}%" + benefit,
             "ci_overlaps": "the CI lies wholly outside {}", "at_least": "the value is below {}",
             "at_most": "the value is above {}"}
    return " or ".join(words[k].format(v) for k, v in expect.items())


def evidence(name: str, run: RunData | None) -> str:
    """What kind of evidence a claims row rests on (:data:`EVIDENCE`): from the run's own manifest
    when it is rendered, else from the slot the row names (``gpu`` is a GPU measurement, the
    modeled and baselines studies are simulated, ``paired`` a CPU measurement)."""
    if run is not None:
        if run.config.engine.sim is not None:
            return EVIDENCE[2]
        if run.manifest.device_unverified:
            return EVIDENCE[3]
        return EVIDENCE[0] if build(run.manifest) == "cpu" else EVIDENCE[1]  # an unknown build: held to GPU telemetry
    return EVIDENCE[1] if name == "gpu" else EVIDENCE[0] if name == "paired" else EVIDENCE[2]


def design_note(claim: Mapping[str, Any], run: RunData) -> str:
    """Whether the run's design rules make the claim's outcome likely (module docstring): the rules
    with the values the run used; empty for a claim that names none, or a run whose design is not
    scaled (a fixed design derives nothing from the engine). :func:`design_reasons` says why."""
    implied, design = claim.get("design_implied"), run.manifest.design or {}
    if implied is None or design.get("kind") != "scaled":
        return ""
    rules = design.get("rules") or {}
    named = ", ".join(f"{r} = {rules[r]:g}" if isinstance(rules.get(r), (int, float)) else r
                      for r in implied["rules"])
    return f"implied by the scaled design ({named})"


def design_reasons(claims: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """Per claim that declares ``design_implied``: the rules and why they make its outcome likely."""
    claims = load_claims() if claims is None else claims
    return pd.DataFrame([{"claim": c["claim"], "rules": ", ".join(c["design_implied"]["rules"]),
                          "why the design implies it": " ".join(c["design_implied"]["why"].split())}
                         for c in claims if c.get("design_implied")], columns=["claim", "rules",
                                                                                "why the design implies it"])


def _model_name(model: str) -> str:
    """``Qwen/Qwen3-0.6B``, ``/ckpt/Qwen3-0.6B/`` and ``qwen3-0.6b`` name one model."""
    return Path(model.rstrip("/")).name.lower()


def setting_differences(run: RunData, setting: Setting) -> list[str]:
    """How a measured run's setting differs from ``setting`` (model, dtype, TP size, and the GPUs
    its engine ran on, by name and memory), one phrase each; empty when it is the paper's."""
    engine = run.config.engine
    out = []
    if _model_name(engine.model) != _model_name(setting.model):
        out.append(f"model {engine.model} instead of {setting.model}")
    if engine.dtype.replace("bf16", "bfloat16") != setting.dtype:
        out.append(f"dtype {engine.dtype} instead of {setting.dtype}")
    if engine.tensor_parallel_size != setting.tensor_parallel_size:
        out.append(f"TP {engine.tensor_parallel_size} instead of {setting.tensor_parallel_size}")
    gpus = engine_gpus(run.manifest.hardware or {}, engine.tensor_parallel_size)
    wanted = f"{setting.gpu} with at least {setting.gpu_memory_gib_at_least:g} GiB"
    if not gpus:
        out.append(f"GPU not recorded (no NVML record in the manifest) where {wanted} is the setting")
    for g in gpus:
        name, memory = str(g.get("name") or "unknown GPU"), g.get("memory_gib")
        if setting.gpu.lower() not in name.lower() or not isinstance(memory, (int, float)) or \
                memory < setting.gpu_memory_gib_at_least:
            size = f", {memory:.0f} GiB" if isinstance(memory, (int, float)) else ""
            out.append(f"GPU {name}{size} instead of {wanted}")
    return list(dict.fromkeys(out))


def claim_runs(paired_run: RunData, gpu_run_dir: str | Path, modeled_root: str | Path,
               baselines_root: str | Path) -> dict[str, RunData | None]:
    """The runs ``claims.yaml`` names, as the results chapter renders them: ``paired``, ``gpu`` and
    ``modeled:<label>``/``baselines:<target>`` for the run folders under those roots. One function,
    so the book and the pipeline's closing lines judge the same runs.

    The paired run is the ``gpu`` source when it is a GPU measurement (a cluster user's run of
    ``params/a100.yaml``; then no CPU paired run is rendered and the CPU rows say so), else the
    ``paired`` one; ``gpu_run_dir`` adds a GPU run beside a CPU paired run (empty: none)."""
    gpu_paired = evidence("paired", paired_run) == EVIDENCE[1]
    gpu = load_run(gpu_run_dir) if gpu_run_dir else (paired_run if gpu_paired else None)
    runs: dict[str, RunData | None] = {"paired": None if gpu_paired else paired_run, "gpu": gpu}
    runs.update({f"modeled:{d.name}": load_run(d) for d in run_folders([modeled_root])})
    runs.update({f"baselines:{d.name}": load_run(d) for d in run_folders([baselines_root])})
    return runs


COLUMNS = ["claim", "paper", "ours", "source", "evidence", "expected (declared)", "false if", "verdict",
           "design", "note"]


def _verdict(run: RunData, rows: pd.DataFrame, row: Mapping[str, Any], arm: str, regime_bound: bool = True
             ) -> tuple[str, str]:
    """(verdict, the value as shown) of one row on one loaded run."""
    numbers, shown = _value(run, rows, row["value"], arm)
    if row.get("setting") is not None and (differ := setting_differences(run, row["setting"])):
        return f"not testable here (different setting: {'; '.join(differ)})", shown
    if not _judgeable(numbers, row["expect"]):
        return "not testable here (needs two or more trials)", shown
    if regime_bound and row["value"] in REGIME_BOUND and regime(run, rows)["flags"]:
        return "not testable here (run outside its design regime)", shown
    given = row.get("given")
    if given is not None:
        if given["arm"] not in run.arms:
            raise ValueError(f"claims: row {row} is given arm {given['arm']!r}, but {run.path} has arms "
                             f"{list(run.arms)}")
        situation, seen = _value(run, rows, given["value"], given["arm"])
        if not _judgeable(situation, given["expect"]) or not _meets(situation, given["expect"]):
            return f"not testable here ({given['unmet']}: arm {given['arm']} {seen})", shown
    return ("reproduced" if _meets(numbers, row["expect"]) else "not reproduced"), shown


def evaluate(runs: Mapping[str, RunData | None], claims: list[dict[str, Any]] | None = None,
             regime_bound: bool = True) -> pd.DataFrame:
    """One row per (claim, source): the paper's value, ours, the kind of evidence, the declared
    expectation and what would have falsified it, the verdict, and whether the design implies it.

    ``runs`` maps the names used in ``claims.yaml`` (``paired``, ``gpu``, ``modeled:<label>``,
    ``baselines:<target>``) to loaded runs; a missing or ``None`` entry makes its rows "not
    testable here". A row's ``arm`` (default ``dlfp``) is the arm compared with stock. With
    ``regime_bound`` off, a run outside its design's regime is judged anyway (the sensitivity
    table flags such runs itself).
    """
    claims = load_claims() if claims is None else claims
    cache: dict[str, pd.DataFrame] = {}
    out = []
    for claim in claims:
        for row in claim["rows"]:
            run = runs.get(row["run"])
            entry = {"claim": claim["claim"], "paper": claim["paper"], "evidence": evidence(row["run"], run),
                     "expected (declared)": expectation_text(row["expect"], row["value"]),
                     "false if": falsifier(row["expect"], row["value"]),
                     "note": row.get("note", "")}
            if run is None:
                out.append({**entry, "ours": "", "source": f"no {row['run']} run rendered",
                            "verdict": "not testable here", "design": ""})
                continue
            if row["run"] not in cache:  # each run's rows once, however many claim rows read it
                cache[row["run"]] = trial_rows(run)
            arm = row.get("arm", "dlfp")
            if arm not in run.arms:
                raise ValueError(f"claims: row {row} names arm {arm!r}, but {run.path} has arms {list(run.arms)}")
            verdict, shown = _verdict(run, cache[row["run"]], row, arm, regime_bound)
            out.append({**entry, "ours": shown + ("" if arm == "dlfp" else f" (arm {arm})"),
                        "source": source_line(run), "verdict": verdict, "design": design_note(claim, run)})
    return pd.DataFrame(out, columns=COLUMNS)


def verdict_kinds(claims: pd.DataFrame) -> pd.Series:
    """Each row's verdict without its parenthesised reason: reproduced, not reproduced, not testable here."""
    return claims.verdict.str.split(" (", regex=False).str[0]


def verdict_counts(claims: pd.DataFrame) -> pd.DataFrame:
    """Rows: the kinds of evidence (:data:`EVIDENCE`) present; columns: the verdicts; cells: how
    many claim rows got each. The intro and the pipeline's closing lines count with this, so a
    simulated "reproduced" is never added to a measured one."""
    kinds = verdict_kinds(claims)
    table = pd.crosstab(claims.evidence, kinds).reindex(columns=list(VERDICTS), fill_value=0)
    return table.reindex([e for e in EVIDENCE if e in table.index]).rename_axis(index="evidence", columns=None)


def counts_sentence(counts: pd.DataFrame) -> str:
    """:func:`verdict_counts` in words, one clause per kind of evidence."""
    parts = []
    for kind, row in counts.iterrows():
        said = ", ".join(f"{n} {v}" for v, n in row.items() if n)
        parts.append(f"{kind}: {said}")
    return "; ".join(parts)


def paired_verdicts(claims: list[dict[str, Any]], runs: Mapping[str, RunData], regime_bound: bool) -> pd.DataFrame:
    """The ``paired`` rows' verdicts (without their reasons) on each of ``runs`` (column label -> run),
    as the results chapter judges the paired run; one row per claim row, named by the claim's id."""
    mine = [{**c, "rows": [r for r in c["rows"] if r["run"] == "paired"]} for c in claims]
    mine = [c for c in mine if c["rows"]]
    cells = {label: list(verdict_kinds(evaluate({"paired": run}, mine, regime_bound=regime_bound)))
             for label, run in runs.items()}
    index = [c["id"] if len(c["rows"]) == 1 else f"{c['id']}: {r['value']}" for c in mine for r in c["rows"]]
    return pd.DataFrame(cells, index=pd.Index(index, name="claim row (CPU engine, measured)"))


def sensitivity(claims: list[dict[str, Any]], sweep: Mapping[str, RunData]) -> pd.DataFrame:
    """The ``paired`` rows' verdicts on each run of a stall-share sweep (``sweep``: column label ->
    run), judged outside the design's regime too, each such cell flagged: does a measured verdict
    hold at the design's other stall shares, or only at the one the committed run was made at?"""
    table = paired_verdicts(claims, sweep, regime_bound=False)
    for label, run in sweep.items():
        if regime(run)["flags"]:
            table[label] = table[label] + " (outside regime)"
    return table
