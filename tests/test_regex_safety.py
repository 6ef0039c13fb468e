"""Regular expressions nesting unbounded repetitions (exponential backtracking) are told
from the ones that only look alike."""

from __future__ import annotations

import pytest

from openprogram_yaml.regex_safety import nested_repetition


@pytest.mark.parametrize(
    "pattern",
    ["(a+)+$", "^(a+)+$", r"(\w+\s?)+$", "(a*)*", "((ab)*)+", "(?:x+)+y", r"^(\d+)*$"],
)
def test_nested_unbounded_repetitions_are_found(pattern: str) -> None:
    assert nested_repetition(pattern) is not None


@pytest.mark.parametrize(
    "pattern",
    [
        r"^\d+(\.\d+)*$",  # a version number: each pass must match a '.'
        "(ab)+",
        "a+b+",
        "[a-z]+",
        r"(\w+\s)+$",
        r"^(\w+)$",
        "x{1,5}",
        "(?:a|b)+",
        "(a+)?",
        "(a+){2}",
        "(?=a+)+",
        "(",  # does not compile: re.compile says so, not this
    ],
)
def test_patterns_of_another_shape_pass(pattern: str) -> None:
    assert nested_repetition(pattern) is None
