"""Fit a cost profile's efficiencies to measured forward passes, and write the profile (pure: no torch).

:mod:`dlfp.sim.gpucal` measures the samples on a GPU; this module turns them into the
efficiencies the roofline model (:mod:`dlfp.sim.costmodel`) multiplies, with leave-one-out
errors, and renders the profile YAML with its provenance.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from dlfp.paths import model_path, write_text_atomic
from dlfp.sim.costmodel import PROFILE_DIR, ModelShape, Profile, available_profiles, parse_profile, step_time

FACTORS = ("matmul_efficiency", "attention_efficiency", "memory_efficiency")
"""The Profile fields this script fits, in the order of the cost terms they divide."""


_FACTOR_KEYS = {
    "matmul_efficiency": ("compute", "matmul_efficiency"),
    "attention_efficiency": ("compute", "attention_efficiency"),
    "memory_efficiency": ("memory", "efficiency"),
}


MIN_EFFICIENCY = 1e-6
"""Lower bound of a fitted factor: low enough for a CPU dry run against a GPU base profile."""


BINDING_SHARE = 0.1
"""A compute term determines its factor in a sample only above this share of the compute time:
below it, doubling the factor moves the prediction by under 5%, which timing noise can match."""


KINK_MARGIN = 1.05
"""A sample counts in a regime only when its time there exceeds the other by this factor. The fit
parks a factor that no sample needs at the kink of ``max()`` of some sample (where its gradient
vanishes), and a sample at the kink only bounds the factor: it does not determine it."""


_STARTS = (0.1, 0.6)
"""Per-factor starting points: ``max()`` makes the fit piecewise smooth, so one start may stall."""


@dataclass(frozen=True, slots=True)
class Case:
    """One timed step: ``requests`` rows of ``new`` tokens, each over ``context`` cached tokens."""

    requests: int
    new: int
    context: int

    @property
    def batch(self) -> tuple[tuple[int, int], ...]:
        """The step as the cost model sees it: ``(new tokens, context before)`` per request."""
        return ((self.new, self.context),) * self.requests

    @property
    def label(self) -> str:
        """Short description for progress lines and the profile's sample table."""
        if self.new == 1:
            return f"decode R={self.requests} c={self.context}"
        return f"prefill R={self.requests} n={self.new} c={self.context}"


@dataclass(frozen=True, slots=True)
class Sample:
    """One case's measured time on one model; ``seconds`` is what the fit matches."""

    model: str
    shape: ModelShape
    case: Case
    seconds: float
    wall_s: float

    @property
    def batch(self) -> tuple[tuple[int, int], ...]:
        """The step as the cost model sees it."""
        return self.case.batch


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted profile, which factors the samples determined, and how well it predicts them."""

    profile: Profile
    measured: tuple[str, ...]
    """Factors fitted to the samples; the others keep the base profile's values."""
    predicted_s: tuple[float, ...]
    """``step_time(...).gpu_s`` of each sample under ``profile``."""
    memory_bound: int
    """Samples whose memory time exceeds their compute time under ``profile``."""
    in_sample_p50: float
    in_sample_p90: float
    heldout_p50: float
    heldout_p90: float
    """Leave-one-out relative error: each sample predicted by a fit that never saw it."""


def _unit_terms(samples: Sequence[Sample], base: Profile, dtype_bytes: int) -> np.ndarray:
    """Per sample: dense, attention and memory seconds at efficiency 1, read off ``step_time`` itself.

    Each term is isolated by making the other two free (infinite efficiency or rate), so the fit
    uses the cost model's own arithmetic; ``_check_form`` verifies the recombination.
    """
    one = replace(base, matmul_efficiency=1.0, attention_efficiency=1.0, memory_efficiency=1.0)
    isolate = (replace(one, attention_efficiency=math.inf, memory_gbps=math.inf),
               replace(one, matmul_efficiency=math.inf, memory_gbps=math.inf),
               replace(one, peak_tflops=math.inf))
    return np.array([[step_time(s.shape, p, s.batch, tp=1, dtype_bytes=dtype_bytes).gpu_s for p in isolate]
                     for s in samples])


def _model_s(terms: np.ndarray, eff: np.ndarray) -> np.ndarray:
    return np.maximum(terms[:, 0] / eff[0] + terms[:, 1] / eff[1], terms[:, 2] / eff[2])


def _solve(terms: np.ndarray, seconds: np.ndarray, free: Sequence[int], fixed: np.ndarray) -> np.ndarray:
    """Efficiencies minimising squared log error, the ``free`` ones fitted and the rest ``fixed``."""
    log_y = np.log(seconds)

    def efficiencies(x: np.ndarray) -> np.ndarray:
        eff = fixed.copy()
        eff[list(free)] = np.exp(x)
        return eff

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(_model_s(terms, efficiencies(x))) - log_y

    fits = [least_squares(residuals, np.log(start), bounds=(math.log(MIN_EFFICIENCY), 0.0))
            for start in itertools.product(_STARTS, repeat=len(free))]
    return efficiencies(min(fits, key=lambda r: r.cost).x)


