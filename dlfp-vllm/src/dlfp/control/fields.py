"""Config fields declared once: a dataclass field whose metadata carries its unit, its allowed values and
its help, so that the validation, the error message and the reference table are generated from the one
declaration and cannot drift apart.

The kinds a configuration needs: a switch, one word of a list, one number of a list, a bounded number
(integral or not, each bound a number or another field's name, open or closed), a name (any non-empty
text, such as a shipped name or a path), an optional path, a list of text lines, a mapping whose entries
another declaration checks, a text of a given form, and a nested value of a small language its own parser
checks. A switch, a name, a number or a mapping may also take null (``nullable``: "unset, the default
decides").
Rules between fields that are not bounds (two settings that exclude each other) stay with the class
that holds them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, field, fields, is_dataclass, replace
from numbers import Integral, Real
from typing import Any, Literal

META = "config"
"""The key of a field's metadata that holds its :class:`Rule`."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one field accepts, in what unit, and why it exists."""

    unit: str
    doc: str
    kind: Literal["switch", "word", "choice", "int", "float", "name", "pattern", "path", "texts", "mapping", "nested"]
    words: Sequence[str] | Callable[[], Sequence[str]] = ()
    """A ``word`` field's accepted values, or a function read at each check (a table that may grow)."""
    numbers: Sequence[int] = ()
    """A ``choice`` field's accepted numbers."""
    lo: float | str | None = None
    """A number field's lower bound: a number, or the name of an earlier field whose value bounds it."""
    hi: float | str | None = None
    lo_open: bool = False
    hi_open: bool = False
    nullable: bool = False
    """Does null (None) pass as well?"""
    says: str = ""
    """A ``nested`` field's allowed values in words (its own parser checks them)."""
    shown: str = ""
    """A ``nested`` field's default as the table shows it, where its JSON would say too much."""

    def choices(self) -> Sequence[str]:
        return self.words() if callable(self.words) else self.words

    @property
    def allowed(self) -> str:
        """The accepted values as the reference table and the error message say them."""
        return f"null or {self._allowed}" if self.nullable else self._allowed

    def allowed_in(self, holder: object) -> str:
        """:attr:`allowed` with each bound that names a field followed by that field's value in ``holder``,
        as an error message says it: "[1, max_num_batched_tokens = 4096]"."""
        if self.kind not in ("int", "float") or not any(isinstance(b, str) for b in (self.lo, self.hi)):
            return self.allowed

        def text(bound: float | str | None) -> str:
            return f"{bound} = {getattr(holder, bound)!r}" if isinstance(bound, str) else _bound_text(bound)

        lo, hi = ("(" if self.lo_open else "["), (")" if self.hi_open else "]")
        return ("null or " if self.nullable else "") + f"{lo}{text(self.lo)}, {text(self.hi)}{hi}"

    @property
    def _allowed(self) -> str:
        if self.kind == "mapping":
            return "a mapping"
        if self.kind in ("nested", "pattern"):
            return self.says
        if self.kind == "texts":
            return "a list of texts"
        if self.kind == "switch":
            return "true or false"
        if self.kind == "word":
            return " or ".join(self.choices())
        if self.kind == "choice":
            *rest, last = map(str, self.numbers)
            return f"{', '.join(rest)} or {last}" if rest else last
        if self.kind == "name":
            return "a non-empty text"
        if self.kind == "path":
            return "null or a file path"
        return (f"{'(' if self.lo_open else '['}{_bound_text(self.lo)}, {_bound_text(self.hi)}"
                f"{')' if self.hi_open else ']'}")

    def accepts(self, value: Any, holder: object) -> bool:
        """Does ``value`` fit, with bounds that name a field read from ``holder``?"""
        if value is None and self.nullable:
            return True
        if self.kind == "nested":  # a small language of its own, which its parser checks with its own messages
            return True
        if self.kind == "mapping":
            return isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
        if self.kind == "texts":
            return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if self.kind == "switch":
            return isinstance(value, bool)
        if self.kind == "word":
            return isinstance(value, str) and value in self.choices()
        if self.kind == "choice":
            return isinstance(value, int) and not isinstance(value, bool) and value in self.numbers
        if self.kind == "name":
            return isinstance(value, str) and bool(value)
        if self.kind == "pattern":
            return isinstance(value, str) and re.fullmatch(self.choices()[0], value) is not None
        if self.kind == "path":
            return value is None or (isinstance(value, str) and bool(value))
        if not isinstance(value, Real) or isinstance(value, bool):  # Real: numpy's numbers too (a trace's fit)
            return False
        if self.kind == "int" and not (isinstance(value, Integral) or float(value).is_integer()):
            return False
        x: float = value if isinstance(value, (int, float)) else float(value)  # an int stays exact (10**400)
        lo, hi = _bound(self.lo, holder), _bound(self.hi, holder)  # NaN and infinities fail here
        return (lo < x if self.lo_open else lo <= x) and (x < hi if self.hi_open else x <= hi)


