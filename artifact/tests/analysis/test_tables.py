"""``dlfp.analysis.tables``: the paper-style tables of committed runs hold the numbers their traces
give, computed again here independently of :mod:`dlfp.analysis.stats` (plain arithmetic and
SciPy's t quantile), and the regime verdict says what the design record and the stock stalls say.

Runs read (never written): ``data/runs/cpu-default`` (and its one-core and 6 x 50 variants for the
design and trials tables), every run under ``data/runs/generalization-cpu`` and
``data/runs/generalization-sim``. ``interval_divergence`` is checked on hand-made step frames whose
answer is known. Each run's trial rows are computed once per module (:func:`rows_of`), for the tables
and the checks alike.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from dlfp.analysis.runs import RunData, load_run, stall_threshold_s, trial_rows
from dlfp.analysis.tables import (
    BY_CONSTRUCTION,
    arms_table,
    async_mismatches,
    cost_checks,
    design_table,
    generalization_table,
    interval_divergence,
    paper_table,
    regime,
    trials_table,
)
from dlfp.paths import REPO_ROOT
from dlfp.trials.runfolder import MANIFEST, PREFLIGHT_STEPS
from dlfp.trials.schema import Manifest

RUNS = REPO_ROOT / "data" / "runs"
CPU = RUNS / "cpu-default"


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / MANIFEST).is_file())


@pytest.fixture(scope="module")
def rows(run: RunData) -> pd.DataFrame:
    return rows_of(run)


@pytest.fixture(scope="module")
def sim_runs() -> list[RunData]:
    return [load_run(d) for d in run_dirs(RUNS / "generalization-sim")]


@pytest.fixture(scope="module")
def cpu_ladder() -> list[RunData]:
    return [load_run(d) for d in run_dirs(RUNS / "generalization-cpu")]


_ROWS: dict[tuple[Path, tuple[int, ...], tuple[str, ...]], pd.DataFrame] = {}


def rows_of(run: RunData) -> pd.DataFrame:
    """:func:`trial_rows` of a run (tested in ``test_runs.py``), computed once per module: the tables
    compute them for every call, and the by-hand checks here need them too."""
    key = (run.path, tuple(run.trials), run.arms)
    if key not in _ROWS:
        _ROWS[key] = trial_rows(run)
    return _ROWS[key]


@pytest.fixture(scope="module", autouse=True)
def _rows_once() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("dlfp.analysis.tables.trial_rows", rows_of)
        yield


def reductions_by_hand(rows: pd.DataFrame, metric: str, arm: str = "dlfp") -> list[float]:
    """Per-trial 100 * (stock - arm) / stock, in trial order, straight from the rows."""
    out = []
    for k in sorted(rows.trial.unique()):
        s = rows[(rows.trial == k) & (rows.arm == "stock")][metric].item()
        d = rows[(rows.trial == k) & (rows.arm == arm)][metric].item()
        out.append(100 * (s - d) / s)
    return out


def t_interval(values: list[float]) -> tuple[float, float]:
    x = np.asarray(values)
    half = sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean() - half, x.mean() + half


# paper_table

def test_paper_table_reductions_are_the_per_trial_reductions(rows: pd.DataFrame) -> None:
    table = paper_table(rows)
    itl = reductions_by_hand(rows, "itl_p99_ms")
    assert list(table.index) == [0, 1, 2] and table.index.name == "trial"
    assert table["ITL reduction (%)"].tolist() == pytest.approx(itl, rel=1e-12)
    assert table["ITL reduction (%)"].mean() == pytest.approx(float(np.mean(itl)), rel=1e-12)
    assert table["TTFT change (%)"].tolist() == pytest.approx([-r for r in reductions_by_hand(rows, "ttft_p99_ms")])
    stock, dlfp = rows[rows.arm == "stock"].set_index("trial"), rows[rows.arm == "dlfp"].set_index("trial")
    assert table["P99 ITL stock (ms)"].tolist() == stock.itl_p99_ms.tolist()
    assert table["P99 TTFT DLFP (ms)"].tolist() == dlfp.ttft_p99_ms.tolist()
    assert table["gaps > ITL SLO, stock (%)"].tolist() == pytest.approx((100 * stock.stall_share).tolist())
    assert table["failures"].tolist() == (stock.n_failed + dlfp.n_failed).tolist() == [0, 0, 0]
    assert table["seed"].tolist() == [0, 1, 2]
    # the committed headline (README): DLFP lowers P99 ITL in every trial, and raises P99 TTFT
    assert (table["ITL reduction (%)"] > 0).all() and (table["TTFT change (%)"] > 0).all()


def test_paper_table_of_a_hand_made_arm() -> None:
    def row(trial: int, arm: str, itl: float, ttft: float, failed: int) -> dict[str, Any]:
        return {"trial": trial, "seed": 10 + trial, "arm": arm, "itl_p99_ms": itl, "ttft_p99_ms": ttft,
                "stall_share": itl / 1000, "slo_compliance": 0.5, "n_failed": failed, "agreement_rate": 0.75}

    rows = pd.DataFrame([row(0, "stock", 100, 200, 1), row(0, "x", 80, 250, 2),
                         row(1, "stock", 50, 100, 0), row(1, "x", 60, 50, 0)])
    table = paper_table(rows, arm="x")
    assert table["ITL reduction (%)"].tolist() == pytest.approx([20.0, -20.0])
    assert table["TTFT change (%)"].tolist() == pytest.approx([25.0, -50.0])
    assert table["gaps > ITL SLO, DLFP (%)"].tolist() == pytest.approx([8.0, 6.0])
    assert table["failures"].tolist() == [3, 0] and table["seed"].tolist() == [10, 11]
    assert table["output agreement"].tolist() == [0.75, 0.75]


# arms_table

def test_arms_table_rows_and_interval(run: RunData, rows: pd.DataFrame) -> None:
    table = arms_table(run, rows).set_index("arm")
    assert list(table.index) == ["stock", "dlfp"]
    assert table.loc["stock", "settings"] == "stock vLLM" and table.loc["dlfp", "settings"] == "DLFP"
    assert all(math.isnan(table.loc["stock", c]) for c in ("ITL reduction vs stock (%)", "ITL CI lo (%)",
                                                            "ITL CI hi (%)", "TTFT change vs stock (%)"))
    itl = reductions_by_hand(rows, "itl_p99_ms")
    lo, hi = t_interval(itl)
    assert table.loc["dlfp", "ITL reduction vs stock (%)"] == pytest.approx(np.mean(itl))
    assert (table.loc["dlfp", "ITL CI lo (%)"], table.loc["dlfp", "ITL CI hi (%)"]) == pytest.approx((lo, hi))
    assert table.loc["dlfp", "TTFT change vs stock (%)"] == pytest.approx(-np.mean(reductions_by_hand(rows,
                                                                                                    "ttft_p99_ms")))
    for arm in ("stock", "dlfp"):
        mine = rows[rows.arm == arm]
        assert table.loc[arm, "P99 ITL (ms)"] == pytest.approx(mine.itl_p99_ms.mean())
        assert table.loc[arm, "worst gap (ms)"] == mine.worst_gap_ms.max()


# regime

def test_simulated_output_agreement_is_shown_as_by_construction(sim_runs: list[RunData]) -> None:
    """The modeled executor's tokens are a hash of prompt and position: agreement is no check there."""
    table = arms_table(sim_runs[0], rows_of(sim_runs[0]))
    assert (table["output agreement"] == BY_CONSTRUCTION).all()


