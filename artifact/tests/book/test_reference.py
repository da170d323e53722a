"""The book's Reference part says what the code does, and nothing of it was lost on the way there.

The reference tables used to live in the README, where one test checked the parameter table; they
now live in ``book/reference/`` and the README only links to them. These checks (fast: text and
pure modules, no vLLM import) keep the pages tied to the code they document:

* the parameter page is the plug-in's README (``dlfp-vllm/README.md``, included), whose table is the one
  generated from :data:`dlfp.control.params.SPECS` (no hand-written copy);
* no command line is written on two pages;
* every modeled-executor setting (:class:`dlfp.sim.config.SimConfig`) and every design rule
  (:class:`dlfp.trials.design.Rules`), with their defaults;
* every page under ``book/reference/`` in ``_toc.yml`` (``only_build_toc_files`` would silently
  drop one that is not), and every page's and the README's relative links pointing at files
  that exist;
* every ``dlfp.*`` name the pages and the README mention exists in the package (the package was
  reorganized into subpackages; an old dotted name would otherwise linger in the prose);
* every version written on the pages is the pinned one (as ``test_versions.py`` checks the README).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from dlfp.cluster.sbatch import Slurm
from dlfp.cluster.sbatch import markdown_table as slurm_table
from dlfp.control.params import markdown_table
from dlfp.harness.engine import EngineSpec
from dlfp.harness.engine import markdown_table as engine_table
from dlfp.harness.workload import RequestClass, WorkloadSpec, classes_table
from dlfp.harness.workload import markdown_table as workload_table
from dlfp.paths import PACKAGE, REPO_ROOT
from dlfp.sim.config import SimConfig
from dlfp.sim.config import markdown_table as sim_table
from dlfp.sim.costmodel import markdown_table as costmodel_table
from dlfp.studies.durations import markdown_table as durations_table
from dlfp.trials.arms import ArmSpec
from dlfp.trials.arms import markdown_table as arms_table
from dlfp.trials.config import RunSettings, SLOs, settings_table, slo_table
from dlfp.trials.design import DesignSpec, Rules
from dlfp.trials.design import markdown_table as design_table

REFERENCE = REPO_ROOT / "book" / "reference"
PAGES = sorted(REFERENCE.glob("*.md"))
README = REPO_ROOT / "README.md"
PLUGIN_README = REPO_ROOT / "dlfp-vllm" / "README.md"
PLUGIN_PACKAGE = REPO_ROOT / "dlfp-vllm" / "src" / "dlfp"
"""The plug-in's half of the package (its own distribution): ``dlfp.control`` and ``dlfp.vllm``."""
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
ROW = re.compile(r"^\| `(\w+)` \| ([^|]+?) \|", flags=re.M)
DOTTED = re.compile(r"(?<![\w.])dlfp(?:\.\w+)+")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _rows(page: str) -> list[tuple[str, str]]:
    """(key, default cell) of every table row whose first cell is a code span."""
    return [(key, cell.strip().strip("`")) for key, cell in ROW.findall(_text(REFERENCE / page))]


def test_the_reference_pages_exist() -> None:
    names = {p.stem for p in PAGES}
    assert {"index", "parameters", "trials", "modeled", "gpu", "cluster", "publishing", "layout",
            "commands"} <= names, names


def test_the_parameter_page_is_the_plug_ins_readme_whose_table_is_generated() -> None:
    """The page includes the plug-in's README from its marker on and types nothing of its own, and the
    README's table is :func:`~dlfp.control.params.markdown_table`'s text (the plug-in's tests check it too):
    a hand-written copy could fall behind the code."""
    page, readme = _text(REFERENCE / "parameters.md"), _text(PLUGIN_README)
    include = re.search(r"```\{include\} \.\./\.\./dlfp-vllm/README\.md\n:start-after: (.+)\n```", page)
    assert include, "parameters.md must include ../../dlfp-vllm/README.md"
    marker = include.group(1)
    assert readme.count(marker) == 1 and readme.index(marker) < readme.index("## Parameters")
    assert markdown_table() in readme
    assert not ROW.findall(page), "parameters.md types a table row: the table is the README's"


def _code_lines(path: Path) -> set[str]:
    """The lines of a page's fenced code blocks long enough to be a command, not a word."""
    blocks = re.findall(r"```[\w{}:-]*\n(.*?)```", _text(path), flags=re.S)
    return {line.strip() for block in blocks for line in block.splitlines() if len(line.strip()) > 30}


def test_no_snippet_is_written_twice() -> None:
    """Each command line lives on one page (the README included); the others link to it."""
    docs = [README, PLUGIN_README, *sorted(REPO_ROOT.joinpath("book").glob("*.md")), *PAGES]
    seen: dict[str, Path] = {}
    twice = []
    for doc in docs:
        for line in _code_lines(doc):
            if line in seen:
                twice.append((line, seen[line].name, doc.name))
            seen.setdefault(line, doc)
    assert not twice, twice


