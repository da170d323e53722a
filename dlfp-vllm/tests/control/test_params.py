"""DLFP parameters (:mod:`dlfp.control.params`): one table (``SPECS``) that matches the dataclass,
validation that refuses unknown keys and out-of-range or mistyped values naming the key, the value
and the allowed range the table documents, and the derived target interval T*."""

from __future__ import annotations

import math
import re
from dataclasses import FrozenInstanceError, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlfp.control.params import SIGNALS, SPECS, TARGETS, DLFPConfigError, DLFPParams, markdown_table, parse_params

SPEC = {s.name: s for s in SPECS}


def test_specs_table_lists_every_field_in_order_with_its_default() -> None:
    assert [s.name for s in SPECS] == [f.name for f in fields(DLFPParams)]
    defaults = DLFPParams()
    for spec in SPECS:
        assert getattr(defaults, spec.name) == spec.default, spec.name
        assert spec.unit and spec.allowed and spec.doc, spec.name


def test_choice_specs_name_the_accepted_words() -> None:
    assert SPEC["signal"].allowed == "schedule or completion" and SIGNALS == ("schedule", "completion")
    assert SPEC["target"].allowed == "slo or decode" and TARGETS == ("slo", "decode")


def test_no_or_empty_mapping_gives_the_documented_defaults() -> None:
    p = parse_params(None)
    assert p == parse_params({}) == DLFPParams()
    assert (p.enabled, p.itl_slo_ms, p.target_fraction, p.gain) == (True, 100.0, 0.5, 0.5)
    assert (p.chunk_min, p.chunk_max, p.chunk_init, p.pressure_decodes) == (32, 2048, 256, 1)
    assert (p.signal, p.target, p.target_decode_steps, p.anti_windup, p.step_log) == (
        "schedule", "slo", 4.0, False, None)


def test_given_values_are_kept() -> None:
    p = parse_params({"gain": 1.25, "chunk_min": 8, "chunk_max": 64, "chunk_init": 8, "signal": "completion",
                      "target": "decode", "step_log": "/tmp/s.jsonl", "enabled": False})
    assert (p.gain, p.chunk_min, p.chunk_max, p.chunk_init) == (1.25, 8, 64, 8)
    assert (p.signal, p.target, p.step_log, p.enabled) == ("completion", "decode", "/tmp/s.jsonl", False)


def test_unknown_keys_are_refused_by_name_with_the_known_ones() -> None:
    with pytest.raises(DLFPConfigError) as err:
        parse_params({"gain": 0.5, "gian": 1, "chunk": 3})
    msg = str(err.value)
    assert msg.startswith("unknown dlfp parameter(s) ['chunk', 'gian']; known: [")
    assert all(repr(s.name) in msg for s in SPECS)


def test_unknown_non_string_key_is_refused_not_a_type_error() -> None:
    with pytest.raises(DLFPConfigError, match=r"unknown dlfp parameter\(s\) \[1\]"):
        parse_params({1: 2})


def test_config_error_is_a_value_error() -> None:
    assert issubclass(DLFPConfigError, ValueError)


@pytest.mark.parametrize(("key", "value"), [
    ("gain", 9),
    ("gain", 0),
    ("gain", -0.1),
    ("itl_slo_ms", 0.0),
    ("itl_slo_ms", 60000.5),
    ("target_fraction", 1.01),
    ("target_decode_steps", 1),
    ("chunk_min", 0),
    ("chunk_min", 1048577),
    ("pressure_decodes", 0),
])
def test_out_of_range_value_is_named_with_key_value_and_allowed_range(key: str, value: Any) -> None:
    with pytest.raises(DLFPConfigError) as err:
        parse_params({key: value})
    assert str(err.value) == f"dlfp parameter {key!r} = {value!r} is invalid: allowed {SPEC[key].allowed}"