def _clear(rows: pd.DataFrame, share: float = 0.03) -> pd.DataFrame:
    """``rows`` with stock's stalls at ``share`` in every trial, above T* and above the objective alike."""
    stock = rows.arm == "stock"
    return rows.assign(long_gap_share=np.where(stock, share, rows.long_gap_share),
                       stall_share=np.where(stock, share, rows.stall_share))


def test_regime_is_clear_when_every_bound_holds_in_every_trial(run: RunData, rows: pd.DataFrame) -> None:
    clean = steady(with_manifest(run, lambda m: m["design"].update(problems=[])))
    r = regime(clean, _clear(rows))
    assert r == {"predicted_stall_share": (run.manifest.design or {})["predicted"]["stall_share"],
                 "realized_stall_share": pytest.approx(0.03), "flags": [], "verdict": "in regime"}


def test_regime_flags_each_trial_whose_stock_stalls_miss_the_objective(run: RunData, rows: pd.DataFrame) -> None:
    """Pooled, stock's stalls above T* clear the floor; one trial's gaps above the ITL objective do not:
    that trial is named, with its share, whatever the pool says."""
    clean = steady(with_manifest(run, lambda m: m["design"].update(problems=[])))
    base = _clear(rows)
    trials = sorted(base[base.arm == "stock"].trial)
    thin = base.assign(stall_share=np.where((base.arm == "stock") & (base.trial == trials[-1]), 0.0,
                                            base.stall_share))
    flags = regime(clean, thin)["flags"]
    assert len(flags) == 1, flags
    assert f"in 1 of {len(trials)} trials (trial {trials[-1]}: 0.00%)" in flags[0]
    assert "below the 1.0% a P99 reliably sees" in flags[0]
    assert f"ITL objective ({stall_threshold_s(run.config) * 1e3:g} ms)" in flags[0]
    assert regime(clean, thin.assign(stall_share=np.where(thin.arm == "stock", np.nan, thin.stall_share))
                  )["flags"][0].count("trial ") == len(trials)  # no gaps at all: no evidence, flagged


