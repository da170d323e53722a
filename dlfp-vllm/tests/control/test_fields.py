"""Config fields declared once (:mod:`dlfp.control.fields`): each kind's ``allowed`` text is what its check
does, bounds may name an earlier field, a growing word list is read at each check, and a dataclass field
without a rule is refused rather than passed unchecked."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.control.fields import (
    choice,
    declared,
    first_invalid,
    mapping,
    markdown_table,
    name,
    nested,
    number,
    path,
    pattern,
    refuse_invalid,
    rule,
    same_as,
    settle,
    switch,
    texts,
    word,
)

COLOURS = ["red", "green"]


@dataclass(frozen=True)
class Toy:
    on: bool = switch(True, "a switch")
    colour: str = word("red", lambda: tuple(COLOURS), "a word of a list that may grow")
    low: int = number(2, "tokens", 1, 100, "an integral number")
    high: int = number(50, "tokens", "low", 100, "bounded below by low")
    share: float = number(0.5, "-", 0, 1, "open below", lo_open=True)
    fraction: float = number(0.5, "-", 0, 1, "open at both ends", lo_open=True, hi_open=True)
    log: str | None = path("a file")
    width: int = choice(2, (1, 2, 4), "bytes", "one of a few integers")
    profile: str = name("a100", "a shipped name or a path | with a pipe")


def test_allowed_texts() -> None:
    allowed = {f.name: rule.allowed for f, rule in declared(Toy)}
    assert allowed == {"on": "true or false", "colour": "red or green", "low": "[1, 100]",
                       "high": "[low, 100]", "share": "(0, 1]", "fraction": "(0, 1)", "log": "null or a file path",
                       "width": "1, 2 or 4", "profile": "a non-empty text"}
    units = {f.name: rule.unit for f, rule in declared(Toy)}
    assert units["low"] == "tokens" and units["on"] == "-" and units["log"] == "path"


def test_fractional_bounds_are_written_as_numbers() -> None:
    @dataclass(frozen=True)
    class Frac:
        x: float = number(0.5, "-", 0.25, 1e6, "x")
    [(_, rule)] = list(declared(Frac))
    assert rule.allowed == "[0.25, 1000000]"


def test_the_defaults_pass() -> None:
    assert first_invalid(Toy()) is None


@pytest.mark.parametrize(("name", "value"), [
    ("on", 1), ("on", "true"), ("colour", "blue"), ("colour", 3), ("low", 0), ("low", 101), ("low", 2.5),
    ("low", True), ("low", "3"), ("low", math.nan), ("low", math.inf), ("low", 10**400),
    ("high", 1),  # below low = 2
    ("share", 0), ("share", 1.0001), ("share", -math.inf), ("fraction", 1), ("fraction", 0), ("log", ""), ("log", 3),
    ("width", 3), ("width", True), ("width", "2"), ("width", 2.5), ("profile", ""), ("profile", None), ("profile", 1),
])
def test_a_refused_value_is_named_with_its_allowed_text(name: str, value: Any) -> None:
    bad = first_invalid(Toy(**{name: value}))
    assert bad is not None
    allowed = next(r.allowed for f, r in declared(Toy) if f.name == name)
    assert bad[0] == name and bad[1] is value and bad[2] == allowed.replace("low", "low = 2")


@pytest.mark.parametrize(("name", "value"), [
    ("on", False), ("colour", "green"), ("low", 1), ("low", 100), ("low", 64.0), ("high", 2), ("share", 1),
    ("fraction", 0.999), ("share", 1e-9), ("log", "x.jsonl"), ("log", None), ("width", 4), ("profile", "x.yaml"),
])
def test_an_accepted_value_passes(name: str, value: Any) -> None:
    room = {"high": 100} if name == "low" else {}  # high is bounded below by low
    assert first_invalid(Toy(**{name: value, **room})) is None


def test_a_word_list_is_read_at_each_check() -> None:
    assert first_invalid(Toy(colour="blue")) is not None
    COLOURS.append("blue")
    try:
        assert first_invalid(Toy(colour="blue")) is None
        assert next(r.allowed for f, r in declared(Toy) if f.name == "colour") == "red or green or blue"
    finally:
        COLOURS.remove("blue")


def test_the_first_invalid_field_in_declaration_order_is_named() -> None:
    assert first_invalid(Toy(on=0, share=5))[0] == "on"  # type: ignore[index, arg-type]


def test_a_field_without_a_rule_is_refused() -> None:
    @dataclass(frozen=True)
    class Loose:
        x: int = field(default=1)
    with pytest.raises(TypeError, match=r"Loose.x declares no rule"):
        list(declared(Loose))


@given(st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True))
def test_a_number_passes_exactly_when_it_lies_within_its_bounds(value: float) -> None:
    ok = first_invalid(Toy(share=value)) is None
    assert ok == (0 < value <= 1)
    assert (first_invalid(Toy(fraction=value)) is None) == (0 < value < 1)
    ok_int = first_invalid(Toy(low=value, high=100)) is None
    assert ok_int == (1 <= value <= 100 and float(value).is_integer())


def test_the_markdown_table_has_a_row_per_field_with_json_defaults_and_escaped_pipes() -> None:
    rows = markdown_table(Toy, "setting").splitlines()
    assert rows[0] == "| setting | default | unit | allowed | meaning |"
    assert [r.split(" | ")[0].strip("| `") for r in rows[2:]] == [f.name for f, _ in declared(Toy)]
    assert all(r.count(" | ") == 4 for r in rows[2:])  # the pipe in profile's help is escaped
    assert "| `log` | `null` |" in rows[-3] and '| `profile` | `"a100"` |' in rows[-1]


@dataclass(frozen=True)
class Optional:
    eager: bool | None = switch(None, "null: the platform decides", nullable=True)
    tokenizer: str | None = name(None, "null: none", nullable=True)
    extra: dict[str, Any] = mapping("more arguments")
    sim: dict[str, Any] | None = mapping("null: real", nullable=True)
    cpus: int | None = number(None, "CPUs", 1, 64, "null: by the GPUs", nullable=True, integer=True)
    lines: tuple[str, ...] = texts("shell lines")


def test_null_passes_where_declared_and_mappings_need_text_keys() -> None:
    allowed = {f.name: rule.allowed for f, rule in declared(Optional)}
    assert allowed == {"eager": "null or true or false", "tokenizer": "null or a non-empty text",
                       "extra": "a mapping", "sim": "null or a mapping", "cpus": "null or [1, 64]",
                       "lines": "a list of texts"}
    assert first_invalid(Optional()) is None and Optional().extra == {} and Optional().extra is not Optional().extra
    assert first_invalid(Optional(eager=False, tokenizer="t", extra={"a": 1}, sim={})) is None
    for bad in ({"eager": 0}, {"tokenizer": ""}, {"extra": None}, {"extra": {1: 2}}, {"sim": []}, {"cpus": 1.5},
                {"cpus": 0}, {"lines": "x"}, {"lines": ["x", 1]}):
        assert first_invalid(Optional(**bad))[0] == next(iter(bad))  # type: ignore[index]


def test_a_bound_that_names_a_field_is_said_with_its_value() -> None:
    assert first_invalid(Toy(low=50, high=20)) == ("high", 20, "[low = 50, 100]")
    assert markdown_table(Optional, "key").splitlines()[-4:-2] == [
        "| `extra` | `{}` | - | a mapping | more arguments |",
        "| `sim` | `null` | - | null or a mapping | null: real |"]


def test_settle_makes_integral_floats_of_integer_fields_ints_and_leaves_the_rest() -> None:
    toy = Toy(low=4.0, high=100, share=1.0)  # type: ignore[arg-type]
    assert first_invalid(toy) is None
    settle(toy)
    assert (type(toy.low), toy.low, type(toy.share), toy.share) == (int, 4, float, 1.0)
    opt = Optional(cpus=8.0, lines=["a", "b"])  # type: ignore[arg-type]
    assert first_invalid(opt) is None
    settle(opt)
    assert (type(opt.cpus), opt.lines) == (int, ("a", "b"))


@dataclass(frozen=True)
class Inner:
    kind: str = word("a", ("a", "b"), "which")


@dataclass(frozen=True)
class Outer:
    inner: Inner = nested("{kind: a} or {kind: b}", "a small language of its own", Inner())


def test_a_nested_value_is_its_parsers_to_check_and_its_default_is_written_as_a_mapping() -> None:
    [(_, rule)] = list(declared(Outer))
    assert rule.allowed == "{kind: a} or {kind: b}" and first_invalid(Outer(inner="anything")) is None  # type: ignore[arg-type]
    assert markdown_table(Outer, "key").splitlines()[-1] == (
        '| `inner` | `{"kind": "a"}` | - | {kind: a} or {kind: b} | a small language of its own |')


@dataclass(frozen=True)
class Named:
    label: str = pattern("a", r"[a-z]{1,3}", "one to three lower-case letters", "a folder's name")


def test_a_pattern_takes_whole_matches_only() -> None:
    assert rule(Named, "label").allowed == "one to three lower-case letters"
    assert first_invalid(Named("abc")) is None
    for bad in ("abcd", "A", "", "a b", 3, None):
        assert first_invalid(Named(bad)) == ("label", bad, "one to three lower-case letters")  # type: ignore[arg-type]


def test_refuse_invalid_raises_the_holders_own_error_or_settles() -> None:
    def refuse(key: str, value: Any, allowed: str) -> ValueError:
        return ValueError(f"toy {key} = {value!r}: {allowed}")

    with pytest.raises(ValueError, match=r"^toy low = 0: \[1, 100\]$"):
        refuse_invalid(Toy(low=0), refuse)
    toy = Toy(low=8.0)  # type: ignore[arg-type]
    refuse_invalid(toy, refuse)
    assert type(toy.low) is int


def test_same_as_takes_the_other_fields_rule_with_its_own_default_and_meaning() -> None:
    @dataclass(frozen=True)
    class Borrower:
        low: int = same_as(Toy, "low", 7, "borrowed bounds")

    (f, borrowed), = declared(Borrower)
    assert f.default == 7 and borrowed.doc == "borrowed bounds"
    assert (borrowed.unit, borrowed.kind, borrowed.allowed) == ("tokens", "int", rule(Toy, "low").allowed)
    assert first_invalid(Borrower(low=101)) == ("low", 101, "[1, 100]") and first_invalid(Borrower()) is None
    with pytest.raises(TypeError, match="bounds name its other fields"):
        same_as(Toy, "high", 50, "its low bound is a field of Toy")
