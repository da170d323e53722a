"""Fuzzing every input a user writes: one wrong edit of a valid document is refused with a one-line
``ValueError`` naming the edited field, or accepted and then consistent everywhere it is used;
never a traceback from inside pandas, numpy, PyYAML or vLLM.

Entries: trial configs (every field, ``arms`` and ``design`` included), YAML config files and
``dlfp trial`` on them, workload specs and length distributions, DLFP parameters, modeled-accelerator
settings, cost profiles, design rules, notebook parameters (the helpers and the validation cells of
the notebooks themselves) and the declared claims file. No engine starts: an accepted config is
checked up to the design the trial runner would derive from a pre-flight.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields

import pytest
import yaml
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from dlfp import cli
from dlfp.book import notebook
from dlfp.control.params import SPECS, DLFPParams, parse_params
from dlfp.harness.engine import EngineSpec
from dlfp.harness.workload import LengthDist, WorkloadSpec, generate
from dlfp.paths import REPO_ROOT
from dlfp.sim.config import CONFIG_KEY, SimConfig, parse_sim_config
from dlfp.sim.costmodel import PROFILE_DIR, Profile, parse_profile
from dlfp.studies.claims import CLAIMS_FILE, load_claims
from dlfp.trials.arms import REFERENCE
from dlfp.trials.config import TrialConfig, load_config, parse_config
from dlfp.trials.design import DesignSpec, Rules, derive
from dlfp.trials.prediction import workload_facts
from tests.fuzzing import JUNK, apply, assert_names, check_refusal_or, finite, mutations
from tests.trials.fakes import CPU_LIKE

REPO = REPO_ROOT

BASE_CONFIG = {
    "name": "fuzz", "trials": 2, "seeds": [3, 7],
    "engine": {**{f.name: getattr(EngineSpec(), f.name) for f in fields(EngineSpec) if f.name != "dlfp"},  # every one
               "max_num_batched_tokens": 2048, "max_num_seqs": 32,
               "sim": {"profile": "a100", "tp": 1, "async_scheduling": True, "dtype_bytes": 2}},
    "dlfp": {s.name: s.default for s in SPECS if s.name not in ("enabled", "step_log")},  # every parameter
    "arms": [{"name": "stock"}, {"name": "dlfp", "dlfp": {"gain": 0.3, "signal": "completion"}},
             {"name": "dlfp-sized", "dlfp": {"chunk_init": "@target_chunk"}},
             {"name": "vllm-cap", "dlfp": None, "engine": {"long_prefill_token_threshold": "@target_chunk"}},
             {"name": "sarathi", "engine": {"max_num_batched_tokens": "@sarathi_budget", "max_num_seqs": 16}}],
    "design": {"kind": "scaled", "enforce": True, **asdict(Rules())},  # every rule
    "workload": {"n_requests": 20, "rate_rps": 4.0, "vocab_size": 32000, "max_model_len": 4096, "classes": [
        {"name": "short", "weight": 0.75, "prompt_len": {"uniform": [32, 256]},
         "output_len": {"lognormal": {"median": 64, "sigma": 0.5, "min": 8, "max": 160}}},
        {"name": "long", "weight": 0.25, "prompt_len": {"fixed": 600}, "output_len": 16}]},
    "slo": {"ttft_ms": 5000.0, "tpot_ms": 100.0},
    "telemetry_interval_s": 0.5,
}
"""A valid config that sets every field a user can set, so each is a mutation target."""


def _valid_workload(spec: WorkloadSpec, max_model_len: int | None = None) -> None:
    """An accepted workload generates what it says: n requests, lengths inside their class's
    bounds and the model length, finite increasing arrivals, token ids inside the vocabulary."""
    if spec.n_requests > 500:
        return  # big enough to be slow; the bounds below do not depend on n
    try:
        requests = generate(spec)
    except ValueError as exc:  # documented: the workload's own max_model_len is checked against the draws
        assert spec.max_model_len is not None and "max_model_len" in str(exc), str(exc)
        assert any(c.prompt_len.hi + c.output_len.hi > spec.max_model_len for c in spec.classes)
        assert max_model_len is None  # a trial config refuses such bounds before any work
        return
    assert len(requests) == spec.n_requests
    classes = {c.name: c for c in spec.classes}
    arrivals = [r.arrival_s for r in requests]
    assert all(math.isfinite(a) and a > 0 for a in arrivals) and arrivals == sorted(arrivals)
    for r in requests:
        c = classes[r.cls]
        assert c.prompt_len.lo <= r.prompt_len <= c.prompt_len.hi and c.output_len.lo <= r.output_len <= c.output_len.hi
        limit = min(x for x in (max_model_len, spec.max_model_len, math.inf) if x is not None)
        assert r.prompt_len + r.output_len <= limit
        assert all(0 <= t < spec.vocab_size for t in r.prompt_token_ids)


def _valid_config(cfg: TrialConfig) -> None:
    """What the trial runner does with an accepted config, short of starting an engine."""
    assert isinstance(cfg, TrialConfig)
    assert len(cfg.seeds) == cfg.raw["trials"] == len(set(cfg.seeds))
    assert REFERENCE in cfg.arm_names and cfg.engine_for(REFERENCE).dlfp["enabled"] is False
    assert finite(cfg.ttft_slo_s) and cfg.ttft_slo_s > 0 and finite(cfg.tpot_slo_s) and cfg.tpot_slo_s > 0
    assert parse_config(json.loads(json.dumps(cfg.raw))) == cfg  # the manifest's copy parses back the same
    _valid_workload(cfg.workload_spec(cfg.seeds[0]), cfg.engine.max_model_len)
    # The runner derives the design from the pre-flight, then runs the config with its overrides.
    design = derive(cfg.design, CPU_LIKE, workload_facts(cfg.raw), cfg.raw)
    try:
        ran = cfg.with_overrides(design.overrides)
    except ValueError as exc:  # a derived value (an arm's @target_chunk, the design's ITL objective ...) that does
        # not fit the other settings is known only after the pre-flight; it is refused naming the field
        assert str(exc).startswith("config field '") and "\n" not in str(exc), str(exc)
        return
    for arm in ran.arm_names:  # every arm's engine, as the runner starts it
        assert DLFPParams(**ran.engine_for(arm).dlfp).enabled == (ran.arm(arm).dlfp is not None)
    _valid_workload(ran.workload_spec(ran.seeds[0]), ran.engine.max_model_len)


@settings(max_examples=400, deadline=None)
@given(mutations(BASE_CONFIG, root=True))
def test_trial_config(mutation) -> None:
    raw = apply(BASE_CONFIG, mutation)
    event(check_refusal_or(_valid_config, lambda: parse_config(raw), mutation))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "trials", "seeds", "engine", "dlfp", "arms", "design", "workload",
                                        "slo", "telemetry_interval_s"]), JUNK, min_size=1, max_size=3))
def test_trial_config_fields_all_wrong(raw) -> None:
    """Several top-level fields replaced at once: the first bad one is named."""
    try:
        cfg = parse_config(raw)
    except ValueError as exc:
        assert "\n" not in str(exc) and any(k in str(exc) for k in raw), str(exc)
        event("refused")
        return
    _valid_config(cfg)
    event("accepted")


YAML_TEXT = st.one_of(
    st.text(max_size=60),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
    st.sampled_from(["trials: [", "{a: 1", "- 1\n- 2", "trials: 1\ntrials: 2", "? [a]\n: 1", "*x",
                     "!!python/object:os.system x", "workload: !!binary aGVsbG8=", "\t- x", "slo: 5",
                     "engine: qwen3-tiny", "arms: stock"]),
    JUNK.map(lambda v: yaml.safe_dump(v)),
)


@settings(max_examples=150, deadline=None)
@given(YAML_TEXT)
def test_config_file_and_dlfp_trial(tmp_path_factory, text) -> None:
    """A config file of any text: ``load_config`` refuses it naming the file or a field, and
    ``dlfp trial`` exits 2 with one line (never a traceback, never an engine)."""
    path = tmp_path_factory.mktemp("cfg") / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        cfg = load_config(str(path))
    except ValueError as exc:
        assert "\n" not in str(exc), str(exc)
        event("refused")
    else:
        _valid_config(cfg)
        event("accepted")
        return
    rc, err = _cli(["trial", str(path), "--out", str(path.parent / "run"), "--quiet"])
    assert rc == 2 and err.count("\n") == 1 and err.startswith("dlfp: error: "), err
    assert not (path.parent / "run").exists()


def _cli(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv)
    return rc, err.getvalue()


BASE_WORKLOAD = {**BASE_CONFIG["workload"], "seed": 5}


@settings(max_examples=300, deadline=None)
@given(mutations(BASE_WORKLOAD, root=True))
def test_workload_spec(mutation) -> None:
    raw = apply(BASE_WORKLOAD, mutation)
    event(check_refusal_or(_valid_workload, lambda: WorkloadSpec.from_dict(raw), mutation))


LENGTHS = st.one_of(
    JUNK,
    st.integers(-2, 2 ** 21),
    st.fixed_dictionaries({"fixed": JUNK | st.integers(0, 2 ** 21)}),
    st.fixed_dictionaries({"uniform": st.lists(JUNK | st.integers(-1, 2 ** 21), max_size=3)}),
    st.fixed_dictionaries({"lognormal": st.dictionaries(st.sampled_from(["median", "sigma", "min", "max", "mu"]),
                                                        JUNK | st.floats(-1, 1e6), max_size=5)}),
)


@settings(max_examples=300, deadline=None)
@given(LENGTHS)
def test_length_distribution(raw) -> None:
    """Any value where a length distribution belongs: parsed to bounds its draws respect, or refused by name."""
    import numpy as np

    try:
        dist = LengthDist.parse(raw, "prompt_len")
    except ValueError as exc:
        assert str(exc).startswith("prompt_len: ") and "\n" not in str(exc), str(exc)
        event("refused")
        return
    draws = dist.sample(np.random.default_rng(0), 50)
    assert 1 <= dist.lo <= dist.hi and ((draws >= dist.lo) & (draws <= dist.hi)).all()
    event("accepted")


BASE_PARAMS = dict(BASE_CONFIG["dlfp"])


def _valid_params(p: DLFPParams) -> None:
    assert 1 <= p.chunk_min <= p.chunk_init <= p.chunk_max and 0 < p.target_interval_s <= 60
    assert 0 < p.gain <= 2 and isinstance(p.enabled, bool) and isinstance(p.anti_windup, bool)


@settings(max_examples=250, deadline=None)
@given(mutations(BASE_PARAMS))
def test_dlfp_params(mutation) -> None:
    raw = apply(BASE_PARAMS, mutation)
    event(check_refusal_or(_valid_params, lambda: parse_params(raw), mutation))


BASE_SIM = dict(BASE_CONFIG["engine"]["sim"])


def _valid_sim(c: SimConfig) -> None:
    assert isinstance(c.tp, int) and c.tp >= 1 and c.dtype_bytes in (1, 2, 4) and isinstance(c.profile, str)


@settings(max_examples=200, deadline=None)
@given(st.one_of(mutations(BASE_SIM), st.tuples(st.just("replace"), st.just(()), JUNK)))
def test_sim_config(mutation) -> None:
    raw = {CONFIG_KEY: apply(BASE_SIM, mutation)}
    event(check_refusal_or(_valid_sim, lambda: parse_sim_config(raw), mutation, extra=(CONFIG_KEY,)))


BASE_PROFILE = yaml.safe_load((PROFILE_DIR / "a100.yaml").read_text(encoding="utf-8"))


def _valid_profile(p: Profile) -> None:
    values = {f: getattr(p, f) for f in p.__dataclass_fields__ if f not in ("name", "device")}
    assert all(finite(v) and v > 0 for v in values.values())
    assert all(v <= 1 for f, v in values.items() if f.endswith("efficiency"))


@settings(max_examples=300, deadline=None)
@given(mutations(BASE_PROFILE, root=True))
def test_cost_profile(mutation) -> None:
    raw = apply(BASE_PROFILE, mutation)
    # A profile's numbers are {value, source}: an edit inside one names its "section.key".
    op, path, _ = mutation
    entry = path[:2] if len(path) >= 2 else ()
    extra = (".".join(map(str, entry)),) if entry and ((op == "add" and len(path) == 2) or len(path) == 3) else ()
    event(check_refusal_or(_valid_profile, lambda: parse_profile(raw, origin="a100.yaml"), mutation, extra))


BASE_DESIGN = dict(BASE_CONFIG["design"])


@settings(max_examples=200, deadline=None)
@given(st.one_of(mutations(BASE_DESIGN), st.tuples(st.just("replace"), st.just(()), JUNK)))
def test_design_rules(mutation) -> None:
    raw = apply(BASE_DESIGN, mutation)

    def valid(spec: DesignSpec) -> None:
        r = spec.rules
        assert spec.kind in ("scaled", "fixed") and r.min_stall_share <= r.stall_share <= r.max_stall_share < 1

    event(check_refusal_or(valid, lambda: DesignSpec.parse(raw), mutation, extra=("design",)))


BASE_CLAIMS = yaml.safe_load(CLAIMS_FILE.read_text(encoding="utf-8"))


@settings(max_examples=150, deadline=None)
@given(mutations(BASE_CLAIMS, root=True))
@example(mutation=("replace", ("claims", 0, "design_implied", "rules", 0), []))  # a fuzz find: a list as a rule
# name raised TypeError (unhashable) instead of the file's error
def test_claims_file(tmp_path_factory, mutation) -> None:
    """The declared claims: an edit is refused naming the file and the key, or every row stays evaluable."""
    path = tmp_path_factory.mktemp("claims") / "claims.yaml"
    path.write_text(yaml.safe_dump(apply(BASE_CLAIMS, mutation)), encoding="utf-8")

    def valid(claims: list) -> None:
        from dlfp.studies.claims import VALUES, design_reasons, expectation_text, falsifier
        from dlfp.trials.design import RULE_DOCS

        design_reasons(claims)
        for claim in claims:
            assert all(r in RULE_DOCS for r in (claim.get("design_implied") or {}).get("rules", []))
            for row in claim["rows"]:
                assert isinstance(row["run"], str) and row["value"] in VALUES
                expectation_text(row["expect"]), falsifier(row["expect"])
                if row.get("given") is not None:
                    assert row["given"]["value"] in VALUES and isinstance(row["given"]["unmet"], str)
                    falsifier(row["given"]["expect"])
                for key, bound in row["expect"].items():
                    bounds = bound if key == "ci_overlaps" else [bound]
                    assert all(finite(b) for b in bounds) and len(bounds) == (2 if key == "ci_overlaps" else 1)

    # Some edits only make sense named by the claim's id or position; the file is always named.
    try:
        claims = load_claims(path)
    except ValueError as exc:
        assert str(path) in str(exc), str(exc)
        assert_names(exc, mutation, extra=("claims",))
        event("refused")
        return
    valid(claims)
    event("accepted")


# Notebook parameters: the helpers the notebooks call, then the notebooks' own validation cells.

CONFIG_FILE = str(REPO / "configs" / "cpu-default.yaml")
BASE_OVERRIDES = {"trials": 2, "workload": {"n_requests": 12, "rate_rps": 2.0}, "slo": {"ttft_ms": 4000.0},
                  "dlfp": {"gain": 0.4}, "design": {"kind": "fixed"}}


@settings(max_examples=150, deadline=None)
@given(mutations(BASE_OVERRIDES, root=True))
def test_notebook_overrides(mutation) -> None:
    overrides = apply(BASE_OVERRIDES, mutation)
    # Overrides replaced by another mapping: the refusal names one of its fields.
    replaced = isinstance(overrides, dict) and not mutation[1]
    fields = [s for k in overrides for s in (str(k), repr(k)[1:-1])] if replaced else []
    event(check_refusal_or(_valid_config, lambda: notebook.config_with_overrides(CONFIG_FILE, overrides), mutation,
                           extra=("overrides", *fields)))


PARAMS = st.one_of(JUNK, st.sampled_from([CONFIG_FILE, str(REPO / "configs"), "configs/nope.yaml", "/dev/null"]))


@settings(max_examples=100, deadline=None)
@given(config=PARAMS, overrides=st.one_of(JUNK, st.just({})))
def test_notebook_config_parameter(config, overrides) -> None:
    try:
        cfg = notebook.config_with_overrides(config, overrides)
    except ValueError as exc:
        assert "\n" not in str(exc), str(exc)
        event("refused")
        return
    _valid_config(cfg)
    event("accepted")


MODELS = st.one_of(JUNK, st.lists(st.sampled_from(["qwen3-tiny", "qwen3-small", "nope", "a" * 300, ""]), max_size=3))
TPS = st.one_of(JUNK, st.lists(st.one_of(st.integers(-1, 4), st.booleans(), st.floats(0, 2)), max_size=3))


@settings(max_examples=100, deadline=None)
@given(models=MODELS, tps=TPS, out_root=st.one_of(JUNK, st.just("data/runs/x")))
def test_generalization_plan(models, tps, out_root) -> None:
    try:
        plan = notebook.generalization_plan(str(REPO / "configs" / "cpu-generalization.yaml"), models, tps,
                                            out_root, {})
    except ValueError as exc:
        assert "\n" not in str(exc) and "notebook parameter" in str(exc), str(exc)
        event("refused")
        return
    assert len(plan) == len(models) * len(tps)
    for _, cfg in plan:
        assert cfg.engine.model in models and cfg.engine.tensor_parallel_size in tps
    event("accepted")


RUN_ENTRY = {"profile": "a100", "model": "qwen3-0.6b", "tp": 1, "dlfp": {"signal": "completion"}}


@settings(max_examples=100, deadline=None)
@given(st.one_of(mutations(RUN_ENTRY), st.tuples(st.just("replace"), st.just(()), JUNK)))
def test_modeled_plan(mutation) -> None:
    entry = apply(RUN_ENTRY, mutation)

    def valid(plan: list) -> None:
        ((_, cfg),) = plan
        assert cfg.engine.sim["profile"] == entry["profile"] and cfg.engine.sim["tp"] == entry.get("tp", 1)

    event(check_refusal_or(valid, lambda: notebook.modeled_plan(str(REPO / "configs" / "sim-generalization.yaml"),
                                                                [entry], "data/runs/x", {"trials": 1}),
                           mutation, extra=("runs",)))


def _validation_cell(name: str) -> tuple[dict, str]:
    """A notebook's parameters (as papermill would inject them) and its first code cell after them."""
    cells = [c for c in json.loads((REPO / "notebooks" / name).read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    assert "parameters" in cells[0]["metadata"].get("tags", [])
    defaults: dict = {}
    exec("".join(cells[0]["source"]), defaults)  # the repository's own notebook
    defaults.pop("__builtins__")
    return defaults, "".join(cells[1]["source"])


RUN_DIRS = st.sampled_from(["", ".", "data/runs", "configs/cpu-default.yaml", "/dev/null"]) | st.text(max_size=10)
NOTEBOOK_PARAMS = {
    "00_verify.ipynb": {"model": st.sampled_from(["qwen3-tiny", "nope", "configs"]) | st.text(max_size=10),
                        "tensor_parallel_size": st.integers(-1, 3) | JUNK,
                        "dtype": st.sampled_from(["float32", "bfloat16", "float64"]) | JUNK,
                        "enforce_eager": st.booleans() | JUNK},
    "01_paired_trials.ipynb": {"config": PARAMS, "overrides": JUNK},
    "02_generalization.ipynb": {"models": MODELS, "tensor_parallel_sizes": TPS, "overrides": JUNK,
                                "modeled_runs": st.none() | st.lists(JUNK, max_size=2) | JUNK},
    "03_results.ipynb": {"run_dir": RUN_DIRS},
    "04_reproducibility.ipynb": {"run_dir": RUN_DIRS},
}
"""Values a user can pass with ``papermill -p``; a name that is no string, or too long for a path,
is refused by name too (see the test below)."""
HELPER_NAMES = {"modeled_runs": "runs"}
"""Notebook parameters that the helper they are passed to names by its own parameter name."""


@pytest.mark.parametrize("name", sorted(NOTEBOOK_PARAMS))
def test_notebook_validation_cells(name) -> None:
    """The notebook's first code cell after the parameters, run as papermill runs it with one parameter
    wrong: it stops with a ValueError naming that parameter (the cells start no engine)."""
    defaults, cell = _validation_cell(name)

    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(sorted(NOTEBOOK_PARAMS[name])).flatmap(
        lambda key: st.tuples(st.just(key), NOTEBOOK_PARAMS[name][key])))
    def one_wrong(edit) -> None:
        key, value = edit
        params = {**defaults, key: value}
        try:
            exec(cell, dict(params))
        except ValueError as exc:
            named = (key, HELPER_NAMES.get(key, key), "config field", "unknown config field")
            assert "\n" not in str(exc) and any(n in str(exc) for n in named), str(exc)
            event(f"{name}: refused")
            return
        event(f"{name}: accepted")

    one_wrong()


@pytest.mark.parametrize(("name", "key", "value"), [
    ("00_verify.ipynb", "model", None), ("00_verify.ipynb", "model", "a" * 300),
    ("03_results.ipynb", "run_dir", 5), ("04_reproducibility.ipynb", "run_dir", None),
])
def test_notebook_parameter_that_is_no_path(name, key, value) -> None:
    defaults, cell = _validation_cell(name)
    with pytest.raises(ValueError, match=key):
        exec(cell, {**defaults, key: value})


def test_engine_dtype_is_checked_before_any_engine() -> None:
    with pytest.raises(ValueError, match="dtype"):
        parse_config({"engine": {"dtype": "banana"}})


def _two_classes(**kw) -> dict:
    return {"n_requests": 10, "rate_rps": 1.0, "classes": [
        {"name": "a", "prompt_len": 8, "output_len": 4, "weight": kw.get("w", 1.0)},
        {"name": "b", "prompt_len": {"uniform": kw.get("u", [8, 16])}, "output_len": 4, "weight": kw.get("w", 1.0)}],
        **({"rate_rps": kw["rate"]} if "rate" in kw else {})}


FOUND = [  # (what is called, input, what the refusal names); each raised deep inside Python or was accepted
    (parse_config, {"slo": None}, "'slo'"),  # TypeError: 'NoneType' object is not iterable
    (parse_config, {"workload": [1]}, "'workload'"),  # TypeError from dict()
    (parse_config, {"dlfp": "abc"}, "'dlfp'"),  # ValueError of dict(): "dictionary update sequence"
    (parse_config, {"trials": 1, "seeds": [[1]]}, "'seeds'"),  # TypeError: unhashable type: 'list'
    (parse_config, {1: 2, "trails": 3}, "unknown config field(s) [1, 'trails']"),  # TypeError from sorted()
    (parse_config, {"engine": {"max_model_len": 64}}, "'engine.max_model_len' = 64"),  # accepted: vLLM refused later
    (parse_config, {"workload": {"max_model_len": 500}}, "'workload.max_model_len' = 500"),  # refused after pre-flight
    (parse_config, {"engine": {"extra": {1: 2}}}, "'engine.extra'"),  # accepted: TypeError at engine start
    (parse_config, {"engine": {"model": "a" * 300}}, "'engine.model'"),  # OSError: File name too long
    (parse_params, {1: 2, "gian": 3}, "unknown dlfp parameter(s) [1, 'gian']"),  # TypeError from sorted()
    (lambda raw: parse_sim_config({CONFIG_KEY: raw}), [], "dlfp_sim must be a mapping"),  # accepted as defaults
    (lambda raw: parse_sim_config({CONFIG_KEY: raw}), {1: 2, "x": 1}, "unknown dlfp_sim setting(s)"),  # TypeError
    (lambda raw: parse_profile({**BASE_PROFILE, **raw}), {1: 2, "x": 1}, "unknown key(s) [1, 'x']"),  # TypeError
    (WorkloadSpec.from_dict, _two_classes(w=1e308), "weights with a finite sum"),  # accepted: every request 'b'
    (WorkloadSpec.from_dict, _two_classes(rate=5e-324), "rate_rps"),  # accepted: every arrival at inf
    (WorkloadSpec.from_dict, _two_classes(u=b"ab"), "uniform"),  # accepted as uniform [97, 98]
    (lambda raw: notebook.config_with_overrides(raw, {}), None, "'config'"),  # TypeError from Path(None)
    (lambda raw: notebook.generalization_plan(CONFIG_FILE, ["qwen3-tiny"], raw, "out", {}), [True],
     "'tensor_parallel_sizes'"),  # accepted True as a TP size
    (lambda raw: notebook.generalization_plan(CONFIG_FILE, ["qwen3-tiny"], raw, "out", {}), 2,
     "'tensor_parallel_sizes'"),  # TypeError: 'int' object is not iterable
    (lambda raw: notebook.modeled_plan(str(REPO / "configs" / "sim-generalization.yaml"), raw, "out", {}),
     [{"profile": "a100"}], "'runs'"),  # TypeError: StudyRun() missing 'model'
    (lambda raw: notebook.modeled_plan(str(REPO / "configs" / "sim-generalization.yaml"), raw, "out", {}),
     [{"profile": "a100", "model": "qwen3-0.6b", "dlfp": {1: 2, "x": 1}}], "'runs'"),  # TypeError from sorted()
]


@pytest.mark.parametrize(("call", "raw", "needle"), FOUND)
def test_inputs_fuzzing_found(call, raw, needle) -> None:
    with pytest.raises(ValueError) as err:
        call(raw)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(("text", "needle"), [
    ("claims: [5]", "claims[0]"),  # TypeError: argument of type 'int' is not iterable
    ("- 1", "non-empty list under 'claims'"),  # AttributeError: 'list' object has no attribute 'get'
    ("claims: [{id: x, claim: c, paper: p, rows: [{run: gpu, value: failures, expect: [at_most]}]}]",
     "expectation ['at_most']"),  # accepted; AttributeError in evaluate()
    ("claims: [{id: x, claim: c, paper: p, rows: [{run: gpu, value: failures, expect: {at_most: x}}]}]",
     "expectation {'at_most': 'x'}"),  # accepted; TypeError in evaluate()
    ("claims: [{id: x, claim: c, paper: p, rows: [{value: failures, expect: {at_most: 0}}]}]",
     "has run None"),  # accepted; KeyError in evaluate()
    ("claims: [", "not valid YAML"),  # yaml.scanner.ScannerError
])
def test_claims_fuzzing_found(tmp_path, text, needle) -> None:
    path = tmp_path / "claims.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_claims(path)
    assert str(path) in str(err.value) and needle in str(err.value), str(err.value)
