"""Regular expressions of a repository that would take exponential time on hostile text.

Python's ``re`` backtracks and has no time limit: ``(a+)+$`` searched in forty ``a``
and a ``!`` (a model's output, a served input) runs for minutes, holding the process. Two
shapes are refused; both let a loop match one text in exponentially many ways:

- nested loops: an unbounded repetition whose body is made of unbounded repetitions and
  optional items only (``(a+)+``, ``(\\w+\\s?)*``, ``(a*)*``): the text can be split among
  the inner and outer loops in exponentially many ways. A body with a character it must
  match besides its loops (``(\\.\\d+)*``, a version number's) is not that shape and
  passes. A loop of bounded but varying length counts (``(a{1,5})+``), and so does an
  alternation with such a branch (``(a+|b)+``).
- overlapping alternatives: an unbounded repetition of an alternation two of whose
  branches can match the same text, each pass then choosing between them (``(a|a)*``,
  ``(a|aa)+``, ``(\\r\\n|\\r|\\n)*``, ``(.|\\s)*``, ``(a|a?)+``). Two branches
  are told apart by the first characters they can match and, while those are single
  characters, the ones after (with what follows the alternation in the loop, and the
  next pass): ``(foo|bar)*``, ``(Mon|Mar|May)+``, ``(.|\\n)*`` and a JSON string's
  ``(\\\\["\\\\/bfnrt]|\\\\u[0-9a-f]{4}|[^"\\\\])*`` pass.

The analysis reads the pattern as ``re`` parses it, after the parser's own rewriting:
``(\\w|\\d)+`` is one character class (``[\\w\\d]+``) and ``(a|ab)+`` is
``(a(?:|b))+``, whose passes cannot match one text two ways; both run in linear time
and pass. This is a heuristic for the shapes, not a proof of safety.
"""

from __future__ import annotations

import importlib
import re
from bisect import bisect_left as _bisect_left
from bisect import bisect_right as _bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_STEPS",
    "NESTED_LOOPS",
    "OVERLAPPING_ALTERNATIVES",
    "TOO_LARGE",
    "Backtracking",
    "exponential_backtracking",
]

# The parser behind re.compile (re._parser since Python 3.11, which the package requires;
# the type stubs do not describe it).
_sre: Any = importlib.import_module("re._constants")
_sre_parse: Any = importlib.import_module("re._parser")

_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT}
#: Items that match no character: they neither anchor a loop's body nor make it ambiguous.
_ZERO_WIDTH = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT}
#: Items that match one character each.
_ONE_CHAR = {_sre.LITERAL, _sre.NOT_LITERAL, _sre.IN, _sre.ANY, _sre.CATEGORY}

Item = tuple[Any, Any]


@dataclass(frozen=True, slots=True)
class Backtracking:
    """Why a pattern can take exponential time: ``shape`` follows the pattern in a message
    ("'(a+)+$' nests unbounded repetitions …"), ``fix`` says how to write it instead."""

    shape: str
    fix: str


TOO_LARGE = Backtracking(
    "is too large for the check for exponential backtracking to read",
    "split it into smaller patterns, or write its alternatives as fewer classes",
)
#: The most comparisons (of two branches, of a branch with a group, of a character with a
#: class) one pattern's check makes: about a second here. A pattern that needs more is
#: refused as too large to tell, never passed: the check must not be the hang it prevents.
MAX_STEPS = 1_000_000


class _TooLarge(Exception):
    """The check of one pattern ran past ``MAX_STEPS``."""


NESTED_LOOPS = Backtracking(
    "nests unbounded repetitions (as (a+)+ does)", "write it without the nesting (a+ for (a+)+)"
)
OVERLAPPING_ALTERNATIVES = Backtracking(
    "repeats alternatives that can match the same text (as (a|aa)+ does)",
    "make the alternatives match different text (a+ for (a|aa)+, \\r?\\n for (\\r\\n|\\n)*)",
)