def _bound(bound: float | str | None, holder: object) -> float:
    if bound is None:
        raise TypeError("a number field needs both bounds")
    return float(getattr(holder, bound)) if isinstance(bound, str) else float(bound)


def _bound_text(bound: float | str | None) -> str:
    if isinstance(bound, str) or bound is None:
        return str(bound)
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


def switch(default: bool | None, doc: str, *, nullable: bool = False) -> Any:
    """A true-or-false field (``nullable``: or null)."""
    return field(default=default, metadata={META: Rule("-", doc, "switch", nullable=nullable)})


def word(default: str, words: Sequence[str] | Callable[[], Sequence[str]], doc: str) -> Any:
    """A field that takes one of ``words``."""
    return field(default=default, metadata={META: Rule("-", doc, "word", words=words)})


def choice(default: int, numbers: Sequence[int], unit: str, doc: str) -> Any:
    """A field that takes one of a few integers (bytes per value: 1, 2 or 4)."""
    return field(default=default, metadata={META: Rule(unit, doc, "choice", numbers=tuple(numbers))})


def name(default: str | None, doc: str, *, nullable: bool = False, shown: str = "") -> Any:
    """A non-empty text field: a shipped name or a file path, resolved by whoever reads it (``nullable``: or
    null; ``shown``: the default as the table says it, "required" where the default only fills a place)."""
    return field(default=default, metadata={META: Rule("-", doc, "name", nullable=nullable, shown=shown)})


def mapping(doc: str, *, nullable: bool = False) -> Any:
    """A mapping with text keys, empty by default (null where ``nullable``); what its entries may be is
    another declaration's to check."""
    rule = Rule("-", doc, "mapping", nullable=nullable)
    return field(default=None, metadata={META: rule}) if nullable else field(default_factory=dict,
                                                                             metadata={META: rule})


def number(default: float | None, unit: str, lo: float | str, hi: float | str, doc: str, *,
           lo_open: bool = False, hi_open: bool = False, nullable: bool = False, integer: bool | None = None) -> Any:
    """A bounded number, integral when ``default`` is an int or ``integer`` says so (a float such as 64.0
    passes as one); ``nullable``: or null (then ``integer`` says the kind where the default is null)."""
    whole = isinstance(default, int) if integer is None else integer
    kind: Literal["int", "float"] = "int" if whole else "float"
    return field(default=default, metadata={META: Rule(unit, doc, kind, lo=lo, hi=hi, lo_open=lo_open,
                                                       hi_open=hi_open, nullable=nullable)})


def pattern(default: str, regex: str, says: str, doc: str) -> Any:
    """A text that matches ``regex`` in full (a name that becomes a folder), ``says`` naming the form."""
    return field(default=default, metadata={META: Rule("-", doc, "pattern", words=(regex,), says=says)})


def nested(says: str, doc: str, default: Any = (), shown: str = "") -> Any:
    """A value of a small language of its own (a workload's request classes, its arrival process), which the
    holder's parser checks: declared here for its meaning and the reference table, ``says`` naming its form
    (``shown``: its default in words, where its JSON would say too much)."""
    return field(default=default, metadata={META: Rule("-", doc, "nested", says=says, shown=shown)})


