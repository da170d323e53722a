"""Engine arguments for a real vLLM engine: a weightless Qwen3 shape by default, or a checkpoint.

One function builds the ``AsyncEngineArgs`` every arm uses, so a stock arm and a DLFP
arm differ in the DLFP ``enabled`` flag alone: both run :class:`dlfp.vllm.DLFPScheduler`
(the stock arm with control off) and both write step records.

GPU settings (:class:`EngineSpec`): ``gpu_memory_utilization``, ``enforce_eager`` (CUDA graphs
off), ``async_scheduling`` (``None``: vLLM's platform default, on for GPUs) and real weights
(``load_format`` ``auto``/``safetensors`` with a checkpoint directory or hub id found in an
offline cache, optionally a ``tokenizer``). ``HF_HUB_OFFLINE=1`` is always set, so nothing is
downloaded while a trial runs; prompts stay token ids either way.

Every real engine runs vLLM's own executor with completion stamps
(:mod:`dlfp.vllm.executors`): the uniprocess one where vLLM would pick ``uni``, the
multiprocess one where it would pick ``mp`` (tensor parallelism, and the CPU build whenever the
engine core has its own process: its platform swaps ``uni`` for ``mp`` itself).

Before a GPU engine loads, :func:`start_engine` checks each of its GPUs' free memory (NVML) against
``gpu_memory_utilization`` x total, the check vLLM makes only after minutes of start-up, and
refuses a GPU another process already uses too much of (:func:`memory_shortfall`). Engines run
with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless the user set another order, so CUDA numbers GPUs as
NVML does and telemetry samples the engine's own (:mod:`dlfp.harness.devices`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlfp.control.fields import mapping, name, number, path, refuse_invalid, switch, word
from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.params import parse_params
from dlfp.harness import lifeline
from dlfp.harness.devices import PCI_BUS_ID
from dlfp.paths import model_path, weight_files

SCHEDULER_CLS = "dlfp.vllm.DLFPScheduler"
TIMED_UNI = "dlfp.vllm.executors.TimedUniProcExecutor"
TIMED_MP = "dlfp.vllm.executors.TimedMultiprocExecutor"
MODELED = "dlfp.sim.executor.ModeledExecutor"
LOAD_FORMATS = ("dummy", "auto", "safetensors")
USER_OMP_BIND = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
"""A binding the user set before dlfp was imported wins; ours is recomputed per engine (TP size)."""


DTYPES = ("float32", "bfloat16", "float16", "auto")
"""Model precisions vLLM 0.32 takes for these models (``auto``: the checkpoint's own)."""
TOKENS = 2**20
"""The largest token count a setting takes: a finite bound far above any model's context."""


@dataclass(frozen=True)
class EngineSpec:
    """What engine to start: model, precision, budgets; ``dlfp`` is the plug-in config.

    Each setting declares its unit, allowed values and meaning once (:mod:`dlfp.control.fields`): the
    check, its message (naming ``engine.<setting>``) and the reference page's table (:func:`markdown_table`)
    come from the declarations. What the declarations cannot say (a model that must exist, weights for a
    real load format, settings the modeled executor does not take) is checked after them."""

    model: str = name("qwen3-tiny", "A shipped model name (dlfp/model_configs/), a checkpoint directory or a "
                                    "hub id in the cache.")
    dtype: str = word("float32", DTYPES, "The model's precision (auto: the checkpoint's own).")
    max_model_len: int = number(4096, "tokens", 1, TOKENS, "Longest prompt plus output a request may have.")
    max_num_batched_tokens: int = number(4096, "tokens", 1, TOKENS, "vLLM's token budget per step (stock "
                                                                    "chunked prefill fills it).")
    max_num_seqs: int = number(64, "requests", 1, "max_num_batched_tokens", "Most requests running at once.")
    long_prefill_token_threshold: int = number(0, "tokens", 0, TOKENS, "vLLM's per-request prefill cap per "
                                                                       "step (0: none); a baseline arm sets it.")
    tensor_parallel_size: int = number(1, "GPUs", 1, 64, "GPUs per engine (TP); on the CPU build, one group of "
                                                         "cores per rank.")
    kv_cache_gib: int = number(1, "GiB", 1, 4096, "KV-cache space of the CPU build; GPUs size theirs from "
                                                  "gpu_memory_utilization.")
    seed: int = number(0, "-", 0, 2**32 - 1, "vLLM's seed.")
    gpu_memory_utilization: float = number(0.92, "share", 0, 1, "Share of each GPU's memory vLLM may take for "
                                           "weights, activations and KV cache (vLLM's default); the GPU configs use "
                                           "0.9 (Qwen3-32B's BF16 weights alone are ~61 GiB of an 80 GB A100).",
                                           lo_open=True)
    enforce_eager: bool = switch(False, "true: no CUDA graphs (vLLM captures them by default).")
    async_scheduling: bool | None = switch(None, "null: vLLM's platform default, on for GPUs (the plug-in then "
                                                 "runs as DLFPAsyncScheduler) and forced off by the CPU build (true "
                                                 "there is refused).", nullable=True)
    load_format: str = word("dummy", LOAD_FORMATS, "dummy: random weights in the model's shape; auto or "
                                                   "safetensors: the checkpoint's.")
    tokenizer: str | None = name(None, "null: no tokenizer, token ids in and out; a directory or hub id: loaded "
                                       "offline (vLLM then also detokenizes).", nullable=True)
    download_dir: str | None = path("Hugging Face cache holding model or tokenizer given as hub ids (null: "
                                    "HF's default cache).")
    dlfp: dict[str, Any] = mapping("Not a key of a config's engine mapping: the runner fills it per arm with the "
                                   "plug-in's parameters (the config's and the arm's dlfp, enabled, step_log).")
    sim: dict[str, Any] | None = mapping("Modeled-accelerator settings (the modeled executor's table); null "
                                         "runs the real model.", nullable=True)
    extra: dict[str, Any] = mapping("Further vLLM engine arguments by name, recorded in the manifest.")

    def __post_init__(self) -> None:
        """Refuse what vLLM would only refuse after minutes of start-up, naming the field."""
        refuse_invalid(self, _invalid)
        if not all(k.isidentifier() for k in self.extra):
            raise _invalid("extra", self.extra, "a mapping of vLLM engine argument names (identifiers) to values")
        if not _finite(self.extra):
            raise _invalid("extra", self.extra, "values without NaN or infinity (the manifest must read back "
                                                "the same run)")
        if self.sim is not None and (self.load_format != "dummy" or self.async_scheduling is not None):
            raise _invalid("load_format" if self.load_format != "dummy" else "async_scheduling",
                           self.load_format if self.load_format != "dummy" else self.async_scheduling,
                           "unset with engine.sim: the modeled executor loads no weights and schedules as "
                           "engine.sim.async_scheduling says")
        try:
            path = model_path(self.model, self.download_dir)
        except (ValueError, OSError) as exc:  # OSError: a name too long for a path
            raise _invalid("model", self.model, str(exc).split(": ", 1)[-1]) from None
        if self.load_format != "dummy" and not weight_files(path):
            raise _invalid("load_format", self.load_format,
                           f"'dummy' for {self.model!r}: {path} holds no weight files (*.safetensors, *.bin); "
                           "real weights need a checkpoint directory or a hub id in the cache")
        if self.tokenizer is not None:
            try:
                model_path(self.tokenizer, self.download_dir, need="tokenizer_config.json")
            except ValueError as exc:
                raise _invalid("tokenizer", self.tokenizer, str(exc).split(": ", 1)[-1]) from None

    @property
    def virtual(self) -> bool:
        """Does this engine run on the virtual clock (``sim.clock: virtual``, :mod:`dlfp.harness.virtual`)?"""
        if self.sim is None:
            return False
        from dlfp.sim.config import CONFIG_KEY, parse_sim_config

        return parse_sim_config({CONFIG_KEY: self.sim}).virtual


def _invalid(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"config field 'engine.{name}' = {value!r} is invalid: allowed {allowed}")


def _finite(value: Any) -> bool:
    """Does ``value`` hold only finite numbers? NaN breaks the manifest's round trip (NaN != NaN),
    and neither NaN nor infinity is JSON."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    return True


def markdown_table() -> str:
    """The settings as the trial-config reference's Markdown table (``book/reference/trials.md`` holds exactly
    this text between its markers; a test compares the two)."""
    return fields_table(EngineSpec, "key")


def omp_bind(cores: int, tensor_parallel_size: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for the CPU build: all cores, split into one group per TP rank."""
    if cores < tensor_parallel_size:
        raise _invalid("tensor_parallel_size", tensor_parallel_size,
                       f"at most {cores} on this {cores}-core machine with the CPU build (one core per rank)")
    per, extra = divmod(cores, tensor_parallel_size)
    groups, start = [], 0
    for rank in range(tensor_parallel_size):
        n = per + (rank < extra)
        groups.append(f"{start}-{start + n - 1}" if n > 1 else str(start))
        start += n
    return "|".join(groups)


