"""Measure a real GPU's forward passes and write a cost profile whose efficiencies are fitted to them.

Why: the shipped profiles (``profiles/*.yaml``) take peak FLOP/s and HBM bandwidth from public
specs but *assume* the fractions of them a step reaches (``matmul_efficiency``,
``attention_efficiency``, memory ``efficiency``). This script replaces those three guesses by
measurements: it times forward passes of Qwen3-shaped models (``transformers``'
``Qwen3ForCausalLM`` built from the weightless configs in ``dlfp.models``, random weights, nothing
downloaded) on prefill chunks and decode batches, fits the three factors so that
``costmodel.step_time(...).gpu_s`` matches the times, and writes a profile in the schema of
``profiles/a100.yaml`` with the fitted factors marked ``source: measured`` and the run's
provenance (date, GPU, torch/CUDA/transformers versions, models, samples, fit error) in its
``references`` and header comments.

What a sample is. A *prefill* case is one request with ``n`` new tokens over ``c`` tokens already
in its KV cache (``c = 0`` is a plain prompt); a *decode* case is ``R`` requests with one new token
each over ``c`` cached tokens. The context is written untimed into a ``StaticCache`` sized exactly
``c + n``, so the timed step writes its new K/V in place and attention reads ``c + n`` positions,
as the cost model counts them (a ``DynamicCache`` would copy the whole cache every step). Logits
are computed at each request's last token only, as in the cost model and in vLLM.

What is timed. On CUDA the default ``--timer busy`` sums the GPU time covered by the step's kernels
(the union of kernel spans seen by ``torch.profiler``); ``--timer wall`` takes CUDA events around
the call instead. Busy time is the default because the roofline has no kernel-launch term: vLLM
replays CUDA graphs, while ``transformers`` launches every kernel from Python, so small models'
decode steps are launch-bound in wall time. Both are recorded. On CPU the host clock is both.
Each case reports the median of ``--repeats`` runs after two warm-ups.

What is fitted, what stays assumed. The three efficiencies, each in (0, 1], minimise the squared
log error over all samples (relative error, so 1 ms decodes and 1 s prefills count alike). A
factor counts as measured only if some sample depends on it at the fit: ``memory`` needs a
memory-bound sample, ``matmul``/``attention`` a compute-bound one spending at least
``BINDING_SHARE`` of its compute time in that term (regimes with a ``KINK_MARGIN``). A factor no
sample determines keeps the base profile's value and source, is named, and the others are
refitted with it fixed. Everything else comes from the base profile unchanged: peaks, bandwidth
and capacity (public specs), the all-reduce numbers (one GPU measures no tensor parallelism), and
host overhead, which is the model runner's CPU work around a step and not part of a forward pass.
Reported fit error: in-sample and leave-one-out relative error, p50 and p90.

Limits. These are ``transformers`` kernels (PyTorch SDPA; a prefill chunk over a non-empty cache
takes the masked path, which materialises the KV heads for grouped-query attention), not vLLM's
FlashAttention and fused kernels, so the attention factor in particular is a conservative proxy.
Steps mixing prefill and decode are not measured: ``transformers`` batches rows of equal length.

Run it on a GPU node, with the base whose public specs describe that GPU::

    python -m dlfp.sim.gpucal --base h200 --models qwen3-0.6b,qwen3-8b --out h200-measured.yaml

and a CPU dry run of the plumbing (seconds; the numbers mean nothing)::

    python -m dlfp.sim.gpucal --base a100 --device cpu --dtype float32 --models qwen3-tiny --quick --out /tmp/p.yaml
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from scipy.optimize import least_squares

from dlfp.models import model_path
from dlfp.runfolder import write_text_atomic
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
WARMUP = 2
FILL_TOKENS = 8192
"""Untimed context is written in forwards of at most this many tokens, to bound activation memory."""


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


# Prefill chunks reach the compute-bound regime, long contexts give attention its share (over
# 40% of a qwen3-8b chunk's FLOPs at c=16k), and decode batches are memory-bound.
CASES = (
    *(Case(1, n, 0) for n in (128, 512, 2048, 8192)),
    *(Case(1, n, c) for n in (512, 2048) for c in (4096, 16384)),
    *(Case(r, 1, c) for r in (1, 8, 32, 128) for c in (512, 2048)),
)
QUICK_CASES = (Case(1, 16, 0), Case(1, 64, 0), Case(1, 32, 64), Case(1, 1, 32), Case(4, 1, 32))
"""A handful of small steps: enough to exercise measurement, fit and output on a CPU in seconds."""


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


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def busy_seconds(spans: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` spans: GPU time covered by at least one kernel."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _build_model(name: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoConfig, Qwen3ForCausalLM

    config = AutoConfig.from_pretrained(model_path(name))
    with device:  # initialise the random weights where they will run: no host copy of a 32B model
        model = Qwen3ForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


def _wall_s(step: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def _busy_s(step: Callable[[], object]) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and not e.is_user_annotation]
    if not spans:
        raise RuntimeError("torch.profiler recorded no GPU kernels (no CUPTI?): rerun with --timer wall")
    return busy_seconds(spans) * 1e-6  # profiler times are microseconds


def _time_case(model: torch.nn.Module, case: Case, device: torch.device, repeats: int,
               busy: bool) -> tuple[float, float]:
    """Median (fitted seconds, wall seconds) of ``repeats`` steps of ``case`` after the warm-ups."""
    from transformers import StaticCache

    config = model.config
    cache = StaticCache(config=config, max_cache_len=case.context + case.new)

    def ids(length: int) -> torch.Tensor:
        return torch.randint(0, config.vocab_size, (case.requests, length), device=device)

    def forward(input_ids: torch.Tensor) -> object:
        return model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

    chunk = max(1, FILL_TOKENS // case.requests)
    for start in range(0, case.context, chunk):
        forward(ids(min(chunk, case.context - start)))
    new = ids(case.new)

    def rewind() -> None:
        # Back to `context` cached tokens: the next step overwrites the same slots in place.
        for layer in cache.layers:
            layer.cumulative_length.fill_(case.context)

    def step() -> object:
        return forward(new)

    for _ in range(WARMUP):
        rewind()
        step()
    walls, busies = [], []
    for _ in range(repeats):
        rewind()
        walls.append(_wall_s(step, device))
        if busy:
            rewind()
            busies.append(_busy_s(step))
    wall = statistics.median(walls)
    return (statistics.median(busies) if busy else wall), wall


def measure(model_name: str, device: str | torch.device, dtype: torch.dtype, cases: Sequence[Case],
            repeats: int, timer: str = "busy", log: Callable[[str], None] = _stderr) -> list[Sample]:
    """Time ``cases`` on a random-weight ``model_name``; cases that run out of GPU memory are skipped.

    ``timer`` is ``"busy"`` (kernel time, CUDA only) or ``"wall"``; on CPU both read the host clock.
    """
    if timer not in ("busy", "wall"):
        raise ValueError(f"timer must be 'busy' or 'wall', got {timer!r}")
    device = torch.device(device)
    shape = ModelShape.from_dir(model_path(model_name))
    torch.manual_seed(0)
    log(f"{model_name}: building with random {dtype} weights on {device}")
    model = _build_model(model_name, device, dtype)
    busy = timer == "busy" and device.type == "cuda"
    samples: list[Sample] = []
    try:
        with torch.inference_mode():
            for k, case in enumerate(cases, 1):
                prefix = f"[{k}/{len(cases)}] {model_name} {case.label}"
                try:
                    seconds, wall = _time_case(model, case, device, repeats, busy)
                except torch.OutOfMemoryError:
                    log(f"{prefix}: out of memory, skipped")
                    torch.cuda.empty_cache()
                    continue
                samples.append(Sample(model_name, shape, case, seconds, wall))
                log(f"{prefix}: {seconds * 1e3:.3f} ms" + (f" (wall {wall * 1e3:.3f} ms)" if busy else ""))
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return samples


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


def _percentiles(predicted: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
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
    fitted = {FACTORS[i]: float(f"{eff[i]:.4g}") for i in free}  # 4 digits: the file's precision
    profile = replace(base, **fitted)
    predicted = _check_form(samples, profile, dtype_bytes, terms)
    memory_bound = int(np.sum(terms[:, 2] / profile.memory_efficiency
                              >= terms[:, 0] / profile.matmul_efficiency + terms[:, 1] / profile.attention_efficiency))
    return Fit(profile, tuple(fitted), tuple(predicted.tolist()), memory_bound,
               *_percentiles(predicted, seconds), *_percentiles(heldout, seconds))


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
        "#",
        "# Samples (model, step, measured, modeled by this profile, wall clock):",
        *table,
    ]
    dump = {"sort_keys": False, "width": 1000, "allow_unicode": True}
    return ("\n".join(header) + "\n" + yaml.safe_dump(head, default_flow_style=False, **dump)
            + yaml.safe_dump(body, default_flow_style=None, **dump))


def write_profile(path: str | Path, fit: Fit, samples: Sequence[Sample], base_raw: Mapping[str, Any], run: Run,
                  name: str) -> Profile:
    """Render, check that ``parse_profile`` reads back the fitted numbers, then write the file."""
    text = render_profile(fit, samples, base_raw, run, name)
    profile = parse_profile(yaml.safe_load(text), origin=str(path))
    if profile != replace(fit.profile, name=name, device=run.device):
        raise RuntimeError(f"{path}: the rendered profile does not read back as fitted")
    write_text_atomic(Path(path), text)
    return profile


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU {line.split(':', 1)[1].strip()}"
    return f"CPU {platform.machine()}"


def _versions(device: torch.device) -> str:
    import transformers

    parts = [f"torch {torch.__version__}", f"transformers {transformers.__version__}"]
    if device.type == "cuda":
        parts.insert(1, f"CUDA {torch.version.cuda}")
    return ", ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    """The command line; ``dlfp sim gpu-calibrate`` passes its arguments through to ``main``."""
    ap = argparse.ArgumentParser(
        prog="dlfp sim gpu-calibrate",
        description="Time forward passes of Qwen3-shaped models on this GPU and write a cost profile whose "
                    "matmul, attention and memory efficiencies are fitted to them (source: measured).")
    ap.add_argument("--base", required=True,
                    help="profile giving the public specs of this device: a shipped name (a100, h200) or a YAML path")
    ap.add_argument("--models", default="qwen3-0.6b,qwen3-8b",
                    help="comma-separated shipped model configs or config directories (Qwen3 only)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the plumbing")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--timer", choices=("busy", "wall"), default="busy",
                    help="busy: GPU time covered by kernels (default); wall: CUDA events around the step")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case; the median is kept")
    ap.add_argument("--quick", action="store_true", help="a few small cases (CPU dry run)")
    ap.add_argument("--name", help="profile name (default: <base name>-measured)")
    ap.add_argument("--out", required=True, help="YAML file to write")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --out")
    return ap


def _check_models(ap: argparse.ArgumentParser, spec: str) -> list[str]:
    models = [m.strip() for m in spec.split(",") if m.strip()]
    if not models:
        ap.error("--models: no model given")
    for name in models:
        try:
            config = json.loads((Path(model_path(name)) / "config.json").read_text())
        except ValueError as err:
            ap.error(f"--models: {err}")
        if config.get("model_type") != "qwen3":
            ap.error(f"--models: {name!r} is a {config.get('model_type')!r} config; only qwen3 is supported")
    return models


def main(argv: Sequence[str] | None = None) -> int:
    """Validate every argument, measure, fit, write the profile; errors in arguments exit with code 2."""
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        base_raw, base = load_base(args.base)
    except ValueError as err:
        ap.error(f"--base: {err}")
    models = _check_models(ap, args.models)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False (no GPU, or a CPU-only torch build); "
                 "use --device cpu for a dry run")
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    out = Path(args.out)
    if not out.parent.is_dir():
        ap.error(f"--out: directory {str(out.parent)!r} does not exist")
    if out.exists() and not args.force:
        ap.error(f"--out: {str(out)!r} exists; refusing to overwrite it (pass --force)")

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    cases = QUICK_CASES if args.quick else CASES
    timer = args.timer if device.type == "cuda" else "wall"
    samples = [s for name in models for s in measure(name, device, dtype, cases, args.repeats, timer)]
    fit = fit_efficiencies(base, samples, dtype_bytes=dtype.itemsize)
    run = Run(base=args.base, device=_device_name(device), dtype=args.dtype, timer=timer, repeats=args.repeats,
              versions=_versions(device), date=datetime.datetime.now(datetime.timezone.utc).isoformat("T", "seconds"))
    profile = write_profile(out, fit, samples, base_raw, run, args.name or f"{base.name}-measured")

    for factor in FACTORS:
        value = getattr(profile, factor)
        if factor not in fit.measured:
            _stderr(f"warning: {factor} kept at the base's {value}: no sample depends on it enough to fit it")
        elif value in (1.0, MIN_EFFICIENCY):
            _stderr(f"warning: {factor} = {value} sits at its bound: does --base {args.base} describe this device?")
    print(f"{out}: " + ", ".join(f"{f} {getattr(profile, f):.4g} ({'measured' if f in fit.measured else 'base'})"
                                 for f in FACTORS)
          + f"; relative error p50/p90 in-sample {fit.in_sample_p50:.1%}/{fit.in_sample_p90:.1%}, "
            f"leave-one-out {fit.heldout_p50:.1%}/{fit.heldout_p90:.1%} over {len(samples)} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
