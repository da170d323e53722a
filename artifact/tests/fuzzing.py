"""Shared machinery of the fuzz tests: wrong values a user can type, and one-edit mutations of a
valid nested document (config, manifest, claims file), with the check that a refusal names what
was edited.

A mutation is ``(op, path, value)``: ``replace`` the node at ``path`` (a tuple of mapping keys and
list indices) with ``value``, ``delete`` it, or ``add`` the key ``value`` (an unknown one) to the
mapping at ``path``. Hypothesis shrinks a failure to the smallest such edit, which reads as the
input that broke the validation.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st

_SCALARS = (
    st.none() | st.booleans()
    | st.integers(-3, 5000) | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 2)
    | st.sampled_from(["", "x", "stock", "dlfp", "a100", "qwen3-tiny", "uniform", "fixed", "1e3", "nan", "-1"])
    | st.text(max_size=10)
)
JUNK = st.recursive(
    _SCALARS,
    lambda inner: (st.lists(inner, max_size=3)
                   | st.dictionaries(st.text(max_size=6) | st.integers(-2, 2) | st.none(), inner, max_size=3)),
    max_leaves=6,
)
"""What a user can put where a value belongs: every YAML scalar, odd numbers, lists and mappings
(with non-string keys, which YAML also produces)."""

UNKNOWN_KEYS = st.sampled_from(["zz_typo", "trails", "rate", 1, None, True]) | st.text(min_size=1, max_size=8)


def paths(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every node of a nested mapping/list document, as a path (root first)."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from paths(value, (*prefix, i))


def _node(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutations(doc: Any, values: st.SearchStrategy = JUNK, root: bool = False) -> st.SearchStrategy:
    """One edit of ``doc``: replace a node by ``values``, delete one, or add an unknown key to a mapping."""
    every = [p for p in paths(doc) if p or root]
    containers = [p for p in paths(doc) if isinstance(_node(doc, p), dict)]
    return st.one_of(
        st.tuples(st.just("replace"), st.sampled_from(every), values),
        st.tuples(st.just("delete"), st.sampled_from([p for p in every if p]), st.none()),
        st.tuples(st.just("add"), st.sampled_from(containers), UNKNOWN_KEYS),
    )


def apply(doc: Any, mutation: tuple) -> Any:
    """A deep copy of ``doc`` with ``mutation`` applied."""
    op, path, value = mutation
    out = copy.deepcopy(doc)
    if op == "replace" and not path:
        return copy.deepcopy(value)
    parent = _node(out, path[:-1]) if op != "add" else _node(out, path)
    if op == "replace":
        parent[path[-1]] = copy.deepcopy(value)
    elif op == "delete":
        del parent[path[-1]]
    else:
        parent.setdefault(value, "zz")
    return out


def apply_all(doc: Any, edits: list[tuple]) -> Any:
    """A deep copy of ``doc`` with each of ``edits`` applied in order: an editor's several changes
    that only together tell a consistent (false) story."""
    for mutation in edits:
        doc = apply(doc, mutation)
    return doc


def names(mutation: tuple, depth: int = 2) -> list[str]:
    """What a refusal of ``mutation`` may name: the added key, or the innermost ``depth`` mapping
    keys on the edited path (an error in ``classes[0].prompt_len.uniform[1]`` may say ``uniform``
    or ``prompt_len``)."""
    op, path, value = mutation
    if op == "add":
        return [str(value), repr(value)[1:-1]]  # repr: a control character shows escaped
    keys = [str(k) for k in path if not isinstance(k, int) or isinstance(k, bool)]
    return keys[-depth:]


def assert_names(exc: BaseException, mutation: tuple, extra: tuple[str, ...] = (), depth: int = 2) -> None:
    """The refusal is a ``ValueError`` on one line that names the edited field."""
    msg = str(exc)
    assert isinstance(exc, ValueError), f"{type(exc).__name__} instead of a ValueError: {msg}"
    assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
    wanted = [*names(mutation, depth), *extra]
    if wanted:
        assert any(w in msg for w in wanted), f"message does not name any of {wanted}: {msg}"


def check_refusal_or(valid: Callable[[Any], None], call: Callable[[], Any], mutation: tuple,
                     extra: tuple[str, ...] = (), depth: int = 2) -> str:
    """Run ``call``: a result must pass ``valid``; an exception must be a clear refusal. Which one
    happened ("accepted" / "refused") is returned for hypothesis' statistics."""
    try:
        result = call()
    except ValueError as exc:
        assert_names(exc, mutation, extra, depth)
        return "refused"
    valid(result)
    return "accepted"


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