def with_manifest(run: RunData, edit) -> RunData:
    """``run`` with ``edit`` applied to its manifest as written (JSON), read back as a reader would."""
    manifest = copy.deepcopy(run.manifest.to_json())
    edit(manifest)
    return dataclasses.replace(run, manifest=Manifest.from_json(manifest, run.path / MANIFEST))


def test_regime_flags_each_reason_in_its_words(run: RunData, rows: pd.DataFrame) -> None:
    run = steady(with_manifest(run, lambda m: m["design"].update(problems=[])))
    rows = _clear(rows)
    stock = rows.arm == "stock"
    rare = rows.assign(long_gap_share=np.where(stock, 0.005, rows.long_gap_share))
    assert regime(run, rare)["verdict"] == ("OUTSIDE REGIME: stock's prefill stalls (gaps above T*) were 0.50% of "
                                            "gaps, below the 1.0% a pooled P99 reliably sees")
    common = rows.assign(long_gap_share=np.where(stock, 0.4, rows.long_gap_share))
    assert regime(run, common)["flags"] == ["stock's prefill stalls (gaps above T*) were 40.0% of gaps, above 25%: "
                                            "not a tail"]
    warned = with_manifest(run, lambda m: m["design"].update(problems=["load 0.9 above max_load 0.8"]))
    assert regime(warned, rows)["verdict"] == "OUTSIDE REGIME: predicted: load 0.9 above max_load 0.8"
    old = with_manifest(run, lambda m: m.pop("design"))
    assert regime(old, rows)["flags"] == ["no design record (run made before pre-flight designs)"]
    assert math.isnan(regime(old, rows)["predicted_stall_share"])
    partial = with_manifest(run, lambda m: m.update(status="interrupted"))
    assert regime(partial, rows)["flags"] == ["partial run (status interrupted)"]


def steady(run: RunData, slowed: dict[int, float] | None = None) -> RunData:
    """``run`` with every trial's stock steps replaced by its own pre-flight's step records, run
    ``slowed[trial]`` times slower where given: a machine whose speed held (or changed by that factor),
    whatever the committed run's machine did."""
    preflight = pd.read_parquet(run.path / PREFLIGHT_STEPS)
    tables = dict(run.tables)
    for k in run.trials:
        f = (slowed or {}).get(k, 1.0)
        tables[(k, "stock")] = {**tables[(k, "stock")], "steps": preflight.assign(complete_t=preflight.complete_t * f)}
    return dataclasses.replace(run, tables=tables)