def cpu_environment(kv_cache_gib: int, tensor_parallel_size: int = 1) -> dict[str, str]:
    """Environment the CPU build needs, set before vLLM is imported (see DESIGN.md), and what every
    engine gets on GPUs too; a variable the user set is left as it is.

    ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``: models and tokenizers come from local directories
    or caches, never from the network during a trial. ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: CUDA's own
    default numbers the fastest GPU first, NVML by PCI bus, so on a node of mixed GPUs ``cuda:0``
    would not be the GPU telemetry samples and the manifest names.
    """
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if USER_OMP_BIND is None and cpu_build():  # GPU workers ignore it: no core count to check there
        env["VLLM_CPU_OMP_THREADS_BIND"] = omp_bind(os.cpu_count() or 1, tensor_parallel_size)
    if "CUDA_DEVICE_ORDER" not in os.environ:
        env["CUDA_DEVICE_ORDER"] = PCI_BUS_ID
    if "VLLM_LOGGING_LEVEL" not in os.environ:
        # The engine's output goes to a log file beside the run folder (dlfp.harness.quiet), not the
        # terminal: WARNING keeps what vLLM decided against the config (it turns async scheduling
        # off where a feature needs it) without its INFO chatter.
        env["VLLM_LOGGING_LEVEL"] = "WARNING"
    return env


