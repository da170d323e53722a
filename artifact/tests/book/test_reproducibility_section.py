"""The reproducibility appendix (:mod:`dlfp.book.reproducibility_section`) on the committed CPU run and a
copy with one file edited: the audit table comes before anything is glued, an edited file stops the page
after the table shows it, changed files are listed per commit up to a count, and a run whose manifest does
not read is left out of the versions table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dlfp.book.page import Glue, Say, Show
from dlfp.book.reproducibility_section import SHOWN_CHANGES, audits, changes, section, sizes, versions
from dlfp.paths import REPO_ROOT

RUN = REPO_ROOT / "data" / "runs" / "cpu-default"


def test_the_committed_run_is_audited_then_its_provenance_glued() -> None:
    items = list(section(str(RUN), [RUN], audits([RUN])))
    assert [type(i) for i in items] == [Say, Show, Glue, Glue]
    assert items[0].text.startswith("1 runs. Code rendering this page: ")
    table = items[1].value
    assert len(table) == 1 and {"files verified", "verdict"} <= set(table.columns)
    assert [i.key for i in items[2:]] == ["headline_provenance", "book_provenance"]


def test_an_edited_file_stops_the_page_after_the_table_shows_it(tmp_path: Path) -> None:
    run = tmp_path / "cpu-default"
    shutil.copytree(RUN, run)
    trace = next(run.glob("trial-0/stock/*.parquet"))
    trace.write_bytes(trace.read_bytes() + b"\0")
    shown = []
    with pytest.raises(RuntimeError, match="files do not match their manifests"):
        shown.extend(section(str(run), [run], audits([run])))
    assert [type(i) for i in shown] == [Say, Show]


def test_changed_files_are_listed_per_commit_up_to_a_count() -> None:
    many = [f"f{i}.py  +1 -0" for i in range(SHOWN_CHANGES + 3)]
    lines = [i.text for i in changes([{"changes": many, "commit": "abc", "run": "r1"},
                                      {"changes": many, "commit": "abc", "run": "r2"},
                                      {"changes": [], "commit": "def", "run": "r3"}])]
    assert lines[0] == f"since abc (2 runs: r1, r2): {SHOWN_CHANGES + 3} files"
    assert lines[1:-1] == [f"    {c}" for c in many[:SHOWN_CHANGES]] and lines[-1] == "    ... and 3 more"
    [none] = [i.text for i in changes([{"changes": [], "commit": "abc", "run": "r"}])]
    assert none.startswith("none: every run's commit has the code rendering this page")


def test_versions_leave_out_a_run_whose_manifest_does_not_read(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{", encoding="utf-8")
    table = versions([RUN, broken])
    assert list(table.run) == [str(RUN)] and table["cost profile (simulated)"].iloc[0] == "none (measured)"
    assert sizes([RUN])["size (MiB)"].iloc[0] > 0
