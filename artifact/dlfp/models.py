"""Weightless Qwen3-shaped model configs shipped with the package (public config values).

vLLM loads them with ``load_format="dummy"`` (random weights) and ``skip_tokenizer_init``,
so nothing is downloaded and prompts are token ids. ``qwen3-tiny`` is the test and CPU
default, ``qwen3-mini`` and ``qwen3-small`` (about 3x and 8x its compute per token) extend
the CPU generalization ladder; ``qwen3-0.6b``, ``qwen3-8b`` and ``qwen3-32b`` carry the public
shapes of Qwen3-0.6B, 8B and 32B for GPU and modeled runs.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_ROOT = Path(__file__).with_name("model_configs")
MODELS = tuple(sorted(p.name for p in CONFIG_ROOT.iterdir() if (p / "config.json").is_file()))


def model_path(name: str) -> str:
    """Directory of a shipped config by name, or a user's own config directory as is."""
    if name in MODELS:
        return str(CONFIG_ROOT / name)
    if (Path(name) / "config.json").is_file():
        return str(Path(name))
    raise ValueError(f"unknown model {name!r}: use one of {list(MODELS)} or a directory with config.json")