def test_regime_flags_each_trial_run_at_another_speed_than_the_preflight(run: RunData, rows: pd.DataFrame) -> None:
    """The busy laptop: a pre-flight slowed by other work designs trials for a slower machine. Each
    trial whose stock steps ran beyond ``max_cost_drift`` of the pre-flight's is named with its ratios;
    within it, nothing is said."""
    clean = with_manifest(run, lambda m: m["design"].update(problems=[]))
    rows = _clear(rows)
    first, *rest = run.trials
    assert regime(steady(clean, {first: 1.7, rest[0]: 1 / 1.7}), rows)["flags"] == []
    flags = regime(steady(clean, {first: 0.4}), rows)["flags"]
    assert len(flags) == 1, flags
    assert flags[0].startswith(f"stock's steps did not cost what the pre-flight measured in 1 of "
                               f"{len(run.trials)} trials (trial {first}: its decode steps took 0.40x the "
                               "pre-flight's (median of ")
    assert "its mixed steps took 0.40x" in flags[0] and "beyond the 1.75x allowed" in flags[0]
    checks = cost_checks(steady(clean, {first: 2.5}))
    assert checks.set_index("trial").decode_ratio.to_dict() == pytest.approx({first: 2.5, **{k: 1.0 for k in rest}})
    assert [bool(off) for off in checks.off] == [True] + [False] * len(rest)
    loose = with_manifest(clean, lambda m: m["design"]["rules"].update(max_cost_drift=3.0))
    assert regime(steady(loose, {first: 0.4}), rows)["flags"] == []  # the design's own tolerance
    no_preflight = with_manifest(clean, lambda m: m["design"].pop("files"))
    assert cost_checks(no_preflight).empty  # a run without the pre-flight's records is not judged on it


def test_regime_flags_a_unit_that_ran_another_async_mode(run: RunData, rows: pd.DataFrame) -> None:
    """A GPU run that silently ran synchronously must not read like an async one (issue 19)."""
    run = steady(with_manifest(run, lambda m: m["design"].update(problems=[])))
    rows = _clear(rows)

    def ran(async_mode: bool, version: str | None = None):
        def edit(m):
            m["units"][1]["ran"] = {"scheduler": "DLFPScheduler", "async_scheduling": async_mode, "executor": "uni"}
            if version is not None:
                m["versions"]["vllm"] = version
        return edit
    unit = run.manifest.units[1]
    assert regime(with_manifest(run, ran(False)), rows)["flags"] == []  # the CPU build: sync, as asked (null)
    assert regime(with_manifest(run, ran(True)), rows)["flags"] == [
        f"{unit.label} ran with async scheduling on, though vLLM's default on this build is off"]
    gpu = with_manifest(run, ran(False, "0.32.0"))
    assert async_mismatches(gpu) == [
        f"{unit.label} ran with async scheduling off, though vLLM's default on this build is on"]
    asked = dataclasses.replace(gpu, config=dataclasses.replace(
        gpu.config, engine=dataclasses.replace(gpu.config.engine, async_scheduling=False)))
    assert async_mismatches(asked) == []  # asked for sync, ran sync


# design_table and trials_table

