"""Seeded open-loop workloads: which requests arrive when, with which prompt, and how long.

A workload is fully determined by its :class:`WorkloadSpec` (seed included), so stock and
DLFP runs of a trial replay exactly the same requests and their latencies can be paired.

Every random quantity comes from its own sub-stream of ``SeedSequence(seed)`` (arrival gaps,
class choice, token ids, and one stream per class for prompt and for output lengths), each
drawn element by element in request order. Consequences, relied on by the sweeps and tested:

* changing ``n_requests`` keeps the first requests identical (arrivals, classes, lengths,
  tokens), so a longer run extends a shorter one;
* changing ``rate_rps`` scales every arrival instant by the same factor and changes nothing
  else, so a rate sweep uses common random numbers;
* changing class weights changes which class each request gets, but a request's length for a
  given class stays the same; token ids then shift (they are one stream cut by prompt length).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

LENGTH_KINDS = ("fixed", "uniform", "lognormal")
MAX_LEN = 1 << 20
"""Largest token length a distribution may produce; guards against typos that eat memory."""

MAX_REQUESTS = 1_000_000
"""Most requests one workload may hold: a typo must not exhaust memory after the pre-flight."""

MIN_TOKEN_ID = 10
"""Prompt token ids are drawn from [MIN_TOKEN_ID, vocab_size - 1): low ids are usually special
tokens (BOS, EOS, padding) and the last id is sometimes reserved, so both ends are avoided."""

_MIN_RATE = 1e-6
"""Lowest arrival rate (req/s; one request in ~12 days); also keeps every arrival instant finite."""
_MIN_VOCAB = 16  # leaves a few ids between MIN_TOKEN_ID and the reserved last id
_MAX_VOCAB = (1 << 31) - 1  # token ids are stored as int32
_GAPS, _CLASSES, _TOKENS, _FIRST_CLASS_STREAM = 0, 1, 2, 3

COLUMNS = ("request_id", "index", "cls", "arrival_s", "prompt_len", "output_len",
           "prompt_token_ids")
_SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("index", pa.int64()),
    ("cls", pa.string()),
    ("arrival_s", pa.float64()),
    ("prompt_len", pa.int64()),
    ("output_len", pa.int64()),
    ("prompt_token_ids", pa.list_(pa.int32())),
])


def _bad(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is invalid; allowed: {allowed}")


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    allowed = f"integer >= {lo}" if hi is None else f"integer in [{lo}, {hi}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _bad(name, value, allowed)
    if value < lo or (hi is not None and value > hi):
        raise _bad(name, value, allowed)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _check_positive(name: str, value: Any) -> None:
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise _bad(name, value, "finite number > 0")


def _check_keys(where: str, raw: Any, required: Iterable[str],
                optional: Iterable[str] = ()) -> None:
    """Refuse non-mappings, unknown keys and missing keys, naming them."""
    req, known = set(required), set(required) | set(optional)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - known, key=str)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    missing = sorted(req - set(raw))
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")


_BOUND_NAMES = {"fixed": ("fixed", "fixed"), "uniform": ("uniform[0]", "uniform[1]"),
                "lognormal": ("min", "max")}
"""How each kind spells its bounds in a spec, so errors use the name the user wrote."""


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution over the integers [lo, hi] (``fixed``: lo == hi).

    ``lognormal`` draws exp(N(log median, sigma)), rounds to the nearest integer and clips to
    [lo, hi], so the bounds hold for every draw, not just most of them.
    """

    kind: str
    lo: int
    hi: int
    median: float = 0.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise _bad("kind", self.kind, " or ".join(LENGTH_KINDS))
        lo_name, hi_name = _BOUND_NAMES[self.kind]
        _check_int(lo_name, self.lo, 1, MAX_LEN)
        _check_int(hi_name, self.hi, 1, MAX_LEN)
        if self.hi < self.lo:
            raise _bad(f"{lo_name}, {hi_name}", (self.lo, self.hi), f"{lo_name} <= {hi_name}")
        if self.kind == "fixed" and self.hi != self.lo:
            raise _bad("hi", self.hi, f"equal to lo={self.lo} for a fixed length")
        if self.kind == "lognormal":
            if not (_is_number(self.median) and self.lo <= self.median <= self.hi):
                raise _bad("median", self.median, f"number in [min, max] = [{self.lo}, {self.hi}]")
            if not (_is_number(self.sigma) and math.isfinite(self.sigma) and self.sigma >= 0):
                raise _bad("sigma", self.sigma, "finite number >= 0")

    @classmethod
    def parse(cls, value: Any, where: str = "length") -> LengthDist:
        """Parse ``128``, ``{"fixed": 128}``, ``{"uniform": [lo, hi]}`` or
        ``{"lognormal": {"median": m, "sigma": s, "min": a, "max": b}}``."""
        try:
            return cls._parse(value)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    @classmethod
    def _parse(cls, value: Any) -> LengthDist:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return cls("fixed", int(value), int(value))
        if not (isinstance(value, Mapping) and len(value) == 1
                and next(iter(value)) in LENGTH_KINDS):
            raise _bad("length", value, "an int, {'fixed': n}, {'uniform': [lo, hi]} or "
                       "{'lognormal': {'median', 'sigma', 'min', 'max'}}")
        ((kind, arg),) = value.items()
        if kind == "fixed":
            return cls("fixed", arg, arg)
        if kind == "uniform":
            if not (isinstance(arg, Sequence) and not isinstance(arg, (str, bytes)) and len(arg) == 2):
                raise _bad("uniform", arg, "[lo, hi], inclusive integers")
            return cls("uniform", arg[0], arg[1])
        _check_keys("lognormal", arg, ("median", "sigma", "min", "max"))
        return cls("lognormal", arg["min"], arg["max"], arg["median"], arg["sigma"])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths (int64), element by element so a prefix does not depend on n."""
        if self.kind == "fixed":
            return np.full(n, self.lo, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)
        raw = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(raw), self.lo, self.hi).astype(np.int64)


@dataclass(frozen=True, slots=True)
class RequestClass:
    """A kind of request (e.g. short interactive, long document) and how often it occurs."""

    name: str
    weight: float
    prompt_len: LengthDist
    output_len: LengthDist

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise _bad("name", self.name, "non-empty string")
        _check_positive("weight", self.weight)
        for name in ("prompt_len", "output_len"):
            if not isinstance(getattr(self, name), LengthDist):
                raise _bad(name, getattr(self, name), "a LengthDist")

    @classmethod
    def from_dict(cls, raw: Any, where: str = "class") -> RequestClass:
        """Parse ``{name, weight (default 1), prompt_len, output_len}``."""
        _check_keys(where, raw, ("name", "prompt_len", "output_len"), ("weight",))
        prompt = LengthDist.parse(raw["prompt_len"], f"{where}.prompt_len")
        output = LengthDist.parse(raw["output_len"], f"{where}.output_len")
        try:
            return cls(raw["name"], raw.get("weight", 1.0), prompt, output)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    """Everything that determines a workload; see the module docstring for what is stable."""

    n_requests: int
    rate_rps: float
    seed: int = 0
    vocab_size: int = 32000
    classes: tuple[RequestClass, ...]
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        _check_int("n_requests", self.n_requests, 1, MAX_REQUESTS)
        _check_positive("rate_rps", self.rate_rps)
        if self.rate_rps < _MIN_RATE:
            raise _bad("rate_rps", self.rate_rps, f"finite number >= {_MIN_RATE:g}")
        _check_int("seed", self.seed, 0)
        _check_int("vocab_size", self.vocab_size, _MIN_VOCAB, _MAX_VOCAB)
        if self.max_model_len is not None:
            _check_int("max_model_len", self.max_model_len, 2)
        if not (isinstance(self.classes, tuple) and self.classes
                and all(isinstance(c, RequestClass) for c in self.classes)):
            raise _bad("classes", self.classes, "non-empty tuple of RequestClass")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise _bad("classes", names, "unique class names")
        if not math.isfinite(sum(c.weight for c in self.classes)):  # the class shares would all be 0
            raise _bad("classes", [c.weight for c in self.classes], "weights with a finite sum")

    @classmethod
    def from_dict(cls, raw: Any) -> WorkloadSpec:
        """Parse a plain mapping as loaded from YAML; unknown keys are refused by name."""
        _check_keys("workload", raw, ("n_requests", "rate_rps", "classes"),
                    ("seed", "vocab_size", "max_model_len"))
        classes = raw["classes"]
        if not isinstance(classes, Sequence) or isinstance(classes, str) or not classes:
            raise _bad("classes", classes, "non-empty list of class mappings")
        parsed = tuple(RequestClass.from_dict(c, f"classes[{i}]") for i, c in enumerate(classes))
        return cls(**{**raw, "classes": parsed})


PAPER_MIX_CLASSES: tuple[dict[str, Any], ...] = (
    {"name": "short", "weight": 0.85, "prompt_len": {"uniform": [32, 256]},
     "output_len": {"uniform": [64, 160]}},
    {"name": "long", "weight": 0.15, "prompt_len": {"uniform": [1536, 2048]},
     "output_len": {"uniform": [8, 32]}},
)
"""The paper's situation: short interactive requests decoding while long prompts arrive.

