"""The appendix on reproducibility: every run the book renders, audited against its manifest (files,
commit, code changed since), the code changes since each run's commit, the versions and machines the runs
were made with, and their sizes on disk, as :mod:`dlfp.book.page` items and tables. A file that does not
match its manifest stops the page: the book does not render numbers it cannot vouch for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dlfp.book.notebook import Plain
from dlfp.book.page import Glue, Item, Say, Show
from dlfp.book.provenance_words import book_provenance, run_provenance
from dlfp.trials import provenance
from dlfp.trials.runfolder import RunFolderError
from dlfp.trials.schema import read_manifest

AUDIT_COLUMNS = ("run", "status", "commit", "tree at run", "allowed by", "code changed since", "in repository")
SHOWN_CHANGES = 40
"""Changed files listed per commit; the rest are counted."""


def audits(runs: Sequence[Path]) -> list[dict[str, Any]]:
    """Each run's audit (:func:`dlfp.trials.provenance.audit`)."""
    return [provenance.audit(d) for d in runs]


def section(run_dir: str, runs: Sequence[Path], audited: Sequence[dict[str, Any]]) -> Iterator[Item]:
    """What renders the page, each run's verdict, and the provenance sentences the other pages paste; a run
    whose files do not match raises, after the table shows which."""
    renderer = provenance.git_state()
    yield Say(f"{len(runs)} runs. Code rendering this page: "
              + ("not a git checkout" if renderer["dirty"] is None else
                 "a clean commit" if not renderer["dirty"] else
                 f"uncommitted changes in {renderer['n_changed']} files runs depend on"))
    yield Show(pd.DataFrame([{**{k: a.get(k, "") for k in AUDIT_COLUMNS},
                              "files verified": f"{a.get('files verified', 0)} of {a.get('files', 0)}",
                              "verdict": a["verdict"]} for a in audited]))
    failed = [p for a in audited for p in a["problems"]]
    if failed:
        raise RuntimeError("files do not match their manifests:\n" + "\n".join(failed))
    manifests = [read_manifest(d) for d in runs]  # each verified above
    headline = list(runs).index(Path(run_dir))
    yield Glue("headline_provenance", Plain(run_provenance(audited[headline], manifests[headline])))
    yield Glue("book_provenance", Plain(book_provenance(list(audited), manifests)))


def changes(audited: Sequence[dict[str, Any]]) -> Iterator[Item]:
    """The files changed since each run's commit, grouped by commit."""
    by_commit: dict[str, tuple[list[str], list[str]]] = {}
    for a in audited:
        if a["changes"]:
            by_commit.setdefault(a["commit"], (a["changes"], []))[1].append(a["run"])
    for commit, (changed, names) in by_commit.items():
        yield Say(f"since {commit} ({len(names)} runs: {', '.join(names)}): {len(changed)} files")
        for change in changed[:SHOWN_CHANGES]:
            yield Say(f"    {change}")
        if len(changed) > SHOWN_CHANGES:
            yield Say(f"    ... and {len(changed) - SHOWN_CHANGES} more")
    if not by_commit:
        yield Say("none: every run's commit has the code rendering this page (or cannot be compared, see the "
                  "verdicts)")


def versions(runs: Sequence[Path]) -> pd.DataFrame:
    """Per run the dlfp, vLLM and torch versions, the machine, the telemetry source and the cost profile a
    simulated run priced its steps with (a run whose manifest does not read is left out: its verdict says why)."""
    rows = []
    for d in runs:
        try:
            m = read_manifest(d)
        except RunFolderError:
            continue
        hw, versions = m.hardware or {}, m.versions or {}
        rows.append({"run": str(d), "dlfp": versions["dlfp"], "vLLM": versions["vllm"],
                     "torch": versions["torch"],
                     "machine": f"{hw.get('cpu_model')} x{hw.get('cpu_logical_cores')}, "
                                f"{hw.get('memory_gib') or 0:.1f} GiB",
                     "GPUs": ", ".join(g["name"] for g in hw.get("gpus") or []) or "none",
                     "telemetry": m.telemetry,
                     "cost profile (simulated)": (f"{m.sim_profile['name']} sha256 {m.sim_profile['sha256'][:12]}"
                                                  if m.sim_profile is not None else "none (measured)"),
                     "created": m.created})
    return pd.DataFrame(rows)


def sizes(runs: Sequence[Path]) -> pd.DataFrame:
    """Each run's size on disk."""
    return pd.DataFrame([{"run": str(d), "size (MiB)": round(sum(f.stat().st_size for f in d.rglob("*")
                                                                  if f.is_file()) / 2**20, 2)} for d in runs])
