"""Where a run's code came from, and whether the code that renders it today is still that code.

A run records the commit of the checkout that holds this package and refuses to start when
the files a run depends on (:data:`DEPENDS_ON`) differ from that commit, unless told
(``--allow-dirty``, ``allow_dirty=True`` or ``DLFP_ALLOW_DIRTY=1``; the manifest records which).
Everything else in the tree is an output or documentation, not code a run executes: executed
notebooks in ``book/generated/`` (the pipeline writes them before its trials start, so counting
them would make every ``make artifact`` run dirty by construction), traces in ``data/``, the
book's prose, and the tests.

The reproducibility appendix asks the reverse question per rendered run (:func:`audit`): is the
run's commit in this repository, which files it depends on differ between that commit and the
working tree rendering it now, whether its folder is the committed one, and do its files still
match the manifest's checksums.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dlfp import paths
from dlfp.paths import REPO_ROOT
from dlfp.trials.runfolder import MANIFEST, RunFolderError, verify_file
from dlfp.trials.schema import Manifest, listed_files, read_manifest

DEPENDS_ON = ("artifact/dlfp", "dlfp-vllm/src", "dlfp-vllm/pyproject.toml", "configs", "notebooks", "params",
              "Makefile", "pyproject.toml")
"""What a run executes or is configured by, relative to the repository root (the plug-in's code and
build file too: a run executes its scheduler)."""
_PATHSPEC = (*DEPENDS_ON, ":(exclude,glob)**/.ipynb_checkpoints/**")  # Jupyter's autosaves are not code
ALLOW_DIRTY_ENV = "DLFP_ALLOW_DIRTY"
"""Set to 1 to allow runs from a dirty tree where no flag reaches (``make artifact``, a batch script)."""
_LISTED = 50  # changed files named in a manifest; the count is always complete


class ProvenanceError(ValueError):
    """A run would not be traceable to a commit of its code."""


class Change(NamedTuple):
    """One file that differs between a run's commit and the code rendering it now."""

    path: str
    added: int
    deleted: int
    note: str = ""  # "binary" or "untracked" (not in any commit): no line counts

    def __str__(self) -> str:
        return f"{self.path}  {self.note or f'+{self.added} -{self.deleted}'}"


def repo_root() -> Path | None:
    """The git checkout this package runs from, or None (an installed copy, or no git).

    A non-editable install inside some repository (a virtualenv in the checkout) would
    otherwise report that repository's commit for code that is not in it.
    """
    root = REPO_ROOT
    top = _git(root, "rev-parse", "--show-toplevel")
    here = root / "artifact" / "dlfp" / "paths.py"
    if top is None or Path(top).resolve() != root or not here.is_file() or not here.samefile(paths.__file__):
        return None
    return root


def _git(root: Path, *args: str) -> str | None:
    """Output of a git command in ``root`` (leading spaces kept: porcelain status lines start with
    one), None when git is missing or the command fails."""
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=30, env={**os.environ, "LC_ALL": "C"}).stdout.rstrip("\n")
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(root: Path | None = None) -> dict[str, Any]:
    """The commit and the files run code differs from it in (tracked changes and new files).

    ``dirty`` is None when this is not a git checkout: nothing can be said about the code.
    """
    root = repo_root() if root is None else root
    commit = None if root is None else _git(root, "rev-parse", "--verify", "HEAD^{commit}")
    if root is None or commit is None:
        return {"commit": None, "dirty": None, "paths": list(DEPENDS_ON)}
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *_PATHSPEC)
    if status is None:
        return {"commit": commit, "dirty": None, "paths": list(DEPENDS_ON)}
    changed = sorted(line[3:] for line in status.splitlines())
    state: dict[str, Any] = {"commit": commit, "dirty": bool(changed), "paths": list(DEPENDS_ON)}
    if changed:
        diff = _git(root, "diff", "HEAD", "--binary", "--", *_PATHSPEC) or ""
        state.update(changed=changed[:_LISTED], n_changed=len(changed),
                     diff_sha256=hashlib.sha256(diff.encode()).hexdigest())  # two dirty runs: same edits?
    return state


def _allowed_by(allow_dirty: bool) -> str | None:
    if allow_dirty:
        return "argument"
    if os.environ.get(ALLOW_DIRTY_ENV, "").strip() not in ("", "0"):
        return f"environment {ALLOW_DIRTY_ENV}"
    return None


