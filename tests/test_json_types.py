"""``parse_json``: every way JSON text from outside can fail is a ``json.JSONDecodeError``."""

from __future__ import annotations

import json

import pytest

from openprogram_yaml.json_types import parse_json


def test_it_reads_what_json_loads_reads() -> None:
    text = '{"a": [1, 2.5, "x", null, true], "b": {"c": -3}}'
    assert parse_json(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than the JSON decoder reads"),
        ("7" * 5_000, "a number has more digits than the JSON decoder reads"),
        ('{"a": 1,}', "Expecting property name enclosed in double quotes"),
        (b'"caf\xe9"', "not UTF-8, UTF-16 or UTF-32 text"),  # bytes: not 'more digits'
    ],
)
def test_what_it_cannot_read_is_a_decode_error(text: str | bytes, said: str) -> None:
    with pytest.raises(json.JSONDecodeError) as failed:
        parse_json(text)
    assert failed.value.msg == said