def exponential_backtracking(pattern: str) -> Backtracking | None:
    """Which shape of ``pattern`` can take exponential time, or None when none does (or
    the pattern does not compile: ``re.compile`` says why)."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None
    try:
        # A flag set for a group only ((?i:...)) is taken to hold for the whole pattern:
        # that can only add overlaps.
        flags = parsed.state.flags | _group_flags(list(parsed))
        chars = _Chars(
            _named_chars(list(parsed)),
            ignore_case=bool(flags & re.IGNORECASE),
            dotall=bool(flags & re.DOTALL),
        )
        return _find(list(parsed), chars)
    except _TooLarge:
        return TOO_LARGE
    except RecursionError:  # nested past what the parser itself allows: re.compile says so
        return None


def _named_chars(items: list[Item]) -> set[str]:
    """Every character ``items`` name (literals, ends of ranges), however written (``a``,
    ``\\x61``, ``\\N{...}``): two classes that share a character share one of these,
    or one of the sample's."""
    named: set[str] = set()
    for op, av in items:
        if op in (_sre.LITERAL, _sre.NOT_LITERAL):
            named.add(chr(av))
        elif op == _sre.IN:
            for kind, value in av:
                if kind == _sre.LITERAL:
                    named.add(chr(value))
                elif kind == _sre.RANGE:
                    named |= {chr(value[0]), chr(value[1])}
        for body in _bodies(op, av):
            named |= _named_chars(body)
    return named


def _group_flags(items: list[Item]) -> int:
    """The flags any group of ``items`` sets for itself (``(?i:...)``)."""
    flags = 0
    for op, av in items:
        if op == _sre.SUBPATTERN:
            flags |= av[1]
        for body in _bodies(op, av):
            flags |= _group_flags(body)
    return flags


def _find(items: list[Item], chars: _Chars) -> Backtracking | None:
    for op, av in items:
        for body in _bodies(op, av):
            found = _find(body, chars)
            if found is not None:
                return found
        if op in _REPEATS and av[1] == _sre.MAXREPEAT:
            body = list(av[2])
            if _loops_only(body):
                return NESTED_LOOPS
            if _overlapping_alternatives(body, chars):
                return OVERLAPPING_ALTERNATIVES
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


# --- overlapping alternatives ----------------------------------------------------------------


def _overlapping_alternatives(body: list[Item], chars: _Chars) -> bool:
    """Whether an alternation of the loop body ``body`` has two branches that can match the
    same text, as far as the characters they start with tell: each branch goes on with
    what follows the alternation in the body, then with the next pass."""
    flat = _flattened(body)
    for index, (op, av) in enumerate(flat):
        if op != _sre.BRANCH:
            continue
        after = flat[index + 1 :]
        then = after + flat  # a branch that matched something: the loop may go on
        # A pass that matched nothing ends the loop (re's rule): an empty branch goes on
        # to the next pass only when the pass took a character before the alternation.
        took_one = not _first(flat[:index], chars)[1]
        follow = _first(then if took_one else after, chars)[0]
        ways: list[_Way] = []
        for branch in av[1]:
            items = _flattened(list(branch))
            first, empty = _first(items, chars)
            ways.append(_Way(items + then, first | follow if empty else first))
        if _two_alike(ways, 0, chars):
            return True
    return False


@dataclass(frozen=True, slots=True)
class _Way:
    """One branch of an alternation, gone on with what follows it (``items``), and the
    characters it can start with (``first``)."""

    items: list[Item]
    first: int


#: Up to this many branches are compared two by two; more are sorted by character first.
_PAIRWISE = 8


def _two_alike(ways: list[_Way], at: int, chars: _Chars) -> bool:
    """Whether two of ``ways`` can start the same way (``_same_start``) from position
    ``at``, where they are known to be alike before it. Many branches (a word list) are
    grouped by the character they hold at ``at`` instead of compared two by two: 3,000
    words took 8 s so, a tenth of a second grouped."""
    if len(ways) <= _PAIRWISE:
        return any(_pair_alike(one, other, at, chars) for one, other in _pairs(ways))
    single = [w for w in ways if at < len(w.items) and w.items[at][0] in _ONE_CHAR]
    others = [w for w in ways if not (at < len(w.items) and w.items[at][0] in _ONE_CHAR)]
    # Those not at a single character here (ended, or at a loop) are compared with all.
    if any(_pair_alike(one, other, at, chars) for one, other in _pairs(others)):
        return True
    if any(_pair_alike(one, other, at, chars) for one in others for other in single):
        return True
    groups: list[tuple[int, list[_Way]]] = []
    for way in single:
        chars.spend(len(groups) + 1)
        bits = chars.of(way.items[at])
        # Join every group this way's character may share (a group holds the ways whose
        # characters here may be the same).
        joined = [g for g in groups if g[0] & bits]
        groups = [g for g in groups if not g[0] & bits]
        for group_bits, _ in joined:
            bits |= group_bits
        groups.append((bits, [m for _, members in joined for m in members] + [way]))
    return any(_two_alike(members, at + 1, chars) for _, members in groups)


