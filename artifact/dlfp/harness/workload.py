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
  given class stays the same; token ids then shift (they are one stream cut by prompt length);
* changing the arrival process (``arrival``: Poisson, or gamma gaps of a burstiness) changes the
  arrival instants only.

Workloads written before ``arrival`` existed are Poisson and draw exactly as they did: the same
calls on the same streams in the same order, so a committed run's workload regenerates to the
same bytes (tested against ``data/runs``). Lengths are :mod:`dlfp.harness.lengths`'s.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dlfp.control.fields import markdown_table as fields_table
from dlfp.control.fields import name as text_name
from dlfp.control.fields import nested, number, refuse_invalid, word
from dlfp.harness.lengths import LengthDist, bad, check_keys

MAX_REQUESTS = 1_000_000
"""Most requests one workload may hold: a typo must not exhaust memory after the pre-flight."""

MIN_TOKEN_ID = 10
"""Prompt token ids are drawn from [MIN_TOKEN_ID, vocab_size - 1): low ids are usually special
tokens (BOS, EOS, padding) and the last id is sometimes reserved, so both ends are avoided."""

ARRIVAL_KINDS = ("poisson", "gamma")
BURSTINESS_RANGE = (1e-3, 1e3)
"""Allowed gamma shapes. Below, most gaps underflow to 0 s and the run is a handful of
simultaneous bursts; above, the gaps are a clock to within 3 %: a typo either way, not a workload."""

_MIN_RATE = 1e-6
"""Lowest arrival rate (req/s; one request in ~12 days); also keeps every arrival instant finite."""
_MAX_RATE = 1e6
"""Highest arrival rate (req/s): a finite bound far above any engine's."""
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


@dataclass(frozen=True, slots=True)
class Arrival:
    """How the gaps between arrivals are drawn: ``poisson`` (exponential gaps, the default) or
    ``gamma`` with a ``burstiness`` shape, as ``vllm bench serve --burstiness`` defines it.

    vLLM's benchmark client (vllm/benchmarks/serve.py, ``get_request``) draws each gap from a
    gamma distribution of shape ``burstiness`` and scale 1 / (rate x burstiness): the mean gap is
    1 / rate whatever the shape, burstiness 1 is the exponential (a Poisson process), below 1 the
    gaps' coefficient of variation 1 / sqrt(burstiness) exceeds 1 (bursts and lulls), above 1 the
    arrivals approach a clock. numpy draws a gamma of shape 1 as an exponential, so
    ``{kind: gamma, burstiness: 1}`` gives the Poisson arrivals themselves.

    One difference from vLLM: its client then rescales all instants so the last one lands at
    n / rate. That would make every arrival depend on ``n_requests``, and a longer run would no
    longer extend a shorter one; here the instants are the gaps' cumulative sum, as for Poisson.
    """

    kind: str = word("poisson", ARRIVAL_KINDS, "poisson: exponential gaps; gamma: gaps of shape burstiness.")
    burstiness: float = number(1.0, "-", BURSTINESS_RANGE[0], BURSTINESS_RANGE[1], "The gamma's shape: 1 is "
                               "Poisson, below 1 burstier, above 1 closer to a clock; 1 for kind poisson.")

    def __post_init__(self) -> None:
        if self.kind == "poisson" and self.burstiness != 1.0:
            raise bad("burstiness", self.burstiness, "1 for kind poisson (use kind gamma for another shape)")
        refuse_invalid(self, bad)

    @classmethod
    def parse(cls, raw: Any, where: str = "arrival") -> Arrival:
        """Parse ``None`` (Poisson), ``{kind: poisson}`` or ``{kind: gamma, burstiness: b}``."""
        if raw is None:
            return cls()
        check_keys(where, raw, ("kind",), ("burstiness",))
        if raw["kind"] == "gamma" and "burstiness" not in raw:
            raise ValueError(f"{where}: missing key(s) ['burstiness'] for kind gamma")
        if raw["kind"] == "poisson" and "burstiness" in raw:
            raise ValueError(f"{where}: burstiness={raw['burstiness']!r} is invalid; allowed: unset for kind "
                             "poisson (use kind gamma; burstiness 1 draws the Poisson arrivals)")
        try:
            return cls(raw["kind"], raw.get("burstiness", 1.0))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def gaps(self, rng: np.random.Generator, n: int, rate_rps: float) -> np.ndarray:
        """``n`` gaps (s) of mean 1 / rate, element by element so a prefix does not depend on n."""
        if self.kind == "poisson":
            return rng.exponential(1.0 / rate_rps, n)
        return rng.gamma(self.burstiness, 1.0 / (rate_rps * self.burstiness), n)


LENGTHS = ("a number or {fixed: n}, {uniform: [lo, hi]} or {lognormal: {median, min, max and one of sigma, p90, "
           "mean}}")
"""The length language :meth:`dlfp.harness.lengths.LengthDist.parse` reads."""