def _refusal(state: dict[str, Any]) -> str:
    if state["dirty"] is None:
        where = "this dlfp is not running from a git checkout (or git failed), so no commit names its code"
    else:
        shown = ", ".join(state.get("changed", [])[:10])
        more = state.get("n_changed", 0) - len(state.get("changed", [])[:10])
        where = (f"the files runs depend on differ from commit {state['commit'][:10]}: {shown}"
                 + (f" and {more} more" if more > 0 else ""))
    return (f"refusing to start a run: {where}. Commit the changes (or check out a commit) to make a run a "
            f"reviewer can trace, or pass --allow-dirty (allow_dirty=True, or {ALLOW_DIRTY_ENV}=1): the manifest "
            "then records the run as made from uncommitted code. Outputs (book/generated/, data/) do not count.")


def start_record(allow_dirty: bool = False, root: Path | None = None) -> dict[str, Any]:
    """The ``git`` entry of a new run's manifest; raises :class:`ProvenanceError` for a dirty tree
    unless allowed."""
    state = git_state(root)
    allowed_by = _allowed_by(allow_dirty)
    if state["dirty"] is not False and allowed_by is None:
        raise ProvenanceError(_refusal(state))
    return {**state, "allow_dirty": allowed_by is not None, "allowed_by": allowed_by}


def resume_record(recorded: dict[str, Any] | None, allow_dirty: bool = False,
                  root: Path | None = None) -> dict[str, Any]:
    """The ``git`` entry of a run being resumed: unchanged when the tree is the clean commit it
    started from; otherwise refused (a run finished by other code mixes two versions in one
    table) unless allowed, and then every resume's state is recorded and the run marked dirty."""
    recorded = dict(recorded or {})
    now = start_record(allow_dirty, root)  # refuses a dirty tree unless allowed
    if now["commit"] is not None and now["commit"] == recorded.get("commit") and not now["dirty"]:
        return recorded
    refusal = _other_commit(recorded, now["commit"], now["allow_dirty"])
    if refusal:
        raise ProvenanceError(refusal)
    return {**recorded, "dirty": True, "resumes": [*recorded.get("resumes", []), now]}


def _other_commit(recorded: dict[str, Any], commit: str | None, allowed: bool) -> str | None:
    """Why a run started at ``recorded['commit']`` may not be resumed by the code of ``commit``
    (None: it may, being the same commit, or resuming at another one is allowed)."""
    if allowed or (commit is not None and commit == recorded.get("commit")):
        return None
    return (f"refusing to resume: this run started at commit {str(recorded.get('commit'))[:10]}, the tree is at "
            f"{str(commit)[:10]}; finishing it with other code would mix two versions in one run. Check out "
            "the run's commit to finish it, start a new run folder, or pass --allow-dirty (recorded)")


def resume_refusal(recorded: dict[str, Any] | None, allow_dirty: bool = False,
                   root: Path | None = None) -> str | None:
    """What :func:`resume_record` would refuse a job resuming the run ``recorded`` at this checkout's
    commit (None: nothing), asked before the job exists: ``dlfp cluster submit`` lists it instead of
    queueing a job that fails inside its notebook. A dirty tree is :func:`start_record`'s to refuse."""
    return _other_commit(dict(recorded or {}), git_state(root)["commit"], _allowed_by(allow_dirty) is not None)


def _relative(root: Path, path: Path) -> str | None:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return None


def code_changes(commit: str, root: Path) -> list[Change] | None:
    """Each file runs depend on that differs between ``commit`` and the working tree (new
    untracked files included); None when the commit is not in this repository."""
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    out = _git(root, "diff", "--numstat", "--no-renames", commit, "--", *_PATHSPEC)
    if out is None:
        return None
    changes = []
    for line in out.splitlines():
        added, deleted, path = line.split("\t", 2)
        binary = not (added.isdigit() and deleted.isdigit())  # numstat prints "-" for binary files
        changes.append(Change(path, 0, 0, "binary") if binary else Change(path, int(added), int(deleted)))
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", *_PATHSPEC) or ""
    return changes + [Change(path, 0, 0, "untracked") for path in untracked.splitlines()]


def _checked_files(run_dir: Path, manifest: Manifest) -> list[tuple[Path, str | None]]:
    """Every file the manifest vouches for: the run folder's (:func:`listed_files`), a cost profile and, in
    virtual time, an engine-core cost profile."""
    from dlfp.sim.costmodel import engine_file, profile_file

    files = listed_files(run_dir, manifest)
    for record, where in ((manifest.sim_profile, profile_file), (manifest.sim_engine, engine_file)):
        if record is not None:  # a simulated run: is the profile still the one it ran on?
            files.append((where(record["name"]), record.get("sha256")))
    return files


