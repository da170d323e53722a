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


@pytest.mark.parametrize(("name", "label"), [
    ("qwen3-tiny", "qwen3-tiny"), ("/ckpt/Qwen3-8B/", "Qwen3-8B"), ("Qwen/Qwen3-8B", "Qwen3-8B"),
    ("ckpt/Qwen3 8B (bf16)", "Qwen3-8B-bf16"), ("/ckpt/a/../Qwen3-32B", "Qwen3-32B")])
def test_a_model_labels_a_run_folder_by_its_last_component(name: str, label: str) -> None:
    assert paths.model_label(name) == label


@pytest.mark.parametrize("name", ["/", "..", "/ckpt/***"])
def test_a_model_that_gives_no_folder_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="gives no folder name"):
        paths.model_label(name)
