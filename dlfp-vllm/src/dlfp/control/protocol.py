"""One shape for every controller that sizes a mixed step: one context in, one decision out, one
completion hook. Pure logic, no vLLM.

The scheduler glue (:mod:`dlfp.vllm.scheduler`) is mechanism: each ``schedule()`` call it builds one
:class:`StepContext` from vLLM's queues, asks the controller for a :class:`Decision`, applies its cap
(vLLM's own budget and per-request threshold, lowered for one call) and logs the step; each completed
step goes back through :meth:`Controller.completed`. What a controller reads beyond the cheap O(1)
facts is declared in :attr:`Controller.needs`, so a controller that does not read the running batch's
context or the waiting prompts costs no pass over vLLM's queues:

* :data:`BATCH`: the context tokens of the running decodes and of the request the chunk goes to;
* :data:`QUEUE`: the prompts still to prefill, each with its remaining tokens and TTFT deadline.

A controller records its own per-step fields through :meth:`Decision.log_fields` (a map the step log
keeps under ``controller`` and the step table spreads into columns), so the glue names no controller.
Controllers are found by name in :mod:`dlfp.control.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured interval and whether it came from a guarded cycle.

    A cycle is guarded when the step the interval measures really mixed prefill and
    decode and the step being planned mixes them too (no mode switch inside the
    measurement). Unguarded observations are recorded but never move the chunk.
    """

    interval_s: float
    guarded: bool
    saturated: bool = True
    """Did the measured step's prefill fill its cap? Only then may anti-windup grow ``C``."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the scheduler should do this step.

    ``cap`` is the prefill-token cap for a mixed step, ``None`` for an unrestricted one, 0 to defer
    the step's prefill (decodes only, as a cadence does). ``updated`` says whether an observation
    moved the controller's state before this decision.
    """

    cap: int | None
    updated: bool

    def log_fields(self) -> Mapping[str, Any] | None:
        """The controller's own fields of this decision for the step log (None: none); a controller's
        decision subclass names them."""
        return None


BATCH = "batch"
"""A controller that reads :attr:`StepContext.decode_context` and :attr:`StepContext.prefill_context`."""
QUEUE = "queue"
"""A controller that reads :attr:`StepContext.prompts`."""


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt that still needs prefill: its tokens left and when its first token is due."""

    remaining: int
    """Prompt tokens not yet prefilled."""
    deadline_s: float
    """When its first token is due on the scheduler's clock: first seen plus the TTFT SLO."""


@dataclass(frozen=True, slots=True)
class StepContext:
    """What the scheduler knows when it plans one step (times on its clock, seconds)."""

    decodes_running: bool
    """At least ``pressure_decodes`` requests are decoding."""
    prefill_waiting: bool
    """Some prompt waits for prefill (new, resumed or mid-prefill)."""
    obs: Observation | None = None
    """The feedback signal's newest interval (:mod:`dlfp.control.signals`), None when there is none."""
    target_s: float | None = None
    """The law's target interval T* (None: the parameters')."""
    decode_reqs: int = 0
    """Decoding requests that will run this step."""
    now: float = 0.0
    """When this ``schedule()`` call began."""
    decode_context: int = 0
    """Context tokens of the running decodes in all (:data:`BATCH` only)."""
    prefill_context: int = 0
    """Tokens already prefilled of the request the chunk goes to next (:data:`BATCH` only)."""
    prompts: Sequence[Prompt] = ()
    """The prompts still to prefill, in vLLM's order: mid-prefill first, then waiting (:data:`QUEUE` only)."""
    budget_tokens: int = 0
    """The engine's own token budget per step (``max_num_batched_tokens``): no decision exceeds it (0: not
    known to the caller; the scheduler glue always sets it)."""

    @property
    def mixed(self) -> bool:
        """Would prefill share this step with running decodes? Only such a step is ever capped."""
        return self.decodes_running and self.prefill_waiting


@dataclass(frozen=True, slots=True)
class CompletedStep:
    """One step that completed: the work it carried, the cap it ran under and its times."""

    decode_reqs: int
    decode_context: int
    prefill_tokens: int
    prefill_context: int
    schedule_t: float
    done_t: float
    """Its completion time: the executor's stamp where usable, else the collect time (the ``completion`` signal's)."""
    cap: int | None
    fields: Mapping[str, Any] | None = None
    """The controller's own fields of the decision that planned it (:meth:`Decision.log_fields`)."""


class Controller(Protocol):
    """What sizes a mixed step (module docstring)."""

    needs: ClassVar[frozenset[str]]
    """What the glue must gather beyond the cheap facts: :data:`BATCH`, :data:`QUEUE`."""
    chunk: float
    """The chunk the controller holds now (the step log's ``chunk``)."""

    def decide(self, ctx: StepContext) -> Decision:
        """The cap of this step's prefill tokens (None: unrestricted; 0: defer prefill this step)."""
        ...

    def completed(self, step: CompletedStep) -> None:
        """Absorb one completed step, in completion order."""
        ...