def _tree_at_run(git: dict[str, Any]) -> str:
    if not git.get("commit"):
        return "unknown (no commit recorded)"
    if git.get("dirty") is False:
        return "clean"
    if git.get("dirty") is None:
        return "unknown"
    n = git.get("n_changed")
    return f"uncommitted changes ({n} files)" if n else "uncommitted changes (files not recorded)"


def _in_repository(root: Path, run_dir: Path) -> str:
    rel = _relative(root, run_dir)
    if rel is None:
        return "no (outside this repository)"
    if not _git(root, "ls-files", "--", rel):
        return "no (not committed)"
    return "yes, unchanged" if not _git(root, "status", "--porcelain", "--", rel) else "yes, but changed since"


def audit(run_dir: Path, root: Path | None = None) -> dict[str, Any]:
    """One row of the reproducibility appendix: provenance, checksums and a verdict for a run.

    ``changes`` lists the code differences (:class:`Change`) behind the verdict;
    ``problems`` the files that failed verification. Nothing here raises for a bad run: the
    appendix shows every run's verdict, then fails the build if any file failed.
    """
    root = repo_root() if root is None else root
    row: dict[str, Any] = {"run": str(run_dir)}
    try:
        manifest = read_manifest(run_dir)
    except RunFolderError as exc:
        return {**row, "verdict": f"FAILED: {exc}", "problems": [str(exc)], "changes": []}
    git = manifest.git or {}
    commit = git.get("commit")
    problems = []
    files = _checked_files(Path(run_dir), manifest)
    for path, digest in files:
        try:
            verify_file(path, digest)
        except RunFolderError as exc:
            problems.append(str(exc))
    changes = None if root is None or not commit else code_changes(commit, root)
    mixed = {r.get("commit") for r in git.get("resumes", [])} - {commit}
    if root is None:
        since = "unknown (not rendered from a git checkout)"
    elif changes is None:
        since = "commit not in this repository" if commit else "unknown (no commit recorded)"
    elif changes:
        since = f"{len(changes)} files (+{sum(c.added for c in changes)} -{sum(c.deleted for c in changes)})"
    else:
        since = "none"
    if problems:
        verdict = f"FAILED: {len(problems)} of {len(files)} files do not match the manifest"
    elif not manifest.complete:
        verdict = f"partial run ({manifest.status}): its finished arms only"
    elif changes is None:
        verdict = f"files verified; code not comparable ({since})"
    elif git.get("dirty") is None:
        verdict = "files verified; the tree's state at the run is unknown: not reproducible from its commit alone"
    elif git.get("dirty") or mixed:
        verdict = ("files verified; made from uncommitted code" + (" and resumed at another commit" if mixed else "")
                   + ": not reproducible from its commit alone"
                   + (f"; code changed since in {len(changes)} files" if changes else ""))
    elif changes:
        verdict = f"files verified; code changed since the run in {len(changes)} files (listed below)"
    else:
        verdict = "reproducible: files verified, same code as this book"
    return {**row, "status": manifest.status, "commit": (commit or "?")[:10], "tree at run": _tree_at_run(git),
            "allowed by": git.get("allowed_by") or "", "code changed since": since,
            "files verified": len(files) - len(problems), "files": len(files),
            "in repository": "unknown" if root is None else _in_repository(root, Path(run_dir)),
            "verdict": verdict, "problems": problems, "changes": changes or []}


def run_folders(roots: Sequence[str | Path]) -> list[Path]:
    """The run folders under ``roots``: each root is a run folder or holds run folders one level
    down, as the book's notebooks read them (never a recursive search: a user's scratch runs
    nested somewhere below stay out of the book)."""
    found: list[Path] = []
    for root in roots:
        root = Path(root)
        if (root / MANIFEST).is_file():
            found.append(root)
        elif root.is_dir():
            found += sorted(p for p in root.iterdir() if (p / MANIFEST).is_file())
    return list(dict.fromkeys(found))


def committed(run_dir: str | Path) -> bool:
    """Is ``run_dir``'s manifest committed to this repository unchanged (a published run)?"""
    root = repo_root()
    return root is not None and _in_repository(root, Path(run_dir) / MANIFEST) == "yes, unchanged"
