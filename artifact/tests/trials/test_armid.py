"""An arm's identity (:mod:`dlfp.trials.armid`): every name a capacity plan writes parses back to its parts,
and parts that would not parse back are refused when built."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlfp.trials.armid import ArmId
from dlfp.trials.sweep import KNOWN_LEVELS, LOADS


@pytest.mark.parametrize(("name", "parts"), [
    ("dlfp-slo.tight", ("dlfp-slo", "tight", None)),
    ("stock", ("stock", None, None)),
    ("mbt-512", ("mbt-512", None, None)),
    ("odd.name", ("odd.name", None, None)),  # not a level: part of the base
    ("dlfp-slo.tight_0.45", ("dlfp-slo", "tight", 0.45)),
    ("mbt-512_1.0", ("mbt-512", None, 1.0)),
    ("stock_0.3", ("stock", None, 0.3)),
    ("dlfp.given_0.15", ("dlfp", "given", 0.15)),
    ("cadence-4-cap.relaxed_0.8", ("cadence-4-cap", "relaxed", 0.8)),
    ("under_score", ("under_score", None, None)),  # not a load: part of the base
])
def test_a_name_parses_into_base_level_and_load(name: str, parts: tuple[str, str | None, float | None]) -> None:
    arm = ArmId.parse(name)
    assert (arm.base, arm.level, arm.load) == parts
    assert arm.name == name


def test_held_is_the_name_without_its_load() -> None:
    assert ArmId.parse("dlfp.tight_0.45").held == "dlfp.tight" and ArmId.parse("stock_0.3").held == "stock"
    assert ArmId("dlfp", "tight").at(0.6).name == "dlfp.tight_0.6"


_BASE = st.from_regex(r"[a-z0-9][a-z0-9-]{0,12}(\.[a-z0-9-]{1,6})?(_[a-z]{1,4})?", fullmatch=True).filter(
    lambda b: ArmId.parse(b).level is None)
"""Arm bases as configs write them, dots and underscores included; one ending in a level is not a base."""


@given(_BASE, st.sampled_from((None, *KNOWN_LEVELS)),
       st.one_of(st.none(), st.sampled_from(LOADS), st.decimals("0.01", "9.99", places=2).map(float)))
def test_every_arm_parses_back_from_its_name(base: str, level: str | None, load: float | None) -> None:
    arm = ArmId(base, level, load)
    assert ArmId.parse(arm.name) == arm


@pytest.mark.parametrize(("parts", "needle"), [
    (("dlfp.tight",), "ends in a level or a load"),
    (("stock_0.3",), "ends in a level or a load"),
    (("",), "is empty"),
    (("dlfp", "loose"), "SLO level 'loose'"),
    (("dlfp", None, 1e-05), "without an exponent"),
    (("dlfp", None, -0.5), "positive number"),
    (("dlfp", None, float("nan")), "positive number"),
])
def test_parts_that_would_not_parse_back_are_refused(parts: tuple, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ArmId(*parts)
