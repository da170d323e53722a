"""A Hugging Face hub cache on disk, as ``hf download`` leaves it, for tests of models named by hub id
(the engine spec, the generalization plan): trials only ever read such a cache."""

from __future__ import annotations

import json
from pathlib import Path

from dlfp.paths import CONFIG_ROOT


def hf_cache(root: Path, repo: str, weights: bool = True) -> Path:
    """A Hugging Face hub cache holding ``repo`` as ``hf download`` leaves it (one snapshot)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    (snapshot / "config.json").write_text((CONFIG_ROOT / "qwen3-tiny" / "config.json").read_text())
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))
    if weights:
        (snapshot / "model.safetensors").write_bytes(b"")
    return snapshot