def _pairs(ways: list[_Way]) -> Iterator[tuple[_Way, _Way]]:
    for index, one in enumerate(ways):
        for other in ways[index + 1 :]:
            yield one, other


def _pair_alike(one: _Way, other: _Way, at: int, chars: _Chars) -> bool:
    chars.spend(1)
    return bool(one.first & other.first) and _same_start(one.items[at:], other.items[at:], chars)


#: How many optional characters ``_same_start`` reads both ways, in all, before it stops.
_OPTIONAL_READINGS = 32


def _same_start(one: list[Item], other: list[Item], chars: _Chars) -> bool:
    """Whether ``one`` and ``other`` can start a match with the same characters: they are
    read side by side while both are single characters (an optional one, ``x?``, both
    with and without it), and at the first item that is not, by the characters each can
    start with from there."""
    return _start_alike(one, other, chars, [_OPTIONAL_READINGS])


def _start_alike(one: list[Item], other: list[Item], chars: _Chars, left: list[int]) -> bool:
    """``_same_start``; ``left`` counts the optional characters still to read both ways
    (shared by every reading; past it, the answer is yes, as a heuristic's must be)."""
    for index, (mine, theirs) in enumerate(zip(one, other, strict=False)):
        for mine_optional in (True, False):
            char = _optional_char(mine if mine_optional else theirs)
            if char is None:
                continue
            if left[0] <= 0:
                return True
            left[0] -= 1
            # ``,?`` of ``, ?|,? and`` may be there or not: each way is read on its own.
            optional, fixed = (one, other) if mine_optional else (other, one)
            rest = optional[index + 1 :]
            return _start_alike(rest, fixed[index:], chars, left) or _start_alike(
                [char, *rest], fixed[index:], chars, left
            )
        if mine[0] in _ONE_CHAR and theirs[0] in _ONE_CHAR:
            if not chars.of(mine) & chars.of(theirs):
                return False  # they part here
            continue
        if one[index:] == other[index:]:
            return True  # the same items from here on: the same text, two ways
        mine_first = _first(one[index:], chars)[0]
        theirs_first = _first(other[index:], chars)[0]
        return bool(mine_first & theirs_first)
    return True  # one is a start of the other


def _optional_char(item: Item) -> Item | None:
    """The character item ``x`` of an optional one, ``x?``; None for any other item."""
    op, av = item
    if op not in _REPEATS or (av[0], av[1]) != (0, 1):
        return None
    body = _flattened(list(av[2]))
    if len(body) != 1 or body[0][0] not in _ONE_CHAR:
        return None
    return body[0]


def _flattened(items: list[Item]) -> list[Item]:
    """``items`` with groups opened (a group matches what its content does) and zero-width
    items left out."""
    flat: list[Item] = []
    for op, av in items:
        if op == _sre.SUBPATTERN:
            flat += _flattened(list(av[-1]))
        elif op not in _ZERO_WIDTH:
            flat.append((op, av))
    return flat


def _first(items: list[Item], chars: _Chars) -> tuple[int, bool]:
    """The characters a match of ``items`` can start with (``_Chars`` bits), and whether
    it can be empty. An item this does not read (a back reference) can start with any."""
    found = 0
    for op, av in items:
        if op in _ZERO_WIDTH:
            continue
        if op in _ONE_CHAR:
            return found | chars.of((op, av)), False
        first, empty = _item_first(op, av, chars)
        found |= first
        if not empty:
            return found, False
    return found, True


