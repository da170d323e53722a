"""Which explanation reproduces the paper pattern (``dlfp.studies.explanations``)."""

from __future__ import annotations

import pandas as pd

from dlfp.studies import explanations


def _cells(works: tuple[float, float], fails: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {explanations.WORKS: {"t_lo": works[0], "t_hi": works[1]},
            **{t: {"t_lo": fails[0], "t_hi": fails[1]} for t in explanations.FAILS}}


def test_reproduces_the_pattern_only_when_0_6b_works_and_the_others_fail() -> None:
    assert explanations.reproduces(_cells((10, 40), (-20, 5))) == "reproduces the pattern"
    assert explanations.reproduces(_cells((-5, 40), (-20, 5))).startswith(
        "does not: no detectable benefit on 0.6B (CI -5 to 40%)")
    assert explanations.reproduces(_cells((-40, -20), (-20, 5))).startswith("does not: large harm on 0.6B")
    assert "a large benefit on qwen3-8b (CI 20 to 60%)" in explanations.reproduces(_cells((10, 40), (20, 60)))
    assert "a detectable benefit on qwen3-8b (CI 5 to 60%)" in explanations.reproduces(_cells((10, 40), (5, 60)))
    assert "a benefit of up to 60% not ruled out on qwen3-8b (CI -5 to 60%)" in explanations.reproduces(
        _cells((10, 40), (-5, 60)))


def test_a_certain_large_benefit_is_never_called_not_ruled_out() -> None:
    """The reviewer's case: 75% with CI [75, 75] on 8B is a large benefit, not "not ruled out"."""
    text = explanations.reproduces(_cells((10, 40), (75, 75)))
    assert "not ruled out" not in text and "a large benefit on qwen3-8b (CI 75 to 75%)" in text
    assert explanations.reproduces({explanations.WORKS: {"t_lo": 1, "t_hi": 2}}).startswith("not testable")


def test_verdict_groups_the_variants() -> None:
    expl = pd.DataFrame({explanations.PATTERN: {"(a) lag": "reproduces the pattern",
                                                "(b) abs": "does not: 0.6B shows no benefit",
                                                "(c) host": "not testable (a setting is missing)"}})
    assert explanations.verdict(expl) == ("reproduce the paper's pattern: (a) lag; do not reproduce it: (b) abs; "
                                          "not testable yet: (c) host.")  # the reasons stay in the table's row


def test_explanations_from_runs_that_are_missing_says_not_testable(tmp_path) -> None:
    (tmp_path / "a100-qwen3-0.6b").mkdir()  # a folder without a manifest is a run that did not finish
    expl = explanations.from_runs(tmp_path, tmp_path / "absent")
    assert (expl.drop(columns=explanations.PATTERN) == "not rendered").all().all()
    assert explanations.verdict(expl).startswith("not testable yet: (a) paper's law")