def cpu_build() -> bool:
    """Is the installed vLLM the CPU build (``vllm-cpu``, version ``...+cpu``)?"""
    from dlfp.vllm.version import vllm_version

    return "cpu" in vllm_version()


def executor_backend(spec: EngineSpec, cpu: bool) -> str:
    """The executor vLLM would choose for ``spec``, with completion stamps (module docstring)."""
    if spec.sim is not None:
        return MODELED  # modeled TP lives in the sim settings
    own_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1"
    return TIMED_MP if spec.tensor_parallel_size > 1 or (cpu and own_process) else TIMED_UNI


def engine_kwargs(spec: EngineSpec) -> dict[str, Any]:
    """Keyword arguments for ``AsyncEngineArgs``/``LLM``; validates the DLFP config first."""
    parse_params(spec.dlfp)  # refuse a bad config before an engine starts
    additional: dict[str, Any] = {"dlfp": dict(spec.dlfp)}
    cpu = cpu_build()
    if spec.sim is not None:
        from dlfp.sim.config import CONFIG_KEY, parse_sim_config

        parse_sim_config({CONFIG_KEY: spec.sim})
        additional[CONFIG_KEY] = dict(spec.sim)
    elif cpu and spec.async_scheduling:
        raise _invalid("async_scheduling", True, "null or false on vLLM's CPU build, whose platform forces async "
                       "scheduling off (engine.sim models an async GPU engine)")
    kwargs: dict[str, Any] = {
        "model": model_path(spec.model, spec.download_dir),
        "load_format": spec.load_format,
        "download_dir": spec.download_dir,
        "tokenizer": None if spec.tokenizer is None else model_path(spec.tokenizer, spec.download_dir,
                                                                     need="tokenizer_config.json"),
        "skip_tokenizer_init": spec.tokenizer is None,
        "dtype": spec.dtype,
        "max_model_len": spec.max_model_len,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "max_num_seqs": spec.max_num_seqs,
        "long_prefill_token_threshold": spec.long_prefill_token_threshold,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "enable_prefix_caching": False,
        "seed": spec.seed,
        "gpu_memory_utilization": spec.gpu_memory_utilization,
        "enforce_eager": spec.enforce_eager,
        "async_scheduling": spec.async_scheduling,
        "scheduler_cls": SCHEDULER_CLS,
        "additional_config": additional,
        "disable_log_stats": True,
        "distributed_executor_backend": executor_backend(spec, cpu),
    }
    kwargs.update(spec.extra)
    return kwargs


def memory_shortfall(utilization: float, memory: Sequence[tuple[str, float, float]]) -> str | None:
    """Why an engine asking for ``utilization`` of each GPU's memory cannot start, or None.

    ``memory``: ``(device, free GiB, total GiB)`` per GPU the engine will use
    (:func:`dlfp.harness.telemetry.gpu_memory`). vLLM refuses a GPU whose free memory at start-up is
    below ``gpu_memory_utilization`` x total, but only once weights and CUDA are loaded; this says
    it first, with the numbers and the fix. vLLM's CUDA context takes a few hundred MiB before its
    own check, so a GPU this passes narrowly may still be refused there.
    """
    short = [(d, free, total) for d, free, total in memory if total > 0 and free < utilization * total]
    if not short:
        return None
    most = math.floor(min(free / total for _, free, total in short) * 100) / 100
    gpus = "; ".join(f"{d}: {free:.1f} GiB free of {total:.1f} GiB, {utilization:g} x {total:.1f} = "
                     f"{utilization * total:.1f} GiB requested" for d, free, total in short)
    return (f"engine.gpu_memory_utilization = {utilization:g} asks for more GPU memory than is free ({gpus}): "
            "another process is using the GPU. Lower engine.gpu_memory_utilization in the config (or "
            f"overrides.engine.gpu_memory_utilization in the params file) to at most {most:.2f} "
            "(free / total), or free the GPU")


def start_engine(spec: EngineSpec) -> Any:
    """Start an ``AsyncLLM`` for ``spec``; call ``shutdown()`` on it when done.

    The engine core runs in its own process (as in ``vllm serve``), so the client's event
    loop and timestamps are not disturbed by scheduling and model execution. A GPU engine that
    would not fit in its GPUs' free memory is refused first (:func:`memory_shortfall`); the CPU
    build and a modeled accelerator take no GPU memory and are not checked.
    """
    kwargs = engine_kwargs(spec)
    os.environ.update(cpu_environment(spec.kv_cache_gib, spec.tensor_parallel_size))
    os.environ.update(lifeline.child_environment())  # the engine core ends with this process
    if spec.sim is None and not cpu_build():
        from dlfp.harness.telemetry import gpu_memory

        why = memory_shortfall(kwargs["gpu_memory_utilization"], gpu_memory(spec.tensor_parallel_size))
        if why is not None:
            raise ValueError(why)
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
