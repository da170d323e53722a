"""Measure a real GPU's forward passes and write a cost profile whose efficiencies are fitted to them.

Why: the shipped profiles (``profiles/*.yaml``) take peak FLOP/s and HBM bandwidth from public
specs but *assume* the fractions of them a step reaches (``matmul_efficiency``,
``attention_efficiency``, memory ``efficiency``). This script replaces those three guesses by
measurements: it times forward passes of Qwen3-shaped models (``transformers``'
``Qwen3ForCausalLM`` built from the weightless configs in ``dlfp.paths``, random weights, nothing
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

What it needs: PyTorch, ``transformers``, numpy, scipy, PyYAML and this checkout on ``PYTHONPATH``,
what a GPU node without network has; no vLLM, pyarrow or install of ``dlfp`` (``test_gpucal_bare``
checks). ``--max-seconds`` fits what a short allocation measured, and says so in the profile.

The base profile must describe the GPU measured (:mod:`dlfp.sim.devicenames` chooses it by the GPU's
name and refuses one of another model). Run it on a GPU node (``make gpu-calibrate``)::

    PYTHONPATH=artifact:dlfp-vllm/src python3 -m dlfp.sim.gpucal --models qwen3-0.6b,qwen3-8b --out measured.yaml

and a CPU dry run of the plumbing (seconds; the numbers mean nothing)::

    python -m dlfp.sim.gpucal --base a100 --device cpu --dtype float32 --models qwen3-tiny --quick --out /tmp/p.yaml
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dlfp.paths import model_path
from dlfp.sim.costmodel import ModelShape
from dlfp.sim.devicenames import base_mismatch, choose_base, cpu_name
from dlfp.sim.gpufit import FACTORS, MIN_EFFICIENCY, Case, Run, Sample, fit_efficiencies, load_base, write_profile

WARMUP = 2


FILL_TOKENS = 8192
"""Untimed context is written in forwards of at most this many tokens, to bound activation memory."""


def _round_robin(*groups: Sequence[Case]) -> tuple[Case, ...]:
    """One case of each group in turn: every prefix of the order spans all the groups' regimes."""
    return tuple(group[i] for i in range(max(map(len, groups))) for group in groups if i < len(group))


# Prefill chunks reach the compute-bound regime, long contexts give attention its share (over
# 40% of a qwen3-8b chunk's FLOPs at c=16k), and decode batches are memory-bound. Interleaved, so
# that a run cut short by --max-seconds has still measured every regime.
CASES = _round_robin(
    tuple(Case(1, n, 0) for n in (128, 512, 2048, 8192)),
    tuple(Case(1, n, c) for n in (512, 2048) for c in (4096, 16384)),
    tuple(Case(r, 1, 512) for r in (1, 8, 32, 128)),
    tuple(Case(r, 1, 2048) for r in (1, 8, 32, 128)),
)


QUICK_CASES = (Case(1, 16, 0), Case(1, 64, 0), Case(1, 32, 64), Case(1, 1, 32), Case(4, 1, 32))
"""A handful of small steps: enough to exercise measurement, fit and output on a CPU in seconds."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_clock: Callable[[], float] = time.monotonic
"""The budget's clock: a module name, so tests can run :class:`Budget` on a fake one."""