def test_design_table_reads_the_design_records(run: RunData) -> None:
    one_core = load_run(RUNS / "cpu-default-1core", tables=("requests", "tokens"))
    table = design_table([run, one_core], outcome=True).set_index("run")
    assert list(table.index) == ["cpu-default", "cpu-default-1core"]
    for r in (run, one_core):
        d, row = r.manifest.design, table.loc[r.path.name]
        assert row["decode step d (ms)"] == pytest.approx(1e3 * d["measured"]["decode_s"])
        assert row["prefill per token b (us)"] == pytest.approx(1e6 * d["measured"]["prefill_per_token_s"])
        assert row["arrival rate (req/s)"] == d["overrides"]["workload"]["rate_rps"]
        assert row["TPOT SLO (ms)"] == pytest.approx(d["overrides"]["slo"]["tpot_ms"])
        assert row["DLFP target T* (ms)"] == pytest.approx(1e3 * d["predicted"]["target_s"])
        assert row["engine threads"] == r.manifest.engine_env["VLLM_CPU_OMP_THREADS_BIND"]
        assert row["P99 ITL reduction (%)"] == pytest.approx(np.mean(reductions_by_hand(rows_of(r),
                                                                                        "itl_p99_ms")))
        assert row["DLFP on P99 ITL"].startswith(f"reduces it by a mean of {row['P99 ITL reduction (%)']:.1f}% (a ")
        assert row["design"] == "scaled" and row["regime"] == "in regime"
    assert table["engine threads"].to_dict() == {"cpu-default": "0-1", "cpu-default-1core": "0"}
    assert "P99 ITL reduction (%)" not in design_table([run]).columns  # outcome only on request


def test_trials_table_compares_splits_of_the_same_work(run: RunData) -> None:
    split = load_run(RUNS / "cpu-default-6x50", tables=("requests", "tokens"))
    table = trials_table([run, split])
    assert table["trials"].to_dict() == {"cpu-default": 3, "cpu-default-6x50": 6}
    assert table["requests per trial"].to_dict() == {"cpu-default": 100, "cpu-default-6x50": 50}
    for r in (run, split):
        row = table.loc[r.path.name]
        itl = reductions_by_hand(rows_of(r), "itl_p99_ms")
        assert (row["CI lo (%)"], row["CI hi (%)"]) == pytest.approx(t_interval(itl))
        assert row["CI width (points)"] == pytest.approx(row["CI hi (%)"] - row["CI lo (%)"])
        assert row["arms' wall time (s)"] == pytest.approx(sum(u.wall_s for u in r.manifest.units))


# generalization_table

def test_generalization_table_of_the_modeled_study(sim_runs: list[RunData]) -> None:
    table = generalization_table(sim_runs)
    assert table["run"].tolist() == [r.path.name for r in sim_runs] and len(table) == 5
    for r, (_, row) in zip(sim_runs, table.iterrows(), strict=True):
        engine = json.loads((r.path / MANIFEST).read_text())["config"]["engine"]
        assert row["model"] == engine["model"] and row["TP"] == engine["sim"]["tp"]
        assert row["device"] == f"{engine['sim']['profile']} (modeled)"
        assert row["stock budget"] == engine["max_num_batched_tokens"]
        assert row["source"].startswith("simulated: cost profile " + engine["sim"]["profile"])
        assert row["trials"] == len(r.trials) == 3
        rows = rows_of(r)
        itl = reductions_by_hand(rows, "itl_p99_ms")
        assert row["ITL reduction (%)"] == pytest.approx(np.mean(itl))
        assert (row["ITL CI lo (%)"], row["ITL CI hi (%)"]) == pytest.approx(t_interval(itl))
        assert row["TTFT reduction (%)"] == pytest.approx(np.mean(reductions_by_hand(rows, "ttft_p99_ms")))
        assert row["prefill stalls stock (% of gaps)"] == pytest.approx(
            100 * rows[rows.arm == "stock"].long_gap_share.mean())
        assert row["signal divergence"] == pytest.approx(
            float(np.median([interval_divergence(r.tables[(k, "dlfp")]["steps"]) for k in r.trials])))
        assert row["DLFP variant"] == "paper's law" and row["regime"] == regime(r, rows)["verdict"]
    assert set(zip(table.model, table.TP, strict=True)) >= {("qwen3-8b", 1), ("qwen3-8b", 2)}


def test_generalization_table_of_the_cpu_ladder(cpu_ladder: list[RunData]) -> None:
    table = generalization_table(cpu_ladder)
    assert table["run"].tolist() == [r.path.name for r in cpu_ladder]
    for r, (_, row) in zip(cpu_ladder, table.iterrows(), strict=True):
        assert row["model"] == r.config.engine.model and row["TP"] == r.config.engine.tensor_parallel_size == 1
        assert r.manifest.hardware["cpu_model"].replace("(R)", "").split()[0] in row["device"]
        assert "(modeled)" not in row["device"]
        assert row["source"].startswith("measured: ")
        assert row["ITL reduction (%)"] == pytest.approx(np.mean(reductions_by_hand(rows_of(r), "itl_p99_ms")))
    assert table.model.tolist() == ["qwen3-small", "qwen3-tiny"]


