"""Suggesting the name someone meant ("did you mean 'ticket'?"), for names a person or a
client gave. Kept apart from ``spec.diagnostics`` (which needs pydantic): a run of a compiled
program checks its inputs' names without importing the spec side."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def close_matches(
    name: str, candidates: Iterable[str], *, n: int = 1, cutoff: float = 0.6
) -> list[str]:
    """``difflib.get_close_matches``, without comparing a name too long to match any.

    difflib's ratio is 2 * matches / both lengths, so a name more than (2 - cutoff) / cutoff
    times the longest candidate's length (7/3 at 0.6) is near none; difflib would still
    index every character of it (a client's 27 MB name held serve's event loop 3 s)."""
    names = list(candidates)
    longest = max(map(len, names), default=0)
    if len(name) * cutoff > longest * (2 - cutoff) * (1 + 1e-9):  # (a float's rounding)
        return []
    return difflib.get_close_matches(name, names, n=n, cutoff=cutoff)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for a close match, else ``""``."""
    close = close_matches(name, candidates)
    return f"; did you mean '{close[0]}'?" if close else ""
