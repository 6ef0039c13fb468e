"""Regular expressions nesting unbounded repetitions (exponential backtracking) are told
from the ones that only look alike."""

from __future__ import annotations

import pytest

from openprogram_yaml.regex_safety import nested_repetition


@pytest.mark.parametrize(
    "pattern",
    [
        "(a+)+$",
        "^(a+)+$",
        r"(\w+\s?)+$",
        "(a*)*",
        "((ab)*)+",
        "(?:x+)+y",
        r"^(\d+)*$",
        # A branch that is only a loop: forty 'a' and a '!' take seconds, as (a+)+ does.
        "(?:a+|b)+$",
        r"^([a-zA-Z0-9]+|[-_.])+$",
        # A loop of bounded but varying length: (a{1,5})+ splits a run as many ways.
        "(a{1,5})+$",
        r"(\d{1,3})+$",
    ],
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
        "(a{2})+",  # a fixed count: one way to split
        "(x?y?)+",
        "(a|b?)+",
        r"^(\d{1,3}\.){3}\d{1,3}$",  # an IPv4 address
        r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",  # base64
        r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$",  # an email address
        r"^(https?://)?([\w-]+\.)+[\w-]+(/[\w\- ./?%&=]*)?$",  # a URL
        r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$",  # ISO 8601
        "(foo|bar)+",
        "(?=a+)+",
        "(",  # does not compile: re.compile says so, not this
    ],
)
def test_patterns_of_another_shape_pass(pattern: str) -> None:
    assert nested_repetition(pattern) is None
