"""The declared controller goal (``configs/controller-goal.yaml``): the committed file loads with the
issue's numbers and arms the capacity plan runs; a malformed file is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dlfp.studies import plans
from dlfp.studies.controller_goal import GOAL_FILE, load_goal


def test_the_committed_goal_loads_and_names_arms_the_capacity_study_runs() -> None:
    goal = load_goal()
    held = {a["name"] for a in plans.SLO_ARMS}
    assert goal.arms and set(goal.arms) <= held
    assert 0 < goal.per_target_budget.interval_low_at_least <= goal.per_target_budget.point_at_least
    assert 0 < goal.single_budget.share_of_pairs <= 1 and 0 < goal.bound.share_of_pairs <= 1


@pytest.mark.parametrize("edit, message", [
    (lambda g: g.pop("arms"), "exactly the keys"),
    (lambda g: g["criteria"].pop("bound"), "must be exactly"),
    (lambda g: g["criteria"]["bound"].update(extra=1), "needs exactly"),
    (lambda g: g["criteria"]["single_budget"].update(share_of_pairs=1.5), "outside"),
    (lambda g: g["criteria"]["ttft_at_capacity"].update(within="10%"), "outside"),
    (lambda g: g.update(arms=[]), "must list"),
])
def test_a_malformed_goal_is_refused(tmp_path: Path, edit, message: str) -> None:
    raw = yaml.safe_load(GOAL_FILE.read_text())
    edit(raw)
    path = tmp_path / "goal.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=message):
        load_goal(path)