GENERATED = [("modeled.md", "dlfp.sim.config.markdown_table", sim_table, SimConfig),
             ("gpu.md", "dlfp.harness.engine.markdown_table", engine_table, EngineSpec),
             ("trials.md", "dlfp.trials.config.settings_table", settings_table, RunSettings),
             ("trials.md", "dlfp.trials.config.slo_table", slo_table, SLOs),
             ("cluster.md", "dlfp.cluster.sbatch.markdown_table", slurm_table, Slurm),
             ("trials.md", "dlfp.harness.workload.markdown_table", workload_table, WorkloadSpec),
             ("trials.md", "dlfp.harness.workload.classes_table", classes_table, RequestClass),
             ("trials.md", "dlfp.trials.design.markdown_table", design_table, DesignSpec),
             ("trials.md", "dlfp.trials.arms.markdown_table", arms_table, ArmSpec)]


@pytest.mark.parametrize(("page", "source", "table", "cls"), GENERATED, ids=[g[1] for g in GENERATED])
def test_a_settings_page_holds_the_table_generated_from_the_declarations(page: str, source: str,
                                                                           table: Any, cls: type) -> None:
    """The page types no row: its table is ``table()``'s text, generated from the settings' declarations, so a
    new or changed setting fails here until the page is regenerated."""
    _the_generated_table_is_pasted(page, source, table)
    assert [row.split(" | ")[0].strip("| `") for row in table().splitlines()[2:]] == [f.name for f in fields(cls)]


def _the_generated_table_is_pasted(page: str, source: str, table: Any) -> None:
    found = re.search(rf"<!-- settings: generated by {re.escape(source)} -->\n(.*?)<!-- end of settings -->",
                      (REFERENCE / page).read_text(encoding="utf-8"), flags=re.S)
    assert found, f"{page}: the markers of {source}'s table are missing"
    module, func = source.rsplit(".", 1)
    assert found.group(1) == table(), (
        f"{page}'s table is not the generated one: paste the output of "
        f"`python -c 'from {module} import {func}; print({func}(), end=\"\")'`")


def test_the_studies_page_holds_the_durations_the_committed_manifests_record() -> None:
    """Every duration on the studies page is this generated table's: regenerating a run changes it here."""
    _the_generated_table_is_pasted("studies.md", "dlfp.studies.durations.markdown_table", durations_table)


def test_the_cost_profile_page_holds_the_table_its_reader_checks_by() -> None:
    """A profile's keys are sections of a YAML file, not a dataclass's fields: the table comes from the reader's
    own schema (each key's rule), and every key of a shipped profile is in it."""
    _the_generated_table_is_pasted("modeled.md", "dlfp.sim.costmodel.markdown_table", costmodel_table)
    shipped = yaml.safe_load((REPO_ROOT / "artifact" / "dlfp" / "sim" / "profiles" / "a100.yaml").read_text())
    keys = {f"{section}.{key}" for section in ("compute", "memory", "interconnect", "host") for key in shipped[section]}
    assert keys and all(f"| `{k}` |" in costmodel_table() for k in keys)


def test_the_rules_are_not_copied_onto_the_reference_page() -> None:
    """The rules' table is generated (the Method chapter glues :func:`dlfp.book.reference_tables.rules_table`);
    the reference page, whose design table is generated too, repeats no rule."""
    documented = dict(_rows("trials.md"))
    copied = [f.name for f in fields(Rules) if f.name in documented]
    assert not copied, copied
    assert "{glue:} design_rules" in (REPO_ROOT / "book" / "method.md").read_text(encoding="utf-8")


def _toc_files(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "root") and isinstance(value, str):
                yield value
            else:
                yield from _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def test_every_reference_page_is_in_the_table_of_contents() -> None:
    toc = yaml.safe_load(_text(REPO_ROOT / "_toc.yml"))
    listed = {str(Path(f).with_suffix("")) for f in _toc_files(toc)}
    missing = [p.name for p in PAGES if str(p.relative_to(REPO_ROOT).with_suffix("")) not in listed]
    assert not missing, missing
    captions = [part.get("caption") for part in toc.get("parts", [])]
    assert "Reference" in captions, captions
    absent = [f for f in listed if not any((REPO_ROOT / f).with_suffix(s).is_file() for s in (".md", ".ipynb"))]
    assert not absent, absent


def _relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_text(path)) if not re.match(r"^(?:[a-z]+:|#)", t)]


