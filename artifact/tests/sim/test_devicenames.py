"""Device names (``dlfp.sim.devicenames``): the GPU model in a name picks the shipped base profile, a
profile of another model is a mismatch, a CPU dry run must name its base."""

from __future__ import annotations

import pytest

from dlfp.paths import CONFIGS
from dlfp.sim import devicenames
from dlfp.sim.costmodel import load_profile


@pytest.mark.parametrize(("name", "model", "base"), [
    ("NVIDIA A100-SXM4-80GB", "A100", "a100"), ("NVIDIA A100 80GB PCIe", "A100", "a100"),
    ("NVIDIA A100-SXM4-40GB", "A100", "a100"), ("NVIDIA H200", "H200", "h200"), ("NVIDIA H200 NVL", "H200", "h200"),
    ("NVIDIA H100 80GB HBM3", "H100", None), ("Tesla V100-SXM2-32GB", "V100", None), ("NVIDIA L40S", "L40S", None),
    ("NVIDIA GeForce RTX 4090", None, None), ("CPU Intel(R) Xeon(R) Platinum 8480+", None, None),
])
def test_the_gpu_model_in_a_device_name_picks_the_shipped_base(name: str, model: str | None,
                                                                base: str | None) -> None:
    """An H100 is not an H200 (3.35 against 4.8 TB/s, 80 against 141 GB): no shipped profile, not the nearest."""
    assert devicenames.gpu_model(name) == model
    assert devicenames.shipped_base(name) == base


def test_each_shipped_profile_names_the_gpu_model_it_is_chosen_for() -> None:
    from dlfp.sim.costmodel import available_profiles

    for name in available_profiles():
        assert devicenames.gpu_model(load_profile(name).device) == name.split("-")[0].upper(), name


def test_a_base_of_another_gpu_model_is_a_mismatch() -> None:
    assert devicenames.base_mismatch("NVIDIA A100-SXM4-80GB", load_profile("a100").device) is None
    assert devicenames.base_mismatch("NVIDIA A100-SXM4-80GB", "my own accelerator") is None  # nothing to compare
    problem = devicenames.base_mismatch("NVIDIA A100-SXM4-80GB", load_profile("h200").device)
    assert problem is not None and "(H200), not this GPU, NVIDIA A100-SXM4-80GB (A100)" in problem


def test_the_base_is_given_or_chosen_by_the_gpu_name() -> None:
    assert devicenames.choose_base("h200", "NVIDIA A100-SXM4-80GB") == "h200"  # given: the mismatch check is apart
    assert devicenames.choose_base(None, "NVIDIA A100-SXM4-80GB") == "a100"
    with pytest.raises(ValueError, match="no shipped cost profile for 'NVIDIA H100 80GB HBM3'"):
        devicenames.choose_base(None, "NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match="--device cpu: pass --base"):
        devicenames.choose_base(None, None)


def test_each_shipped_base_has_a_shipped_config_for_the_node_check() -> None:
    for name in ("NVIDIA A100-SXM4-80GB", "NVIDIA H200"):
        assert (CONFIGS / f"{devicenames.shipped_base(name)}.yaml").is_file()


def test_a_cpu_is_named_from_cpuinfo() -> None:
    assert devicenames.cpu_name().startswith("CPU ")
