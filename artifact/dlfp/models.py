"""Models by name: weightless Qwen3-shaped configs shipped with the package, or a user's checkpoint.

The shipped configs carry public config values only; vLLM loads them with
``load_format="dummy"`` (random weights) and ``skip_tokenizer_init``, so nothing is downloaded
and prompts are token ids. ``qwen3-tiny`` is the test and CPU default, ``qwen3-mini`` and
``qwen3-small`` (about 3x and 8x its compute per token) extend the CPU generalization ladder;
``qwen3-0.6b``, ``qwen3-8b`` and ``qwen3-32b`` carry the public shapes of Qwen3-0.6B, 8B and 32B
for GPU and modeled runs.

A cluster's real checkpoints are named by directory, or by hub id (``Qwen/Qwen3-8B``) when they
sit in a Hugging Face cache; the cache is only read (``local_files_only``): a trial never
downloads, so a node without network access runs exactly what its cache holds.
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG_ROOT = Path(__file__).with_name("model_configs")
MODELS = tuple(sorted(p.name for p in CONFIG_ROOT.iterdir() if (p / "config.json").is_file()))
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def model_path(name: str, cache_dir: str | None = None, need: str = "config.json") -> str:
    """Directory of a shipped config by name, a directory holding ``need`` as is, or the cached
    snapshot of hub id ``name`` in ``cache_dir`` (None: Hugging Face's default cache)."""
    if name in MODELS:
        return str(CONFIG_ROOT / name)
    if (Path(name) / need).is_file():
        return str(Path(name))
    if HUB_ID.match(name) and not Path(name).exists():
        snapshot = _cached_snapshot(name, cache_dir)
        if snapshot is not None and (Path(snapshot) / need).is_file():
            return snapshot
        where = cache_dir or "the default Hugging Face cache ($HF_HUB_CACHE or $HF_HOME/hub)"
        raise ValueError(f"unknown model {name!r}: a hub id cached with {need} in {where}; not found there, and "
                         "trials never download (fill the cache first, e.g. `hf download` on a node with network)")
    raise ValueError(f"unknown model {name!r}: use one of {list(MODELS)}, a directory with {need}, "
                     "or a hub id in the Hugging Face cache")


def _cached_snapshot(repo_id: str, cache_dir: str | None) -> str | None:
    """The local snapshot of ``repo_id`` (its ``main`` revision), without touching the network."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True)
    except Exception:  # not cached (LocalEntryNotFoundError), or no huggingface_hub at all
        return None
    return str(path)


def weight_files(directory: str) -> list[Path]:
    """The weight files of a checkpoint directory (none for the shipped weightless configs)."""
    return sorted(p for pattern in WEIGHT_PATTERNS for p in Path(directory).glob(pattern))
