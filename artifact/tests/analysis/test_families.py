"""``dlfp.analysis.families``: an arm's kind and family from its parameters, and the styles that keep
one colour per family in every figure, the arms of a family apart by shade and marker."""

from __future__ import annotations

import matplotlib.colors as mcolors
from hypothesis import given
from hypothesis import strategies as st

from dlfp.analysis import families
from dlfp.analysis.families import FAMILIES, FAMILY_COLORS, PAPER_COLOR, arm_styles, family, kind, shade
from dlfp.trials.arms import ArmSpec

CAP = {"chunk_min": 64, "chunk_max": 64, "chunk_init": 64}


def test_kind_tells_a_prefill_cadence_from_caps_budgets_and_control() -> None:
    """An arm whose ``prefill_every`` is above 1 is a cadence, with stock's chunks or a fixed cap; a
    mapping that turns control off without a cadence is stock scheduling, as no mapping is."""
    assert kind(ArmSpec("cadence-4", {"enabled": False, "prefill_every": 4}, {})) == "cadence"
    assert kind(ArmSpec("cadence-4-cap", {**CAP, "prefill_every": 4}, {})) == "cadence"
    assert kind(ArmSpec("cap", CAP, {})) == "fixed cap"
    assert kind(ArmSpec("every-1", {"enabled": False, "prefill_every": 1}, {})) == "fixed budget"
    assert kind(ArmSpec("off-lpt", {"enabled": False}, {"long_prefill_token_threshold": 256})) == "fixed cap"
    assert kind(ArmSpec("dlfp", {"prefill_every": 1}, {})) == "adaptive"
    assert kind(ArmSpec("stock", None, {})) == "fixed budget"


def test_family_sets_stock_apart_and_splits_the_adaptive_arms() -> None:
    assert family("stock", ArmSpec("stock_0.3", None, {})) == "stock"
    assert family("mbt-256", ArmSpec("mbt-256", None, {"max_num_batched_tokens": 256})) == "fixed budget"
    assert family("lpt-256", ArmSpec("lpt-256", {"enabled": False}, {"long_prefill_token_threshold": 256})) == "cap"
    assert family("cap", ArmSpec("cap", CAP, {})) == "cap"
    assert family("cadence-4", ArmSpec("cadence-4", {"enabled": False, "prefill_every": 4}, {})) == "cadence"
    assert family("dlfp", ArmSpec("dlfp.tight_0.3", {"itl_slo_ms": 9.0}, {})) == "DLFP law"
    assert family("dlfp-slo", ArmSpec("dlfp-slo", {"controller": "slo"}, {})) == "SLO controller"


def test_every_family_has_one_colour_distinct_from_the_others_and_from_the_papers() -> None:
    assert tuple(FAMILY_COLORS) == FAMILIES
    colours = {mcolors.to_hex(c) for c in FAMILY_COLORS.values()}
    assert len(colours) == len(FAMILIES) and mcolors.to_hex(PAPER_COLOR) not in colours


def test_the_first_arm_of_a_family_has_its_colour_the_rest_lighter_shades() -> None:
    styles = arm_styles([("stock", "stock"), ("mbt-256", "fixed budget"), ("dlfp", "DLFP law"),
                         ("mbt-512", "fixed budget"), ("mbt-1024", "fixed budget")])
    assert styles["stock"] == (FAMILY_COLORS["stock"].lower(), "o")
    assert styles["dlfp"] == (FAMILY_COLORS["DLFP law"].lower(), "o")
    budgets = [styles[a] for a in ("mbt-256", "mbt-512", "mbt-1024")]
    assert budgets[0][0] == FAMILY_COLORS["fixed budget"].lower()
    assert [m for _, m in budgets] == ["o", "s", "^"]  # markers by position within the family
    lightness = [sum(mcolors.to_rgb(c)) for c, _ in budgets]
    assert lightness == sorted(lightness) and len(set(lightness)) == 3


@given(st.sampled_from(list(FAMILY_COLORS.values())), st.integers(1, 12))
def test_shades_stay_between_the_colour_and_white(color: str, n: int) -> None:
    base = mcolors.to_rgb(color)
    for i in range(n):
        rgb = mcolors.to_rgb(shade(color, i, n))
        assert all(b - 1e-2 <= c <= 1.0 for b, c in zip(base, rgb, strict=True))
    last = mcolors.to_rgb(shade(color, n - 1, n))
    want = base if n == 1 else tuple(b + (1 - b) * families.LIGHTEST for b in base)
    assert all(abs(a - b) < 1e-2 for a, b in zip(last, want, strict=True))


def test_every_registered_controller_has_a_family() -> None:
    """The plug-in's registry names each controller's family; the figures colour by it."""
    from dlfp.control import registry

    for name, entry in registry.REGISTRY.items():
        assert entry.family in FAMILIES, f"controller {name!r}: family {entry.family!r} is not one of {FAMILIES}"