def _item_first(op: Any, av: Any, chars: _Chars) -> tuple[int, bool]:
    """``_first`` of one item that is not a single character; kept per item, as the
    comparisons of many branches ask it of the same alternation again and again."""
    known = chars.firsts.get(id(av))
    if known is not None:
        return known
    if op == _sre.SUBPATTERN:
        first, empty = _first(list(av[-1]), chars)
    elif op in _REPEATS or op == getattr(_sre, "POSSESSIVE_REPEAT", None):
        first, empty = _first(list(av[2]), chars)
        empty = empty or av[0] == 0
    elif op == _sre.BRANCH:
        first, empty = 0, False
        for branch in av[1]:
            part, part_empty = _first(list(branch), chars)
            first |= part
            empty = empty or part_empty
    elif op == getattr(_sre, "ATOMIC_GROUP", None):
        first, empty = _first(list(av), chars)
    else:
        first, empty = chars.every, False
    # Keyed by the parsed item's identity: the parse outlives the analysis.
    chars.firsts[id(av)] = (first, empty)
    return first, empty


class _Chars:
    """Sets of characters as bits over a sample of them: every character below U+0300,
    a few beyond (digits, letters, spaces of other scripts) and every one the pattern
    names. Two items that share no sample character are taken to share none.

    An item's bits cost about its own size (a class's literals are looked up, its ranges
    found by bisection), plus one pass over the sample per category (``\\w``…), kept: a
    pattern's classes may name thousands of characters, and each tested against the whole
    sample made the check quadratic in the pattern's length (a 24 KB pattern took 21 s)."""

    _BEYOND = "\u0660\u0966\u00e9\u0416\u03a9\u4e2d\u2003\u3000\u00a0\u2028\U0001f600"

    def __init__(self, named: set[str], *, ignore_case: bool, dotall: bool) -> None:
        sample = {chr(code) for code in range(0x300)} | set(self._BEYOND) | named
        self.sample = sorted(sample)
        self._codes = [ord(char) for char in self.sample]
        self._index = {char: index for index, char in enumerate(self.sample)}
        self.ignore_case = ignore_case
        self.dotall = dotall
        self.every = (1 << len(self.sample)) - 1
        self._known: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._in_categories: dict[str, list[str]] = {}
        #: Under IGNORECASE: each character, the sample characters it is one case of
        #: (itself included; "ß".upper() is "SS", so only one-character cases count).
        self._cases: dict[str, int] = {}
        if ignore_case:
            for index, char in enumerate(self.sample):
                for variant in {char, char.lower(), char.upper()}:
                    if len(variant) == 1:
                        self._cases[variant] = self._cases.get(variant, 0) | 1 << index
        self._case_keys = sorted(self._cases)
        #: ``_item_first`` of the items already read, by the identity of their arguments.
        self.firsts: dict[int, tuple[int, bool]] = {}
        self._steps = MAX_STEPS

    def spend(self, steps: int) -> None:
        """Count ``steps`` of the check against ``MAX_STEPS``; ``_TooLarge`` past it."""
        self._steps -= steps
        if self._steps < 0:
            raise _TooLarge

    def of(self, item: Item) -> int:
        """The sample characters one single-character item matches (under IGNORECASE, those
        one of whose cases it matches)."""
        op, av = item
        if op == _sre.LITERAL and not self.ignore_case:  # most items of a word list
            return 1 << self._index[chr(av)]
        key = repr(item)
        bits = self._known.get(key)
        if bits is None:
            bits = self._known[key] = self._bits(op, av)
        return bits

    def _bits(self, op: Any, av: Any) -> int:
        if op == _sre.LITERAL:
            return self._literal(chr(av))
        if op == _sre.NOT_LITERAL:
            # Under IGNORECASE a character whose other case is another character always has
            # a case that is not ``av``.
            char = chr(av)
            cases = (char.lower(), char.upper()) if self.ignore_case else ()
            alone = all(case == char for case in cases if len(case) == 1)
            return self.every & ~(1 << self._index[char]) if alone else self.every
        if op == _sre.ANY:
            return self.every if self.dotall else self.every & ~self._literal("\n")
        if op == _sre.CATEGORY:
            return self._category(av)
        negated = any(kind == _sre.NEGATE for kind, _ in av)
        if any(kind not in _SET_KINDS for kind, _ in av):
            return 0 if negated else self.every  # a kind this does not read: taken to match
        if not negated:
            bits = 0
            for kind, value in av:
                if kind == _sre.LITERAL:
                    bits |= self._literal(chr(value))
                elif kind == _sre.RANGE:
                    bits |= self._range(value[0], value[1])
                elif kind == _sre.CATEGORY:
                    bits |= self._category(value)
            return bits
        # A negated class matches a character one of whose cases is outside it: every
        # character but those whose cases are all inside (its members' cases, checked).
        inside = [(kind, value) for kind, value in av if kind != _sre.NEGATE]
        members = self._bits(_sre.IN, inside) if not self.ignore_case else 0
        if self.ignore_case:
            for kind, value in inside:
                if kind == _sre.LITERAL:
                    candidates = [chr(value)] if chr(value) in self._index else []
                elif kind == _sre.RANGE:
                    low, high = (
                        _bisect_left(self._codes, value[0]),
                        _bisect_right(self._codes, value[1]),
                    )
                    candidates = self.sample[low:high]
                else:
                    candidates = self._members(value)
                self.spend(4 * len(candidates))  # each a few checks of the class
                for char in candidates:
                    variants = {v for v in (char, char.lower(), char.upper()) if len(v) == 1}
                    if all(_in_set(inside, ord(v), v) for v in variants):
                        members |= 1 << self._index[char]
        return self.every & ~members

    def _literal(self, char: str) -> int:
        if self.ignore_case:
            return self._cases.get(char, 0)
        index = self._index.get(char)
        return 0 if index is None else 1 << index

    def _range(self, low: int, high: int) -> int:
        if not self.ignore_case:
            first, last = _bisect_left(self._codes, low), _bisect_right(self._codes, high)
            return ((1 << last) - 1) & ~((1 << first) - 1)
        keys = self._case_keys
        bits = 0
        for char in keys[_bisect_left(keys, chr(low)) : _bisect_right(keys, chr(high))]:
            bits |= self._cases[char]
        return bits

    def _members(self, category: Any) -> list[str]:
        """The sample characters in ``category`` themselves (no other case), kept."""
        key = str(category)
        found = self._in_categories.get(key)
        if found is None:
            found = self._in_categories[key] = [
                char for char in self.sample if _in_category(category, char)
            ]
        return found

    def _category(self, category: Any) -> int:
        key = str(category)
        bits = self._categories.get(key)
        if bits is None:
            self.spend(len(self.sample))
            bits = 0
            for index, char in enumerate(self.sample):
                cases = {char}
                if self.ignore_case:
                    cases |= {v for v in (char.lower(), char.upper()) if len(v) == 1}
                if any(_in_category(category, variant) for variant in cases):
                    bits |= 1 << index
            self._categories[key] = bits
        return bits


#: What a character class (``IN``) holds that ``_Chars`` reads.
_SET_KINDS = {_sre.NEGATE, _sre.LITERAL, _sre.RANGE, _sre.CATEGORY}


def _in_set(inside: list[Item], code: int, char: str) -> bool:
    """Whether ``char`` is one of a class's members (``inside``: the class, unnegated)."""
    for kind, value in inside:
        if kind == _sre.LITERAL and code == value:
            return True
        if kind == _sre.RANGE and value[0] <= code <= value[1]:
            return True
        if kind == _sre.CATEGORY and _in_category(value, char):
            return True
    return False


def _in_category(category: Any, char: str) -> bool:
    """Whether ``char`` is in ``\\d``, ``\\s``, ``\\w`` or their complements (their Unicode
    meaning; ``re.ASCII`` makes them smaller, which only adds overlaps here)."""
    name = str(category).upper()
    if "DIGIT" in name:
        inside = char.isdecimal()
    elif "SPACE" in name:
        inside = char.isspace()
    elif "WORD" in name:
        inside = char.isalnum() or char == "_"
    elif "LINEBREAK" in name:
        inside = char == "\n"
    else:
        return True
    return inside != ("NOT" in name)
