"""Provenance: a run names its commit and refuses uncommitted code unless told; the appendix's
audit tells a reviewer whether a run's files verify and whether its code is the book's.

Each test builds a small git repository with the layout runs depend on and points
:func:`dlfp.trials.provenance.repo_root` at it; git itself is real.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dlfp.cli import main as cli
from dlfp.paths import REPO_ROOT, sha256
from dlfp.trials import provenance
from dlfp.trials.config import parse_config
from dlfp.trials.manifest import plan_units
from dlfp.trials.provenance import ALLOW_DIRTY_ENV, ProvenanceError
from dlfp.trials.runfolder import KIND, MANIFEST
from dlfp.trials.runner import run_trials

ROOT = REPO_ROOT
CODE = ("artifact/dlfp/x.py", "configs/a.yaml", "notebooks/01.ipynb", "params/cpu.yaml", "Makefile",
        "pyproject.toml")
OUTPUTS = ("book/generated/03.ipynb", "data/runs/old/notes.txt", "README.md", "artifact/tests/test_x.py",
           "book/intro.md")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    for rel in CODE + OUTPUTS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    git(root, "init", "-q")
    commit_all(root, "initial")
    monkeypatch.setattr(provenance, "repo_root", lambda: root)
    monkeypatch.delenv(ALLOW_DIRTY_ENV, raising=False)  # conftest allows dirty trees for the suite
    return root


def test_this_checkout_is_found() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked archive): there is no checkout to find")
    assert provenance.repo_root() == ROOT


def test_outputs_do_not_make_a_run_dirty(repo) -> None:
    for rel in OUTPUTS:  # executed notebooks, traces, prose, tests: not code a run executes
        (repo / rel).write_text("changed\n")
    (repo / "data/runs/local/new/manifest.json").parent.mkdir(parents=True)
    (repo / "data/runs/local/new/manifest.json").write_text("{}")
    (repo / "notebooks/.ipynb_checkpoints").mkdir()
    (repo / "notebooks/.ipynb_checkpoints/01-checkpoint.ipynb").write_text("{}")  # Jupyter's autosave
    record = provenance.start_record()
    assert record == {"commit": git(repo, "rev-parse", "HEAD"), "dirty": False, "paths": list(provenance.DEPENDS_ON),
                      "allow_dirty": False, "allowed_by": None}


@pytest.mark.parametrize("rel", [*CODE, "artifact/dlfp/new_module.py"])
def test_code_changes_refuse_a_run_naming_the_file(repo, rel) -> None:
    (repo / rel).write_text("edited\n")  # the last one is new and untracked: a run would import it
    with pytest.raises(ProvenanceError, match=rel.replace(".", r"\.")) as err:
        provenance.start_record()
    assert "--allow-dirty" in str(err.value)


def test_allowed_dirty_run_is_recorded(repo, monkeypatch) -> None:
    (repo / "configs/a.yaml").write_text("edited\n")
    record = provenance.start_record(allow_dirty=True)
    assert record["dirty"] and record["allow_dirty"] and record["allowed_by"] == "argument"
    assert record["changed"] == ["configs/a.yaml"] and record["n_changed"] == 1
    first = record["diff_sha256"]
    monkeypatch.setenv(ALLOW_DIRTY_ENV, "1")
    assert provenance.start_record()["allowed_by"] == f"environment {ALLOW_DIRTY_ENV}"
    (repo / "configs/a.yaml").write_text("edited again\n")
    assert provenance.start_record()["diff_sha256"] != first  # which edits, not only that there were some
    monkeypatch.setenv(ALLOW_DIRTY_ENV, "0")
    with pytest.raises(ProvenanceError):
        provenance.start_record()


def test_code_outside_a_checkout_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(provenance, "repo_root", lambda: None)
    monkeypatch.delenv(ALLOW_DIRTY_ENV, raising=False)
    with pytest.raises(ProvenanceError, match="not running from a git checkout"):
        provenance.start_record()
    assert provenance.start_record(allow_dirty=True)["commit"] is None


def test_resume_needs_the_clean_commit_it_started_from(repo) -> None:
    started = provenance.start_record()
    assert provenance.resume_record(started) == started
    (repo / "artifact/dlfp/x.py").write_text("next version\n")
    later = commit_all(repo, "next")
    with pytest.raises(ProvenanceError, match="mix two versions"):
        provenance.resume_record(started)
    mixed = provenance.resume_record(started, allow_dirty=True)
    assert mixed["commit"] == started["commit"] and mixed["dirty"] is True
    assert [r["commit"] for r in mixed["resumes"]] == [later]


def test_resume_refusal_is_what_resume_record_refuses_asked_before_the_job(repo) -> None:
    """``dlfp cluster submit`` asks it for each unfinished run folder: the same words as the job's refusal."""
    started = provenance.start_record()
    assert provenance.resume_refusal(started) is None
    (repo / "params/cpu.yaml").write_text("cluster: {time: '12:00:00'}\n")  # a longer limit, committed
    commit_all(repo, "longer time limit")
    refusal = provenance.resume_refusal(started)
    with pytest.raises(ProvenanceError) as refused:
        provenance.resume_record(started)
    assert refusal == str(refused.value) and "mix two versions" in refusal
    assert provenance.resume_refusal(started, allow_dirty=True) is None