@pytest.mark.parametrize("path", [README, PLUGIN_README, *PAGES], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve_to_files(path: Path) -> None:
    broken = [t for t in _relative_links(path) if not (path.parent / t.split("#", 1)[0]).exists()]
    assert not broken, broken


def test_the_readme_links_every_reference_page() -> None:
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in _relative_links(README)}
    missing = [p.name for p in PAGES if p.name != "index.md" and p.resolve() not in linked]
    assert not missing, missing


def _defines(module: Path, name: str) -> bool:
    return re.search(rf"^(?:class |def |async def )?{re.escape(name)}\b|[\"']{re.escape(name)}[\"']",
                     _text(module), flags=re.M) is not None


def _exists(dotted: str) -> bool:
    """``dlfp.a.b`` is a module or package of the package, or a name such a module defines."""
    parts = dotted.split(".")[1:]
    for n in range(len(parts), 0, -1):
        for root in (PACKAGE, PLUGIN_PACKAGE):
            base = root.joinpath(*parts[:n])
            module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if module.is_file():
                rest = parts[n:]
                return not rest or (len(rest) == 1 and _defines(module, rest[0]))
    return not parts or (len(parts) == 1 and _defines(PACKAGE / "__init__.py", parts[0]))


@pytest.mark.parametrize("path", [README, PLUGIN_README, *PAGES], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_dotted_name_exists_in_the_package(path: Path) -> None:
    stale = sorted({d for d in DOTTED.findall(_text(path)) if not _exists(d)})
    assert not stale, stale


def test_every_version_on_the_pages_is_the_pinned_one() -> None:
    pins = tomllib.loads(_text(REPO_ROOT / "pyproject.toml"))["tool"]["dlfp"]["versions"]
    wrong = []
    for page in [*PAGES, PLUGIN_README]:
        text = _text(page)
        wrong += [f"{page.name}: vllm {v}" for v in re.findall(r"\bvllm(?:-cpu)?={2,3}([\w.]+)", text)
                  if v != pins["vllm"]]
        wrong += [f"{page.name}: torch {v}" for v in re.findall(r"\btorch={2,3}([\w.]+)", text)
                  if v != pins["torch"]]
    assert not wrong, wrong


def test_the_readme_headline_is_what_the_committed_run_gives() -> None:
    """The README types its headline (it is not rendered), so it is checked against the run it cites:
    a regenerated ``data/runs/cpu-default`` with other numbers fails here until the README says them. The
    README gives signed changes (a reduction is negative), so the text is right whichever way the run went."""
    from dlfp.analysis.runs import load_run, trial_rows
    from dlfp.analysis.stats import paired

    rows = trial_rows(load_run(REPO_ROOT / "data" / "runs" / "cpu-default", tables=("requests", "tokens")))
    itl, ttft = paired(rows, "itl_p99_ms"), paired(rows, "ttft_p99_ms")
    readme = _text(README)
    assert f"**{-itl['mean_pct']:+.1f}%** (mean change; paired 95% CI {-itl['t_hi']:+.1f}% to {-itl['t_lo']:+.1f}%, " \
           f"{len(itl['reductions_pct'])} paired trials" in readme
    said = f"P99 TTFT {-ttft['mean_pct']:+.0f}% (CI {-ttft['t_hi']:+.0f}% to {-ttft['t_lo']:+.0f}%)"
    assert said in readme
    # an interval that spans zero is worded as one, and only such an interval
    assert readme.split(said, 1)[1].startswith(", no detectable change") == (ttft["t_lo"] < 0 < ttft["t_hi"])
    # the machine it names is the one the run's manifest recorded (a rerun elsewhere fails here)
    hardware = json.loads((REPO_ROOT / "data" / "runs" / "cpu-default" / "manifest.json").read_text())["hardware"]
    cores, machine = re.search(r"`data/runs/cpu-default`, a (\d+)-core ([^,]+),", readme).groups()
    assert int(cores) == hardware["cpu_logical_cores"]
    assert set(machine.split()) <= set(hardware["cpu_model"].replace("(R)", "").split()), hardware["cpu_model"]
    # and so is the commit that made it
    git = json.loads((REPO_ROOT / "data" / "runs" / "cpu-default" / "manifest.json").read_text())["git"]
    assert f"made at commit `{git['commit'][:10]}`" in readme


def test_the_readme_which_setting_table_is_what_the_committed_capacity_runs_give() -> None:
    """The README types its *which setting* table (per arm: target and SLO-level pairs run that rank anything,
    and those where it was the best or not detectably below it), the best single budget it names, how many
    pairs the correction covers, the pair left out, and the pair where the SLO controller's ratio is only
    bounded; each is checked against the committed capacity study, so a rerun that changes them fails here
    until the README says what it gives."""
    from dlfp.studies import capacity_goal
    from dlfp.studies.capacity import capacity_table, load_points, trial_capacities, unfinished
    from dlfp.studies.setting import best_single_budget, judged_pairs, standing, unranked, which_setting

    root = REPO_ROOT / "data" / "runs" / "study-capacity"
    points, recomputed = load_points(root)
    assert recomputed is None, recomputed  # the stamped points, not minutes of traces
    points = points[~points.target.isin(unfinished(root))]  # as the book shows them
    table, trials = capacity_table(points), trial_capacities(points)
    which = which_setting(table, trials)
    held = standing(table, which).set_index("arm")
    readme = " ".join(_text(README).split())
    rows = dict(re.findall(r"^\| `([\w.-]+)`: [^|]*\| (\d+ \| \d+) \|$", _text(README), re.M))
    assert {"dlfp-slo", "dlfp", "stock"} <= rows.keys(), rows
    for arm, cells in rows.items():
        assert cells == f"{held.loc[arm, 'pairs run']} | {held.loc[arm, 'best or tied']}", arm
    budget = best_single_budget(table)
    assert budget in rows and f"`{budget}`: `max_num_batched_tokens` {budget.removeprefix('mbt-')}, the best single" \
        in readme
    judged, pairs = judged_pairs(trials), len(which)
    assert f"that rank anything ({judged} of {pairs};" in readme and f"all {judged} pairs' statements" in readme
    assert unranked(which) == ["cpu-tiny (tight)"]
    assert "On the CPU engine at the tight SLOs" in readme
    assert "that pair ranks nothing and is left out of every count" in readme
    goal = capacity_goal.goal_table(table, trials).set_index(["target", "level"])
    bounded = goal.loc[("a100-qwen3-0.6b (simulated)", "tight")]
    assert bounded["vs best budget"].startswith("censored") and bounded["within 10%"] == "undecided"
    assert "Qwen3-0.6B at the tight SLO, for instance, the SLO controller failed at the lowest rate in one trial" \
        in readme and "its ratio to that budget is only bounded" in readme
    per_trial = trials[(trials.target == "a100-qwen3-0.6b") & (trials.level == "tight")].set_index(["arm", "trial"])
    slo = per_trial.loc["dlfp-slo"]
    best = per_trial.loc[str(bounded["best budget"])]
    assert (slo.censored == "below").sum() == 1 and (slo.capacity_rps > best.capacity_rps).any()


def test_the_readme_cpu_tight_pair_is_what_the_committed_capacity_run_gives() -> None:
    """The README says of the CPU engine at the tight SLOs: no arm met both SLOs at the lightest rate in more
    than one of three trials, the paper's law held ITL there but not TTFT, the fixed budgets and stock held
    TTFT but not ITL, and the pair ranks nothing. A rerun that lets any of it come out otherwise fails here."""
    from dlfp.studies.capacity import capacity_table, load_points, trial_capacities
    from dlfp.studies.setting import which_setting

    assert "On the CPU engine at the tight SLOs" in _text(README)
    points, _ = load_points(REPO_ROOT / "data" / "runs" / "study-capacity")
    cpu = points[(points.target == "cpu-tiny") & (points.level == "tight")]
    lightest = cpu[cpu.rate_rps == cpu.rate_rps.min()]
    met = lightest.assign(ok=(lightest.itl_p99_ms <= lightest.itl_slo_ms)
                          & (lightest.ttft_p99_ms <= lightest.ttft_slo_ms)).groupby("arm")["ok"]
    assert met.size().eq(3).all() and met.sum().le(1).all(), met.sum()
    law = lightest[lightest.arm == "dlfp"]
    assert (law.itl_p99_ms <= law.itl_slo_ms).all() and (law.ttft_p99_ms > law.ttft_slo_ms).all()
    fixed = lightest[lightest.arm.str.startswith("mbt-") | (lightest.arm == "stock")]
    assert (fixed.ttft_p99_ms <= fixed.ttft_slo_ms).all() and (fixed.itl_p99_ms > fixed.itl_slo_ms).all()
    table = capacity_table(points)
    [row] = which_setting(table, trial_capacities(points)).query("target == 'cpu-tiny' and level == 'tight'") \
        .itertuples()
    assert not row.ranked and row.best == "none meets the SLOs"  # named, and left out of every count


def test_the_readme_names_the_fragile_claims_the_committed_stability_study_gives() -> None:
    """The README's headline says which measured verdicts flip across repetitions of the default design (or
    that none does), in the words the book's first page glues: a regenerated stability study with other
    verdicts fails here until the README says what it gives."""
    from dlfp.analysis.runs import load_run
    from dlfp.studies.stability import repetitions, stability_table, summary

    reps = repetitions(REPO_ROOT / "data" / "runs" / "study-stability")
    assert len(reps) >= 5, sorted(reps)  # the study's own minimum: a table of fewer says too little
    said = summary(stability_table(reps, book=load_run(REPO_ROOT / "data" / "runs" / "cpu-default")))
    assert said in " ".join(_text(README).split()), said