@pytest.mark.parametrize(("key", "value"), [
    ("gain", True),            # a bool is not a number here
    ("gain", "0.5"),           # nor a numeric string
    ("gain", math.nan),
    ("itl_slo_ms", math.inf),
    ("chunk_min", 32.5),       # not integral
    ("chunk_max", None),
    ("enabled", 1),
    ("enabled", "yes"),
    ("anti_windup", None),
    ("signal", "completions"),
    ("target", "SLO"),
    ("step_log", ""),
    ("step_log", 3),
])
def test_mistyped_value_is_refused_as_a_config_error(key: str, value: Any) -> None:
    with pytest.raises(DLFPConfigError, match=re.escape(f"dlfp parameter {key!r} = {value!r} is invalid")):
        parse_params({key: value})


def _bounds(allowed: str) -> tuple[bool, float, float]:
    """(lower bound open, lo, hi) of a purely numeric ``allowed`` text such as ``(0, 60000]``."""
    m = re.fullmatch(r"([(\[])([\d.]+), ([\d.]+)\]", allowed)
    assert m, allowed
    return m.group(1) == "(", float(m.group(2)), float(m.group(3))


NUMERIC = tuple(s.name for s in SPECS if re.fullmatch(r"[(\[][\d.]+, [\d.]+\]", s.allowed))


def test_every_number_with_fixed_bounds_is_checked_below() -> None:
    assert set(NUMERIC) == {"itl_slo_ms", "target_fraction", "gain", "chunk_min", "target_decode_steps",
                            "pressure_decodes", "prefill_every", "prefill_interval", "ttft_slo_ms"}


@pytest.mark.parametrize("key", NUMERIC)
def test_documented_bounds_are_the_enforced_bounds(key: str) -> None:
    """The table's ``allowed`` text is what validation does, at both ends (the text and the check are
    generated from one declaration; this reads the text as a user would)."""
    lo_open, lo, hi = _bounds(SPEC[key].allowed)
    integral = isinstance(SPEC[key].default, int)
    cast = int if integral else float
    base: dict[str, Any] = {"chunk_max": 1 << 20, "chunk_init": 1 << 20} if key == "chunk_min" else {}
    assert getattr(parse_params({**base, key: cast(hi)}), key) == hi
    with pytest.raises(DLFPConfigError):
        parse_params({**base, key: cast(hi) + (1 if integral else 1e-6 * hi)})
    if lo_open:
        with pytest.raises(DLFPConfigError):
            parse_params({**base, key: cast(lo)})
    else:
        assert getattr(parse_params({**base, key: cast(lo)}), key) == lo
        with pytest.raises(DLFPConfigError):
            parse_params({**base, key: cast(lo) - 1})


def test_chunk_bounds_depend_on_each_other() -> None:
    assert parse_params({"chunk_min": 64, "chunk_max": 64, "chunk_init": 64}).chunk_init == 64
    with pytest.raises(DLFPConfigError, match=r"'chunk_max' = 16 is invalid: allowed \[chunk_min = 32, 1048576\]"):
        parse_params({"chunk_min": 32, "chunk_max": 16})
    with pytest.raises(DLFPConfigError,
                       match=r"'chunk_init' = 4096 is invalid: allowed \[chunk_min = 32, chunk_max = 2048\]"):
        parse_params({"chunk_init": 4096})  # above the default chunk_max 2048
    with pytest.raises(DLFPConfigError, match=r"'chunk_init' = 16 is invalid"):
        parse_params({"chunk_init": 16})  # below the default chunk_min 32


def test_direct_construction_is_validated_too_and_frozen() -> None:
    with pytest.raises(DLFPConfigError, match="'gain'"):
        DLFPParams(gain=3.0)
    p = DLFPParams()
    with pytest.raises(FrozenInstanceError):
        p.gain = 1.0  # type: ignore[misc]


def test_target_interval_is_the_fraction_of_the_slo_in_seconds() -> None:
    assert DLFPParams().target_interval_s == pytest.approx(0.050)
    assert parse_params({"itl_slo_ms": 72.0, "target_fraction": 0.25}).target_interval_s == pytest.approx(0.018)
    assert parse_params({"itl_slo_ms": 60000, "target_fraction": 1}).target_interval_s == pytest.approx(60.0)