def texts(doc: str, default: Sequence[str] = ()) -> Any:
    """A list of texts, empty by default (kept as a tuple: :func:`settle`)."""
    return field(default=tuple(default), metadata={META: Rule("-", doc, "texts")})


def path(doc: str) -> Any:
    """An optional file path (``None``: none)."""
    return field(default=None, metadata={META: Rule("path", doc, "path")})


def same_as(cls: type, name: str, default: Any, doc: str) -> Any:
    """A field that takes what field ``name`` of ``cls`` takes (its kind, unit and bounds, declared there once), with
    its own default and meaning; bounds that name another field of ``cls`` are refused (they would not be here)."""
    taken = rule(cls, name)
    if isinstance(taken.lo, str) or isinstance(taken.hi, str):
        raise TypeError(f"{cls.__name__}.{name}'s bounds name its other fields: declare the field in full")
    return field(default=default, metadata={META: replace(taken, doc=doc)})


def declared(cls: type) -> Iterator[tuple[Field[Any], Rule]]:
    """Each field of a dataclass with its rule, in declaration order (a field without one is refused)."""
    for f in fields(cls):
        rule = f.metadata.get(META)
        if not isinstance(rule, Rule):
            raise TypeError(f"{cls.__name__}.{f.name} declares no rule (dlfp.control.fields)")
        yield f, rule


def default(f: Field[Any]) -> Any:
    """A field's default, made by its factory where it has one (a mapping's ``{}``)."""
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default


def _plain(value: Any) -> Any:
    """A nested default as a config writes it: a dataclass as its mapping."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"a default of type {type(value).__name__} has no JSON form")


def markdown_table(cls: type, first: str) -> str:
    """Every declared field of ``cls`` as a Markdown table (``first`` heads the name column; defaults as JSON, as
    a config writes them): a page that pastes it is compared with it by a test, so it types no row."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = [f"| {first} | default | unit | allowed | meaning |", "| --- | --- | --- | --- | --- |"]
    def shown(f: Field[Any], rule: Rule) -> str:
        return cell(rule.shown) if rule.shown else f"`{json.dumps(default(f), default=_plain)}`"

    rows += [f"| `{f.name}` | {shown(f, rule)} | {cell(rule.unit)} | {cell(rule.allowed)} | {cell(rule.doc)} |"
             for f, rule in declared(cls)]
    return "\n".join(rows) + "\n"


def rule(cls: type, name: str) -> Rule:
    """The rule field ``name`` of ``cls`` declares."""
    return next(r for f, r in declared(cls) if f.name == name)


def first_invalid(holder: object) -> tuple[str, Any, str] | None:
    """The first field of a dataclass instance whose value its rule refuses, as (name, value, allowed), the
    allowed values with the values of the fields its bounds name."""
    for f, rule in declared(type(holder)):
        value = getattr(holder, f.name)
        if not rule.accepts(value, holder):
            return f.name, value, rule.allowed_in(holder)
    return None


def refuse_invalid(holder: object, refuse: Callable[[str, Any, str], Exception]) -> None:
    """A declared class's whole check, its ``__post_init__``'s one call: raise ``refuse(name, value, allowed)``
    for the first field its rule refuses (each class words its own message), else :func:`settle` the values."""
    bad = first_invalid(holder)
    if bad is not None:
        raise refuse(*bad)
    settle(holder)


def settle(holder: object) -> None:
    """After the check, give each value the type the code after it counts on, in place (frozen dataclasses too):
    an integral float of an integer field the int it means (a config may write 64.0), a list of texts a tuple
    (the holder stays hashable)."""
    for f, rule in declared(type(holder)):
        value = getattr(holder, f.name)
        if rule.kind == "int" and isinstance(value, Real) and not isinstance(value, (int, bool)):
            object.__setattr__(holder, f.name, int(float(value)))  # 64.0, or a numpy integer
        elif rule.kind == "texts" and isinstance(value, list):
            object.__setattr__(holder, f.name, tuple(value))
