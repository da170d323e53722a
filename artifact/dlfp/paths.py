"""Where things are on disk, and how a file there is replaced: the one module every layer may import.

* **The checkout**: :data:`REPO_ROOT` (``configs/``, ``notebooks/``, ``data/runs/``) and :data:`PACKAGE`.
  Modules find files through these names, never through ``Path(__file__).parents[n]``, so moving
  a module cannot silently point it elsewhere (``artifact/tests/test_layout.py`` checks both).
* **Models by name**: weightless Qwen3-shaped configs shipped with the package, or a user's
  checkpoint. The shipped configs carry public config values only; vLLM loads them with
  ``load_format="dummy"`` (random weights) and ``skip_tokenizer_init``, so nothing is downloaded
  and prompts are token ids. ``qwen3-tiny`` is the test and CPU default, ``qwen3-mini`` and
  ``qwen3-small`` (about 3x and 8x its compute per token) extend the CPU generalization ladder;
  ``qwen3-0.6b``, ``qwen3-8b`` and ``qwen3-32b`` carry the public shapes of Qwen3-0.6B, 8B and 32B
  for GPU and modeled runs. A cluster's real checkpoints are named by directory, or by hub id
  (``Qwen/Qwen3-8B``) when they sit in a Hugging Face cache; the cache is only read
  (``local_files_only``): a trial never downloads, so a node without network access runs exactly
  what its cache holds.
* **Atomic writes and checksums** (standard library only): the GPU-node calibration
  (:mod:`dlfp.sim.gpucal`) writes its profile with them on nodes that have no pandas or pyarrow.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
"""``artifact/dlfp`` in a checkout (or the installed package)."""
REPO_ROOT = PACKAGE.parents[1]
"""The checkout holding :data:`PACKAGE` (meaningful for an editable install, as every make target uses)."""
CONFIGS = REPO_ROOT / "configs"
CONFIG_ROOT = PACKAGE / "model_configs"
MODELS = tuple(sorted(p.name for p in CONFIG_ROOT.iterdir() if (p / "config.json").is_file()))
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def model_path(name: str, cache_dir: str | None = None, need: str = "config.json") -> str:
    """Directory of a shipped config by name, a directory holding ``need`` as is, or the cached
    snapshot of hub id ``name`` in ``cache_dir`` (None: Hugging Face's default cache)."""
    if name in MODELS:
        return str(CONFIG_ROOT / name)
    if _is(Path(name) / need, Path.is_file):
        return str(Path(name))
    if HUB_ID.match(name) and not _is(Path(name), Path.exists):
        snapshot = _cached_snapshot(name, cache_dir)
        if snapshot is not None and (Path(snapshot) / need).is_file():
            return snapshot
        where = cache_dir or "the default Hugging Face cache ($HF_HUB_CACHE or $HF_HOME/hub)"
        raise ValueError(f"unknown model {name!r}: a hub id cached with {need} in {where}; not found there, and "
                         "trials never download (fill the cache first, e.g. `hf download` on a node with network)")
    raise ValueError(f"unknown model {name!r}: use one of {list(MODELS)}, a directory with {need}, "
                     "or a hub id in the Hugging Face cache")


def _is(path: Path, test: Callable[[Path], bool]) -> bool:
    """``test(path)``, false where the name cannot be a path here (too long: ``OSError``), so that such a
    name is refused as an unknown model, in words, not as a traceback."""
    try:
        return test(path)
    except OSError:
        return False


def model_label(name: str) -> str:
    """A model as a run folder's name: a shipped config's name as is, a checkpoint directory or a hub
    id by its last component (``/ckpt/Qwen3-8B/`` and ``Qwen/Qwen3-8B`` both give ``Qwen3-8B``), other
    characters than letters, digits, ``.``, ``_`` and ``-`` as ``-``. A folder named from the whole
    path would land outside the runs folder (an absolute path replaces it) or two levels down (a hub
    id), where the results chapter never looks."""
    last = Path(os.path.normpath(name)).name or Path(name).resolve().name  # "." names the current folder
    label = re.sub(r"[^\w.-]+", "-", last, flags=re.ASCII).strip("-")
    if not label or set(label) <= {"."}:
        raise ValueError(f"model {name!r} gives no folder name: name it by a directory or a hub id")
    return label


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


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one step, so a reader (or a crash) never leaves half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """A manifest or report, replaced in one step (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