def test_generalization_table_skips_runs_without_the_arm(cpu_ladder: list[RunData]) -> None:
    assert generalization_table(cpu_ladder, arm="no-such-arm").empty


# interval_divergence on hand-made steps

def steps(schedule: list[float], complete: list[float], prefill: list[int] | None = None,
          decode: list[int] | None = None, exec_done: list[float | None] | None = None,
          source: list[str | None] | None = None) -> pd.DataFrame:
    """A step table; ``exec_done`` adds the executors' stamps, ``source`` the logged ``complete_source``."""
    n = len(schedule)
    df = pd.DataFrame({"step": range(n), "schedule_t": schedule, "complete_t": complete,
                       "prefill_tokens": prefill or [64] * n, "decode_reqs": decode or [2] * n})
    if exec_done is not None:
        df["exec_done_t"] = exec_done
    if source is not None:
        df["complete_source"] = source
    return df


def test_interval_divergence_known_answer() -> None:
    # scheduler-call intervals after steps 0..2: 1, 1, 1 (step 3 has none)
    # completion cadences of steps 1..3: 1.0, 1.25, 0.5 (step 0 has none)
    # mixed steps with both: 1 and 2 -> |1 - 1| / 1 = 0 and |1 - 1.25| / 1.25 = 0.2 -> median 0.1
    s = steps([0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.75, 3.25])
    assert interval_divergence(s) == pytest.approx(0.1)
    assert interval_divergence(s.iloc[::-1]) == pytest.approx(0.1)  # ordered by step, not by row
    # step 2 prefills nothing: only step 1 is mixed
    assert interval_divergence(steps([0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.75, 3.25], prefill=[64, 64, 0, 64])) == 0.0
    # step 1 has no decodes: only step 2 is mixed
    assert interval_divergence(steps([0.0, 1.0, 2.0, 3.0], [0.5, 1.5, 2.75, 3.25],
                                     decode=[2, 0, 2, 2])) == pytest.approx(0.2)


def test_interval_divergence_without_mixed_steps_is_nan() -> None:
    assert math.isnan(interval_divergence(steps([0.0, 1.0, 2.0], [0.5, 1.5, 2.5], prefill=[0, 0, 0])))
    assert math.isnan(interval_divergence(steps([0.0], [0.5])))


@settings(max_examples=50, deadline=None)
@given(intervals=st.lists(st.floats(1e-3, 1.0), min_size=3, max_size=30), lag=st.floats(0.0, 1e-3))
def test_a_synchronous_engine_has_no_divergence(intervals: list[float], lag: float) -> None:
    """Each step completes just before the next is scheduled: both signals measure the same step."""
    schedule = np.concatenate([[0.0], np.cumsum(intervals)])
    complete = np.concatenate([schedule[1:] - lag, [schedule[-1] + 1.0]])
    assert interval_divergence(steps(schedule.tolist(), complete.tolist())) == pytest.approx(0.0, abs=1e-9)


# The same steps under async scheduling: the device completes a step every 1.0 s (stamps), the engine
# core collects each output 0.1 to 0.6 s later; the scheduler calls 1 s apart.
ASYNC_SCHEDULE = [0.0, 1.0, 2.0, 3.0, 4.0]
ASYNC_STAMPS = [0.5, 1.5, 2.5, 3.5, 4.5]
ASYNC_COLLECT = [0.6, 2.0, 2.7, 3.9, 5.0]


