"""Regular expressions of a repository that would take exponential time on hostile text.

Python's ``re`` backtracks and has no time limit: ``(a+)+$`` searched in forty ``a``
and a ``!`` (a model's output, a served input) runs for minutes, holding the process. The
classic shape is an unbounded repetition whose body is made of unbounded repetitions and
optional items only (``(a+)+``, ``(\\w+\\s?)*``, ``(a*)*``): the text can be split among
the inner and outer loops in exponentially many ways. A body with a character it must
match besides its loops (``(\\.\\d+)*``, a version number's) is not that shape and passes.
A loop of bounded but varying length counts (``(a{1,5})+``), and so does an alternation
with such a branch (``(a+|b)+``). This is a heuristic for the shape, not a proof of
safety: alternations whose branches overlap otherwise (``(a|ab)+``) are not caught.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ["nested_repetition"]

# The parser behind re.compile (re._parser since Python 3.11, which the package requires;
# the type stubs do not describe it).
_sre: Any = importlib.import_module("re._constants")
_sre_parse: Any = importlib.import_module("re._parser")

_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT}
#: Items that match no character: they neither anchor a loop's body nor make it ambiguous.
_ZERO_WIDTH = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT}
#: Items that match one character each.
_ONE_CHAR = {_sre.LITERAL, _sre.NOT_LITERAL, _sre.IN, _sre.ANY, _sre.CATEGORY}


def nested_repetition(pattern: str) -> str | None:
    """The part of ``pattern`` that nests unbounded repetitions so (``(a+)+``), or None
    when there is none (or the pattern does not compile: ``re.compile`` says why)."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    return _find(list(parsed), pattern)


def _find(items: list[tuple[Any, Any]], pattern: str) -> str | None:
    for op, av in items:
        for body in _bodies(op, av):
            found = _find(body, pattern)
            if found is not None:
                return found
        if op in _REPEATS and av[1] == _sre.MAXREPEAT and _loops_only(list(av[2])):
            return _shown(av[2], pattern)
    return None


def _bodies(op: Any, av: Any) -> list[list[tuple[Any, Any]]]:
    """The sub-patterns of one parsed item."""
    if op in _REPEATS or op == getattr(_sre, "POSSESSIVE_REPEAT", None):
        return [list(av[2])]
    if op == _sre.SUBPATTERN:
        return [list(av[-1])]
    if op == _sre.BRANCH:
        return [list(branch) for branch in av[1]]
    if op in (_sre.ASSERT, _sre.ASSERT_NOT):
        return [list(av[1])]
    if op == getattr(_sre, "ATOMIC_GROUP", None):
        return [list(av)]
    if op == _sre.GROUPREF_EXISTS:
        return [list(b) for b in av[1:] if b is not None]
    return []


def _loops_only(body: list[tuple[Any, Any]]) -> bool:
    """Whether ``body`` holds an unbounded repetition and, besides zero-width items and
    optional ones, nothing it must match: each pass of a loop around it can take any
    share of the text."""
    unbounded = False
    for op, av in body:
        if op in _ZERO_WIDTH:
            continue
        if op == _sre.SUBPATTERN:
            inner = list(av[-1])
            if _loops_only(inner):
                unbounded = True
                continue
            if _optional(inner):
                continue
            return False
        if op in _REPEATS:
            # A loop of many lengths (a+, or a{1,5}: a pass takes 1 to 5 of a run) lets each
            # outer pass take any share of a run; a fixed count (a{2}) does not.
            if av[1] > max(av[0], 1) and _matches_something(list(av[2])):
                unbounded = True
                continue
            if av[0] == 0:
                continue  # optional: x? or x{0,3}
            return False
        if op == _sre.BRANCH:
            # (a+|b)+: a pass through the a+ branch takes any share of a run of a.
            branches = [list(branch) for branch in av[1]]
            if any(_loops_only(branch) for branch in branches):
                unbounded = True
                continue
            if any(_optional(branch) for branch in branches):
                continue  # (b|): optional
            return False
        if op in _ONE_CHAR:
            return False
        return False  # a back reference, an atomic group: not this shape
    return unbounded


def _optional(body: list[tuple[Any, Any]]) -> bool:
    return all(op in _ZERO_WIDTH or (op in _REPEATS and av[0] == 0) for op, av in body)


def _matches_something(body: list[tuple[Any, Any]]) -> bool:
    return any(op not in _ZERO_WIDTH for op, _ in body)


def _shown(sub: Any, pattern: str) -> str:
    """The pattern as written: the whole of it when it is short, else its start."""
    del sub
    return pattern if len(pattern) <= 60 else pattern[:57] + "..."