VALID = st.fixed_dictionaries({}, optional={
    "enabled": st.booleans(),
    "itl_slo_ms": st.floats(0.001, 60000),
    "target_fraction": st.floats(0.001, 1),
    "gain": st.floats(0.001, 2),
    "anti_windup": st.booleans(),
    "signal": st.sampled_from(SIGNALS),
    "target": st.sampled_from(TARGETS),
    "target_decode_steps": st.floats(1.001, 1000),
    "pressure_decodes": st.integers(1, 1 << 20),
    "prefill_every": st.integers(1, 1024),
    "step_log": st.none() | st.text(min_size=1, max_size=20),
})


@settings(max_examples=150, deadline=None)
@given(raw=VALID, chunks=st.lists(st.integers(1, 1 << 20), min_size=3, max_size=3))
def test_any_valid_mapping_is_accepted_and_kept(raw: dict[str, Any], chunks: list[int]) -> None:
    lo, init, hi = sorted(chunks)
    p = parse_params({**raw, "chunk_min": lo, "chunk_init": init, "chunk_max": hi})
    for key, value in raw.items():
        assert getattr(p, key) == value
    assert (p.chunk_min, p.chunk_init, p.chunk_max) == (lo, init, hi)
    itl = raw.get("itl_slo_ms", 100.0)
    frac = raw.get("target_fraction", 0.5)
    assert p.target_interval_s == pytest.approx(itl * frac / 1000.0)
    assert 0 < p.target_interval_s <= 60


def test_the_prefill_cadence_defaults_to_every_step_and_is_independent_of_enabled() -> None:
    """``prefill_every`` (issue 20's cadence baseline): 1 is every step (no cadence); with control off
    it is kept, since a cadence arm is stock's chunks at a cadence."""
    assert DLFPParams().prefill_every == SPEC["prefill_every"].default == 1
    assert SPEC["prefill_every"].allowed == "[1, 1024]" and SPEC["prefill_every"].unit == "steps"
    p = parse_params({"enabled": False, "prefill_every": 4})
    assert (p.enabled, p.prefill_every) == (False, 4)
    assert parse_params({"prefill_every": 1024}).prefill_every == 1024


@pytest.mark.parametrize("value", [0, -4, 1025, 2.5, True, "4", None, math.nan])
def test_a_bad_prefill_cadence_is_refused_naming_its_range(value: Any) -> None:
    with pytest.raises(DLFPConfigError, match=re.escape(f"'prefill_every' = {value!r} is invalid: allowed [1, 1024]")):
        parse_params({"enabled": False, "prefill_every": value})


README = Path(__file__).resolve().parents[2] / "README.md"
TABLE = re.compile(r"<!-- parameters: generated by dlfp.control.params.markdown_table -->\n"
                   r"(.*?)<!-- end of parameters -->", flags=re.S)


def test_the_readme_holds_the_generated_parameter_table() -> None:
    """The README types no row: its table is :func:`markdown_table`'s text, so a new or changed parameter
    fails here until the README is regenerated."""
    found = TABLE.search(README.read_text(encoding="utf-8"))
    assert found, f"{README}: the parameter table's markers are missing"
    assert found.group(1) == markdown_table(), (
        "the README's parameter table is not the generated one: paste the output of "
        "`python -c 'from dlfp.control.params import markdown_table; print(markdown_table(), end=\"\")'`")


def test_the_generated_table_has_a_row_per_parameter_that_escapes_pipes() -> None:
    rows = markdown_table().splitlines()[2:]
    assert [r.split(" | ")[0].strip("| `") for r in rows] == [s.name for s in SPECS]
    assert all(r.count(" | ") == 4 for r in rows)  # a '|' in a help text would split its row


def test_an_integral_float_count_becomes_an_int() -> None:
    """A deployer's JSON may write 512.0 for a chunk: it passes as the count it means, and the law counts
    tokens with an int."""
    p = parse_params({"chunk_min": 64.0, "chunk_max": 512.0, "chunk_init": 128.0})
    assert (p.chunk_min, p.chunk_max, p.chunk_init) == (64, 512, 128)
    assert all(type(v) is int for v in (p.chunk_min, p.chunk_max, p.chunk_init))