def test_interval_divergence_uses_the_stamps_where_the_steps_carry_them() -> None:
    # collect cadences of steps 1..3: 1.4, 0.7, 1.2 -> |1 - c| / c: 0.2857, 0.4286, 0.1667 -> median 0.2857
    collect_only = steps(ASYNC_SCHEDULE, ASYNC_COLLECT)
    assert interval_divergence(collect_only) == pytest.approx(0.4 / 1.4)
    # stamp cadences are all 1.0, as are the scheduler-call intervals: no divergence
    stamped = steps(ASYNC_SCHEDULE, ASYNC_COLLECT, exec_done=ASYNC_STAMPS)
    assert interval_divergence(stamped) == pytest.approx(0.0, abs=1e-12)
    assert interval_divergence(stamped.iloc[::-1]) == pytest.approx(0.0, abs=1e-12)
    # no stamp on step 2 (say an unstamped step): the collect time 2.7 stands in for it alone
    # cadences of steps 1..3: 1.0, 1.2, 0.8 -> 0, 0.1667, 0.25 -> median 0.1667
    gap = steps(ASYNC_SCHEDULE, ASYNC_COLLECT, exec_done=[0.5, 1.5, None, 3.5, 4.5])
    assert interval_divergence(gap) == pytest.approx(0.2 / 1.2)
    # a table without any stamp (older runs, the stock executor) is the collect-time answer as before
    assert interval_divergence(steps(ASYNC_SCHEDULE, ASYNC_COLLECT, exec_done=[None] * 5)) == pytest.approx(0.4 / 1.4)


def test_interval_divergence_follows_the_logged_complete_source() -> None:
    """Where the step log says which time the controller took, that one is used, whatever the stamps."""
    told = steps(ASYNC_SCHEDULE, ASYNC_COLLECT, exec_done=ASYNC_STAMPS,
                 source=["exec_done", "exec_done", "collect", "exec_done", "exec_done"])
    assert interval_divergence(told) == pytest.approx(0.2 / 1.2)  # as with step 2's stamp missing
    every = told.assign(complete_source=["exec_done"] * 5)
    assert interval_divergence(every) == pytest.approx(0.0, abs=1e-12)
    pending = steps(ASYNC_SCHEDULE, [*ASYNC_COLLECT[:4], None], exec_done=[*ASYNC_STAMPS[:4], None],
                    source=[*["exec_done"] * 4, None])  # step 4 pending at shutdown: no cadence
    assert interval_divergence(pending) == pytest.approx(0.0, abs=1e-12)


def test_interval_divergence_rebuilds_the_controllers_choice_of_impossible_stamps() -> None:
    """Without ``complete_source`` (logs before it), stamps the controller would have refused (here step
    2's duplicate of step 1's and step 3's from after its collection) give way to the collect times."""
    bad = steps(ASYNC_SCHEDULE, ASYNC_COLLECT, exec_done=[0.5, 1.5, 1.5, 9.0, 4.5])
    # best completion: 0.5, 1.5, 2.7, 3.9, 4.5 -> cadences of steps 1..3: 1.0, 1.2, 1.2 -> 0, 1/6, 1/6
    assert interval_divergence(bad) == pytest.approx(0.2 / 1.2)


@settings(max_examples=50, deadline=None)
@given(intervals=st.lists(st.floats(1e-3, 1.0), min_size=3, max_size=30), lag=st.floats(0.0, 1e-3),
       stamp_lag=st.floats(0.0, 0.99))
def test_a_synchronous_engine_whose_stamps_are_its_collect_times_has_no_divergence(
        intervals: list[float], lag: float, stamp_lag: float) -> None:
    """Sync: each step's output appears, is collected and the next step is scheduled back to back, so
    stamps at the collect times, or a constant time before them (and after each step's scheduling), give
    zero divergence too."""
    schedule = np.concatenate([[0.0], np.cumsum(intervals)])
    complete = np.concatenate([schedule[1:] - lag, [schedule[-1] + 1.0]])
    stamps = complete - stamp_lag * (min(intervals) - lag)
    for stamp in (complete, stamps):
        s = steps(schedule.tolist(), complete.tolist(), exec_done=stamp.tolist())
        assert interval_divergence(s) == pytest.approx(0.0, abs=1e-9)