CONFIG = {"name": "unit", "trials": 1, "workload": {"n_requests": 3, "rate_rps": 50.0}}


def test_run_trials_and_cli_refuse_before_writing_anything(repo, tmp_path, capsys) -> None:
    (repo / "Makefile").write_text("edited\n")
    with pytest.raises(ProvenanceError, match="Makefile"):
        run_trials(parse_config(CONFIG), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    assert cli(["trial", "--out", str(tmp_path / "cli-run"), "--quiet"]) == 2
    assert "--allow-dirty" in capsys.readouterr().err
    assert not (tmp_path / "cli-run").exists()


def _manifest(cfg, status: str, commit: str) -> dict:
    return {"kind": KIND, "name": cfg.name, "status": status, "config": cfg.raw,
            "units": [u.to_json() for u in plan_units(cfg)], "git": {"commit": commit, "dirty": False}}


def test_interrupted_run_is_not_finished_by_other_code_but_a_complete_one_is_left_alone(repo, tmp_path) -> None:
    cfg = parse_config(CONFIG)
    first = git(repo, "rev-parse", "HEAD")
    (repo / "artifact/dlfp/x.py").write_text("next version\n")
    commit_all(repo, "next")
    (repo / "configs/a.yaml").write_text("and uncommitted edits\n")
    interrupted, complete = tmp_path / "interrupted", tmp_path / "complete"
    for folder, status in ((interrupted, "interrupted"), (complete, "complete")):
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps(_manifest(cfg, status, first)))
    with pytest.raises(ProvenanceError):
        run_trials(cfg, interrupted, progress=False)
    before = (complete / MANIFEST).read_bytes()
    assert run_trials(cfg, complete, progress=False).status == "complete"  # nothing runs: nothing to refuse
    assert (complete / MANIFEST).read_bytes() == before


def _run_folder(repo: Path, name: str, commit: str, dirty: bool = False) -> Path:
    run = repo / "data" / "runs" / name
    table = run / "trial-0" / "stock" / "requests.parquet"
    table.parent.mkdir(parents=True)
    table.write_bytes(b"not really parquet: only its checksum is audited")
    (run / "trial-0" / "workload.parquet").write_bytes(b"workload")
    units = [{"trial": 0, "seed": 0, "arm": "stock", "status": "complete",
              "files": {"requests.parquet": sha256(table)}}]
    (run / MANIFEST).write_text(json.dumps({
        "kind": KIND, "status": "complete", "config": {}, "units": units,
        "workloads": {"trial-0/workload.parquet": sha256(run / "trial-0" / "workload.parquet")},
        "git": {"commit": commit, "dirty": dirty}}))
    return run


def test_audit_verdicts(repo, tmp_path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    run = _run_folder(repo, "good", head)
    dirty = _run_folder(repo, "dirty", head, dirty=True)
    foreign = _run_folder(repo, "foreign", "f" * 40)
    commit_all(repo, "runs")
    a = provenance.audit(run)
    assert a["verdict"] == "reproducible: files verified, same code as this book"
    assert (a["files verified"], a["files"], a["in repository"], a["code changed since"]) == (2, 2, "yes, unchanged",
                                                                                                "none")
    assert "uncommitted code" in provenance.audit(dirty)["verdict"]
    assert provenance.audit(foreign)["code changed since"] == "commit not in this repository"

    (repo / "artifact/dlfp/x.py").write_text("one\ntwo\n")  # the rendering code moved on
    a = provenance.audit(run)
    assert a["verdict"] == "files verified; code changed since the run in 1 files (listed below)"
    assert a["changes"] == [provenance.Change("artifact/dlfp/x.py", 2, 1)]

    (run / "trial-0" / "stock" / "requests.parquet").write_bytes(b"edited by hand")
    a = provenance.audit(run)
    assert a["verdict"].startswith("FAILED: 1 of 2 files") and "requests.parquet" in a["problems"][0]
    assert a["in repository"] == "yes, but changed since"

    outside = tmp_path / "elsewhere"
    shutil.copytree(run, outside)
    assert provenance.audit(outside)["in repository"] == "no (outside this repository)"
    (outside / MANIFEST).write_text("{")
    verdict = provenance.audit(outside)["verdict"]
    assert verdict.startswith("FAILED") and "corrupt" in verdict


def test_run_folders_are_the_given_ones_never_a_recursive_search(tmp_path) -> None:
    for rel in ("cpu", "gen/a", "gen/b", "gen/local/deeper/x", "fid/real"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / MANIFEST).write_text("{}")
    found = provenance.run_folders([tmp_path / "cpu", tmp_path / "gen", tmp_path / "fid", tmp_path / "missing",
                                    tmp_path / "cpu"])
    assert found == [tmp_path / p for p in ("cpu", "gen/a", "gen/b", "fid/real")]