@dataclass(slots=True)
class Budget:
    """Wall-clock budget for measuring (``--max-seconds``), so a short allocation ends with a profile.

    A case starts only while the longest case so far would still end before ``deadline``: a case in
    flight is never interrupted (its steps are the samples), so a run overruns by at most one case.
    """

    deadline: float = math.inf
    longest: float = 0.0
    stopped_before: str = ""
    """The first model or case left unmeasured, once the budget has stopped measuring."""

    def allows(self, what: str) -> bool:
        """Whether ``what`` may start; the first refusal is remembered and every later one follows."""
        if not self.stopped_before and _clock() + self.longest > self.deadline:
            self.stopped_before = what
        return not self.stopped_before

    def spent(self, seconds: float) -> None:
        self.longest = max(self.longest, seconds)


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

    config: Any = model.config  # a transformers config: torch's stubs type a Module's attributes as Tensor | Module
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
            static: Any = layer  # transformers 5's StaticLayer (see _preflight); its stubs name the mixins only
            static.cumulative_length.fill_(case.context)

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
            repeats: int, timer: str = "busy", log: Callable[[str], None] = _stderr,
            budget: Budget | None = None) -> list[Sample]:
    """Time ``cases`` on a random-weight ``model_name``; cases that run out of GPU memory are skipped.

    ``timer`` is ``"busy"`` (kernel time, CUDA only) or ``"wall"``; on CPU both read the host clock.
    Once ``budget`` refuses a case, it and the rest are not run (nor is the model built, if spent).
    """
    if timer not in ("busy", "wall"):
        raise ValueError(f"timer must be 'busy' or 'wall', got {timer!r}")
    budget = budget or Budget()
    if not budget.allows(model_name):
        return []
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
                if not budget.allows(f"{model_name} {case.label}"):
                    log(f"{prefix}: --max-seconds budget spent; this and the remaining cases not run")
                    break
                start = _clock()
                try:
                    seconds, wall = _time_case(model, case, device, repeats, busy)
                except torch.OutOfMemoryError:
                    log(f"{prefix}: out of memory, skipped")
                    torch.cuda.empty_cache()
                    continue
                finally:
                    budget.spent(_clock() - start)
                samples.append(Sample(model_name, shape, case, seconds, wall))
                log(f"{prefix}: {seconds * 1e3:.3f} ms" + (f" (wall {wall * 1e3:.3f} ms)" if busy else ""))
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return samples


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def _versions(device: torch.device) -> str:
    import transformers

    parts = [f"torch {torch.__version__}", f"transformers {transformers.__version__}"]
    if device.type == "cuda":
        parts.insert(1, f"CUDA {torch.version.cuda}")
    return ", ".join(parts)


