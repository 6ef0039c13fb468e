"""Regular expressions that backtrack exponentially (nested unbounded repetitions, repeated
alternatives that can match the same text) are told from the ones that only look alike."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from openprogram_yaml.regex_safety import (
    NESTED_LOOPS,
    OVERLAPPING_ALTERNATIVES,
    TOO_LARGE,
    exponential_backtracking,
)


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
    assert exponential_backtracking(pattern) is NESTED_LOOPS


@pytest.mark.parametrize(
    "pattern",
    [
        # Timed on this machine, each on a few dozen characters and a '!': seconds, and
        # twice as long for each character more. All passed before.
        "(a|a)*$",  # 25 characters: 4.2 s
        "(a|aa)+$",
        r"(\r\n|\n|\r)*$",  # 24 line ends: 12.7 s
        "(a|ab|b)+$",  # 'ab' 24 times: 12.4 s
        "(a|a?)+$",  # 25 characters: 19.4 s
        r"(.|\s)*y",  # 24 spaces: 4.4 s
        "(?:ab|a|b)*c",  # 'ab' 24 times: 8.8 s
        "(?i)(?:a|Aa)+$",  # (a|aa)+ when case is ignored
        "(?:(?:a)|(a))*$",  # groups are matched through: 25 characters, 5.3 s
        "(?:a?b|b)+$",  # 'b' either way
        # A lexer's token pattern, found in an installed library: ':a' is one token or two
        # (':' then 'a'); 22 times and a '!': 3.8 s.
        r"(:?\w|:|\+|-|\.|\[|\]|\\|/)+$",
    ],
)
def test_repeated_alternatives_that_can_match_the_same_text_are_found(pattern: str) -> None:
    assert exponential_backtracking(pattern) is OVERLAPPING_ALTERNATIVES


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
        "(a|b?)+",  # a pass that matches nothing ends the loop
        r"^(\d{1,3}\.){3}\d{1,3}$",  # an IPv4 address
        r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",  # base64
        r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$",  # an email address
        r"^(https?://)?([\w-]+\.)+[\w-]+(/[\w\- ./?%&=]*)?$",  # a URL
        r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$",  # ISO 8601
        "(foo|bar)+",
        "(foo|bar)*",
        "(a|b)+",
        "[ab]+",
        "(?=a+)+",
        "(",  # does not compile: re.compile says so, not this
        # Alternatives that start alike but part before either ends.
        "(?:Mon|Mar|May)+",
        r'^"(?:\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}|[^"\\])*"$',  # a JSON string
        r"(.|\n)*",  # '.' is every character but a line break
        r'^(?:[^",]|"")*$',
        r"(?:\r\n|\n)+",
        "(?:ab|ac)+$",
        r"(?:[0-9]+)(?:(?:, ?|,? and )(?:[0-9]+))*$",  # ', ' or ', and ': both start ','
        "(?:xa?|xb)+$",
        "(?:cat|dog|ca)+$",  # 'ca' is where 'cat' starts, but no pass starts with 't'
        r"^(?:\s|\t)*x",  # re's parser makes these one class each
        "(?i)(?:a|A|b)+$",
        # re's parser makes these one class ([\w\d]) or (a(?:|b)): one way to match a text.
        r"(\w|\d)+$",
        "(a|ab)+$",
        # Atomic and possessive: re never backtracks into a pass.
        "(?>a|aa)+$",
        "(?:a|aa)++$",
    ],
)
def test_patterns_of_another_shape_pass(pattern: str) -> None:
    assert exponential_backtracking(pattern) is None


def _search_time(pattern: str, text: str) -> str:
    """How a search of ``text`` for ``pattern`` ends in a child process given 3 s: the
    child is killed past it (a backtracking search holds the interpreter's lock)."""
    code = f"import re; re.search({pattern!r}, {text!r})"
    try:
        subprocess.run([sys.executable, "-c", code], timeout=3.0, check=True)
    except subprocess.TimeoutExpired:
        return "killed"
    return "done"


def test_the_shapes_refused_are_the_ones_that_take_exponential_time() -> None:
    # What the heuristic refuses runs past any limit on 40 characters; what it lets
    # through runs at once on as many.
    assert _search_time("(a|aa)+$", "a" * 40 + "!") == "killed"
    assert _search_time("(a|ab)+$", "a" * 40 + "!") == "done"
    assert _search_time(r"(\w|\d)+$", "1" * 40 + "!") == "done"


def test_a_pattern_of_large_classes_is_checked_in_time_linear_in_its_length() -> None:
    # Two classes of 12,000 characters each (24 KB): each class was tested against every
    # character of the sample, which holds every character the pattern names: 21 s before.
    rng = random.Random(1)
    chars = [chr(0x4E00 + 2 * i) for i in range(12_000)]
    rng.shuffle(chars)
    cls = "".join(chars)
    for flags in ("", "(?i)"):
        started = time.process_time()
        assert exponential_backtracking(f"{flags}^(?:[{cls}a]x|[{cls}b]y)*$") is None
        assert time.process_time() - started < 2.0


def test_a_pattern_too_large_to_check_is_refused_not_passed() -> None:
    # 3,000 alternatives, each a class of its own: telling them apart costs more than
    # MAX_STEPS comparisons, so the answer is "too large to tell", never "safe".
    branches = "|".join(f"[{chr(0x4E00 + i)}{chr(0x5E00 + i)}]q" for i in range(3000))
    assert exponential_backtracking(f"^(?:{branches})*$") is TOO_LARGE
    # A word list as long is read whole.
    words = "|".join(f"w{i}x{i * 7}" for i in range(3000))
    assert exponential_backtracking(f"^(?:{words})+$") is None