@dataclass(frozen=True, slots=True)
class RequestClass:
    """A kind of request (e.g. short interactive, long document) and how often it occurs."""

    name: str = text_name("", "The class's name, unique in the workload (a trace's `cls` column).", shown="required")
    weight: float = number(1.0, "-", 0, math.inf, "Its share of the requests: its weight over the weights' sum.",
                           lo_open=True, hi_open=True)
    prompt_len: LengthDist = nested(LENGTHS, "The prompt's length in tokens (LengthDist).", None, shown="required")
    output_len: LengthDist = nested(LENGTHS, "The output's length in tokens (LengthDist).", None, shown="required")

    def __post_init__(self) -> None:
        refuse_invalid(self, bad)
        for name in ("prompt_len", "output_len"):
            if not isinstance(getattr(self, name), LengthDist):
                raise bad(name, getattr(self, name), "a LengthDist")

    @classmethod
    def from_dict(cls, raw: Any, where: str = "class") -> RequestClass:
        """Parse ``{name, weight (default 1), prompt_len, output_len}``."""
        check_keys(where, raw, ("name", "prompt_len", "output_len"), ("weight",))
        prompt = LengthDist.parse(raw["prompt_len"], f"{where}.prompt_len")
        output = LengthDist.parse(raw["output_len"], f"{where}.output_len")
        try:  # an unset weight is the declared default
            return cls(name=raw["name"], prompt_len=prompt, output_len=output,
                       **{k: raw[k] for k in ("weight",) if k in raw})
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    """Everything that determines a workload; see the module docstring for what is stable."""

    n_requests: int = number(100, "requests", 1, MAX_REQUESTS, "Requests of each trial's workload.")
    rate_rps: float = number(4.0, "req/s", _MIN_RATE, _MAX_RATE, "Mean arrival rate (scaled and capacity designs "
                             "set it from the pre-flight).")
    seed: int = number(0, "-", 0, 2**63 - 1, "The workload's seed (a trial config's come from its seeds).")
    vocab_size: int = number(32000, "tokens", _MIN_VOCAB, _MAX_VOCAB, "Prompt token ids are drawn below it.")
    classes: tuple[RequestClass, ...] = nested("a non-empty list of {name, weight, prompt_len, output_len}",
                                               "The request classes; each length a distribution (LengthDist).")
    max_model_len: int | None = number(None, "tokens", 2, 2**20, "Longest prompt plus output a request may "
                                       "have (null: no limit here; the engine's applies).", nullable=True,
                                       integer=True)
    arrival: Arrival = nested("null, {kind: poisson} or {kind: gamma, burstiness: b}",
                              "How the gaps between arrivals are drawn (Arrival); null: Poisson.", Arrival())

    def __post_init__(self) -> None:
        refuse_invalid(self, bad)
        if not (isinstance(self.classes, tuple) and self.classes
                and all(isinstance(c, RequestClass) for c in self.classes)):
            raise bad("classes", self.classes, "non-empty tuple of RequestClass")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise bad("classes", names, "unique class names")
        if not math.isfinite(sum(c.weight for c in self.classes)):  # the class shares would all be 0
            raise bad("classes", [c.weight for c in self.classes], "weights with a finite sum")
        if not isinstance(self.arrival, Arrival):
            raise bad("arrival", self.arrival, "an Arrival")

    @classmethod
    def from_dict(cls, raw: Any) -> WorkloadSpec:
        """Parse a plain mapping as loaded from YAML; unknown keys are refused by name. Without
        ``arrival`` (or with ``arrival: null``) arrivals are Poisson, as before the key existed."""
        check_keys("workload", raw, ("n_requests", "rate_rps", "classes"),
                   ("seed", "vocab_size", "max_model_len", "arrival"))
        classes = raw["classes"]
        if not isinstance(classes, Sequence) or isinstance(classes, str) or not classes:
            raise bad("classes", classes, "non-empty list of class mappings")
        parsed = tuple(RequestClass.from_dict(c, f"classes[{i}]") for i, c in enumerate(classes))
        return cls(**{**raw, "classes": parsed, "arrival": Arrival.parse(raw.get("arrival"))})


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


def _draw_lengths(spec: WorkloadSpec, which: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Each class draws a length for every request, so a request's length does not depend on
    the classes of the requests before it. Also: per class, how many of its requests clipping
    moved (see :func:`truncation`)."""
    n = spec.n_requests
    prompt, output = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    clipped: dict[str, Any] = {}
    for j, c in enumerate(spec.classes):
        mine = which == j
        key = _FIRST_CLASS_STREAM + 2 * j
        record: dict[str, Any] = {"requests": int(mine.sum())}
        for out, dist, stream in ((prompt, c.prompt_len, key), (output, c.output_len, key + 1)):
            lengths, raised, lowered = dist.draw(_stream(spec.seed, stream), n)
            out[mine] = lengths[mine]
            record["prompt_len" if stream == key else "output_len"] = {
                "raised_to_min": int(raised[mine].sum()), "lowered_to_max": int(lowered[mine].sum())}
        clipped[c.name] = record
    return prompt, output, clipped


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


def arrival_times(spec: WorkloadSpec) -> np.ndarray:
    """The requests' arrival instants (s): the cumulative sum of the spec's gaps, so the first
    request arrives after the first gap."""
    return np.cumsum(spec.arrival.gaps(_stream(spec.seed, _GAPS), spec.n_requests, spec.rate_rps))


def truncation(spec: WorkloadSpec) -> dict[str, Any]:
    """What clipping did to the workload :func:`generate` draws, per class: ``{name: {requests,
    prompt_len: {raised_to_min, lowered_to_max}, output_len: {...}}}`` (counts of that class's
    requests; plain ints, for a manifest). A heavy-tailed class clipped at a model length shows
    here how much of its tail the run did not see; uniform and fixed lengths never clip."""
    return _draw_lengths(spec, _draw_classes(spec))[2]


def generate(spec: WorkloadSpec) -> list[Request]:
    """Draw the workload: arrivals (:func:`arrival_times`), a class per request by weight,
    lengths from that class, and exactly ``prompt_len`` uniform token ids."""
    arrivals = arrival_times(spec)
    which = _draw_classes(spec)
    prompt, output, _ = _draw_lengths(spec, which)
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


def markdown_table() -> str:
    """The workload mapping's settings as the trial reference's Markdown table (``book/reference/trials.md``)."""
    return fields_table(WorkloadSpec, "key")


def classes_table() -> str:
    """A request class's keys (an entry of ``workload.classes``) as the trial reference's Markdown table."""
    return fields_table(RequestClass, "key")