def _determined(terms: np.ndarray, eff: np.ndarray) -> list[bool]:
    """Whether some sample's time depends on each factor (see the module docstring)."""
    dense, attn, memory = (terms / eff).T
    compute = dense + attn
    compute_bound = compute >= KINK_MARGIN * memory
    return [bool(np.any(compute_bound & (dense >= BINDING_SHARE * compute))),
            bool(np.any(compute_bound & (attn >= BINDING_SHARE * compute))),
            bool(np.any(memory >= KINK_MARGIN * compute))]


def _check_form(samples: Sequence[Sample], profile: Profile, dtype_bytes: int, terms: np.ndarray) -> np.ndarray:
    """``step_time`` under ``profile``; fails if it is no longer max(compute, memory) of the terms."""
    predicted = np.array([step_time(s.shape, profile, s.batch, tp=1, dtype_bytes=dtype_bytes).gpu_s
                          for s in samples])
    eff = np.array([getattr(profile, f) for f in FACTORS])
    if not np.allclose(predicted, _model_s(terms, eff), rtol=1e-9, atol=0.0):
        raise RuntimeError("costmodel.step_time is no longer max(dense/eff_mm + attention/eff_attn, "
                           "memory/eff_mem) on one GPU: update dlfp.sim.gpucal to its new form")
    return predicted