def _preflight(device: torch.device, timer: str) -> str | None:
    """What would otherwise fail only after minutes of a GPU allocation, checked in seconds: the
    ``transformers`` API the timing relies on, and (busy timer) that the profiler sees kernels."""
    import transformers

    try:
        from transformers import Qwen3ForCausalLM, StaticCache  # noqa: F401
        from transformers.cache_utils import StaticLayer
    except ImportError as err:
        return f"transformers {transformers.__version__} lacks what the timing uses ({err}); needs transformers 5"
    if not hasattr(StaticLayer(max_cache_len=1), "cumulative_length"):
        return (f"transformers {transformers.__version__}: StaticCache layers keep no cumulative_length, which "
                "the timing rewinds between steps; needs transformers 5 (5.17 and 5.19 have it)")
    if device.type == "cuda" and timer == "busy":
        try:
            _busy_s(lambda: torch.ones(1 << 20, device=device).sum())
        except RuntimeError as err:
            return str(err)
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command line; ``dlfp sim gpu-calibrate`` passes its arguments through to ``main``."""
    ap = argparse.ArgumentParser(
        prog="dlfp sim gpu-calibrate",
        description="Time forward passes of Qwen3-shaped models on this GPU and write a cost profile whose "
                    "matmul, attention and memory efficiencies are fitted to them (source: measured).")
    ap.add_argument("--base",
                    help="profile giving the public specs of this device: a shipped name (a100, h200) or a YAML path "
                         "(default: the shipped profile this GPU's name names)")
    ap.add_argument("--allow-base-mismatch", action="store_true",
                    help="fit against a --base whose device names another GPU model than this one")
    ap.add_argument("--models", default="qwen3-0.6b,qwen3-8b",
                    help="comma-separated shipped model configs or config directories (Qwen3 only)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run of the plumbing")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    ap.add_argument("--timer", choices=("busy", "wall"), default="busy",
                    help="busy: GPU time covered by kernels (default); wall: CUDA events around the step")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per case; the median is kept")
    ap.add_argument("--quick", action="store_true", help="a few small cases (CPU dry run)")
    ap.add_argument("--max-seconds", type=float,
                    help="wall-clock budget for measuring (default: none): no case starts that would end past it, "
                         "and what was measured is fitted; imports, CUDA start-up and the fit come on top")
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
    models = _check_models(ap, args.models)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False (no GPU, or a CPU-only torch build); "
                 "use --device cpu for a dry run")
    device = torch.device(args.device)
    try:
        base_name = choose_base(args.base, _device_name(device) if device.type == "cuda" else None)
    except ValueError as err:
        ap.error(str(err))
    if args.base is None:
        _stderr(f"--base {base_name}: the shipped profile for {_device_name(device)}")
    try:
        base_raw, base = load_base(base_name)
    except ValueError as err:
        ap.error(f"--base: {err}")
    mismatch = base_mismatch(_device_name(device), base.device) if device.type == "cuda" else None
    if mismatch and not args.allow_base_mismatch:
        ap.error(mismatch)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.max_seconds is not None and not args.max_seconds > 0:
        ap.error(f"--max-seconds must be positive, got {args.max_seconds}")
    out = Path(args.out)
    if not out.parent.is_dir():
        ap.error(f"--out: directory {str(out.parent)!r} does not exist")
    if out.exists() and not args.force:
        ap.error(f"--out: {str(out)!r} exists; refusing to overwrite it (pass --force)")

    dtype = getattr(torch, args.dtype)
    cases = QUICK_CASES if args.quick else CASES
    timer = args.timer if device.type == "cuda" else "wall"
    problem = _preflight(device, timer)
    if problem:
        ap.error(problem)

    date = datetime.datetime.now(datetime.timezone.utc).isoformat("T", "seconds")
    start = _clock()
    budget = Budget(start + args.max_seconds if args.max_seconds else math.inf)
    samples = [s for name in models for s in measure(name, device, dtype, cases, args.repeats, timer, budget=budget)]
    elapsed = _clock() - start
    stopped = ""
    if budget.stopped_before:
        stopped = (f"measuring stopped by --max-seconds {args.max_seconds:g} before {budget.stopped_before}: "
                   f"{len(samples)} of {len(models) * len(cases)} cases measured")
        _stderr(f"warning: {stopped}")
    try:
        fit = fit_efficiencies(base, samples, dtype_bytes=dtype.itemsize)
    except ValueError as err:
        _stderr(f"dlfp.sim.gpucal: cannot fit: {err}" + (f" ({stopped}; raise it)" if stopped else ""))
        return 1
    command = shlex.join(["python", "-m", "dlfp.sim.gpucal", *(sys.argv[1:] if argv is None else argv)])
    run = Run(base=base_name, device=_device_name(device), dtype=args.dtype, timer=timer, repeats=args.repeats,
              versions=_versions(device), date=date, command=command, measuring_s=elapsed, stopped=stopped)
    profile = write_profile(out, fit, samples, base_raw, run, args.name or f"{base.name}-measured")

    for factor in FACTORS:
        value = getattr(profile, factor)
        if factor not in fit.measured:
            _stderr(f"warning: {factor} kept at the base's {value}: no sample depends on it enough to fit it")
        elif value in (1.0, MIN_EFFICIENCY):
            _stderr(f"warning: {factor} = {value} sits at its bound: does --base {base_name} describe this device?")
    print(f"{out}: " + ", ".join(f"{f} {getattr(profile, f):.4g} ({'measured' if f in fit.measured else 'base'})"
                                 for f in FACTORS)
          + f"; relative error p50/p90 in-sample {fit.in_sample_p50:.1%}/{fit.in_sample_p90:.1%}, "
            f"leave-one-out {fit.heldout_p50:.1%}/{fit.heldout_p90:.1%} over {len(samples)} samples "
            f"measured in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
