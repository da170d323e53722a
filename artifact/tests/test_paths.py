"""Atomic writes (``dlfp.paths``): a failed write keeps the old file and leaves no temporary."""

from __future__ import annotations

import json

import pytest

from dlfp import paths


def test_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_temp(tmp_path) -> None:
    path = tmp_path / "report.json"
    paths.write_json_atomic(path, {"v": 1})
    with pytest.raises(TypeError):
        paths.write_text_atomic(path, b"not text")  # type: ignore[arg-type]  # fails mid-write
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
