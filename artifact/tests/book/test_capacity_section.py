"""The results chapter's capacity section (:mod:`dlfp.book.capacity_section`) from real study folders:
none yet, one whose target is still running, and a finished one-trial study cut from the committed
0.6B target. Checked: what is glued (every capacity table *Beyond the paper* pastes, once the study has a
finished target), in what order, and what the page says is missing; not the committed numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dlfp.book.capacity_section import section
from dlfp.book.page import Figure, Glue, Say, Show, glued
from dlfp.paths import REPO_ROOT
from tests.studies.test_capacity import cut_committed

NOT_RUN = ["capacity_status", "capacity_findings", "capacity_slo_goal", "capacity_slo_fit", "capacity_fit_features",
           "capacity_standing", "capacity_unranked", "capacity_controller_goal", "capacity_controller_goal_settling",
           "capacity_controller_goal_pairs", "capacity_shares"]
PASTED = set(re.findall(r"(?:\{glue:\} *|::)(capacity_\w+)", (REPO_ROOT / "book" / "beyond.md").read_text()))
"""The section's values *Beyond the paper* pastes (a missing one fails its build)."""
TARGET = "a100-qwen3-0.6b"
ARMS = tuple(f"{arm}_{load}" for arm in ("stock", "mbt-512", "dlfp", "dlfp-slo") for load in ("0.3", "0.45", "0.6"))


def _keys(items: list) -> list[str]:
    return [i.key for i in items if isinstance(i, Glue)]


def test_no_study_yet_glues_a_not_run_stand_in_and_says_which_command_makes_it(tmp_path: Path) -> None:
    root = str(tmp_path / "none")
    items = list(section(root))
    assert _keys(items) == NOT_RUN and set(NOT_RUN) >= PASTED
    assert not [i for i in items if isinstance(i, (Figure, Show))]
    [say] = [i for i in items if isinstance(i, Say)]
    assert say.text == str(glued(items)["capacity_status"])
    assert f"no finished target yet under {root} (dlfp study capacity --out {root} makes them)" in say.text


def test_a_target_still_running_is_named_with_its_units_and_left_out(tmp_path: Path) -> None:
    root = cut_committed(tmp_path, ARMS[:3])
    items = list(section(str(root)))
    assert _keys(items) == NOT_RUN  # its points exist, but part of a sweep is no capacity
    status = str(glued(items)["capacity_status"])
    assert re.search(rf"Still running, and left out of every table here: {TARGET} \(\d+ of \d+ units\)\.", status)
    assert isinstance(items[0], Say) and items[0].text.startswith("points recomputed from the traces: ")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The committed target cut to trial 0's units of four arm families, its manifest planning only those:
    a finished one-trial study."""
    root = cut_committed(tmp_path_factory.mktemp("finished"), ARMS)
    path = root / TARGET / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["units"] = [u for u in manifest["units"] if u.get("status") != "pending"]
    manifest["config"]["arms"] = [a for a in manifest["config"]["arms"] if a["name"] in ARMS]
    manifest["config"]["trials"], manifest["config"]["seeds"] = 1, (manifest["config"]["seeds"] or [0])[:1]
    manifest["workloads"] = {k: v for k, v in manifest["workloads"].items() if k.startswith("trial-0/")}
    manifest["status"] = "complete"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return root


def test_a_finished_study_glues_every_value_beyond_the_paper_pastes(finished: Path) -> None:
    items = list(section(str(finished)))
    shares = [i for i in items if isinstance(i, Figure) and i.glue_as]
    assert [f.glue_as for f in shares] == ["capacity_shares"]
    assert set(_keys(items)) | {"capacity_shares"} >= PASTED, PASTED - set(_keys(items))
    assert len(PASTED) >= 10  # the pattern still finds the page's references
    status = str(glued(items)["capacity_status"])
    assert status.startswith("The capacity study ran on 1 targets (simulated") and "Still running" not in status


def test_a_finished_study_shows_figures_first_then_the_tables_in_the_pages_order(finished: Path) -> None:
    items = list(section(str(finished)))
    kinds = [type(i).__name__ for i in items if not isinstance(i, Say)]
    assert kinds[:3] == ["Figure"] * 3  # the sweep at each level, then the capacity bars
    keys = _keys(items)
    assert keys.index("capacity_which") < keys.index("capacity_status") < keys.index("capacity_findings") \
        < keys.index("capacity_standing") < keys.index("capacity_slo_goal") < keys.index("capacity_slo_fit")
    source = next(i for i in items if isinstance(i, Figure)).caption
    assert "simulated" in source  # each caption names where its numbers come from
    shown = [i.value for i in items if isinstance(i, Show)]
    assert all("Sources: " in s.caption for s in shown[-2:])  # the per-level capacity tables