The long prompts are what chunked prefill splits; their chunks share steps with the short
requests' decodes, which is where the chunk size trades prefill speed against ITL."""


def paper_mix(n_requests: int = 100, rate_rps: float = 4.0, seed: int = 0,
              vocab_size: int = 32000) -> WorkloadSpec:
    """A workload of :data:`PAPER_MIX_CLASSES`."""
    return WorkloadSpec.from_dict({
        "n_requests": n_requests, "rate_rps": rate_rps, "seed": seed, "vocab_size": vocab_size,
        "classes": [dict(c) for c in PAPER_MIX_CLASSES],
    })


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload; ``arrival_s`` is its offset from the trial start."""

    request_id: str
    index: int
    cls: str
    arrival_s: float
    prompt_token_ids: tuple[int, ...]
    output_len: int

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


def _stream(seed: int, key: int) -> np.random.Generator:
    """Independent sub-stream ``key`` of ``seed`` (equal to ``SeedSequence(seed).spawn``'s)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(key,)))


def _draw_classes(spec: WorkloadSpec) -> np.ndarray:
    weights = np.array([c.weight for c in spec.classes], dtype=np.float64)
    cdf = np.cumsum(weights / weights.sum())
    u = _stream(spec.seed, _CLASSES).random(spec.n_requests)
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _draw_lengths(spec: WorkloadSpec, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each class draws a length for every request, so a request's length does not depend on
    the classes of the requests before it."""
    n = spec.n_requests
    prompt, output = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    for j, c in enumerate(spec.classes):
        mine = which == j
        key = _FIRST_CLASS_STREAM + 2 * j
        prompt[mine] = c.prompt_len.sample(_stream(spec.seed, key), n)[mine]
        output[mine] = c.output_len.sample(_stream(spec.seed, key + 1), n)[mine]
    return prompt, output


def _check_model_len(spec: WorkloadSpec, which: np.ndarray, prompt: np.ndarray,
                     output: np.ndarray) -> None:
    if spec.max_model_len is None:
        return
    over = np.flatnonzero(prompt + output > spec.max_model_len)
    if over.size == 0:
        return
    i = int(over[0])
    names = sorted({spec.classes[j].name for j in which[over]})
    raise ValueError(
        f"max_model_len={spec.max_model_len} is exceeded by {over.size} request(s) of class(es) "
        f"{names}; e.g. {_request_id(i)} of class {spec.classes[which[i]].name!r} has "
        f"prompt_len {prompt[i]} + output_len {output[i]} = {prompt[i] + output[i]}; allowed: "
        f"prompt_len + output_len <= max_model_len"
    )


def _request_id(index: int) -> str:
    return f"r{index:04d}"


def generate(spec: WorkloadSpec) -> list[Request]:
    """Draw the workload: Poisson arrivals (first one after the first gap), a class per request
    by weight, lengths from that class, and exactly ``prompt_len`` uniform token ids."""
    arrivals = np.cumsum(_stream(spec.seed, _GAPS).exponential(1.0 / spec.rate_rps,
                                                               spec.n_requests))
    which = _draw_classes(spec)
    prompt, output = _draw_lengths(spec, which)
    _check_model_len(spec, which, prompt, output)
    ids = _stream(spec.seed, _TOKENS).integers(MIN_TOKEN_ID, spec.vocab_size - 1,
                                                size=int(prompt.sum()), dtype=np.int64)
    prompts = np.split(ids, np.cumsum(prompt)[:-1])
    return [
        Request(_request_id(i), i, spec.classes[which[i]].name, float(arrivals[i]),
                tuple(prompts[i].tolist()), int(output[i]))
        for i in range(spec.n_requests)
    ]


def to_frame(requests: Sequence[Request]) -> pd.DataFrame:
    """One row per request; ``prompt_token_ids`` holds int32 arrays (Parquet list<int32>)."""
    return pd.DataFrame({
        "request_id": [r.request_id for r in requests],
        "index": np.array([r.index for r in requests], dtype=np.int64),
        "cls": [r.cls for r in requests],
        "arrival_s": np.array([r.arrival_s for r in requests], dtype=np.float64),
        "prompt_len": np.array([r.prompt_len for r in requests], dtype=np.int64),
        "output_len": np.array([r.output_len for r in requests], dtype=np.int64),
        "prompt_token_ids": [np.asarray(r.prompt_token_ids, dtype=np.int32) for r in requests],
    }, columns=list(COLUMNS))


def from_frame(df: pd.DataFrame) -> list[Request]:
    """Inverse of :func:`to_frame`; refuses frames whose prompt_len disagrees with the ids."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"workload frame: missing column(s) {missing}; expected {list(COLUMNS)}")
    requests = []
    for rid, index, cls, arrival, plen, olen, ids in zip(*(df[c] for c in COLUMNS), strict=True):
        tokens = tuple(np.asarray(ids, dtype=np.int64).tolist())
        if len(tokens) != plen:
            raise ValueError(f"workload frame: request {rid} has prompt_len={plen} but "
                             f"{len(tokens)} prompt_token_ids; they must be equal")
        requests.append(Request(str(rid), int(index), str(cls), float(arrival), tokens, int(olen)))
    return requests


def save(requests: Sequence[Request], path: str | os.PathLike[str]) -> None:
    """Write Parquet (zstd) atomically: readers see the old file or the complete new one."""
    path = Path(path)
    table = pa.Table.from_pandas(to_frame(requests), schema=_SCHEMA, preserve_index=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: str | os.PathLike[str]) -> list[Request]:
    """Read a workload written by :func:`save`."""
    return from_frame(pd.read_parquet(path))
