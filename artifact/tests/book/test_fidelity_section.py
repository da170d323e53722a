"""The fidelity table (:mod:`dlfp.book.fidelity_section`): without the bench's runs the page names the
command; with the committed runs it says what the profile was fitted on, then the table, captioned with
where the real run was measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlfp.book.fidelity_section import section
from dlfp.book.page import Say, Show
from dlfp.paths import REPO_ROOT


def test_no_runs_name_the_command(tmp_path: Path) -> None:
    [say] = list(section(str(tmp_path)))
    assert isinstance(say, Say) and say.text == f"no fidelity runs under {tmp_path} (dlfp bench sim fidelity " \
                                                f"--out {tmp_path} makes them)"


def test_the_committed_runs_give_the_profile_then_the_table() -> None:
    pytest.importorskip("vllm")
    say, show = list(section(str(REPO_ROOT / "data" / "runs" / "sim-fidelity")))
    assert isinstance(say, Say) and say.text.startswith("profile ") and "held-out error there p50 " in say.text
    assert isinstance(show, Show) and show.value.caption.startswith("real: measured")
    assert "quantity" in show.value.data.columns
