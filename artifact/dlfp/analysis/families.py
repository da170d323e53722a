"""What an arm is, and the one colour its family has in every figure of the book.

Two classifications of an arm's parameters, each for its own question:

* its *kind* (:func:`kind`): a fixed token budget (stock included: vLLM's own knob), a fixed cap, a
  prefill cadence, or adaptive. The baselines study's frontier is traced through the fixed budgets;
* its *family* (:func:`family`): stock apart, the fixed budgets, the caps, the cadences, and the
  adaptive arms split into the paper's law and the SLO controller. Families key colours and legends.

Colours come from the Okabe-Ito palette, which stays distinguishable under the common colour-vision
deficiencies, one per family, the same in every figure (a reader learns "orange is a fixed budget"
once). Arms of one family are told apart by shade and marker (:func:`arm_styles`), never by a colour
another family owns. The paper's own numbers get a colour no family uses.
"""

from __future__ import annotations

from collections.abc import Iterable

from matplotlib.colors import to_hex, to_rgb

from dlfp.control.registry import REGISTRY
from dlfp.trials.arms import REFERENCE, ArmSpec

FAMILIES = ("stock", "fixed budget", "cap", "cadence", "DLFP law", "SLO controller", "deadline controller")
"""Arm families, in the order figures and tables key them."""
FAMILY_COLORS = {"stock": "#999999", "fixed budget": "#E69F00", "cap": "#009E73", "cadence": "#CC79A7",
                 "DLFP law": "#0072B2", "SLO controller": "#D55E00", "deadline controller": "#000000"}
"""Okabe-Ito colours (stock: a neutral grey), one per family of :data:`FAMILIES`."""
PAPER_COLOR = "#56B4E9"
"""The paper's reported numbers (Okabe-Ito sky blue, no family's colour)."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
"""Markers of a family's arms, by their position within the family."""
LIGHTEST = 0.55
"""The last arm of a family is mixed this far towards white; the first keeps the family's colour."""


def kind(arm: ArmSpec) -> str:
    """What an arm is: a fixed token budget (stock at some ``max_num_batched_tokens``, vLLM's own
    knob), a fixed cap (a per-request threshold, a cap on mixed steps, or a two-level switch: fixed
    numbers, chosen placement), adaptive (DLFP's feedback moves the chunk), or cadence (prefill
    admitted only every N-th step while decodes run, ``prefill_every``, or vLLM's own prefill interval
    with its saturation guard, ``prefill_interval``: the placement in time rather than in size, with
    stock's chunks, a fixed budget or a fixed cap)."""
    if arm.dlfp is not None and max(arm.dlfp.get("prefill_every") or 1, arm.dlfp.get("prefill_interval") or 1) > 1:
        return "cadence"
    if arm.dlfp is None or arm.dlfp.get("enabled") is False:
        return "fixed budget" if set(arm.engine) <= {"max_num_batched_tokens"} else "fixed cap"
    fixed = arm.dlfp.get("chunk_min") is not None and arm.dlfp.get("chunk_min") == arm.dlfp.get("chunk_max")
    return "fixed cap" if fixed else "adaptive"


def family(base: str, arm: ArmSpec) -> str:
    """An arm's family (:data:`FAMILIES`), from its :func:`kind`: stock (``base``, the arm's name
    without a capacity unit's load or level, is the reference), and the adaptive arms by the family
    their controller's registry entry names (:mod:`dlfp.control.registry`)."""
    if base == REFERENCE:
        return "stock"
    what = kind(arm)
    if what == "adaptive":
        return REGISTRY[(arm.dlfp or {}).get("controller") or "law"].family
    return {"fixed budget": "fixed budget", "fixed cap": "cap", "cadence": "cadence"}[what]


def shade(color: str, i: int, n: int) -> str:
    """The ``i``-th of ``n`` shades of ``color``: the colour itself first, then mixed towards white,
    the last by :data:`LIGHTEST`."""
    if n <= 1:
        return to_hex(color)
    mix = LIGHTEST * i / (n - 1)
    r, g, b = to_rgb(color)
    return to_hex((r + (1.0 - r) * mix, g + (1.0 - g) * mix, b + (1.0 - b) * mix))


def arm_styles(arms: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``(colour, marker)`` per arm, from ``(arm, family)`` pairs in the order a figure lists them:
    each arm its family's colour, shaded and marked by its position within the family."""
    pairs = list(dict.fromkeys(arms))
    members: dict[str, list[str]] = {}
    for arm, fam in pairs:
        members.setdefault(fam, []).append(arm)
    out = {}
    for fam, names in members.items():
        for i, arm in enumerate(names):
            out[arm] = (shade(FAMILY_COLORS[fam], i, len(names)), MARKERS[i % len(MARKERS)])
    return out


def run_styles(arms: Iterable[ArmSpec]) -> dict[str, tuple[str, str]]:
    """:func:`arm_styles` of a run's arms (its config's, in order; each arm's name is its base)."""
    return arm_styles((a.name, family(a.name, a)) for a in arms)