def error_percentiles(predicted: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """The p50 and p90 of the relative error of ``predicted`` against ``seconds``."""
    p50, p90 = np.percentile(np.abs(predicted - seconds) / seconds, [50, 90])
    return float(p50), float(p90)


def fit_efficiencies(base: Profile, samples: Sequence[Sample], dtype_bytes: int = 2) -> Fit:
    """Fit the three efficiencies of ``base`` to ``samples`` (one GPU, no TP); see the module docstring."""
    if len(samples) <= len(FACTORS):
        raise ValueError(f"need more than {len(FACTORS)} samples to fit {len(FACTORS)} factors, got {len(samples)}")
    seconds = np.array([s.seconds for s in samples])
    if not np.all(seconds > 0):
        raise ValueError("measured times must be positive")
    terms = _unit_terms(samples, base, dtype_bytes)
    base_eff = np.array([getattr(base, f) for f in FACTORS])
    free = list(range(len(FACTORS)))
    eff = _solve(terms, seconds, free, base_eff)
    determined = _determined(terms, eff)
    if not all(determined):
        free = [i for i in free if determined[i]]
        eff = _solve(terms, seconds, free, base_eff)
    heldout = np.empty(len(samples))
    for i in range(len(samples)):
        keep = np.arange(len(samples)) != i
        heldout[i] = _model_s(terms[i:i + 1], _solve(terms[keep], seconds[keep], free, base_eff))[0]
    fitted: dict[str, Any] = {FACTORS[i]: float(f"{eff[i]:.4g}") for i in free}  # 4 digits: the file's precision
    profile = replace(base, **fitted)
    predicted = _check_form(samples, profile, dtype_bytes, terms)
    memory_bound = int(np.sum(terms[:, 2] / profile.memory_efficiency
                              >= terms[:, 0] / profile.matmul_efficiency + terms[:, 1] / profile.attention_efficiency))
    return Fit(profile, tuple(fitted), tuple(predicted.tolist()), memory_bound,
               *error_percentiles(predicted, seconds), *error_percentiles(heldout, seconds))


def load_base(name_or_path: str | Path) -> tuple[dict[str, Any], Profile]:
    """A roofline base profile as its raw mapping (which keeps each number's source) and parsed."""
    path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        path = Path(name_or_path)
        if not path.is_file():
            raise ValueError(f"unknown profile {str(name_or_path)!r}: use one of "
                             f"{list(available_profiles())} or a YAML file path")
    raw = yaml.safe_load(path.read_text())
    return raw, parse_profile(raw, origin=str(path))


@dataclass(frozen=True, slots=True)
class Run:
    """What was measured, for the profile's provenance."""

    base: str
    device: str
    dtype: str
    timer: str
    repeats: int
    versions: str
    date: str
    command: str = ""
    """The command line that measured, so the profile says how to measure it again."""
    measuring_s: float | None = None
    stopped: str = ""
    """Why measuring ended before every case (``--max-seconds``); empty when it did not."""


def render_profile(fit: Fit, samples: Sequence[Sample], base_raw: Mapping[str, Any], run: Run, name: str) -> str:
    """The profile YAML: header comments, provenance in ``references``, fitted factors ``measured``."""
    models = sorted({s.model for s in samples})
    kept = [f for f in FACTORS if f not in fit.measured]
    provenance = [
        f"dlfp.sim.gpucal, {run.date}: {', '.join(fit.measured)} fitted to {len(samples)} forward passes "
        f"of {', '.join(models)} (random {run.dtype} weights, transformers Qwen3ForCausalLM, SDPA, static KV cache; "
        f"{run.timer} time, median of {run.repeats})",
        f"Measured on {run.device} with {run.versions}",
        f"Fit relative error: in-sample p50 {fit.in_sample_p50:.1%} p90 {fit.in_sample_p90:.1%}, "
        f"leave-one-out p50 {fit.heldout_p50:.1%} p90 {fit.heldout_p90:.1%}; "
        f"{fit.memory_bound} of {len(samples)} samples memory-bound",
        f"Other numbers from base profile {run.base} with their sources"
        + (f"; {', '.join(kept)} kept from it: no sample depends on them enough to fit" if kept else ""),
    ]
    if run.command or run.measuring_s is not None:
        took = f" (measuring took {run.measuring_s:.0f} s)" if run.measuring_s is not None else ""
        provenance.append(f"Command: {run.command or 'not recorded'}{took}")
    if run.stopped:
        provenance.append(f"Incomplete: {run.stopped}")
    head = {"name": name, "device": run.device, "references": [*base_raw.get("references", []), *provenance]}
    body = {section: {key: dict(entry) for key, entry in entries.items()}
            for section, entries in base_raw.items() if section not in head}
    for factor in fit.measured:
        section, key = _FACTOR_KEYS[factor]
        body[section][key] = {"value": getattr(fit.profile, factor), "source": "measured"}
    width = max(len(s.model) + len(s.case.label) for s in samples) + 1
    table = [f"#   {f'{s.model} {s.case.label}':<{width}} measured {s.seconds * 1e3:10.4f} ms"
             f"  modeled {p * 1e3:10.4f} ms  wall {s.wall_s * 1e3:10.4f} ms"
             for s, p in zip(samples, fit.predicted_s, strict=True)]
    header = [
        f"# Cost profile fitted by dlfp.sim.gpucal on {run.date}: {run.device}.",
        "#",
        f"# {', '.join(fit.measured)}: source \"measured\", fitted to the forward-pass times below",
        f"# ({run.timer} time) by least squares on log time. All other numbers are the base profile's",
        f"# ({run.base}), public spec or assumed as marked; host overhead is not part of a forward pass",
        "# and stays assumed. See the module docstring of dlfp.sim.gpucal for the method and its limits.",
        *([f"# Command: {run.command}"] if run.command else []),
        *([f"# Incomplete: {run.stopped}."] if run.stopped else []),
        "#",
        "# Samples (model, step, measured, modeled by this profile, wall clock):",
        *table,
    ]
    dump: dict[str, Any] = {"sort_keys": False, "width": 1000, "allow_unicode": True}
    return ("\n".join(header) + "\n" + yaml.safe_dump(head, default_flow_style=False, **dump)
            + yaml.safe_dump(body, default_flow_style=None, **dump))


_SAMPLE_LINE = re.compile(
    r"^#   (?P<model>\S+) (?:decode R=(?P<dr>\d+) c=(?P<dc>\d+)|prefill R=(?P<pr>\d+) n=(?P<pn>\d+) c=(?P<pc>\d+))"
    r"\s+measured\s+(?P<measured>[\d.]+) ms\s+modeled\s+[\d.]+ ms\s+wall\s+(?P<wall>[\d.]+) ms$")


def read_samples(path: str | Path) -> list[Sample]:
    """The samples a profile written by :func:`render_profile` was fitted to, read back from its header
    (their times at the header's precision, 0.1 us), so a measured profile is its own record of what the
    GPU did: the book compares other profiles with the same forward passes without the GPU."""
    samples = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = _SAMPLE_LINE.match(line)
        if not m:
            continue
        case = Case(int(m["dr"]), 1, int(m["dc"])) if m["dr"] else Case(int(m["pr"]), int(m["pn"]), int(m["pc"]))
        samples.append(Sample(m["model"], ModelShape.from_dir(model_path(m["model"])), case,
                              float(m["measured"]) / 1e3, float(m["wall"]) / 1e3))
    if not samples:
        raise ValueError(f"{path}: no sample lines in its header (not a profile written by dlfp.sim.gpucal)")
    return samples


def write_profile(path: str | Path, fit: Fit, samples: Sequence[Sample], base_raw: Mapping[str, Any], run: Run,
                  name: str) -> Profile:
    """Render, check that ``parse_profile`` reads back the fitted numbers, then write the file."""
    text = render_profile(fit, samples, base_raw, run, name)
    profile = parse_profile(yaml.safe_load(text), origin=str(path))
    if profile != replace(fit.profile, name=name, device=run.device):
        raise RuntimeError(f"{path}: the rendered profile does not read back as fitted")
    write_text_atomic(Path(path), text)
    return profile
