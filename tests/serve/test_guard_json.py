"""``guard.read_json``: what a client's JSON may cost, and that its checks (which read the
text, not every parsed value) refuse exactly what a walk over every value refuses."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from openprogram_yaml.serve.guard import MAX_JSON_DEPTH, MAX_JSON_ITEMS, read_json

DEEPER = f"it nests arrays and objects deeper than {MAX_JSON_DEPTH}"
HALF_PAIR = "a string in it holds half of a UTF-16 surrogate pair (such as \\ud800), not text"


def walked_problems(value: object) -> set[str]:
    """The reference: every parsed value walked, as read_json did before (12 s of CPU for a
    body at serve's cap made of ``{}``); each problem found, not only the first."""
    problems: set[str] = set()
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                problems.add(HALF_PAIR)
            continue
        children: list[object]
        if isinstance(item, dict):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            problems.add(DEEPER)
        stack.extend((c, depth + 1) for c in children)
    return problems


def has_duplicate_keys(text: str) -> bool:
    """Whether an object of JSON ``text`` repeats a key (two spellings of one, such as an
    emoji and its escaped pair): the value kept hides the other, which the walk never sees."""
    repeated = False

    def pairs_hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal repeated
        repeated |= len({key for key, _ in pairs}) < len(pairs)
        return dict(pairs)

    json.loads(text, object_pairs_hook=pairs_hook)
    return repeated


#: Pieces of strings: escaped backslashes before and between surrogate escapes, pairs in
#: either case, halves written as such, brackets and commas inside strings.
PIECES = (
    "a", "\\\\", "\\ud800", "\\uDBFF", "\\udc00", "\\uDFFF", "\\ud83d", "\\ude00", "\\n",
    '\\"', "\\u0041", "\\uD83D\\uDE00", "\\\\u", "u", "d800", "\ud800", "\udc00", "é",
    "\U0001f600", "\\\\\\ud800", "\\/", "\\ubeef", "\\ue000", "{", "[", ",", "\\\\ud800",
)  # fmt: skip


def json_string(rng: random.Random) -> str:
    return '"' + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6))) + '"'


def json_text(rng: random.Random, depth: int) -> str:
    kind = rng.random()
    if depth > 0 and kind < 0.3:
        return "[" + ",".join(json_text(rng, depth - 1) for _ in range(rng.randint(0, 3))) + "]"
    if depth > 0 and kind < 0.55:
        keys = {json_string(rng) for _ in range(rng.randint(0, 3))}
        return "{" + ",".join(f"{k}: {json_text(rng, depth - 1)}" for k in keys) + "}"
    if kind < 0.85:
        return json_string(rng)
    return rng.choice(["1", "null", "true", "-2.5e3"])


def outcome(data: bytes | str) -> tuple[str, object]:
    try:
        return "value", read_json(data)
    except ValueError as exc:
        return "refused", str(exc)


def test_read_json_refuses_what_a_walk_over_every_value_refuses() -> None:
    """Differential: over generated JSON (as text, UTF-8 and UTF-16 with its BOM), nested
    around the depth bound, read_json's text checks against the reference walk."""
    rng = random.Random(20261201)
    checked = refused = 0
    for i in range(3000):
        text = json_text(rng, 4)
        if i % 10 == 0:
            levels = rng.choice([MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
            text = "[" * levels + text + "]" * levels
        if has_duplicate_keys(text):
            continue
        forms: list[str | bytes] = [text]
        forms += (text.encode(codec, "surrogatepass") for codec in ("utf-8", "utf-16"))
        for data in forms:
            problems = walked_problems(json.loads(data))
            got = outcome(data)
            if problems:
                assert got[0] == "refused" and got[1] in problems, (data, got)
                refused += 1
            else:
                assert got == ("value", json.loads(data)), data
            checked += 1
    assert checked > 8000 and 1000 < refused < checked - 1000  # both sides well covered


def test_a_body_of_more_items_than_the_bound_is_refused_before_it_is_parsed() -> None:
    """A body at serve's cap made of ``{}`` was 9 million dicts: 830 MB, then a walk of 12 s
    of CPU on the event loop. Now the text's commas and brackets count its items first."""
    over = b"[" + b",".join([b"{}"] * MAX_JSON_ITEMS) + b"]"
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"more than {MAX_JSON_ITEMS:,} items"):
            read_json(over)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(over)  # the text, and what is left outside its strings; no values


def test_items_are_counted_up_to_the_bound_and_not_inside_strings() -> None:
    at_bound = b"[" + b",".join([b"1"] * MAX_JSON_ITEMS) + b"]"  # commas and the bracket
    assert read_json(at_bound) == [1] * MAX_JSON_ITEMS
    with pytest.raises(ValueError, match="items"):
        read_json(at_bound[:-1] + b",1]")
    with pytest.raises(ValueError, match="items"):
        read_json(at_bound.replace(b"[1,", b"[[],", 1))  # an empty array is an item too
    # Commas and brackets in strings are text, not items (a CSV file, a program's source).
    text = {"x": ",[{" * MAX_JSON_ITEMS, "y": ['"],[{,'] * 3}
    assert read_json(json.dumps(text)) == text


def test_a_number_past_the_decoders_digits_is_refused_in_its_own_words() -> None:
    # It was Python's message, naming sys.set_int_max_str_digits() to the client.
    with pytest.raises(ValueError) as refused:
        read_json('{"q": ' + "7" * 5_000 + "}")
    assert str(refused.value) == "not JSON: a number has more digits than the JSON decoder reads"
